//! Calls that outlive the turn: a task-capable device tool called as a task
//! answers its task within the call's leg, goes on under the task's own
//! budget, reports its status, can be stopped, survives its device's brief
//! reconnect, and ends `channel_closed` (outcome unknown) when the device
//! never comes back. Paused time over in-memory pipes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use common::{wait_until, DuplexEdge};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::tasks::{TaskMetadata, TaskParams, TaskState, TaskStatus};
use tether_contract::ErrorKind;
use tether_core::{BackendLink, Notification};
use tether_edge::session::DeviceUpgrade;
use tether_harness::device::{task_tool, tool};
use tether_harness::{Behavior, DeviceSpec, SimDevice, SimHandle};

const GRACE: Duration = Duration::from_secs(10);
const BUDGET: Duration = Duration::from_secs(12);

fn edge() -> DuplexEdge {
    DuplexEdge::with_config(tether_edge::EdgeConfig { resume_grace: GRACE, ..common::test_config() })
}

fn spec(after: Duration) -> DeviceSpec {
    DeviceSpec::minimal(vec![task_tool("scan"), tool("plain")]).with("scan", Behavior::Task { after })
}

fn call(session: &str, tool: &str, task: bool) -> CallParams {
    let meta = CallMeta {
        credential: Some(common::user("mira")),
        task: task.then_some(TaskMetadata { ttl: None }),
        ..CallMeta::default()
    };
    CallParams { session: session.into(), name: format!("client__{tool}"), arguments: json!({"n": 7}), meta }
}

fn about(session: &str, task: &TaskState, who: &str) -> TaskParams {
    TaskParams {
        session: session.into(),
        task: task.task.clone(),
        meta: tether_contract::backend::ReadMeta { credential: Some(common::user(who)) },
    }
}

async fn connect(edge: &DuplexEdge, spec: DeviceSpec, resume: Option<String>) -> (SimHandle, String) {
    let device = DeviceUpgrade { principal: "mira".into(), expires_in: None, announced: None, resume };
    let mut dev = SimDevice::spawn(edge.raw_device_as(256 * 1024, device).await, spec);
    let session = dev.ready().await.expect("the device got a session");
    (dev, session)
}

/// Starts `scan` as a task; returns its state from the call's result.
async fn start(link: &BackendLink, session: &str) -> TaskState {
    let started = Instant::now();
    let response = link.call(call(session, "scan", true), BUDGET).await.expect("the task call answers");
    assert!(started.elapsed() < Duration::from_millis(100), "the task answers at once, within its leg");
    let text = response.result.first_text().unwrap_or_default().to_owned();
    let task = TaskState::in_result(response.result.meta.as_ref()).expect("the result names its task");
    assert!(text.contains(&format!("tasks/result for task {}", task.task)), "{text}");
    task
}

