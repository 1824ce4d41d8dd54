//! Backend-link payloads: what an agent backend and the edge exchange.
//!
//! One backend socket multiplexes many client sessions; every request names
//! its session. Tool names here are always namespaced (`client__…`): the
//! backend never sees a device's own names.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::mcp::{CallToolResult, ToolDeclaration};

/// Method names on the backend link.
pub mod method {
    /// List connected sessions.
    pub const SESSIONS_LIST: &str = "sessions/list";
    /// Start a turn against one session.
    pub const TURN_BEGIN: &str = "turn/begin";
    /// Read a session's applied manifest.
    pub const TOOLS_LIST: &str = "tools/list";
    /// Call a tool on a session's device.
    pub const TOOLS_CALL: &str = "tools/call";
    /// Edge → backend: a session's manifest moved.
    pub const LIST_CHANGED: &str = "notifications/tools/list_changed";
    /// Edge → backend: a session latched closed.
    pub const SESSION_CLOSED: &str = "notifications/session/closed";
    /// Edge → backend: a session is listed and callable (its first manifest applied).
    pub const SESSION_OPENED: &str = "notifications/session/opened";
    /// Edge → backend: a session's device reconnected within the grace period
    /// and kept its session (instead of a close and a new session).
    pub const SESSION_RESUMED: &str = "notifications/session/resumed";
    /// Operator view of one session: names, drops, recent calls, receipts.
    pub const SESSIONS_INSPECT: &str = "sessions/inspect";
    /// The user's answer to an approval the edge asked for (or, without an
    /// answer, where it stands).
    pub const APPROVALS_DECIDE: &str = "approvals/decide";
    /// A task's status now ([`crate::tasks::TaskParams`] → [`crate::tasks::TaskState`]).
    pub const TASKS_GET: &str = crate::tasks::method::TASKS_GET;
    /// A task's outcome once it is terminal (→ the call's [`CallResponse`] or its error).
    pub const TASKS_RESULT: &str = crate::tasks::method::TASKS_RESULT;
    /// Stops a task on its device (→ [`crate::tasks::TaskState`], cancelled).
    pub const TASKS_CANCEL: &str = crate::tasks::method::TASKS_CANCEL;
    /// Edge → backend: a task's status moved ([`crate::tasks::TaskState`]).
    pub const TASK_STATUS: &str = crate::tasks::method::STATUS;
}

/// One connected session as `sessions/list` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Edge-assigned session id.
    pub session: String,
    /// Verified principal (`sub`) of the device credential.
    pub principal: String,
    /// The device's `serverInfo`.
    #[serde(default)]
    pub server_info: Value,
    /// The MCP revision the device speaks (`2025-11-25`, `2026-07-28`); empty from an older edge.
    #[serde(default)]
    pub protocol_version: String,
    /// Seq of the applied manifest.
    pub seq: u64,
    /// Tools in the applied manifest.
    pub tools: usize,
}

/// `sessions/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionsList {
    /// Connected sessions, sorted by id.
    pub sessions: Vec<SessionInfo>,
    /// Who the edge verified the credential as; absent from an older edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<ReaderInfo>,
    /// The edge could not ask every edge of its cluster (it is not joined to
    /// NATS): the list holds only the sessions it reached. Not worth remembering.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// The verified reader of a `sessions/list`: what an endpoint serving users
/// (the MCP endpoint) needs to know about a bearer token it did not verify itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderInfo {
    /// The credential's `sub`.
    pub principal: String,
    /// True for an operator credential (reads every session, calls none).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub operator: bool,
    /// When the credential stops being valid (its `exp`, Unix seconds): a
    /// door that remembers who a token is (`/mcp`) forgets it by then.
    #[serde(default, rename = "expiresAt", skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// `_meta` of a read (`sessions/list`, `turn/begin`, `tools/list`, `sessions/inspect`).
///
/// Reading a session is data access: the edge shows a session only to the
/// user who owns it (a `tether-client` credential) or to an operator (a
/// `tether-operator` credential, every use logged). The backend's service
/// token opens the link and grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadMeta {
    /// The reader's credential: the turn's user, or an operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

