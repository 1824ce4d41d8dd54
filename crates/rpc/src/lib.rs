//! The pending-request table and the closed latch, written once.
//!
//! Both ends of a tether socket send requests by id and wait for the answer
//! their reader task hands back: the edge waiting on a device, core's backend
//! link waiting on an edge. Three rules hold together under one lock here, so
//! neither end can get them subtly wrong on its own:
//!
//! - **The latch and the table change together.** Once latched, every request
//!   in flight has been failed with the latch's reason and every new one is
//!   refused, at once — no caller waits out a deadline on a dead socket.
//! - **Exactly one outcome per request.** An answer that races the deadline
//!   wins; the timeout is reported only when the waiter removed its own entry.
//! - **Giving up is remembered.** A request that timed out or whose waiter was
//!   dropped leaves its tag in a bounded memory, so a late answer is told
//!   apart from one for an id never used.
//!
//! No I/O: the caller writes the frame and reads the socket; this crate only
//! pairs answers with waiters.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use tokio::time::Instant;

/// Locks `m`, taking the data back from a poisoned lock: a panicked holder
/// must not wedge every later caller.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How one request ended; exactly one per request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<A> {
    /// The peer answered.
    Answered(A),
    /// The table latched closed first; the latch's reason.
    Closed(String),
    /// The deadline passed first; the request's tag is remembered as late.
    TimedOut,
}

/// What became of an answer handed to [`Pending::complete`].
#[derive(Debug, PartialEq, Eq)]
pub enum Completion<T> {
    /// A waiter took it.
    Delivered,
    /// Its waiter had given up (deadline or dropped); the tag it was opened with.
    Late(T),
    /// No request with that id is waiting or remembered.
    Unknown,
}

struct Waiter<A, T> {
    tx: oneshot::Sender<Outcome<A>>,
    tag: T,
}

struct State<A, T> {
    closed: Option<String>,
    waiting: HashMap<u64, Waiter<A, T>>,
    late: HashMap<u64, T>,
    late_order: VecDeque<u64>,
}

/// Requests waiting for answers on one socket, and whether that socket has closed.
///
/// `A` is what the reader hands a waiter; `T` is what the caller wants to
/// know about a request whose answer comes too late (a tool name, a deadline).
pub struct Pending<A, T = ()> {
    state: Mutex<State<A, T>>,
    next_id: AtomicU64,
    late_memory: usize,
}

impl<A, T> std::fmt::Debug for Pending<A, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("Pending")
            .field("closed", &state.closed)
            .field("waiting", &state.waiting.len())
            .field("late", &state.late.len())
            .finish()
    }
}

impl<A, T> Pending<A, T> {
    /// An open table that remembers up to `late_memory` given-up requests.
    pub fn new(late_memory: usize) -> Pending<A, T> {
        Pending {
            state: Mutex::new(State {
                closed: None,
                waiting: HashMap::new(),
                late: HashMap::new(),
                late_order: VecDeque::new(),
            }),
            next_id: AtomicU64::new(1),
            late_memory,
        }
    }

