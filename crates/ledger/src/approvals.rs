//! Approvals: asked for one exact call, decided by its user, used once.
//!
//! An approval is asked when a call that needs one arrives without it (the
//! call ends there, nothing runs), decided by the binding's own user (or by
//! the device's, asked on the device), and taken by the one call whose
//! binding it names, within the window counted from the ask. A call whose
//! binding differs is refused without using the grant, so the right call can
//! still use it; a used grant stays remembered until its window ends, so a
//! replay is told "used", not "unknown".

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use tether_contract::error::{ErrorKind, WireError};
use tether_contract::writes::{ApprovalState, Approver, Binding, Decided, Differs};
use tether_rpc::lock;

use crate::snapshot::{ms, since, ApprovalSnapshot};

/// A new approval request: what the caller is told to come back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The approval's id.
    pub id: String,
    /// How long it stays good.
    pub expires_in: Duration,
}

/// Who decided an approval, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    /// The device's user, or the caller's.
    pub by: Approver,
    /// When, in ms since the Unix epoch.
    pub at_ms: u64,
}

/// Why an approval is no longer there to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// Its window ran out.
    Expired,
    /// Its call used it.
    Used,
    /// No approval has that id here (never asked, or long forgotten).
    Unknown,
}

impl Gone {
    /// The stable name in `data.reason`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Gone::Expired => "expired",
            Gone::Used => "used",
            Gone::Unknown => "unknown",
        }
    }
}

/// Why an approval does not let a call run (or cannot be decided).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Asked, not yet answered.
    Pending,
    /// The user said no.
    Declined,
    /// Expired, used or unknown.
    Gone(Gone),
    /// It was asked for another call; these parts differ.
    Mismatch(Vec<Differs>),
    /// Only the binding's user decides it.
    NotYours,
}

impl Refusal {
    /// The stable name for logs and counters.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Refusal::Pending => "pending",
            Refusal::Declined => "declined",
            Refusal::Gone(_) => "expired",
            Refusal::Mismatch(_) => "mismatch",
            Refusal::NotYours => "not_yours",
        }
    }

    /// The error the caller gets; `id` is the approval presented.
    pub fn to_wire(&self, id: &str) -> WireError {
        match self {
            Refusal::Pending => {
                WireError::new(ErrorKind::ApprovalRequired, "the approval has not been answered yet")
                    .with("approval", id)
            }
            Refusal::Declined => WireError::new(ErrorKind::ApprovalDeclined, "the user declined this call")
                .with("approval", id),
            Refusal::Gone(gone) => WireError::new(
                ErrorKind::ApprovalExpired,
                format!("the approval cannot be used: {}", gone.as_str()),
            )
            .with("approval", id)
            .with("reason", gone.as_str()),
            Refusal::Mismatch(differs) => {
                let names: Vec<&str> = differs.iter().map(|d| d.as_str()).collect();
                WireError::new(
                    ErrorKind::ApprovalMismatch,
                    format!("the approval was for another call: {} differ", names.join(", ")),
                )
                .with("approval", id)
                .with("differs", names)
            }
            Refusal::NotYours => {
                WireError::new(ErrorKind::Forbidden, "only the user the approval was asked of may decide it")
                    .with("approval", id)
            }
        }
    }
}

/// The `approval_required` error for a new request; `asked` says who was asked.
pub fn required(asked: &Asked, by: Approver, tool: &str) -> WireError {
    let who = match by {
        Approver::Device => "device",
        Approver::Caller => "caller",
    };
    WireError::new(ErrorKind::ApprovalRequired, format!("{tool} needs the user's approval; nothing ran"))
        .with("approval", asked.id.as_str())
        .with("asked", who)
        .with("expires_in_ms", u64::try_from(asked.expires_in.as_millis()).unwrap_or(u64::MAX))
}

/// The answer to `approvals/decide`: where `entry` stands, and for how much longer.
fn decided(id: &str, entry: &Entry, left: Duration) -> Decided {
    Decided {
        approval: id.to_owned(),
        state: *entry.state.borrow(),
        expires_in_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
    }
}

#[derive(Debug)]
struct Entry {
    binding: Binding,
    asked: Instant,
    decision: Option<Decision>,
    state: watch::Sender<ApprovalState>,
}

/// The approvals of one scope.
#[derive(Debug)]
pub struct Approvals {
    window: Duration,
    cap: usize,
    table: Mutex<HashMap<String, Entry>>,
}

