//! `tether bridge` against MCP servers nobody here wrote — a server on the
//! official Python SDK (`mcp` 2.3.0, tests/mcp-servers/python/server.py) and
//! the reference `@modelcontextprotocol/server-everything` — through a real
//! edge on 127.0.0.1:0, with tether-core as the agent backend.
//!
//! Setup (the tests fail, never skip, without it):
//!   python3 -m venv .venv && .venv/bin/pip install -r tests/mcp-servers/python/requirements.txt
//!   npm ci --prefix tests/mcp-servers
//! `TETHER_TEST_PYTHON` may name another Python that has `mcp` 2.3.0.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use common::{capture_logs, test_config, user, wait_until, LiveEdge, WAIT_LIMIT};
use tether_bridge::{Bridge, BridgeConfig, BridgeStatus, DeadlinePolicy, Lifecycle};
use tether_contract::tasks::{TaskState, TaskStatus};
use tether_contract::{Budgets, ErrorKind};
use tether_core::{Notification, Turn};

const PY_INSTRUCTIONS: &str = "Tether test server on the Python MCP SDK. Call `echo` to hear a message back; `slow` waits the seconds it is given.";
const PY_TOOLS: [&str; 7] = [
    "client__abandon",
    "client__echo",
    "client__enable_extra",
    "client__fail",
    "client__reject",
    "client__slow",
    "client__trace",
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

use common::python;

/// A file the Python server notes its `slow` tool's cancellations in; removed on drop.
struct Record(PathBuf);

impl Record {
    fn new(test: &str) -> Record {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let path =
            std::env::temp_dir().join(format!("tether-bridge-{test}-{}-{nanos}.log", std::process::id()));
        Record(path)
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The Python server's command line, noting into `record`.
fn python_server(record: &Record) -> Vec<String> {
    let script = repo().join("tests/mcp-servers/python/server.py");
    vec![python(), script.display().to_string(), "--record".into(), record.0.display().to_string()]
}

/// server-everything's command line (installed by `npm ci --prefix tests/mcp-servers`).
fn everything() -> Vec<String> {
    let script =
        repo().join("tests/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = std::process::Command::new("node").arg("--version").output();
    assert!(
        script.exists() && node.is_ok_and(|o| o.status.success()),
        "server-everything is not installed (needs node and {}). Install it from the repository root:\n  npm ci --prefix tests/mcp-servers",
        script.display()
    );
    vec!["node".into(), script.display().to_string(), "stdio".into()]
}

fn config(edge: &LiveEdge, command: Vec<String>) -> BridgeConfig {
    BridgeConfig::new(&edge.url, edge.client_token("mira"), command)
}

/// Waits (bounded) until the bridge's status satisfies `pred`.
async fn status_until(bridge: &Bridge, pred: impl FnMut(&BridgeStatus) -> bool) -> BridgeStatus {
    let mut status = bridge.status();
    let reached = async { status.wait_for(pred).await.map(|s| s.clone()) };
    tokio::time::timeout(WAIT_LIMIT, reached)
        .await
        .expect("bridge status not reached in time")
        .expect("bridge ended")
}

/// Waits (bounded) until the bridge's device is listed at the edge; returns its session.
async fn session(bridge: &Bridge) -> String {
    status_until(bridge, |s| s.session.is_some()).await.session.unwrap()
}

/// Waits (bounded) for the next backend notification that `pred` picks.
async fn notification(
    rx: &mut mpsc::Receiver<Notification>,
    mut pred: impl FnMut(&Notification) -> bool,
) -> Notification {
    let wait = async {
        loop {
            let n = rx.recv().await.expect("backend link closed");
            if pred(&n) {
                return n;
            }
        }
    };
    tokio::time::timeout(WAIT_LIMIT, wait).await.expect("notification not seen in time")
}

fn names(turn: &Turn<'_>) -> Vec<String> {
    let mut n: Vec<_> = turn.tools().iter().map(|t| t.name.clone()).collect();
    n.sort();
    n
}

fn text(result: &tether_contract::mcp::CallToolResult) -> &str {
    result.first_text().unwrap_or_default()
}

/// An edge whose `tool_call` leg is 2.5 s (the device's own 2 s ceiling must fit inside it).
async fn edge_with_short_leg() -> LiveEdge {
    let mut config = test_config();
    config.budgets = Budgets { tool_call: Duration::from_millis(2_500), ..Budgets::default() };
    LiveEdge::start_with(config).await
}

fn kill(pid: u32) {
    let status = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill -9 {pid}");
}

#[tokio::test]
async fn a_python_sdk_server_is_a_device_its_tools_namespaced_its_instructions_in_context_and_its_stderr_logged(
) {
    let (_, logs) = capture_logs(async {
        let edge = LiveEdge::start().await;
        let record = Record::new("basics");
        let bridge = Bridge::start(config(&edge, python_server(&record))).unwrap();
        let session = session(&bridge).await;
        let status = bridge.status().borrow().clone();
        assert_eq!(
            status.protocol.as_deref(),
            Some("2026-07-28"),
            "the Python SDK speaks the modern revision"
        );

        let link = edge.backend().await;
        let mut turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;
        assert!(turn.degraded().is_none(), "{:?}", turn.degraded());
        assert_eq!(names(&turn), PY_TOOLS);
        let manifest = turn.manifest().unwrap();
        assert_eq!(manifest.instructions.as_deref(), Some(PY_INSTRUCTIONS));
        let block = turn.context_block(tether_core::CONTEXT_MAX_BYTES).unwrap();
        assert!(block.contains("Tether test server on the Python MCP SDK"), "{block}");
        let listed = link.sessions(&common::operator(), Duration::from_secs(5)).await.unwrap();
        let ours = listed.sessions.iter().find(|s| s.session == session).unwrap();
        assert_eq!(ours.server_info["name"], json!("tether-python-test"));
        assert_eq!(ours.protocol_version, "2026-07-28", "the bridge speaks what its server speaks");

        // A call through core gets the server's real answer, stamped with the bridge's seq.
        let result = turn.call("client__echo", json!({"message": "hi"})).await.unwrap();
        assert_eq!(text(&result), "Echo: hi");
        assert_eq!(result.seq(), Some(1));

        // A JSON-RPC error from the server is a structured client error, never silence.
        let err = turn.call("client__reject", json!({"reason": "no"})).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::ClientError);
        assert_eq!(err.detail("code"), Some(&json!("server_error")));
        assert_eq!(err.detail("retryable"), Some(&json!(false)));
        assert!(err.message.contains("the server refused: no"), "{}", err.message);
        assert_eq!(bridge.counters().try_get("calls_server_error"), Some(1));

        // A tool error with no code gets the one a tether device's isError result carries.
        let err = turn.call("client__fail", json!({"reason": "no"})).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::ClientError);
        assert_eq!(err.detail("code"), Some(&json!("tool_error")), "{err:?}");
        assert_eq!(err.detail("retryable"), Some(&json!(false)), "{err:?}");
        assert!(err.message.contains("the tool failed: no"), "{}", err.message);
        assert_eq!(bridge.counters().try_get("error_codes_filled"), Some(1));
        assert_eq!(bridge.counters().try_get("calls"), Some(3));

        // The agent's trace context reaches the server's handler through the edge and the bridge.
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let options = tether_core::CallOptions {
            traceparent: Some(traceparent.into()),
            tracestate: Some("agent=1".into()),
            ..tether_core::CallOptions::default()
        };
        let result = turn.call_with("client__trace", json!({}), options).await.unwrap();
        assert_eq!(text(&result), format!("{traceparent} agent=1"));
        bridge.stop().await.unwrap();
    })
    .await;
    // The server's stderr is in the bridge's log, line by line, under the mcp_server target.
    let line = logs.lines().find(|l| l.contains("tether python test server starting")).unwrap_or_else(|| {
        panic!("the server's stderr line is not in the bridge's log:\n{logs}");
    });
    assert!(line.contains("mcp_server:") && line.contains("server=python"), "{line}");
}

#[tokio::test]
async fn a_server_list_changed_reaches_the_backend_as_a_new_manifest_in_both_eras() {
    for (lifecycle, revision) in [(Lifecycle::Auto, "2026-07-28"), (Lifecycle::Legacy, "2025-11-25")] {
        let edge = LiveEdge::start().await;
        let record = Record::new("list-changed");
        let mut cfg = config(&edge, python_server(&record));
        cfg.lifecycle = lifecycle;
        let bridge = Bridge::start(cfg).unwrap();
        let session = session(&bridge).await;
        assert_eq!(bridge.status().borrow().protocol.as_deref(), Some(revision));
        let link = edge.backend().await;
        let mut events = link.notifications().unwrap();
        let listed = link.sessions(&common::operator(), Duration::from_secs(5)).await.unwrap().sessions;
        let ours = listed.iter().find(|s| s.session == session).unwrap();
        assert_eq!(ours.protocol_version, revision, "the edge hears the server's revision");
        let mut turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;
        assert!(!names(&turn).contains(&"client__extra".to_owned()));

        let result = turn.call("client__enable_extra", json!({})).await.unwrap();
        assert_eq!(text(&result), "extra enabled", "{revision}");
        let changed =
            notification(&mut events, |n| matches!(n, Notification::ListChanged(c) if c.session == session))
                .await;
        let Notification::ListChanged(changed) = changed else { unreachable!() };
        assert!(changed.seq >= 2, "{revision}: the change moved the seq: {changed:?}");

        // A new turn sees the new tool and can call it.
        let mut turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;
        assert!(names(&turn).contains(&"client__extra".to_owned()), "{revision}: {:?}", names(&turn));
        let result = turn.call("client__extra", json!({})).await.unwrap();
        assert_eq!(text(&result), "extra!");
        assert!(bridge.counters().try_get("list_changed_forwarded").unwrap() >= 1);
        // Announced at the upgrade (no initialize tried first), and the listen stream stayed open.
        assert_eq!(edge.hub.counters().get("revision_fallbacks"), 0, "{revision}");
        assert_eq!(edge.hub.counters().get("subscriptions_ended"), 0, "{revision}");
        bridge.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_call_past_its_deadline_is_cancelled_on_the_server_and_answered_as_a_structured_timeout() {
    let edge = edge_with_short_leg().await;
    let record = Record::new("deadline");
    let bridge = Bridge::start(config(&edge, python_server(&record))).unwrap();
    let session = session(&bridge).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;

    let err = turn.call("client__slow", json!({"seconds": 30})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ClientError, "the bridge answered before the edge's leg: {err:?}");
    assert_eq!(err.detail("code"), Some(&json!("server_timeout")));
    assert_eq!(err.detail("retryable"), Some(&json!(true)));
    assert!(err.message.contains("2500 ms"), "{}", err.message);
    // The server saw the cancellation rmcp sent.
    wait_until(|| record.text().contains("slow cancelled")).await;
    assert!(!record.text().contains("slow finished"));
    assert_eq!(bridge.counters().try_get("calls_timed_out"), Some(1));
    assert_eq!(edge.hub.counters().get("call_timeouts"), 0, "the edge's leg never expired");
    bridge.stop().await.unwrap();
}

#[tokio::test]
async fn a_call_the_edge_cancels_reaches_the_server_as_a_cancellation() {
    let edge = edge_with_short_leg().await;
    let record = Record::new("edge-cancel");
    let mut cfg = config(&edge, python_server(&record));
    cfg.deadline = DeadlinePolicy::Edge;
    let bridge = Bridge::start(cfg).unwrap();
    let session = session(&bridge).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;

    let err = turn.call("client__slow", json!({"seconds": 30})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert_eq!(err.detail("leg"), Some(&json!("tool_call")));
    assert_eq!(edge.hub.counters().get("cancels_sent"), 1);
    wait_until(|| record.text().contains("slow cancelled")).await;
    wait_until(|| bridge.counters().try_get("calls_cancelled_by_edge") == Some(1)).await;
    assert_eq!(bridge.counters().try_get("calls_cancelled_by_edge"), Some(1));
    assert_eq!(bridge.counters().try_get("calls_backstopped"), Some(0));
    bridge.stop().await.unwrap();
}

#[tokio::test]
async fn a_call_the_server_cancels_itself_is_answered_as_a_structured_error() {
    let edge = LiveEdge::start().await;
    let record = Record::new("abandon");
    let mut cfg = config(&edge, python_server(&record));
    // On the initialize era a server's notifications/cancelled reaches the client handler.
    cfg.lifecycle = Lifecycle::Legacy;
    let bridge = Bridge::start(cfg).unwrap();
    let session = session(&bridge).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;

    let started = tokio::time::Instant::now();
    let err = turn.call("client__abandon", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ClientError, "{err:?}");
    assert_eq!(err.detail("code"), Some(&json!("cancelled_by_server")));
    assert_eq!(err.detail("retryable"), Some(&json!(true)));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "answered at once, not at the server's 5 s or the deadline"
    );
    assert!(record.text().contains("abandon cancelled"));
    assert_eq!(bridge.counters().try_get("calls_abandoned_by_server"), Some(1));
    bridge.stop().await.unwrap();
}

#[tokio::test]
async fn only_a_refused_credential_or_a_command_that_cannot_start_stops_the_bridge() {
    let edge = LiveEdge::start().await;
    let record = Record::new("fatal");
    let refused = Bridge::start(BridgeConfig::new(&edge.url, "not-a-token", python_server(&record))).unwrap();
    let ended = tokio::time::timeout(WAIT_LIMIT, refused.join()).await.unwrap();
    assert!(matches!(ended, Err(tether_bridge::BridgeError::Refused { status: 401 })), "{ended:?}");

    let missing = vec!["/nonexistent/mcp-server".to_owned()];
    let failed = Bridge::start(config(&edge, missing)).unwrap();
    let ended = tokio::time::timeout(WAIT_LIMIT, failed.join()).await.unwrap();
    assert!(matches!(ended, Err(tether_bridge::BridgeError::Spawn { .. })), "{ended:?}");

    let bad = BridgeConfig::new("http://127.0.0.1:1", "t", vec!["x".into()]);
    assert!(matches!(Bridge::start(bad), Err(tether_bridge::BridgeError::Config(_))));
    assert!(matches!(Bridge::start(config(&edge, vec![])), Err(tether_bridge::BridgeError::Config(_))));
}

/// What a stand-in edge saw: the revision the device announced at the upgrade,
/// the answer to its greeting, the close frame.
struct Greeted {
    announced: oneshot::Receiver<Option<String>>,
    answer: oneshot::Receiver<Value>,
    closed: oneshot::Receiver<Option<CloseFrame>>,
}

/// Accepts one device on `listener`, echoing `tether.v1`; reports the
/// `MCP-Protocol-Version` it announced.
async fn accept_device(
    listener: &tokio::net::TcpListener,
    announced: oneshot::Sender<Option<String>>,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let (tcp, _) = listener.accept().await.unwrap();
    #[allow(clippy::result_large_err)] // tungstenite's callback type, not ours
    let echo_protocol = |request: &Request, mut response: Response| {
        let header = request.headers().get("mcp-protocol-version");
        let _ = announced.send(header.and_then(|v| v.to_str().ok()).map(str::to_owned));
        response.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static("tether.v1"));
        Ok(response)
    };
    tokio_tungstenite::accept_hdr_async(tcp, echo_protocol).await.unwrap()
}

/// A stand-in edge that greets the device with `initialize` (as an edge that
/// predates 2026-07-28 would), hands back the answer, then reports the close
/// frame the device sends.
async fn greeting_edge() -> (String, Greeted) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let (greeted_tx, answer) = oneshot::channel();
    let (closed_tx, closed) = oneshot::channel();
    let (announced_tx, announced) = oneshot::channel();
    tokio::spawn(async move {
        let mut ws = accept_device(&listener, announced_tx).await;
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "stand-in", "version": "0"}}});
        ws.send(Message::text(init.to_string())).await.unwrap();
        let mut greeted_tx = Some(greeted_tx);
        while let Some(Ok(message)) = ws.next().await {
            match message {
                Message::Text(t) => {
                    if let Some(tx) = greeted_tx.take() {
                        let _ = tx.send(serde_json::from_str(t.as_str()).unwrap());
                    }
                }
                Message::Close(frame) => {
                    let _ = closed_tx.send(frame);
                    return;
                }
                _ => {}
            }
        }
    });
    (url, Greeted { announced, answer, closed })
}

