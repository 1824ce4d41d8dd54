//! Tasks: calls that outlive the turn.
//!
//! A call of a task-capable tool made as a task gets the device's task back
//! within its leg; the edge then files a [`TaskRecord`] on the hub under a
//! tether id and follows the device's task with `tasks/result` under the
//! task's own budget. The record lives on the hub, not the socket: when the
//! device resumes, the follower asks again on the new socket; when it never
//! comes back, the task ends `channel_closed`, outcome unknown. Backends
//! read it with `tasks/get` and `tasks/result` and stop it with
//! `tasks/cancel`; every status move is published to them.
//!
//! A 2026-07-28 device's task (the tasks extension) has no blocking
//! `tasks/result`: the follower polls `tasks/get` every poll interval, and
//! the status it reads moves the task as a status notification would.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

use tether_contract::backend::CallResponse;
use tether_contract::error::{ErrorKind, WireError};
use tether_contract::mcp::RawCallResult;
use tether_contract::tasks::{method, DeviceTask, DeviceTaskParams, ExtensionTask, TaskState, TaskStatus};
use tether_contract::Leg;
use tether_counters::fallback;
use tether_rpc::lock;

use super::calls::RequestError;
use super::{ms, Session};
use crate::counters::EdgeCounters;
use crate::exit::Exit;
use crate::hub::{BackendEvent, Hub};

/// Longest status line relayed, in characters: a status, not a payload.
const STATUS_MESSAGE_CHARS: usize = 256;

fn cut(message: Option<String>) -> Option<String> {
    message.map(|m| m.chars().take(STATUS_MESSAGE_CHARS).collect())
}

/// Most tasks one session may have running at once.
pub const MAX_LIVE_TASKS: usize = 64;

/// Most final tasks one session keeps for their outcome to be read.
pub const MAX_KEPT_TASKS: usize = 256;

/// The outcome a finished task answers `tasks/result` with.
pub type TaskOutcome = Result<CallResponse<RawCallResult>, WireError>;

/// A finished task's outcome, and whether the tool reported a failure in it.
type Finished = Result<(CallResponse<RawCallResult>, bool), WireError>;

/// Where a task is, what the device last said, its outcome once final, and when it last moved.
#[derive(Debug)]
struct Moves {
    status: TaskStatus,
    message: Option<String>,
    outcome: Option<TaskOutcome>,
    at: Instant,
}

/// One task the edge follows, filed on the hub by tether id.
#[derive(Debug)]
pub struct TaskRecord {
    /// tether's id.
    pub id: String,
    /// The session whose device runs it.
    pub session: String,
    /// The user who made it: the only one who reads or stops it.
    pub owner: String,
    /// The namespaced tool.
    tool: String,
    /// The device's own id.
    device_id: String,
    /// Followed by polling `tasks/get` (the 2026-07-28 extension), not by `tasks/result`.
    polled: bool,
    created: Instant,
    ttl: Duration,
    poll: Duration,
    state: Mutex<Moves>,
    /// Bumped on every move, so `tasks/result` wakes when it ends.
    moved: watch::Sender<u64>,
}

/// A task moving with its session to another edge: what the new holder
/// needs to follow it on from where it is (and to answer for it once final).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct TaskHandover {
    id: String,
    owner: String,
    tool: String,
    device_id: String,
    /// Absent from an edge of the previous release, which followed only `tasks/result`.
    #[serde(default)]
    polled: bool,
    age_ms: u64,
    ttl_ms: u64,
    poll_ms: u64,
    status: TaskStatus,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    outcome: Option<HandedOutcome>,
}

/// A final task's outcome on the wire: a result, or the error as JSON-RPC spells it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum HandedOutcome {
    Result(Box<CallResponse<RawCallResult>>),
    Error(serde_json::Value),
}

impl HandedOutcome {
    fn of(outcome: &TaskOutcome) -> HandedOutcome {
        match outcome {
            Ok(response) => HandedOutcome::Result(Box::new(response.clone())),
            Err(e) => HandedOutcome::Error(e.to_json()),
        }
    }