impl Approvals {
    /// No approvals yet; each will last `window`, at most `cap` at once.
    pub fn new(window: Duration, cap: usize) -> Approvals {
        Approvals { window, cap: cap.max(1), table: Mutex::default() }
    }

    /// How long an approval stays good.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Asks for an approval of `binding`. None when the system has no
    /// randomness for an id (the call cannot be approved, and says so).
    pub fn ask(&self, binding: Binding) -> Option<Asked> {
        let id = crate::fresh_id("ap-")?;
        let now = Instant::now();
        let mut table = lock(&self.table);
        table.retain(|_, e| now.duration_since(e.asked) < self.window);
        while table.len() >= self.cap {
            let Some(oldest) = table.iter().min_by_key(|(_, e)| e.asked).map(|(id, _)| id.clone()) else {
                break;
            };
            table.remove(&oldest);
        }
        let (state, _) = watch::channel(ApprovalState::Pending);
        table.insert(id.clone(), Entry { binding, asked: now, decision: None, state });
        Some(Asked { id, expires_in: self.window })
    }

    /// The approvals still in their window, for another holder.
    pub(crate) fn export(&self) -> Vec<ApprovalSnapshot> {
        let now = Instant::now();
        lock(&self.table)
            .iter()
            .filter(|(_, e)| now.duration_since(e.asked) < self.window)
            .map(|(id, e)| ApprovalSnapshot {
                id: id.clone(),
                binding: e.binding.clone(),
                age_ms: ms(now.duration_since(e.asked)),
                decision: e.decision,
                state: *e.state.borrow(),
            })
            .collect()
    }

    /// Takes over another holder's approvals, as far as the window and cap allow.
    pub(crate) fn import(&self, approvals: Vec<ApprovalSnapshot>) {
        let now = Instant::now();
        let mut table = lock(&self.table);
        for a in approvals {
            if Duration::from_millis(a.age_ms) >= self.window || table.len() >= self.cap {
                continue;
            }
            let (state, _) = watch::channel(a.state);
            let entry =
                Entry { binding: a.binding, asked: since(now, a.age_ms), decision: a.decision, state };
            table.entry(a.id).or_insert(entry);
        }
    }

    /// The binding an approval was asked for (to show whoever decides it).
    pub fn binding(&self, id: &str) -> Option<Binding> {
        lock(&self.table).get(id).map(|e| e.binding.clone())
    }

    /// Records `principal`'s answer. Only a pending approval is decided; the
    /// same answer again is told where it stands, a changed mind is refused.
    pub fn decide(&self, id: &str, principal: &str, approve: bool, by: Approver) -> Result<Decided, Refusal> {
        let mut table = lock(&self.table);
        let (entry, left) = self.live(&mut table, id, principal)?;
        let current = *entry.state.borrow();
        let wanted = if approve { ApprovalState::Granted } else { ApprovalState::Declined };
        match current {
            ApprovalState::Pending => {
                entry.decision = Some(Decision { by, at_ms: crate::epoch_ms() });
                entry.state.send_replace(wanted);
            }
            same if same == wanted => {}
            ApprovalState::Used | ApprovalState::Granted => return Err(Refusal::Gone(Gone::Used)),
            ApprovalState::Declined => return Err(Refusal::Declined),
        }
        Ok(decided(id, entry, left))
    }

    /// Where approval `id` stands, for its own user.
    pub fn state(&self, id: &str, principal: &str) -> Result<Decided, Refusal> {
        let mut table = lock(&self.table);
        let (entry, left) = self.live(&mut table, id, principal)?;
        Ok(decided(id, entry, left))
    }

