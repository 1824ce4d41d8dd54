//! Running it in production: probes, metrics, drain (issue #5).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use std::sync::Arc;

use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use common::{wait_until, LiveEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::{Budgets, ErrorKind};
use tether_core::Turn;
use tether_harness::device::tool;
use tether_harness::{Behavior, DeviceSpec};

/// One plain HTTP GET on loopback; returns (status code, body).
pub async fn http_get(url: &str, path: &str) -> (u16, String) {
    let addr = url.trim_start_matches("ws://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// Sends raw bytes on a fresh connection and reads until the edge closes it.
async fn exchange(url: &str, request: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(url.trim_start_matches("ws://")).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one metric sample (`name{labels} value`) from an exposition.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
}

/// The port speaks HTTP/1.1 through hyper: keep-alive, a bounded head, and a
/// clear answer to a socket endpoint asked without an upgrade.
#[tokio::test]
async fn the_port_speaks_plain_http_with_a_bounded_head() {
    let edge = LiveEdge::start().await;
    let two = exchange(&edge.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert_eq!(two.matches("HTTP/1.1 200 OK").count(), 2, "two requests on one connection: {two}");
    assert!(two.ends_with("ready\n"), "{two}");

    let huge = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n", "a".repeat(16 * 1024));
    let refused = exchange(&edge.url, huge.as_bytes()).await;
    assert!(refused.starts_with("HTTP/1.1 431"), "a head over 8 KiB: {refused}");

    let plain = exchange(&edge.url, b"GET /v1/client HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(plain.starts_with("HTTP/1.1 426"), "{plain}");
    assert!(plain.contains("WebSocket upgrade"), "{plain}");
    assert_eq!(edge.hub.counters().get("upgrade_refused"), 1);
    // Each connection gives its address's slot back once it closes.
    wait_until(|| edge.hub.unauthenticated_from("127.0.0.1".parse().unwrap()) == 0).await;
}

/// Only a connection that never sent a request head counts as slowloris: an
/// idle keep-alive connection closed at the same deadline does not.
#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_but_not_counted_as_slowloris() {
    let mut config = common::test_config();
    config.handshake_timeout = Duration::from_millis(300);
    let edge = LiveEdge::start_with(config).await;
    let addr = edge.url.trim_start_matches("ws://").to_owned();
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    // The edge closes the idle connection at the head deadline: read to that end.
    tokio::time::timeout(Duration::from_secs(10), kept.read_to_end(&mut out)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"), "served first");
    assert_eq!(edge.hub.counters().get("handshake_timeouts"), 0, "idle after a request is not slowloris");
    let _silent = TcpStream::connect(&addr).await.unwrap();
    wait_until(|| edge.hub.counters().get("handshake_timeouts") == 1).await;
}

#[tokio::test]
async fn health_readiness_and_metrics_share_the_websocket_port() {
    let edge = LiveEdge::start().await;
    assert_eq!(http_get(&edge.url, "/healthz").await, (200, "ok\n".into()));
    assert_eq!(http_get(&edge.url, "/readyz").await, (200, "ready\n".into()));
    assert_eq!(http_get(&edge.url, "/nothing-here").await.0, 404);

    let (_dev, session) = edge.device(DeviceSpec::minimal(vec![tool("ping")])).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    turn.call("client__ping", json!({})).await.unwrap();
    // Straight to the edge: core's dispatcher would refuse an unlisted name before sending it.
    let meta = CallMeta { credential: Some(common::user("mira")), ..CallMeta::default() };
    let missing =
        CallParams { session: session.clone(), name: "client__missing".into(), arguments: json!({}), meta };
    link.call(missing, Duration::from_secs(12)).await.unwrap_err();

    let (status, text) = http_get(&edge.url, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(sample(&text, "tether_sessions "), Some(1.0), "{text}");
    assert_eq!(sample(&text, "tether_calls_by_outcome_total{outcome=\"ok\"} "), Some(1.0), "{text}");
    assert_eq!(sample(&text, "tether_calls_by_outcome_total{outcome=\"tool_unavailable\"} "), Some(1.0));
    assert_eq!(sample(&text, "tether_swaps_accepted_total "), Some(1.0));
    assert_eq!(sample(&text, "tether_leg_seconds_count{leg=\"tool_call\"} "), Some(1.0));
    assert!(
        text.contains("# HELP tether_late_answers Answers that arrived after their call timed out"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"));
}

/// A backend socket opened by hand, to read the close frame the edge sends it.
async fn raw_backend(edge: &LiveEdge) -> Result<WebSocketStream<MaybeTlsStream<TcpStream>>, u16> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("{}/v1/backend", edge.url).into_client_request().unwrap();
    let token = common::keys().issue("agent", "tether-backend", Duration::from_secs(600)).unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("backend upgrade: {e}"),
    }
}

async fn close_code(ws: &mut WebSocketStream<MaybeTlsStream<TcpStream>>) -> Option<CloseCode> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Close(f))) => return f.map(|f| f.code),
            Some(Ok(_)) => continue,
            _ => return None,
        }
    }
}

#[tokio::test]
async fn a_drain_loses_no_call_in_flight() {
    let edge = LiveEdge::start().await;
    let gate = Arc::new(Semaphore::new(0));
    let spec =
        DeviceSpec::minimal(vec![tool("slow"), tool("fast")]).with("slow", Behavior::Gated(gate.clone()));
    let (dev, session) = edge.device(spec).await;
    let link = Arc::new(edge.backend().await);
    let mut watcher = raw_backend(&edge).await.unwrap();

    let in_flight = {
        let link = link.clone();
        let session = session.clone();
        tokio::spawn(async move {
            let mut turn =
                Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
            turn.call("client__slow", json!({})).await
        })
    };
    wait_until(|| edge.hub.calls_in_flight() == 1).await;
    edge.drain.cancel();
    wait_until(|| edge.hub.is_draining()).await;
    assert_eq!(http_get(&edge.url, "/readyz").await.0, 503, "not ready while draining");

    // New work is refused with a sentence; new sessions and backends too.
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let refused = turn.call("client__fast", json!({})).await.unwrap_err();
    assert_eq!(refused.kind, ErrorKind::Overloaded);
    match tokio_tungstenite::connect_async(edge.device_request()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 503),
        other => panic!("device upgrade during drain: {:?}", other.map(|_| ())),
    }
    assert_eq!(raw_backend(&edge).await.err(), Some(503), "backend upgrade during drain");

    // The call in flight is still held, for as long as the device takes: then it finishes with its real result.
    assert_eq!(edge.hub.calls_in_flight(), 1);
    gate.add_permits(1);
    let result = in_flight.await.unwrap().unwrap();
    assert_eq!(result.structured_content.unwrap()["tool"], "slow");
    assert_eq!(dev.observed.calls().iter().filter(|c| c.name == "slow").count(), 1);
    assert_eq!(edge.hub.counters().get("calls_refused_draining"), 1);
    // With nothing in flight the drain ends: devices 1012, backends 1001.
    assert_eq!(close_code(&mut watcher).await, Some(CloseCode::Away));
    let mut dev = dev;
    dev.closed().await;
    assert_eq!(dev.observed.close_code(), Some(1012));
}