#[tokio::test]
async fn a_crashed_server_closes_the_device_connection_with_a_reason_naming_its_exit() {
    let (url, Greeted { announced, answer, closed }) = greeting_edge().await;
    let record = Record::new("close-reason");
    let token = common::keys().issue("mira", "tether-client", Duration::from_secs(600)).unwrap();
    let bridge = Bridge::start(BridgeConfig::new(url, token, python_server(&record))).unwrap();
    let announced = tokio::time::timeout(WAIT_LIMIT, announced).await.unwrap().unwrap();
    assert_eq!(announced.as_deref(), Some("2026-07-28"), "the Python server's revision is announced");
    // An edge that greets with initialize anyway gets the 2025-11-25 answer.
    let answer = tokio::time::timeout(WAIT_LIMIT, answer).await.unwrap().unwrap();
    assert_eq!(answer["id"], json!(1));
    assert_eq!(answer["result"]["protocolVersion"], json!("2025-11-25"));
    assert_eq!(answer["result"]["serverInfo"]["name"], json!("tether-python-test"));
    assert_eq!(answer["result"]["capabilities"]["tools"]["listChanged"], json!(true));
    assert_eq!(answer["result"]["instructions"], json!(PY_INSTRUCTIONS));
    assert!(answer["result"].get("resultType").is_none(), "2025-11-25 shapes: {answer}");

    let pid = bridge.status().borrow().server_pid.unwrap();
    kill(pid);
    let frame = tokio::time::timeout(WAIT_LIMIT, closed).await.unwrap().unwrap().expect("a close frame");
    assert_eq!(u16::from(frame.code), 1011);
    assert_eq!(frame.reason.as_str(), "MCP server python exited (signal: 9 (SIGKILL))");
    bridge.stop().await.unwrap();
}