    /// An id no request of this table will use (progress tokens, long-lived streams).
    pub fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers a request under a fresh id, or returns the latch's reason.
    pub fn open(&self, tag: T) -> Result<Request<'_, A, T>, String> {
        let id = self.fresh_id();
        let (tx, rx) = oneshot::channel();
        let mut state = lock(&self.state);
        if let Some(reason) = &state.closed {
            return Err(reason.clone());
        }
        state.waiting.insert(id, Waiter { tx, tag });
        Ok(Request { pending: self, id, rx })
    }

    /// Hands `answer` to the request `id`, if one is still waiting.
    pub fn complete(&self, id: u64, answer: A) -> Completion<T> {
        let mut state = lock(&self.state);
        if let Some(waiter) = state.waiting.remove(&id) {
            drop(state);
            // A waiter dropped between our remove and this send lost nothing we owe.
            let _ = waiter.tx.send(Outcome::Answered(answer));
            return Completion::Delivered;
        }
        match state.late.remove(&id) {
            Some(tag) => {
                state.late_order.retain(|x| *x != id);
                Completion::Late(tag)
            }
            None => Completion::Unknown,
        }
    }

    /// Latches closed: fails every waiting request with `reason` and refuses
    /// new ones. Returns how many were failed, or `None` if already latched
    /// (the first latch and its reason win).
    pub fn latch(&self, reason: &str) -> Option<usize> {
        let drained = {
            let mut state = lock(&self.state);
            if state.closed.is_some() {
                return None;
            }
            state.closed = Some(reason.to_owned());
            std::mem::take(&mut state.waiting)
        };
        let failed = drained.len();
        for (_, waiter) in drained {
            let _ = waiter.tx.send(Outcome::Closed(reason.to_owned()));
        }
        Some(failed)
    }

    /// Fails the waiting requests whose tag `doomed` picks with `reason`,
    /// leaving the rest waiting and the table open; returns how many failed.
    pub fn fail_where(&self, doomed: impl Fn(&T) -> bool, reason: &str) -> usize {
        let failed: Vec<Waiter<A, T>> = {
            let mut state = lock(&self.state);
            let ids: Vec<u64> =
                state.waiting.iter().filter(|(_, w)| doomed(&w.tag)).map(|(id, _)| *id).collect();
            ids.iter().filter_map(|id| state.waiting.remove(id)).collect()
        };
        let n = failed.len();
        for waiter in failed {
            let _ = waiter.tx.send(Outcome::Closed(reason.to_owned()));
        }
        n
    }

    /// The latch's reason, once latched.
    pub fn closed(&self) -> Option<String> {
        lock(&self.state).closed.clone()
    }

    /// Whether the table has latched.
    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed.is_some()
    }

    /// Gives back the table's memory while nothing waits: a session idle
    /// after its handshake or a burst holds no empty table's capacity.
    pub fn shrink_if_idle(&self) {
        let mut state = lock(&self.state);
        if state.waiting.is_empty() {
            state.waiting.shrink_to_fit();
        }
        if state.late.is_empty() {
            state.late.shrink_to_fit();
            state.late_order.shrink_to_fit();
        }
    }

    /// Requests waiting right now.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiting.len()
    }

    /// Removes `id` if still waiting and remembers its tag as late.
    fn give_up(&self, id: u64) -> bool {
        let mut state = lock(&self.state);
        let Some(waiter) = state.waiting.remove(&id) else { return false };
        if self.late_memory == 0 {
            return true;
        }
        if state.late_order.len() >= self.late_memory {
            if let Some(oldest) = state.late_order.pop_front() {
                state.late.remove(&oldest);
            }
        }
        state.late_order.push_back(id);
        state.late.insert(id, waiter.tag);
        true
    }

    /// Removes `id` without remembering it: it never reached the peer.
    fn forget(&self, id: u64) {
        lock(&self.state).waiting.remove(&id);
    }
}

/// One registered request. Dropped before [`Request::wait_until`], it is
/// forgotten as if never sent (the frame could not be written).
pub struct Request<'a, A, T> {
    pending: &'a Pending<A, T>,
    id: u64,
    rx: oneshot::Receiver<Outcome<A>>,
}

impl<A, T> std::fmt::Debug for Request<'_, A, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("id", &self.id).finish()
    }
}

