//! Wire behaviour over real sockets on 127.0.0.1:0: the real edge, the real
//! core client and the simulated device.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use common::{fixture, keys, wait_until, LiveEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::mcp::ToolDeclaration;
use tether_contract::{Budgets, ErrorKind, Leg};
use tether_core::Turn;
use tether_edge::auth::Claims;
use tether_harness::device::tool;
use tether_harness::{Behavior, DeviceSpec};

#[tokio::test]
async fn a_realistic_declaration_survives_edge_and_core_field_for_field() {
    let edge = LiveEdge::start().await;
    let device_fixture = fixture("declarations/fieldkit-device.json");
    let declared: Vec<ToolDeclaration> =
        serde_json::from_value(device_fixture["tools_list"]["tools"].clone()).unwrap();
    let expected = device_fixture["expected_namespaced"].as_object().unwrap().clone();
    let (dev, session) = edge.device(DeviceSpec::fieldkit()).await;
    let link = edge.backend().await;

    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    assert!(turn.degraded().is_none(), "{:?}", turn.degraded());
    assert_eq!(turn.tools().len(), declared.len());
    for (got, original) in turn.tools().iter().zip(&declared) {
        assert_eq!(Some(&Value::from(got.name.as_str())), expected.get(&original.name));
        assert_eq!(got.title, original.title, "{}", original.name);
        assert_eq!(got.description, original.description);
        assert_eq!(got.input_schema, original.input_schema);
        assert_eq!(got.output_schema, original.output_schema);
        assert_eq!(got.annotations, original.annotations);
    }
    let manifest = turn.manifest().unwrap();
    let init = &device_fixture["initialize"];
    assert_eq!(manifest.instructions.as_deref(), init["instructions"].as_str());
    assert_eq!(manifest.concept.as_ref(), Some(&init["_meta"]["tether.dev/concept"]));
    assert_eq!(manifest.context.as_ref(), Some(&device_fixture["tools_list"]["_meta"]["tether.dev/context"]));
    assert!(manifest.dropped.is_empty());
    let block = turn.context_block(tether_core::CONTEXT_MAX_BYTES).unwrap();
    assert!(block.starts_with("<client-context>") && block.ends_with("</client-context>"));
    assert!(
        block.contains("Fieldkit mobile")
            && block.contains("reassign a work order")
            && block.contains("WO-1182")
    );

    // A call goes back under the device's own name, arguments intact.
    let args = json!({"template": "asset", "copies": 2, "fields": {"asset": "P-7"}});
    let result = turn.call("client__print_label_v2", args.clone()).await.unwrap();
    assert_eq!(
        result.structured_content,
        Some(json!({"tool": "print-label.v2", "arguments": args, "session": session})),
        "the answer came from this session's device"
    );
    let calls = dev.observed.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "print-label.v2");
    assert_eq!(calls[0].arguments, args);
    assert_eq!(calls[0].meta["tether.dev/deadline_ms"], json!(7000));

    // sessions/list shows it with its principal.
    let sessions = link.sessions(&common::operator(), Duration::from_secs(2)).await.unwrap();
    assert_eq!(sessions.sessions.len(), 1);
    assert_eq!(sessions.sessions[0].principal, "mira");
    assert_eq!(sessions.sessions[0].tools, 10);
}