    fn into_outcome(self) -> TaskOutcome {
        match self {
            HandedOutcome::Result(response) => Ok(*response),
            HandedOutcome::Error(e) => Err(WireError::from_json(&e)),
        }
    }
}

/// Lets go of the tasks this edge follows for `session`, which a device
/// resuming on another edge has claimed: that edge follows them on, and
/// this edge's followers stop without a word.
pub fn hand_over(hub: &Hub, session: &str) -> Vec<TaskHandover> {
    let tasks: Vec<TaskHandover> = hub
        .tasks_of(session)
        .into_iter()
        .map(|record| {
            hub.forget_task(&record.id);
            let moves = lock(&record.state);
            TaskHandover {
                id: record.id.clone(),
                owner: record.owner.clone(),
                tool: record.tool.clone(),
                device_id: record.device_id.clone(),
                polled: record.polled,
                age_ms: ms(record.created.elapsed()),
                ttl_ms: ms(record.ttl),
                poll_ms: ms(record.poll),
                status: moves.status,
                message: moves.message.clone(),
                outcome: moves.outcome.as_ref().map(HandedOutcome::of),
            }
        })
        .collect();
    for task in &tasks {
        EdgeCounters::bump(&hub.counters().tasks_handed_over);
        info!(session, task = %task.id, "task handed over with its session to the edge the device resumed on");
    }
    tasks
}

impl TaskRecord {
    /// The task as backends see it.
    pub fn state(&self) -> TaskState {
        let moves = lock(&self.state);
        TaskState {
            task: self.id.clone(),
            session: self.session.clone(),
            tool: self.tool.clone(),
            status: moves.status,
            status_message: moves.message.clone(),
            age_ms: ms(self.created.elapsed()),
            idle_ms: ms(moves.at.elapsed()),
            ttl_ms: ms(self.ttl),
            poll_interval_ms: ms(self.poll),
        }
    }

    fn status(&self) -> TaskStatus {
        lock(&self.state).status
    }

    /// What the device said about a running task (a status notification, or
    /// a poll): it moves when its status or its line changed.
    fn device_said(&self, hub: &Hub, status: TaskStatus, message: Option<String>) {
        let status = running(status);
        let message = cut(message);
        let moved = {
            let moves = lock(&self.state);
            status != moves.status || (message.is_some() && message != moves.message)
        };
        if moved {
            self.advance(hub, status, message, None);
        }
    }

    /// Moves a running task to `status` (with the device's line); a final task stays as it is.
    fn advance(&self, hub: &Hub, status: TaskStatus, message: Option<String>, outcome: Option<TaskOutcome>) {
        {
            let mut moves = lock(&self.state);
            if moves.status.is_terminal() {
                return;
            }
            let message = message.or(moves.message.take());
            *moves = Moves { status, message, outcome, at: Instant::now() };
        }
        self.moved.send_modify(|n| *n += 1);
        hub.publish(BackendEvent::TaskStatus(self.state()));
    }

    /// The outcome once the task is final: waits for it.
    pub async fn outcome(&self) -> TaskOutcome {
        let mut moved = self.moved.subscribe();
        loop {
            {
                let moves = lock(&self.state);
                if moves.status.is_terminal() {
                    return match &moves.outcome {
                        Some(outcome) => outcome.clone(),
                        None => Err(WireError::new(
                            ErrorKind::ClientError,
                            format!("task {} was cancelled; it has no result", self.id),
                        )
                        .with("status", moves.status.as_str())),
                    };
                }
            }
            if moved.changed().await.is_err() {
                return Err(WireError::new(ErrorKind::Internal, "the task's record went away"));
            }
        }
    }
}

/// Statuses that outran their task. A device may say where its task is right
/// behind the answer that started it; the reader reads that status before
/// the call has filed the task, so it is held (while a task-asking call is
/// in flight, at most [`MAX_LIVE_TASKS`]) for the task it names.
#[derive(Debug, Default)]
pub(super) struct EarlyStatuses {
    /// Task-asking calls in flight.
    asking: usize,
    held: VecDeque<DeviceTask>,
}

