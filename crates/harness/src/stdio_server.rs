//! `tether sim-server`: a simulated MCP server on stdio, written with the
//! official Rust SDK (rmcp), for trying `tether bridge` without writing a
//! server, and for the bridge's tests of the 2026-07-28 tasks extension.
//!
//! It speaks either revision (rmcp answers `server/discover` and
//! `initialize`) and serves two tools: `echo` answers at once, and
//! `collect_signature` takes a while (the customer signs on the device). A
//! caller that declares the tasks extension gets `collect_signature` as a
//! task it polls with `tasks/get` and may stop with `tasks/cancel`; any other
//! caller waits for the signature inline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, DetailedTask, GetTaskParams, GetTaskResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Task, TaskPayload, TaskStatus,
    Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use tokio::time::Instant;

use tether_rpc::lock;

/// The time to live the server gives its tasks, in ms (five minutes to sign).
pub const TASK_TTL_MS: u64 = 300_000;
/// How often the server suggests its tasks be polled, in ms.
const POLL_MS: u64 = 250;

/// One signature being collected.
#[derive(Debug, Clone)]
struct Signing {
    order: String,
    done_at: Instant,
    cancelled: bool,
}

/// The simulated server: its tools, and the tasks it runs.
#[derive(Debug, Clone)]
pub struct SimServer {
    signing: Duration,
    tasks: Arc<Mutex<HashMap<String, Signing>>>,
}

impl SimServer {
    /// A server whose signatures take `signing` to collect.
    pub fn new(signing: Duration) -> SimServer {
        SimServer { signing, tasks: Arc::default() }
    }

    /// Serves MCP on stdin/stdout until the client closes stdin.
    pub async fn serve_stdio(self) -> std::io::Result<()> {
        let running = self.serve(rmcp::transport::io::stdio()).await.map_err(std::io::Error::other)?;
        running.waiting().await.map_err(std::io::Error::other)?;
        Ok(())
    }

    /// The tasks a client cancelled, by id.
    pub fn cancelled(&self) -> Vec<String> {
        let mut ids: Vec<String> =
            lock(&self.tasks).iter().filter(|(_, s)| s.cancelled).map(|(id, _)| id.clone()).collect();
        ids.sort();
        ids
    }
}

/// Now, in ISO 8601, as a task's times are spelled.
fn stamp() -> String {
    chrono::Utc::now().to_rfc3339()
}

fn object(schema: Value) -> Arc<JsonObject> {
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

fn signed(order: &str) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(format!("signature collected for order {order}"))])
}

impl ServerHandler for SimServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::default();
        // Its catalog never changes, but a 2026-07-28 client may listen for changes all the same.
        let mut tools = rmcp::model::ToolsCapability::default();
        tools.list_changed = Some(true);
        capabilities.tools = Some(tools);
        capabilities.extensions =
            Some([(rmcp::model::TASKS_EXTENSION_ID.to_owned(), JsonObject::new())].into());
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("tether-sim-server", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A simulated field-service app. `echo` answers at once; `collect_signature` waits for the customer to sign.",
            )
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let echo = Tool::new(
            "echo",
            "Says the message back.",
            object(
                json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
            ),
        );
        let sign = Tool::new(
            "collect_signature",
            "Asks the customer to sign for an order on the device; takes as long as they take.",
            object(
                json!({"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}),
            ),
        );
        Ok(ListToolsResult::with_all_items(vec![echo, sign]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let argument = |name: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match request.name.as_ref() {
            "echo" => Ok(CallToolResult::success(vec![ContentBlock::text(argument("message"))]).into()),
            "collect_signature" => {
                let order = argument("order");
                if !ctx.client_capabilities().is_some_and(|c| c.supports_tasks()) {
                    tokio::time::sleep(self.signing).await;
                    return Ok(signed(&order).into());
                }
                let signing = Signing { order, done_at: Instant::now() + self.signing, cancelled: false };
                let id = {
                    let mut tasks = lock(&self.tasks);
                    let id = format!("signature-{}", tasks.len() + 1);
                    tasks.insert(id.clone(), signing);
                    id
                };
                let task = Task::new(id, TaskStatus::Working, stamp(), stamp())
                    .with_ttl_ms(TASK_TTL_MS)
                    .with_poll_interval_ms(POLL_MS)
                    .with_status_message("waiting for the customer to sign");
                Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let Some(signing) = lock(&self.tasks).get(&request.task_id).cloned() else {
            return Err(ErrorData::invalid_params(format!("no task {}", request.task_id), None));
        };
        let task = Task::new(request.task_id, TaskStatus::Working, stamp(), stamp())
            .with_ttl_ms(TASK_TTL_MS)
            .with_poll_interval_ms(POLL_MS);
        let detailed = if signing.cancelled {
            DetailedTask::new(task, TaskPayload::Cancelled)
        } else if Instant::now() >= signing.done_at {
            let result = serde_json::to_value(signed(&signing.order)).unwrap_or_default();
            let result = result.as_object().cloned().unwrap_or_default();
            DetailedTask::new(task, TaskPayload::Completed { result })
        } else {
            DetailedTask::new(task.with_status_message("the customer is signing"), TaskPayload::Working)
        };
        Ok(GetTaskResult::new(detailed))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        match lock(&self.tasks).get_mut(&request.task_id) {
            Some(signing) => {
                signing.cancelled = true;
                Ok(())
            }
            None => Err(ErrorData::invalid_params(format!("no task {}", request.task_id), None)),
        }
    }
}