#[tokio::test]
async fn is_error_results_and_device_errors_become_client_errors() {
    let edge = LiveEdge::start().await;
    let spec = DeviceSpec::minimal(vec![tool("confirm")])
        .with("confirm", Behavior::Fail { code: "user_declined".into(), retryable: false });
    let (_dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let err = turn.call("client__confirm", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ClientError);
    assert_eq!(err.detail("code"), Some(&json!("user_declined")));
    assert_eq!(err.detail("retryable"), Some(&json!(false)));
    assert!(tether_core::for_model(&err).contains("do not retry"));

    let err = turn.call("client__Bad-Name", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidName);
    assert_eq!(link.counters().get("names_rejected"), 1);
    // A plain name could only be a server-side tool; none offers it, so it is unknown.
    let err = turn.call("not_namespaced", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ToolUnavailable);
    assert_eq!(err.detail("available"), Some(&json!(["client__confirm"])));
    assert_eq!(link.counters().get("unknown_tools"), 1);
}

async fn try_connect(url: &str, path_and_query: &str, bearer: Option<&str>) -> Result<(), u16> {
    let mut req = format!("{url}{path_and_query}").into_client_request().unwrap();
    if let Some(t) = bearer {
        req.headers_mut().insert("authorization", HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok(_) => Ok(()),
        Err(WsError::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("unexpected {e}"),
    }
}

#[tokio::test]
async fn every_bad_token_gets_401_and_no_session() {
    let edge = LiveEdge::start().await;
    let k = keys();
    let other = tether_edge::auth::Keys::from_secret(b"some-other-secret-some-other-secret").unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims =
        |exp: u64, nbf: u64, aud: &str| Claims { sub: "mira".into(), aud: aud.into(), exp, nbf, iat: now };
    let good = k.issue("mira", "tether-client", Duration::from_secs(60)).unwrap();
    let mut tampered: Vec<String> = good.split('.').map(str::to_owned).collect();
    tampered[1] = tampered[1].chars().rev().collect();
    let bad: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        ("garbage", Some("garbage".into())),
        ("other key", Some(other.sign(&claims(now + 60, now, "tether-client")).unwrap())),
        ("expired", Some(k.sign(&claims(now - 3600, now - 7200, "tether-client")).unwrap())),
        // Within the verification leeway, but past `exp`: a session would only be closed at once.
        ("expired within the leeway", Some(k.sign(&claims(now - 5, now - 600, "tether-client")).unwrap())),
        ("not yet valid", Some(k.sign(&claims(now + 7200, now + 3600, "tether-client")).unwrap())),
        ("wrong audience", Some(k.sign(&claims(now + 60, now, "tether-backend")).unwrap())),
        ("tampered", Some(tampered.join("."))),
    ];
    for (name, token) in &bad {
        assert_eq!(try_connect(&edge.url, "/v1/client", token.as_deref()).await, Err(401), "{name}");
    }
    // A backend token cannot open a device session, and a device token cannot open the backend link.
    let backend = k.issue("agent", "tether-backend", Duration::from_secs(60)).unwrap();
    assert_eq!(try_connect(&edge.url, "/v1/client", Some(&backend)).await, Err(401));
    assert_eq!(try_connect(&edge.url, "/v1/backend", Some(&good)).await, Err(401));
    assert_eq!(try_connect(&edge.url, "/v2/nope", Some(&good)).await, Err(404));
    assert_eq!(edge.hub.session_count(), 0);
    assert_eq!(edge.hub.counters().get("sessions_opened"), 0);
    assert_eq!(edge.hub.counters().get("auth_refused"), bad.len() as u64 + 2);
}

#[tokio::test]
async fn browsers_pass_the_token_in_the_query_and_it_never_reaches_the_logs() {
    let edge = LiveEdge::start().await;
    let good = edge.client_token("mira");
    let expired = common::expired_user("mira");
    let ((), logs) = common::capture_logs(async {
        assert_eq!(
            try_connect(&edge.url, &format!("/v1/client?access_token={expired}"), None).await,
            Err(401)
        );
        let url = format!("{}/v1/client?x=1&access_token={good}", edge.url);
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let first = ws.next().await.unwrap().unwrap();
        assert!(first.to_text().unwrap().contains("\"initialize\""));
        ws.close(None).await.unwrap();
        wait_until(|| {
            edge.hub.counters().get("sessions_latched") + edge.hub.counters().get("sessions_failed_init") >= 1
        })
        .await;
    })
    .await;
    assert!(logs.contains("upgrade refused"), "the refusal is logged: {logs}");
    for token in [&good, &expired] {
        let signature = token.rsplit('.').next().unwrap();
        assert!(!logs.contains(signature), "a credential leaked into the logs");
    }
}

async fn raw_device(
    edge: &LiveEdge,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let mut req = format!("{}/v1/client", edge.url).into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {}", edge.client_token("mira"))).unwrap(),
    );
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

async fn close_code(ws: &mut (impl StreamExt<Item = Result<Message, WsError>> + Unpin)) -> Option<CloseCode> {
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(Message::Close(frame)) => return frame.map(|f| f.code),
            Ok(_) => continue,
            Err(_) => return None,
        }
    }
    None
}

