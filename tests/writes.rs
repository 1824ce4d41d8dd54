//! The write contract on client tools: the edge holds each session's
//! approvals, keys and receipts, and enforces them for every backend — core
//! or a raw backend link. Each claim is proved by what the device executed.
//!
//! Paused time over in-memory duplex sockets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use serde_json::{json, Value};

use common::DuplexEdge;
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::mcp::ToolDeclaration;
use tether_contract::writes::ApprovalState;
use tether_contract::{Budgets, ErrorKind, WireError};
use tether_core::{CallOptions, Turn};
use tether_harness::device::tool;
use tether_harness::{DeviceSpec, SimHandle};

const DELETE: &str = "client__delete_photo";

/// A device with a read and a destructive write.
fn photos() -> DeviceSpec {
    let delete = ToolDeclaration {
        input_schema: json!({
            "type": "object",
            "properties": {"photo_id": {"type": "string"}},
            "required": ["photo_id"],
            "additionalProperties": false
        }),
        annotations: Some(json!({"destructiveHint": true})),
        ..tool("delete_photo")
    };
    DeviceSpec::minimal(vec![tool("read_screen"), delete])
}

fn deletions(device: &SimHandle) -> usize {
    device.observed.calls().iter().filter(|c| c.name == "delete_photo").count()
}

fn asked(err: &WireError) -> String {
    assert_eq!(err.kind, ErrorKind::ApprovalRequired, "{err:?}");
    err.detail("approval").and_then(Value::as_str).unwrap().to_owned()
}

async fn delete(turn: &mut Turn<'_>, photo: &str, approval: Option<&str>) -> Result<Value, WireError> {
    let options = CallOptions { approval: approval.map(str::to_owned), ..CallOptions::default() };
    let result = turn.call_with(DELETE, json!({"photo_id": photo}), options).await?;
    Ok(result.meta.and_then(|m| m.get("tether.dev/receipt").cloned()).unwrap_or_default())
}