impl<A, T> Request<'_, A, T> {
    /// The id to put on the wire.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Waits for the answer until `deadline`.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future before its outcome removes the request, remembers
    /// it as late and calls `abandoned(id)` once — where the caller tells its
    /// peer to stop. A request already answered, timed out or latched calls nothing.
    pub async fn wait_until<F: FnOnce(u64)>(mut self, deadline: Instant, abandoned: F) -> Outcome<A> {
        let mut guard = Abandon { pending: self.pending, id: self.id, abandoned: Some(abandoned) };
        let outcome = match tokio::time::timeout_at(deadline, &mut self.rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Outcome::Closed(self.ended()),
            Err(_) if self.pending.give_up(self.id) => Outcome::TimedOut,
            // Answered or latched between the timer and the lock: that is the outcome.
            Err(_) => self.rx.try_recv().unwrap_or_else(|_| Outcome::Closed(self.ended())),
        };
        guard.abandoned = None;
        outcome
    }

    fn ended(&self) -> String {
        self.pending.closed().unwrap_or_else(|| "the connection ended".to_owned())
    }
}

impl<A, T> Drop for Request<'_, A, T> {
    fn drop(&mut self) {
        self.pending.forget(self.id);
    }
}

/// Armed while a request is waited on; fires when the wait is dropped.
struct Abandon<'a, A, T, F: FnOnce(u64)> {
    pending: &'a Pending<A, T>,
    id: u64,
    abandoned: Option<F>,
}