impl EarlyStatuses {
    /// Holds a status; returns the oldest one when that pushes it out.
    fn hold(&mut self, status: DeviceTask) -> Option<DeviceTask> {
        let pushed_out = if self.held.len() >= MAX_LIVE_TASKS { self.held.pop_front() } else { None };
        self.held.push_back(status);
        pushed_out
    }

    /// The last status held for a device task, taken with any before it.
    fn take(&mut self, device_id: &str) -> Option<DeviceTask> {
        let mut last = None;
        self.held.retain(|held| {
            let mine = held.task_id == device_id;
            if mine {
                last = Some(held.clone());
            }
            !mine
        });
        last
    }
}

/// A task-asking call in flight; when the last one ends, what is still held was for no task.
pub(super) struct Asking<'a>(&'a Session);

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        let unclaimed = {
            let mut early = lock(&self.0.early_statuses);
            early.asking = early.asking.saturating_sub(1);
            if early.asking > 0 {
                return;
            }
            std::mem::take(&mut early.held).len()
        };
        for _ in 0..unclaimed {
            fallback!(self.0.counters().task_statuses_dropped, debug, session = %self.0.id, "device task status dropped: it named no task the device answered with");
        }
    }
}

impl Session {
    /// Files the tasks another edge followed for this session, which the
    /// device resumed here; [`Session::follow_adopted`] follows them on.
    pub(super) fn adopt(&self, tasks: Vec<TaskHandover>) {
        let now = Instant::now();
        let mut adopted = lock(&self.adopted);
        for task in tasks {
            let age = Duration::from_millis(task.age_ms);
            let record = Arc::new(TaskRecord {
                id: task.id,
                session: self.id.clone(),
                owner: task.owner,
                tool: task.tool,
                device_id: task.device_id,
                polled: task.polled,
                created: now.checked_sub(age).unwrap_or(now),
                ttl: Duration::from_millis(task.ttl_ms),
                poll: Duration::from_millis(task.poll_ms),
                state: Mutex::new(Moves {
                    status: task.status,
                    message: task.message,
                    outcome: task.outcome.map(HandedOutcome::into_outcome),
                    at: now,
                }),
                moved: watch::channel(0).0,
            });
            EdgeCounters::bump(&self.counters().tasks_adopted);
            info!(session = %self.id, task = %record.id, status = record.status().as_str(), "task adopted from the edge that held the session");
            self.hub.file_task(Arc::clone(&record));
            adopted.push(record);
        }
    }

    /// Follows the adopted tasks once the session's handshake is over (listed
    /// or failed): a running one is asked for its outcome on this socket, a
    /// final one is kept for the rest of its ttl.
    pub(super) fn follow_adopted(&self) {
        for record in std::mem::take(&mut *lock(&self.adopted)) {
            if record.status().is_terminal() {
                tokio::spawn(keep_until_ttl(Arc::clone(&self.hub), record));
            } else {
                tokio::spawn(follow(Arc::clone(&self.hub), record));
            }
        }
    }

