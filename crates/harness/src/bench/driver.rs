//! The independent bench's load driver: its own process, raw pre-built
//! frames, several backend links, closed-loop.
//!
//! Each in-flight slot sends one `tools/call` (the slot number is its
//! JSON-RPC id, so no id is ever in flight twice on a link), waits for its
//! answer and sends the next, round-robin over the sessions with each
//! session's own user credential. Nothing goes through tether-core: parsing
//! a response is reading its id and whether it is an error.
//!
//! A [`Shape`] other than plain measures the write contract: each call with
//! a fresh idempotency key, each one approved (the call, `approvals/decide`,
//! the call again with its grant), or each one a task (the call made as a
//! task, then `tasks/result`). Latency is the whole sequence's.
//!
//! [`Shape::Mcp`] drives the MCP door instead: each slot holds one HTTP/1.1
//! connection and POSTs a pre-built 2026-07-28 `tools/call` (stateless: the
//! envelope in `_meta`, the user's own token as the bearer) to its session's
//! `/mcp/sessions/{id}`, reading only the status and whether the body is a
//! result. [`Shape::McpSession`] does the same in 2025-11-25 sessions: each
//! slot first opens one MCP session per device it calls (`initialize`,
//! `notifications/initialized`), then sends `Mcp-Session-Id` with every call
//! and reads its answer's event stream. No MCP SDK: a heavy client would
//! saturate before the server.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::fleet::FleetSession;
use crate::error::HarnessError;

/// What one measured call is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// One `tools/call`.
    #[default]
    Plain,
    /// One `tools/call` with a fresh idempotency key: a fingerprint, a key and a receipt.
    Keyed,
    /// A call that needs approval: refused with its approval id, decided, called again with the grant.
    Approved,
    /// A call made as a task (the device answers its task), then `tasks/result`.
    Task,
    /// One `tools/call` over `/mcp` (2026-07-28, stateless), not the backend link.
    Mcp,
    /// One `tools/call` over `/mcp` in a 2025-11-25 session (`initialize`
    /// first, then `Mcp-Session-Id` on every request; answers as event streams).
    McpSession,
}

impl Shape {
    /// Its name in flags and tables.
    pub const fn name(self) -> &'static str {
        match self {
            Shape::Plain => "plain",
            Shape::Keyed => "keyed",
            Shape::Approved => "approved",
            Shape::Task => "task",
            Shape::Mcp => "mcp",
            Shape::McpSession => "mcp-session",
        }
    }

    /// Whether the call goes through `/mcp` (either revision).
    pub const fn is_mcp(self) -> bool {
        matches!(self, Shape::Mcp | Shape::McpSession)
    }
}

impl std::str::FromStr for Shape {
    type Err = String;
    fn from_str(s: &str) -> Result<Shape, String> {
        [Shape::Plain, Shape::Keyed, Shape::Approved, Shape::Task, Shape::Mcp, Shape::McpSession]
            .into_iter()
            .find(|shape| shape.name() == s)
            .ok_or_else(|| format!("unknown call shape {s} (plain, keyed, approved, task, mcp, mcp-session)"))
    }
}

/// What the driver process runs.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// `ws://host:port` of the server under test.
    pub url: String,
    /// The backend link's service token.
    pub backend_token: String,
    /// The sessions to call, each with its user's credential.
    pub sessions: Vec<FleetSession>,
    /// The tool name to call (`client__op` on tether, `op` on the relay).
    pub tool: String,
    /// Backend links (sockets).
    pub links: usize,
    /// Calls in flight across all links.
    pub in_flight: usize,
    /// What each call is.
    pub shape: Shape,
    /// Unmeasured warm-up before the window.
    pub warmup: Duration,
    /// The measured window.
    pub window: Duration,
}

/// What the driver saw in the measured window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DriverReport {
    /// Calls answered with a result.
    pub calls: u64,
    /// Calls answered with an error (or never answered).
    pub errors: u64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
}

#[derive(Deserialize)]
struct Answer<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// One session's call frame around its id: `{prefix}{id}{suffix}`.
struct Frame {
    prefix: &'static str,
    suffix: String,
}

fn frames(cfg: &DriverConfig) -> Vec<Frame> {
    cfg.sessions
        .iter()
        .map(|s| Frame {
            prefix: r#"{"jsonrpc":"2.0","id":"#,
            suffix: format!(
                r#","method":"tools/call","params":{{"session":{},"name":{},"arguments":{{"n":1}},"_meta":{{"credential":{},"budget_ms":12000}}}}}}"#,
                serde_json::Value::from(s.session.as_str()),
                serde_json::Value::from(cfg.tool.as_str()),
                serde_json::Value::from(s.credential.as_str()),
            ),
        })
        .collect()
}

