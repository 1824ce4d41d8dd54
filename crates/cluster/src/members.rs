//! Which edges are alive: heard from within the edge timeout.
//!
//! Every edge beats on `tether.beat`; one silent past the timeout, or one
//! that said `tether.gone`, is lost. A call waiting on a lost edge fails at
//! once (`channel_closed`), so a dead edge costs its callers at most the
//! timeout plus one beat, never the 7 s call leg.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use tether_rpc::lock;

#[derive(Debug)]
struct Member {
    last: Instant,
    alive: watch::Sender<bool>,
}

/// The other edges this one has heard from.
#[derive(Debug)]
pub(crate) struct Members {
    timeout: Duration,
    edges: Mutex<HashMap<String, Member>>,
}

impl Members {
    pub(crate) fn new(timeout: Duration) -> Members {
        Members { timeout, edges: Mutex::default() }
    }

    /// `edge` beat just now; true when it was not known (a newcomer).
    pub(crate) fn seen(&self, edge: &str) -> bool {
        let mut edges = lock(&self.edges);
        match edges.get_mut(edge) {
            Some(m) => {
                m.last = Instant::now();
                false
            }
            None => {
                edges.insert(edge.to_owned(), Member { last: Instant::now(), alive: watch::channel(true).0 });
                true
            }
        }
    }

    /// Watches `edge`: the value turns false when it is lost. An edge not
    /// heard from yet (it answered before its first beat arrived) starts its
    /// timeout now.
    pub(crate) fn watch(&self, edge: &str) -> watch::Receiver<bool> {
        let mut edges = lock(&self.edges);
        edges
            .entry(edge.to_owned())
            .or_insert_with(|| Member { last: Instant::now(), alive: watch::channel(true).0 })
            .alive
            .subscribe()
    }

    /// `edge` said it is leaving; true when it was known.
    pub(crate) fn lost(&self, edge: &str) -> bool {
        let member = lock(&self.edges).remove(edge);
        member.map(|m| m.alive.send_replace(false)).is_some()
    }

    /// Removes and returns the edges silent past the timeout.
    pub(crate) fn sweep(&self) -> Vec<String> {
        let now = Instant::now();
        let mut lost = Vec::new();
        lock(&self.edges).retain(|edge, m| {
            let alive = now.duration_since(m.last) <= self.timeout;
            if !alive {
                m.alive.send_replace(false);
                lost.push(edge.clone());
            }
            alive
        });
        lost
    }

    /// Counts every edge as just heard: while this edge is cut off from NATS
    /// their silence is not theirs, and after it they get a full timeout to beat.
    pub(crate) fn touch_all(&self) {
        let now = Instant::now();
        for m in lock(&self.edges).values_mut() {
            m.last = now;
        }
    }

    /// Whether `edge` has been heard from and not lost since.
    pub(crate) fn is_alive(&self, edge: &str) -> bool {
        lock(&self.edges).contains_key(edge)
    }

    /// The edges alive now.
    pub(crate) fn alive(&self) -> Vec<String> {
        lock(&self.edges).keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_silent_edge_is_lost_after_the_timeout_and_its_watchers_hear_it() {
        let members = Members::new(Duration::from_millis(1000));
        members.seen("b");
        let mut b = members.watch("b");
        tokio::time::advance(Duration::from_millis(900)).await;
        assert!(members.sweep().is_empty(), "within the timeout the edge is alive");
        members.seen("b");
        tokio::time::advance(Duration::from_millis(900)).await;
        assert!(members.sweep().is_empty(), "a beat restarts the timeout");
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(members.sweep(), vec!["b".to_owned()]);
        assert!(b.wait_for(|alive| !*alive).await.is_ok());
        assert!(members.alive().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_edge_that_says_gone_is_lost_at_once() {
        let members = Members::new(Duration::from_secs(1));
        let mut c = members.watch("c");
        assert!(members.lost("c"));
        assert!(!*c.borrow_and_update());
        assert!(!members.lost("c"), "lost once");
    }
}
