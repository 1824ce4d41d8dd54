//! What `/mcp` remembers between requests carrying the same bearer token, so
//! a call costs one round trip to the edge (the call), as on the native link,
//! instead of four (who the token is, the turn, the catalog, the call).
//!
//! - Who the token is and which of its user's sessions a path reaches: the
//!   edge's `sessions/list` answer, for at most [`REMEMBER_FOR`] and never
//!   past the token's `exp`.
//! - Each reached session's turn start: core's bound manifest and compiled
//!   gates ([`TurnStart`]).
//!
//! The edge's events keep it true: a session's list changing or its device
//! resuming forgets that session's turn start; a session closing forgets
//! every answer that reached it; a session opening forgets every answer
//! that lists sessions (its owner is not in the event). The link's pump
//! applies each event before any watcher hears it, so none is missed.
//! Nothing here is trusted for more than it saves: the edge
//! still verifies the token and checks the bound seq on every call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use tether_contract::backend::SessionInfo;
use tether_core::{Notification, TurnStart};

/// Longest a token's answer is remembered: a key the identity provider
/// withdraws, or a grant taken back, shows within this long (the edge itself
/// re-verifies every call's token each minute).
pub(crate) const REMEMBER_FOR: Duration = Duration::from_secs(30);
/// Most tokens remembered at once; past it the memory starts over.
pub(crate) const MAX_REMEMBERED: usize = 10_000;

