//! Tasks through the bridge (the 2026-07-28 tasks extension).
//!
//! A 2026-07-28 server that declares the extension makes a device that
//! declares it too. When the edge's `tools/call` declares the extension in its
//! envelope (its caller can follow a task), the bridge's call to the server
//! declares it as well, and a server that answers with its task
//! (`resultType: "task"`) has that answer sent on to the edge as it is. The
//! edge then polls `tasks/get` and may send `tasks/cancel`: both go to the
//! server under the same declaration, and their answers come back unchanged,
//! so the task id is the server's and its outcome is the server's result.
//!
//! Only the extension is mapped: rmcp speaks no 2025-11-25 tasks, so a legacy
//! server's calls run inline (a tool of such a server that requires a task
//! refuses them, and says so).

use std::time::Duration;

use rmcp::model::{
    CancelTaskParams, CancelTaskRequest, ClientCapabilities, ClientRequest, GetTaskParams, GetTaskRequest,
    JsonObject, RequestMetaObject, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::ServiceError;
use serde_json::Value;

use tether_contract::tasks::{extension, method};
use tether_contract::{ErrorKind, WireError};
use tether_counters::fallback;

use super::Server;

/// How long the server may take to answer one `tasks/get` or `tasks/cancel`.
const TASK_REQUEST_BUDGET: Duration = Duration::from_secs(10);

/// Whether a request from the edge declares the tasks extension in its
/// envelope's client capabilities: its answer may be a task.
pub(crate) fn declares_tasks(params: &Value) -> bool {
    params
        .get("_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities"))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(extension::ID))
        .is_some()
}

impl Server {
    /// Whether calls may become tasks: the server speaks 2026-07-28 and declares the extension.
    pub(crate) fn runs_tasks(&self) -> bool {
        self.modern() && self.info.capabilities.supports_tasks()
    }

    /// Request options whose envelope declares the tasks extension (rmcp's
    /// own envelope otherwise declares only the bridge's capabilities).
    pub(crate) fn task_options() -> PeerRequestOptions {
        let mut capabilities = ClientCapabilities::default();
        capabilities.extensions = Some([(extension::ID.to_owned(), JsonObject::new())].into());
        let mut meta = RequestMetaObject::default();
        meta.set_client_capabilities(capabilities);
        let mut options = PeerRequestOptions::no_options();
        options.meta = Some(meta);
        options
    }

    /// The edge's `tasks/get` or `tasks/cancel` for one of the server's
    /// tasks: the server's answer, or the error it gave (counted).
    pub(crate) async fn task_request(&self, method_name: &str, task_id: String) -> Result<Value, WireError> {
        let request = if method_name == method::TASKS_CANCEL {
            crate::BridgeCounters::bump(&self.counters.task_cancels_forwarded);
            tracing::info!(server = %self.name, task = %task_id, "the edge stopped a task; cancelling it on the server");
            ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(task_id.clone())))
        } else {
            ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(task_id.clone())))
        };
        let answer = async {
            let handle = self.peer.send_cancellable_request(request, Server::task_options()).await?;
            handle.await_response().await
        };
        let refused = |kind, text: String| {
            fallback!(self.counters.task_requests_failed, warn, server = %self.name, task = %task_id, method = method_name, error = %text, "the server did not answer a task request; the edge hears why");
            Err(WireError::new(kind, text))
        };
        match tokio::time::timeout(TASK_REQUEST_BUDGET, answer).await {
            Ok(Ok(
                result @ (ServerResult::GetTaskResult(_)
                | ServerResult::TaskAckResult(_)
                | ServerResult::EmptyResult(_)),
            )) => serde_json::to_value(&result).map_err(|e| {
                WireError::new(ErrorKind::Internal, format!("could not encode the server's answer: {e}"))
            }),
            Ok(Ok(_)) => refused(
                ErrorKind::ClientError,
                format!("the MCP server answered {method_name} with something other than a task"),
            ),
            Ok(Err(ServiceError::McpError(e))) => {
                let kind = if e.code.0 == -32602 { ErrorKind::InvalidParams } else { ErrorKind::ClientError };
                refused(
                    kind,
                    format!(
                        "the MCP server refused {method_name} (JSON-RPC error {}): {}",
                        e.code.0, e.message
                    ),
                )
            }
            Ok(Err(e)) => refused(
                ErrorKind::ClientError,
                format!("the MCP server could not be asked {method_name}: {e}"),
            ),
            Err(_) => refused(
                ErrorKind::Timeout,
                format!(
                    "the MCP server did not answer {method_name} within {} ms",
                    TASK_REQUEST_BUDGET.as_millis()
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_declares_tasks_only_in_its_envelope_capabilities() {
        let declared = json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}});
        assert!(declares_tasks(&declared));
        assert!(!declares_tasks(&json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}})));
        assert!(!declares_tasks(&json!({"task": {"ttl": 1000}})));
        let options = Server::task_options();
        let meta = serde_json::to_value(options.meta.map(|m| m.0)).unwrap_or_default();
        assert!(
            meta["io.modelcontextprotocol/clientCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"]
                .is_object(),
            "{meta}"
        );
    }
}