    /// Marks a task-asking call in flight until the guard drops.
    pub(super) fn asking_task(&self) -> Asking<'_> {
        lock(&self.early_statuses).asking += 1;
        Asking(self)
    }

    /// Whether the device speaks the 2026-07-28 tasks extension: any of its
    /// calls may become a task when the request declares the extension.
    pub(super) fn speaks_task_extension(&self) -> bool {
        self.handshake.get().is_some_and(|h| h.identity.tasks)
    }

    /// Params of a request about one of the device's tasks, in its revision.
    fn device_task_params(&self, device_id: &str) -> DeviceTaskParams {
        let meta = self.revision().stateless().then(crate::revision::task_envelope);
        DeviceTaskParams { task_id: device_id.to_owned(), meta }
    }

    /// Files the task a device answered a call with, starts following it, and
    /// returns what the call answers: a sentence and the task's state.
    /// `polled`: the device's task is followed by polling `tasks/get`.
    pub(super) fn begin_task(
        &self,
        (device, polled): (DeviceTask, bool),
        tool: &str,
        ttl: Duration,
        seq: u64,
    ) -> Result<CallResponse<RawCallResult>, WireError> {
        let filed = self.hub.tasks_of(&self.id);
        let live = filed.iter().filter(|t| !t.status().is_terminal()).count();
        // Outcomes are kept for their ttl, but not without bound: past the
        // most a session keeps, the oldest final ones go first.
        let finished: Vec<_> = filed.iter().filter(|t| t.status().is_terminal()).collect();
        for old in finished.iter().take((finished.len() + 1).saturating_sub(MAX_KEPT_TASKS)) {
            self.hub.forget_task(&old.id);
            fallback!(self.counters().task_outcomes_forgotten, info, session = %self.id, task = %old.id, kept = MAX_KEPT_TASKS, "task outcome forgotten before its ttl: the session keeps at most this many final tasks");
        }
        if live >= MAX_LIVE_TASKS {
            // The device runs it, but nobody could follow it: stop it there.
            stop_on_device(&self.hub, &self.id, &device.task_id);
            fallback!(self.counters().tasks_refused, warn, session = %self.id, tool, live, "task refused: the session has too many running; device told to cancel it");
            return Err(WireError::new(
                ErrorKind::Overloaded,
                format!("the device already runs {live} tasks for this session; wait for one to end"),
            )
            .with("retry_after_ms", 1000));
        }
        let ttl = device.ttl.map_or(ttl, |t| ttl.min(Duration::from_millis(t)));
        let poll =
            self.hub.config.budgets.task_poll.max(Duration::from_millis(device.poll_interval.unwrap_or(0)));
        // A status the device sent right behind its answer is where the task
        // starts; filed under the same lock, so no status falls between.
        let mut early = lock(&self.early_statuses);
        let (status, message) = match early.take(&device.task_id) {
            Some(early) => (running(early.status), early.status_message.or(device.status_message)),
            None => (device.status, device.status_message),
        };
        let record = Arc::new(TaskRecord {
            id: uuid::Uuid::new_v4().to_string(),
            session: self.id.clone(),
            owner: self.principal.clone(),
            tool: tool.to_owned(),
            device_id: device.task_id,
            polled,
            created: Instant::now(),
            ttl,
            poll,
            state: Mutex::new(Moves { status, message: cut(message), outcome: None, at: Instant::now() }),
            moved: watch::channel(0).0,
        });
        self.hub.file_task(Arc::clone(&record));
        drop(early);
        EdgeCounters::bump(&self.counters().tasks_created);
        info!(session = %self.id, task = %record.id, tool, ttl_ms = ms(ttl), "call became a task; following it");
        tokio::spawn(follow(Arc::clone(&self.hub), Arc::clone(&record)));
        let state = record.state();
        let raw = serde_json::value::to_raw_value(&state.created_result())
            .map_err(|e| WireError::new(ErrorKind::Internal, format!("could not encode the task: {e}")))?;
        let (result, _) = RawCallResult::read(raw).map_err(|e| {
            WireError::new(ErrorKind::Internal, format!("could not read the task result: {e:?}"))
        })?;
        Ok(CallResponse { result, manifest: None, seq, manifest_stale: false, receipt: None })
    }

    /// A device's `notifications/tasks/status`: the task's new status reaches its followers.
    pub(super) fn task_moved(&self, params: &serde_json::Value) {
        let Ok(device) = serde_json::from_value::<DeviceTask>(params.clone()) else {
            fallback!(self.counters().task_statuses_dropped, debug, session = %self.id, "device task status dropped: malformed");
            return;
        };
        let record = {
            let mut early = lock(&self.early_statuses);
            let record = self.hub.task_of(&self.id, |t| t.device_id == device.task_id);
            if record.is_none() && early.asking > 0 {
                // Read behind the answer that starts it, before that call filed it.
                if early.hold(device).is_some() {
                    fallback!(self.counters().task_statuses_dropped, debug, session = %self.id, "device task status dropped: too many held for tasks not filed yet");
                }
                return;
            }
            record
        };
        let Some(record) = record else {
            fallback!(self.counters().task_statuses_dropped, debug, session = %self.id, task = %device.task_id, "device task status dropped: for no task this edge follows");
            return;
        };
        record.device_said(&self.hub, device.status, device.status_message);
    }
}

