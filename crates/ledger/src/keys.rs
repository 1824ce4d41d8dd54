//! Idempotency keys bound to their call's fingerprint.
//!
//! A key runs its call once. While that run is in flight, the same key with
//! the same fingerprint waits for it instead of running a second time; once
//! it ended with a known outcome, that outcome is replayed. A run whose
//! outcome is unknown (it timed out, its channel closed, its caller gave up)
//! leaves the key bound but runnable: the next call with it runs again, which
//! is safe because the tool de-duplicates by the same key. The same key with
//! another fingerprint is a conflict, whatever state it is in.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use tether_contract::writes::{Fingerprint, ReceiptApproval};
use tether_rpc::lock;

use crate::snapshot::{ms, since, KeySnapshot};

#[derive(Debug)]
enum State<T> {
    /// A run is in flight; its outcome arrives here (None: it ended unknown).
    Running(watch::Receiver<Option<T>>),
    Done(T),
    Unknown,
}

#[derive(Debug)]
struct Entry<T> {
    fingerprint: Fingerprint,
    at: Instant,
    state: State<T>,
    /// The grant an earlier run of this key took: the same key with the same
    /// call is the same approved action, delivered again, not a new one.
    approval: Option<ReceiptApproval>,
}

/// What a keyed call may do.
#[derive(Debug)]
pub enum Begin<'a, T> {
    /// Run it; report its outcome through the guard.
    Run(KeyRun<'a, T>),
    /// It ran already: this was its outcome.
    Replay(T),
    /// The key was used with other arguments (or for another tool).
    Conflict,
}

/// The one run of a key: [`KeyRun::finish`] records its outcome; dropped
/// unfinished, the outcome is unknown and the key may run again.
#[derive(Debug)]
pub struct KeyRun<'a, T> {
    keys: &'a Keys<T>,
    key: String,
    outcome: Option<watch::Sender<Option<T>>>,
    approved: Option<ReceiptApproval>,
}

impl<T: Clone + Send + Sync> KeyRun<'_, T> {
    /// The grant an earlier run of this key took, if one did (its outcome
    /// unknown, so this run delivers the same approved call again).
    pub fn approved(&self) -> Option<&ReceiptApproval> {
        self.approved.as_ref()
    }

    /// Records the grant this run took, for any later run of the key.
    pub fn approve(&mut self, approval: ReceiptApproval) {
        if let Some(entry) = lock(&self.keys.table).get_mut(&self.key) {
            entry.approval = Some(approval.clone());
        }
        self.approved = Some(approval);
    }

    /// Records how the run ended: `Some` a known outcome, replayed to every
    /// later call with the key; `None` unknown, so the next call runs again.
    pub fn finish(mut self, outcome: Option<T>) {
        self.settle(outcome);
    }

    fn settle(&mut self, outcome: Option<T>) {
        let Some(tx) = self.outcome.take() else { return };
        {
            let mut table = lock(&self.keys.table);
            if let Some(entry) = table.get_mut(&self.key) {
                entry.at = Instant::now();
                entry.state = match &outcome {
                    Some(done) => State::Done(done.clone()),
                    None => State::Unknown,
                };
            }
        }
        tx.send_replace(outcome);
    }
}

impl<T> Drop for KeyRun<'_, T> {
    fn drop(&mut self) {
        let Some(tx) = self.outcome.take() else { return };
        if let Some(entry) = lock(&self.keys.table).get_mut(&self.key) {
            entry.state = State::Unknown;
        }
        // Waiters see the sender go and look again: the key is runnable.
        drop(tx);
    }
}

/// The keys of one scope, bounded in count and age.
#[derive(Debug)]
pub struct Keys<T> {
    cap: usize,
    max_age: Duration,
    table: Mutex<HashMap<String, Entry<T>>>,
}

impl<T: Clone + Send + Sync> Keys<T> {
    /// No keys yet; at most `cap` finished ones, each kept `max_age`.
    pub fn new(cap: usize, max_age: Duration) -> Keys<T> {
        Keys { cap: cap.max(1), max_age, table: Mutex::default() }
    }

