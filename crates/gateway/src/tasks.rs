//! Tasks for `/mcp` clients: a call of a long-running device tool becomes a
//! tether task on the edge, and the MCP client gets it the way it can use it.
//!
//! - A client that declared the 2026-07-28 tasks extension
//!   (`io.modelcontextprotocol/tasks`) gets the task itself
//!   (`resultType: "task"`) and follows it with `tasks/get` and
//!   `tasks/cancel`, served here from the edge's `tasks/get`,
//!   `tasks/result` and `tasks/cancel` under the client's own token.
//! - Any other client waits for the outcome up to `task_wait`; a task still
//!   running then is handed to the model as its id and how to wait again.
//!
//! The MCP task id is `<tether task>@<session>`: the session routes it to
//! the edge holding the task, and the edge answers only the user who made it,
//! so a guessed or forged id reads as "no such task".

use std::time::Duration;

use rmcp::model::{CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::ErrorData;
use serde_json::Value;
use tracing::info;

use tether_contract::backend::ReadMeta;
use tether_contract::mcp::CallToolResult as DeviceResult;
use tether_contract::tasks::{meta as tasks_meta, TaskParams, TaskState, TaskStatus};
use tether_contract::{ErrorKind, WireError};
use tether_counters::fallback;

use crate::auth::Scope;
use crate::metrics::GatewayCounters;
use crate::Shared;

/// Whether this request's client reads tasks (the 2026-07-28 extension).
pub(crate) fn client_speaks_tasks(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities().is_some_and(|c| c.supports_tasks())
}

/// The id an MCP client knows a tether task by.
fn mcp_id(state: &TaskState) -> String {
    format!("{}@{}", state.task, state.session)
}

/// The edge's params for an MCP task id, under the client's token.
fn params(scope: &Scope, id: &str) -> Result<TaskParams, ErrorData> {
    let (task, session) =
        id.split_once('@').filter(|(t, s)| !t.is_empty() && !s.is_empty()).ok_or_else(|| {
            ErrorData::invalid_params(format!("no task {id}: not a task id this server handed out"), None)
        })?;
    Ok(TaskParams {
        session: session.to_owned(),
        task: task.to_owned(),
        meta: ReadMeta { credential: Some(scope.token.clone()) },
    })
}

/// A tether task as MCP's `Task`, stamped from the edge's ages (no wall time crosses edges).
fn to_task(state: &TaskState) -> Task {
    let now = chrono::Utc::now();
    let ago =
        |ms: u64| (now - chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))).to_rfc3339();
    let status = match state.status {
        TaskStatus::Working | TaskStatus::InputRequired => rmcp::model::TaskStatus::Working,
        TaskStatus::Completed => rmcp::model::TaskStatus::Completed,
        TaskStatus::Failed => rmcp::model::TaskStatus::Failed,
        TaskStatus::Cancelled => rmcp::model::TaskStatus::Cancelled,
    };
    let mut task = Task::new(mcp_id(state), status, ago(state.age_ms), ago(state.idle_ms))
        .with_ttl_ms(state.ttl_ms)
        .with_poll_interval_ms(state.poll_interval_ms);
    task.status_message = state.status_message.clone();
    task
}

/// What a tasks-extension client gets for a call that became a task.
pub(crate) fn created(shared: &Shared, state: &TaskState) -> CreateTaskResult {
    GatewayCounters::bump(&shared.metrics.counters.tasks_returned);
    info!(session = %state.session, task = %state.task, tool = %state.tool, "call became a task; the client follows it");
    CreateTaskResult::new(to_task(state))
}

/// A protocol error for a failed task read: the edge's sentence, its kind kept.
fn protocol_error(err: &WireError) -> ErrorData {
    let data = serde_json::json!({"kind": err.kind.as_str()});
    match err.kind {
        ErrorKind::InvalidParams => ErrorData::invalid_params(err.message.clone(), Some(data)),
        _ => ErrorData::internal_error(err.message.clone(), Some(data)),
    }
}

/// `tasks/get`: where the task is, and once it is final, the result the call
/// would have given inline (a tool failure is a completed call with
/// `isError`, as the extension says; a cancelled task has none).
pub(crate) async fn get(
    shared: &Shared,
    scope: &Scope,
    id: &str,
    as_result: impl Fn(Result<DeviceResult, WireError>) -> JsonObject,
) -> Result<GetTaskResult, ErrorData> {
    let params = params(scope, id)?;
    let budget = shared.config.budgets.turn_start;
    let state = shared.link.task(&params, budget).await.map_err(|e| protocol_error(&e))?;
    let payload = match state.status {
        TaskStatus::Working | TaskStatus::InputRequired => TaskPayload::Working,
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        TaskStatus::Completed | TaskStatus::Failed => {
            let outcome = shared.link.task_result(&params, budget).await.map(|r| r.result);
            let mut result = as_result(outcome);
            // The task this result belongs to, by the id this client knows (not the device's).
            let meta = result.entry("_meta").or_insert_with(|| Value::Object(JsonObject::new()));
            if let Value::Object(meta) = meta {
                meta.insert(tasks_meta::RELATED_TASK.into(), serde_json::json!({"taskId": id}));
            }
            TaskPayload::Completed { result }
        }
    };
    Ok(GetTaskResult::new(DetailedTask::new(to_task(&state), payload)))
}

/// `tasks/cancel`: stops the task on its device; cancelled is final.
pub(crate) async fn cancel(shared: &Shared, scope: &Scope, id: &str) -> Result<(), ErrorData> {
    let params = params(scope, id)?;
    let state = shared
        .link
        .cancel_task(&params, shared.config.budgets.turn_start)
        .await
        .map_err(|e| protocol_error(&e))?;
    info!(session = %state.session, task = %state.task, "MCP client cancelled a task; the device was told to stop");
    Ok(())
}

/// For a client without tasks: waits up to `task_wait` for the outcome; a
/// task still running then is handed to the model as its id and how to wait again.
pub(crate) async fn follow(
    shared: &Shared,
    scope: &Scope,
    session: &str,
    task: &str,
) -> Result<DeviceResult, WireError> {
    let wait: Duration = shared.config.budgets.task_wait;
    let params = TaskParams {
        session: session.to_owned(),
        task: task.to_owned(),
        meta: ReadMeta { credential: Some(scope.token.clone()) },
    };
    match shared.link.task_result(&params, wait).await {
        Ok(response) => Ok(response.result),
        // Core stopped waiting (the edge's own expiry names the task): it still runs.
        Err(e) if e.kind == ErrorKind::Timeout && !e.details.contains_key("task") => {
            fallback!(
                shared.metrics.counters.tasks_handed_off,
                info,
                session,
                task,
                wait_ms = wait.as_millis() as u64,
                "task still running after the client's wait; the model gets its id"
            );
            let text = format!(
                "This call started task {task} on the device, and after {} s it is still running: its \
                 outcome is not known yet, so do not assume it succeeded or failed. To wait for it again, \
                 repeat this call with _meta[\"{}\"] = \"{task}\".",
                wait.as_secs(),
                tasks_meta::TASK
            );
            let mut handed = serde_json::Map::new();
            handed.insert(tasks_meta::TASK.into(), Value::from(task));
            Ok(DeviceResult {
                content: vec![serde_json::json!({"type": "text", "text": text})],
                structured_content: None,
                is_error: false,
                meta: Some(handed),
            })
        }
        Err(e) => Err(e),
    }
}
