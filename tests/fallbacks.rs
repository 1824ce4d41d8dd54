//! Every fallback path has a counter, and every counter has a test that drives
//! its fallback and sees it move (docs/OPERATIONS.md lists them all).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use common::{test_config, wait_until, DuplexEdge, LiveEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::ErrorKind;
use tether_edge::config::BrokenProfile;
use tether_edge::counters::EdgeCounters;
use tether_harness::device::tool;
use tether_harness::{Behavior, DeviceSpec};

fn call(session: &str, name: &str) -> CallParams {
    let meta = CallMeta { credential: Some(common::user("mira")), ..CallMeta::default() };
    CallParams { session: session.into(), name: name.into(), arguments: json!({}), meta }
}

async fn next_json(ws: &mut WebSocketStream<DuplexStream>) -> Value {
    loop {
        if let Message::Text(t) = ws.next().await.unwrap().unwrap() {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["method"] != json!("notifications/tether.dev/manifest_applied") {
                return v;
            }
        }
    }
}

async fn send(ws: &mut WebSocketStream<DuplexStream>, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

/// A hand-driven device that completes the handshake with `tools`; returns its session id.
/// A scripted device's handshake up to the edge's first `tools/list`:
/// (the session id, that request).
async fn until_first_list(ws: &mut WebSocketStream<DuplexStream>) -> (String, Value) {
    let init = next_json(ws).await;
    let session = init["params"]["_meta"]["tether.dev/session"].as_str().unwrap().to_owned();
    send(ws, json!({"jsonrpc":"2.0","id":init["id"],"result":{"serverInfo":{"name":"scripted"}}})).await;
    next_json(ws).await; // initialized
    (session, next_json(ws).await)
}

async fn scripted(edge: &DuplexEdge, ws: &mut WebSocketStream<DuplexStream>, tools: Value) -> String {
    let (session, list) = until_first_list(ws).await;
    send(ws, json!({"jsonrpc":"2.0","id":list["id"],"result":{"tools":tools,"_meta":{"tether.dev/seq":1}}}))
        .await;
    // Ready: the edge reports the manifest applied only once the session is listed.
    loop {
        if let Message::Text(t) = ws.next().await.unwrap().unwrap() {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["method"] == json!("notifications/tether.dev/manifest_applied") {
                break;
            }
        }
    }
    assert!(edge.hub.session(&session).is_some(), "listed before the device is told");
    session
}

/// The frames a server wrote, parsed from raw bytes: (opcode, payload).
/// Server frames are never masked.
fn server_frames(mut raw: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while raw.len() >= 2 {
        let opcode = raw[0] & 0x0f;
        let (len, header) = match raw[1] & 0x7f {
            126 => (u16::from_be_bytes([raw[2], raw[3]]) as usize, 4),
            127 => (u64::from_be_bytes(raw[2..10].try_into().unwrap()) as usize, 10),
            n => (n as usize, 2),
        };
        assert!(raw[1] & 0x80 == 0, "a server frame is never masked: the raw stream is misaligned");
        frames.push((opcode, raw[header..header + len].to_vec()));
        raw = &raw[header + len..];
    }
    assert!(raw.is_empty(), "trailing bytes after the last frame");
    frames
}

fn counter(edge: &DuplexEdge, name: &str) -> u64 {
    edge.hub.counters().get(name)
}

#[tokio::test(start_paused = true)]
async fn sessions_calls_and_cancels_are_counted() {
    let edge = DuplexEdge::new();
    let (_dev, session) =
        edge.device(DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent)).await;
    assert_eq!(counter(&edge, "sessions_opened"), 1);
    let link = edge.backend().await;
    let err = link.call(call(&session, "client__wait"), Duration::from_secs(12)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert_eq!(counter(&edge, "calls_started"), 1);
    assert_eq!(counter(&edge, "cancels_sent"), 1);
    edge.hub.session(&session).unwrap().end(tether_edge::exit::Exit::ConnectionLost);
    let err = link.call(call(&session, "client__wait"), Duration::from_secs(12)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ChannelClosed);
    assert_eq!(counter(&edge, "calls_channel_closed"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_device_that_fails_initialize_is_counted_and_closed_1008() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let init = next_json(&mut ws).await;
    send(&mut ws, json!({"jsonrpc":"2.0","id":init["id"],"error":{"code":-32603,"message":"no"}})).await;
    let code = loop {
        match ws.next().await {
            Some(Ok(Message::Close(f))) => break f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            _ => break None,
        }
    };
    assert_eq!(code, Some(1008));
    assert_eq!(counter(&edge, "sessions_failed_init"), 1);
    assert_eq!(edge.hub.session_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn unknown_responses_stale_list_changed_and_bad_frames() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let _session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    send(&mut ws, json!({"jsonrpc":"2.0","id":999,"result":{}})).await;
    send(&mut ws, json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"tether.dev/seq":1}}})).await;
    ws.send(Message::text("{broken")).await.unwrap();
    let reply = next_json(&mut ws).await;
    assert_eq!(reply["error"]["data"]["kind"], json!("parse_error"));
    assert_eq!(counter(&edge, "unknown_responses"), 1);
    assert_eq!(counter(&edge, "list_changed_stale"), 1);
    assert_eq!(counter(&edge, "bad_frames"), 1);
    assert!(edge.hub.metrics.render().contains("tether_frames_refused_total{kind=\"parse_error\"} 1"));
}