/// The task a device answered a call made as one with, in either revision's
/// shape, and whether it is followed by polling (the 2026-07-28 extension);
/// None when the device answered inline.
pub(super) fn started_task(raw: &str) -> Option<(DeviceTask, bool)> {
    if let Ok(created) = serde_json::from_str::<tether_contract::tasks::CreateTaskResult>(raw) {
        return Some((created.task, false));
    }
    let extension = serde_json::from_str::<ExtensionTask>(raw).ok().filter(ExtensionTask::started)?;
    Some((extension.task, true))
}

/// Where a device's status puts a running task: the outcome comes with
/// `tasks/result`, so a status says only where it is, never that it ended.
fn running(status: TaskStatus) -> TaskStatus {
    if status.is_terminal() {
        TaskStatus::Working
    } else {
        status
    }
}

/// Tells a task's device to stop it (`tasks/cancel`), without holding up the caller.
fn stop_on_device(hub: &Hub, session: &str, device_id: &str) {
    let Some(session) = hub.session(session) else { return };
    let params = session.device_task_params(device_id);
    let leg = hub.config.budgets.tool_call;
    tokio::spawn(async move {
        if let Err(e) = session.request(method::TASKS_CANCEL, params, leg, method::TASKS_CANCEL, false).await
        {
            info!(session = %session.id, error = ?e, "device did not confirm the task's cancellation");
        }
    });
}

/// Follows one task to its end: asks its device for the outcome (again on a
/// new socket after a resume), and keeps the record for its ttl after that.
async fn follow(hub: Arc<Hub>, record: Arc<TaskRecord>) {
    let deadline = record.created + record.ttl;
    let outcome = loop {
        if handed_over(&hub, &record) {
            return;
        }
        let Some(session) = hub.session(&record.session) else {
            break Err(lost(&hub, &record, "the session moved to another edge or closed"));
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err(expired(&hub, &record));
        }
        let answer = if record.polled {
            poll(&session, &record, left).await
        } else {
            let params = session.device_task_params(&record.device_id);
            // Keyed: it waits out a detach, and ends Resumed when the device comes back.
            session.request(method::TASKS_RESULT, params, left, &record.tool, true).await
        };
        if handed_over(&hub, &record) {
            // The session resumed on another edge, which follows the task now.
            return;
        }
        match answer {
            Ok((raw, _)) => break read_outcome(&session, raw),
            Err(RequestError::Closed(reason)) if reason == Exit::Resumed.as_str() => {
                info!(session = %record.session, task = %record.id, "task's device resumed; asking for its outcome on the new socket");
            }
            Err(RequestError::Closed(reason)) => break Err(lost(&hub, &record, &reason)),
            Err(RequestError::Timeout { .. }) => break Err(expired(&hub, &record)),
            Err(e) => break Err(session.request_error(e, Leg::Task, record.ttl)),
        }
    };
    let status = match &outcome {
        Ok((_, false)) => TaskStatus::Completed,
        Ok((_, true)) | Err(_) => TaskStatus::Failed,
    };
    let outcome = outcome.map(|(response, _)| response);
    if !record.status().is_terminal() {
        let c = hub.counters();
        EdgeCounters::bump(if status == TaskStatus::Completed {
            &c.tasks_completed
        } else {
            &c.tasks_failed
        });
    }
    record.advance(&hub, status, None, Some(outcome));
    keep_until_ttl(hub, record).await;
}

