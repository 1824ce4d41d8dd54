//! The device side: one WebSocket connection to the edge's `/v1/client`,
//! speaking tether's client link (server role, one JSON-RPC message per text
//! frame) on behalf of the MCP server, in the revision the server speaks.
//!
//! A 2025-11-25 server makes a 2025-11-25 device: the edge asks `initialize`,
//! `tools/list`, `tools/call`, `ping`, and the server's `list_changed` becomes
//! a `notifications/tools/list_changed` carrying the new seq. A 2026-07-28
//! server makes a 2026-07-28 device: the bridge announces the revision at the
//! upgrade (`MCP-Protocol-Version`), answers `server/discover` instead of
//! `initialize`, marks its results `resultType: "complete"`, acknowledges the
//! edge's `subscriptions/listen` (kept open for the connection's life) and
//! sends `list_changed` on that stream, tagged with its subscription id. An
//! edge that greets a 2026-07-28 bridge with `initialize` anyway (one that
//! predates the revision) gets the 2025-11-25 answer and that revision's
//! shapes from then on.
//!
//! Every frame the bridge sends stays under the transport ceiling: catalogs
//! are paged, instructions cut, and an oversized result is replaced by an
//! `isError` result, because one frame over the ceiling closes the whole
//! device (1009).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use tether_contract::jsonrpc::{self, Frame};
use tether_contract::mcp::{meta, method};
use tether_contract::tasks::{self, method as tasks_method};
use tether_contract::{Budgets, ErrorKind, WireError, CLIENT_PATH, CLIENT_SUBPROTOCOL, MCP_PROTOCOL_VERSION};
use tether_counters::fallback;

/// The 2026-07-28 names the bridge speaks (the edge's `revision` module has
/// them too, but the bridge reaches the edge only over the wire).
pub(crate) mod modern {
    /// The revision, as it travels on the wire.
    pub(crate) const VERSION: &str = "2026-07-28";
    /// The upgrade header a device announces its revision in.
    pub(crate) const HEADER: &str = "mcp-protocol-version";
    /// Edge → device: who are you (replaces `initialize`).
    pub(crate) const DISCOVER: &str = "server/discover";
    /// Edge → device: the long-lived request change notifications ride on.
    pub(crate) const LISTEN: &str = "subscriptions/listen";
    /// Device → edge: the listen stream is open.
    pub(crate) const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
    /// Who answered, in a result's `_meta`.
    pub(crate) const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// Which listen stream a notification belongs to.
    pub(crate) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
}

use crate::counters::BridgeCounters;
use crate::lock;
use crate::paging::{parse_cursor, Catalog};
use crate::server::{CallOutcome, Exit, Failure, SeqClock, Server, Stop};
use crate::{BridgeStatus, DeadlinePolicy};

/// Frames waiting for the socket; past it replies wait (calls are few and small).
const OUTBOUND_QUEUE: usize = 256;
/// Largest frame accepted from the edge (its own frames stay under its ceiling).
const MAX_INBOUND: usize = 1 << 20;
/// How long a `tools/list` may wait on the server: inside the edge's 4 s re-read leg.
const LIST_BUDGET: Duration = Duration::from_millis(3_500);
/// How long the bridge waits for the edge to answer its close frame.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// A close frame's reason may carry at most 123 bytes (RFC 6455).
const MAX_CLOSE_REASON: usize = 123;

/// The socket to the edge.
pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Why the bridge could not open a device connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The edge answered the upgrade with an HTTP error.
    #[error("the edge refused the upgrade with HTTP {0}")]
    Refused(u16),
    /// The socket could not be opened or upgraded.
    #[error("{0}")]
    Ws(#[source] Box<WsError>),
}