#[tokio::test]
async fn a_binary_frame_closes_with_1003() {
    let edge = LiveEdge::start().await;
    let mut ws = raw_device(&edge).await;
    ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Unsupported));
    wait_until(|| edge.hub.counters().get("binary_frames") == 1).await;
}

#[tokio::test]
async fn a_frame_over_the_ceiling_closes_with_1009() {
    let edge = LiveEdge::start().await;
    let mut ws = raw_device(&edge).await;
    let huge =
        format!("{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{{\"pad\":\"{}\"}}}}", "x".repeat(16_000));
    ws.send(Message::text(huge)).await.unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Size));
    wait_until(|| edge.hub.counters().get("oversized_frames") == 1).await;
}

#[tokio::test]
async fn malformed_json_gets_a_structured_error_and_the_session_survives() {
    let edge = LiveEdge::start().await;
    let mut ws = raw_device(&edge).await;
    let _initialize = ws.next().await.unwrap().unwrap();
    ws.send(Message::text("{not json")).await.unwrap();
    let reply: Value = serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    assert_eq!(reply["error"]["code"], json!(-32700));
    assert_eq!(reply["error"]["data"]["kind"], json!("parse_error"));
    ws.send(Message::text(r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#)).await.unwrap();
    let pong: Value = serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    assert_eq!(pong, json!({"jsonrpc":"2.0","id":"p","result":{}}));
}

/// Hand-drives a device with one tool, `dump`, through its handshake; then
/// a backend calls it under `meta` and the device answers with `answer(id)`.
/// Returns the device's socket and the backend's outcome.
async fn one_hand_answered_call(
    edge: &LiveEdge,
    meta: CallMeta,
    answer: impl Fn(&Value) -> String,
) -> (
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    Result<tether_contract::backend::CallResponse, tether_contract::WireError>,
) {
    let mut ws = raw_device(edge).await;
    let init: Value = serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    let session = init["params"]["_meta"]["tether.dev/session"].as_str().unwrap().to_owned();
    ws.send(Message::text(json!({"jsonrpc":"2.0","id":init["id"],"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"d"},"capabilities":{}}}).to_string())).await.unwrap();
    let _initialized = ws.next().await.unwrap().unwrap();
    let list: Value = serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    ws.send(Message::text(json!({"jsonrpc":"2.0","id":list["id"],"result":{"tools":[{"name":"dump","inputSchema":{"type":"object"}}],"_meta":{"tether.dev/seq":1}}}).to_string())).await.unwrap();
    wait_until(|| edge.hub.session(&session).is_some()).await;

    let link = edge.backend().await;
    let call = tokio::spawn(async move {
        let params = CallParams { session, name: "client__dump".into(), arguments: json!({}), meta };
        link.call(params, Duration::from_secs(12)).await
    });
    loop {
        let frame: Value =
            serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
        if frame["method"] == json!("tools/call") {
            ws.send(Message::text(answer(&frame["id"]))).await.unwrap();
            break;
        }
    }
    (ws, call.await.unwrap())
}

#[tokio::test]
async fn an_oversized_result_is_payload_too_large_never_truncated() {
    let edge = LiveEdge::start().await;
    let meta = CallMeta { credential: Some(common::user("mira")), ..CallMeta::default() };
    let (_ws, outcome) = one_hand_answered_call(&edge, meta, |id| {
        let text = "y".repeat(13_000);
        json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text","text":text}]}}).to_string()
    })
    .await;
    let err = outcome.unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge);
    assert_eq!(err.detail("limit"), Some(&json!(12_288)));
    assert_eq!(edge.hub.counters().get("results_too_large"), 1);
}

/// A result is forwarded as the device wrote it, never parsed into a tree;
/// one nested past the parser's depth limit is still refused at the edge, as
/// a parse error to the device, and never reaches the backend.
#[tokio::test]
async fn a_result_nested_past_the_depth_limit_is_refused_at_the_edge_not_forwarded() {
    let edge = LiveEdge::start().await;
    let meta =
        CallMeta { credential: Some(common::user("mira")), budget_ms: Some(300), ..CallMeta::default() };
    let (mut ws, outcome) = one_hand_answered_call(&edge, meta, |id| {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"structuredContent":{deep}}}}}"#)
    })
    .await;
    let reply = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    let reply = reply.expect("the device is told its answer was refused").unwrap().unwrap();
    let reply: Value = serde_json::from_str(reply.to_text().unwrap()).unwrap();
    assert_eq!(reply["error"]["data"]["kind"], json!("parse_error"), "{reply}");
    let err = outcome.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "the answer was refused, so the call's leg ran out: {err:?}");
}