    /// Begins a call with `key` (already scoped by its caller: user, session)
    /// whose fingerprint is `fingerprint`; waits while another run of it is in flight.
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting it holds nothing; the returned [`KeyRun`] is the
    /// only thing that moves the key on.
    pub async fn begin(&self, key: &str, fingerprint: &Fingerprint) -> Begin<'_, T> {
        loop {
            let mut running = {
                let mut table = lock(&self.table);
                self.evict(&mut table);
                match table.get_mut(key) {
                    Some(entry) if entry.fingerprint != *fingerprint => return Begin::Conflict,
                    Some(Entry { state: State::Done(outcome), .. }) => return Begin::Replay(outcome.clone()),
                    Some(Entry { state: State::Running(rx), .. }) => rx.clone(),
                    Some(entry) => {
                        let (tx, rx) = watch::channel(None);
                        entry.state = State::Running(rx);
                        let approved = entry.approval.clone();
                        return Begin::Run(KeyRun {
                            keys: self,
                            key: key.to_owned(),
                            outcome: Some(tx),
                            approved,
                        });
                    }
                    None => {
                        let (tx, rx) = watch::channel(None);
                        let entry = Entry {
                            fingerprint: fingerprint.clone(),
                            at: Instant::now(),
                            state: State::Running(rx),
                            approval: None,
                        };
                        table.insert(key.to_owned(), entry);
                        let run =
                            KeyRun { keys: self, key: key.to_owned(), outcome: Some(tx), approved: None };
                        return Begin::Run(run);
                    }
                }
            };
            // The first run's outcome, or its end unknown; either way look again.
            let _ = running.wait_for(Option::is_some).await;
        }
    }

    /// The keys still remembered, for another holder: a run in flight as unknown.
    pub(crate) fn export(&self) -> Vec<KeySnapshot<T>> {
        let now = Instant::now();
        let mut table = lock(&self.table);
        self.evict(&mut table);
        table
            .iter()
            .map(|(key, e)| KeySnapshot {
                key: key.clone(),
                fingerprint: e.fingerprint.clone(),
                age_ms: ms(now.duration_since(e.at)),
                outcome: match &e.state {
                    State::Done(outcome) => Some(outcome.clone()),
                    State::Running(_) | State::Unknown => None,
                },
                approval: e.approval.clone(),
            })
            .collect()
    }

    /// Takes over another holder's keys (one already here stays as it is).
    pub(crate) fn import(&self, keys: Vec<KeySnapshot<T>>) {
        let now = Instant::now();
        let mut table = lock(&self.table);
        for k in keys {
            if Duration::from_millis(k.age_ms) >= self.max_age {
                continue;
            }
            let state = k.outcome.map_or(State::Unknown, State::Done);
            let entry =
                Entry { fingerprint: k.fingerprint, at: since(now, k.age_ms), state, approval: k.approval };
            table.entry(k.key).or_insert(entry);
        }
        self.evict(&mut table);
    }

    /// Drops finished keys past their age, then the oldest finished past the cap.
    fn evict(&self, table: &mut HashMap<String, Entry<T>>) {
        let now = Instant::now();
        table.retain(|_, e| matches!(e.state, State::Running(_)) || now.duration_since(e.at) < self.max_age);
        while table.len() >= self.cap {
            let oldest = table
                .iter()
                .filter(|(_, e)| !matches!(e.state, State::Running(_)))
                .min_by_key(|(_, e)| e.at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => table.remove(&k),
                // Every key is in flight: calls in flight are bounded elsewhere.
                None => break,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn fp(order: &str) -> Fingerprint {
        Fingerprint::of(&json!({"order_id": order}))
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_replays_its_first_outcome_and_refuses_other_arguments() {
        let keys: Keys<&'static str> = Keys::new(8, Duration::from_secs(60));
        let Begin::Run(run) = keys.begin("mira/K", &fp("A-104")).await else { panic!("first run") };
        run.finish(Some("cancelled A-104"));
        assert!(matches!(keys.begin("mira/K", &fp("A-104")).await, Begin::Replay("cancelled A-104")));
        assert!(matches!(keys.begin("mira/K", &fp("B-205")).await, Begin::Conflict));
        assert!(
            matches!(keys.begin("leo/K", &fp("B-205")).await, Begin::Run(_)),
            "keys are scoped by their caller"
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(matches!(keys.begin("mira/K", &fp("B-205")).await, Begin::Run(_)), "forgotten past its age");
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_call_waits_for_the_first_run_and_an_unknown_end_runs_again() {
        let keys: Keys<u32> = Keys::new(8, Duration::from_secs(60));
        let Begin::Run(first) = keys.begin("K", &fp("A-104")).await else { panic!("first run") };
        let a104 = fp("A-104");
        let second = keys.begin("K", &a104);
        let (second, ()) = tokio::join!(second, async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            first.finish(Some(7));
        });
        assert!(matches!(second, Begin::Replay(7)));

        let Begin::Run(lost) = keys.begin("L", &fp("A-104")).await else { panic!("first run") };
        let again = keys.begin("L", &a104);
        let (again, ()) = tokio::join!(again, async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(lost);
        });
        let Begin::Run(again) = again else { panic!("an unknown outcome runs again") };
        again.finish(None);
        assert!(
            matches!(keys.begin("L", &fp("B-205")).await, Begin::Conflict),
            "still bound to its arguments"
        );
    }
}
