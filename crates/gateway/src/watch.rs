//! Mid-turn changes reach the MCP client: a device's manifest swap, a device
//! that comes online or goes away becomes `notifications/tools/list_changed`.
//!
//! One pump reads the edge link's notifications and fans them out; each MCP
//! session (or 2026-07-28 subscription) runs a watcher that keeps the set of
//! its user's sessions and notifies its client when one of them moves. The
//! seq semantics stay the edge's: a watcher only says "re-list", and the
//! re-list reads the applied manifest.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use tether_contract::ErrorKind;
use tether_core::Notification;
use tether_counters::fallback;

use crate::auth::Scope;
use crate::metrics::GatewayCounters;
use crate::Shared;

/// Fans the link's notifications out to every watcher until the link closes,
/// each applied to what the endpoint remembers first.
pub(crate) async fn pump(
    mut from_edge: tokio::sync::mpsc::Receiver<Notification>,
    to: broadcast::Sender<Notification>,
    memory: Arc<crate::memory::Memory>,
    edge_gone: CancellationToken,
) {
    while let Some(note) = from_edge.recv().await {
        memory.on(&note);
        // No watcher listening is fine: nobody needs telling.
        let _ = to.send(note);
    }
    warn!("the link to the edge closed; the MCP endpoint cannot reach any device");
    edge_gone.cancel();
}

/// The freshest bearer token an MCP session has presented: a 2025-11-25
/// session's watcher outlives the token it was opened with, and asks the
/// edge about new devices with whichever token its user sent last.
#[derive(Debug, Default)]
pub(crate) struct Credential {
    current: std::sync::Mutex<Held>,
}

/// The token, whose it is, and how many times it changed (a refused watcher
/// waits for a new one).
#[derive(Debug, Clone, Default)]
struct Held {
    token: String,
    principal: Option<String>,
    generation: u64,
}