/// The next text frame from the device, as JSON (bounded).
async fn next_json(ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>) -> Value {
    let read = async {
        loop {
            match ws.next().await.expect("the device hung up").unwrap() {
                Message::Text(t) => return serde_json::from_str::<Value>(t.as_str()).unwrap(),
                Message::Close(frame) => panic!("the device closed: {frame:?}"),
                _ => {}
            }
        }
    };
    tokio::time::timeout(WAIT_LIMIT, read).await.expect("no frame from the device in time")
}

/// The 2026-07-28 envelope a 2026-07-28 edge puts in every request's `_meta`.
fn envelope(extra: Value) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "stand-in", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if let (Some(m), Value::Object(extra)) = (meta.as_object_mut(), extra) {
        m.extend(extra);
    }
    meta
}

#[tokio::test]
async fn a_2026_07_28_server_makes_a_2026_07_28_device_discovered_and_changes_on_the_listen_stream() {
    // A stand-in edge plays exactly the frames the edge sends a 2026-07-28 device.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let record = Record::new("modern-frames");
    let token = common::keys().issue("mira", "tether-client", Duration::from_secs(600)).unwrap();
    let bridge = Bridge::start(BridgeConfig::new(url, token, python_server(&record))).unwrap();
    let (announced_tx, announced) = oneshot::channel();
    let mut ws = tokio::time::timeout(WAIT_LIMIT, accept_device(&listener, announced_tx)).await.unwrap();
    assert_eq!(announced.await.unwrap().as_deref(), Some("2026-07-28"), "announced at the upgrade");

    let send = |v: Value| Message::text(v.to_string());
    ws.send(send(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": envelope(json!({"tether.dev/session": "s-1"}))}})))
        .await
        .unwrap();
    let discovered = next_json(&mut ws).await;
    assert_eq!(discovered["id"], json!(1), "{discovered}");
    let r = &discovered["result"];
    assert_eq!(r["resultType"], json!("complete"), "{discovered}");
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(r["capabilities"], json!({"tools": {"listChanged": true}}));
    assert_eq!(r["instructions"], json!(PY_INSTRUCTIONS));
    assert_eq!((&r["ttlMs"], &r["cacheScope"]), (&json!(0), &json!("private")));
    assert_eq!(r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], json!("tether-python-test"));
    assert!(r.get("protocolVersion").is_none() && r.get("serverInfo").is_none(), "{discovered}");

    ws.send(send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": envelope(json!({}))}}),
    ))
    .await
    .unwrap();
    let listed = next_json(&mut ws).await;
    let r = &listed["result"];
    assert_eq!(r["resultType"], json!("complete"), "{listed}");
    assert_eq!((&r["ttlMs"], &r["cacheScope"]), (&json!(0), &json!("private")));
    assert_eq!(r["tools"].as_array().unwrap().len(), PY_TOOLS.len());
    assert_eq!(r["_meta"]["tether.dev/seq"], json!(1));

    ws.send(send(json!({"jsonrpc": "2.0", "id": 3, "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": envelope(json!({}))}})))
        .await
        .unwrap();
    let ack = next_json(&mut ws).await;
    assert_eq!(
        ack,
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
            "_meta": {"io.modelcontextprotocol/subscriptionId": 3}, "notifications": {"toolsListChanged": true}}})
    );

    // A call completes; the change it makes rides the listen stream, tagged with it.
    ws.send(send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "enable_extra", "arguments": {}, "_meta": envelope(json!({"tether.dev/deadline_ms": 7000}))}})))
    .await
    .unwrap();
    let (mut result, mut changed) = (None, None);
    while result.is_none() || changed.is_none() {
        let frame = next_json(&mut ws).await;
        assert_ne!(frame["id"], json!(3), "the listen request stays open: {frame}");
        match frame["method"].as_str() {
            Some("notifications/tools/list_changed") => changed = Some(frame),
            None if frame["id"] == json!(4) => result = Some(frame),
            _ => panic!("unexpected {frame}"),
        }
    }
    let result = &result.unwrap()["result"];
    assert_eq!(result["resultType"], json!("complete"), "{result}");
    assert_eq!(result["content"][0]["text"], json!("extra enabled"));
    assert!(result["_meta"]["tether.dev/seq"].is_u64(), "{result}");
    let meta = &changed.unwrap()["params"]["_meta"];
    assert_eq!(meta["io.modelcontextprotocol/subscriptionId"], json!(3), "{meta}");
    assert!(meta["tether.dev/seq"].as_u64().unwrap() >= 2, "{meta}");

    ws.send(send(
        json!({"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"_meta": envelope(json!({}))}}),
    ))
    .await
    .unwrap();
    let pong = next_json(&mut ws).await;
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": 5, "result": {"resultType": "complete"}}));

    // Stopping closes the connection; the listen request is never answered.
    let stopping = tokio::spawn(bridge.stop());
    let rest = async {
        while let Some(Ok(message)) = ws.next().await {
            match message {
                Message::Text(t) => panic!("nothing after the stop but a close frame: {t}"),
                Message::Close(frame) => return frame,
                _ => {}
            }
        }
        None
    };
    let frame = tokio::time::timeout(WAIT_LIMIT, rest).await.unwrap().expect("a close frame");
    assert_eq!(u16::from(frame.code), 1001);
    drop(ws);
    stopping.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_killed_server_is_restarted_and_its_tools_declared_again_as_a_new_session() {
    let edge = LiveEdge::start().await;
    let record = Record::new("restart");
    let bridge = Bridge::start(config(&edge, python_server(&record))).unwrap();
    let first = session(&bridge).await;
    let link = edge.backend().await;
    let mut events = link.notifications().unwrap();
    let old_pid = bridge.status().borrow().server_pid.unwrap();

    kill(old_pid);
    let closed =
        notification(&mut events, |n| matches!(n, Notification::SessionClosed(c) if c.session == first))
            .await;
    assert!(matches!(closed, Notification::SessionClosed(ref c) if c.reason == "disconnected"), "{closed:?}");
    let status = status_until(&bridge, |s| s.sessions == 2 && s.session.is_some()).await;
    let second = status.session.unwrap();
    assert_ne!(second, first);
    assert_ne!(status.server_pid, Some(old_pid));
    assert_eq!(status.server_starts, 2);
    assert!(status.last_close.unwrap().contains("exited (signal: 9"), "the bridge knows why it closed");
    assert_eq!(bridge.counters().try_get("server_exits"), Some(1));

    let mut turn = Turn::begin(&link, &second, Some(&user("mira")), Budgets::default()).await;
    assert_eq!(names(&turn), PY_TOOLS, "the restarted server's tools are declared again");
    let result = turn.call("client__echo", json!({"message": "again"})).await.unwrap();
    assert_eq!(text(&result), "Echo: again");
    bridge.stop().await.unwrap();
}

/// A live edge on a fixed port (a restarted edge comes back where it was).
async fn edge_on(port: u16) -> LiveEdge {
    let mut config = test_config();
    config.listen = format!("127.0.0.1:{port}").parse().unwrap();
    for _ in 0..100 {
        // The previous edge's listener may still be closing.
        if let Ok(edge) = tether_edge::Edge::bind(config.clone()).await {
            let url = format!("ws://{}", edge.local_addr().unwrap());
            let (hub, shutdown, drain) = (edge.hub(), edge.shutdown_token(), edge.drain_token());
            let task = Some(tokio::spawn(edge.run()));
            return LiveEdge { url, hub, shutdown, drain, task };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("port {port} did not come free");
}

#[tokio::test]
async fn when_the_edge_goes_away_the_bridge_redials_and_the_server_keeps_running() {
    let first_edge = LiveEdge::start().await;
    let port: u16 = first_edge.url.rsplit(':').next().unwrap().parse().unwrap();
    let record = Record::new("redial");
    let bridge = Bridge::start(config(&first_edge, python_server(&record))).unwrap();
    let first = session(&bridge).await;
    let pid = bridge.status().borrow().server_pid;

    // The edge shuts down (devices get 1001) and comes back on the same address.
    first_edge.shutdown.cancel();
    drop(first_edge);
    let status = status_until(&bridge, |s| s.session.is_none()).await;
    assert!(status.last_close.unwrap().contains("1001"), "the bridge heard the edge go away");
    let edge = edge_on(port).await;
    let status = status_until(&bridge, |s| s.sessions == 2 && s.session.is_some()).await;
    assert_ne!(status.session.as_deref(), Some(first.as_str()));
    assert_eq!(status.server_pid, pid, "the server kept running");
    assert_eq!(status.server_starts, 1);
    assert!(bridge.counters().try_get("edge_disconnects").unwrap() >= 1);

    let link = edge.backend().await;
    let mut turn =
        Turn::begin(&link, status.session.as_deref().unwrap(), Some(&user("mira")), Budgets::default()).await;
    assert_eq!(names(&turn), PY_TOOLS, "the tools are declared again on the new connection");
    assert_eq!(text(&turn.call("client__echo", json!({"message": "back"})).await.unwrap()), "Echo: back");
    bridge.stop().await.unwrap();
}

#[tokio::test]
async fn server_everything_lists_its_tools_echoes_and_its_progress_is_harmless() {
    let (_, logs) = capture_logs(async {
        let edge = LiveEdge::start().await;
        let bridge = Bridge::start(config(&edge, everything())).unwrap();
        let session = session(&bridge).await;
        let protocol = bridge.status().borrow().protocol.clone();
        assert_eq!(protocol.as_deref(), Some("2025-11-25"), "server-everything is legacy-only");
        let link = edge.backend().await;
        let listed = link.sessions(&common::operator(), Duration::from_secs(5)).await.unwrap().sessions;
        let ours = listed.iter().find(|s| s.session == session).unwrap();
        assert_eq!(ours.protocol_version, "2025-11-25", "a legacy server makes a 2025-11-25 device");
        let mut turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;
        let manifest = turn.manifest().unwrap();
        assert_eq!(names(&turn).len(), 13, "{:?} (dropped: {:?})", names(&turn), manifest.dropped);
        assert!(manifest.dropped.is_empty());
        for tool in ["client__echo", "client__get_sum", "client__trigger_long_running_operation"] {
            assert!(names(&turn).contains(&tool.to_owned()), "{tool}: {:?}", names(&turn));
        }
        let instructions = manifest.instructions.unwrap_or_default();
        assert!(instructions.starts_with("# Everything Server"), "{instructions}");
        let block = turn.context_block(tether_core::CONTEXT_MAX_BYTES).unwrap();
        assert!(block.contains("Everything Server"), "its instructions reach the turn's context");

        let result = turn.call("client__echo", json!({"message": "hi"})).await.unwrap();
        assert_eq!(text(&result), "Echo: hi");
        let result = turn.call("client__get_sum", json!({"a": 2, "b": 40})).await.unwrap();
        assert!(text(&result).contains("42"), "{result:?}");
        // It reports progress on every step; the call still ends in its one result.
        let args = json!({"duration": 1, "steps": 3});
        let result = turn.call("client__trigger_long_running_operation", args).await.unwrap();
        assert!(!result.is_error && text(&result).contains("completed"), "{result:?}");
        bridge.stop().await.unwrap();
    })
    .await;
    let progress = logs.lines().filter(|l| l.contains("server progress")).count();
    assert_eq!(progress, 3, "one progress notification per step reached the bridge:\n{logs}");
}

#[tokio::test]
async fn the_tether_binary_bridges_a_server_from_the_command_line() {
    let edge = LiveEdge::start().await;
    let record = Record::new("cli");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["bridge", "--edge", &edge.url, "--token", &edge.client_token("mira")])
        .args(["--metrics", "127.0.0.1:0", "--"])
        .args(python_server(&record))
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The metrics address comes first on stdout (port 0 picked one).
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let announced = tokio::time::timeout(WAIT_LIMIT, out.next_line()).await.unwrap().unwrap().unwrap();
    let metrics_url = announced.rsplit(' ').next().unwrap().to_owned();
    assert!(metrics_url.starts_with("http://127.0.0.1:"), "{announced}");
    // The server's stderr comes out in the bridge's log.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (saw_tx, saw) = oneshot::channel();
    tokio::spawn(async move {
        let mut saw_tx = Some(saw_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("tether python test server starting") {
                if let Some(tx) = saw_tx.take() {
                    let _ = tx.send(line);
                }
            }
        }
    });
    let line = tokio::time::timeout(WAIT_LIMIT, saw).await.unwrap().unwrap();
    assert!(line.contains("mcp_server"), "{line}");

    let link = edge.backend().await;
    wait_until(|| edge.hub.session_count() == 1).await;
    let listed = link.sessions(&common::operator(), Duration::from_secs(5)).await.unwrap();
    let session = listed.sessions[0].session.clone();
    assert_eq!(listed.sessions[0].server_info["name"], json!("tether-python-test"));
    let mut turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;
    assert_eq!(text(&turn.call("client__echo", json!({"message": "cli"})).await.unwrap()), "Echo: cli");

    // What happened shows on the bridge's own /metrics.
    let response = common::http_get(&metrics_url).await.unwrap();
    let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    assert!(kind.starts_with("application/openmetrics-text"), "as the edge serves it: {kind}");
    let exposition = response.text().await.unwrap();
    let value = |name: &str| -> Option<u64> {
        exposition.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    assert_eq!(value("tether_bridge_server_starts_total"), Some(1), "{exposition}");
    assert_eq!(value("tether_bridge_edge_connects_total"), Some(1), "{exposition}");
    assert_eq!(value("tether_bridge_calls_total"), Some(1), "{exposition}");
    assert_eq!(value("tether_bridge_server_exits_total"), Some(0), "{exposition}");
    assert!(exposition.ends_with("# EOF\n"), "{exposition}");

    // SIGINT stops it cleanly: the device leaves and the bridge exits 0.
    let pid = child.id().unwrap();
    assert!(std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap().success());
    let status = tokio::time::timeout(WAIT_LIMIT, child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
    wait_until(|| edge.hub.session_count() == 0).await;
}

/// `tether sim-server`, a server on the official Rust SDK (rmcp) that speaks
/// the 2026-07-28 tasks extension, bridged: its slow tool runs as a task the
/// edge polls through the bridge, its status line reaches the backend, a
/// cancel reaches the server, and a caller that cannot follow a task waits
/// for the outcome inline.
#[tokio::test]
async fn a_servers_tasks_go_through_the_bridge_polled_by_the_edge_and_cancelled_on_the_server() {
    let edge = LiveEdge::start().await;
    let command = vec![
        env!("CARGO_BIN_EXE_tether").to_owned(),
        "sim-server".into(),
        "--signing-ms".into(),
        "400".into(),
    ];
    let bridge = Bridge::start(config(&edge, command)).unwrap();
    let session = session(&bridge).await;
    let link = edge.backend().await;
    let mut notes = link.notifications().unwrap();
    let sign = |task: bool| {
        let meta = tether_contract::backend::CallMeta {
            credential: Some(user("mira")),
            task: task.then_some(tether_contract::tasks::TaskMetadata { ttl: None }),
            ..Default::default()
        };
        let arguments = json!({"order": "A-104"});
        tether_contract::backend::CallParams {
            session: session.clone(),
            name: "client__collect_signature".into(),
            arguments,
            meta,
        }
    };
    let about = |task: &TaskState| tether_contract::tasks::TaskParams {
        session: session.clone(),
        task: task.task.clone(),
        meta: tether_contract::backend::ReadMeta { credential: Some(user("mira")) },
    };
    let budget = Duration::from_secs(12);

    let started = link.call(sign(true), budget).await.unwrap();
    let task = TaskState::in_result(started.result.meta.as_ref()).expect("the call became the server's task");
    assert_eq!(task.status, TaskStatus::Working);
    let outcome = link.task_result(&about(&task), WAIT_LIMIT).await.unwrap();
    assert_eq!(text(&outcome.result), "signature collected for order A-104");
    let signing = notification(
        &mut notes,
        |n| matches!(n, Notification::TaskStatus(t) if t.status_message.as_deref() == Some("the customer is signing")),
    );
    signing.await;
    assert_eq!(bridge.counters().try_get("tasks_started"), Some(1));

    let started = link.call(sign(true), budget).await.unwrap();
    let second = TaskState::in_result(started.result.meta.as_ref()).unwrap();
    link.cancel_task(&about(&second), budget).await.unwrap();
    wait_until(|| bridge.counters().try_get("task_cancels_forwarded") == Some(1)).await;
    assert_eq!(bridge.counters().try_get("task_cancels_forwarded"), Some(1), "the cancel reached the server");
    assert_eq!(
        bridge.counters().try_get("task_requests_failed"),
        Some(0),
        "the server knew the task it was asked about"
    );

    let inline = link.call(sign(false), budget).await.unwrap();
    assert!(
        TaskState::in_result(inline.result.meta.as_ref()).is_none(),
        "no task for a caller that cannot follow one"
    );
    assert_eq!(text(&inline.result), "signature collected for order A-104");
    assert_eq!(bridge.counters().try_get("tasks_started"), Some(2));
}

/// A stand-in edge's listener on loopback, and a configuration for a bridge
/// that dials it with the Python server (noting into the returned record).
async fn stand_in_edge(test: &str) -> (tokio::net::TcpListener, BridgeConfig, Record) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let record = Record::new(test);
    let token = common::keys().issue("mira", "tether-client", Duration::from_secs(600)).unwrap();
    let config = BridgeConfig::new(url, token, python_server(&record));
    (listener, config, record)
}

/// Frames no edge should send are answered or ignored, never fatal, and each
/// is counted: a binary frame, a frame that is not JSON-RPC (answered
/// `parse_error`), a method the bridge does not serve (`method_not_found`),
/// a cancel for no call in flight. The connection carries on (a ping after
/// them is answered).
#[tokio::test]
async fn frames_no_edge_should_send_are_answered_or_ignored_and_counted() {
    let (listener, config, _record) = stand_in_edge("odd-frames").await;
    let (answers_tx, mut answers) = mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        let (announced, _) = oneshot::channel();
        let mut ws = accept_device(&listener, announced).await;
        let frames = [
            Message::binary(vec![1u8, 2, 3]),
            Message::text("not json"),
            Message::text(json!({"jsonrpc": "2.0", "id": 7, "method": "bogus/method"}).to_string()),
            Message::text(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}})
                    .to_string(),
            ),
            Message::text(
                json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"cursor": "bogus"}})
                    .to_string(),
            ),
            Message::text(json!({"jsonrpc": "2.0", "id": 8, "method": "ping"}).to_string()),
        ];
        for frame in frames {
            ws.send(frame).await.unwrap();
        }
        while let Some(Ok(message)) = ws.next().await {
            if let Message::Text(t) = message {
                if answers_tx.send(serde_json::from_str(t.as_str()).unwrap()).is_err() {
                    return;
                }
            }
        }
    });
    let bridge = Bridge::start(config).unwrap();
    let mut by_id = std::collections::BTreeMap::new();
    // tools/list is answered off the read loop, so its answer may come after the ping's.
    while !(by_id.contains_key("8") && by_id.contains_key("9")) {
        let frame = tokio::time::timeout(WAIT_LIMIT, answers.recv()).await.unwrap().unwrap();
        // Answers only: a notification the bridge sends has no id either.
        if frame.get("result").is_some() || frame.get("error").is_some() {
            by_id.insert(frame["id"].to_string(), frame);
        }
    }
    assert_eq!(by_id["null"]["error"]["data"]["kind"], json!("parse_error"), "{by_id:?}");
    assert_eq!(by_id["7"]["error"]["data"]["kind"], json!("method_not_found"), "{by_id:?}");
    assert_eq!(by_id["9"]["error"]["data"]["kind"], json!("invalid_params"), "{by_id:?}");
    assert!(by_id["8"].get("result").is_some(), "{by_id:?}");
    // The ping came after the others, on the same read loop: they are counted by now
    // (the cursor's too: its answer is in).
    let counters = bridge.counters();
    assert_eq!(counters.try_get("edge_binary_frames"), Some(1));
    assert_eq!(counters.try_get("edge_bad_frames"), Some(1));
    assert_eq!(counters.try_get("edge_unknown_methods"), Some(1));
    assert_eq!(counters.try_get("edge_cancels_unmatched"), Some(1));
    assert_eq!(counters.try_get("stale_cursors"), Some(1));
    bridge.stop().await.unwrap();
}