/// A keyed call's frame, as cheap to make as a plain one: the key goes in
/// before the three closing braces (of `_meta`, `params` and the frame), with
/// no JSON tree. A driver that builds a tree per call is slower than the
/// server it measures, which then idles and wakes between calls.
fn keyed_frame(frame: &Frame, id: usize, link: usize, key: u64) -> String {
    let open = &frame.suffix[..frame.suffix.len() - 3];
    format!("{}{id}{open},\"idempotency_key\":\"k{link}-{key}\"}}}}}}", frame.prefix)
}

/// Where a slot's sequence is, for shapes of more than one request.
#[derive(Debug, Clone)]
enum Step {
    /// The call itself.
    Call,
    /// `approvals/decide` of the approval the call was refused for.
    Decide(String),
    /// The call again, with its grant.
    Granted(String),
    /// `tasks/result` of the task the call became.
    Outcome(String),
}

/// The request a slot sends next (plain calls use the pre-built [`Frame`]s).
fn shaped_request(cfg: &Shaped<'_>, id: usize, session: &FleetSession, step: &Step, key: u64) -> String {
    let (method, params) = match step {
        Step::Call | Step::Granted(_) => {
            let mut meta = serde_json::json!({"credential": session.credential, "budget_ms": 12000});
            match (cfg.shape, step) {
                (Shape::Keyed, _) => meta["idempotency_key"] = format!("k{}-{key}", cfg.link).into(),
                (Shape::Approved, Step::Granted(grant)) => {
                    meta["tether.dev/approval_required"] = true.into();
                    meta["tether.dev/approval"] = grant.as_str().into();
                }
                (Shape::Approved, _) => meta["tether.dev/approval_required"] = true.into(),
                (Shape::Task, _) => meta["tether.dev/task"] = serde_json::json!({}),
                _ => {}
            }
            let params = serde_json::json!({"session": session.session, "name": cfg.tool, "arguments": {"n": 1}, "_meta": meta});
            ("tools/call", params)
        }
        Step::Decide(approval) => {
            let params = serde_json::json!({"session": session.session, "approval": approval, "approve": true, "_meta": {"credential": session.credential}});
            ("approvals/decide", params)
        }
        Step::Outcome(task) => {
            let params = serde_json::json!({"session": session.session, "task": task, "_meta": {"credential": session.credential}});
            ("tasks/result", params)
        }
    };
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// What a sequence does after an answer: the next step, or done (true: a result).
fn after(shape: Shape, step: &Step, text: &str, failed: bool) -> Result<Step, bool> {
    let read = || serde_json::from_str::<serde_json::Value>(text).unwrap_or_default();
    match (shape, step) {
        (Shape::Approved, Step::Call) if failed => {
            let answer = read();
            let data = &answer["error"]["data"];
            match (data["kind"].as_str(), data["approval"].as_str()) {
                (Some("approval_required"), Some(id)) => Ok(Step::Decide(id.to_owned())),
                _ => Err(false),
            }
        }
        (Shape::Approved, Step::Decide(id)) if !failed => Ok(Step::Granted(id.clone())),
        (Shape::Task, Step::Call) if !failed => {
            // The backend response's `result` is the CallToolResult, whose `_meta` names the task.
            match read()["result"]["result"]["_meta"]["tether.dev/task"]["task"].as_str() {
                Some(task) => Ok(Step::Outcome(task.to_owned())),
                None => Err(false),
            }
        }
        (Shape::Approved, Step::Call) => Err(false),
        _ => Err(!failed),
    }
}

/// A link's view of the shape.
struct Shaped<'a> {
    shape: Shape,
    tool: &'a str,
    link: usize,
}

