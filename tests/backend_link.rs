//! Core's backend link seen from the edge's side: a scripted edge over an
//! in-memory duplex pipe, on paused time, so "at once" means zero virtual time.
//! The latch, answers the link must still recognise, and bursts past its queue.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::SinkExt;
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use common::{capture_logs, next_frame, scripted_backend_edge, DuplexEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::ErrorKind;
use tether_core::BackendLink;
use tether_harness::device::tool;
use tether_harness::{Behavior, DeviceSpec};

fn call(session: &str) -> CallParams {
    let meta = CallMeta { credential: Some(common::user("mira")), ..CallMeta::default() };
    CallParams { session: session.into(), name: "client__a".into(), arguments: json!({}), meta }
}

fn spawn_call(link: &Arc<BackendLink>) -> tokio::task::JoinHandle<(Result<Value, ErrorKind>, Instant)> {
    let link = Arc::clone(link);
    tokio::spawn(async move {
        let out = link.call(call("s"), Duration::from_secs(12)).await;
        (out.map(|r| serde_json::to_value(r.result).unwrap()).map_err(|e| e.kind), Instant::now())
    })
}

#[tokio::test(start_paused = true)]
async fn five_calls_in_flight_fail_at_once_when_the_edge_end_goes_away() {
    let (link, mut edge) = scripted_backend_edge().await;
    let calls: Vec<_> = (0..5).map(|_| spawn_call(&link)).collect();
    for _ in 0..5 {
        assert_eq!(next_frame(&mut edge).await["method"], json!("tools/call"));
    }
    let dropped_at = Instant::now();
    drop(edge);
    for c in calls {
        let (out, at) = c.await.unwrap();
        assert_eq!(out, Err(ErrorKind::ChannelClosed));
        assert_eq!(at, dropped_at, "failed after {:?}, not at once", at - dropped_at);
    }
    // New calls are refused at once, without a frame or a wait.
    let started = Instant::now();
    let err = link.call(call("s"), Duration::from_secs(12)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ChannelClosed);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(link.is_closed());
}

#[tokio::test(start_paused = true)]
async fn an_answer_whose_id_is_spelled_differently_reaches_its_caller_at_once() {
    let (link, mut edge) = scripted_backend_edge().await;
    for spelled in [|id: u64| json!(id.to_string()), |id: u64| json!(id as f64)] {
        let started = Instant::now();
        let caller = spawn_call(&link);
        let request = next_frame(&mut edge).await;
        let id = request["id"].as_u64().unwrap();
        let result = json!({"result": {"content": [], "structuredContent": {"n": id}}, "seq": 1});
        let answer = json!({"jsonrpc": "2.0", "id": spelled(id), "result": result});
        edge.send(Message::text(answer.to_string())).await.unwrap();
        let (out, at) = caller.await.unwrap();
        assert_eq!(out.unwrap()["structuredContent"]["n"], json!(id));
        assert_eq!(at, started, "delivered by value, not waited out");
    }
    assert_eq!(link.counters().get("response_ids_coerced"), 2);
    assert_eq!(link.counters().get("late_responses"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_burst_past_the_links_own_queue_is_refused_as_counted_overloaded() {
    let (link, edge) = scripted_backend_edge().await;
    // 1,100 calls enqueued from one task before the writer runs: the queue holds 1,024.
    // Each is polled once and kept alive (a dropped call would cancel itself).
    let mut calls: Vec<_> =
        (0..1_100).map(|_| Box::pin(link.call(call("s"), Duration::from_secs(12)))).collect();
    let (refused, logs) = capture_logs(async {
        let mut refused = Vec::new();
        for c in &mut calls {
            if let std::task::Poll::Ready(outcome) = futures::poll!(c.as_mut()) {
                refused.push(outcome);
            }
        }
        refused
    })
    .await;
    assert_eq!(refused.len(), 76, "only refusals finish at once");
    assert!(refused.iter().all(|r| r.as_ref().is_err_and(|e| e.kind == ErrorKind::Overloaded)));
    drop(calls);
    assert_eq!(link.counters().get("requests_refused"), 76);
    assert!(logs.contains("outbound queue is full"), "{logs}");
    drop(edge);
}

#[tokio::test(start_paused = true)]
async fn a_devices_json_rpc_error_reaches_the_backend_as_client_error_with_its_code() {
    let edge = DuplexEdge::new();
    let spec = DeviceSpec::minimal(vec![tool("a")])
        .with("a", Behavior::Reject { code: -32042, message: "scanner is unplugged".into() });
    let (_dev, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let err = link.call(call(&session), Duration::from_secs(12)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ClientError);
    assert_eq!(err.detail("device_code"), Some(&json!(-32042)));
    assert!(err.message.contains("scanner is unplugged"), "{}", err.message);
    assert!(tether_core::for_model(&err).contains("tool"), "{}", tether_core::for_model(&err));
}

/// An edge that lists a schema core cannot compile (a lookaround `pattern`;
/// a real edge drops it at intake): core leaves the tool out of the turn and counts it.
#[tokio::test(start_paused = true)]
async fn core_leaves_out_a_listed_tool_whose_schema_it_cannot_compile() {
    let (link, mut edge) = scripted_backend_edge().await;
    let turn_link = Arc::clone(&link);
    let turn = tokio::spawn(async move {
        let turn =
            tether_core::Turn::begin(&turn_link, "s", Some("user"), tether_contract::Budgets::default())
                .await;
        turn.tools().iter().map(|t| t.name.clone()).collect::<Vec<_>>()
    });
    let begin = next_frame(&mut edge).await;
    let begun =
        json!({"jsonrpc": "2.0", "id": begin["id"], "result": {"turn": "t", "session": "s", "seq": 1}});
    edge.send(Message::text(begun.to_string())).await.unwrap();
    let list = next_frame(&mut edge).await;
    let lookaround =
        json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=a)(a+)+$"}}});
    let manifest = json!({"session": "s", "seq": 1, "tools": [
        {"name": "client__fine", "inputSchema": {"type": "object"}},
        {"name": "client__backtracking", "inputSchema": lookaround}
    ]});
    edge.send(Message::text(json!({"jsonrpc": "2.0", "id": list["id"], "result": manifest}).to_string()))
        .await
        .unwrap();
    assert_eq!(turn.await.unwrap(), ["client__fine"]);
    assert_eq!(link.counters().get("schemas_refused"), 1);
}