impl<A, T, F: FnOnce(u64)> Drop for Abandon<'_, A, T, F> {
    fn drop(&mut self) {
        if let Some(abandoned) = self.abandoned.take() {
            if self.pending.give_up(self.id) {
                abandoned(self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(7)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_reaches_its_waiter_and_only_once() {
        let pending: Pending<&str, &str> = Pending::new(8);
        let request = pending.open("tool").unwrap_or_else(|r| panic!("open: {r}"));
        let id = request.id();
        assert_eq!(pending.complete(id, "done"), Completion::Delivered);
        assert_eq!(request.wait_until(soon(), |_| panic!("not abandoned")).await, Outcome::Answered("done"));
        assert_eq!(pending.complete(id, "again"), Completion::Unknown);
        assert_eq!(pending.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_table_gives_its_memory_back_and_a_busy_one_keeps_its_waiters() {
        let pending: Pending<&str, &str> = Pending::new(8);
        let requests: Vec<_> =
            (0..20).map(|_| pending.open("tool").unwrap_or_else(|r| panic!("open: {r}"))).collect();
        let held = requests[19].id();
        for r in &requests[..19] {
            pending.complete(r.id(), "done");
        }
        pending.shrink_if_idle();
        assert!(lock(&pending.state).waiting.capacity() >= 1, "a table with a waiter keeps it");
        assert_eq!(pending.complete(held, "last"), Completion::Delivered, "the waiter survived");
        // Not >= 20: a removal that leaves a tombstone takes one off `capacity()`,
        // and which removals do depends on the map's random hash seed.
        assert!(lock(&pending.state).waiting.capacity() > 0, "capacity stays until shrunk");
        pending.shrink_if_idle();
        assert_eq!(lock(&pending.state).waiting.capacity(), 0, "nothing waits: nothing held");
        drop(requests);
    }

    #[tokio::test(start_paused = true)]
    async fn the_latch_fails_everything_in_flight_at_once_and_refuses_the_rest() {
        let pending: Arc<Pending<u32>> = Arc::new(Pending::new(8));
        let mut waits = Vec::new();
        for _ in 0..5 {
            let pending = Arc::clone(&pending);
            waits.push(tokio::spawn(async move {
                let request = pending.open(()).map_err(|r| r.clone())?;
                Ok::<_, String>(request.wait_until(soon(), |_| {}).await)
            }));
        }
        tokio::task::yield_now().await;
        assert_eq!(pending.waiting(), 5);
        let started = Instant::now();
        assert_eq!(pending.latch("socket lost"), Some(5));
        for wait in waits {
            let outcome = wait.await.unwrap_or_else(|e| panic!("join: {e}"));
            assert_eq!(outcome, Ok(Outcome::Closed("socket lost".into())));
        }
        assert_eq!(started.elapsed(), Duration::ZERO, "nobody waited out a deadline");
        assert_eq!(pending.latch("second"), None, "the first latch wins");
        assert_eq!(pending.open(()).err(), Some("socket lost".to_owned()));
    }

    #[tokio::test(start_paused = true)]
    async fn fail_where_fails_only_the_picked_requests_and_the_table_stays_open() {
        let pending: Pending<u32, bool> = Pending::new(8);
        let kept = pending.open(true).unwrap_or_else(|r| panic!("open: {r}"));
        let failed = pending.open(false).unwrap_or_else(|r| panic!("open: {r}"));
        assert_eq!(pending.fail_where(|keep| !keep, "connection_lost"), 1);
        assert_eq!(failed.wait_until(soon(), |_| {}).await, Outcome::Closed("connection_lost".into()));
        assert_eq!(pending.waiting(), 1);
        assert_eq!(pending.complete(kept.id(), 7), Completion::Delivered);
        assert_eq!(kept.wait_until(soon(), |_| panic!("not abandoned")).await, Outcome::Answered(7));
        assert!(pending.open(false).is_ok(), "the table is still open");
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_out_request_is_remembered_and_its_late_answer_recognised() {
        let pending: Pending<u32, &str> = Pending::new(8);
        let request = pending.open("get_order").unwrap_or_else(|r| panic!("open: {r}"));
        let id = request.id();
        let deadline = Instant::now() + Duration::from_millis(50);
        assert_eq!(request.wait_until(deadline, |_| panic!("not abandoned")).await, Outcome::TimedOut);
        assert_eq!(pending.complete(id, 1), Completion::Late("get_order"));
        assert_eq!(pending.complete(id, 1), Completion::Unknown, "remembered once");
    }

    #[tokio::test(start_paused = true)]
    async fn the_late_memory_is_bounded() {
        let pending: Pending<u32, u64> = Pending::new(2);
        let mut ids = Vec::new();
        for tag in 0..3 {
            let request = pending.open(tag).unwrap_or_else(|r| panic!("open: {r}"));
            ids.push(request.id());
            assert_eq!(request.wait_until(Instant::now(), |_| {}).await, Outcome::TimedOut);
        }
        assert_eq!(pending.complete(ids[0], 0), Completion::Unknown, "the oldest is forgotten");
        assert_eq!(pending.complete(ids[2], 0), Completion::Late(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_wait_abandons_once_and_its_answer_is_late() {
        let pending: Pending<u32, &str> = Pending::new(8);
        let abandoned = AtomicUsize::new(0);
        let request = pending.open("scan").unwrap_or_else(|r| panic!("open: {r}"));
        let id = request.id();
        let wait = request.wait_until(soon(), |gone| {
            assert_eq!(gone, id);
            abandoned.fetch_add(1, Ordering::Relaxed);
        });
        let raced = tokio::time::timeout(Duration::from_millis(10), wait).await;
        assert!(raced.is_err(), "nothing answered");
        assert_eq!(abandoned.load(Ordering::Relaxed), 1);
        assert_eq!(pending.waiting(), 0, "nothing left behind");
        assert_eq!(pending.complete(id, 1), Completion::Late("scan"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_lands_before_the_waiter_looks_wins_over_the_deadline() {
        let pending: Pending<u32> = Pending::new(8);
        let request = pending.open(()).unwrap_or_else(|r| panic!("open: {r}"));
        assert_eq!(pending.complete(request.id(), 7), Completion::Delivered);
        // The deadline has long passed when the waiter first polls: the answer still wins.
        tokio::time::advance(Duration::from_secs(60)).await;
        let outcome = request.wait_until(Instant::now() - Duration::from_secs(1), |_| {}).await;
        assert_eq!(outcome, Outcome::Answered(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_dropped_before_its_wait_is_forgotten_not_late() {
        let pending: Pending<u32> = Pending::new(8);
        let request = pending.open(()).unwrap_or_else(|r| panic!("open: {r}"));
        let id = request.id();
        drop(request);
        assert_eq!(pending.waiting(), 0);
        assert_eq!(pending.complete(id, 1), Completion::Unknown);
    }
}
