//! A simulated device on the client link.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;
use tracing::debug;

use tether_contract::jsonrpc::{self, Frame};
use tether_contract::mcp::{meta, method, InitializeResult, ToolDeclaration};
use tether_contract::{CLIENT_PATH, CLIENT_SUBPROTOCOL};

use crate::faults::{Fault, FaultMix};

/// The realistic device of `proto-fixtures/declarations/fieldkit-device.json`.
const FIELDKIT: &str = include_str!("../../../proto-fixtures/declarations/fieldkit-device.json");

/// How the device answers one tool.
#[derive(Debug, Clone)]
pub enum Behavior {
    /// Answer with an echo of the call after `latency` (cut at the answer ceiling).
    Answer {
        /// Time to answer.
        latency: Duration,
    },
    /// Answer with an `isError` result.
    Fail {
        /// Device failure code.
        code: String,
        /// Whether a retry may work.
        retryable: bool,
    },
    /// Never answer (a fault: ignores the answer ceiling).
    Silent,
    /// Answer after `after` (a fault: ignores the answer ceiling).
    Late {
        /// Time to answer.
        after: Duration,
    },
    /// Drop the socket when called.
    Disconnect,
    /// Replace the catalog, bump the seq, then answer with the new seq.
    Navigate {
        /// The new catalog.
        tools: Vec<ToolDeclaration>,
    },
    /// Answer twice (the second must be dropped by the edge).
    Twice,
    /// Send a malformed frame, then answer.
    Malformed,
    /// Answer with a frame over the transport ceiling.
    Oversize,
    /// Send a burst of `list_changed`, then answer.
    Flood,
    /// Answer once the test adds a permit to the gate (a call held in flight on cue).
    Gated(Arc<Semaphore>),
    /// Report progress `steps` times (1/steps … steps/steps) when the call
    /// carries a progress token, then answer.
    Progress {
        /// How many progress notifications.
        steps: u32,
    },
    /// Answer with a JSON-RPC error object instead of a result.
    Reject {
        /// JSON-RPC `error.code`.
        code: i64,
        /// JSON-RPC `error.message`.
        message: String,
    },
    /// Answer with the request id spelled as a string (`"7"` for 7): a peer bug.
    StringId,
    /// Draw one of the above per call from a shared, seeded mix.
    Mixed(Arc<FaultMix>),
    /// A long-running tool (MCP tasks, 2025-11-25): called with `task`, it
    /// answers its task at once, says "started" right behind that and "halfway" half way through
    /// (`notifications/tasks/status`) and finishes `after` later (`tasks/result`); called without, it answers
    /// inline after `after`. Declare the tool with [`task_tool`].
    Task {
        /// Time the work takes.
        after: Duration,
    },
}

/// How long the simulated customer takes to sign: longer than a blocking
/// `/mcp` call waits for a task when its wait is configured short.
pub const SIGNING: Duration = Duration::from_millis(2500);

/// A task the simulated device runs; it outlives the socket (a resume).
#[derive(Debug, Clone)]
pub struct SimTask {
    done_at: tokio::time::Instant,
    result: Value,
    cancelled: watch::Sender<bool>,
}

/// What the device is: its identity, catalog and behaviours.
#[derive(Debug, Clone)]
pub struct DeviceSpec {
    /// Its `initialize` answer.
    pub initialize: InitializeResult,
    /// Its catalog.
    pub tools: Vec<ToolDeclaration>,
    /// Its catalog seq; None means it stamps no seq at all.
    pub seq: Option<u64>,
    /// Its `tether.dev/context`.
    pub context: Option<Value>,
    /// Stamp `tether.dev/digest` (a hash of the catalog and context) beside
    /// the seq, so the edge can skip re-reading a catalog that did not change.
    pub digest: bool,
    /// Tools per `tools/list` page; None serves one page.
    pub page_size: Option<usize>,
    /// Behaviour per device tool name.
    pub behaviors: HashMap<String, Behavior>,
    /// Behaviour of tools not in `behaviors`.
    pub default_behavior: Behavior,
    /// The client's own answer ceiling (2 s by default).
    pub answer_ceiling: Duration,
    /// Keep every received call in [`Observed`] (off for load, where it would grow without bound).
    pub record_calls: bool,
    /// Answers by idempotency key: a call delivered again (after a resume)
    /// gets the remembered answer instead of running twice. Clones of a spec
    /// share it, so a device resumed with a clone of its spec remembers.
    pub answered: Arc<Mutex<HashMap<String, Value>>>,
    /// How its user answers `tether.dev/approve`, by policy: None when the
    /// device does not ask its user (it declares no `tether.dev/approvals`).
    pub approves: Option<bool>,
    /// Its tasks by id; shared by clones, so a resumed device still runs them.
    pub tasks: Arc<Mutex<HashMap<String, SimTask>>>,
}

