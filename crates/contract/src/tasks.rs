//! Tasks: calls that outlive the turn.
//!
//! A device declares a tool task-capable with MCP 2025-11-25's
//! `execution.taskSupport`. The edge then calls it with `task: {ttl}` and the
//! device answers at once, within the call's leg, with a [`CreateTaskResult`]:
//! the 12 s chain holds for the call that creates the task, and the work goes
//! on under the task's own budget ([`crate::Leg::Task`]). The edge follows
//! the device's task (`tasks/result`, `notifications/tasks/status`,
//! `tasks/cancel`) and keeps a [`TaskState`] backends read by the tether
//! task id: the same id across a resume and a move to another edge.
//!
//! A 2026-07-28 device declares the tasks extension ([`extension::ID`] in its
//! `server/discover` capabilities) instead: any call whose request declares
//! the extension too may answer `resultType: "task"` ([`ExtensionTask`]), and
//! the edge polls `tasks/get` until the task is final, its outcome inline.
//!
//! On the backend link the call that made a task answers a normal result
//! whose text says so and whose `_meta["tether.dev/task"]` is the
//! [`TaskState`]: a backend that knows tasks follows it, one that does not
//! still reads a sentence with the id and how to get the outcome.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::backend::ReadMeta;

/// Method names of tasks, the same on the client link and the backend link.
pub mod method {
    /// A task's status now.
    pub const TASKS_GET: &str = "tasks/get";
    /// A task's outcome: blocks until the task is terminal.
    pub const TASKS_RESULT: &str = "tasks/result";
    /// Stops a task; cancelled is final.
    pub const TASKS_CANCEL: &str = "tasks/cancel";
    /// A task's status moved (device → edge, edge → backend).
    pub const STATUS: &str = "notifications/tasks/status";
}

/// The 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`).
pub mod extension {
    /// The extension's id in `capabilities.extensions`, declared by both sides.
    pub const ID: &str = "io.modelcontextprotocol/tasks";
    /// Device → edge: a task moved (the extension's name for the status notification).
    pub const STATUS: &str = "notifications/tasks";
}

/// `_meta` keys of tasks.
pub mod meta {
    /// On a backend `tools/call`: run it as a task (`{ttl}` in ms, optional).
    /// On the result of the call that made one: the [`super::TaskState`].
    pub const TASK: &str = "tether.dev/task";
    /// MCP's marker tying a message to its task.
    pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
}

/// Whether a tool may, must or must not run as a task (MCP's `taskSupport`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// Only ever called inline (the default).
    #[default]
    Forbidden,
    /// Inline, or as a task when the caller asks for one.
    Optional,
    /// Only as a task.
    Required,
}

/// A tool's `execution` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolExecution {
    /// Absent means forbidden.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<TaskSupport>,
}

/// `task` on a `tools/call`: the caller wants a task, kept this long.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskMetadata {
    /// Time to live in ms; the receiver may shorten it and says what it chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
}

/// Where a task is; the last three are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for input the edge cannot give (treated as working).
    InputRequired,
    /// Done; its result is ready.
    Completed,
    /// Ended without a usable result (an error, or an `isError` result).
    Failed,
    /// Stopped on request.
    Cancelled,
}

impl TaskStatus {
    /// Whether the task can move no further.
    pub const fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled)
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// A task as a device reports it (MCP's `Task`): in a [`CreateTaskResult`],
/// `tasks/get`, `tasks/cancel` and `notifications/tasks/status`; read from
/// the 2026-07-28 extension's names too (`ttlMs`, `pollIntervalMs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTask {
    /// The device's own id for it.
    pub task_id: String,
    /// Where it is.
    pub status: TaskStatus,
    /// A short human line about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the device made it (ISO 8601).
    #[serde(default)]
    pub created_at: String,
    /// When it last moved (ISO 8601).
    #[serde(default)]
    pub last_updated_at: String,
    /// The time to live the device chose, in ms (null: unlimited).
    #[serde(default, alias = "ttlMs")]
    pub ttl: Option<u64>,
    /// How often the device suggests looking, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "pollIntervalMs")]
    pub poll_interval: Option<u64>,
}

/// The device's answer to a `tools/call` made with `task`: the task, not yet its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTaskResult {
    /// The task the call made.
    pub task: DeviceTask,
}

/// A task as the 2026-07-28 extension shapes it: the answer of a call that
/// became one (`resultType: "task"`), and every `tasks/get` result, which
/// carries the outcome once the task is final.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionTask {
    /// `"task"` on the answer that starts it; `"complete"` on `tasks/get`.
    #[serde(default)]
    pub result_type: Option<String>,
    /// The task itself, its fields inline.
    #[serde(flatten)]
    pub task: DeviceTask,
    /// Once `completed`: the call's `CallToolResult`, as the device wrote it.
    #[serde(default)]
    pub result: Option<Box<serde_json::value::RawValue>>,
    /// Once `failed`: the JSON-RPC error it failed with.
    #[serde(default)]
    pub error: Option<Value>,
}

