//! Approvals over MCP: a call that needs the user's approval is asked of the
//! agent's user with `elicitation/create` (form mode) when the MCP client
//! declared elicitation, and decided with their answer; otherwise the call
//! returns the `approval_required` sentence, and the client's follow-up call
//! presents the approval in `_meta["tether.dev/approval"]`.
//!
//! Server-to-client requests exist only on 2025-11-25 sessions (rmcp refuses
//! them on 2026-07-28, which asks through `InputRequiredResult` instead, not
//! served yet): a 2026-07-28 client gets the sentence.

use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema, ProtocolVersion};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;
use tracing::info;

use tether_contract::{ErrorKind, WireError};
use tether_counters::fallback;

use crate::devices::Device;
use crate::metrics::GatewayCounters;

/// What the agent's user said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Run it.
    Approve,
    /// Do not.
    Decline,
}

/// The approval a refused call asks for of the caller's user, if it does.
pub(crate) fn asked_of_caller(err: &WireError) -> Option<&str> {
    let asked = err.detail("asked").and_then(Value::as_str);
    (err.kind == ErrorKind::ApprovalRequired && asked == Some("caller"))
        .then(|| err.detail("approval").and_then(Value::as_str))
        .flatten()
}

/// Whether this client can be asked (form elicitation on a 2025-11-25 session).
fn can_elicit(ctx: &RequestContext<RoleServer>) -> bool {
    let legacy = ctx.protocol_version().is_none_or(|v| v < ProtocolVersion::V_2026_07_28);
    let form = ctx
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    legacy && form
}

/// Asks the agent's user to approve `tool` with `arguments` on `device`;
/// None when the client cannot be asked (counted: the model gets the sentence).
pub(crate) async fn elicit(
    ctx: &RequestContext<RoleServer>,
    counters: &GatewayCounters,
    device: &Device,
    tool: &str,
    arguments: &Value,
) -> Option<Answer> {
    if !can_elicit(ctx) {
        fallback!(counters.approvals_not_elicited, info, session = %device.session, tool, "MCP client cannot be asked (no form elicitation, or 2026-07-28): the model is told to ask the user");
        return None;
    }
    let mut shown = arguments.to_string();
    tether_contract::error::truncate_utf8(&mut shown, 1_000);
    let message = format!("Allow {tool} on your device {} with these arguments?\n{shown}", device.name);
    let schema = ElicitationSchema::builder()
        .optional_bool("approve", true)
        .description("Approve this action (it runs once, with exactly these arguments)")
        .build()
        .ok()?;
    let params = ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: schema };
    GatewayCounters::bump(&counters.approvals_elicited);
    match ctx.peer.create_elicitation(params).await {
        Ok(result) => {
            let approved = matches!(result.action, ElicitationAction::Accept)
                && result.content.as_ref().and_then(|c| c.get("approve")).and_then(Value::as_bool)
                    != Some(false);
            info!(session = %device.session, tool, approved, "MCP client's user answered the approval");
            Some(if approved { Answer::Approve } else { Answer::Decline })
        }
        Err(e) => {
            fallback!(counters.approvals_not_elicited, info, session = %device.session, tool, error = %e, "MCP client did not answer the approval request: the model is told to ask the user");
            None
        }
    }
}