/// Params of `sessions/list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListParams {
    /// Only this session (if the reader may see it): a caller bound to one
    /// device asks for it alone instead of every session its user has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Whose sessions: a user sees their own, an operator every one.
    #[serde(default, rename = "_meta")]
    pub meta: ReadMeta,
}

/// Params naming one session (`turn/begin`, `tools/list`, `sessions/inspect`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionParams {
    /// Session id.
    pub session: String,
    /// The reader's credential.
    #[serde(default, rename = "_meta")]
    pub meta: ReadMeta,
}

/// `turn/begin` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnBegun {
    /// Edge-assigned turn id, for logs and correlation.
    pub turn: String,
    /// Session id.
    pub session: String,
    /// Seq of the applied manifest at turn start.
    pub seq: u64,
    /// The turn's user as the edge verified them: what the backend binds
    /// its own approvals to; absent for an operator or from an older edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// Why the edge left a declared tool out of the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The declaration alone exceeds the declaration cap.
    DeclarationTooLarge,
    /// Keeping it would exceed the manifest byte cap.
    ManifestTooLarge,
    /// Keeping it would exceed the tool count cap.
    TooManyTools,
    /// The device paged past the edge's page cap.
    TooManyPages,
    /// The declaration had no usable name.
    InvalidDeclaration,
    /// A declared schema is not an object, too deep, too large, or references
    /// something outside itself.
    SchemaRejected,
}

impl DropReason {
    /// Stable name for logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::DeclarationTooLarge => "declaration_too_large",
            DropReason::ManifestTooLarge => "manifest_too_large",
            DropReason::TooManyTools => "too_many_tools",
            DropReason::TooManyPages => "too_many_pages",
            DropReason::InvalidDeclaration => "invalid_declaration",
            DropReason::SchemaRejected => "schema_rejected",
        }
    }
}

/// One tool the caps left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedTool {
    /// The device's original name.
    pub name: String,
    /// Serialized declaration size in bytes.
    pub bytes: usize,
    /// Why it was dropped.
    pub reason: DropReason,
    /// What exactly was wrong, when the reason alone does not say (a schema's violation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A session's applied manifest as the backend sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Session id.
    pub session: String,
    /// Seq of this manifest.
    pub seq: u64,
    /// Tools under their namespaced names.
    pub tools: Vec<ToolDeclaration>,
    /// The device's free-text concept model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The device's structured concept (`tether.dev/concept`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concept: Option<Value>,
    /// The device's context `{pointer, snapshot}` (`tether.dev/context`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    /// Tools the caps left out, so nobody wonders where they went.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedTool>,
}

/// `_meta` of a backend `tools/call`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallMeta {
    /// The turn's user credential (checked by issue-4 scope rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// What is left of the backend's per-tool budget, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ms: Option<u64>,
    /// The manifest seq the model's tool list was built from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_seq: Option<u64>,
    /// Passed through to the device as `tether.dev/idempotency_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Ask for the device's progress: `notifications/progress` with this token
    /// reach this backend link while the call runs (MCP's name and meaning).
    #[serde(default, rename = "progressToken", skip_serializing_if = "Option::is_none")]
    pub progress_token: Option<Value>,
    /// The approval this call presents (`approval_required` gave its id).
    #[serde(default, rename = "tether.dev/approval", skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The backend's own policy needs an approval for this call (core's caller
    /// profile): the edge asks for one even where its own policy would not.
    #[serde(default, rename = "tether.dev/approval_required", skip_serializing_if = "std::ops::Not::not")]
    pub approval_required: bool,
    /// A keyed call the edge delivers again after its device resumed: its
    /// write gate ran on the first delivery. Only edges set it; the backend
    /// link clears it on every request it reads.
    #[serde(default, rename = "tether.dev/redelivered", skip_serializing_if = "std::ops::Not::not")]
    pub redelivered: bool,
    /// Run the call as a task when its tool allows one (`{ttl}` in ms; the
    /// edge's `task` budget when absent or longer).
    #[serde(default, rename = "tether.dev/task", skip_serializing_if = "Option::is_none")]
    pub task: Option<crate::tasks::TaskMetadata>,
    /// The caller's W3C trace context, where MCP carries it (`_meta.traceparent`):
    /// the call's spans join the caller's trace, and it travels on to the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// W3C `tracestate`, carried beside `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// Params of a backend `tools/call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallParams {
    /// Session id.
    pub session: String,
    /// Namespaced tool name.
    pub name: String,
    /// Tool arguments.
    #[serde(default)]
    pub arguments: Value,
    /// Budget and binding.
    #[serde(default, rename = "_meta")]
    pub meta: CallMeta,
}