/// A device's task status for no task the edge follows, or malformed, is dropped and counted.
#[tokio::test(start_paused = true)]
async fn task_statuses_for_no_task_the_edge_follows_are_dropped_and_counted() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let _session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    let status =
        |params: Value| json!({"jsonrpc":"2.0","method":"notifications/tasks/status","params":params});
    send(&mut ws, status(json!({"taskId": "nobody-asked", "status": "working"}))).await;
    send(&mut ws, status(json!({"status": 7}))).await;
    wait_until(|| counter(&edge, "task_statuses_dropped") == 2).await;
    assert_eq!(counter(&edge, "task_statuses_dropped"), 2);
}

/// Progress for no call in flight, malformed, or going backwards is dropped
/// and counted at the edge; progress the link has no caller for, at core.
#[tokio::test(start_paused = true)]
async fn progress_nobody_asked_for_is_dropped_and_counted_on_both_sides() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    let progress = |params: Value| json!({"jsonrpc":"2.0","method":"notifications/progress","params":params});
    send(&mut ws, progress(json!({"progressToken": 7, "progress": 1}))).await;
    send(&mut ws, progress(json!({"progress": 1}))).await;
    // A call that asked for progress: the device goes 2, then back to 1 (dropped).
    let link = edge.backend().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let asked = call(&session, "client__a");
    let pending =
        tokio::spawn(async move { link.call_with_progress(asked, Duration::from_secs(12), tx).await });
    let request = next_json(&mut ws).await;
    let token = request["params"]["_meta"]["progressToken"].clone();
    send(&mut ws, progress(json!({"progressToken": token, "progress": 2}))).await;
    send(&mut ws, progress(json!({"progressToken": token, "progress": 1}))).await;
    send(&mut ws, json!({"jsonrpc":"2.0","id":request["id"],"result":{"content":[]}})).await;
    pending.await.unwrap().unwrap();
    assert_eq!(rx.recv().await.map(|p| p.progress), Some(2.0));
    assert_eq!(counter(&edge, "progress_dropped"), 3);
    assert_eq!(counter(&edge, "progress_relayed"), 1);

    // An edge relaying progress for a call the link no longer waits for: dropped at core.
    let (link, mut scripted_edge) = common::scripted_backend_edge().await;
    let note = json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"session":"s","progressToken":41,"progress":1}});
    scripted_edge.send(Message::text(note.to_string())).await.unwrap();
    wait_until(|| link.counters().get("progress_dropped") == 1).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_reread_keeps_the_old_manifest_and_is_counted() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    send(&mut ws, json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"tether.dev/seq":2}}})).await;
    let read = next_json(&mut ws).await;
    assert_eq!(read["method"], json!("tools/list"));
    send(&mut ws, json!({"jsonrpc":"2.0","id":read["id"],"error":{"code":-32603,"message":"busy"}})).await;
    wait_until(|| counter(&edge, "reread_failures") == 1).await;
    assert_eq!(edge.hub.session(&session).unwrap().manifest().unwrap().seq, 1);
}

#[tokio::test(start_paused = true)]
async fn long_descriptions_are_cut_and_counted() {
    let edge = DuplexEdge::new();
    let mut long = tool("talky");
    long.description = Some("d".repeat(600));
    let (_dev, session) = edge.device(DeviceSpec::minimal(vec![long])).await;
    assert_eq!(counter(&edge, "descriptions_truncated"), 1);
    let m = edge.hub.session(&session).unwrap().manifest().unwrap();
    assert_eq!(m.tools()[0].description.as_ref().map(|d| d.chars().count()), Some(512));
}

/// A device that stops reading cannot hold its connection past the idle
/// deadline: the writer blocked on the full pipe is given a bounded time to
/// send its close, then abandoned (counted), and the connection ends.
#[tokio::test(start_paused = true)]
async fn a_device_that_stops_reading_cannot_hold_its_connection_open() {
    let edge = DuplexEdge::new();
    let (server, device_end) = edge.pipe(512).await;
    let (sink, stream) = server.split();
    let device = tether_edge::session::DeviceUpgrade {
        principal: "mira".into(),
        expires_in: None,
        announced: None,
        resume: None,
    };
    let connection = tokio::spawn(tether_edge::session::serve_client(
        std::sync::Arc::clone(&edge.hub),
        sink,
        stream,
        device,
        edge.shutdown.clone(),
    ));
    let mut ws = WebSocketStream::from_raw_socket(device_end, Role::Client, None).await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    // The device stops reading; calls fill the pipe and block the writer.
    let link = std::sync::Arc::new(edge.backend().await);
    for _ in 0..64 {
        let (link, p) = (link.clone(), call(&session, "client__a"));
        tokio::spawn(async move { link.call(p, Duration::from_secs(12)).await });
    }
    let ended = tokio::time::timeout(test_config().idle_timeout * 3, connection).await;
    assert!(ended.is_ok(), "the connection outlived the idle deadline by far");
    assert!(edge.hub.session(&session).is_none());
    assert_eq!(counter(&edge, "close_writes_abandoned"), 1);
    drop(ws);
}

