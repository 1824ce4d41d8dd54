//! The write gate around a backend's `tools/call` on this session: keys
//! bound to the call's fingerprint, approvals bound to the exact call, and
//! receipts ([`tether_ledger::Ledger::admit`], the same gate core runs).
//!
//! A call that needs an approval and presents none asks for one — on the
//! device when the device said it asks its user (`tether.dev/approve`), else
//! of the caller — and ends there, nothing sent. A plain call (no key, no
//! approval needed) passes untouched: no fingerprint, no ledger.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use tether_contract::backend::{CallParams, CallResponse};
use tether_contract::error::WireError;
use tether_contract::mcp::{RawCallResult, ToolDeclaration};
use tether_contract::writes::{
    method, ApproveParams, ApproveResult, Approver, DecideParams, Decided, Fingerprint,
};
use tether_contract::Leg;
use tether_counters::fallback;
use tether_ledger::{Admit, Ledger, LedgerSnapshot, Refused, WriteCall};

use super::{ms, Session};
use crate::counters::EdgeCounters;

/// A session's write ledger: a keyed call replays the backend's response as
/// the device first answered it.
pub type EdgeLedger = Ledger<CallResponse<RawCallResult>>;

/// The call at the gate: its params, the device's name for the tool, the
/// declaration the backend was shown, and its leg.
pub(super) struct Gated<'a> {
    pub(super) params: &'a CallParams,
    pub(super) original: &'a str,
    pub(super) declaration: &'a ToolDeclaration,
    pub(super) leg: Duration,
}

/// The write ledger of `session`, for the edge its device resumed on (None
/// when it has nothing to hand over). It stays here until the old socket's
/// part ends; what that part still writes is not handed over, and a keyed
/// call it had in flight moves as an unknown outcome.
pub fn hand_over_ledger(
    hub: &crate::hub::Hub,
    session: &str,
) -> Option<LedgerSnapshot<CallResponse<RawCallResult>>> {
    let snapshot = hub.ledger_if_any(session)?.export();
    if snapshot.is_empty() {
        return None;
    }
    EdgeCounters::bump(&hub.counters().ledgers_handed_over);
    info!(session, "write ledger handed over with its session to the edge the device resumed on");
    Some(snapshot)
}

/// Takes over the write ledger another edge handed over with `session`.
pub(super) fn adopt_ledger(
    hub: &crate::hub::Hub,
    session: &str,
    snapshot: LedgerSnapshot<CallResponse<RawCallResult>>,
) {
    EdgeCounters::bump(&hub.counters().ledgers_adopted);
    info!(session, "write ledger adopted from the edge that held the session");
    hub.ledger(session).import(snapshot);
}

impl Session {
    /// Whether this call needs an approval: the edge's policy, or the backend's.
    fn needs_approval(&self, call: &Gated<'_>) -> bool {
        let writes = &self.hub.config.writes;
        let listed = writes.approval_tools.iter().any(|t| t == call.original);
        call.params.meta.approval_required || writes.approval.needs(call.declaration, listed)
    }

    /// Runs `deliver` (the call on the device) under the write contract.
    pub(super) async fn gated_write<F>(
        &self,
        call: Gated<'_>,
        deliver: F,
    ) -> Result<CallResponse<RawCallResult>, WireError>
    where
        F: Future<Output = Result<CallResponse<RawCallResult>, WireError>>,
    {
        let params = call.params;
        let needs_approval = self.needs_approval(&call);
        // A redelivery after a resume passed the gate on its first delivery.
        if params.meta.redelivered || (!needs_approval && params.meta.idempotency_key.is_none()) {
            return deliver.await;
        }
        let ledger = self.hub.ledger(&self.id);
        let state = Fingerprint::of_declaration(call.declaration);
        let write = WriteCall {
            principal: &self.principal,
            session: &self.id,
            tool: call.original,
            called: &params.name,
            arguments: &params.arguments,
            key: params.meta.idempotency_key.as_deref(),
            approval: params.meta.approval.as_deref(),
            needs_approval,
        };
        let state = std::future::ready(Ok(Some(state)));
        let admitted = match tokio::time::timeout(call.leg, ledger.admit(write, state)).await {
            Err(_) => {
                fallback!(self.counters().call_timeouts, info, session = %self.id, tool = %params.name, "keyed call waited its whole leg for its key's first run");
                return Err(WireError::timeout(Leg::ToolCall, ms(call.leg)));
            }
            Ok(Admit::Run(admitted)) => admitted,
            Ok(Admit::Replay(first)) => {
                EdgeCounters::bump(&self.counters().keyed_replays);
                info!(session = %self.id, tool = %params.name, "keyed call answered with its key's first outcome; nothing sent");
                return Ok(first);
            }
            Ok(Admit::Refused(Refused::Conflict, error)) => {
                fallback!(self.counters().idempotency_conflicts, warn, session = %self.id, tool = %params.name, "call refused: its idempotency key was used for another call; nothing sent");
                return Err(error);
            }
            Ok(Admit::Refused(refused, error)) => {
                fallback!(self.counters().approvals_refused, info, session = %self.id, tool = %params.name, reason = refused.as_str(), "call refused: its approval does not let it run; nothing sent");
                return Err(error);
            }
            Ok(Admit::Unaskable(error) | Admit::Failed(error)) => {
                fallback!(self.counters().approvals_refused, error, session = %self.id, tool = %params.name, "no randomness for an approval id; the call cannot be approved");
                return Err(error);
            }
            Ok(Admit::Ask(asked)) => return Err(self.ask_approval(&ledger, asked, &call)),
        };
        if admitted.took_grant() {
            EdgeCounters::bump(&self.counters().approvals_used);
        }
        admitted.finish(deliver.await, |r| Some(r.seq), |r, receipt| r.receipt = Some(receipt.clone()))
    }