/// Result of a backend `tools/call`: typed for a backend that reads it, raw
/// ([`crate::mcp::RawCallResult`]) on the edge that forwards it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResponse<R = CallToolResult> {
    /// The device's result, unchanged but for size checks.
    pub result: R,
    /// The fresh manifest when this call moved it (or the caller's was stale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Manifest>,
    /// Seq of the applied manifest after the call.
    pub seq: u64,
    /// True when the result's seq moved but the re-read failed; the manifest may be stale.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manifest_stale: bool,
    /// What an approved or keyed call left behind (the first run's, on a replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<crate::writes::Receipt>,
}

/// Params of `notifications/tools/list_changed` on the backend link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListChanged {
    /// Session id.
    pub session: String,
    /// The newly applied seq.
    pub seq: u64,
}

/// Params of `notifications/session/opened`: a user's device came online, so
/// whatever aggregates that user's tools has more to offer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionOpened {
    /// Session id.
    pub session: String,
    /// The first applied seq.
    pub seq: u64,
}

/// Params of `notifications/session/resumed`: the same session, on a new
/// socket (perhaps on another edge); keyed calls in flight were delivered again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionResumed {
    /// Session id (unchanged).
    pub session: String,
    /// The applied seq after the resumed handshake's catalog read.
    pub seq: u64,
}

/// Params of `notifications/session/closed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionClosed {
    /// Session id.
    pub session: String,
    /// Why it closed (`disconnected`, `shutdown`, `protocol_error`, …).
    pub reason: String,
}

/// Params of `notifications/progress` on the backend link: a device's
/// progress on a call whose backend asked for it, under the backend's token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Session id.
    pub session: String,
    /// The token the backend put in the call's `_meta.progressToken`.
    #[serde(rename = "progressToken")]
    pub progress_token: Value,
    /// How far along; increases with each notification.
    pub progress: f64,
    /// The total, when the device knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A short human sentence about the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One namespaced ↔ original name pair, for inspection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamePair {
    /// What the model sees.
    pub namespaced: String,
    /// What the device declared.
    pub original: String,
}

/// One recent call, for inspection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentCall {
    /// Namespaced tool name.
    pub tool: String,
    /// `ok`, the error kind, or `cancelled` (the backend stopped waiting).
    pub outcome: String,
    /// Time from the backend's request to the outcome, in ms.
    pub latency_ms: u64,
}

/// `sessions/inspect` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInspect {
    /// Session id.
    pub session: String,
    /// Verified principal.
    pub principal: String,
    /// The device's `serverInfo`.
    pub server_info: Value,
    /// The MCP revision the device speaks; empty from an older edge.
    #[serde(default)]
    pub protocol_version: String,
    /// Applied seq.
    pub seq: u64,
    /// Names in the applied manifest.
    pub tools: Vec<NamePair>,
    /// Tools the caps left out.
    pub dropped: Vec<DroppedTool>,
    /// Calls waiting for the device now.
    pub pending_calls: usize,
    /// The most recent calls, oldest first.
    pub recent_calls: Vec<RecentCall>,
    /// Receipts of the session's approved and keyed calls, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receipts: Vec<crate::writes::Receipt>,
}
