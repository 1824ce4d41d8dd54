//! Budget, timeout, latch and swap behaviour on paused time, over in-memory
//! duplex sockets so virtual time only moves when everything is idle.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use common::{capture_logs, fixture, wait_until, DuplexEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::{Budgets, ErrorKind};
use tether_core::Turn;
use tether_harness::device::tool;
use tether_harness::{Behavior, DeviceSpec};

/// A backend link to an "edge" that accepts frames and never answers; keep the
/// returned pipe end alive for as long as the link should stay open.
async fn silent_edge() -> (tether_core::BackendLink, tokio::io::DuplexStream) {
    let (client_end, held_open) = tokio::io::duplex(64 * 1024);
    let role = tokio_tungstenite::tungstenite::protocol::Role::Client;
    let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(client_end, role, None).await;
    (tether_core::BackendLink::from_stream(ws), held_open)
}

fn call(session: &str, name: &str) -> CallParams {
    let meta = CallMeta { credential: Some(common::user("mira")), ..CallMeta::default() };
    CallParams { session: session.into(), name: name.into(), arguments: json!({}), meta }
}

#[tokio::test(start_paused = true)]
async fn the_7s_leg_expires_before_the_12s_budget_and_the_device_is_told_to_cancel() {
    let edge = DuplexEdge::new();
    let (dev, session) =
        edge.device(DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent)).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;

    let started = Instant::now();
    let err = turn.call("client__wait", json!({})).await.unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert_eq!(err.detail("leg"), Some(&json!("tool_call")));
    assert_eq!(err.detail("outcome"), Some(&json!("unknown")));
    assert!(elapsed >= Duration::from_secs(7) && elapsed < Duration::from_secs(12), "{elapsed:?}");
    assert!(tether_core::for_model(&err).contains("unknown"));

    wait_until(|| !dev.observed.cancels().is_empty()).await;
    let cancels = dev.observed.cancels();
    let calls = dev.observed.calls();
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0]["requestId"], calls[0].id, "cancel names the call the device got");
    assert_eq!(edge.hub.counters().get("call_timeouts"), 1);
    assert_eq!(link.counters().get("per_tool_timeouts"), 0, "the edge leg, not core's budget, fired");
}