/// A backend that stops reading cannot stall its link for ever: a write that
/// does not finish within 10 s closes the link (counted).
#[tokio::test(start_paused = true)]
async fn a_backend_that_stops_reading_has_its_link_closed() {
    let edge = DuplexEdge::new();
    let (server, backend_end) = edge.pipe(512).await;
    let (sink, stream) = server.split();
    let link = tokio::spawn(tether_edge::backend::serve_backend(
        std::sync::Arc::clone(&edge.hub),
        sink,
        stream,
        "agent".into(),
        edge.shutdown.clone(),
    ));
    let mut ws = WebSocketStream::from_raw_socket(backend_end, Role::Client, None).await;
    let started = tokio::time::Instant::now();
    // Requests whose answers fill the 512-byte pipe; the backend reads none of them.
    // (Sending fails once the edge has closed the link: that is the point.)
    for id in 0..64 {
        let request = json!({"jsonrpc":"2.0","id":id,"method":"sessions/list","params":{}});
        if ws.send(Message::text(request.to_string())).await.is_err() {
            break;
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(60), link).await;
    assert!(ended.is_ok(), "the link is still held for a backend that reads nothing");
    // Paused time jumps while everything waits: the deadline is what ended it.
    let held = started.elapsed();
    assert!(held >= Duration::from_secs(10) && held < Duration::from_secs(20), "closed after {held:?}");
    assert_eq!(counter(&edge, "backend_writes_stalled"), 1);
}

/// 1,000 calls at once at default sizes to a device that stopped reading:
/// what the edge holds stays within its queue, every call gets one outcome,
/// and every refusal is an `overloaded` that was counted.
#[tokio::test(start_paused = true)]
async fn a_burst_of_1000_calls_to_a_device_that_stopped_reading_stays_bounded_and_counts_every_refusal() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device_with_pipe(512).await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    // The device now stops reading; the pipe and then the queue fill up.
    let link = std::sync::Arc::new(edge.backend().await);
    let calls: Vec<_> = (0..1_000)
        .map(|_| {
            let link = link.clone();
            let p = call(&session, "client__a");
            tokio::spawn(async move { link.call(p, Duration::from_secs(12)).await })
        })
        .collect();
    let s = edge.hub.session(&session).unwrap();
    wait_until(|| s.pending_calls() + counter(&edge, "outbound_full") as usize >= 1_000).await;
    let queue = test_config().outbound_queue;
    assert!(s.queued_frames() <= queue, "{} frames queued past the bound {queue}", s.queued_frames());
    // Held calls: the queue's worth, one write batch the writer took, and the
    // few already handed to the 512-byte pipe.
    assert!(
        s.pending_calls() <= queue + tether_edge::ws::WRITE_BATCH + 16,
        "{} calls held for a device that reads nothing",
        s.pending_calls()
    );
    let mut kinds = std::collections::BTreeMap::new();
    for c in calls {
        let kind = c.await.unwrap().map_or_else(|e| e.kind.as_str(), |_| "ok");
        *kinds.entry(kind).or_insert(0u64) += 1;
    }
    let overloaded = kinds.get("overloaded").copied().unwrap_or(0);
    assert!(overloaded > 0, "{kinds:?}");
    assert_eq!(overloaded + kinds.get("timeout").copied().unwrap_or(0), 1_000, "one outcome each: {kinds:?}");
    let metrics = edge.hub.metrics.render();
    let counted = format!("tether_calls_by_outcome_total{{outcome=\"overloaded\"}} {overloaded}");
    assert!(metrics.contains(&counted), "every refusal counted: {counted} not in {metrics}");
    assert!(counter(&edge, "outbound_full") >= overloaded);
    drop(ws);
}

