//! One call on the server: sent under the edge's deadline, cancelled on the
//! server whenever the bridge stops waiting, and read into the one outcome
//! the edge is answered with (a result, the server's task, or a failure with
//! `{code, retryable}`).

use std::time::Duration;

use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, RequestHandle, RoleClient};
use rmcp::ServiceError;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, info};

use tether_contract::mcp::meta;
use tether_counters::fallback;

use super::Server;
use crate::counters::BridgeCounters;
use crate::lock;
use crate::DeadlinePolicy;

/// Under [`DeadlinePolicy::Edge`], how long past the edge's deadline the
/// bridge waits for the edge's cancel before cancelling the call itself.
const EDGE_CANCEL_GRACE: Duration = Duration::from_secs(2);

/// Why the edge side stopped waiting for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The edge sent `notifications/cancelled` for it.
    Edge,
    /// The device connection to the edge ended.
    EdgeLost,
}

/// A call the bridge could not complete, answered to the edge as an
/// `isError` result with `structuredContent: {code, retryable}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) code: &'static str,
    pub(crate) retryable: bool,
    pub(crate) text: String,
    /// The server's JSON-RPC error code, when it sent one.
    pub(crate) server_code: Option<i32>,
}

impl Failure {
    pub(crate) fn new(code: &'static str, retryable: bool, text: impl Into<String>) -> Failure {
        Failure { code, retryable, text: text.into(), server_code: None }
    }