/// Dials the edge's `/v1/client` with the device token and `tether.v1`,
/// announcing 2026-07-28 when `modern` (a 2025-11-25 device announces nothing).
pub(crate) async fn connect(edge: &str, token: &str, modern: bool) -> Result<Ws, ConnectError> {
    let base = edge.trim_end_matches('/');
    let url = if base.ends_with(CLIENT_PATH) { base.to_owned() } else { format!("{base}{CLIENT_PATH}") };
    let mut request = url.into_client_request().map_err(|e| ConnectError::Ws(Box::new(e)))?;
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
        request.headers_mut().insert("authorization", v);
    }
    request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static(CLIENT_SUBPROTOCOL));
    if modern {
        request.headers_mut().insert(modern::HEADER, HeaderValue::from_static(modern::VERSION));
    }
    // Nagle off and a small read buffer, like every device: small frames, answered at once.
    let config = WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(0)
        .max_message_size(Some(MAX_INBOUND))
        .max_frame_size(Some(MAX_INBOUND));
    match tokio_tungstenite::connect_async_with_config(request, Some(config), true).await {
        Ok((ws, _)) => Ok(ws),
        Err(WsError::Http(response)) => Err(ConnectError::Refused(response.status().as_u16())),
        Err(e) => Err(ConnectError::Ws(Box::new(e))),
    }
}

/// What every device connection of one bridge shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) seq: Arc<SeqClock>,
    pub(crate) counters: Arc<BridgeCounters>,
    pub(crate) status: watch::Sender<BridgeStatus>,
    pub(crate) ceiling: usize,
    pub(crate) deadline: DeadlinePolicy,
}

/// How a device connection ended.
#[derive(Debug)]
pub(crate) enum LinkEnd {
    /// The server exited; the edge was told why in the close frame.
    ServerExited(Exit),
    /// The edge side went away (closed, dropped, broke); the server keeps running.
    EdgeLost(String),
    /// The bridge is stopping.
    Shutdown,
}

/// The close reason the edge gets when the server exits.
pub(crate) fn exit_reason(server: &str, exit: &Exit) -> String {
    cut(&format!("MCP server {server} exited ({exit})"), MAX_CLOSE_REASON).to_owned()
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One device connection.
struct Link {
    server: Arc<Server>,
    shared: Arc<Shared>,
    out: mpsc::Sender<Message>,
    /// Calls in flight, by the edge's request id (as JSON text).
    calls: Mutex<HashMap<String, oneshot::Sender<Stop>>>,
    /// The last catalog read, which cursors page through.
    catalog: Mutex<Option<Catalog>>,
    session: Mutex<Option<String>>,
    ready: AtomicBool,
    /// Whether this connection speaks 2026-07-28: it does when the server
    /// does, until the edge greets it with `initialize`.
    modern: AtomicBool,
    /// The open `subscriptions/listen` request's id (2026-07-28), which
    /// `list_changed` is sent on; never answered while the connection lives.
    listen: Mutex<Option<Value>>,
}

/// Serves one device connection until the edge goes away, the server exits
/// (the edge gets a close frame saying so), or the bridge stops.
pub(crate) async fn serve(
    ws: Ws,
    server: Arc<Server>,
    shared: Arc<Shared>,
    shutdown: &CancellationToken,
) -> LinkEnd {
    let (mut sink, mut stream) = ws.split();
    let (out, mut outbound) = mpsc::channel::<Message>(OUTBOUND_QUEUE);
    let mut writer = tokio::spawn(async move {
        while let Some(message) = outbound.recv().await {
            let close = message.is_close();
            if let Err(e) = sink.send(message).await {
                debug!(error = %e, "write to the edge failed");
                break;
            }
            if close {
                break;
            }
        }
    });
    let modern = server.modern();
    let link = Arc::new(Link {
        server,
        shared,
        out,
        calls: Mutex::new(HashMap::new()),
        catalog: Mutex::new(None),
        session: Mutex::new(None),
        ready: AtomicBool::new(false),
        modern: AtomicBool::new(modern),
        listen: Mutex::new(None),
    });
    let mut changes = link.shared.seq.subscribe();
    changes.borrow_and_update();
    let end = loop {
        tokio::select! {
            frame = stream.next() => match frame {
                None => break LinkEnd::EdgeLost("the edge closed the connection".into()),
                Some(Err(e)) => break LinkEnd::EdgeLost(format!("the connection to the edge failed: {e}")),
                Some(Ok(Message::Text(text))) => link.on_text(text.as_str()),
                Some(Ok(Message::Close(frame))) => {
                    let why = frame.map(|f| format!(" ({} {})", u16::from(f.code), f.reason)).unwrap_or_default();
                    break LinkEnd::EdgeLost(format!("the edge closed the connection{why}"));
                }
                Some(Ok(Message::Binary(_))) => {
                    fallback!(link.shared.counters.edge_binary_frames, debug, "binary frame from the edge ignored");
                }
                Some(Ok(_)) => {}
            },
            changed = changes.changed() => {
                if changed.is_ok() {
                    let seq = *changes.borrow_and_update();
                    link.announce(seq).await;
                }
            }
            exit = link.server.exited() => {
                let reason = exit_reason(&link.server.name, &exit);
                warn!(%reason, "MCP server exited; closing the device connection");
                link.close(CloseCode::Error, &reason).await;
                break LinkEnd::ServerExited(exit);
            }
            _ = shutdown.cancelled() => {
                link.close(CloseCode::Away, "tether bridge stopping").await;
                break LinkEnd::Shutdown;
            }
        }
    };
    if !matches!(end, LinkEnd::EdgeLost(_)) {
        // The edge answers a close frame with its own; read until it does (bounded).
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            while let Some(Ok(m)) = stream.next().await {
                if m.is_close() {
                    break;
                }
            }
        })
        .await;
    }
    link.end(&end);
    if tokio::time::timeout(CLOSE_GRACE, &mut writer).await.is_err() {
        writer.abort();
    }
    end
}

