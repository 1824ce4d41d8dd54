//! The write contract's state, held once for the edge and core: approvals
//! bound to the exact call, idempotency keys bound to their arguments'
//! fingerprint, and the receipts writes leave.
//!
//! - [`Approvals`] — asked for one [`Binding`](tether_contract::writes::Binding),
//!   decided by its user, used once, within the approval window.
//! - [`Keys`] — a key runs its call once; the same key with the same
//!   arguments gets the first known outcome (or waits for the first run), with
//!   other arguments it is refused.
//! - [`Receipts`] — what approved or keyed calls did, bounded in count and age.
//! - [`Ledger::admit`] — the gate both run: key, then approval, then the receipt.
//!
//! The edge holds one [`Ledger`] per session (client tools); core one per
//! backend link (server-side sources). The rules are the same code, so the
//! two gates refuse alike. No I/O: tokio's clock and channels only.

mod approvals;
mod gate;
mod keys;
mod receipts;
mod snapshot;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use approvals::{required, Approvals, Asked, Decision, Gone, Refusal};
pub use gate::{Admit, Admitted, Refused, WriteCall};
pub use keys::{Begin, KeyRun, Keys};
pub use receipts::Receipts;
pub use snapshot::LedgerSnapshot;

/// How much a ledger keeps, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerLimits {
    /// Approvals asked and not yet expired, at most (the oldest go first).
    pub approvals: usize,
    /// Idempotency keys remembered, at most (the oldest finished go first).
    pub keys: usize,
    /// Receipts kept, at most (the oldest go first).
    pub receipts: usize,
    /// How long a key's outcome and a receipt are kept.
    pub max_age: Duration,
}

impl Default for LedgerLimits {
    fn default() -> Self {
        LedgerLimits { approvals: 64, keys: 256, receipts: 256, max_age: Duration::from_secs(3600) }
    }
}

/// Approvals, keys and receipts of one scope (an edge's session, a core link).
#[derive(Debug)]
pub struct Ledger<T> {
    /// Approvals asked in this scope.
    pub approvals: Approvals,
    /// Idempotency keys used in this scope.
    pub keys: Keys<T>,
    /// Receipts of this scope's writes.
    pub receipts: Receipts,
}

impl<T: Clone + Send + Sync> Ledger<T> {
    /// An empty ledger whose approvals last `window`.
    pub fn new(window: Duration, limits: LedgerLimits) -> Ledger<T> {
        Ledger {
            approvals: Approvals::new(window, limits.approvals),
            keys: Keys::new(limits.keys, limits.max_age),
            receipts: Receipts::new(limits.receipts, limits.max_age),
        }
    }

    /// Everything another holder needs to go on from here (a run in flight as unknown).
    pub fn export(&self) -> LedgerSnapshot<T> {
        LedgerSnapshot {
            approvals: self.approvals.export(),
            keys: self.keys.export(),
            receipts: self.receipts.export(),
        }
    }

    /// Takes over what another holder had, within this ledger's own bounds.
    pub fn import(&self, snapshot: LedgerSnapshot<T>) {
        self.approvals.import(snapshot.approvals);
        self.keys.import(snapshot.keys);
        self.receipts.import(snapshot.receipts);
    }
}

/// Wall-clock now in ms since the Unix epoch, for receipts (never for deadlines).
pub fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A fresh random id (128 bits, hex) with `prefix`; None when the system has no randomness.
fn fresh_id(prefix: &str) -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    let mut id = String::with_capacity(prefix.len() + 32);
    id.push_str(prefix);
    for b in bytes {
        id.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        id.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    Some(id)
}
