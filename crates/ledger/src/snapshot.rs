//! A ledger as it moves to another holder: a session whose device resumed
//! on another edge takes its grants, keys and receipts along, so a key
//! retried there replays its first outcome and a grant asked here can be
//! decided and used there.
//!
//! Ages cross the wire, never instants. A run in flight moves as an unknown
//! outcome: the next call with its key runs again, as after a timeout, and
//! the tool de-duplicates by the same key.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use tether_contract::writes::{ApprovalState, Binding, Fingerprint, Receipt, ReceiptApproval};

use crate::Decision;

/// What one ledger hands the next.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LedgerSnapshot<T> {
    #[serde(default)]
    pub(crate) approvals: Vec<ApprovalSnapshot>,
    #[serde(default = "Vec::new")]
    pub(crate) keys: Vec<KeySnapshot<T>>,
    #[serde(default)]
    pub(crate) receipts: Vec<ReceiptSnapshot>,
}

impl<T> LedgerSnapshot<T> {
    /// Whether there is nothing to hand over.
    pub fn is_empty(&self) -> bool {
        self.approvals.is_empty() && self.keys.is_empty() && self.receipts.is_empty()
    }
}

/// An approval still in its window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ApprovalSnapshot {
    pub(crate) id: String,
    pub(crate) binding: Binding,
    pub(crate) age_ms: u64,
    pub(crate) decision: Option<Decision>,
    pub(crate) state: ApprovalState,
}

/// A key still remembered: its outcome if known.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct KeySnapshot<T> {
    pub(crate) key: String,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) age_ms: u64,
    pub(crate) outcome: Option<T>,
    pub(crate) approval: Option<ReceiptApproval>,
}

/// A receipt still kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReceiptSnapshot {
    pub(crate) age_ms: u64,
    pub(crate) receipt: Receipt,
}

/// A duration in whole ms, for the wire.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// When something `age_ms` old happened, on this clock.
pub(crate) fn since(now: tokio::time::Instant, age_ms: u64) -> tokio::time::Instant {
    now.checked_sub(Duration::from_millis(age_ms)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;
    use tether_contract::writes::Approver;

    use super::*;
    use crate::{Begin, Ledger, LedgerLimits};

    fn fp(order: &str) -> Fingerprint {
        Fingerprint::of(&json!({"order_id": order}))
    }

    fn binding(order: &str) -> Binding {
        Binding {
            principal: "mira".into(),
            session: "s1".into(),
            tool: "cancel_order".into(),
            arguments: fp(order),
            state: None,
        }
    }

    /// Through JSON, as it crosses NATS.
    fn moved(from: &Ledger<String>) -> Ledger<String> {
        let wire = serde_json::to_string(&from.export()).unwrap();
        let to = Ledger::new(Duration::from_secs(120), LedgerLimits::default());
        to.import(serde_json::from_str(&wire).unwrap());
        to
    }

    #[tokio::test(start_paused = true)]
    async fn keys_grants_and_receipts_go_on_at_the_next_holder_as_they_were() {
        let here: Ledger<String> = Ledger::new(Duration::from_secs(120), LedgerLimits::default());
        let Begin::Run(run) = here.keys.begin("mira/K", &fp("A-104")).await else { panic!("first run") };
        run.finish(Some("cancelled A-104".into()));
        let Begin::Run(in_flight) = here.keys.begin("mira/L", &fp("A-104")).await else {
            panic!("first run")
        };
        let asked = here.approvals.ask(binding("A-104")).unwrap();
        here.approvals.decide(&asked.id, "mira", true, Approver::Caller).unwrap();
        let pending = here.approvals.ask(binding("B-205")).unwrap();
        let receipt = Receipt {
            tool: "client__cancel_order".into(),
            key: Some("K".into()),
            fingerprint: fp("A-104"),
            approval: None,
            outcome: "ok".into(),
            seq: Some(3),
            started_at_ms: 1,
            latency_ms: 2,
        };
        here.receipts.push(receipt.clone());
        tokio::time::advance(Duration::from_secs(100)).await;

        let there = moved(&here);
        drop(in_flight);
        assert!(
            matches!(there.keys.begin("mira/K", &fp("A-104")).await, Begin::Replay(o) if o == "cancelled A-104")
        );
        assert!(matches!(there.keys.begin("mira/K", &fp("B-205")).await, Begin::Conflict));
        assert!(
            matches!(there.keys.begin("mira/L", &fp("A-104")).await, Begin::Run(_)),
            "a run in flight moved as unknown: it runs again"
        );
        assert!(there.approvals.take(&asked.id, &binding("A-104")).is_ok(), "the grant is used there, once");
        assert!(there.approvals.take(&asked.id, &binding("A-104")).is_err());
        assert!(there.approvals.decide(&pending.id, "mira", true, Approver::Caller).is_ok());
        assert_eq!(there.receipts.recent(), vec![receipt]);
        // The approval window counts from the ask, not from the move.
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(there.approvals.take(&pending.id, &binding("B-205")).is_err(), "expired 120 s after the ask");
    }
}
