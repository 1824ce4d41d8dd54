//! Devices of both MCP revisions at one edge. A 2026-07-28 device has no
//! handshake: it announces itself at the upgrade, the edge asks
//! `server/discover`, puts the envelope in every request's `_meta`, and learns
//! of catalog changes on a `subscriptions/listen` stream. A 2025-11-25 device
//! still gets `initialize` first, so it pays no extra round trip. Scripted
//! devices over duplex pipes on paused time, then a device built on the
//! official Rust SDK (`rmcp`) over a real socket.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::DuplexStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use common::{next_frame, DuplexEdge, LiveEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::ErrorKind;
use tether_edge::revision::Revision;

const MODERN: &str = "2026-07-28";

async fn send(ws: &mut WebSocketStream<DuplexStream>, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

fn call(session: &str, name: &str) -> CallParams {
    let meta = CallMeta { credential: Some(common::user("mira")), ..CallMeta::default() };
    CallParams { session: session.into(), name: name.into(), arguments: json!({}), meta }
}

/// Asserts a request carries the 2026-07-28 envelope.
fn assert_envelope(request: &Value) {
    let meta = &request["params"]["_meta"];
    assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], json!(MODERN), "{request}");
    assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object(), "{request}");
    assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], json!("tether-edge"));
}

fn tools_page(id: &Value, seq: u64, names: &[&str]) -> Value {
    let tools: Vec<Value> =
        names.iter().map(|n| json!({"name": n, "inputSchema": {"type": "object"}})).collect();
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "resultType": "complete", "tools": tools, "ttlMs": 0, "cacheScope": "private",
        "_meta": {"tether.dev/seq": seq}
    }})
}

fn discover_result(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "resultType": "complete", "supportedVersions": [MODERN],
        "capabilities": {"tools": {"listChanged": true}},
        "instructions": "A shelf scanner in a warehouse.", "ttlMs": 60000, "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "shelf-scanner", "version": "2.0.0"}}
    }})
}

/// Plays a 2026-07-28 device through discovery, the first catalog read and
/// the listen stream; returns (session, the listen request's id).
async fn modern_device(edge: &DuplexEdge, ws: &mut WebSocketStream<DuplexStream>) -> (String, Value) {
    let discover = next_frame(ws).await;
    assert_eq!(
        discover["method"],
        json!("server/discover"),
        "no initialize for an announced 2026-07-28 device"
    );
    assert_envelope(&discover);
    let session = discover["params"]["_meta"]["tether.dev/session"].as_str().unwrap().to_owned();
    send(ws, discover_result(&discover["id"])).await;
    let list = next_frame(ws).await;
    assert_eq!(list["method"], json!("tools/list"));
    assert_envelope(&list);
    send(ws, tools_page(&list["id"], 1, &["scan_shelf", "count_items"])).await;
    let (mut listen, mut ready) = (None, false);
    while listen.is_none() || !ready {
        let frame = next_frame(ws).await;
        match frame["method"].as_str() {
            Some("subscriptions/listen") => listen = Some(frame),
            Some("notifications/tether.dev/manifest_applied") => ready = true,
            other => panic!("unexpected {other:?}: {frame}"),
        }
    }
    let listen = listen.unwrap();
    assert_envelope(&listen);
    assert_eq!(listen["params"]["notifications"], json!({"toolsListChanged": true}));
    let id = listen["id"].clone();
    send(
        ws,
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
               "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}, "notifications": {"toolsListChanged": true}}}),
    )
    .await;
    assert!(edge.hub.session(&session).is_some());
    (session, id)
}