fn statuses(notes: &mut mpsc::Receiver<Notification>) -> Vec<TaskState> {
    let mut out = Vec::new();
    while let Ok(n) = notes.try_recv() {
        if let Notification::TaskStatus(t) = n {
            out.push(t);
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_task_answers_within_the_leg_reports_its_status_and_ends_past_the_per_tool_budget() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let mut notes = link.notifications().unwrap();
    let (dev, session) = connect(&edge, spec(Duration::from_secs(30)), None).await;
    let task = start(&link, &session).await;
    assert_eq!(task.status, TaskStatus::Working);
    assert_eq!(task.ttl_ms, 600_000, "the edge's task budget");
    let sent = &dev.observed.calls()[0];
    assert_eq!(sent.name, "scan");
    // The status the device sent right behind its answer is not lost to the race with filing the task.
    let now = link.task(&about(&session, &task, "mira"), BUDGET).await.unwrap();
    assert_eq!(now.status_message.as_deref(), Some("started"));

    // Halfway, the device says so, and every backend hears it.
    tokio::time::advance(Duration::from_secs(16)).await;
    let mut seen = Vec::new();
    wait_until(|| {
        seen.extend(statuses(&mut notes));
        seen.iter().any(|s| s.status_message.as_deref() == Some("halfway"))
    })
    .await;
    let now = link.task(&about(&session, &task, "mira"), BUDGET).await.unwrap();
    assert_eq!((now.status, now.status_message.as_deref()), (TaskStatus::Working, Some("halfway")));

    // The outcome comes 30 s after the call: well past the 12 s a call may take.
    let outcome = link.task_result(&about(&session, &task, "mira"), Duration::from_secs(60)).await.unwrap();
    assert_eq!(outcome.result.structured_content.unwrap()["arguments"], json!({"n": 7}));
    let done = link.task(&about(&session, &task, "mira"), BUDGET).await.unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    wait_until(|| {
        seen.extend(statuses(&mut notes));
        seen.iter().any(|s| s.status == TaskStatus::Completed)
    })
    .await;
    assert_eq!(edge.hub.counters().get("tasks_created"), 1);
    assert_eq!(edge.hub.counters().get("tasks_completed"), 1);

    // Another user reads nothing of it; a plain tool asked by a caller that can follow tasks runs inline.
    let err = link.task(&about(&session, &task, "leo"), BUDGET).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    let plain = link.call(call(&session, "plain", true), BUDGET).await.unwrap();
    assert!(TaskState::in_result(plain.result.meta.as_ref()).is_none());
    assert_eq!(plain.result.structured_content.unwrap()["arguments"], json!({"n": 7}));
    // Called without a task, the same tool runs inline.
    let inline = spec(Duration::from_secs(1));
    let (_other, second) = connect(&edge, inline, None).await;
    let response = link.call(call(&second, "scan", false), BUDGET).await.unwrap();
    assert!(TaskState::in_result(response.result.meta.as_ref()).is_none());
    assert_eq!(response.result.structured_content.unwrap()["arguments"], json!({"n": 7}));
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_task_reaches_the_device_and_is_final() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let (dev, session) = connect(&edge, spec(Duration::from_secs(60)), None).await;
    let task = start(&link, &session).await;
    let waiting = {
        let (link, params) = (Arc::clone(&link), about(&session, &task, "mira"));
        tokio::spawn(async move { link.task_result(&params, Duration::from_secs(120)).await })
    };
    tokio::time::advance(Duration::from_secs(5)).await;
    let cancelled = link.cancel_task(&about(&session, &task, "mira"), BUDGET).await.unwrap();
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    wait_until(|| dev.observed.task_cancels().len() == 1).await;
    let err = waiting.await.unwrap().unwrap_err();
    assert!(err.message.contains("cancelled"), "{err:?}");
    let again = link.cancel_task(&about(&session, &task, "mira"), BUDGET).await.unwrap_err();
    assert_eq!(again.kind, ErrorKind::InvalidParams, "cancelled is final");
    assert_eq!(edge.hub.counters().get("tasks_cancelled"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_task_survives_its_devices_brief_reconnect() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let spec = spec(Duration::from_secs(20));
    let (first, session) = connect(&edge, spec.clone(), None).await;
    let token = first.resume_token().unwrap();
    let task = start(&link, &session).await;
    let waiting = {
        let (link, params) = (Arc::clone(&link), about(&session, &task, "mira"));
        tokio::spawn(async move { link.task_result(&params, Duration::from_secs(120)).await })
    };
    tokio::time::advance(Duration::from_secs(5)).await;
    first.disconnect().await;
    tokio::time::advance(Duration::from_secs(2)).await;
    let (_second, resumed) = connect(&edge, spec, Some(token)).await;
    assert_eq!(resumed, session);
    let outcome = waiting.await.unwrap().expect("the outcome arrives on the new socket");
    assert_eq!(outcome.result.structured_content.unwrap()["arguments"], json!({"n": 7}));
    assert_eq!(edge.hub.counters().get("tasks_completed"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_task_whose_device_never_comes_back_ends_channel_closed_with_its_outcome_unknown() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let (first, session) = connect(&edge, spec(Duration::from_secs(60)), None).await;
    let task = start(&link, &session).await;
    first.disconnect().await;
    let err = link.task_result(&about(&session, &task, "mira"), Duration::from_secs(120)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::ChannelClosed, "{err:?}");
    assert_eq!(err.details.get("outcome"), Some(&json!("unknown")));
    // The outcome stays readable after the session is gone.
    let state = link.task(&about(&session, &task, "mira"), BUDGET).await.unwrap();
    assert_eq!(state.status, TaskStatus::Failed);
    assert_eq!(edge.hub.counters().get("tasks_lost"), 1);
    assert_eq!(edge.hub.counters().get("tasks_failed"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_session_runs_at_most_its_limit_of_tasks_and_the_one_over_is_stopped_on_the_device() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let (dev, session) = connect(&edge, spec(Duration::from_secs(300)), None).await;
    for _ in 0..tether_edge::session::MAX_LIVE_TASKS {
        start(&link, &session).await;
    }
    let err = link.call(call(&session, "scan", true), BUDGET).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Overloaded, "{err:?}");
    wait_until(|| dev.observed.task_cancels().len() == 1).await;
    assert_eq!(edge.hub.counters().get("tasks_refused"), 1);
}

/// Outcomes are kept for their ttl, but a session keeps at most 256 final
/// tasks: one more forgets the oldest (counted), never a running one.
#[tokio::test(start_paused = true)]
async fn a_session_keeps_at_most_its_limit_of_final_tasks_and_forgets_the_oldest_first() {
    let edge = edge();
    let link = Arc::new(edge.backend().await);
    let (_dev, session) = connect(&edge, spec(Duration::ZERO), None).await;
    let kept = tether_edge::session::MAX_KEPT_TASKS;
    let mut tasks = Vec::new();
    for _ in 0..kept {
        tasks.push(start(&link, &session).await);
    }
    wait_until(|| edge.hub.counters().get("tasks_completed") == kept as u64).await;
    let newest = start(&link, &session).await;
    assert_eq!(edge.hub.counters().get("task_outcomes_forgotten"), 1);
    let err = link.task(&about(&session, &tasks[0], "mira"), BUDGET).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams, "the oldest is forgotten: {err:?}");
    link.task(&about(&session, &tasks[1], "mira"), BUDGET).await.expect("the next oldest is kept");
    link.task_result(&about(&session, &newest, "mira"), BUDGET).await.expect("the newest runs to its end");
}