/// An edge that is not there yet is dialled again, counted each time, with
/// the server started and kept running meanwhile.
#[tokio::test]
async fn an_edge_that_is_not_there_is_redialled_and_counted() {
    // A port that was just free: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let record = Record::new("no-edge");
    let token = common::keys().issue("mira", "tether-client", Duration::from_secs(600)).unwrap();
    let url = format!("ws://127.0.0.1:{port}");
    let bridge = Bridge::start(BridgeConfig::new(url, token, python_server(&record))).unwrap();
    let counters = bridge.counters();
    wait_until(|| counters.try_get("edge_connect_failures").unwrap_or(0) >= 2).await;
    assert!(counters.try_get("edge_connect_failures").unwrap_or(0) >= 2);
    assert_eq!(counters.try_get("edge_connects"), Some(0));
    bridge.stop().await.unwrap();
}

/// A call in flight when the edge connection drops is cancelled on the
/// server (nobody is left to answer) and counted.
#[tokio::test]
async fn a_call_in_flight_when_the_edge_connection_drops_is_cancelled_on_the_server() {
    let (listener, config, record) = stand_in_edge("orphaned").await;
    let bridge = Bridge::start(config).unwrap();
    let (announced, _) = oneshot::channel();
    let mut ws = accept_device(&listener, announced).await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"seconds": 30}}});
    ws.send(Message::text(call.to_string())).await.unwrap();
    wait_until(|| record.text().contains("slow started")).await;
    drop(ws); // no close frame: the connection is simply gone
    wait_until(|| record.text().contains("slow cancelled")).await;
    // Counted once the server has taken the cancel.
    wait_until(|| bridge.counters().try_get("calls_orphaned") == Some(1)).await;
    assert_eq!(bridge.counters().try_get("calls_orphaned"), Some(1));
    bridge.stop().await.unwrap();
}