#[tokio::test]
async fn a_call_that_outlives_the_drain_timeout_fails_channel_closed_at_the_timeout() {
    let mut config = common::test_config();
    config.drain_timeout = Duration::from_millis(300);
    let edge = LiveEdge::start_with(config).await;
    let gate = Arc::new(Semaphore::new(0));
    let spec = DeviceSpec::minimal(vec![tool("stuck")]).with("stuck", Behavior::Gated(gate));
    let (_dev, session) = edge.device(spec).await;
    let link = Arc::new(edge.backend().await);
    let in_flight = {
        let link = link.clone();
        tokio::spawn(async move {
            let mut turn =
                Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
            let started = tokio::time::Instant::now();
            (turn.call("client__stuck", json!({})).await, started.elapsed())
        })
    };
    wait_until(|| edge.hub.calls_in_flight() == 1).await;
    edge.drain.cancel();
    let (outcome, took) = in_flight.await.unwrap();
    let err = outcome.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ChannelClosed, "{err:?}");
    assert_eq!(err.detail("reason"), Some(&json!("drain")));
    assert!(took >= Duration::from_millis(300), "held until the drain timeout: {took:?}");
    assert!(took < Duration::from_secs(7), "ended by the drain, not by the 7 s leg: {took:?}");
}

#[tokio::test]
async fn a_drained_device_is_told_to_reconnect_elsewhere_with_1012() {
    let edge = LiveEdge::start().await;
    let req = edge.device_request();
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    // Play a minimal device by hand so the session is ready.
    use futures::SinkExt;
    let init: serde_json::Value =
        serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    ws.send(Message::text(
        json!({"jsonrpc":"2.0","id":init["id"],"result":{"serverInfo":{"name":"d"}}}).to_string(),
    ))
    .await
    .unwrap();
    let _initialized = ws.next().await.unwrap().unwrap();
    let list: serde_json::Value =
        serde_json::from_str(ws.next().await.unwrap().unwrap().to_text().unwrap()).unwrap();
    ws.send(Message::text(json!({"jsonrpc":"2.0","id":list["id"],"result":{"tools":[]}}).to_string()))
        .await
        .unwrap();
    wait_until(|| edge.hub.session_count() == 1).await;

    edge.drain.cancel();
    let code = loop {
        match ws.next().await {
            Some(Ok(Message::Close(f))) => break f.map(|f| f.code),
            Some(Ok(_)) => continue,
            _ => break None,
        }
    };
    assert_eq!(code, Some(CloseCode::Restart));
    let mut edge = edge;
    tokio::time::timeout(Duration::from_secs(10), edge.task.take().unwrap()).await.unwrap().unwrap();
}

#[tokio::test]
async fn killing_a_device_mid_call_shows_up_in_metrics() {
    let edge = LiveEdge::start().await;
    let (dev, session) =
        edge.device(DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent)).await;
    let link = std::sync::Arc::new(edge.backend().await);
    let caller = {
        let link = link.clone();
        tokio::spawn(async move {
            let mut turn =
                Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
            turn.call("client__wait", json!({})).await
        })
    };
    wait_until(|| edge.hub.calls_in_flight() == 1).await;
    dev.disconnect().await;
    let err = caller.await.unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::ChannelClosed);
    let (_, text) = http_get(&edge.url, "/metrics").await;
    assert_eq!(sample(&text, "tether_calls_channel_closed_total "), Some(1.0), "{text}");
    assert_eq!(sample(&text, "tether_sessions_latched_total "), Some(1.0));
    assert_eq!(sample(&text, "tether_calls_by_outcome_total{outcome=\"channel_closed\"} "), Some(1.0));
    assert_eq!(sample(&text, "tether_sessions "), Some(0.0));
    assert_eq!(sample(&text, "tether_calls_in_flight "), Some(0.0));
}