/// Why a device spec could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The fixture is not valid.
    #[error("device fixture: {0}")]
    Fixture(#[from] serde_json::Error),
}

impl DeviceSpec {
    /// A spec from a declaration fixture (`{initialize?, tools_list}`).
    pub fn from_fixture(fixture: &Value) -> Result<DeviceSpec, SpecError> {
        let mut spec = DeviceSpec::minimal(Vec::new());
        if let Some(v) = fixture.get("initialize") {
            spec.initialize = serde_json::from_value(v.clone())?;
        }
        let list = fixture.get("tools_list").cloned().unwrap_or_else(|| json!({"tools": []}));
        spec.tools = serde_json::from_value(list.get("tools").cloned().unwrap_or_else(|| json!([])))?;
        let meta = list.get("_meta");
        spec.seq = Some(meta.and_then(|m| m.get(meta::SEQ)).and_then(Value::as_u64).unwrap_or(1));
        spec.context = meta.and_then(|m| m.get(meta::CONTEXT)).cloned();
        Ok(spec)
    }

    /// The realistic 10-tool field-service device from `proto-fixtures/`.
    pub fn fieldkit() -> DeviceSpec {
        let fixture: Value = serde_json::from_str(FIELDKIT).unwrap_or_default();
        DeviceSpec::from_fixture(&fixture).unwrap_or_else(|_| DeviceSpec::minimal(Vec::new()))
    }

    /// The field-service device as `tether sim-device` runs it: opening a work
    /// order navigates the app to that order's screen, which adds
    /// `addWorkNote` (a manifest swap mid-turn, as a real app makes) and
    /// `collectSignature`, which waits for the customer and so runs as a task.
    pub fn fieldkit_app() -> DeviceSpec {
        let spec = DeviceSpec::fieldkit();
        let mut on_order = spec.tools.clone();
        on_order.push(ToolDeclaration {
            name: "addWorkNote".to_owned(),
            title: Some("Add a note to the open work order".to_owned()),
            description: Some(
                "Adds a note to the work order on screen; only there while a work order is open.".to_owned(),
            ),
            input_schema: json!({
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 2000}},
                "required": ["text"],
                "additionalProperties": false
            }),
            output_schema: None,
            annotations: None,
            execution: None,
        });
        let execution = tether_contract::tasks::ToolExecution {
            task_support: Some(tether_contract::tasks::TaskSupport::Required),
        };
        on_order.push(ToolDeclaration {
            name: "collectSignature".to_owned(),
            title: Some("Collect the customer's signature".to_owned()),
            description: Some(
                "Hands the device to the customer to sign off the open work order; waits until they have signed."
                    .to_owned(),
            ),
            input_schema: json!({"type": "object", "additionalProperties": false}),
            output_schema: None,
            annotations: None,
            execution: Some(execution),
        });
        spec.with("openWorkOrder", Behavior::Navigate { tools: on_order })
            .with("collectSignature", Behavior::Task { after: SIGNING })
    }

    /// A device with just these tools, seq 1, honest answers.
    pub fn minimal(tools: Vec<ToolDeclaration>) -> DeviceSpec {
        DeviceSpec {
            initialize: InitializeResult {
                protocol_version: tether_contract::MCP_PROTOCOL_VERSION.into(),
                server_info: json!({"name": "sim-device", "version": env!("CARGO_PKG_VERSION")}),
                capabilities: json!({"tools": {"listChanged": true}}),
                ..InitializeResult::default()
            },
            tools,
            seq: Some(1),
            context: None,
            digest: false,
            page_size: None,
            behaviors: HashMap::new(),
            default_behavior: Behavior::Answer { latency: Duration::ZERO },
            answer_ceiling: Duration::from_secs(2),
            record_calls: true,
            answered: Arc::default(),
            approves: None,
            tasks: Arc::default(),
        }
    }

    /// A device that asks its user to approve calls, and whose user answers `approve`.
    pub fn asking_approvals(mut self, approve: bool) -> DeviceSpec {
        let meta = self.initialize.meta.get_or_insert_with(Default::default);
        meta.insert(tether_contract::writes::meta::APPROVALS.to_owned(), Value::Bool(true));
        self.approves = Some(approve);
        self
    }

    /// Sets one tool's behaviour.
    pub fn with(mut self, tool: &str, behavior: Behavior) -> DeviceSpec {
        self.behaviors.insert(tool.to_owned(), behavior);
        self
    }
}