impl Link {
    fn on_text(self: &Arc<Self>, text: &str) {
        match jsonrpc::parse(text) {
            Ok(Frame::Request { id, method, params }) => match method.as_str() {
                method::INITIALIZE => {
                    self.note_session(&params);
                    if self.modern.swap(false, Ordering::Relaxed) {
                        info!("the edge greeted a 2026-07-28 device with initialize; speaking 2025-11-25");
                    }
                    let frame = self.greeting_frame(&id, false);
                    self.send_now(frame);
                }
                modern::DISCOVER if self.server.modern() => {
                    self.note_session(&params);
                    self.modern.store(true, Ordering::Relaxed);
                    let frame = self.greeting_frame(&id, true);
                    self.send_now(frame);
                }
                modern::LISTEN if self.modern() => self.on_listen(id, &params),
                method::TOOLS_LIST => {
                    let cursor = params.get("cursor").and_then(Value::as_str).map(str::to_owned);
                    let link = Arc::clone(self);
                    tokio::spawn(
                        async move {
                            let frame = match link.list(cursor).await {
                                Ok(page) => jsonrpc::response(&id, &link.complete_page(page)),
                                Err(e) => jsonrpc::error_response(&id, &e),
                            };
                            link.send(frame).await;
                        }
                        .in_current_span(),
                    );
                }
                method::TOOLS_CALL => self.start_call(id, &params),
                tasks_method::TASKS_GET | tasks_method::TASKS_CANCEL
                    if self.modern() && self.server.runs_tasks() =>
                {
                    self.forward_task_request(id, &method, &params)
                }
                method::PING => self.send_now(jsonrpc::response(&id, &self.complete(json!({})))),
                other => {
                    fallback!(
                        self.shared.counters.edge_unknown_methods,
                        debug,
                        method = other,
                        "edge asked for a method the bridge does not serve"
                    );
                    let err = WireError::new(
                        ErrorKind::MethodNotFound,
                        format!("the tether bridge does not serve {other}"),
                    );
                    self.send_now(jsonrpc::error_response(&id, &err));
                }
            },
            Ok(Frame::Notification { method, params }) => match method.as_str() {
                method::CANCELLED => self.on_cancelled(&params),
                method::MANIFEST_APPLIED => self.on_manifest_applied(&params),
                method::INITIALIZED => {}
                other => debug!(method = other, "edge notification ignored"),
            },
            Ok(Frame::Response { id, .. }) => {
                debug!(%id, "response from the edge to a request the bridge never sent")
            }
            Err(e) => {
                fallback!(self.shared.counters.edge_bad_frames, warn, error = %e, "frame from the edge is not JSON-RPC");
                let (id, err) = e.to_wire();
                self.send_now(jsonrpc::error_response(&id, &err));
            }
        }
    }

    /// Whether this connection speaks 2026-07-28 now.
    fn modern(&self) -> bool {
        self.modern.load(Ordering::Relaxed)
    }