#[tokio::test]
async fn shutdown_fails_calls_in_flight_and_closes_sockets_with_1001() {
    let edge = LiveEdge::start().await;
    let (mut dev, session) =
        edge.device(DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent)).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let mut backend_socket = {
        let mut req = format!("{}/v1/backend", edge.url).into_client_request().unwrap();
        let token = common::keys().issue("agent", "tether-backend", Duration::from_secs(600)).unwrap();
        req.headers_mut().insert("authorization", HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
        tokio_tungstenite::connect_async(req).await.unwrap().0
    };
    let hub = edge.hub.clone();
    let shutdown = edge.shutdown.clone();
    let stopper = tokio::spawn(async move {
        wait_until(|| hub.session(&session).is_some_and(|s| s.pending_calls() == 1)).await;
        shutdown.cancel();
    });
    let started = tokio::time::Instant::now();
    let err = turn.call("client__wait", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ChannelClosed, "{err:?}");
    assert_eq!(err.detail("reason"), Some(&json!("shutdown")));
    assert!(started.elapsed() < Duration::from_secs(5), "the caller must not wait out the leg");
    stopper.await.unwrap();
    dev.closed().await;
    assert_eq!(dev.observed.close_code(), Some(1001), "the device was told the edge is going away");
    assert_eq!(close_code(&mut backend_socket).await, Some(CloseCode::Away), "and so was the backend");
    let mut edge = edge;
    edge.task.take().unwrap().await.unwrap();
}

#[tokio::test]
async fn the_device_sees_1001_on_shutdown() {
    let edge = LiveEdge::start().await;
    let mut ws = raw_device(&edge).await;
    let _initialize = ws.next().await.unwrap().unwrap();
    edge.shutdown.cancel();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Away));
}

#[test]
fn tether_serve_prints_its_address_and_exits_0_on_sigterm() {
    use std::io::BufRead;
    let data = std::env::temp_dir().join(format!("tether-serve-{}", std::process::id()));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env_remove("TETHER_JWT_SECRET")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("listening on ws://127.0.0.1:"), "{line}");
    assert!(data.join("jwt-secret").exists(), "a secret was generated in the data dir");
    let status =
        std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let code = child.wait().unwrap();
    assert!(code.success(), "exit {code:?}");
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test]
async fn a_caller_profile_hides_tools_and_dispatch_refuses_what_the_model_was_never_shown() {
    let edge = LiveEdge::start().await;
    let (dev, session) = edge.device(DeviceSpec::fieldkit()).await;
    let link = edge.backend().await;
    let profiles = tether_core::Profiles::from_toml(
        "[callers.reader]\ntools = [\"client__get_*\", \"client__read_location\"]\n",
        link.counters(),
    )
    .unwrap();
    let reader = profiles.get("reader").unwrap();
    let mut turn =
        Turn::begin_scoped(&link, &session, Some(&common::user("mira")), Budgets::default(), reader).await;
    let listed: Vec<_> = turn.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(listed, ["client__get_visible_screen", "client__read_location"]);

    // A scripted model proposes a hidden tool, a never-listed one, and a listed one.
    for hidden in ["client__submit_form", "client__drop_all_tables"] {
        let err = turn.call(hidden, json!({})).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Forbidden, "{hidden}");
    }
    assert!(dev.observed.calls().is_empty(), "nothing reached the device");
    assert_eq!(link.counters().get("scope_refusals"), 2);
    turn.call("client__read_location", json!({"accuracy": "fine"})).await.unwrap();
    assert_eq!(dev.observed.calls().len(), 1);

    // With every tool in scope, a never-listed name is still refused at dispatch.
    let mut open = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let err = open.call("client__drop_all_tables", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ToolUnavailable);
    assert_eq!(dev.observed.calls().len(), 1);
}