/// A tool declaration with a name and an empty object schema.
pub fn tool(name: &str) -> ToolDeclaration {
    ToolDeclaration {
        name: name.to_owned(),
        title: None,
        description: Some(format!("Simulated tool {name}.")),
        input_schema: json!({"type": "object"}),
        output_schema: None,
        annotations: None,
        execution: None,
    }
}

/// A tool declared long-running: it runs as a task when asked to (`taskSupport: optional`).
pub fn task_tool(name: &str) -> ToolDeclaration {
    let execution = tether_contract::tasks::ToolExecution {
        task_support: Some(tether_contract::tasks::TaskSupport::Optional),
    };
    ToolDeclaration { execution: Some(execution), ..tool(name) }
}

/// One `tools/call` the device received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedCall {
    /// JSON-RPC id the edge used.
    pub id: Value,
    /// The device-side tool name.
    pub name: String,
    /// Arguments.
    pub arguments: Value,
    /// `_meta` (deadline, idempotency key).
    pub meta: Value,
}

/// What the device saw, for assertions.
#[derive(Debug, Default)]
pub struct Observed {
    calls: Mutex<Vec<ReceivedCall>>,
    /// Calls answered from memory: a key already answered, delivered again.
    deduplicated: Mutex<Vec<String>>,
    cancels: Mutex<Vec<Value>>,
    /// `tether.dev/approve` requests the device's user was shown.
    approvals: Mutex<Vec<Value>>,
    /// Task ids the edge cancelled (`tasks/cancel`).
    task_cancels: Mutex<Vec<String>>,
    manifest_reports: Mutex<Vec<Value>>,
    close_code: Mutex<Option<u16>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Observed {
    /// Approval requests the device's user was shown, oldest first.
    pub fn approvals(&self) -> Vec<Value> {
        lock(&self.approvals).clone()
    }

    /// Task ids the edge cancelled with `tasks/cancel`, oldest first.
    pub fn task_cancels(&self) -> Vec<String> {
        lock(&self.task_cancels).clone()
    }

    /// Idempotency keys of calls answered from memory instead of run again.
    pub fn deduplicated(&self) -> Vec<String> {
        lock(&self.deduplicated).clone()
    }

    /// Calls received so far.
    pub fn calls(&self) -> Vec<ReceivedCall> {
        lock(&self.calls).clone()
    }
    /// `notifications/cancelled` params received so far.
    pub fn cancels(&self) -> Vec<Value> {
        lock(&self.cancels).clone()
    }
    /// `manifest_applied` reports received so far.
    pub fn manifest_reports(&self) -> Vec<Value> {
        lock(&self.manifest_reports).clone()
    }
    /// The code of the close frame the edge sent, if one arrived.
    pub fn close_code(&self) -> Option<u16> {
        *lock(&self.close_code)
    }
}

#[derive(Debug)]
enum Control {
    Navigate(Vec<ToolDeclaration>),
    Disconnect,
}

/// A running simulated device.
#[derive(Debug)]
pub struct SimHandle {
    control: mpsc::Sender<Control>,
    session: watch::Receiver<Option<String>>,
    resume: watch::Receiver<Option<String>>,
    ready: watch::Receiver<bool>,
    /// What the device saw.
    pub observed: Arc<Observed>,
    done: watch::Receiver<bool>,
}

impl SimHandle {
    /// Waits until the edge has sent `initialize`, and returns the session id it assigned.
    pub async fn session_id(&mut self) -> Option<String> {
        let got = self.session.wait_for(Option::is_some).await.ok()?;
        got.clone()
    }