#[tokio::test(start_paused = true)]
async fn an_answer_at_7_5s_is_logged_counted_and_dropped_with_exactly_one_outcome() {
    let edge = DuplexEdge::new();
    let spec = DeviceSpec::minimal(vec![tool("slow")])
        .with("slow", Behavior::Late { after: Duration::from_millis(7_500) });
    let (_dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;

    let (outcome, logs) = capture_logs(async {
        let outcome = turn.call("client__slow", json!({})).await;
        // The late answer arrives 500 ms after the leg expired.
        wait_until(|| edge.hub.counters().get("late_answers") == 1).await;
        outcome
    })
    .await;
    assert_eq!(outcome.unwrap_err().kind, ErrorKind::Timeout);
    assert!(logs.contains("late answer dropped") && logs.contains("tool=slow"), "{logs}");
    assert!(logs.contains("lateness_ms=500"), "lateness is measured from the deadline: {logs}");
    assert_eq!(link.counters().get("late_responses"), 0, "the backend never saw a second outcome");
    assert_eq!(edge.hub.counters().get("calls_ok") + edge.hub.counters().get("calls_failed"), 1);
}

#[tokio::test(start_paused = true)]
async fn five_calls_in_flight_fail_at_once_when_the_socket_closes() {
    let edge = DuplexEdge::new();
    let (dev, session) =
        edge.device(DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent)).await;
    let link = std::sync::Arc::new(edge.backend().await);
    let mut notes = link.notifications().unwrap();

    let calls: Vec<_> = (0..5)
        .map(|_| {
            let link = link.clone();
            let p = call(&session, "client__wait");
            tokio::spawn(async move {
                let out = link.call(p, Duration::from_secs(12)).await;
                (out, Instant::now())
            })
        })
        .collect();
    wait_until(|| dev.observed.calls().len() == 5).await;
    let closed_at = Instant::now();
    dev.disconnect().await;
    for c in calls {
        let (out, at) = c.await.unwrap();
        let err = out.unwrap_err();
        assert_eq!(err.kind, ErrorKind::ChannelClosed, "{err:?}");
        assert!(
            at - closed_at < Duration::from_millis(100),
            "failed after {:?}, not at once",
            at - closed_at
        );
    }
    // A new call is refused at once, and says why.
    let started = Instant::now();
    let err = link.call(call(&session, "client__wait"), Duration::from_secs(12)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ChannelClosed);
    assert_eq!(err.detail("reason"), Some(&json!("connection_lost")), "dropped without a close handshake");
    assert!(started.elapsed() < Duration::from_millis(100));
    // And the backend was told.
    let note = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            if let Some(tether_core::Notification::SessionClosed(c)) = notes.recv().await {
                return c;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(note.session, session);
    assert_eq!(edge.hub.counters().get("sessions_latched"), 1);
}

async fn next_json(
    ws: &mut (impl StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin),
) -> Value {
    loop {
        let msg = ws.next().await.unwrap().unwrap();
        if let Message::Text(t) = msg {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["method"] != json!("notifications/tether.dev/manifest_applied") {
                return v;
            }
        }
    }
}

fn list_result(id: &Value, seq: u64, tools: &[&str]) -> Message {
    let tools: Vec<Value> =
        tools.iter().map(|n| json!({"name": n, "inputSchema": {"type": "object"}})).collect();
    Message::text(
        json!({"jsonrpc":"2.0","id":id,"result":{"tools":tools,"_meta":{"tether.dev/seq":seq}}}).to_string(),
    )
}

#[tokio::test(start_paused = true)]
async fn two_rereads_arriving_out_of_order_keep_the_newer_seq() {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    let init = next_json(&mut ws).await;
    let session = init["params"]["_meta"]["tether.dev/session"].as_str().unwrap().to_owned();
    ws.send(Message::text(
        json!({"jsonrpc":"2.0","id":init["id"],"result":{"serverInfo":{"name":"scripted"}}}).to_string(),
    ))
    .await
    .unwrap();
    assert_eq!(next_json(&mut ws).await["method"], json!("notifications/initialized"));
    let first = next_json(&mut ws).await;
    ws.send(list_result(&first["id"], 1, &["a"])).await.unwrap();
    wait_until(|| edge.hub.session(&session).is_some()).await;

    let (outcome, logs) = capture_logs(async {
        // Read X: triggered by list_changed (seq 2), held by the device.
        ws.send(Message::text(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"tether.dev/seq":2}}}"#)).await.unwrap();
        let read_x = next_json(&mut ws).await;
        assert_eq!(read_x["method"], json!("tools/list"));

        let link = edge.backend().await;
        let s = session.clone();
        let call_task = tokio::spawn(async move { link.call(call(&s, "client__a"), Duration::from_secs(12)).await });
        let tool_call = next_json(&mut ws).await;
        assert_eq!(tool_call["method"], json!("tools/call"));
        ws.send(Message::text(json!({"jsonrpc":"2.0","id":tool_call["id"],"result":{"content":[],"_meta":{"tether.dev/seq":3}}}).to_string())).await.unwrap();

        // Read Z: triggered by the result's newer seq.
        let read_z = next_json(&mut ws).await;
        assert_eq!(read_z["method"], json!("tools/list"));
        ws.send(list_result(&read_z["id"], 3, &["a", "c"])).await.unwrap();
        let outcome = call_task.await.unwrap();
        // Now the stale answer to read X arrives.
        ws.send(list_result(&read_x["id"], 2, &["a", "b"])).await.unwrap();
        wait_until(|| edge.hub.counters().get("swaps_rejected") == 1).await;
        outcome
    })
    .await;

    let response = outcome.unwrap();
    assert_eq!(response.seq, 3);
    let fresh = response.manifest.unwrap();
    let names: Vec<_> = fresh.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["client__a", "client__c"]);
    let applied = edge.hub.session(&session).unwrap().manifest().unwrap();
    assert_eq!(applied.seq, 3, "the stale seq 2 must not replace seq 3");
    assert!(logs.contains("manifest swap accepted") && logs.contains("to=3"), "{logs}");
    assert!(
        logs.contains("stale manifest swap rejected")
            && logs.contains("applied=3")
            && logs.contains("offered=2"),
        "{logs}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_removed_mid_turn_is_unavailable_and_the_error_lists_what_is() {
    let edge = DuplexEdge::new();
    let (dev, session) = edge.device(DeviceSpec::minimal(vec![tool("keep"), tool("leave")])).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    assert_eq!(turn.tools().len(), 2);

    dev.navigate(vec![tool("keep")]).await;
    wait_until(|| edge.hub.session(&session).and_then(|s| s.manifest()).is_some_and(|m| m.seq == 2)).await;
    let err = turn.call("client__leave", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ToolUnavailable);
    assert_eq!(err.detail("available"), Some(&json!(["client__keep"])));
    assert!(tether_core::for_model(&err).contains("client__keep"));
    assert!(dev.observed.calls().is_empty(), "nothing reached the device");
    // The surviving tool still works, and the call hands back the fresh manifest.
    turn.call("client__keep", json!({})).await.unwrap();
    assert_eq!(turn.manifest().unwrap().seq, 2);
    assert_eq!(turn.tools().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_that_moves_the_seq_rereads_and_one_that_does_not_never_does() {
    let edge = DuplexEdge::new();
    let spec = DeviceSpec::minimal(vec![tool("look"), tool("go")])
        .with("go", Behavior::Navigate { tools: vec![tool("look"), tool("go"), tool("new")] });
    let (_dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    turn.call("client__look", json!({})).await.unwrap();
    assert_eq!(edge.hub.counters().get("rereads_after_call"), 0, "an unchanged seq costs no re-read");
    turn.call("client__go", json!({})).await.unwrap();
    assert_eq!(edge.hub.counters().get("rereads_after_call"), 1);
    assert_eq!(turn.manifest().unwrap().seq, 2);
    assert!(turn.tools().iter().any(|t| t.name == "client__new"), "the turn picked up the fresh manifest");
}

/// A seq that moves over the same catalog re-stamps the manifest: no schema
/// compile, no `list_changed` to backends, no manifest in the call response.
#[tokio::test(start_paused = true)]
async fn a_seq_that_moves_over_the_same_catalog_changes_nothing_a_backend_holds() {
    let edge = DuplexEdge::new();
    let spec = DeviceSpec::minimal(vec![tool("look"), tool("go")])
        .with("go", Behavior::Navigate { tools: vec![tool("look"), tool("go")] });
    let (_dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut notes = link.notifications().unwrap();
    let params = |name: &str, bound_seq| CallParams {
        session: session.clone(),
        name: name.into(),
        arguments: json!({}),
        meta: CallMeta { credential: Some(common::user("mira")), bound_seq, ..CallMeta::default() },
    };
    let response = link.call(params("client__go", Some(1)), Duration::from_secs(12)).await.unwrap();
    assert_eq!(edge.hub.counters().get("rereads_after_call"), 1, "the moved seq was read");
    assert_eq!(response.seq, 2, "the backend learns the new seq");
    assert!(response.manifest.is_none(), "the same catalog is not sent again");
    let applied = edge.hub.session(&session).unwrap().manifest().unwrap();
    assert_eq!((applied.seq, applied.content_seq), (2, 1));
    // Bound to seq 1, a later call is still current: nothing to re-send.
    let later = link.call(params("client__look", Some(1)), Duration::from_secs(12)).await.unwrap();
    assert!(later.manifest.is_none());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(notes.try_recv().is_err(), "no list_changed for a list that did not change");
}

/// A device that stamps a catalog digest saves the re-read: a moved seq under
/// the applied digest is re-stamped, at once on a call result and under the
/// rate limit on `list_changed`; a new digest is read as before.
#[tokio::test(start_paused = true)]
async fn a_seq_that_moves_under_the_applied_digest_is_restamped_without_a_read() {
    let edge = DuplexEdge::new();
    let same = vec![tool("look"), tool("go"), tool("open")];
    let mut spec =
        DeviceSpec::minimal(same.clone()).with("go", Behavior::Navigate { tools: same.clone() }).with(
            "open",
            Behavior::Navigate { tools: vec![tool("look"), tool("go"), tool("open"), tool("new")] },
        );
    spec.digest = true;
    let (dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let counters = edge.hub.counters();

    turn.call("client__go", json!({})).await.unwrap();
    assert_eq!(counters.get("rereads_after_call"), 0, "the digest vouched for the catalog");
    assert_eq!(counters.get("rereads_skipped"), 1);
    let held = edge.hub.session(&session).unwrap();
    let applied = held.manifest().unwrap();
    assert_eq!((applied.seq, applied.content_seq), (2, 1));
    assert_eq!(held.view(&applied).seq, 2, "a backend reading the manifest sees the new seq");
    assert_eq!(dev.observed.manifest_reports().len(), 1, "no read, so nothing new to report");

    // list_changed over the same catalog: re-stamped, nothing read.
    dev.navigate(same).await;
    wait_until(|| counters.get("rereads_skipped") == 2).await;
    assert_eq!(edge.hub.session(&session).unwrap().manifest().unwrap().seq, 3);
    assert_eq!(dev.observed.manifest_reports().len(), 1);

    // A new digest is a new catalog: read, applied, handed to the turn.
    turn.call("client__open", json!({})).await.unwrap();
    assert_eq!(counters.get("rereads_after_call"), 1);
    assert!(turn.tools().iter().any(|t| t.name == "client__new"), "the turn picked up the fresh manifest");
    assert_eq!(dev.observed.manifest_reports().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_over_cap_manifest_drops_the_same_tools_every_run_each_logged() {
    let declared = fixture("declarations/over-caps.json");
    let mut runs = Vec::new();
    for _ in 0..3 {
        let edge = DuplexEdge::new();
        let mut spec = DeviceSpec::from_fixture(&declared).unwrap();
        // 40 tools do not fit one 15 KiB frame: the device pages, the edge follows nextCursor.
        spec.page_size = Some(8);
        let ((dropped, reports, counted), logs) = capture_logs(async {
            let (dev, session) = edge.device(spec).await;
            let manifest = edge.hub.session(&session).unwrap().manifest().unwrap();
            wait_until(|| !dev.observed.manifest_reports().is_empty()).await;
            (
                manifest.dropped().to_vec(),
                dev.observed.manifest_reports(),
                edge.hub.counters().get("tools_dropped"),
            )
        })
        .await;
        assert!(!dropped.is_empty());
        assert_eq!(counted, dropped.len() as u64, "every drop counted");
        for d in &dropped {
            assert!(logs.contains(&format!("tool={}", d.name)), "drop of {} not logged", d.name);
        }
        assert_eq!(logs.matches("tool dropped from manifest").count(), dropped.len());
        assert_eq!(
            reports[0]["dropped"].as_array().unwrap().len(),
            dropped.len(),
            "reported back to the device"
        );
        runs.push(dropped);
    }
    assert_eq!(runs[0], runs[1]);
    assert_eq!(runs[1], runs[2]);
}

#[tokio::test(start_paused = true)]
async fn the_turn_start_read_retries_once_then_proceeds_without_client_tools() {
    let edge = DuplexEdge::new();
    let link = edge.backend().await;
    let started = Instant::now();
    let turn = Turn::begin(&link, "no-such-session", Some(&common::user("mira")), Budgets::default()).await;
    assert!(turn.tools().is_empty());
    assert_eq!(turn.degraded().map(|e| e.kind), Some(ErrorKind::SessionNotFound));
    assert_eq!(link.counters().get("turn_start_fallbacks"), 1);
    assert_eq!(link.counters().get("turn_start_retries"), 0, "a missing session is not worth a retry");
    assert!(started.elapsed() < Duration::from_millis(10));

    // A device that never answers the edge: the edge is fine, but an edge that
    // is silent itself makes core retry once after the backoff, then degrade.
    let (silent, _held_open) = silent_edge().await;
    let started = Instant::now();
    let turn = Turn::begin(&silent, "s", Some("user"), Budgets::default()).await;
    let b = Budgets::default();
    assert_eq!(started.elapsed(), b.turn_start * 2 + b.turn_start_backoff);
    assert_eq!(turn.degraded().map(|e| e.kind), Some(ErrorKind::Timeout));
    assert_eq!(silent.counters().get("turn_start_retries"), 1);
    assert_eq!(silent.counters().get("turn_start_fallbacks"), 1);
}

#[tokio::test(start_paused = true)]
async fn core_enforces_the_per_tool_budget_when_the_edge_is_silent() {
    let (link, _held_open) = silent_edge().await;
    let started = Instant::now();
    let err = link.call(call("s", "client__x"), Budgets::default().per_tool).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(12));
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert_eq!(err.detail("leg"), Some(&json!("per_tool")));
}

#[tokio::test(start_paused = true)]
async fn a_device_that_stamps_no_seq_gets_issue_order_stamps() {
    let edge = DuplexEdge::new();
    let mut spec = DeviceSpec::minimal(vec![tool("one")]);
    spec.seq = None;
    let (dev, session) = edge.device(spec).await;
    let first = edge.hub.session(&session).unwrap().manifest().unwrap();
    assert_eq!(first.seq, 1, "the first read is stamped 1");
    dev.navigate(vec![tool("one"), tool("two")]).await;
    wait_until(|| edge.hub.session(&session).unwrap().manifest().unwrap().seq == 2).await;
    let second = edge.hub.session(&session).unwrap().manifest().unwrap();
    assert_eq!(second.available(), ["client__one", "client__two"]);
    assert_eq!(edge.hub.counters().get("swaps_accepted"), 2);
}

#[tokio::test(start_paused = true)]
async fn an_honest_device_gives_up_at_its_own_2s_ceiling() {
    let edge = DuplexEdge::new();
    let spec = DeviceSpec::minimal(vec![tool("think")])
        .with("think", Behavior::Answer { latency: Duration::from_secs(5) });
    let (_dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let started = Instant::now();
    let err = turn.call("client__think", json!({})).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(2), "the device's ceiling, well inside the edge's 7 s");
    assert_eq!(err.kind, ErrorKind::ClientError);
    assert_eq!(err.detail("code"), Some(&json!("device_timeout")));
    assert_eq!(err.detail("retryable"), Some(&json!(true)));
    assert_eq!(edge.hub.counters().get("call_timeouts"), 0);
}

#[tokio::test(start_paused = true)]
async fn an_answer_whose_id_is_spelled_as_a_string_is_delivered_at_once() {
    let edge = DuplexEdge::new();
    let spec = DeviceSpec::minimal(vec![tool("sloppy")]).with("sloppy", Behavior::StringId);
    let (_dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let started = Instant::now();
    let (outcome, logs) =
        capture_logs(link.call(call(&session, "client__sloppy"), Duration::from_secs(12))).await;
    let response = outcome.unwrap();
    assert!(!response.result.is_error);
    assert_eq!(started.elapsed(), Duration::ZERO, "the device answered; nobody waits out the 7 s leg");
    assert_eq!(edge.hub.counters().get("answer_ids_coerced"), 1);
    assert_eq!(edge.hub.counters().get("unknown_responses"), 0);
    assert!(logs.contains("(JSON-RPC requires the same id)"), "the device's mistake is named: {logs}");
}