#[tokio::test]
async fn only_the_user_who_owns_the_session_can_call_it() {
    let edge = LiveEdge::start().await;
    let (dev, session) = edge.device(DeviceSpec::minimal(vec![tool("read")])).await;
    let link = edge.backend().await;
    let expired = common::expired_user("mira");
    let cases: Vec<(&str, Option<String>, ErrorKind)> = vec![
        ("service token alone", None, ErrorKind::Forbidden),
        ("another user", Some(common::user("leo")), ErrorKind::Forbidden),
        ("expired credential", Some(expired), ErrorKind::Unauthenticated),
        ("garbage", Some("not-a-token".into()), ErrorKind::Unauthenticated),
    ];
    for (name, credential, want) in cases {
        let meta = CallMeta { credential, ..CallMeta::default() };
        let params =
            CallParams { session: session.clone(), name: "client__read".into(), arguments: json!({}), meta };
        let err = link.call(params, Duration::from_secs(12)).await.unwrap_err();
        assert_eq!(err.kind, want, "{name}");
    }
    assert!(dev.observed.calls().is_empty(), "nothing reached the device");
    assert_eq!(edge.hub.counters().get("calls_forbidden"), 4);
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    turn.call("client__read", json!({})).await.unwrap();
    assert_eq!(dev.observed.calls().len(), 1);
}

/// Reading a session is data access: the service token alone, a bad credential
/// or another user's reads nothing, not even which tools exist; a user lists
/// only their own sessions; an operator credential reads every one, logged.
#[tokio::test]
async fn only_the_sessions_user_or_an_operator_can_read_it() {
    let edge = LiveEdge::start().await;
    let (_mira_device, mira) = edge.device(DeviceSpec::minimal(vec![tool("read_diary")])).await;
    let spec = DeviceSpec::minimal(vec![tool("read_diary")]);
    let mut leo_device =
        tether_harness::SimDevice::connect(&edge.url, &edge.client_token("leo"), spec).await.unwrap();
    let leo = leo_device.ready().await.unwrap();
    let link = edge.backend().await;
    let budget = Duration::from_secs(5);
    let read = |method: &'static str, params: Value| link.request(method, params, Leg::TurnStart, budget);
    let service = keys().issue("agent", "tether-backend", Duration::from_secs(600)).unwrap();
    let refused: Vec<(&str, Option<String>, ErrorKind)> = vec![
        ("service token alone", None, ErrorKind::Forbidden),
        ("another user", Some(common::user("leo")), ErrorKind::Forbidden),
        ("expired credential", Some(common::expired_user("mira")), ErrorKind::Unauthenticated),
        ("garbage", Some("not-a-token".into()), ErrorKind::Unauthenticated),
        ("the backend's own token", Some(service), ErrorKind::Unauthenticated),
    ];
    for (name, credential, want) in &refused {
        for method in ["turn/begin", "tools/list", "sessions/inspect"] {
            let params = json!({"session": mira, "_meta": {"credential": credential}});
            let err = read(method, params).await.unwrap_err();
            assert_eq!(err.kind, *want, "{method}, {name}");
            let said = format!("{} {:?}", err.message, err.details);
            assert!(!said.contains("read_diary") && !said.contains("mira"), "{method}, {name}: {said}");
        }
        if *want == ErrorKind::Unauthenticated || credential.is_none() {
            let err = read("sessions/list", json!({"_meta": {"credential": credential}})).await.unwrap_err();
            assert_eq!(err.kind, *want, "sessions/list, {name}");
        }
    }
    let err = read("sessions/list", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Forbidden, "sessions/list with no params at all");
    assert_eq!(edge.hub.counters().get("reads_refused"), 5 * 3 + 4 + 1);

    // A user lists their own sessions, and only those.
    for (user, own) in [("mira", &mira), ("leo", &leo)] {
        let listed = link.sessions(&common::user(user), budget).await.unwrap().sessions;
        let ids: Vec<_> = listed.iter().map(|s| s.session.as_str()).collect();
        assert_eq!(ids, [own.as_str()], "{user}");
    }
    assert_eq!(link.list_tools(&mira, &common::user("mira"), budget).await.unwrap().tools.len(), 1);
    // Narrowed to one session: only if it is the reader's.
    let own = link.session_info(&mira, &common::user("mira"), budget).await.unwrap();
    assert_eq!((own.sessions.len(), own.reader.unwrap().principal.as_str()), (1, "mira"));
    assert!(link.session_info(&leo, &common::user("mira"), budget).await.unwrap().sessions.is_empty());

    // An operator reads every session, and each use leaves a line in the log.
    let (both, logs) = common::capture_logs(async {
        let both = link.sessions(&common::operator(), budget).await.unwrap().sessions.len();
        link.inspect(&leo, &common::operator(), budget).await.unwrap();
        both
    })
    .await;
    assert_eq!(both, 2);
    assert_eq!(edge.hub.counters().get("operator_reads"), 2);
    assert!(logs.contains("operator credential used to read sessions"), "{logs}");
    assert!(logs.contains("operator read a session") && logs.contains(leo.as_str()), "{logs}");
    // An operator reads; it never calls.
    let meta = CallMeta { credential: Some(common::operator()), ..CallMeta::default() };
    let params =
        CallParams { session: mira.clone(), name: "client__read_diary".into(), arguments: json!({}), meta };
    assert_eq!(
        link.call(params, Duration::from_secs(12)).await.unwrap_err().kind,
        ErrorKind::Unauthenticated
    );
}