#[tokio::test(start_paused = true)]
async fn a_backend_with_too_many_requests_in_flight_is_refused() {
    let mut config = test_config();
    config.backend_max_in_flight = 2;
    let edge = DuplexEdge::with_config(config);
    let (_dev, session) =
        edge.device(DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent)).await;
    let link = std::sync::Arc::new(edge.backend().await);
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let link = link.clone();
            let p = call(&session, "client__wait");
            tokio::spawn(async move { link.call(p, Duration::from_secs(12)).await })
        })
        .collect();
    let kinds: Vec<_> =
        futures::future::join_all(calls).await.into_iter().map(|r| r.unwrap().unwrap_err().kind).collect();
    assert_eq!(kinds.iter().filter(|k| **k == ErrorKind::Overloaded).count(), 1, "{kinds:?}");
    assert_eq!(counter(&edge, "backend_requests_refused"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_backend_that_falls_behind_on_events_is_counted() {
    let mut config = test_config();
    config.backend_event_queue = 2;
    let edge = DuplexEdge::with_config(config);
    let mut sessions = Vec::new();
    for _ in 0..4 {
        sessions.push(edge.device(DeviceSpec::minimal(vec![tool("a")])).await);
    }
    let _link = edge.backend().await;
    tokio::task::yield_now().await;
    // Four closes published without yielding: the backend task sees a lag.
    for (_, id) in &sessions {
        edge.hub.session(id).unwrap().end(tether_edge::exit::Exit::ConnectionLost);
    }
    wait_until(|| counter(&edge, "backend_events_lagged") == 1).await;
}

#[tokio::test(start_paused = true)]
async fn a_device_whose_profile_is_broken_gets_default_caps_counted() {
    let mut config = test_config();
    config
        .broken_profiles
        .push(BrokenProfile { name: "sims".into(), server_name: Some("sim-device".into()) });
    let edge = DuplexEdge::with_config(config);
    let (_dev, session) = edge.device(DeviceSpec::minimal(vec![tool("a")])).await;
    assert_eq!(counter(&edge, "client_profile_fallbacks"), 1);
    assert_eq!(edge.hub.session(&session).unwrap().caps(), tether_contract::Caps::default());
}

#[tokio::test(start_paused = true)]
async fn a_matching_client_profile_applies_its_caps() {
    let mut config = test_config();
    let caps = tether_contract::Caps { max_tools: 1, ..tether_contract::Caps::default() };
    config.client_profiles.push(tether_edge::config::ClientProfile {
        name: "sims".into(),
        server_name: "sim-device".into(),
        caps,
    });
    let edge = DuplexEdge::with_config(config);
    let (_dev, session) = edge.device(DeviceSpec::minimal(vec![tool("a"), tool("b")])).await;
    let m = edge.hub.session(&session).unwrap().manifest().unwrap();
    assert_eq!(m.tools().len(), 1);
    assert_eq!(counter(&edge, "tools_dropped"), 1);
    assert_eq!(counter(&edge, "client_profile_fallbacks"), 0);
}

#[tokio::test]
async fn refused_upgrades_and_slow_handshakes_are_counted() {
    let edge = LiveEdge::start().await;
    // A plain request for a page that does not exist.
    let addr = edge.url.trim_start_matches("ws://").to_owned();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET /index.html HTTP/1.1\r\n\r\n").await.unwrap();
    wait_until(|| edge.hub.counters().get("upgrade_refused") == 1).await;
    // A peer that connects and says nothing (slowloris) does not hold the door:
    // a real device connects and is served while it waits.
    let _silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (_dev, _session) = edge.device(DeviceSpec::minimal(vec![tool("a")])).await;
    assert_eq!(
        edge.hub.counters().get("handshake_timeouts"),
        0,
        "the silent peer is still within its deadline"
    );
    // And it is cut at its deadline: an edge with a short one, and nobody else it could bind.
    let mut config = test_config();
    config.handshake_timeout = Duration::from_millis(200);
    let short = LiveEdge::start_with(config).await;
    let _silent = tokio::net::TcpStream::connect(short.url.trim_start_matches("ws://")).await.unwrap();
    wait_until(|| short.hub.counters().get("handshake_timeouts") == 1).await;
}

/// Whether `arg` says "moved": a positive integer literal, `Some(n.0)`, or a
/// sum with a positive literal term (`bad.len() as u64 + 2`).
fn positive(arg: &str) -> bool {
    !arg.contains('-') && arg.split('+').any(positive_literal)
}

fn positive_literal(arg: &str) -> bool {
    let inner = arg.trim().strip_prefix("Some(").and_then(|a| a.strip_suffix(')')).unwrap_or(arg.trim());
    let digits = inner.strip_suffix(".0").unwrap_or(inner).replace('_', "");
    digits.parse::<u64>().is_ok_and(|n| n > 0)
}

/// Whether `text` holds an exposition line `tether_…_total N` with N > 0.
fn exposes_positive(text: &str) -> bool {
    text.match_indices("_total ")
        .any(|(i, m)| text[i + m.len()..].chars().next().is_some_and(|c| c.is_ascii_digit() && c != '0'))
}

/// Whether one assertion (or wait) about the counter says that it moved:
/// `assert_eq!(…"name"…, 1)`, `assert!(…"name"… >= n)`, `assert_ne!(…, 0)`,
/// or `wait_until(|| …"name"… == 1)`.
fn asserts_moved(callee: &str, list: &str, mentions: &dyn Fn(&str) -> bool) -> bool {
    if !mentions(list) {
        return false;
    }
    let parts = common::source::args(list);
    let comparison = |text: &str| {
        let code = common::source::blank_literals(text);
        code.contains(" > ")
            || code.contains(" >= ")
            || code
                .split("==")
                .skip(1)
                .any(|rhs| positive_literal(rhs.split(['&', '|', ')']).next().unwrap_or("")))
    };
    match callee {
        "assert_eq!" => {
            parts.len() >= 2
                && ((mentions(parts[0]) && positive(parts[1])) || (mentions(parts[1]) && positive(parts[0])))
        }
        "assert_ne!" => parts.len() >= 2 && parts[..2].iter().any(|p| p.trim() == "0"),
        "assert!" => parts.first().is_some_and(|p| mentions(p) && (comparison(p) || exposes_positive(p))),
        "wait_until" => comparison(list),
        _ => false,
    }
}

/// The test functions that assert `name` moved (by its name in a counter
/// read, or its series `{prefix}{name}_total` in an exposition).
fn tests_asserting_moved<'a>(tests: &'a [common::source::TestFn], prefix: &str, name: &str) -> Vec<&'a str> {
    let quoted = format!("\"{name}\"");
    let series = format!("{prefix}{name}_total");
    let mentions = move |text: &str| text.contains(&quoted) || text.contains(&series);
    let callees = ["assert_eq!", "assert_ne!", "assert!", "wait_until"];
    tests
        .iter()
        .filter(|t| {
            common::source::invocations(&t.body, &callees)
                .iter()
                .any(|(callee, list)| asserts_moved(callee, list, &mentions))
        })
        .map(|t| t.name.as_str())
        .collect()
}