    /// The `CallToolResult` the edge receives.
    pub(crate) fn to_result(&self) -> Value {
        let mut structured = Map::new();
        structured.insert("code".into(), Value::from(self.code));
        structured.insert("retryable".into(), Value::from(self.retryable));
        if let Some(c) = self.server_code {
            structured.insert("server_code".into(), Value::from(c));
        }
        json!({
            "content": [{"type": "text", "text": self.text}],
            "structuredContent": structured,
            "isError": true,
        })
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallOutcome {
    /// The server's `CallToolResult` (possibly its own `isError`), as JSON.
    Answered(Value),
    /// The server made a task of it: its `CreateTaskResult` (`resultType:
    /// "task"`), sent on to the edge as it is.
    Task(Value),
    /// The call failed on the way; answer with [`Failure::to_result`].
    Failed(Failure),
    /// The edge stopped waiting: cancelled on the server, and not answered.
    Unanswered,
}

/// The W3C trace context the edge sent with a call (`_meta.traceparent`, `tracestate`).
#[derive(Debug, Default)]
pub(crate) struct TraceContext {
    pub(crate) traceparent: Option<String>,
    pub(crate) tracestate: Option<String>,
}

impl TraceContext {
    /// Read from a `tools/call`'s params.
    pub(crate) fn of(params: &Value) -> TraceContext {
        let field = |key: &str| {
            params.get("_meta").and_then(|m| m.get(key)).and_then(Value::as_str).map(str::to_owned)
        };
        TraceContext { traceparent: field(meta::TRACEPARENT), tracestate: field(meta::TRACESTATE) }
    }
}

impl Server {
    /// Calls `name` on the server and waits for its one outcome: the answer,
    /// the edge's `deadline` (under `policy`), the edge stopping, or the server
    /// abandoning the call. Whatever the bridge stops waiting for is cancelled
    /// on the server through rmcp (`RequestHandle::cancel` sends `notifications/cancelled`).
    /// With `as_task` the request declares the tasks extension, so the server
    /// may answer with its task (see `tasks.rs`).
    #[allow(clippy::too_many_arguments)] // each is one fact about this call
    pub(crate) async fn call(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        as_task: bool,
        trace: TraceContext,
        deadline: Duration,
        policy: DeadlinePolicy,
        mut edge: oneshot::Receiver<Stop>,
    ) -> CallOutcome {
        let started = Instant::now();
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut options = if as_task { Server::task_options() } else { PeerRequestOptions::no_options() };
        // The agent's trace goes on to the server's handler (SEP-414's `_meta` keys).
        if let Some(traceparent) = &trace.traceparent {
            let meta = options.meta.get_or_insert_with(Default::default);
            meta.set_traceparent(traceparent.as_str());
            if let Some(tracestate) = &trace.tracestate {
                meta.set_tracestate(tracestate.as_str());
            }
        }
        let mut handle = match self.peer.send_cancellable_request(request, options).await {
            Ok(handle) => handle,
            Err(e) => {
                fallback!(self.counters.calls_server_gone, warn, server = %self.name, tool = name, error = %e, "call not sent: the MCP server could not be reached");
                return CallOutcome::Failed(Failure::new(
                    "server_exited",
                    true,
                    format!("The MCP server could not be reached ({e}); the call was not sent."),
                ));
            }
        };
        let (abandon_tx, mut abandoned) = oneshot::channel();
        lock(&self.inflight.calls).insert(handle.id.clone(), abandon_tx);
        let give_up = match policy {
            DeadlinePolicy::Ahead(margin) => started + deadline.saturating_sub(margin.min(deadline / 2)),
            DeadlinePolicy::Edge => started + deadline + EDGE_CANCEL_GRACE,
        };
        let ended = tokio::select! {
            response = &mut handle.rx => Ended::Response(Box::new(response)),
            _ = tokio::time::sleep_until(give_up) => Ended::Deadline,
            why = &mut edge => Ended::Edge(why.unwrap_or(Stop::EdgeLost)),
            Ok(()) = &mut abandoned => Ended::Abandoned,
        };
        lock(&self.inflight.calls).remove(&handle.id);
        let ms = deadline.as_millis();
        match ended {
            Ended::Response(response) => self.answered(*response),
            Ended::Deadline => {
                let reason = format!("tether bridge: the edge's deadline of {ms} ms for this call is up");
                self.cancel(handle, reason).await;
                let counter = match policy {
                    DeadlinePolicy::Ahead(_) => &self.counters.calls_timed_out,
                    DeadlinePolicy::Edge => &self.counters.calls_backstopped,
                };
                fallback!(counter, warn, server = %self.name, tool = name, deadline_ms = ms, "call passed its deadline; cancelled on the server");
                CallOutcome::Failed(Failure::new(
                    "server_timeout",
                    true,
                    format!(
                        "The MCP server did not answer {name} within {ms} ms; the bridge cancelled it on the server, so whether it acted is unknown."
                    ),
                ))
            }
            Ended::Edge(Stop::Edge) => {
                self.cancel(handle, "the tether edge stopped waiting".into()).await;
                BridgeCounters::bump(&self.counters.calls_cancelled_by_edge);
                info!(server = %self.name, tool = name, "edge cancelled the call; cancelled on the server");
                CallOutcome::Unanswered
            }
            Ended::Edge(Stop::EdgeLost) => {
                self.cancel(handle, "the device connection to the tether edge was lost".into()).await;
                fallback!(self.counters.calls_orphaned, warn, server = %self.name, tool = name, "edge connection lost mid-call; cancelled on the server");
                CallOutcome::Unanswered
            }
            Ended::Abandoned => {
                fallback!(self.counters.calls_abandoned_by_server, info, server = %self.name, tool = name, "the MCP server cancelled the call before answering");
                CallOutcome::Failed(Failure::new(
                    "cancelled_by_server",
                    true,
                    format!("The MCP server cancelled {name} before answering."),
                ))
            }
        }
    }

    async fn cancel(&self, handle: RequestHandle<RoleClient>, reason: String) {
        if let Err(e) = handle.cancel(Some(reason)).await {
            debug!(server = %self.name, error = %e, "could not tell the server to cancel (it is gone)");
        }
    }

    fn answered(&self, response: Response) -> CallOutcome {
        let c = &self.counters;
        match response {
            Ok(Ok(ServerResult::CallToolResult(result))) => match serde_json::to_value(&result) {
                Ok(v) => CallOutcome::Answered(v),
                Err(e) => {
                    fallback!(c.calls_unsupported_result, warn, server = %self.name, error = %e, "the server's tool result could not be read");
                    CallOutcome::Failed(Failure::new(
                        "unsupported_result",
                        false,
                        format!("The MCP server's result could not be read: {e}"),
                    ))
                }
            },
            Ok(Ok(ServerResult::CreateTaskResult(task))) => match serde_json::to_value(&task) {
                Ok(v) => {
                    BridgeCounters::bump(&c.tasks_started);
                    info!(server = %self.name, task = %task.task.task_id, "the server answered the call with a task; the edge follows it");
                    CallOutcome::Task(v)
                }
                Err(e) => {
                    fallback!(c.calls_unsupported_result, warn, server = %self.name, error = %e, "the server's task could not be read");
                    CallOutcome::Failed(Failure::new(
                        "unsupported_result",
                        false,
                        format!("The MCP server's task could not be read: {e}"),
                    ))
                }
            },
            Ok(Ok(ServerResult::InputRequiredResult(_))) => {
                fallback!(c.calls_unsupported_result, warn, server = %self.name, "the server asked for more input (input_required); answered as an error");
                CallOutcome::Failed(Failure::new(
                    "input_required",
                    false,
                    "The MCP server asked for more input (input_required), which a call through tether cannot supply.",
                ))
            }
            Ok(Ok(_)) => {
                fallback!(c.calls_unsupported_result, warn, server = %self.name, "the server answered a call with something other than a tool result");
                CallOutcome::Failed(Failure::new(
                    "unsupported_result",
                    false,
                    "The MCP server answered with something other than a tool result.",
                ))
            }
            Ok(Err(ServiceError::McpError(e))) => {
                fallback!(c.calls_server_error, warn, server = %self.name, code = e.code.0, message = %e.message, "server answered a call with a JSON-RPC error");
                CallOutcome::Failed(Failure {
                    code: "server_error",
                    retryable: false,
                    text: format!(
                        "The MCP server refused the call (JSON-RPC error {}): {}",
                        e.code.0, e.message
                    ),
                    server_code: Some(e.code.0),
                })
            }
            Ok(Err(ServiceError::Cancelled { reason })) => {
                fallback!(c.calls_abandoned_by_server, info, server = %self.name, reason = reason.as_deref().unwrap_or(""), "the MCP server cancelled the call");
                CallOutcome::Failed(Failure::new(
                    "cancelled_by_server",
                    true,
                    format!(
                        "The MCP server cancelled the call: {}",
                        reason.as_deref().unwrap_or("no reason given")
                    ),
                ))
            }
            Ok(Err(ServiceError::TransportClosed)) | Err(_) => {
                fallback!(c.calls_server_gone, warn, server = %self.name, "the MCP server went away before it answered a call");
                CallOutcome::Failed(Failure::new(
                    "server_exited",
                    true,
                    "The MCP server went away before it answered; whether it acted is unknown.",
                ))
            }
            Ok(Err(other)) => {
                fallback!(c.calls_server_gone, warn, server = %self.name, error = %other, "a call to the MCP server failed");
                CallOutcome::Failed(Failure::new(
                    "server_unreachable",
                    true,
                    format!("The call to the MCP server failed: {other}"),
                ))
            }
        }
    }
}

type Response = Result<Result<ServerResult, ServiceError>, oneshot::error::RecvError>;

enum Ended {
    Response(Box<Response>),
    Deadline,
    Edge(Stop),
    Abandoned,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_carry_code_and_retryable_for_core() {
        let f =
            Failure { code: "server_error", retryable: false, text: "no".into(), server_code: Some(-32603) };
        assert_eq!(
            f.to_result(),
            json!({
                "content": [{"type": "text", "text": "no"}],
                "structuredContent": {"code": "server_error", "retryable": false, "server_code": -32603},
                "isError": true,
            })
        );
    }
}