/// One token's answer for one path (`/mcp`, or one pinned session).
#[derive(Debug)]
pub(crate) struct Known {
    /// The verified principal.
    pub(crate) principal: String,
    /// The sessions the path reaches.
    pub(crate) sessions: Vec<SessionInfo>,
    /// Whether the path pins one session.
    pinned: bool,
    until: Instant,
    starts: Mutex<HashMap<String, TurnStart>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Known {
    /// The remembered turn start on `session`, if its catalog has not moved since.
    pub(crate) fn start(&self, session: &str) -> Option<TurnStart> {
        lock(&self.starts).get(session).cloned()
    }

    fn reaches(&self, session: &str) -> bool {
        self.sessions.iter().any(|s| s.session == session)
    }
}

/// Every token's answer, and a count of what the edge's events changed.
#[derive(Debug)]
pub(crate) struct Memory {
    /// False when the edge's events cannot reach it: then nothing is kept.
    kept: bool,
    known: Mutex<HashMap<String, Arc<Known>>>,
    /// Moves before anything is forgotten: an answer read before it moved is not kept.
    epoch: AtomicU64,
}

/// The memory's key: the path's pinned session, then the token.
fn key(token: &str, pinned: Option<&str>) -> String {
    format!("{}\n{token}", pinned.unwrap_or(""))
}

/// Seconds since the Unix epoch.
fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Memory {
    /// A memory that keeps answers only when `kept` (it hears the edge's events).
    pub(crate) fn new(kept: bool) -> Memory {
        Memory { kept, known: Mutex::default(), epoch: AtomicU64::new(0) }
    }

    /// Where the edge's events stand now; pass it back to [`Memory::remember`]
    /// and [`Memory::keep_start`] with what was read after it.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// What `token` reaches on this path, while it may still be trusted.
    pub(crate) fn known(&self, token: &str, pinned: Option<&str>) -> Option<Arc<Known>> {
        let mut known = lock(&self.known);
        let key = key(token, pinned);
        match known.get(&key) {
            Some(k) if Instant::now() < k.until => Some(Arc::clone(k)),
            Some(_) => {
                known.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps the edge's answer for `token`, read at `epoch`, until
    /// [`REMEMBER_FOR`] or the token's `expires_at` (Unix seconds), whichever
    /// is first. Returns it, remembered or not.
    pub(crate) fn remember(
        &self,
        token: &str,
        pinned: Option<&str>,
        epoch: u64,
        principal: String,
        sessions: Vec<SessionInfo>,
        expires_at: Option<u64>,
    ) -> Arc<Known> {
        let left =
            expires_at.map_or(Duration::ZERO, |exp| Duration::from_secs(exp.saturating_sub(now_secs())));
        let until = Instant::now() + left.min(REMEMBER_FOR);
        let pinned_path = pinned.is_some();
        let known =
            Arc::new(Known { principal, sessions, pinned: pinned_path, until, starts: Mutex::default() });
        // An answer without an expiry (an older edge) is used once, never kept.
        if left.is_zero() || !self.kept {
            return known;
        }
        let mut all = lock(&self.known);
        if self.epoch() == epoch {
            if all.len() >= MAX_REMEMBERED {
                all.clear();
            }
            all.insert(key(token, pinned), Arc::clone(&known));
        }
        known
    }

    /// Keeps a turn start read at `epoch` in `known`, unless an event moved since.
    pub(crate) fn keep_start(&self, known: &Known, epoch: u64, start: TurnStart) {
        let mut starts = lock(&known.starts);
        if self.epoch() == epoch {
            starts.insert(start.session().to_owned(), start);
        }
    }

    /// Forgets what `token` reaches (the edge refused it).
    pub(crate) fn forget(&self, token: &str, pinned: Option<&str>) {
        self.moved();
        lock(&self.known).remove(&key(token, pinned));
    }

    fn moved(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Applies one of the edge's events.
    pub(crate) fn on(&self, note: &Notification) {
        match note {
            Notification::ListChanged(c) => self.forget_start(&c.session),
            Notification::SessionResumed(r) => self.forget_start(&r.session),
            Notification::SessionClosed(c) => self.forget_where(|k| !k.reaches(&c.session)),
            // Its owner is not in the event: every list may have grown.
            Notification::SessionOpened(_) => self.forget_where(|k| k.pinned),
            Notification::TaskStatus(_) | Notification::Other { .. } => {}
        }
    }

    /// Forgets `session`'s turn start wherever it is kept.
    fn forget_start(&self, session: &str) {
        self.moved();
        for known in lock(&self.known).values().filter(|k| k.reaches(session)) {
            lock(&known.starts).remove(session);
        }
    }

    /// Forgets every answer `keep` refuses.
    fn forget_where(&self, keep: impl Fn(&Known) -> bool) {
        self.moved();
        lock(&self.known).retain(|_, k| keep(k));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tether_contract::backend::{SessionClosed, SessionOpened};

    fn info(session: &str) -> SessionInfo {
        serde_json::from_value(
            serde_json::json!({"session": session, "principal": "mira", "seq": 1, "tools": 1}),
        )
        .unwrap()
    }

    fn later() -> Option<u64> {
        Some(now_secs() + 3600)
    }

    #[tokio::test]
    async fn an_answer_is_kept_only_while_its_token_lives_and_nothing_moved() {
        let memory = Memory::new(true);
        let epoch = memory.epoch();
        memory.remember("t", None, epoch, "mira".into(), vec![info("s1")], later());
        assert!(memory.known("t", None).is_some());
        assert!(memory.known("t", Some("s1")).is_none(), "a pinned path is its own answer");
        // Expired, no expiry at all (an older edge), or read before an event: used once, not kept.
        memory.remember("old", None, epoch, "mira".into(), vec![], Some(now_secs().saturating_sub(1)));
        memory.remember("none", None, epoch, "mira".into(), vec![], None);
        memory.on(&Notification::SessionOpened(SessionOpened { session: "s2".into(), seq: 1 }));
        memory.remember("raced", None, epoch, "mira".into(), vec![], later());
        for token in ["old", "none", "raced"] {
            assert!(memory.known(token, None).is_none(), "{token}");
        }
        let unheard = Memory::new(false);
        unheard.remember("t", None, unheard.epoch(), "mira".into(), vec![], later());
        assert!(unheard.known("t", None).is_none(), "without the edge's events nothing is kept");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_forgotten_after_its_window_and_by_the_events_that_change_it() {
        let memory = Memory::new(true);
        let epoch = memory.epoch();
        memory.remember("t", None, epoch, "mira".into(), vec![info("s1")], later());
        memory.remember("t", Some("s1"), epoch, "mira".into(), vec![info("s1")], later());
        memory.remember("t", Some("s9"), epoch, "mira".into(), vec![info("s9")], later());
        // A session opening changes every list, not a pinned path.
        memory.on(&Notification::SessionOpened(SessionOpened { session: "s2".into(), seq: 1 }));
        assert!(memory.known("t", None).is_none());
        assert!(memory.known("t", Some("s1")).is_some());
        // A session closing forgets what reached it.
        let closed = SessionClosed { session: "s1".into(), reason: "disconnected".into() };
        memory.on(&Notification::SessionClosed(closed));
        assert!(memory.known("t", Some("s1")).is_none());
        assert!(memory.known("t", Some("s9")).is_some());
        tokio::time::advance(REMEMBER_FOR).await;
        assert!(memory.known("t", Some("s9")).is_none(), "never past the window");
    }
}