/// Each counter has help text, a row `{prefix}{name}_total` in docs/OPERATIONS.md,
/// and a test function in `dirs` that asserts it moved (`get` panics on an
/// unknown name, so a misspelt one cannot pass).
fn check_counters(counters: Vec<(&str, &str)>, prefix: &str, dirs: &[&str]) {
    check_counters_but(counters, prefix, dirs, &[]);
}

/// [`check_counters`] for a crate with counters no test drives yet: they are
/// listed, and the list must be exactly those (a new untested counter fails,
/// and so does a listed one that gained a test, so the list only shrinks).
fn check_counters_but(counters: Vec<(&str, &str)>, prefix: &str, dirs: &[&str], untested: &[&str]) {
    let ops = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/OPERATIONS.md")).unwrap();
    let tests = common::source::test_fns(dirs);
    assert!(tests.len() >= 20, "scanner sanity: {} test functions", tests.len());
    let mut missing = Vec::new();
    for (name, help) in counters {
        assert!(!help.is_empty(), "{name} has no help text");
        assert!(
            ops.contains(&format!("{prefix}{name}_total")),
            "docs/OPERATIONS.md does not list {prefix}{name}_total"
        );
        if tests_asserting_moved(&tests, prefix, name).is_empty() {
            missing.push(name);
        }
    }
    let mut listed = untested.to_vec();
    listed.sort_unstable();
    missing.sort_unstable();
    assert_eq!(
        missing, listed,
        "the {prefix} counters no test asserts moved (left) are not the ones listed (right)"
    );
}

#[test]
fn the_counter_check_accepts_movement_and_refuses_spelling() {
    let test = |body: &str| common::source::TestFn { file: "t".into(), name: "t".into(), body: body.into() };
    let moved = [
        r#"{ assert_eq!(counter(&edge, "x"), 1); }"#,
        r#"{ assert_eq!(2, c.get("x")); }"#,
        r#"{ assert_eq!(c.get("x"), bad.len() as u64 + 2); }"#,
        r#"{ assert!(counter(&edge, "x") >= 1); }"#,
        r#"{ wait_until(|| counter(&edge, "x") == 1).await; }"#,
        r#"{ assert_eq!(sample(&text, "tether_x_total "), Some(1.0)); }"#,
        r#"{ assert!(text.contains("tether_x_total 1"), "{text}"); }"#,
    ];
    for body in moved {
        assert_eq!(tests_asserting_moved(&[test(body)], "tether_", "x"), vec!["t"], "{body}");
    }
    let not_moved = [
        r#"{ assert_eq!(counter(&edge, "x"), 0); }"#,
        r#"{ assert_eq!(counter(&edge, "x"), n - 1); }"#,
        r#"{ let _ = counter(&edge, "x"); }"#,
        r#"{ assert_eq!(counter(&edge, "y"), 1); }"#,
        r#"{ assert!(counter(&edge, "x") == 0); }"#,
        r#"{ // assert_eq!(counter(&edge, "x"), 1);
           }"#,
        r#"{ let s = "assert_eq!(counter(&edge, \"x\"), 1)"; }"#,
    ];
    for body in not_moved {
        assert!(tests_asserting_moved(&[test(body)], "tether_", "x").is_empty(), "{body}");
    }
    let text = "#[test]\nfn a() { let s = \"{\"; // }\n let c = '}'; let r = r#\"}\"#; x(1) }\nfn b() {}";
    let found = common::source::tests_in("f", text);
    assert_eq!(found.len(), 1, "strings and comments never count as code");
    assert!(found[0].body.ends_with("x(1) }"));
}

