//! A device whose network blips keeps its session: it reconnects within the
//! grace with the resume token the edge gave it at `initialize`, keeps its
//! session id and seq, and calls with an idempotency key are delivered again
//! on the new socket (the device de-duplicates by key). Paused time over
//! in-memory pipes; the cross-edge case is in tests/cluster.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use common::{wait_until, DuplexEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::ErrorKind;
use tether_core::{BackendLink, Notification};
use tether_edge::session::{DeviceUpgrade, Phase};
use tether_harness::device::tool;
use tether_harness::{Behavior, DeviceSpec, SimDevice, SimHandle};

const GRACE: Duration = Duration::from_secs(10);
const BUDGET: Duration = Duration::from_secs(12);

fn edge() -> DuplexEdge {
    DuplexEdge::with_config(tether_edge::EdgeConfig { resume_grace: GRACE, ..common::test_config() })
}

fn call(session: &str, tool: &str, key: Option<&str>) -> CallParams {
    let meta = CallMeta {
        credential: Some(common::user("mira")),
        idempotency_key: key.map(str::to_owned),
        ..CallMeta::default()
    };
    CallParams { session: session.into(), name: format!("client__{tool}"), arguments: json!({"n": 7}), meta }
}

/// A device connected as `principal`, presenting `resume` if given.
async fn connect(
    edge: &DuplexEdge,
    principal: &str,
    spec: DeviceSpec,
    resume: Option<String>,
) -> (SimHandle, String) {
    let device = DeviceUpgrade { principal: principal.into(), expires_in: None, announced: None, resume };
    let mut dev = SimDevice::spawn(edge.raw_device_as(256 * 1024, device).await, spec);
    let session = dev.ready().await.expect("the device got a session");
    (dev, session)
}

fn spawn_call(
    link: &Arc<BackendLink>,
    params: CallParams,
) -> tokio::task::JoinHandle<Result<serde_json::Value, tether_contract::error::WireError>> {
    let link = Arc::clone(link);
    tokio::spawn(async move {
        link.call(params, BUDGET).await.map(|r| r.result.structured_content.unwrap_or_default())
    })
}

/// Every notification about `session` that arrived so far.
fn drain(notes: &mut mpsc::Receiver<Notification>) -> Vec<Notification> {
    let mut out = Vec::new();
    while let Ok(n) = notes.try_recv() {
        out.push(n);
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_device_that_resumes_within_the_grace_keeps_its_session_and_its_keyed_call_completes_once() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let mut notes = link.notifications().unwrap();
    let spec = DeviceSpec::minimal(vec![tool("pay"), tool("wait")])
        .with("pay", Behavior::Disconnect)
        .with("wait", Behavior::Silent);
    let (first, session) = connect(&edge, "mira", spec.clone(), None).await;
    let token = first.resume_token().expect("initialize carried a resume token");
    let seq = edge.hub.session(&session).unwrap().manifest().unwrap().seq;
    wait_until(|| !drain(&mut notes).is_empty()).await; // its `opened`

    // An unkeyed call is in flight when the network blips: it fails at once.
    let unkeyed = spawn_call(&link, call(&session, "wait", None));
    wait_until(|| first.observed.calls().len() == 1).await;
    let keyed = spawn_call(&link, call(&session, "pay", Some("order-41")));
    let dropped_at = Instant::now();
    let err = unkeyed.await.unwrap().unwrap_err();
    assert_eq!(err.closed_reason(), Some("connection_lost"), "{err:?}");
    assert!(dropped_at.elapsed() < Duration::from_millis(100));
    wait_until(|| edge.hub.session(&session).is_some_and(|s| s.phase() == Phase::Detached)).await;
    assert!(!keyed.is_finished(), "the keyed call waits for the device");

    // Two seconds later the device is back, on a new socket, with its token.
    tokio::time::advance(Duration::from_secs(2)).await;
    let back_spec = spec.with("pay", Behavior::Answer { latency: Duration::ZERO });
    let (second, resumed) = connect(&edge, "mira", back_spec, Some(token.clone())).await;
    assert_eq!(resumed, session, "the session id survives");
    assert_eq!(edge.hub.session(&session).unwrap().manifest().unwrap().seq, seq, "so does its seq");
    let answer = keyed.await.unwrap().expect("the keyed call completes on the new socket");
    assert_eq!(answer["arguments"], json!({"n": 7}));
    let delivered: Vec<_> = second.observed.calls().into_iter().filter(|c| c.name == "pay").collect();
    assert_eq!(delivered.len(), 1, "delivered again once on the new socket");
    assert_eq!(delivered[0].meta["tether.dev/idempotency_key"], json!("order-41"));
    assert_ne!(second.resume_token(), Some(token), "a fresh token for the next blip");

    // Backends saw one `resumed`, never a close and a new session.
    let seen = drain(&mut notes);
    assert!(
        seen.iter().any(|n| matches!(n, Notification::SessionResumed(r) if r.session == session)),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|n| matches!(n, Notification::SessionClosed(_) | Notification::SessionOpened(_))),
        "{seen:?}"
    );
    assert_eq!(edge.hub.counters().get("sessions_detached"), 1);
    assert_eq!(edge.hub.counters().get("sessions_resumed"), 1);
    assert_eq!(edge.hub.counters().get("calls_redelivered"), 1);
    link.call(call(&session, "wait", None), Duration::from_millis(100)).await.unwrap_err();
    assert_eq!(
        second.observed.calls().iter().filter(|c| c.name == "wait").count(),
        1,
        "new calls reach the new socket"
    );
}