/// The 2026-07-28 extension's way to a task's outcome: `tasks/get` every
/// poll interval, for at most `left`, until the device says it is final.
/// Answers as the device's `tasks/result` would: the call's result, or the
/// error it ended with. A poll is keyed, so it waits out a detach and ends
/// `Resumed` when the device comes back (the follower asks again there).
async fn poll(
    session: &Session,
    record: &TaskRecord,
    left: Duration,
) -> Result<(Box<RawValue>, usize), RequestError> {
    let deadline = Instant::now() + left;
    loop {
        if record.status() == TaskStatus::Cancelled {
            // Cancelled here; the device was told, and nothing is left to wait for.
            return Err(RequestError::Remote(
                serde_json::json!({"code": -32800, "message": "the task was cancelled"}),
            ));
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        let params = session.device_task_params(&record.device_id);
        let (raw, _) = session.request(method::TASKS_GET, params, wait, &record.tool, true).await?;
        let task: ExtensionTask = serde_json::from_str(raw.get())
            .map_err(|e| RequestError::Malformed(format!("device sent a malformed tasks/get result: {e}")))?;
        match task.task.status {
            TaskStatus::Completed => {
                let result = task.result.ok_or_else(|| {
                    RequestError::Malformed("device said the task completed but sent no result".into())
                })?;
                let bytes = result.get().len();
                return Ok((result, bytes));
            }
            TaskStatus::Failed => {
                let why =
                    serde_json::json!({"code": -32603, "message": "the task failed without saying why"});
                return Err(RequestError::Remote(task.error.unwrap_or(why)));
            }
            TaskStatus::Cancelled => {
                let why = serde_json::json!({"code": -32800, "message": "the device cancelled the task"});
                return Err(RequestError::Remote(why));
            }
            TaskStatus::Working | TaskStatus::InputRequired => {
                record.device_said(&session.hub, task.task.status, task.task.status_message);
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(RequestError::Timeout { id: 0 });
        }
        tokio::time::sleep_until(deadline.min(now + record.poll)).await;
    }
}

/// Keeps a final task's outcome readable for the rest of its life, then forgets it.
async fn keep_until_ttl(hub: Arc<Hub>, record: Arc<TaskRecord>) {
    tokio::time::sleep_until(record.created + record.ttl).await;
    forget_if_ours(&hub, &record);
}

/// Whether another edge follows this task now: it left this hub with its session.
fn handed_over(hub: &Hub, record: &Arc<TaskRecord>) -> bool {
    hub.task(&record.id).is_none_or(|filed| !Arc::ptr_eq(&filed, record))
}

/// Forgets a task whose life is over, unless it went to another edge (or
/// came back under the same id, a record of its own).
fn forget_if_ours(hub: &Hub, record: &Arc<TaskRecord>) {
    if !handed_over(hub, record) {
        hub.forget_task(&record.id);
    }
}

/// The device's `tasks/result`: the call's result, as an inline call would have had it.
fn read_outcome(session: &Session, raw: Box<RawValue>) -> Finished {
    let (result, stamps) = RawCallResult::read(raw).map_err(|e| {
        WireError::new(ErrorKind::ClientError, format!("device sent a malformed task result: {e:?}"))
    })?;
    let seq = session.manifest().map_or(0, |m| m.seq);
    Ok((CallResponse { result, manifest: None, seq, manifest_stale: false, receipt: None }, stamps.is_error))
}

/// The task's device went away for good: nobody can say what it did.
fn lost(hub: &Hub, record: &TaskRecord, reason: &str) -> WireError {
    fallback!(hub.counters().tasks_lost, info, session = %record.session, task = %record.id, reason, "task ended without an outcome: its device is gone");
    WireError::channel_closed(reason).with("task", record.id.as_str()).with("outcome", "unknown")
}

/// The task ran out of its time to live: stopped on the device.
fn expired(hub: &Hub, record: &TaskRecord) -> WireError {
    stop_on_device(hub, &record.session, &record.device_id);
    fallback!(hub.counters().tasks_lost, info, session = %record.session, task = %record.id, ttl_ms = ms(record.ttl), "task ran out of its ttl; device told to cancel it");
    WireError::timeout(Leg::Task, ms(record.ttl)).with("task", record.id.as_str()).with("outcome", "unknown")
}

/// Stops a task: the device is told, the task ends cancelled (for good).
pub fn cancel(hub: &Hub, record: &TaskRecord) -> Result<TaskState, WireError> {
    if record.status().is_terminal() {
        return Err(WireError::new(
            ErrorKind::InvalidParams,
            format!(
                "task {} already ended ({}); there is nothing to cancel",
                record.id,
                record.status().as_str()
            ),
        ));
    }
    stop_on_device(hub, &record.session, &record.device_id);
    EdgeCounters::bump(&hub.counters().tasks_cancelled);
    info!(session = %record.session, task = %record.id, "task cancelled by its caller; device told");
    record.advance(hub, TaskStatus::Cancelled, None, None);
    Ok(record.state())
}