/// A server that starts but never finishes its MCP handshake (it exits at
/// once) is not fatal: the bridge counts it and tries again with backoff,
/// and never connects to the edge for it.
#[tokio::test]
async fn a_server_that_exits_before_its_handshake_is_retried_and_counted() {
    let edge = LiveEdge::start().await;
    let bridge = Bridge::start(config(&edge, vec![python(), "-c".into(), "pass".into()])).unwrap();
    let counters = bridge.counters();
    wait_until(|| counters.try_get("server_start_failures").unwrap_or(0) >= 2).await;
    assert!(counters.try_get("server_start_failures").unwrap_or(0) >= 2);
    assert_eq!(counters.try_get("server_starts"), Some(0));
    assert_eq!(counters.try_get("edge_connects"), Some(0));
    assert_eq!(edge.hub.session_count(), 0);
    bridge.stop().await.unwrap();
}

/// Tools the edge drops under its caps are told back to the bridge, which
/// counts and logs each; the kept ones are callable.
#[tokio::test]
async fn tools_the_edge_drops_under_its_caps_are_counted_by_the_bridge() {
    let mut edge_config = test_config();
    edge_config.caps.max_tools = 4;
    let edge = LiveEdge::start_with(edge_config).await;
    let record = Record::new("dropped");
    let bridge = Bridge::start(config(&edge, python_server(&record))).unwrap();
    let session = session(&bridge).await;
    assert_eq!(PY_TOOLS.len(), 7);
    wait_until(|| bridge.counters().try_get("tools_dropped_by_edge") == Some(3)).await;
    assert_eq!(bridge.counters().try_get("tools_dropped_by_edge"), Some(3), "7 tools, 4 kept");
    let link = edge.backend().await;
    let turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;
    assert_eq!(names(&turn).len(), 4, "the edge kept what its cap allows");
    bridge.stop().await.unwrap();
}