/// Drives load; `marks` is told `"measuring"` when the window opens and
/// `"done"` when it closes (the parent samples the server's counters then).
pub async fn run(cfg: DriverConfig, marks: impl Fn(&str)) -> Result<DriverReport, HarnessError> {
    if cfg.sessions.is_empty() {
        return Err(HarnessError::Peer("the driver was given no sessions".into()));
    }
    let frames = std::sync::Arc::new(frames(&cfg));
    let sessions = std::sync::Arc::new(cfg.sessions.clone());
    let links = cfg.links.max(1).min(cfg.in_flight.max(1));
    let start = Instant::now();
    let open = start + cfg.warmup;
    let close = open + cfg.window;
    let mut tasks = tokio::task::JoinSet::new();
    if cfg.shape.is_mcp() {
        let calls = std::sync::Arc::new(McpCalls::of(&cfg));
        let slots = cfg.in_flight.max(1);
        for slot in 0..slots {
            let calls = std::sync::Arc::clone(&calls);
            tasks.spawn(mcp_slot(cfg.url.clone(), calls, (slot, slots), open, close));
        }
    } else {
        for l in 0..links {
            let slots = cfg.in_flight / links + usize::from(l < cfg.in_flight % links);
            let (url, token, frames) =
                (cfg.url.clone(), cfg.backend_token.clone(), std::sync::Arc::clone(&frames));
            let first = l * 7919;
            let shaped = (cfg.shape, cfg.tool.clone(), std::sync::Arc::clone(&sessions), l);
            tasks.spawn(link(url, token, frames, shaped, slots, first, open, close));
        }
    }
    tokio::time::sleep_until(open).await;
    marks("measuring");
    tokio::time::sleep_until(close).await;
    marks("done");
    let mut report = DriverReport::default();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    while let Some(done) = tasks.join_next().await {
        let (calls, errors, h) = done.map_err(|e| HarnessError::Peer(format!("driver link task: {e}")))??;
        report.calls += calls;
        report.errors += errors;
        all.add(h).map_err(|e| HarnessError::Peer(format!("histogram: {e}")))?;
    }
    report.p50_us = all.value_at_quantile(0.5);
    report.p99_us = all.value_at_quantile(0.99);
    Ok(report)
}

/// One backend link with `slots` calls in flight; counts what lands in [open, close).
#[allow(clippy::too_many_arguments)] // one link's whole setup, spawned once
async fn link(
    url: String,
    token: String,
    frames: std::sync::Arc<Vec<Frame>>,
    (shape, tool, sessions, link): (Shape, String, std::sync::Arc<Vec<FleetSession>>, usize),
    slots: usize,
    first: usize,
    open: Instant,
    close: Instant,
) -> Result<(u64, u64, Histogram<u64>), HarnessError> {
    let shaped = Shaped { shape, tool: &tool, link };
    let mut request = format!("{url}/v1/backend")
        .into_client_request()
        .map_err(|e| HarnessError::Peer(format!("driver url: {e}")))?;
    let bearer = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|e| HarnessError::Peer(format!("driver token: {e}")))?;
    request.headers_mut().insert("authorization", bearer);
    let config = WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
        .await
        .map_err(|e| HarnessError::Peer(format!("driver could not connect: {e}")))?;
    let mut tally = Tally::new()?;
    let mut sent = vec![Instant::now(); slots];
    // Per slot: the session its sequence calls, and where the sequence is.
    let mut at_session = vec![0usize; slots];
    let mut steps = vec![Step::Call; slots];
    let mut keys = 0u64;
    let mut next = first;
    let n = frames.len();
    let mut frame = |slot: usize, next: &mut usize, at_session: &mut [usize], step: &Step| {
        if matches!(step, Step::Call) {
            *next = (*next + 7919) % n;
            at_session[slot] = *next;
        }
        if shape == Shape::Plain {
            let f = &frames[*next];
            return format!("{}{slot}{}", f.prefix, f.suffix);
        }
        keys += 1;
        if shape == Shape::Keyed {
            return keyed_frame(&frames[*next], slot, link, keys);
        }
        shaped_request(&shaped, slot, &sessions[at_session[slot]], step, keys)
    };
    for (slot, at) in sent.iter_mut().enumerate() {
        *at = Instant::now();
        ws.feed(Message::text(frame(slot, &mut next, &mut at_session, &Step::Call)))
            .await
            .map_err(|e| HarnessError::Peer(e.to_string()))?;
    }
    ws.flush().await.map_err(|e| HarnessError::Peer(e.to_string()))?;
    let mut outstanding = slots;
    // Answers still owed after the window get this long; past it they count as errors.
    let drain_until = close + Duration::from_secs(15);
    while outstanding > 0 {
        let message = tokio::select! {
            m = ws.next() => m,
            () = tokio::time::sleep_until(drain_until) => break,
        };
        let Some(Ok(Message::Text(text))) = message else {
            if matches!(message, Some(Ok(_))) {
                continue;
            }
            break;
        };
        let Ok(answer) = serde_json::from_str::<Answer<'_>>(text.as_str()) else { continue };
        let Some(slot) = answer.id.and_then(|id| usize::try_from(id).ok()).filter(|s| *s < slots) else {
            continue; // a notification (session events) or a stray
        };
        let now = Instant::now();
        match after(shape, &steps[slot], text.as_str(), answer.error.is_some()) {
            // The sequence goes on: its next request, its clock still running.
            Ok(step) => {
                let follow_up = frame(slot, &mut next, &mut at_session, &step);
                steps[slot] = step;
                if ws.send(Message::text(follow_up)).await.is_err() {
                    break;
                }
                continue;
            }
            Err(ok) => tally.land(sent[slot], now, ok, (open, close)),
        }
        if now >= close {
            outstanding -= 1;
            continue;
        }
        sent[slot] = now;
        steps[slot] = Step::Call;
        if ws.send(Message::text(frame(slot, &mut next, &mut at_session, &Step::Call))).await.is_err() {
            break;
        }
    }
    tally.errors += u64::try_from(outstanding).unwrap_or(0);
    let _ = ws.close(None).await;
    Ok(tally.into_parts())
}