    /// Waits until the edge reports the first manifest applied, and returns
    /// the session id. The edge lists a session before it reports, so from
    /// here on backends can find and call it.
    pub async fn ready(&mut self) -> Option<String> {
        self.ready.wait_for(|r| *r).await.ok()?;
        self.session_id().await
    }

    /// The token that resumes this device's session, from its latest `initialize`.
    pub fn resume_token(&self) -> Option<String> {
        self.resume.borrow().clone()
    }

    /// Replaces the catalog with a newer seq and announces it with `list_changed`.
    pub async fn navigate(&self, tools: Vec<ToolDeclaration>) {
        let _ = self.control.send(Control::Navigate(tools)).await;
    }

    /// Drops the socket without a close handshake.
    pub async fn disconnect(&self) {
        let _ = self.control.send(Control::Disconnect).await;
    }

    /// Waits until the device's connection has ended.
    pub async fn closed(&mut self) {
        let _ = self.done.wait_for(|d| *d).await;
    }
}

/// Entry points.
#[derive(Debug)]
pub struct SimDevice;

impl SimDevice {
    /// Dials an edge (`ws://host:port`) with a client token and runs the device.
    pub async fn connect(edge: &str, token: &str, spec: DeviceSpec) -> Result<SimHandle, WsError> {
        SimDevice::resume(edge, token, spec, None).await
    }

    /// As [`SimDevice::connect`], presenting `resume` (a token from a former
    /// connection's `initialize`) to take its session back.
    pub async fn resume(
        edge: &str,
        token: &str,
        spec: DeviceSpec,
        resume: Option<&str>,
    ) -> Result<SimHandle, WsError> {
        let mut url = format!("{}{CLIENT_PATH}", edge.trim_end_matches('/'));
        if let Some(resume) = resume {
            url.push_str(&format!("?{}={resume}", tether_contract::RESUME_QUERY));
        }
        let mut request = url.into_client_request()?;
        if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
            request.headers_mut().insert("authorization", v);
        }
        request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(CLIENT_SUBPROTOCOL));
        // Nagle off, small read buffer: a device answers in small frames.
        let config = WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0);
        let (ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true).await?;
        Ok(SimDevice::spawn(ws, spec))
    }

    /// Runs the device over an already-upgraded socket (tests use duplex streams).
    pub fn spawn<S>(ws: WebSocketStream<S>, spec: DeviceSpec) -> SimHandle
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (control_tx, control_rx) = mpsc::channel(16);
        let (session_tx, session_rx) = watch::channel(None);
        let (resume_tx, resume_rx) = watch::channel(None);
        let (done_tx, done_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = watch::channel(false);
        let observed = Arc::new(Observed::default());
        let signals = Signals { session: session_tx, resume: resume_tx, ready: ready_tx, done: done_tx };
        tokio::spawn(run(ws, spec, control_rx, signals, Arc::clone(&observed)));
        SimHandle {
            control: control_tx,
            session: session_rx,
            resume: resume_rx,
            ready: ready_rx,
            observed,
            done: done_rx,
        }
    }
}

struct State {
    spec: DeviceSpec,
    seq: Option<u64>,
    session: Option<String>,
    /// The catalog a `navigate` fault toggles back to.
    original_tools: Vec<ToolDeclaration>,
    /// `tether.dev/digest` of the catalog now, when the spec stamps one
    /// (computed when the catalog changes, not per answer).
    digest: Option<String>,
}

impl State {
    fn seq_meta(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if let Some(seq) = self.seq {
            m.insert(meta::SEQ.into(), Value::from(seq));
            if let Some(digest) = &self.digest {
                m.insert(meta::DIGEST.into(), Value::from(digest.as_str()));
            }
        }
        m
    }

    /// Any stable hash of the catalog and context serves; the edge only compares.
    fn digest_of(spec: &DeviceSpec) -> Option<String> {
        use std::hash::{Hash, Hasher};
        if !spec.digest {
            return None;
        }
        let text = serde_json::to_string(&(&spec.tools, &spec.context)).unwrap_or_default();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        Some(format!("{:016x}", hasher.finish()))
    }

