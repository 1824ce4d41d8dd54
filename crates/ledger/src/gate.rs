//! The write gate both the edge and core run before a call: its key, then
//! its approval, and the receipt after.
//!
//! In order: a keyed call whose key already ran the same call gets that
//! first outcome (or waits for the run in flight); with another call it is
//! refused. Then a call that needs an approval runs only by taking a grant
//! bound to it; without one, one is asked for and the call ends there. The
//! caller counts and logs what [`Admit`] says, and tells [`Admitted::finish`]
//! how the call ended.

use serde_json::{json, Value};
use tokio::time::Instant;

use tether_contract::error::{ErrorKind, WireError};
use tether_contract::writes::{Binding, Fingerprint, Receipt, ReceiptApproval};

use crate::approvals::{Asked, Refusal};
use crate::keys::{Begin, KeyRun};
use crate::Ledger;

/// One call at the gate.
#[derive(Debug, Clone, Copy)]
pub struct WriteCall<'a> {
    /// The verified user it runs for.
    pub principal: &'a str,
    /// The session it goes to (core: the turn's session).
    pub session: &'a str,
    /// The tool's original name: what the approval binds.
    pub tool: &'a str,
    /// The name the caller called (namespaced on a device): what the receipt shows.
    pub called: &'a str,
    /// The arguments as sent.
    pub arguments: &'a Value,
    /// The caller's idempotency key.
    pub key: Option<&'a str>,
    /// The approval the call presents.
    pub approval: Option<&'a str>,
    /// Whether the call needs an approval.
    pub needs_approval: bool,
}

/// Why the gate refused a call; nothing ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The key was used for another call.
    Conflict,
    /// The approval presented does not let the call run.
    Approval(Refusal),
}

impl Refused {
    /// The stable name for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Refused::Conflict => "idempotency_conflict",
            Refused::Approval(r) => r.as_str(),
        }
    }
}

/// What the gate says of a call.
#[derive(Debug)]
pub enum Admit<'a, T> {
    /// Run it, then [`Admitted::finish`].
    Run(Admitted<'a, T>),
    /// It ran already under its key: this was its outcome.
    Replay(T),
    /// Refused, with the error the caller gets.
    Refused(Refused, WireError),
    /// It needs an approval and presented none: this one was asked.
    Ask(Asked),
    /// It needs an approval and none could be made (no randomness).
    Unaskable(WireError),
    /// Reading what the call acts on failed (the error the caller gets).
    Failed(WireError),
}

/// A call the gate let through.
#[derive(Debug)]
pub struct Admitted<'a, T> {
    ledger: &'a Ledger<T>,
    run: Option<KeyRun<'a, T>>,
    receipt: Option<Receipt>,
    started: Instant,
    took_grant: bool,
}

impl<T: Clone + Send + Sync> Admitted<'_, T> {
    /// Whether this call took a grant (not one its key's earlier run took).
    pub fn took_grant(&self) -> bool {
        self.took_grant
    }

    /// Records how the call ended: a receipt (given to `attach` on success,
    /// so the outcome carries it), and the key's outcome (an `Ok` is
    /// replayed to the key's later calls; an error leaves it unknown, so the
    /// same key runs again and the tool de-duplicates).
    pub fn finish(
        self,
        outcome: Result<T, WireError>,
        seq: impl FnOnce(&T) -> Option<u64>,
        attach: impl FnOnce(&mut T, &Receipt),
    ) -> Result<T, WireError> {
        let Admitted { ledger, run, receipt, started, .. } = self;
        let Some(mut receipt) = receipt else { return outcome };
        receipt.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        receipt.outcome = outcome.as_ref().map_or_else(|e| e.kind.as_str(), |_| "ok").to_owned();
        receipt.seq = outcome.as_ref().ok().and_then(seq);
        ledger.receipts.push(receipt.clone());
        match outcome {
            Ok(mut done) => {
                attach(&mut done, &receipt);
                if let Some(run) = run {
                    run.finish(Some(done.clone()));
                }
                Ok(done)
            }
            Err(e) => {
                if let Some(run) = run {
                    run.finish(None);
                }
                Err(e)
            }
        }
    }
}