/// The MCP calls, built once: one body and tool for all, each session's path and bearer.
struct McpCalls {
    tool: String,
    /// Whether calls go in 2025-11-25 sessions ([`Shape::McpSession`]).
    in_sessions: bool,
    body: bytes::Bytes,
    /// Per session: `/mcp/sessions/{id}` and `Bearer <its user's token>`.
    sessions: Vec<(String, String)>,
}

impl McpCalls {
    /// The `tools/call` to every session, pinned to its device: 2026-07-28's
    /// carries its envelope in `_meta`, 2025-11-25's rides its MCP session.
    fn of(cfg: &DriverConfig) -> McpCalls {
        let in_sessions = cfg.shape == Shape::McpSession;
        let body = if in_sessions {
            serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": cfg.tool, "arguments": {"n": 1}},
            })
        } else {
            serde_json::json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": cfg.tool, "arguments": {"n": 1}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "tether-bench-driver", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                }},
            })
        };
        let sessions = cfg
            .sessions
            .iter()
            .map(|s| (format!("/mcp/sessions/{}", s.session), format!("Bearer {}", s.credential)))
            .collect();
        McpCalls { tool: cfg.tool.clone(), in_sessions, body: bytes::Bytes::from(body.to_string()), sessions }
    }
}

/// What one link or slot measured: answers landing in the window, by outcome.
struct Tally {
    calls: u64,
    errors: u64,
    latency: Histogram<u64>,
}

impl Tally {
    fn new() -> Result<Tally, HarnessError> {
        Ok(Tally { calls: 0, errors: 0, latency: Histogram::new_with_bounds(1, 60_000_000, 3)? })
    }

    /// Counts an answer to a request sent at `sent`, if both fall in [open, close).
    fn land(&mut self, sent: Instant, now: Instant, ok: bool, (open, close): (Instant, Instant)) {
        if sent < open || now >= close {
            return;
        }
        if ok {
            self.calls += 1;
            let us = u64::try_from(now.duration_since(sent).as_micros()).unwrap_or(u64::MAX);
            let _ = self.latency.record(us.max(1));
        } else {
            self.errors += 1;
        }
    }

    fn into_parts(self) -> (u64, u64, Histogram<u64>) {
        (self.calls, self.errors, self.latency)
    }
}

/// Whether an MCP answer is a tool result that is not an error.
fn mcp_ok(status: http::StatusCode, body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    status.is_success() && text.contains("\"result\"") && !text.contains("\"isError\":true")
}

/// The driver's HTTP/1.1 connection to `/mcp`.
type McpSender = hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// POSTs `body` to `path` with `headers`; the status, the response headers and the whole body.
async fn mcp_post(
    sender: &mut McpSender,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: bytes::Bytes,
) -> Result<(http::StatusCode, http::HeaderMap, bytes::Bytes), HarnessError> {
    use http_body_util::BodyExt;
    let mut request = http::Request::post(path)
        .header(http::header::HOST, host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(http_body_util::Full::new(body))
        .map_err(|e| HarnessError::Peer(format!("driver request: {e}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| HarnessError::Peer(format!("driver lost its /mcp connection: {e}")))?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    Ok((parts.status, parts.headers, body))
}

/// Opens a 2025-11-25 MCP session on `path` (`initialize`, then
/// `notifications/initialized`): its `Mcp-Session-Id`.
async fn mcp_session(
    sender: &mut McpSender,
    host: &str,
    path: &str,
    bearer: &str,
) -> Result<String, HarnessError> {
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "tether-bench-driver", "version": "1"}},
    });
    let auth = [("authorization", bearer)];
    let (status, headers, body) = mcp_post(sender, host, path, &auth, initialize.to_string().into()).await?;
    let id = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Some(id) = id.filter(|_| status.is_success()) else {
        let text = String::from_utf8_lossy(&body);
        return Err(HarnessError::Peer(format!(
            "/mcp initialize answered {status} without a session: {text}"
        )));
    };
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let headers =
        [("authorization", bearer), ("mcp-session-id", id.as_str()), ("mcp-protocol-version", "2025-11-25")];
    let (status, _, _) = mcp_post(sender, host, path, &headers, initialized.to_string().into()).await?;
    if !status.is_success() {
        return Err(HarnessError::Peer(format!("/mcp notifications/initialized answered {status}")));
    }
    Ok(id)
}

