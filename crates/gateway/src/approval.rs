//! Approvals over MCP: a call that needs the user's approval is asked of the
//! agent's user with `elicitation/create` (form mode) when the MCP client
//! declared elicitation, and decided with their answer; otherwise the call
//! returns the `approval_required` sentence, and the client's follow-up call
//! presents the approval in `_meta["tether.dev/approval"]`.
//!
//! Server-to-client requests exist only on 2025-11-25 sessions. A 2026-07-28
//! client that declared elicitation is asked through that revision's
//! multi-round-trip request instead: the call answers `input_required` with
//! the same form (`inputRequests`) and the approval's id as `requestState`,
//! and the client calls again with its user's answer (`inputResponses`). The
//! echoed id is untrusted, and need not be trusted: the edge decides and uses
//! a grant only for the user it was made for and the exact call it is bound to.

use rmcp::model::{
    CallToolRequestParams, ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    InputRequest, InputRequiredResult, ProtocolVersion,
};
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

/// The key of the approval form among a 2026-07-28 call's `inputRequests`.
const INPUT_KEY: &str = "tether.dev/approval";

/// How the agent's user can be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// `elicitation/create` now, within this call (2025-11-25).
    Elicit,
    /// `input_required`: the client asks and calls again (2026-07-28).
    InputRequired,
    /// Not at all: the model gets the sentence.
    Sentence,
}

/// How this client's user can be asked, from what the client declared.
pub(crate) fn how_to_ask(ctx: &RequestContext<RoleServer>) -> Ask {
    let form = ctx
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    let modern = ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
    match (form, modern) {
        (false, _) => Ask::Sentence,
        (true, false) => Ask::Elicit,
        (true, true) => Ask::InputRequired,
    }
}

/// The form that asks the user to approve `tool` with `arguments` on `device`.
fn form(device: &Device, tool: &str, arguments: &Value) -> Option<ElicitRequestParams> {
    let mut shown = arguments.to_string();
    tether_contract::error::truncate_utf8(&mut shown, 1_000);
    let message = format!("Allow {tool} on your device {} with these arguments?\n{shown}", device.name);
    let schema = ElicitationSchema::builder()
        .optional_bool("approve", true)
        .description("Approve this action (it runs once, with exactly these arguments)")
        .build()
        .ok()?;
    Some(ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: schema })
}

/// Reads the user's answer to an elicitation: approve only on accept
/// without an explicit `approve: false`.
fn read_answer(action: &ElicitationAction, content: Option<&Value>) -> Answer {
    let approved = matches!(action, ElicitationAction::Accept)
        && content.and_then(|c| c.get("approve")).and_then(Value::as_bool) != Some(false);
    if approved {
        Answer::Approve
    } else {
        Answer::Decline
    }
}

/// The `input_required` answer that asks a 2026-07-28 client's user to
/// approve, carrying the approval's id back as `requestState`.
pub(crate) fn input_required(
    counters: &GatewayCounters,
    device: &Device,
    tool: &str,
    arguments: &Value,
    approval: &str,
) -> Option<InputRequiredResult> {
    let params = form(device, tool, arguments)?;
    GatewayCounters::bump(&counters.approvals_elicited);
    info!(session = %device.session, tool, approval, "approval asked of the MCP client's user (input_required)");
    let requests = [(INPUT_KEY.to_owned(), InputRequest::Elicitation(ElicitRequest::new(params)))];
    Some(InputRequiredResult::new(Some(requests.into()), Some(approval.to_owned())))
}

/// A 2026-07-28 call made again with its user's answer: the approval it
/// answers (the echoed `requestState`) and the answer.
pub(crate) fn answered(request: &CallToolRequestParams) -> Option<(String, Answer)> {
    let approval = request.request_state.clone()?;
    let response = request.input_responses.as_ref()?.get(INPUT_KEY)?;
    let action: ElicitationAction =
        response.get("action").cloned().and_then(|a| serde_json::from_value(a).ok())?;
    Some((approval, read_answer(&action, response.get("content"))))
}

/// Counts and logs a call whose user cannot be asked: the model gets the sentence.
pub(crate) fn not_asked(counters: &GatewayCounters, device: &Device, tool: &str) {
    fallback!(counters.approvals_not_elicited, info, session = %device.session, tool, "MCP client cannot be asked (it declared no form elicitation): the model is told to ask the user");
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
    let params = form(device, tool, arguments)?;
    GatewayCounters::bump(&counters.approvals_elicited);
    match ctx.peer.create_elicitation(params).await {
        Ok(result) => {
            let answer = read_answer(&result.action, result.content.as_ref());
            info!(session = %device.session, tool, ?answer, "MCP client's user answered the approval");
            Some(answer)
        }
        Err(e) => {
            fallback!(counters.approvals_not_elicited, info, session = %device.session, tool, error = %e, "MCP client did not answer the approval request: the model is told to ask the user");
            None
        }
    }
}