impl<T: Clone + Send + Sync> Ledger<T> {
    /// Puts `call` through the gate; `state` reads what the call acts on
    /// (see [`Binding::state`]), and runs only when an approval is checked,
    /// after the key: a key used for another call is refused first.
    ///
    /// # Cancel safety
    ///
    /// Waiting for a key's first run holds nothing; dropped after it
    /// returns, an [`Admitted`] leaves its key's outcome unknown.
    pub async fn admit<'a, S>(&'a self, call: WriteCall<'_>, state: S) -> Admit<'a, T>
    where
        S: std::future::Future<Output = Result<Option<Fingerprint>, WireError>>,
    {
        if !call.needs_approval && call.key.is_none() {
            let plain = Admitted {
                ledger: self,
                run: None,
                receipt: None,
                started: Instant::now(),
                took_grant: false,
            };
            return Admit::Run(plain);
        }
        let arguments = Fingerprint::of(call.arguments);
        let mut run = match call.key {
            None => None,
            Some(key) => {
                // Bound to the tool and its arguments: the same key for anything else conflicts.
                let bound = Fingerprint::of(&json!([call.tool, arguments.as_str()]));
                let scoped = format!("{}\n{}\n{key}", call.principal, call.session);
                match self.keys.begin(&scoped, &bound).await {
                    Begin::Replay(first) => return Admit::Replay(first),
                    Begin::Conflict => {
                        let error = WireError::new(
                            ErrorKind::IdempotencyConflict,
                            "the idempotency key was already used for a different call",
                        )
                        .with("key", key);
                        return Admit::Refused(Refused::Conflict, error);
                    }
                    Begin::Run(run) => Some(run),
                }
            }
        };
        let mut took_grant = false;
        let approval = if let Some(earlier) =
            run.as_ref().and_then(|r| r.approved()).filter(|_| call.needs_approval)
        {
            // This key's call was approved and ran with an unknown outcome:
            // delivering it again is the same action (the tool de-duplicates by the key).
            Some(earlier.clone())
        } else if call.needs_approval {
            let state = match state.await {
                Ok(state) => state,
                Err(e) => return Admit::Failed(e),
            };
            let binding = Binding {
                principal: call.principal.to_owned(),
                session: call.session.to_owned(),
                tool: call.tool.to_owned(),
                arguments: arguments.clone(),
                state,
            };
            let Some(id) = call.approval else {
                return match self.approvals.ask(binding) {
                    Some(asked) => Admit::Ask(asked),
                    None => {
                        Admit::Unaskable(WireError::new(ErrorKind::Internal, "could not make an approval id"))
                    }
                };
            };
            match self.approvals.take(id, &binding) {
                Ok(decision) => {
                    let taken = ReceiptApproval { id: id.to_owned(), by: decision.by, at_ms: decision.at_ms };
                    if let Some(run) = run.as_mut() {
                        run.approve(taken.clone());
                    }
                    took_grant = true;
                    Some(taken)
                }
                Err(refusal) => {
                    let error = refusal.to_wire(id);
                    return Admit::Refused(Refused::Approval(refusal), error);
                }
            }
        } else {
            None
        };
        let receipt = Receipt {
            tool: call.called.to_owned(),
            key: call.key.map(str::to_owned),
            fingerprint: arguments,
            approval,
            outcome: String::new(),
            seq: None,
            started_at_ms: crate::epoch_ms(),
            latency_ms: 0,
        };
        Admit::Run(Admitted {
            ledger: self,
            run,
            receipt: Some(receipt),
            started: Instant::now(),
            took_grant,
        })
    }
}