#[tokio::test(start_paused = true)]
async fn a_keyed_call_the_device_already_ran_is_answered_from_its_memory_not_run_twice() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let spec = DeviceSpec::minimal(vec![tool("pay")])
        .with("pay", Behavior::Answer { latency: Duration::from_secs(1) });
    let (first, session) = connect(&edge, "mira", spec.clone(), None).await;
    let token = first.resume_token().unwrap();
    let keyed = spawn_call(&link, call(&session, "pay", Some("order-42")));
    wait_until(|| first.observed.calls().len() == 1).await;
    // The device ran it and is about to answer when its network drops.
    first.disconnect().await;
    wait_until(|| edge.hub.session(&session).is_some_and(|s| s.phase() == Phase::Detached)).await;
    let (second, _) = connect(&edge, "mira", spec, Some(token)).await;
    let answer = keyed.await.unwrap().unwrap();
    assert_eq!(answer["arguments"], json!({"n": 7}));
    assert_eq!(second.observed.deduplicated(), vec!["order-42".to_owned()], "answered from memory");
    assert!(second.observed.calls().is_empty(), "not run again");
}

#[tokio::test(start_paused = true)]
async fn a_resume_token_works_once_and_only_for_its_principal() {
    let edge = edge();
    let spec = DeviceSpec::minimal(vec![tool("a")]);
    let (first, session) = connect(&edge, "mira", spec.clone(), None).await;
    let token = first.resume_token().unwrap();
    first.disconnect().await;
    wait_until(|| edge.hub.session(&session).is_some_and(|s| s.phase() == Phase::Detached)).await;

    // Another principal holding the token gets a session of its own.
    let (_eve, eves) = connect(&edge, "eve", spec.clone(), Some(token.clone())).await;
    assert_ne!(eves, session);
    assert_eq!(edge.hub.counters().get("resumes_refused"), 1);
    // Its owner resumes with it once…
    let (_back, resumed) = connect(&edge, "mira", spec.clone(), Some(token.clone())).await;
    assert_eq!(resumed, session);
    // …and never again.
    let (_again, other) = connect(&edge, "mira", spec.clone(), Some(token)).await;
    assert_ne!(other, session);
    let (_junk, fresh) = connect(&edge, "mira", spec, Some("not-a-token".into())).await;
    assert_ne!(fresh, session);
    assert_eq!(edge.hub.counters().get("resumes_refused"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_device_that_does_not_resume_within_the_grace_is_closed_and_its_keyed_call_ends_at_its_leg() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let mut notes = link.notifications().unwrap();
    let spec = DeviceSpec::minimal(vec![tool("pay")]).with("pay", Behavior::Disconnect);
    let (_first, session) = connect(&edge, "mira", spec, None).await;
    let keyed = spawn_call(&link, call(&session, "pay", Some("order-43")));
    wait_until(|| edge.hub.session(&session).is_some_and(|s| s.phase() == Phase::Detached)).await;
    let detached_at = Instant::now();
    // The call's own leg (7 s) ends first: outcome unknown, as any timeout.
    let err = keyed.await.unwrap().unwrap_err();
    assert_eq!(err.timed_out_leg(), Some(tether_contract::Leg::ToolCall), "{err:?}");
    assert!(detached_at.elapsed() < GRACE);
    assert!(edge.hub.session(&session).is_some(), "the session still waits for its device");
    tokio::time::advance(GRACE).await;
    wait_until(|| edge.hub.session(&session).is_none()).await;
    let late = link.call(call(&session, "pay", Some("order-44")), BUDGET).await.unwrap_err();
    assert_eq!(late.kind, ErrorKind::ChannelClosed, "{late:?}");
    let seen = drain(&mut notes);
    assert!(
        seen.iter().any(|n| matches!(n, Notification::SessionClosed(c) if c.session == session)),
        "{seen:?}"
    );
    assert_eq!(edge.hub.counters().get("resume_grace_expired"), 1);
}