/// Under `DeadlinePolicy::Edge` the bridge waits for the edge's cancel; an
/// edge that never sends one past the deadline is backstopped: the call is
/// cancelled on the server and answered as a timeout, counted.
#[tokio::test]
async fn a_call_the_edge_never_cancels_is_backstopped_past_its_deadline() {
    let (listener, mut config, record) = stand_in_edge("backstop").await;
    config.deadline = DeadlinePolicy::Edge;
    let bridge = Bridge::start(config).unwrap();
    let (announced, _) = oneshot::channel();
    let mut ws = accept_device(&listener, announced).await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"seconds": 30}, "_meta": {"tether.dev/deadline_ms": 100}}});
    ws.send(Message::text(call.to_string())).await.unwrap();
    let answer = tokio::time::timeout(WAIT_LIMIT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap();
                    if v["id"] == json!(5) {
                        break v;
                    }
                }
                Some(Ok(_)) => {}
                other => panic!("the bridge's connection ended before its answer: {other:?}"),
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    assert_eq!(answer["result"]["structuredContent"]["code"], json!("server_timeout"), "{answer}");
    wait_until(|| record.text().contains("slow cancelled")).await;
    assert_eq!(bridge.counters().try_get("calls_backstopped"), Some(1));
    assert_eq!(bridge.counters().try_get("calls_timed_out"), Some(0));
    bridge.stop().await.unwrap();
}

/// A server whose tool or instructions cannot fit one frame still becomes a
/// device: the tool is left out and the instructions are cut, each counted.
#[tokio::test]
async fn a_tool_or_instructions_too_large_for_a_frame_are_left_out_or_cut_and_counted() {
    let edge = LiveEdge::start().await;
    let record = Record::new("oversized");
    let mut command = python_server(&record);
    command.push("--oversized".into());
    let bridge = Bridge::start(config(&edge, command)).unwrap();
    let session = session(&bridge).await;
    let link = edge.backend().await;
    let turn = Turn::begin(&link, &session, Some(&user("mira")), Budgets::default()).await;
    assert_eq!(names(&turn), PY_TOOLS, "the huge tool is not declared; the rest are");
    let said = turn.manifest().unwrap().instructions.clone().unwrap_or_default();
    assert!(said.starts_with("Tether test server on the Python MCP SDK"), "the cut keeps the start");
    assert!(said.len() < 15_360, "cut to fit one frame: {} bytes", said.len());
    assert_eq!(bridge.counters().try_get("tools_oversized"), Some(1));
    assert_eq!(bridge.counters().try_get("instructions_truncated"), Some(1));
    bridge.stop().await.unwrap();
}