#[tokio::test(start_paused = true)]
async fn a_2026_07_28_device_is_discovered_called_and_its_subscription_drives_rereads() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device_announcing(1 << 18, None, Some(Revision::V2026_07_28)).await;
    let (session, listen_id) = modern_device(&edge, &mut ws).await;
    let link = std::sync::Arc::new(edge.backend().await);
    let mut notes = link.notifications().unwrap();

    let listed = link.sessions(&common::operator(), Duration::from_secs(5)).await.unwrap();
    assert_eq!(listed.sessions[0].protocol_version, MODERN);
    assert_eq!(listed.sessions[0].server_info["name"], json!("shelf-scanner"));
    let inspected = link.inspect(&session, &common::operator(), Duration::from_secs(5)).await.unwrap();
    assert_eq!(inspected.protocol_version, MODERN);
    let turn = turn_for(&link, &session).await;
    assert!(
        turn.context_block(2048).unwrap_or_default().contains("A shelf scanner in a warehouse."),
        "instructions are the concept"
    );

    // A call carries the envelope and tether's deadline; the result completes it.
    let caller = {
        let (p, link) = (call(&session, "client__scan_shelf"), link.clone());
        tokio::spawn(async move { link.call(p, Duration::from_secs(12)).await.map(|r| r.result) })
    };
    let request = next_frame(&mut ws).await;
    assert_eq!(request["method"], json!("tools/call"));
    assert_envelope(&request);
    assert_eq!(request["params"]["_meta"]["tether.dev/deadline_ms"], json!(7000));
    let done = json!({"resultType": "complete", "content": [{"type": "text", "text": "3 shelves"}], "_meta": {"tether.dev/seq": 1}});
    send(&mut ws, json!({"jsonrpc": "2.0", "id": request["id"], "result": done})).await;
    let result = caller.await.unwrap().unwrap();
    assert_eq!(result.content[0]["text"], json!("3 shelves"));

    // The catalog moves: the notification rides the listen stream, and the edge re-reads.
    send(
        &mut ws,
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
               "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": listen_id, "tether.dev/seq": 2}}}),
    )
    .await;
    let reread = next_frame(&mut ws).await;
    assert_eq!(reread["method"], json!("tools/list"));
    assert_envelope(&reread);
    send(&mut ws, tools_page(&reread["id"], 2, &["count_items"])).await;
    let note = loop {
        match notes.recv().await {
            Some(tether_core::Notification::ListChanged(c)) => break c,
            Some(_) => continue,
            None => panic!("the backend link closed before list_changed arrived"),
        }
    };
    assert_eq!((note.session.as_str(), note.seq), (session.as_str(), 2));
    let text = edge.hub.metrics.render();
    assert!(text.contains("tether_sessions_by_revision_total{revision=\"2026-07-28\"} 1"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_2025_11_25_device_is_greeted_with_initialize_and_nothing_else_first() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let first = next_frame(&mut ws).await;
    assert_eq!(first["method"], json!("initialize"), "no discovery probe, no extra round trip");
    assert_eq!(first["params"]["protocolVersion"], json!("2025-11-25"));
    send(&mut ws, json!({"jsonrpc":"2.0","id":first["id"],"result":{"serverInfo":{"name":"d"}}})).await;
    assert_eq!(next_frame(&mut ws).await["method"], json!("notifications/initialized"));
    let list = next_frame(&mut ws).await;
    assert!(list["params"].get("_meta").is_none(), "no envelope on 2025-11-25: {list}");
    send(&mut ws, tools_page(&list["id"], 1, &["a"])).await;
    assert_eq!(next_frame(&mut ws).await["method"], json!("notifications/tether.dev/manifest_applied"));
    let link = edge.backend().await;
    assert_eq!(
        link.sessions(&common::operator(), Duration::from_secs(5)).await.unwrap().sessions[0]
            .protocol_version,
        "2025-11-25"
    );
    let text = edge.hub.metrics.render();
    assert!(text.contains("tether_sessions_by_revision_total{revision=\"2025-11-25\"} 1"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_device_that_refuses_initialize_is_asked_server_discover_next() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let init = next_frame(&mut ws).await;
    assert_eq!(init["method"], json!("initialize"));
    // A device that speaks only 2026-07-28 and did not announce it.
    let refused = json!({"code": -32602, "message": "missing io.modelcontextprotocol/protocolVersion"});
    send(&mut ws, json!({"jsonrpc": "2.0", "id": init["id"], "error": refused})).await;
    let (session, _) = modern_device(&edge, &mut ws).await;
    assert_eq!(edge.hub.session(&session).unwrap().revision(), Revision::V2026_07_28);
    assert_eq!(edge.hub.counters().get("revision_fallbacks"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_device_that_ends_its_subscription_is_counted_and_input_requests_are_refused() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device_announcing(1 << 18, None, Some(Revision::V2026_07_28)).await;
    let (session, listen_id) = modern_device(&edge, &mut ws).await;
    // The device ends the listen stream gracefully.
    let end =
        json!({"resultType": "complete", "_meta": {"io.modelcontextprotocol/subscriptionId": listen_id}});
    send(&mut ws, json!({"jsonrpc": "2.0", "id": listen_id, "result": end})).await;
    let link = edge.backend().await;
    common::wait_until(|| edge.hub.counters().get("subscriptions_ended") == 1).await;
    assert_eq!(edge.hub.counters().get("unknown_responses"), 0);

    // A call the device answers with a request for input the edge cannot supply.
    let caller = {
        let p = call(&session, "client__count_items");
        tokio::spawn(async move { link.call(p, Duration::from_secs(12)).await })
    };
    let request = next_frame(&mut ws).await;
    let ask = json!({"resultType": "input_required", "inputRequests": {"confirm": {"method": "elicitation/create"}}});
    send(&mut ws, json!({"jsonrpc": "2.0", "id": request["id"], "result": ask})).await;
    let err = caller.await.unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::ClientError);
    assert!(err.message.contains("input_required"), "{}", err.message);
}

/// Waits until a device speaking `revision` is listed with its manifest; its session id.
async fn session_speaking(edge: &LiveEdge, revision: &str) -> String {
    let speaks =
        |s: &tether_edge::session::Session| s.revision().as_str() == revision && s.manifest().is_some();
    common::wait_until(|| edge.hub.sessions().iter().any(|s| speaks(s))).await;
    edge.hub.sessions().into_iter().find(|s| speaks(s)).unwrap().id.clone()
}

/// A turn on `session` for its user, mira.
async fn turn_for<'a>(link: &'a tether_core::BackendLink, session: &str) -> tether_core::Turn<'a> {
    tether_core::Turn::begin(link, session, Some(&common::user("mira")), tether_contract::Budgets::default())
        .await
}

/// A device written with the official Rust SDK (`rmcp`), dialing a real edge
/// over a WebSocket, once announcing 2026-07-28 and once not.
mod rmcp_device {
    use super::*;

    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::{RequestContext, RoleServer};
    use rmcp::{ErrorData, ServerHandler, ServiceExt};
    use tether_contract::tasks::{TaskMetadata, TaskParams, TaskState, TaskStatus as Status};
    use tether_harness::stdio_server::SimServer;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    #[derive(Clone)]
    struct Shelf;

    impl ServerHandler for Shelf {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
                .with_instructions("A shelf scanner, written with rmcp.")
        }

        async fn list_tools(
            &self,
            _: Option<PaginatedRequestParams>,
            _: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let schema = serde_json::from_value(json!({"type": "object"})).unwrap();
            Ok(ListToolsResult::with_all_items(vec![Tool::new(
                "scan_shelf",
                "Scans one shelf.",
                std::sync::Arc::new(schema),
            )]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            Ok(CallToolResult::success(vec![ContentBlock::text(format!("{} done", request.name))]).into())
        }
    }

    /// Connects an rmcp server to the edge's `/v1/client` as a device.
    async fn connect(edge: &LiveEdge, announce: Option<&str>) {
        serve(edge, announce, Shelf).await;
    }

    /// Connects `handler` to the edge's `/v1/client` as a device.
    async fn serve<H: ServerHandler>(edge: &LiveEdge, announce: Option<&str>, handler: H) {
        let mut req = format!("{}/v1/client", edge.url).into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {}", edge.client_token("mira")).parse().unwrap());
        if let Some(revision) = announce {
            req.headers_mut().insert("mcp-protocol-version", revision.parse().unwrap());
        }
        let (ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        let (sink, stream) = ws.split();
        // One JSON-RPC message per text frame, both ways.
        let sink = sink.with(|m: rmcp::service::TxJsonRpcMessage<RoleServer>| async move {
            Ok::<_, tokio_tungstenite::tungstenite::Error>(Message::text(serde_json::to_string(&m).unwrap()))
        });
        let stream = stream.filter_map(|m| async move {
            match m {
                Ok(Message::Text(t)) => serde_json::from_str(t.as_str()).ok(),
                _ => None,
            }
        });
        let running = handler.serve((Box::pin(sink), Box::pin(stream))).await.unwrap();
        tokio::spawn(async move {
            let _ = running.waiting().await;
        });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_rmcp_device_speaks_either_revision_to_the_same_edge() {
        let edge = LiveEdge::start().await;
        let link = edge.backend().await;
        for (announce, expected) in [(Some(MODERN), MODERN), (None, "2025-11-25")] {
            connect(&edge, announce).await;
            let session = session_speaking(&edge, expected).await;
            let sessions = link.sessions(&common::operator(), Duration::from_secs(5)).await.unwrap().sessions;
            let s = sessions.iter().find(|s| s.session == session).unwrap();
            assert_eq!((s.protocol_version.as_str(), s.tools), (expected, 1));
            let mut turn = turn_for(&link, &session).await;
            assert!(turn.context_block(2048).unwrap_or_default().contains("written with rmcp"), "{expected}");
            let result = turn.call("client__scan_shelf", json!({})).await.unwrap();
            assert_eq!(result.content[0]["text"], json!("scan_shelf done"), "{expected}");
        }
    }

    /// A 2026-07-28 device of the tasks extension: a call made as a task
    /// comes back as the task at once, the edge polls `tasks/get` (its status
    /// line reaching the backend) until the outcome, `tasks/cancel` reaches
    /// the device, and a caller that cannot follow a task gets the call inline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_rmcp_device_of_the_tasks_extension_runs_calls_as_tasks_the_edge_polls() {
        let edge = LiveEdge::start().await;
        let link = edge.backend().await;
        let mut notes = link.notifications().unwrap();
        // `tether sim-server`'s handler (rmcp's server side), here over a WebSocket.
        let server = SimServer::new(Duration::from_millis(300));
        serve(&edge, Some(MODERN), server.clone()).await;
        let session = session_speaking(&edge, MODERN).await;
        let as_task = |task: bool| {
            let meta = CallMeta {
                credential: Some(common::user("mira")),
                task: task.then_some(TaskMetadata { ttl: None }),
                ..CallMeta::default()
            };
            CallParams {
                session: session.clone(),
                name: "client__collect_signature".into(),
                arguments: json!({"order": "A-104"}),
                meta,
            }
        };
        let about = |task: &TaskState| TaskParams {
            session: session.clone(),
            task: task.task.clone(),
            meta: tether_contract::backend::ReadMeta { credential: Some(common::user("mira")) },
        };
        let budget = Duration::from_secs(12);

        let response = link.call(as_task(true), budget).await.unwrap();
        let task = TaskState::in_result(response.result.meta.as_ref()).expect("the call became a task");
        assert_eq!(
            (task.status, task.ttl_ms),
            (Status::Working, 300_000),
            "the device's ttl, under the edge's"
        );
        let outcome = link.task_result(&about(&task), Duration::from_secs(30)).await.unwrap();
        assert_eq!(outcome.result.content[0]["text"], json!("signature collected for order A-104"));
        let mut lines = Vec::new();
        while lines.last().is_none_or(|(s, _)| *s != Status::Completed) {
            let note = tokio::time::timeout(common::WAIT_LIMIT, notes.recv()).await;
            match note.expect("the task's end was published").expect("the link is open") {
                tether_core::Notification::TaskStatus(t) => lines.push((t.status, t.status_message)),
                _ => continue,
            }
        }
        assert!(
            lines.contains(&(Status::Working, Some("the customer is signing".into()))),
            "the polled line moved it: {lines:?}"
        );

        let response = link.call(as_task(true), budget).await.unwrap();
        let second = TaskState::in_result(response.result.meta.as_ref()).unwrap();
        link.cancel_task(&about(&second), budget).await.unwrap();
        common::wait_until(|| server.cancelled().len() == 1).await;
        assert_eq!(link.task(&about(&second), budget).await.unwrap().status, Status::Cancelled);

        let inline = link.call(as_task(false), budget).await.unwrap();
        assert!(TaskState::in_result(inline.result.meta.as_ref()).is_none());
        assert_eq!(inline.result.content[0]["text"], json!("signature collected for order A-104"));
        assert_eq!(edge.hub.counters().get("tasks_created"), 2);
        assert_eq!(edge.hub.counters().get("tasks_completed"), 1);
    }
}

/// A device on the official Python SDK (`mcp` 2.3.0, the server of
/// `tests/mcp-servers/python/server.py`) dialing a real edge over a WebSocket
/// (`ws_device.py`): the SDK serves both revisions over the same socket.
mod python_device {
    use super::*;

    /// The Python device process, killed on drop.
    struct Device(std::process::Child);

    impl Drop for Device {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn spawn(edge: &LiveEdge, announce: Option<&str>) -> Device {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp-servers/python");
        let mut cmd = std::process::Command::new(common::python());
        cmd.current_dir(dir).args(["ws_device.py", &edge.url, &edge.client_token("mira")]);
        if let Some(revision) = announce {
            cmd.args(["--announce", revision]);
        }
        Device(cmd.stdin(std::process::Stdio::null()).spawn().unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_python_sdk_device_speaks_either_revision_and_its_changes_arrive() {
        let edge = LiveEdge::start().await;
        let link = std::sync::Arc::new(edge.backend().await);
        let mut notes = link.notifications().unwrap();
        for (announce, expected) in [(Some(MODERN), MODERN), (None, "2025-11-25")] {
            let _device = spawn(&edge, announce);
            let session = session_speaking(&edge, expected).await;
            let mut turn = turn_for(&link, &session).await;
            assert!(turn.context_block(2048).unwrap_or_default().contains("Python MCP SDK"), "{expected}");
            let echoed = turn.call("client__echo", json!({"message": "hi"})).await.unwrap();
            assert_eq!(echoed.content[0]["text"], json!("Echo: hi"), "{expected}");

            // The server adds a tool and announces it: on 2026-07-28 over the
            // listen stream the edge opened, on 2025-11-25 as a plain notification.
            turn.call("client__enable_extra", json!({})).await.unwrap();
            let moved = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match notes.recv().await {
                        Some(tether_core::Notification::ListChanged(c)) if c.session == session => return c,
                        Some(_) => continue,
                        None => panic!("the backend link closed"),
                    }
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{expected}: the new tool was never announced"));
            assert!(moved.seq > 1, "{expected}");
            let mut turn = turn_for(&link, &session).await;
            turn.call("client__extra", json!({})).await.unwrap();
            drop(_device);
            common::wait_until(|| edge.hub.session(&session).is_none()).await;
        }
    }
}