    fn list_page(&self, cursor: Option<&str>) -> Value {
        let start: usize = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
        let size = self.spec.page_size.unwrap_or(usize::MAX);
        let page: Vec<_> = self.spec.tools.iter().skip(start).take(size).cloned().collect();
        let mut meta = self.seq_meta();
        if let Some(ctx) = &self.spec.context {
            meta.insert(meta::CONTEXT.into(), ctx.clone());
        }
        let mut out = json!({"tools": page, "_meta": meta});
        if start.saturating_add(size) < self.spec.tools.len() {
            out["nextCursor"] = Value::from((start + size).to_string());
        }
        out
    }

    fn navigate(&mut self, tools: Vec<ToolDeclaration>) {
        self.spec.tools = tools;
        self.seq = self.seq.map(|s| s + 1);
        self.digest = State::digest_of(&self.spec);
    }
}

/// `_meta` key under which every honest answer echoes what the device received.
pub const ECHO_META: &str = "sim/echo";

/// An honest answer. The echo (tool, arguments, session) always rides in
/// `_meta`; it is also the `structuredContent` unless the tool declares an
/// output schema, in which case the content is a minimal instance of it.
fn echo(
    name: &str,
    arguments: &Value,
    output_schema: Option<&Value>,
    mut meta: Map<String, Value>,
    session: Option<&str>,
) -> Value {
    let echoed = json!({"tool": name, "arguments": arguments, "session": session});
    meta.insert(ECHO_META.into(), echoed.clone());
    json!({
        "content": [{"type": "text", "text": format!("{name} done")}],
        "structuredContent": output_schema.map_or(echoed, example_of),
        "_meta": meta,
    })
}

/// The smallest value a simple JSON Schema accepts: required properties only,
/// `const`/`enum` first choices, minimum lengths and bounds.
pub fn example_of(schema: &Value) -> Value {
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => {
            ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("null")
        }
        _ if schema.get("properties").is_some() => "object",
        _ => "null",
    };
    let min = |key: &str| schema.get(key).and_then(Value::as_u64).unwrap_or(0) as usize;
    match ty {
        "object" => {
            let props = schema.get("properties");
            let required = schema.get("required").and_then(Value::as_array).cloned().unwrap_or_default();
            let fields: Map<String, Value> = required
                .iter()
                .filter_map(Value::as_str)
                .map(|k| (k.to_owned(), props.and_then(|p| p.get(k)).map_or(Value::Null, example_of)))
                .collect();
            Value::Object(fields)
        }
        "array" => {
            let item = schema.get("items").map_or(Value::Null, example_of);
            Value::Array(vec![item; min("minItems")])
        }
        "string" => Value::from("x".repeat(min("minLength"))),
        "integer" | "number" => schema.get("minimum").cloned().unwrap_or_else(|| Value::from(0)),
        "boolean" => Value::from(false),
        _ => Value::Null,
    }
}

/// What the device task tells its handle.
struct Signals {
    session: watch::Sender<Option<String>>,
    resume: watch::Sender<Option<String>>,
    ready: watch::Sender<bool>,
    done: watch::Sender<bool>,
}

async fn run<S>(
    ws: WebSocketStream<S>,
    spec: DeviceSpec,
    mut control: mpsc::Receiver<Control>,
    signals: Signals,
    observed: Arc<Observed>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(256);
    let writer = tokio::spawn(async move {
        while let Some(msg) = out_rx.recv().await {
            let close = msg.is_close();
            if sink.send(msg).await.is_err() || close {
                break;
            }
        }
    });
    let seq = spec.seq;
    let original_tools = spec.tools.clone();
    let digest = State::digest_of(&spec);
    let mut state = State { spec, seq, session: None, original_tools, digest };
    loop {
        tokio::select! {
            next = stream.next() => {
                let Some(Ok(msg)) = next else { break };
                let text = match msg {
                    Message::Text(text) => text,
                    Message::Close(frame) => {
                        *lock(&observed.close_code) = frame.map(|f| u16::from(f.code));
                        break;
                    }
                    _ => continue,
                };
                match jsonrpc::parse(text.as_str()) {
                    Ok(Frame::Request { id, method, params }) => {
                        if !handle_request(&mut state, &out_tx, &signals, &observed, id, &method, params).await {
                            break;
                        }
                    }
                    Ok(Frame::Notification { method, params }) => match method.as_str() {
                        method::CANCELLED => lock(&observed.cancels).push(params),
                        method::MANIFEST_APPLIED => {
                            lock(&observed.manifest_reports).push(params);
                            signals.ready.send_replace(true);
                        }
                        _ => {}
                    },
                    Ok(Frame::Response { .. }) => {}
                    Err(e) => debug!(error = %e, "sim device got a bad frame"),
                }
            }
            ctl = control.recv() => match ctl {
                Some(Control::Navigate(tools)) => {
                    state.navigate(tools);
                    let frame = jsonrpc::notification(method::LIST_CHANGED, &json!({"_meta": state.seq_meta()}));
                    let _ = out_tx.send(Message::text(frame)).await;
                }
                Some(Control::Disconnect) | None => break,
            }
        }
    }
    writer.abort();
    signals.done.send_replace(true);
}