/// A caller that stops waiting cancels the call on the device: dropping core's
/// call future tells the edge (`notifications/cancelled`), which forgets the
/// call and tells the device. Nothing is left pending anywhere.
#[tokio::test]
async fn dropping_a_call_cancels_it_on_the_device() {
    let edge = LiveEdge::start().await;
    let spec = DeviceSpec::minimal(vec![tool("wait"), tool("ping")]).with("wait", Behavior::Silent);
    let (dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    {
        let call = turn.call("client__wait", json!({}));
        tokio::pin!(call);
        tokio::select! {
            outcome = &mut call => panic!("a silent device answered: {outcome:?}"),
            () = wait_until(|| dev.observed.calls().len() == 1) => {}
        }
    }
    wait_until(|| dev.observed.cancels().len() == 1).await;
    assert_eq!(dev.observed.cancels()[0]["reason"], json!("the caller cancelled this call"));
    assert_eq!(link.counters().get("requests_cancelled"), 1);
    assert_eq!(edge.hub.counters().get("backend_cancels"), 1);
    assert_eq!(edge.hub.counters().get("calls_cancelled"), 1);
    assert_eq!(edge.hub.session(&session).unwrap().pending_calls(), 0);
    turn.call("client__ping", json!({})).await.unwrap();
    let recent = edge.hub.session(&session).unwrap().inspect().recent_calls;
    let seen: Vec<_> = recent.iter().map(|c| (c.tool.as_str(), c.outcome.as_str())).collect();
    assert_eq!(
        seen,
        [("client__wait", "cancelled"), ("client__ping", "ok")],
        "inspect shows the cancelled call"
    );
}

/// A device's progress on a call reaches the backend that asked for it, in
/// order and under the backend's own token; a call that did not ask gets none.
#[tokio::test]
async fn a_devices_progress_reaches_the_caller_that_asked_for_it() {
    let edge = LiveEdge::start().await;
    let spec = DeviceSpec::minimal(vec![tool("sync")]).with("sync", Behavior::Progress { steps: 3 });
    let (dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let options = tether_core::CallOptions { progress: Some(tx), ..Default::default() };
    turn.call_with("client__sync", json!({}), options).await.unwrap();
    let mut seen = Vec::new();
    while let Ok(p) = rx.try_recv() {
        seen.push((p.session.clone(), p.progress, p.total, p.message.clone()));
    }
    let step = |n: f64| (session.clone(), n, Some(3.0), Some(format!("step {n} of 3")));
    assert_eq!(seen, [step(1.0), step(2.0), step(3.0)]);
    assert_eq!(edge.hub.counters().get("progress_relayed"), 3);
    // The device saw the edge's token, never the backend's.
    assert!(dev.observed.calls()[0].meta["progressToken"].is_u64());

    // Without a request for progress the device is given no token and reports none.
    turn.call("client__sync", json!({})).await.unwrap();
    assert!(dev.observed.calls()[1].meta.get("progressToken").is_none());
    assert_eq!(edge.hub.counters().get("progress_relayed"), 3);
    assert_eq!(edge.hub.counters().get("progress_dropped"), 0);
    assert_eq!(link.counters().get("progress_dropped"), 0);
}

/// A backend that leaves with calls in flight cancels them on the devices (no
/// one will read their outcomes); an id already in flight is refused, since
/// cancelling by it would be ambiguous.
#[tokio::test]
async fn a_backend_that_leaves_cancels_its_calls_and_ids_in_flight_are_unique() {
    let edge = LiveEdge::start().await;
    let spec = DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent);
    let (dev, session) = edge.device(spec).await;
    let mut req = format!("{}/v1/backend", edge.url).into_client_request().unwrap();
    let service = keys().issue("agent", "tether-backend", Duration::from_secs(600)).unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {service}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "session": session, "name": "client__wait", "arguments": {},
        "_meta": {"credential": common::user("mira")}}});
    ws.send(Message::text(call.to_string())).await.unwrap();
    wait_until(|| dev.observed.calls().len() == 1).await;
    ws.send(Message::text(call.to_string())).await.unwrap();
    let refused: Value = loop {
        if let Some(Ok(Message::Text(t))) = ws.next().await {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v.get("id").is_some() {
                break v;
            }
        }
    };
    assert_eq!(refused["error"]["data"]["kind"], json!("invalid_request"), "{refused}");
    assert_eq!(dev.observed.calls().len(), 1, "the duplicate never reached the device");
    drop(ws);
    wait_until(|| dev.observed.cancels().len() == 1).await;
    assert_eq!(dev.observed.cancels()[0]["reason"], json!("the caller cancelled this call"));
    assert_eq!(edge.hub.counters().get("calls_cancelled"), 1);
}