#[test]
fn every_counter_is_documented_and_driven_by_a_test() {
    check_counters(EdgeCounters::describe(), "tether_", &["tests", "crates/edge"]);
}

#[test]
fn every_cluster_counter_is_documented_and_driven_by_a_test() {
    check_counters(
        tether_cluster::ClusterCounters::describe(),
        "tether_cluster_",
        &["tests", "crates/cluster"],
    );
}

/// A `list_changed` that arrives while the edge reads the first catalog is
/// not lost: it is read once the session opens.
#[tokio::test(start_paused = true)]
async fn a_list_changed_during_the_handshake_is_read_once_the_session_opens() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let (session, first) = until_first_list(&mut ws).await;
    assert_eq!(first["method"], json!("tools/list"));
    send(&mut ws, json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"tether.dev/seq":2}}})).await;
    send(&mut ws, json!({"jsonrpc":"2.0","id":first["id"],"result":{"tools":[{"name":"a"}],"_meta":{"tether.dev/seq":1}}})).await;
    let second = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let v = next_json(&mut ws).await;
            if v["method"] == json!("tools/list") {
                break v;
            }
        }
    })
    .await
    .expect("the change announced during the handshake is read once the session opens");
    send(&mut ws, json!({"jsonrpc":"2.0","id":second["id"],"result":{"tools":[{"name":"a"},{"name":"b"}],"_meta":{"tether.dev/seq":2}}})).await;
    wait_until(|| edge.hub.session(&session).and_then(|s| s.manifest()).is_some_and(|m| m.seq == 2)).await;
    assert_eq!(edge.hub.session(&session).unwrap().manifest().unwrap().tools().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_list_changed_is_coalesced_and_rate_limited() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    let started = tokio::time::Instant::now();
    let mut reads = 0;
    for seq in 2..=41u64 {
        // The device announces a new catalog every 10 ms: 40 in 400 ms.
        send(&mut ws, json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"tether.dev/seq":seq}}})).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        while let Ok(Some(Ok(Message::Text(t)))) =
            tokio::time::timeout(Duration::from_millis(1), ws.next()).await
        {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["method"] == json!("tools/list") {
                reads += 1;
                send(&mut ws, json!({"jsonrpc":"2.0","id":v["id"],"result":{"tools":[{"name":"a"}],"_meta":{"tether.dev/seq":seq}}})).await;
            }
        }
    }
    let elapsed = started.elapsed();
    assert!(reads >= 2, "the catalog is still re-read: {reads}");
    assert!(
        reads as u128 <= elapsed.as_millis() / 200 + 1,
        "{reads} re-reads in {elapsed:?} exceed 5 per second"
    );
    assert!(counter(&edge, "list_changed_rate_limited") >= 1);
    assert!(edge.hub.session(&session).unwrap().manifest().unwrap().seq > 1);
}

#[tokio::test(start_paused = true)]
async fn core_counts_its_own_fallbacks() {
    let (link, mut edge) = common::scripted_backend_edge().await;
    // per_tool_timeouts: the edge never answers a turn's call within 12 s.
    let session_manifest =
        json!({"session":"s","seq":1,"tools":[{"name":"client__a","inputSchema":{"type":"object"}}]});
    let turn_link = link.clone();
    let turn = tokio::spawn(async move {
        let mut turn =
            tether_core::Turn::begin(&turn_link, "s", Some("user"), tether_contract::Budgets::default())
                .await;
        turn.call("client__a", json!({})).await
    });
    let begin = next_json(&mut edge).await;
    send(&mut edge, json!({"jsonrpc":"2.0","id":begin["id"],"result":{"turn":"t","session":"s","seq":1}}))
        .await;
    let list = next_json(&mut edge).await;
    send(&mut edge, json!({"jsonrpc":"2.0","id":list["id"],"result":session_manifest})).await;
    let the_call = next_json(&mut edge).await;
    assert_eq!(the_call["method"], json!("tools/call"));
    let err = turn.await.unwrap().unwrap_err();
    assert_eq!(err.detail("leg"), Some(&json!("per_tool")));
    assert_eq!(link.counters().get("per_tool_timeouts"), 1);
    // late_responses: the answer arrives after core gave up.
    send(&mut edge, json!({"jsonrpc":"2.0","id":the_call["id"],"result":{"result":{"content":[]},"seq":1}}))
        .await;
    // bad_frames: the edge sends garbage.
    edge.send(Message::text("{nope")).await.unwrap();
    // notifications_dropped: nobody reads notifications, so the queue (1,024) overflows.
    for _ in 0..1_100 {
        send(&mut edge, json!({"jsonrpc":"2.0","method":"notifications/session/closed","params":{"session":"x","reason":"r"}})).await;
    }
    let counters = link.counters();
    wait_until(|| counters.get("notifications_dropped") >= 76).await;
    assert_eq!(counters.get("late_responses"), 1);
    assert_eq!(counters.get("bad_frames"), 1);
    let text = counters.render();
    assert!(text.contains("tether_core_per_tool_timeouts_total 1"), "{text}");
}