#[tokio::test(start_paused = true)]
async fn a_destructive_device_tool_runs_only_with_a_grant_for_exactly_that_call() {
    let edge = DuplexEdge::new();
    let (device, session) = edge.device(photos()).await;
    let link = edge.backend().await;
    let mira = common::user("mira");
    let mut turn = Turn::begin(&link, &session, Some(&mira), Budgets::default()).await;

    turn.call("client__read_screen", json!({})).await.unwrap();
    let err = delete(&mut turn, "p1", None).await.unwrap_err();
    let grant = asked(&err);
    assert_eq!(err.detail("asked"), Some(&json!("caller")));
    assert_eq!(deletions(&device), 0);

    assert_eq!(turn.decide(&grant, true).await.unwrap().state, ApprovalState::Granted);
    let err = delete(&mut turn, "p2", Some(&grant)).await.unwrap_err();
    assert_eq!((err.kind, err.detail("differs")), (ErrorKind::ApprovalMismatch, Some(&json!(["arguments"]))));
    let receipt = delete(&mut turn, "p1", Some(&grant)).await.unwrap();
    assert_eq!(
        (receipt["approval"]["id"].as_str(), receipt["outcome"].as_str()),
        (Some(&*grant), Some("ok"))
    );
    assert_eq!(receipt["tool"], DELETE);
    let err = delete(&mut turn, "p1", Some(&grant)).await.unwrap_err();
    assert_eq!((err.kind, err.detail("reason")), (ErrorKind::ApprovalExpired, Some(&json!("used"))));
    assert_eq!(deletions(&device), 1, "exactly the approved call ran, once");

    // Another user cannot decide it, and the session's receipts are its user's to read.
    let leo = common::user("leo");
    let params = tether_contract::writes::DecideParams {
        session: session.clone(),
        approval: grant.clone(),
        approve: Some(true),
        meta: tether_contract::backend::ReadMeta { credential: Some(leo) },
    };
    assert_eq!(link.decide(&params, Duration::from_secs(2)).await.unwrap_err().kind, ErrorKind::Forbidden);
    let inspected = link.inspect(&session, &mira, Duration::from_secs(2)).await.unwrap();
    assert_eq!(inspected.receipts.len(), 1);
    assert_eq!(inspected.receipts[0].approval.as_ref().map(|a| a.id.as_str()), Some(&*grant));
    // An approval no one asked for is decided by no one.
    let unknown = tether_contract::writes::DecideParams { approval: "ap-nope".into(), ..params };
    let unknown = tether_contract::writes::DecideParams {
        meta: tether_contract::backend::ReadMeta { credential: Some(mira.clone()) },
        ..unknown
    };
    let err = link.decide(&unknown, Duration::from_secs(2)).await.unwrap_err();
    assert_eq!((err.kind, err.detail("reason")), (ErrorKind::ApprovalExpired, Some(&json!("unknown"))));
    let counters = edge.hub.counters();
    assert_eq!(counters.get("approvals_asked"), 1);
    assert_eq!(counters.get("approvals_decided"), 1);
    assert_eq!(counters.get("approvals_used"), 1);
    assert_eq!(counters.get("approvals_refused"), 2);
    assert_eq!(counters.get("approval_decisions_refused"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_device_that_cannot_answer_its_approval_leaves_it_to_the_caller() {
    let edge = DuplexEdge::new();
    // It says it asks its user, then answers the request with an error.
    let spec = DeviceSpec { approves: None, ..photos().asking_approvals(true) };
    let (device, session) = edge.device(spec).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let grant = asked(&delete(&mut turn, "p1", None).await.unwrap_err());
    common::wait_until(|| edge.hub.counters().get("device_approvals_failed") == 1).await;
    assert_eq!(turn.approval_state(&grant).await.unwrap().state, ApprovalState::Pending);
    turn.decide(&grant, true).await.unwrap();
    assert_eq!(delete(&mut turn, "p1", Some(&grant)).await.unwrap()["approval"]["by"], "caller");
    assert_eq!(deletions(&device), 1);
}

#[tokio::test(start_paused = true)]
async fn the_device_asks_its_user_and_the_call_runs_only_if_they_agree() {
    for approve in [true, false] {
        let edge = DuplexEdge::new();
        let (device, session) = edge.device(photos().asking_approvals(approve)).await;
        let link = edge.backend().await;
        let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
        let err = delete(&mut turn, "p1", None).await.unwrap_err();
        let grant = asked(&err);
        assert_eq!(err.detail("asked"), Some(&json!("device")));
        assert!(tether_core::for_model(&err).contains("device"));
        let mut state = ApprovalState::Pending;
        for _ in 0..100 {
            state = turn.approval_state(&grant).await.unwrap().state;
            if state != ApprovalState::Pending {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let shown = device.observed.approvals();
        assert_eq!(shown.len(), 1, "the device's user was asked once");
        assert_eq!(
            (shown[0]["tool"].as_str(), &shown[0]["arguments"]),
            (Some("delete_photo"), &json!({"photo_id": "p1"}))
        );
        let outcome = delete(&mut turn, "p1", Some(&grant)).await;
        if approve {
            assert_eq!(state, ApprovalState::Granted);
            assert_eq!(outcome.unwrap()["approval"]["by"], "device");
            assert_eq!(deletions(&device), 1);
        } else {
            assert_eq!(state, ApprovalState::Declined);
            assert_eq!(outcome.unwrap_err().kind, ErrorKind::ApprovalDeclined);
            assert_eq!(deletions(&device), 0);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_raw_backend_gets_the_same_gate_and_a_key_is_bound_to_its_call() {
    let edge = DuplexEdge::new();
    let (device, session) = edge.device(photos()).await;
    let link = edge.backend().await;
    let mira = common::user("mira");
    let call = |photo: &str, approval: Option<&str>, key: &str| CallParams {
        session: session.clone(),
        name: DELETE.into(),
        arguments: json!({"photo_id": photo}),
        meta: CallMeta {
            credential: Some(mira.clone()),
            idempotency_key: Some(key.into()),
            approval: approval.map(str::to_owned),
            // A raw backend cannot switch the gate off by claiming a redelivery.
            redelivered: true,
            ..CallMeta::default()
        },
    };
    let budget = Duration::from_secs(12);
    let grant = asked(&link.call(call("p1", None, "K"), budget).await.unwrap_err());
    assert_eq!(deletions(&device), 0);
    let params = tether_contract::writes::DecideParams {
        session: session.clone(),
        approval: grant.clone(),
        approve: Some(true),
        meta: tether_contract::backend::ReadMeta { credential: Some(mira.clone()) },
    };
    link.decide(&params, budget).await.unwrap();
    let first = link.call(call("p1", Some(&grant), "K"), budget).await.unwrap();
    assert_eq!(first.receipt.as_ref().and_then(|r| r.key.as_deref()), Some("K"));

    let err = link.call(call("p2", None, "K"), budget).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::IdempotencyConflict);
    let again = link.call(call("p1", None, "K"), budget).await.unwrap();
    assert_eq!(again, first, "the first outcome, its receipt included");
    assert_eq!(deletions(&device), 1);
    let counters = edge.hub.counters();
    assert_eq!(counters.get("idempotency_conflicts"), 1);
    assert_eq!(counters.get("keyed_replays"), 1);
}