/// Handles one request; returns false when the device should drop the socket.
async fn handle_request(
    state: &mut State,
    out: &mpsc::Sender<Message>,
    signals: &Signals,
    observed: &Observed,
    id: Value,
    method_name: &str,
    params: Value,
) -> bool {
    let reply = |v: Value| Message::text(jsonrpc::response(&id, &v));
    match method_name {
        method::INITIALIZE => {
            let sid = params.get("_meta").and_then(|m| m.get(meta::SESSION)).and_then(Value::as_str);
            state.session = sid.map(str::to_owned);
            let _ = signals.session.send(sid.map(str::to_owned));
            let resume = params.get("_meta").and_then(|m| m.get(meta::RESUME)).and_then(Value::as_str);
            signals.resume.send_replace(resume.map(str::to_owned));
            let _ = out.send(reply(serde_json::to_value(&state.spec.initialize).unwrap_or_default())).await;
        }
        method::TOOLS_LIST => {
            let cursor = params.get("cursor").and_then(Value::as_str);
            let _ = out.send(reply(state.list_page(cursor))).await;
        }
        method::PING => {
            let _ = out.send(reply(json!({}))).await;
        }
        method::TOOLS_CALL => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
            let call_meta = params.get("_meta").cloned().unwrap_or(Value::Null);
            let progress_token = call_meta.get(meta::PROGRESS_TOKEN).cloned();
            let key = call_meta.get(meta::IDEMPOTENCY_KEY).and_then(Value::as_str).map(str::to_owned);
            // A call delivered again after a resume: answered from memory, never run twice.
            if let Some(answer) = key.as_ref().and_then(|k| lock(&state.spec.answered).get(k).cloned()) {
                lock(&observed.deduplicated).extend(key);
                let _ = out.send(reply(answer)).await;
                return true;
            }
            if state.spec.record_calls {
                lock(&observed.calls).push(ReceivedCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                    meta: call_meta,
                });
            }
            let behavior = state
                .spec
                .behaviors
                .get(&name)
                .cloned()
                .unwrap_or_else(|| state.spec.default_behavior.clone());
            let ceiling = state.spec.answer_ceiling;
            let (behavior, mix) = match behavior {
                Behavior::Mixed(mix) => (concrete(&mix, state), Some(mix)),
                other => (other, None),
            };
            let sid = state.session.clone();
            let sid = sid.as_deref();
            let output =
                state.spec.tools.iter().find(|t| t.name == name).and_then(|t| t.output_schema.clone());
            let echo = |meta| echo(&name, &arguments, output.as_ref(), meta, sid);
            match behavior {
                Behavior::Answer { latency } => {
                    let frame = if latency > ceiling {
                        let r = json!({
                            "content": [{"type": "text", "text": format!("{name} took longer than the device's {} ms ceiling", ceiling.as_millis())}],
                            "structuredContent": {"code": "device_timeout", "retryable": true},
                            "isError": true,
                            "_meta": state.seq_meta(),
                        });
                        (ceiling, r)
                    } else {
                        (latency, echo(state.seq_meta()))
                    };
                    if let Some(key) = key {
                        lock(&state.spec.answered).insert(key, frame.1.clone());
                    }
                    delayed(out, id, frame.0, frame.1);
                }
                Behavior::Late { after } => {
                    let (out, r) = (out.clone(), echo(state.seq_meta()));
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let sent = out.send(Message::text(jsonrpc::response(&id, &r))).await.is_ok();
                        if let Some(mix) = mix {
                            mix.late_answer_settled(sent);
                        }
                    });
                }
                Behavior::Fail { code, retryable } => {
                    let r = json!({
                        "content": [{"type": "text", "text": format!("{name} failed: {code}")}],
                        "structuredContent": {"code": code, "retryable": retryable},
                        "isError": true,
                        "_meta": state.seq_meta(),
                    });
                    let _ = out.send(reply(r)).await;
                }
                Behavior::Silent => {}
                Behavior::Progress { steps } => {
                    for step in 1..=steps {
                        if let Some(token) = &progress_token {
                            let params = json!({"progressToken": token, "progress": step, "total": steps, "message": format!("step {step} of {steps}")});
                            let _ = out
                                .send(Message::text(jsonrpc::notification(method::PROGRESS, &params)))
                                .await;
                        }
                    }
                    let _ = out.send(reply(echo(state.seq_meta()))).await;
                }
                Behavior::Disconnect => return false,
                Behavior::Navigate { tools } => {
                    state.navigate(tools);
                    let _ = out.send(reply(echo(state.seq_meta()))).await;
                }
                Behavior::Twice => {
                    let r = echo(state.seq_meta());
                    let _ = out.send(reply(r.clone())).await;
                    let _ = out.send(reply(r)).await;
                }
                Behavior::Malformed => {
                    let _ = out.send(Message::text("{\"jsonrpc\":\"2.0\",\"id\":")).await;
                    let _ = out.send(reply(echo(state.seq_meta()))).await;
                }
                Behavior::Oversize => {
                    let mut r = echo(state.seq_meta());
                    r["content"][0]["text"] = Value::from("x".repeat(20_000));
                    let _ = out.send(reply(r)).await;
                }
                Behavior::Flood => {
                    for _ in 0..20 {
                        let f =
                            jsonrpc::notification(method::LIST_CHANGED, &json!({"_meta": state.seq_meta()}));
                        let _ = out.send(Message::text(f)).await;
                    }
                    let _ = out.send(reply(echo(state.seq_meta()))).await;
                }
                Behavior::Gated(gate) => {
                    let (out, r) = (out.clone(), echo(state.seq_meta()));
                    tokio::spawn(async move {
                        if let Ok(permit) = gate.acquire().await {
                            permit.forget();
                            let _ = out.send(Message::text(jsonrpc::response(&id, &r))).await;
                        }
                    });
                }
                Behavior::Reject { code, message } => {
                    let error = json!({"code": code, "message": message});
                    let frame = json!({"jsonrpc": "2.0", "id": id, "error": error});
                    let _ = out.send(Message::text(frame.to_string())).await;
                }
                Behavior::StringId => {
                    let spelled = Value::from(id.to_string());
                    let _ =
                        out.send(Message::text(jsonrpc::response(&spelled, &echo(state.seq_meta())))).await;
                }
                Behavior::Task { after } => {
                    let result = echo(state.seq_meta());
                    if params.get("task").is_none() {
                        delayed(out, id, after, result);
                        return true;
                    }
                    let task_id = next_task_id();
                    let done_at = tokio::time::Instant::now() + after;
                    let task = SimTask { done_at, result, cancelled: watch::channel(false).0 };
                    lock(&state.spec.tasks).insert(task_id.clone(), task);
                    let _ = out.send(reply(json!({"task": task_json(&task_id, "working")}))).await;
                    // Right behind the answer, where it starts, as a real device says it.
                    let mut started = task_json(&task_id, "working");
                    started["statusMessage"] = Value::from("started");
                    let _ = out.send(Message::text(jsonrpc::notification(TASK_STATUS, &started))).await;
                    // Halfway, a status line (lost if the socket is gone by then, as on a real device).
                    let mut status = task_json(&task_id, "working");
                    status["statusMessage"] = Value::from("halfway");
                    let frame = Message::text(jsonrpc::notification(TASK_STATUS, &status));
                    delayed_frame(out, after / 2, frame);
                }
                Behavior::Mixed(_) => {}
            }
        }
        TASKS_RESULT | TASKS_GET | TASKS_CANCEL => {
            let task_id = params.get("taskId").and_then(Value::as_str).unwrap_or_default().to_owned();
            let Some(task) = lock(&state.spec.tasks).get(&task_id).cloned() else {
                let error = json!({"code": -32602, "message": format!("unknown task {task_id}")});
                let _ = out
                    .send(Message::text(json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string()))
                    .await;
                return true;
            };
            let cancelled = *task.cancelled.borrow();
            let done = tokio::time::Instant::now() >= task.done_at;
            let status = if cancelled {
                "cancelled"
            } else if done {
                "completed"
            } else {
                "working"
            };
            match method_name {
                TASKS_GET => {
                    let _ = out.send(reply(task_json(&task_id, status))).await;
                }
                TASKS_CANCEL => {
                    lock(&observed.task_cancels).push(task_id.clone());
                    task.cancelled.send_replace(true);
                    let _ = out.send(reply(task_json(&task_id, "cancelled"))).await;
                }
                _ => {
                    let out = out.clone();
                    let mut cancel = task.cancelled.subscribe();
                    tokio::spawn(async move {
                        let frame = tokio::select! {
                            () = tokio::time::sleep_until(task.done_at), if !cancelled => {
                                let mut result = task.result;
                                result["_meta"]["io.modelcontextprotocol/related-task"] = json!({"taskId": task_id});
                                jsonrpc::response(&id, &result)
                            }
                            _ = cancel.wait_for(|c| *c) => {
                                let error = json!({"code": -32800, "message": "the task was cancelled"});
                                json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string()
                            }
                        };
                        let _ = out.send(Message::text(frame)).await;
                    });
                }
            }
        }
        tether_contract::writes::method::APPROVE if state.spec.approves.is_some() => {
            lock(&observed.approvals).push(params);
            let answer = json!({"approve": state.spec.approves == Some(true)});
            let _ = out.send(reply(answer)).await;
        }
        other => {
            let err = tether_contract::WireError::new(
                tether_contract::ErrorKind::MethodNotFound,
                format!("sim device does not serve {other}"),
            );
            let _ = out.send(Message::text(jsonrpc::error_response(&id, &err))).await;
        }
    }
    true
}