impl Credential {
    /// A credential holding `token` of `principal`.
    pub(crate) fn new(token: &str, principal: &str) -> Credential {
        let held = Held { token: token.to_owned(), principal: Some(principal.to_owned()), generation: 0 };
        Credential { current: std::sync::Mutex::new(held) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `token` if it is new and of the user the session belongs to (the
    /// first to present one); false for another user's token, which is not kept.
    pub(crate) fn renew(&self, token: &str, principal: &str) -> bool {
        let mut held = self.lock();
        match &held.principal {
            Some(owner) if owner != principal => return false,
            Some(_) => {}
            None => held.principal = Some(principal.to_owned()),
        }
        if held.token != token {
            held.token = token.to_owned();
            held.generation = held.generation.wrapping_add(1);
        }
        true
    }

    /// The token and its generation.
    fn get(&self) -> (String, u64) {
        let held = self.lock();
        (held.token.clone(), held.generation)
    }
}

/// How long a watcher that could not reach the edge waits before it asks again.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Why a watcher's set of sessions may be missing one of its user's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stale {
    /// The set is complete.
    No,
    /// The edge refused the token of this generation: re-read once the client presents another.
    UntilRenewed(u64),
    /// The edge could not be asked: re-read at the first event from this instant.
    Retry(tokio::time::Instant),
}

/// One MCP session's view of its user's sessions.
struct Watcher {
    shared: Arc<Shared>,
    scope: Scope,
    credential: Arc<Credential>,
    mine: HashSet<String>,
    stale: Stale,
}

impl Watcher {
    /// Whether `note` changes what the scope lists; keeps `mine` current.
    async fn moves(&mut self, note: &Notification) -> bool {
        let resynced = self.resync().await;
        let moved = match note {
            Notification::ListChanged(c) => self.mine.contains(&c.session),
            // Same session on a new socket: its catalog was read again.
            Notification::SessionResumed(r) => self.mine.contains(&r.session),
            Notification::SessionClosed(c) => self.mine.remove(&c.session),
            // A new device of this user joins the aggregate (never a pinned view).
            Notification::SessionOpened(o) if self.scope.pinned.is_none() => self.opened(&o.session).await,
            _ => false,
        };
        moved || resynced
    }

    /// Asks the edge about a new session: is it this user's?
    async fn opened(&mut self, session: &str) -> bool {
        let (token, generation) = self.credential.get();
        if self.stale == Stale::UntilRenewed(generation) {
            // The edge refused this token already; the re-read after renewal catches up.
            return false;
        }
        let budget = self.shared.config.budgets.turn_start;
        match self.shared.link.session_info(session, &token, budget).await {
            Ok(list) if !list.sessions.is_empty() => self.mine.insert(session.to_owned()),
            Ok(_) => false,
            Err(e) => {
                self.stale = stale_after(&e, generation);
                fallback!(self.shared.metrics.counters.watcher_lookups_failed, warn, principal = %self.scope.principal, %session, error = %e, "MCP watcher could not ask the edge about a new session; its client re-lists, and the watcher re-reads its sessions once it can");
                // The session may be this user's: the client re-lists to be safe.
                true
            }
        }
    }

    /// Re-reads the user's whole set after a failed lookup, once that can
    /// succeed; true when the set changed.
    async fn resync(&mut self) -> bool {
        match self.stale {
            Stale::No => return false,
            Stale::Retry(at) if tokio::time::Instant::now() < at => return false,
            Stale::UntilRenewed(_) | Stale::Retry(_) => {}
        }
        // Read only when stale: every event of the edge passes here.
        let (token, generation) = self.credential.get();
        if self.stale == Stale::UntilRenewed(generation) {
            return false;
        }
        let budget = self.shared.config.budgets.turn_start;
        match self.shared.link.sessions(&token, budget).await {
            Ok(list) => {
                let now: HashSet<String> = list.sessions.into_iter().map(|s| s.session).collect();
                self.stale = Stale::No;
                debug!(principal = %self.scope.principal, sessions = now.len(), "MCP watcher re-read its user's sessions");
                let changed = now != self.mine;
                self.mine = now;
                changed
            }
            Err(e) => {
                self.stale = stale_after(&e, generation);
                fallback!(self.shared.metrics.counters.watcher_lookups_failed, warn, principal = %self.scope.principal, error = %e, "MCP watcher could not re-read its user's sessions; it tries again later");
                false
            }
        }
    }
}

/// A refused token waits for a new one; any other failure retries after [`RETRY_AFTER`].
fn stale_after(e: &tether_contract::WireError, generation: u64) -> Stale {
    match e.kind {
        ErrorKind::Unauthenticated | ErrorKind::Forbidden => Stale::UntilRenewed(generation),
        _ => Stale::Retry(tokio::time::Instant::now() + RETRY_AFTER),
    }
}

/// Notifies through `notify` whenever the scope's tools move, until `stop`
/// fires or a notification cannot be delivered (the client went away).
/// Lookups use `credential`, which the session's requests keep fresh.
pub(crate) async fn watch<F, Fut>(
    shared: Arc<Shared>,
    scope: Scope,
    credential: Arc<Credential>,
    stop: CancellationToken,
    notify: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut events = shared.events.subscribe();
    let mine = scope.sessions.iter().map(|s| s.session.clone()).collect();
    let mut watcher = Watcher { shared, scope, credential, mine, stale: Stale::No };
    loop {
        let event = tokio::select! {
            event = events.recv() => event,
            () = stop.cancelled() => return,
        };
        let changed = match event {
            Ok(note) => watcher.moves(&note).await,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                fallback!(watcher.shared.metrics.counters.events_lagged, warn, missed, principal = %watcher.scope.principal, "MCP watcher fell behind the edge's events; telling its client to re-list");
                true
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if changed {
            if !notify().await {
                debug!(principal = %watcher.scope.principal, "MCP client gone; its watcher stops");
                return;
            }
            GatewayCounters::bump(&watcher.shared.metrics.counters.list_changed_sent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{SinkExt, StreamExt};
    use serde_json::{json, Value};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tether_contract::backend::{ListChanged, SessionOpened};
    use tokio_tungstenite::tungstenite::protocol::Role;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::WebSocketStream;

    type EdgeSide = WebSocketStream<tokio::io::DuplexStream>;

    /// A gateway's shared state over an in-memory link, the edge's end of
    /// that link, and the sender of the edge's events.
    async fn gateway(backlog: usize) -> (Arc<Shared>, EdgeSide, broadcast::Sender<Notification>) {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let ws = WebSocketStream::from_raw_socket(ours, Role::Client, None).await;
        let edge = WebSocketStream::from_raw_socket(theirs, Role::Server, None).await;
        let (events, _) = broadcast::channel(backlog);
        let shared = Arc::new(Shared {
            link: tether_core::BackendLink::from_stream(ws),
            config: crate::GatewayConfig::default(),
            events: events.clone(),
            metrics: crate::metrics::GatewayMetrics::default(),
            owners: crate::auth::SessionOwners::default(),
            memory: Arc::new(crate::memory::Memory::new(false)),
        });
        (shared, edge, events)
    }

    fn scope(sessions: &[&str]) -> Scope {
        Scope {
            token: "t".into(),
            principal: "mira".into(),
            sessions: sessions.iter().map(|s| info(s)).collect(),
            pinned: None,
            known: None,
        }
    }

    fn info(session: &str) -> tether_contract::backend::SessionInfo {
        serde_json::from_value(json!({"session": session, "principal": "mira", "seq": 1, "tools": 1}))
            .unwrap()
    }

    /// A watcher that falls behind the edge's events tells its client to
    /// re-list rather than guess what it missed.
    #[tokio::test(flavor = "current_thread")]
    async fn a_watcher_that_falls_behind_tells_its_client_to_re_list() {
        let (shared, _edge, events) = gateway(2).await;
        let notified = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let watcher = {
            let (notified, stop) = (Arc::clone(&notified), stop.clone());
            let credential = Arc::new(Credential::new("t", "mira"));
            tokio::spawn(watch(Arc::clone(&shared), scope(&[]), credential, stop, move || {
                let notified = Arc::clone(&notified);
                async move {
                    notified.fetch_add(1, Ordering::Relaxed);
                    true
                }
            }))
        };
        tokio::task::yield_now().await; // the watcher subscribes
        for seq in 1..=5 {
            // Another user's sessions: only the lag makes the watcher speak.
            let _ = events.send(Notification::ListChanged(ListChanged { session: format!("x{seq}"), seq }));
        }
        for _ in 0..100 {
            if shared.metrics.get("events_lagged") > 0 {
                break;
            }
            tokio::task::yield_now().await; // bounded: the watcher needs a few polls
        }
        stop.cancel();
        watcher.await.unwrap();
        assert_eq!(shared.metrics.get("events_lagged"), 1);
        assert_eq!(notified.load(Ordering::Relaxed), 1, "one re-list for the whole gap");
    }

    /// The edge's end: answers `sessions/list` for `mira`'s sessions `s1`
    /// and `s2` to the token `fresh`, refuses the token `expired`, and
    /// reports each lookup as (token, session asked about).
    async fn edge(mut ws: EdgeSide, asked: tokio::sync::mpsc::UnboundedSender<(String, Option<String>)>) {
        while let Some(Ok(Message::Text(text))) = ws.next().await {
            let request: Value = serde_json::from_str(text.as_str()).unwrap();
            let token = request["params"]["_meta"]["credential"].as_str().unwrap_or("").to_owned();
            let session = request["params"]["session"].as_str().map(str::to_owned);
            let _ = asked.send((token.clone(), session.clone()));
            let answer = if token == "fresh" {
                let mine: Vec<Value> = ["s1", "s2"]
                    .into_iter()
                    .filter(|s| session.as_deref().is_none_or(|asked| asked == *s))
                    .map(|s| serde_json::to_value(info(s)).unwrap())
                    .collect();
                json!({"jsonrpc": "2.0", "id": request["id"], "result": {"sessions": mine, "reader": {"principal": "mira", "operator": false}}})
            } else {
                let refused = tether_contract::WireError::new(ErrorKind::Unauthenticated, "token expired");
                json!({"jsonrpc": "2.0", "id": request["id"], "error": refused.to_json()})
            };
            if ws.send(Message::Text(answer.to_string().into())).await.is_err() {
                return;
            }
        }
    }

    /// The next list_changed the watcher sends (bounded: 5 s).
    async fn next_note(notes: &mut tokio::sync::mpsc::UnboundedReceiver<()>) {
        let note = tokio::time::timeout(Duration::from_secs(5), notes.recv()).await;
        assert_eq!(note, Ok(Some(())), "a list_changed within 5 s");
    }

    /// A 2025-11-25 watcher outlives the token its session opened with: a
    /// new device it could not ask about with the expired token still
    /// reaches its client once the client presents a fresh one.
    #[tokio::test(flavor = "current_thread")]
    async fn a_watcher_whose_token_expired_catches_up_when_the_client_renews_it() {
        let (shared, edge_side, events) = gateway(16).await;
        let (asked_tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(edge(edge_side, asked_tx));
        let (notes_tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
        let credential = Arc::new(Credential::new("expired", "mira"));
        let stop = CancellationToken::new();
        let watcher = tokio::spawn(watch(
            Arc::clone(&shared),
            scope(&["s1"]),
            Arc::clone(&credential),
            stop.clone(),
            move || {
                let notes = notes_tx.clone();
                async move { notes.send(()).is_ok() }
            },
        ));
        tokio::task::yield_now().await; // the watcher subscribes

        // s2 opens while the token is expired: the lookup is refused, and the client re-lists to be safe.
        let _ = events.send(Notification::SessionOpened(SessionOpened { session: "s2".into(), seq: 1 }));
        next_note(&mut notes).await;
        assert_eq!(asked.recv().await, Some(("expired".into(), Some("s2".into()))));
        assert_eq!(shared.metrics.get("watcher_lookups_failed"), 1);
        // Its swap before the client renews: the watcher cannot tell, and does not re-ask with the same token;
        // nor does it ask about another new session with it.
        let _ = events.send(Notification::ListChanged(ListChanged { session: "s2".into(), seq: 2 }));
        let _ = events.send(Notification::SessionOpened(SessionOpened { session: "s3".into(), seq: 1 }));
        // One thread: once the event has left the queue, the watcher has read the credential for it.
        for _ in 0..100 {
            if events.is_empty() {
                break;
            }
            tokio::task::yield_now().await; // bounded: the watcher needs a poll or two
        }
        assert!(events.is_empty(), "the watcher took both events before the renewal");
        // The client's next request brings a fresh token; s2's next swap reaches the client.
        credential.renew("fresh", "mira");
        let _ = events.send(Notification::ListChanged(ListChanged { session: "s2".into(), seq: 3 }));
        next_note(&mut notes).await;
        assert_eq!(asked.recv().await, Some(("fresh".into(), None)), "the whole set re-read, once");
        // From here s2 is the watcher's like any other; another user's swap says nothing.
        let _ = events.send(Notification::ListChanged(ListChanged { session: "x9".into(), seq: 1 }));
        let _ = events.send(Notification::ListChanged(ListChanged { session: "s2".into(), seq: 4 }));
        next_note(&mut notes).await;
        stop.cancel();
        watcher.await.unwrap();
        assert!(notes.try_recv().is_err(), "exactly one list_changed per move of this user's");
        assert!(asked.try_recv().is_err(), "no lookup past the re-read");
        assert_eq!(shared.metrics.get("watcher_lookups_failed"), 1);
    }

    /// A request of another user in this MCP session (possible only for a
    /// session id the owner table forgot) never hands the watcher its token.
    #[tokio::test(flavor = "current_thread")]
    async fn another_users_token_never_reaches_a_sessions_watcher() {
        let (shared, _edge, _events) = gateway(2).await;
        let server = crate::handler::McpServer::new(Arc::clone(&shared));
        let mut mine = scope(&[]);
        mine.token = "mira-token".into();
        server.renew(&mine);
        let theirs = Scope { token: "eve-token".into(), principal: "eve".into(), ..scope(&[]) };
        server.renew(&theirs);
        assert_eq!(shared.metrics.get("foreign_tokens_ignored"), 1);
        let credential = Credential::new("a", "mira");
        assert!(!credential.renew("b", "eve"));
        assert_eq!(credential.get(), ("a".to_owned(), 0), "kept the owner's");
        assert!(credential.renew("c", "mira"));
        assert_eq!(credential.get(), ("c".to_owned(), 1));
    }
}