#[test]
fn every_core_counter_is_documented_and_driven_by_a_test() {
    // Core's unit tests live beside the code they test.
    check_counters(tether_core::CoreCounters::describe(), "tether_core_", &["tests", "crates/core"]);
}

#[test]
fn every_bridge_counter_is_documented_and_those_without_a_test_are_listed() {
    // Each of these paths counts and logs, but no test drives it yet.
    let untested = [
        "calls_server_gone",
        "calls_unsupported_result",
        "list_failures",
        "tools_unreadable",
        "subscription_failures",
        "task_requests_failed",
    ];
    check_counters_but(
        tether_bridge::BridgeCounters::describe(),
        "tether_bridge_",
        &["tests", "crates/bridge"],
        &untested,
    );
}

#[test]
fn every_trace_exporter_counter_is_documented_and_driven_by_a_test() {
    check_counters(
        tether_telemetry::TraceCounters::describe(),
        "tether_trace_",
        &["tests", "crates/telemetry"],
    );
}

#[test]
fn every_mcp_endpoint_counter_is_documented_and_driven_by_a_test() {
    check_counters(tether_gateway::GatewayMetrics::describe(), "tether_mcp_", &["tests", "crates/gateway"]);
}

#[tokio::test(start_paused = true)]
async fn a_device_that_keeps_sending_garbage_is_closed_1008_after_its_strikes() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    for i in 0..tether_edge::session::MAX_STRIKES {
        ws.send(Message::text(format!("garbage {i}"))).await.unwrap();
    }
    let mut errors = 0;
    let code = loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) if t.as_str().contains("parse_error") => errors += 1,
            Some(Ok(Message::Close(f))) => break f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            _ => break None,
        }
    };
    assert_eq!(code, Some(1008));
    assert_eq!(errors, tether_edge::session::MAX_STRIKES, "every bad frame got its structured error first");
    assert_eq!(counter(&edge, "strikeouts"), 1);
    assert!(edge.hub.session(&session).is_none());
}