/// Turns one draw from a fault mix into a concrete behaviour for this call.
fn concrete(mix: &FaultMix, state: &State) -> Behavior {
    let (fault, latency) = mix.draw();
    match fault {
        Fault::Answer => Behavior::Answer { latency },
        Fault::Error => Behavior::Fail { code: "busy".into(), retryable: true },
        Fault::Silent => Behavior::Silent,
        Fault::Late => Behavior::Late { after: mix.late_after },
        Fault::Twice => Behavior::Twice,
        Fault::Disconnect => Behavior::Disconnect,
        Fault::Navigate => {
            // Toggle between the original catalog and one with an extra tool.
            let mut tools = state.original_tools.clone();
            if state.spec.tools.len() == tools.len() {
                tools.push(tool("navigated_extra"));
            }
            Behavior::Navigate { tools }
        }
        Fault::Malformed => Behavior::Malformed,
        Fault::Oversize => Behavior::Oversize,
        Fault::Flood => Behavior::Flood,
    }
}

const TASKS_RESULT: &str = tether_contract::tasks::method::TASKS_RESULT;
const TASKS_GET: &str = tether_contract::tasks::method::TASKS_GET;
const TASKS_CANCEL: &str = tether_contract::tasks::method::TASKS_CANCEL;
const TASK_STATUS: &str = tether_contract::tasks::method::STATUS;

/// A task id unique in the process (request ids restart on a new socket).
fn next_task_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!("sim-task-{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// A task as MCP 2025-11-25 shapes it.
fn task_json(task_id: &str, status: &str) -> Value {
    json!({"taskId": task_id, "status": status, "createdAt": "2026-01-01T00:00:00Z",
           "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 600_000, "pollInterval": 1000})
}

fn delayed_frame(out: &mpsc::Sender<Message>, after: Duration, frame: Message) {
    let out = out.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = out.send(frame).await;
    });
}

fn delayed(out: &mpsc::Sender<Message>, id: Value, after: Duration, result: Value) {
    let out = out.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let _ = out.send(Message::text(jsonrpc::response(&id, &result))).await;
    });
}