    /// Approval `id` if it is still in its window and `principal`'s, with the time it has left.
    fn live<'t>(
        &self,
        table: &'t mut HashMap<String, Entry>,
        id: &str,
        principal: &str,
    ) -> Result<(&'t mut Entry, Duration), Refusal> {
        let entry = table.get_mut(id).ok_or(Refusal::Gone(Gone::Unknown))?;
        let left = self.window.saturating_sub(Instant::now().duration_since(entry.asked));
        if left.is_zero() {
            return Err(Refusal::Gone(Gone::Expired));
        }
        if entry.binding.principal != principal {
            return Err(Refusal::NotYours);
        }
        Ok((entry, left))
    }

    /// Uses the approval `id` for `call`: once, only for the call it names,
    /// only within its window.
    pub fn take(&self, id: &str, call: &Binding) -> Result<Decision, Refusal> {
        let now = Instant::now();
        let mut table = lock(&self.table);
        let entry = table.get_mut(id).ok_or(Refusal::Gone(Gone::Unknown))?;
        if now.duration_since(entry.asked) >= self.window {
            table.remove(id);
            return Err(Refusal::Gone(Gone::Expired));
        }
        let current = *entry.state.borrow();
        if current == ApprovalState::Used {
            return Err(Refusal::Gone(Gone::Used));
        }
        let differs = entry.binding.differs(call);
        if !differs.is_empty() {
            return Err(Refusal::Mismatch(differs));
        }
        match (current, entry.decision) {
            (ApprovalState::Granted, Some(decision)) => {
                entry.state.send_replace(ApprovalState::Used);
                Ok(decision)
            }
            (ApprovalState::Pending, _) => Err(Refusal::Pending),
            (ApprovalState::Declined, _) => Err(Refusal::Declined),
            _ => Err(Refusal::Gone(Gone::Used)),
        }
    }

    /// Waits until approval `id` is decided or `until`; its state then (None: gone).
    ///
    /// # Cancel safety
    ///
    /// Holds nothing while waiting: dropping it changes nothing.
    pub async fn wait(&self, id: &str, until: Instant) -> Option<ApprovalState> {
        let mut rx = lock(&self.table).get(id)?.state.subscribe();
        let decided = tokio::time::timeout_at(until, rx.wait_for(|s| *s != ApprovalState::Pending)).await;
        match decided {
            Ok(Ok(state)) => Some(*state),
            // Forgotten (evicted) while waiting.
            Ok(Err(_)) => None,
            Err(_) => Some(ApprovalState::Pending),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use tether_contract::writes::Fingerprint;

    fn binding(order: &str) -> Binding {
        Binding {
            principal: "mira".into(),
            session: "s1".into(),
            tool: "cancel_order".into(),
            arguments: Fingerprint::of(&json!({"order_id": order})),
            state: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_runs_its_own_call_once_and_no_other() {
        let approvals = Approvals::new(Duration::from_secs(120), 8);
        let asked = approvals.ask(binding("A-104")).unwrap();
        assert_eq!(approvals.take(&asked.id, &binding("A-104")), Err(Refusal::Pending));
        assert_eq!(approvals.decide(&asked.id, "leo", true, Approver::Caller), Err(Refusal::NotYours));
        let decided = approvals.decide(&asked.id, "mira", true, Approver::Caller).unwrap();
        assert_eq!(decided.state, ApprovalState::Granted);
        assert_eq!(
            approvals.take(&asked.id, &binding("B-205")),
            Err(Refusal::Mismatch(vec![Differs::Arguments])),
            "another order: refused, and the grant is not spent"
        );
        assert_eq!(approvals.take(&asked.id, &binding("A-104")).unwrap().by, Approver::Caller);
        assert_eq!(approvals.take(&asked.id, &binding("A-104")), Err(Refusal::Gone(Gone::Used)));
        assert_eq!(approvals.take("ap-nope", &binding("A-104")), Err(Refusal::Gone(Gone::Unknown)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_expires_with_its_window_and_a_decline_stands() {
        let approvals = Approvals::new(Duration::from_secs(120), 8);
        let late = approvals.ask(binding("A-104")).unwrap();
        approvals.decide(&late.id, "mira", true, Approver::Device).unwrap();
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(approvals.take(&late.id, &binding("A-104")), Err(Refusal::Gone(Gone::Expired)));

        let no = approvals.ask(binding("A-104")).unwrap();
        let waiting = approvals.wait(&no.id, Instant::now() + Duration::from_secs(5));
        let (state, decided) =
            tokio::join!(waiting, async { approvals.decide(&no.id, "mira", false, Approver::Device) });
        assert_eq!((state, decided.unwrap().state), (Some(ApprovalState::Declined), ApprovalState::Declined));
        assert_eq!(approvals.decide(&no.id, "mira", true, Approver::Device), Err(Refusal::Declined));
        assert_eq!(approvals.take(&no.id, &binding("A-104")), Err(Refusal::Declined));
    }

    #[tokio::test(start_paused = true)]
    async fn asking_past_the_cap_forgets_the_oldest() {
        let approvals = Approvals::new(Duration::from_secs(120), 2);
        let first = approvals.ask(binding("A-104")).unwrap();
        tokio::time::advance(Duration::from_millis(1)).await;
        let _second = approvals.ask(binding("A-104")).unwrap();
        let _third = approvals.ask(binding("A-104")).unwrap();
        assert_eq!(approvals.take(&first.id, &binding("A-104")), Err(Refusal::Gone(Gone::Unknown)));
    }
}