impl ExtensionTask {
    /// Whether this is the answer that starts a task (not a `tasks/get` result).
    pub fn started(&self) -> bool {
        self.result_type.as_deref() == Some("task")
    }
}

/// Params of `tasks/get`, `tasks/result` and `tasks/cancel` to a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaskParams {
    /// The device's id of the task.
    pub task_id: String,
    /// The 2026-07-28 envelope, which every request to such a device carries.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// A task as the edge tells backends: tether's id, stable across resumes and edges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    /// tether's task id.
    pub task: String,
    /// The session whose device runs it.
    pub session: String,
    /// The namespaced tool it runs.
    pub tool: String,
    /// Where it is.
    pub status: TaskStatus,
    /// The device's last line about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Milliseconds since its creation (the edge's clock; no wall time crosses edges).
    pub age_ms: u64,
    /// Milliseconds since it last moved (its status or line changed).
    #[serde(default)]
    pub idle_ms: u64,
    /// How long it lives from creation, in ms.
    pub ttl_ms: u64,
    /// How often to look again, in ms.
    pub poll_interval_ms: u64,
}

impl TaskState {
    /// The result of the call that made this task: a sentence the model can
    /// act on, and the state under `_meta["tether.dev/task"]`.
    pub fn created_result(&self) -> Value {
        let text = format!(
            "{} started as task {} on the device and goes on past this call (for up to {} s). \
             Its outcome is not known yet: fetch it with tasks/result for task {}, \
             or check on it with tasks/get.",
            self.tool,
            self.task,
            self.ttl_ms / 1000,
            self.task
        );
        let mut meta = Map::new();
        meta.insert(meta::TASK.into(), json!(self));
        json!({"content": [{"type": "text", "text": text}], "_meta": meta})
    }

    /// The task a call's result says it made, if it made one.
    pub fn in_result(meta: Option<&Map<String, Value>>) -> Option<TaskState> {
        meta?.get(meta::TASK).and_then(|v| serde_json::from_value(v.clone()).ok())
    }
}

/// Params of `tasks/get`, `tasks/result` and `tasks/cancel` on the backend link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskParams {
    /// The session whose device runs it.
    pub session: String,
    /// tether's task id.
    pub task: String,
    /// The reader's credential: only the user who made the task reads or stops it.
    #[serde(default, rename = "_meta")]
    pub meta: ReadMeta,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_task_reads_mcp_2025_11_25_shapes() {
        let created = json!({"task": {"taskId": "t1", "status": "working", "createdAt": "2026-12-06T10:00:00Z",
            "lastUpdatedAt": "2026-12-06T10:00:00Z", "ttl": 60000, "pollInterval": 5000}});
        let r: CreateTaskResult = serde_json::from_value(created).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.task.status, TaskStatus::Working);
        assert_eq!(r.task.poll_interval, Some(5000));
        let exec: ToolExecution =
            serde_json::from_value(json!({"taskSupport": "required"})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(exec.task_support, Some(TaskSupport::Required));
        assert!(TaskStatus::Cancelled.is_terminal() && !TaskStatus::InputRequired.is_terminal());
    }

    #[test]
    fn the_extension_task_reads_mcp_2026_07_28_shapes() {
        let started = r#"{"resultType": "task", "taskId": "t2", "status": "working", "createdAt": "2026-12-06T10:00:00Z",
            "lastUpdatedAt": "2026-12-06T10:00:00Z", "ttlMs": 60000, "pollIntervalMs": 500}"#;
        let t: ExtensionTask = serde_json::from_str(started).unwrap_or_else(|e| panic!("{e}"));
        assert!(t.started());
        assert_eq!((t.task.ttl, t.task.poll_interval), (Some(60000), Some(500)));
        let done = r#"{"resultType": "complete", "taskId": "t2", "status": "completed", "createdAt": "",
            "lastUpdatedAt": "", "ttlMs": null, "result": {"content": [{"type": "text", "text": "ok"}]}}"#;
        let t: ExtensionTask = serde_json::from_str(done).unwrap_or_else(|e| panic!("{e}"));
        assert!(!t.started());
        assert_eq!(
            t.result.map(|r| r.get().to_owned()).as_deref(),
            Some(r#"{"content": [{"type": "text", "text": "ok"}]}"#)
        );
    }

    #[test]
    fn the_created_result_carries_its_state_and_says_how_to_follow() {
        let state = TaskState {
            task: "T".into(),
            session: "s".into(),
            tool: "client__scan".into(),
            status: TaskStatus::Working,
            status_message: None,
            age_ms: 0,
            idle_ms: 0,
            ttl_ms: 600_000,
            poll_interval_ms: 1_000,
        };
        let result = state.created_result();
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("tasks/result for task T"), "{text}");
        let meta = result["_meta"].as_object();
        assert_eq!(TaskState::in_result(meta), Some(state));
    }
}