    /// Tells who was asked for an approval: the device's user when the device
    /// asks (the request goes out now), else the caller.
    fn ask_approval(
        &self,
        ledger: &Arc<EdgeLedger>,
        asked: tether_ledger::Asked,
        call: &Gated<'_>,
    ) -> WireError {
        EdgeCounters::bump(&self.counters().approvals_asked);
        let on_device = self.handshake.get().is_some_and(|h| h.identity.approvals);
        info!(session = %self.id, tool = %call.params.name, approval = %asked.id, on_device, "call needs an approval; asked, nothing sent");
        if let Some(session) = self.hub.session(&self.id).filter(|_| on_device) {
            let ask = ApproveParams {
                approval: asked.id.clone(),
                tool: call.original.to_owned(),
                title: call.declaration.title.clone(),
                description: call.declaration.description.clone(),
                arguments: call.params.arguments.clone(),
                expires_in_ms: ms(asked.expires_in),
            };
            tokio::spawn(ask_device(session, Arc::clone(ledger), ask));
        }
        let by = if on_device { Approver::Device } else { Approver::Caller };
        tether_ledger::required(&asked, by, &call.params.name)
    }

    /// The caller's user decides (or looks at) an approval of this session.
    pub fn decide(&self, params: &DecideParams, principal: &str) -> Result<Decided, WireError> {
        let refused = |refusal: tether_ledger::Refusal| {
            fallback!(self.counters().approval_decisions_refused, info, session = %self.id, approval = %params.approval, reason = refusal.as_str(), "approval decision refused");
            refusal.to_wire(&params.approval)
        };
        let Some(ledger) = self.hub.ledger_if_any(&self.id) else {
            return Err(refused(tether_ledger::Refusal::Gone(tether_ledger::Gone::Unknown)));
        };
        let Some(approve) = params.approve else {
            return ledger.approvals.state(&params.approval, principal).map_err(refused);
        };
        let decided = ledger
            .approvals
            .decide(&params.approval, principal, approve, Approver::Caller)
            .map_err(refused)?;
        EdgeCounters::bump(&self.counters().approvals_decided);
        info!(session = %self.id, approval = %params.approval, approve, "approval decided by the caller's user");
        Ok(decided)
    }
}

/// Asks the device's user and records the answer; a device that does not
/// answer within the window leaves the approval to the caller (counted).
async fn ask_device(session: Arc<Session>, ledger: Arc<EdgeLedger>, ask: ApproveParams) {
    let window = Duration::from_millis(ask.expires_in_ms);
    let id = ask.approval.clone();
    let answered = session.request(method::APPROVE, &ask, window, method::APPROVE, false).await;
    let approve = match answered {
        Ok((raw, _)) => serde_json::from_str::<ApproveResult>(raw.get())
            .map(|r| r.approve)
            .map_err(|e| format!("malformed answer: {e}")),
        Err(e) => Err(format!("{e:?}")),
    };
    match approve {
        Ok(approve) => match ledger.approvals.decide(&id, &session.principal, approve, Approver::Device) {
            Ok(_) => {
                EdgeCounters::bump(&session.counters().approvals_decided);
                info!(session = %session.id, approval = %id, approve, "approval decided on the device");
            }
            Err(refusal) => {
                fallback!(session.counters().device_approvals_failed, info, session = %session.id, approval = %id, reason = refusal.as_str(), "device's approval answer came after the window or another decision; ignored");
            }
        },
        Err(mut why) => {
            tether_contract::error::truncate_utf8(&mut why, 120);
            fallback!(session.counters().device_approvals_failed, info, session = %session.id, approval = %id, error = %why, "device did not answer its approval request; the caller may still decide it");
        }
    }
}