/// One slot over `/mcp`: its own connection, one call at a time; counts what
/// lands in [open, close). Slot `k` of `n` calls the sessions `k, k + n, …`
/// in turn (each session in one slot, so a 2025-11-25 MCP session per device).
async fn mcp_slot(
    url: String,
    calls: std::sync::Arc<McpCalls>,
    (slot, slots): (usize, usize),
    open: Instant,
    close: Instant,
) -> Result<(u64, u64, Histogram<u64>), HarnessError> {
    let addr = url.trim_start_matches("ws://").trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| HarnessError::Peer(format!("driver could not connect to {addr}: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| HarnessError::Peer(format!("driver http handshake: {e}")))?;
    tokio::spawn(conn);
    let mut mine = Vec::new();
    for (path, bearer) in calls.sessions.iter().skip(slot).step_by(slots) {
        let session =
            if calls.in_sessions { Some(mcp_session(&mut sender, &addr, path, bearer).await?) } else { None };
        mine.push((path.as_str(), bearer.as_str(), session));
    }
    let mut tally = Tally::new()?;
    for (path, bearer, session) in mine.iter().cycle() {
        if Instant::now() >= close {
            break;
        }
        let headers: Vec<(&str, &str)> = match session {
            Some(id) => vec![
                ("authorization", bearer),
                ("mcp-session-id", id),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            // 2026-07-28's standard headers: what the body says, for routers that do not parse it.
            None => vec![
                ("authorization", bearer),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", calls.tool.as_str()),
            ],
        };
        let sent = Instant::now();
        let (status, _, body) = mcp_post(&mut sender, &addr, path, &headers, calls.body.clone()).await?;
        let ok = mcp_ok(status, &body);
        if !ok && tally.errors == 0 && slot == 0 {
            // The first failure says why; the count says how often.
            let text = String::from_utf8_lossy(&body);
            eprintln!("bench-driver: /mcp answered {status}: {}", text.chars().take(400).collect::<String>());
        }
        tally.land(sent, Instant::now(), ok, (open, close));
    }
    Ok(tally.into_parts())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyed_frame_is_the_plain_call_with_its_own_key() {
        let session = FleetSession { session: "s-1".into(), credential: "c\"1".into() };
        let cfg = DriverConfig {
            url: String::new(),
            backend_token: String::new(),
            sessions: vec![session],
            tool: "client__op".into(),
            links: 1,
            in_flight: 1,
            shape: Shape::Keyed,
            warmup: Duration::ZERO,
            window: Duration::ZERO,
        };
        let frame = &frames(&cfg)[0];
        let keyed: serde_json::Value =
            serde_json::from_str(&keyed_frame(frame, 7, 2, 41)).unwrap_or_else(|e| panic!("{e}"));
        let plain: serde_json::Value = serde_json::from_str(&format!("{}7{}", frame.prefix, frame.suffix))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keyed["params"]["_meta"]["idempotency_key"], "k2-41");
        let mut without = keyed.clone();
        if let Some(meta) = without["params"]["_meta"].as_object_mut() {
            meta.remove("idempotency_key");
        }
        assert_eq!(without, plain);
    }

    #[test]
    fn an_mcp_answer_counts_only_as_a_result_that_is_not_an_error() {
        let ok = br#"event: message
data: {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}"#;
        assert!(mcp_ok(http::StatusCode::OK, ok));
        assert!(!mcp_ok(
            http::StatusCode::OK,
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#
        ));
        assert!(!mcp_ok(
            http::StatusCode::OK,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#
        ));
        assert!(!mcp_ok(http::StatusCode::UNAUTHORIZED, b"{\"result\":1}"));
    }
}