async fn close_code_of(ws: &mut WebSocketStream<DuplexStream>) -> Option<u16> {
    loop {
        match ws.next().await {
            Some(Ok(Message::Close(f))) => return f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            _ => return None,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_half_open_device_is_pinged_then_closed_with_1001_exactly_at_the_idle_deadline() {
    use tokio::io::AsyncReadExt;
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    // The device goes quiet and reads nothing back: no pongs. Its raw bytes
    // are read past the WebSocket layer, which would answer the pings.
    let quiet_since = tokio::time::Instant::now();
    let mut raw = Vec::new();
    ws.get_mut().read_to_end(&mut raw).await.unwrap();
    assert_eq!(
        quiet_since.elapsed(),
        Duration::from_secs(75),
        "closed on the deadline, not at a later check"
    );
    let frames = server_frames(&raw);
    let opcodes: Vec<u8> = frames.iter().map(|(op, _)| *op).collect();
    assert_eq!(opcodes, vec![0x9, 0x9, 0x8], "pinged at 30 s and 60 s, then closed");
    let close = &frames[2].1;
    assert_eq!(u16::from_be_bytes([close[0], close[1]]), 1001);
    assert_eq!(counter(&edge, "idle_closes"), 1);
    assert!(edge.hub.session(&session).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_device_that_answers_pings_stays_connected() {
    let edge = DuplexEdge::new();
    let (_dev, session) = edge.device(DeviceSpec::minimal(vec![tool("a")])).await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(edge.hub.session(&session).is_some(), "a live device survives ten idle minutes");
    assert_eq!(counter(&edge, "idle_closes"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_credential_that_expires_mid_session_closes_it_at_its_expiry_with_1008() {
    let edge = DuplexEdge::new();
    let connected = tokio::time::Instant::now();
    let mut ws = edge.raw_device_full(1 << 18, Some(Duration::from_secs(10))).await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    assert_eq!(close_code_of(&mut ws).await, Some(1008));
    assert_eq!(connected.elapsed(), Duration::from_secs(10));
    assert_eq!(counter(&edge, "credentials_expired"), 1);
    assert!(edge.hub.session(&session).is_none());
}

#[tokio::test(start_paused = true)]
async fn json_nested_past_the_depth_limit_is_a_parse_error_and_the_session_survives() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    // serde_json refuses nesting past 128 levels without recursing further.
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{}{}}}",
        "[".repeat(5_000),
        "]".repeat(5_000)
    );
    ws.send(Message::text(deep)).await.unwrap();
    let reply = next_json(&mut ws).await;
    assert_eq!(reply["error"]["data"]["kind"], json!("parse_error"));
    assert!(edge.hub.session(&session).is_some());
}

#[tokio::test]
async fn a_principal_may_hold_only_so_many_device_connections() {
    let mut config = test_config();
    config.max_sessions_per_principal = 2;
    let edge = LiveEdge::start_with(config).await;
    let (first, _) = edge.device(DeviceSpec::minimal(vec![tool("a")])).await;
    let (_second, _) = edge.device(DeviceSpec::minimal(vec![tool("a")])).await;
    match tokio_tungstenite::connect_async(edge.device_request()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 429),
        other => panic!("third connection: {:?}", other.map(|_| ())),
    }
    assert_eq!(edge.hub.counters().get("principal_limit_refusals"), 1);
    // When one leaves, its slot is free again.
    first.disconnect().await;
    wait_until(|| edge.hub.session_count() == 1).await;
    let mut again = None;
    for _ in 0..100 {
        if let Ok((ws, _)) = tokio_tungstenite::connect_async(edge.device_request()).await {
            again = Some(ws);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(again.is_some(), "the freed slot can be used");
}

#[tokio::test]
async fn an_address_may_hold_only_so_many_unauthenticated_connections() {
    use tokio::io::AsyncReadExt;
    let mut config = test_config();
    config.max_unauthenticated_per_ip = 3;
    let edge = LiveEdge::start_with(config).await;
    let addr = edge.url.trim_start_matches("ws://").to_owned();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let loopback: std::net::IpAddr = [127, 0, 0, 1].into();
    wait_until(|| edge.hub.unauthenticated_from(loopback) == 3).await;
    let mut fourth = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), fourth.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0, "the fourth silent connection is dropped at once");
    assert_eq!(edge.hub.counters().get("ip_limit_refusals"), 1);
    drop(held);
    // Authenticated devices are not held back once the silent ones are gone.
    wait_until(|| edge.hub.counters().get("ip_limit_refusals") == 1).await;
    let mut ok = false;
    for _ in 0..100 {
        if tokio_tungstenite::connect_async(edge.device_request()).await.is_ok() {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ok);
}

fn fragment(bytes: usize, first: bool) -> Message {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let opcode = OpCode::Data(if first { Data::Text } else { Data::Continue });
    Message::Frame(Frame::message(vec![b' '; bytes], opcode, false))
}

#[tokio::test(start_paused = true)]
async fn a_fragmented_message_that_never_ends_is_bounded_in_bytes_and_in_time() {
    // Fast: fragments pile up to the transport ceiling, then the socket closes with 1009.
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    ws.send(fragment(1024, true)).await.unwrap();
    for _ in 0..32 {
        if ws.send(fragment(1024, false)).await.is_err() {
            break;
        }
    }
    assert_eq!(close_code_of(&mut ws).await, Some(1009));
    assert_eq!(counter(&edge, "oversized_frames"), 1);
    wait_until(|| edge.hub.session(&session).is_none()).await;

    // Slow: a few bytes every 10 s never finish a message, and an unfinished
    // message is not traffic, so the idle deadline closes the socket.
    let mut ws = edge.raw_device().await;
    let session = scripted(&edge, &mut ws, json!([{"name":"a"}])).await;
    let started = tokio::time::Instant::now();
    ws.send(fragment(8, true)).await.unwrap();
    while counter(&edge, "idle_closes") == 0 {
        assert!(started.elapsed() < Duration::from_secs(120), "the trickle was never cut off");
        tokio::time::sleep(Duration::from_secs(10)).await;
        let _ = ws.send(fragment(8, false)).await;
    }
    assert!(started.elapsed() >= Duration::from_secs(75), "{:?}", started.elapsed());
    assert!(edge.hub.session(&session).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_device_cannot_claim_another_devices_session() {
    let edge = DuplexEdge::new();
    let (first, first_session) = edge.device(DeviceSpec::minimal(vec![tool("a")])).await;
    // A second device, same principal, answers initialize claiming the first one's session id.
    let mut ws = edge.raw_device().await;
    let init = next_json(&mut ws).await;
    let minted = init["params"]["_meta"]["tether.dev/session"].as_str().unwrap().to_owned();
    let claim = json!({"serverInfo":{"name":"impostor"},"_meta":{"tether.dev/session": first_session}});
    send(&mut ws, json!({"jsonrpc":"2.0","id":init["id"],"result":claim})).await;
    next_json(&mut ws).await; // initialized
    let list = next_json(&mut ws).await;
    send(&mut ws, json!({"jsonrpc":"2.0","id":list["id"],"result":{"tools":[{"name":"a"}]}})).await;
    wait_until(|| edge.hub.session(&minted).is_some()).await;

    assert_ne!(minted, first_session, "every socket gets its own minted id");
    assert_eq!(counter(&edge, "session_claims_ignored"), 1);
    // A call to the first session still reaches the first device only.
    let link = edge.backend().await;
    link.call(call(&first_session, "client__a"), Duration::from_secs(12)).await.unwrap();
    assert_eq!(first.observed.calls().len(), 1);
    while let Ok(Some(Ok(Message::Text(t)))) =
        tokio::time::timeout(Duration::from_millis(50), ws.next()).await
    {
        assert!(!t.as_str().contains("tools/call"), "the impostor got a call: {t}");
    }
}