    /// Remembers the session the edge named in its greeting's `_meta`.
    fn note_session(&self, params: &Value) {
        let session = params.get("_meta").and_then(|m| m.get(meta::SESSION)).and_then(Value::as_str);
        *lock(&self.session) = session.map(str::to_owned);
    }

    /// A result in this connection's revision: 2026-07-28 marks it
    /// `resultType: "complete"`.
    fn complete(&self, mut result: Value) -> Value {
        if let (true, Value::Object(fields)) = (self.modern(), &mut result) {
            fields.insert("resultType".into(), Value::from("complete"));
        }
        result
    }

    /// A `tools/list` page in this connection's revision: on 2026-07-28 also
    /// how long it may be cached, which is not at all and only for this
    /// session, since the seq moves it.
    fn complete_page(&self, page: Value) -> Value {
        let mut page = self.complete(page);
        if let (true, Value::Object(fields)) = (self.modern(), &mut page) {
            fields.insert("ttlMs".into(), Value::from(0));
            fields.insert("cacheScope".into(), Value::from("private"));
        }
        page
    }

    /// The edge opened a 2026-07-28 listen stream: acknowledge it, keep it
    /// open, and send on it a change the edge has not read yet.
    fn on_listen(&self, id: Value, params: &Value) {
        let tools = params
            .get("notifications")
            .and_then(|n| n.get("toolsListChanged"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let ack = json!({
            "_meta": {modern::SUBSCRIPTION_ID: id},
            "notifications": if tools { json!({"toolsListChanged": true}) } else { json!({}) },
        });
        self.send_now(jsonrpc::notification(modern::ACKNOWLEDGED, &ack));
        if !tools {
            debug!(%id, "the edge opened a listen stream without toolsListChanged; nothing to send on it");
            return;
        }
        debug!(%id, "list_changed subscription open");
        *lock(&self.listen) = Some(id);
        // A change between the edge's first catalog read and this stream
        // would otherwise go unheard: the edge drops one it has already read.
        let current = self.shared.seq.current();
        let read = lock(&self.catalog).as_ref().map(|c| c.seq);
        if read.is_some_and(|read| current > read) {
            self.send_now(self.list_changed_frame(current));
        }
    }

    /// Queues a frame from a synchronous path; a full queue drops it (logged).
    fn send_now(&self, frame: String) {
        if let Err(e) = self.out.try_send(Message::text(frame)) {
            warn!(error = %e, "reply to the edge dropped: outbound queue full or closed");
        }
    }

    async fn send(&self, frame: String) {
        if self.out.send(Message::text(frame)).await.is_err() {
            debug!("reply to the edge dropped: the connection ended");
        }
    }

    /// The `initialize` answer, or with `discover` the `server/discover`
    /// one: the server's identity and instructions, cut to fit one frame.
    fn greeting_frame(&self, id: &Value, discover: bool) -> String {
        let ceiling = self.shared.ceiling;
        let mut server_info = self.server.server_info();
        let mut instructions = self.server.instructions().map(str::to_owned);
        let mut counted = false;
        loop {
            let mut result = if discover {
                json!({
                    "resultType": "complete",
                    "supportedVersions": [modern::VERSION],
                    "capabilities": self.discover_capabilities(),
                    "ttlMs": 0,
                    "cacheScope": "private",
                    "_meta": {modern::SERVER_INFO: server_info},
                })
            } else {
                json!({
                    "protocolVersion": MCP_PROTOCOL_VERSION,
                    "serverInfo": server_info,
                    "capabilities": {"tools": {"listChanged": true}},
                })
            };
            if let Some(text) = &instructions {
                result["instructions"] = Value::from(text.as_str());
            }
            let frame = jsonrpc::response(id, &result);
            if frame.len() <= ceiling {
                return frame;
            }
            let over = frame.len() - ceiling + 16;
            match instructions.as_mut() {
                Some(text) if !text.is_empty() => {
                    if !counted {
                        counted = true;
                        fallback!(
                            self.shared.counters.instructions_truncated,
                            warn,
                            bytes = text.len(),
                            ceiling,
                            "server instructions cut to fit the greeting frame"
                        );
                    }
                    let keep = cut(text, text.len().saturating_sub(over)).len();
                    text.truncate(keep);
                }
                _ => {
                    // Only an enormous serverInfo is left: keep its name and version.
                    let slim = json!({
                        "name": server_info.get("name").cloned().unwrap_or_else(|| Value::from(&*self.server.name)),
                        "version": server_info.get("version").cloned().unwrap_or_else(|| Value::from("unknown")),
                    });
                    if slim == server_info {
                        return frame;
                    }
                    server_info = slim;
                }
            }
        }
    }

    /// One `tools/list` page: a read of the server's catalog for the first,
    /// the same read's later pages for a cursor.
    async fn list(&self, cursor: Option<String>) -> Result<Value, WireError> {
        let counters = &self.shared.counters;
        if let Some(cursor) = cursor {
            let catalog = lock(&self.catalog);
            let page = match (parse_cursor(&cursor), catalog.as_ref()) {
                (Some((seq, page)), Some(read)) if read.seq == seq => read.page(page),
                _ => None,
            };
            return page.ok_or_else(|| {
                fallback!(
                    counters.stale_cursors,
                    debug,
                    cursor,
                    "tools/list cursor names no current catalog read"
                );
                WireError::new(
                    ErrorKind::InvalidParams,
                    format!("cursor {cursor:?} names no current catalog read; list again without a cursor"),
                )
            });
        }
        // The seq is read before the server is: a change that lands during the
        // read moves the seq past this stamp, and the edge reads again.
        let seq = self.shared.seq.current();
        let tools = match tokio::time::timeout(LIST_BUDGET, self.server.tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                fallback!(counters.list_failures, warn, error = %e, "the MCP server's tools/list failed");
                return Err(WireError::new(
                    ErrorKind::Internal,
                    format!("the MCP server's tools/list failed: {e}"),
                ));
            }
            Err(_) => {
                fallback!(
                    counters.list_failures,
                    warn,
                    budget_ms = LIST_BUDGET.as_millis(),
                    "the MCP server did not answer tools/list in time"
                );
                return Err(WireError::new(
                    ErrorKind::Internal,
                    format!("the MCP server did not answer tools/list within {} ms", LIST_BUDGET.as_millis()),
                ));
            }
        };
        let (catalog, oversized) = Catalog::paginate(seq, &tools, self.shared.ceiling);
        for tool in &oversized {
            fallback!(counters.tools_oversized, warn, tool = %tool.name, bytes = tool.bytes, ceiling = self.shared.ceiling, "tool declaration too large for any tools/list frame; not declared");
        }
        info!(seq, tools = tools.len() - oversized.len(), pages = catalog.len(), "catalog read for the edge");
        let first = catalog.page(0);
        *lock(&self.catalog) = Some(catalog);
        first.ok_or_else(|| WireError::new(ErrorKind::Internal, "catalog read has no first page"))
    }

    fn start_call(self: &Arc<Self>, id: Value, params: &Value) {
        let counters = &self.shared.counters;
        BridgeCounters::bump(&counters.calls);
        let Some(name) = params.get("name").and_then(Value::as_str).map(str::to_owned) else {
            let err = WireError::new(ErrorKind::InvalidParams, "tools/call needs a tool name");
            self.send_now(jsonrpc::error_response(&id, &err));
            return;
        };
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m.clone()),
            Some(_) => {
                let err = WireError::new(ErrorKind::InvalidParams, "tools/call arguments must be an object");
                self.send_now(jsonrpc::error_response(&id, &err));
                return;
            }
        };
        let deadline = params
            .get("_meta")
            .and_then(|m| m.get(meta::DEADLINE_MS))
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .unwrap_or(Budgets::default().tool_call);
        let as_task =
            self.modern() && self.server.runs_tasks() && crate::server::tasks::declares_tasks(params);
        let trace = crate::server::TraceContext::of(params);
        let key = id.to_string();
        let (stop_tx, stop_rx) = oneshot::channel();
        lock(&self.calls).insert(key.clone(), stop_tx);
        let link = Arc::clone(self);
        let span = tracing::info_span!("call", tool = %name, id = %key);
        tokio::spawn(
            async move {
                let outcome = link
                    .server
                    .call(&name, arguments, as_task, trace, deadline, link.shared.deadline, stop_rx)
                    .await;
                lock(&link.calls).remove(&key);
                let result = match outcome {
                    CallOutcome::Answered(result) => result,
                    CallOutcome::Task(task) => {
                        // The server's own answer: `resultType: "task"`, no seq stamp.
                        link.send(jsonrpc::response(&id, &task)).await;
                        return;
                    }
                    CallOutcome::Failed(failure) => failure.to_result(),
                    CallOutcome::Unanswered => return,
                };
                link.answer(&id, result).await;
            }
            .instrument(span),
        );
    }

    /// What a 2026-07-28 device of this server declares: tools, and the tasks
    /// extension when the server declares it.
    fn discover_capabilities(&self) -> Value {
        let mut capabilities = json!({"tools": {"listChanged": true}});
        if self.server.runs_tasks() {
            capabilities["extensions"] = json!({ tasks::extension::ID: {} });
        }
        capabilities
    }

    /// Forwards the edge's `tasks/get` or `tasks/cancel` to the server and
    /// sends its answer back (a frame too large becomes an error, counted).
    fn forward_task_request(self: &Arc<Self>, id: Value, method_name: &str, params: &Value) {
        let Some(task_id) = params.get("taskId").and_then(Value::as_str).map(str::to_owned) else {
            let err = WireError::new(ErrorKind::InvalidParams, format!("{method_name} needs a taskId"));
            self.send_now(jsonrpc::error_response(&id, &err));
            return;
        };
        let (link, method_name) = (Arc::clone(self), method_name.to_owned());
        tokio::spawn(
            async move {
                let mut frame = match link.server.task_request(&method_name, task_id).await {
                    Ok(answer) => jsonrpc::response(&id, &answer),
                    Err(e) => jsonrpc::error_response(&id, &e),
                };
                if frame.len() > link.shared.ceiling {
                    fallback!(link.shared.counters.results_too_large, warn, bytes = frame.len(), ceiling = link.shared.ceiling, "server task answer too large for one frame; answered with an error");
                    let err = WireError::new(
                        ErrorKind::PayloadTooLarge,
                        format!("the MCP server's answer to {method_name} is {} bytes, more than one {}-byte frame can carry", frame.len(), link.shared.ceiling),
                    );
                    frame = jsonrpc::error_response(&id, &err);
                }
                link.send(frame).await;
            }
            .in_current_span(),
        );
    }

    /// Sends a call's result, stamped with the seq; one too large for a frame
    /// becomes an `isError` result instead.
    async fn answer(&self, id: &Value, result: Value) {
        let mut frame = jsonrpc::response(id, &self.stamp(result));
        if frame.len() > self.shared.ceiling {
            fallback!(
                self.shared.counters.results_too_large,
                warn,
                bytes = frame.len(),
                ceiling = self.shared.ceiling,
                "server result too large for one frame; answered with an error"
            );
            let failure = Failure::new(
                "result_too_large",
                false,
                format!(
                    "The MCP server's result is {} bytes, more than one {}-byte frame can carry; it was not sent. Ask for less.",
                    frame.len(),
                    self.shared.ceiling
                ),
            );
            frame = jsonrpc::response(id, &self.stamp(failure.to_result()));
        }
        self.send(frame).await;
    }

    /// Adds `_meta["tether.dev/seq"]`, and the `{code, retryable}` a tether
    /// device's `isError` result carries when the server gave none.
    fn stamp(&self, mut result: Value) -> Value {
        let seq = self.shared.seq.current();
        let Value::Object(fields) = &mut result else { return result };
        if fields.get("isError").and_then(Value::as_bool) == Some(true)
            && fields.get("structuredContent").and_then(|s| s.get("code")).is_none()
        {
            match fields.get_mut("structuredContent") {
                Some(Value::Object(s)) => {
                    fallback!(
                        self.shared.counters.error_codes_filled,
                        debug,
                        "isError result without a code; filled in tool_error"
                    );
                    s.insert("code".into(), Value::from("tool_error"));
                    s.entry("retryable").or_insert(Value::Bool(false));
                }
                None | Some(Value::Null) => {
                    fallback!(
                        self.shared.counters.error_codes_filled,
                        debug,
                        "isError result without structured content; filled in tool_error"
                    );
                    fields.insert(
                        "structuredContent".into(),
                        json!({"code": "tool_error", "retryable": false}),
                    );
                }
                Some(_) => {}
            }
        }
        let meta = fields.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Value::Object(m) = meta {
            m.insert(meta::SEQ.into(), Value::from(seq));
        }
        self.complete(result)
    }

    fn on_cancelled(&self, params: &Value) {
        let Some(id) = params.get("requestId") else { return };
        let key = id.to_string();
        match lock(&self.calls).remove(&key) {
            Some(stop) => {
                let reason = params.get("reason").and_then(Value::as_str).unwrap_or("");
                info!(id = %key, reason, "edge cancelled a call");
                let _ = stop.send(Stop::Edge);
            }
            None => {
                fallback!(self.shared.counters.edge_cancels_unmatched, debug, id = %key, "edge cancelled a call that is not in flight");
            }
        }
    }

    fn on_manifest_applied(&self, params: &Value) {
        let dropped = params.get("dropped").and_then(Value::as_array).cloned().unwrap_or_default();
        let seq = params.get("seq").and_then(Value::as_u64);
        let kept = params.get("kept").and_then(Value::as_u64);
        if !dropped.is_empty() {
            fallback!(self.shared.counters.tools_dropped_by_edge; dropped.len() as u64, warn, count = dropped.len(), seq, "the edge dropped tools from the manifest");
            for d in &dropped {
                let field = |k: &str| d.get(k).map(ToString::to_string).unwrap_or_default();
                warn!(tool = %field("name"), reason = %field("reason"), "the edge dropped a tool from the manifest");
            }
        }
        let session = lock(&self.session).clone();
        if !self.ready.swap(true, Ordering::Relaxed) {
            info!(session = session.as_deref().unwrap_or("?"), seq, kept, "device session ready");
            self.shared.status.send_modify(|s| {
                s.session = session;
                s.sessions += 1;
            });
        } else {
            debug!(seq, kept, "manifest applied");
        }
    }

    async fn announce(&self, seq: u64) {
        if self.modern() && lock(&self.listen).is_none() {
            // Nowhere to send it yet: the stream's opening sends it if the
            // edge's first read missed it.
            debug!(seq, "tools changed before the edge opened its listen stream");
            return;
        }
        let frame = self.list_changed_frame(seq);
        self.send(frame).await;
    }

    /// `notifications/tools/list_changed` with the seq, and on 2026-07-28 the
    /// listen stream it rides on.
    fn list_changed_frame(&self, seq: u64) -> String {
        BridgeCounters::bump(&self.shared.counters.list_changed_forwarded);
        info!(seq, "telling the edge the tools changed");
        let mut m = Map::new();
        m.insert(meta::SEQ.into(), Value::from(seq));
        if self.modern() {
            if let Some(id) = lock(&self.listen).clone() {
                m.insert(modern::SUBSCRIPTION_ID.into(), id);
            }
        }
        jsonrpc::notification(method::LIST_CHANGED, &json!({"_meta": m}))
    }

    async fn close(&self, code: CloseCode, reason: &str) {
        let frame = CloseFrame { code, reason: cut(reason, MAX_CLOSE_REASON).into() };
        if self.out.send(Message::Close(Some(frame))).await.is_err() {
            debug!("close frame not sent: the connection already ended");
        }
    }

    /// The connection is over: stop every call the edge can no longer hear.
    fn end(&self, end: &LinkEnd) {
        let calls: Vec<_> = lock(&self.calls).drain().collect();
        for (_, stop) in calls {
            let _ = stop.send(Stop::EdgeLost);
        }
        let reason = match end {
            LinkEnd::ServerExited(exit) => exit_reason(&self.server.name, exit),
            LinkEnd::EdgeLost(reason) => reason.clone(),
            LinkEnd::Shutdown => "tether bridge stopping".into(),
        };
        self.shared.status.send_modify(|s| {
            s.session = None;
            s.last_close = Some(reason);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_reasons_fit_a_close_frame_at_a_character_boundary() {
        assert_eq!(cut("short", 123), "short");
        let long = "é".repeat(100); // 200 bytes
        let c = cut(&long, 123);
        assert!(c.len() <= 123 && c.len() >= 121, "{}", c.len());
        let exit_line = exit_reason(&"x".repeat(200), &crate::server::Exit::for_tests());
        assert!(exit_line.len() <= MAX_CLOSE_REASON);
        assert!(exit_line.starts_with("MCP server xxx"));
    }
}