#[tokio::test]
async fn the_origin_allowlist_matches_exactly() {
    let mut config = common::test_config();
    config.allowed_origins = vec!["https://app.example.com".into()];
    let edge = LiveEdge::start_with(config).await;
    let attempt = |origin: Option<&'static str>| {
        let mut req = edge.device_request();
        if let Some(o) = origin {
            req.headers_mut().insert("origin", HeaderValue::from_static(o));
        }
        async move {
            match tokio_tungstenite::connect_async(req).await {
                Ok(_) => Ok(()),
                Err(WsError::Http(r)) => Err(r.status().as_u16()),
                Err(e) => panic!("{e}"),
            }
        }
    };
    assert_eq!(attempt(Some("https://app.example.com")).await, Ok(()));
    assert_eq!(attempt(None).await, Ok(()), "native clients send no Origin");
    for bad in
        ["https://app.example.com.evil", "http://app.example.com", "https://evil.app.example.com", "null"]
    {
        assert_eq!(attempt(Some(bad)).await, Err(403), "{bad}");
    }
    assert!(edge.hub.metrics.render().contains("tether_auth_refusals_total{reason=\"origin\"} 4"));
}

#[tokio::test]
async fn permessage_deflate_is_never_negotiated() {
    let edge = LiveEdge::start().await;
    let mut req = edge.device_request();
    req.headers_mut().insert(
        "sec-websocket-extensions",
        HeaderValue::from_static("permessage-deflate; client_max_window_bits"),
    );
    let (_ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert!(resp.headers().get("sec-websocket-extensions").is_none(), "compression is not offered back");
}
