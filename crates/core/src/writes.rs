//! The write gate for server-side sources: the same gate the edge runs for
//! client tools ([`tether_ledger::Ledger::admit`]), held in the backend's
//! own process because the edge never sees these calls.
//!
//! A call to a client tool does not pass here: core tells the edge its
//! profile's verdict (`approval_required`) and forwards the approval and key,
//! and the edge, which holds the session's ledger, enforces them.

use serde_json::Value;
use tracing::info;

use tether_contract::mcp::CallToolResult;
use tether_contract::writes::{meta, Approver, Fingerprint};
use tether_contract::{ErrorKind, WireError};
use tether_counters::fallback;
use tether_ledger::{Admit, Ledger, Refused, WriteCall};

use crate::counters::CoreCounters;

/// This backend's server-side write ledger: a keyed call replays the result its source first gave.
pub(crate) type CoreLedger = Ledger<CallToolResult>;

/// What the gate needs of a server-side call beyond its write fields.
pub(crate) struct ServerWrite<'a> {
    pub(crate) ledger: &'a CoreLedger,
    pub(crate) counters: &'a CoreCounters,
    pub(crate) principal: Option<&'a str>,
    pub(crate) session: &'a str,
    pub(crate) name: &'a str,
    pub(crate) arguments: &'a Value,
    pub(crate) key: Option<&'a str>,
    pub(crate) approval: Option<&'a str>,
    pub(crate) needs_approval: bool,
}

/// Puts a server-side call through the gate and runs `run` if it passes.
pub(crate) async fn gated<S, F>(w: ServerWrite<'_>, state: S, run: F) -> Result<CallToolResult, WireError>
where
    S: std::future::Future<Output = Result<Option<Value>, WireError>>,
    F: std::future::Future<Output = Result<CallToolResult, WireError>>,
{
    if !w.needs_approval && w.key.is_none() {
        return run.await;
    }
    let Some(principal) = w.principal else {
        if !w.needs_approval {
            // A keyed call without a verified user: its key is the source's alone.
            return run.await;
        }
        fallback!(
            w.counters.approvals_unbound,
            warn,
            session = w.session,
            name = w.name,
            "call needs an approval but the turn has no verified user; refused"
        );
        return Err(WireError::new(
            ErrorKind::Unauthenticated,
            format!("{} needs the user's approval, and this turn has no verified user to ask", w.name),
        ));
    };
    let state = async move { state.await.map(|s| s.as_ref().map(Fingerprint::of)) };
    let call = WriteCall {
        principal,
        session: w.session,
        tool: w.name,
        called: w.name,
        arguments: w.arguments,
        key: w.key,
        approval: w.approval,
        needs_approval: w.needs_approval,
    };
    let admitted = match w.ledger.admit(call, state).await {
        Admit::Run(admitted) => admitted,
        Admit::Replay(first) => {
            CoreCounters::bump(&w.counters.keyed_replays);
            info!(
                session = w.session,
                name = w.name,
                "keyed call answered with its key's first outcome; the source was not called"
            );
            return Ok(first);
        }
        Admit::Refused(Refused::Conflict, error) => {
            fallback!(
                w.counters.idempotency_conflicts,
                warn,
                session = w.session,
                name = w.name,
                "call refused at dispatch: its idempotency key was used for another call"
            );
            return Err(error);
        }
        Admit::Refused(refused, error) => {
            fallback!(
                w.counters.approvals_refused,
                info,
                session = w.session,
                name = w.name,
                reason = refused.as_str(),
                "call refused at dispatch: its approval does not let it run"
            );
            return Err(error);
        }
        Admit::Failed(error) => return Err(error),
        Admit::Unaskable(error) => {
            fallback!(
                w.counters.approvals_refused,
                error,
                session = w.session,
                name = w.name,
                "no randomness for an approval id; the call cannot be approved"
            );
            return Err(error);
        }
        Admit::Ask(asked) => {
            CoreCounters::bump(&w.counters.approvals_asked);
            info!(session = w.session, name = w.name, approval = %asked.id, "call needs the user's approval; asked, nothing ran");
            return Err(tether_ledger::required(&asked, Approver::Caller, w.name));
        }
    };
    admitted.finish(run.await, |_| None, attach_receipt)
}

/// Puts a receipt in a result's `_meta`, where a caller of [`crate::Turn::call`] finds it.
pub(crate) fn attach_receipt(result: &mut CallToolResult, receipt: &tether_contract::writes::Receipt) {
    if let Ok(value) = serde_json::to_value(receipt) {
        result.meta.get_or_insert_with(Default::default).insert(meta::RECEIPT.into(), value);
    }
}
