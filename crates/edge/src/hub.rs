//! Shared state of one edge: the sessions it holds, who hears about them,
//! admission slots, drain, and the [`Router`] backend requests go through.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use serde_json::Value;
use tether_contract::backend::{method, ListChanged, SessionClosed, SessionOpened, SessionResumed};
use tether_contract::jsonrpc;
use tokio::sync::{broadcast, Notify};

use crate::auth::Verifier;
use crate::config::EdgeConfig;
use crate::counters::{EdgeCounters, EdgeMetrics};
use crate::router::{Local, Router};
use crate::session::Session;

/// How many recently closed session ids are remembered, so a late call gets
/// `channel_closed` with the reason instead of a bare `session_not_found`.
const CLOSED_MEMORY: usize = 4096;

#[derive(Debug, Default)]
struct Tombstones {
    order: VecDeque<String>,
    reasons: HashMap<String, String>,
}

/// Something every connected backend is told.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendEvent {
    /// A session applied a newer manifest.
    ListChanged(ListChanged),
    /// A session latched closed.
    SessionClosed(SessionClosed),
    /// A session is listed and callable.
    SessionOpened(SessionOpened),
    /// A session's device came back within the grace period, perhaps to another edge.
    SessionResumed(SessionResumed),
    /// A task's status moved.
    TaskStatus(tether_contract::tasks::TaskState),
}

impl BackendEvent {
    /// The notification frame for the backend link.
    pub fn to_frame(&self) -> String {
        let (m, params) = match self {
            BackendEvent::ListChanged(p) => (method::LIST_CHANGED, serde_json::to_value(p)),
            BackendEvent::SessionClosed(p) => (method::SESSION_CLOSED, serde_json::to_value(p)),
            BackendEvent::SessionOpened(p) => (method::SESSION_OPENED, serde_json::to_value(p)),
            BackendEvent::SessionResumed(p) => (method::SESSION_RESUMED, serde_json::to_value(p)),
            BackendEvent::TaskStatus(p) => (method::TASK_STATUS, serde_json::to_value(p)),
        };
        jsonrpc::notification(m, &params.unwrap_or(Value::Null))
    }
}

/// Shared state of one edge process.
#[derive(Debug)]
pub struct Hub {
    /// Resolved configuration.
    pub config: EdgeConfig,
    /// Every fallback and drop, counted, plus families and histograms.
    pub metrics: EdgeMetrics,
    /// Verifies every credential: upgrades, and the user credentials that accompany backend calls.
    pub auth: Verifier,
    /// Compiled input schemas, shared by every session that declares the same one.
    pub schemas: crate::gate::SchemaCache,
    /// Intakes, shared by every session that declares the same catalog under the same caps.
    pub catalogs: crate::shared::CatalogCache,
    sessions: DashMap<String, Arc<Session>>,
    closed: Mutex<Tombstones>,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    per_principal: DashMap<String, usize>,
    per_ip_unauthenticated: DashMap<std::net::IpAddr, usize>,
    idle: Notify,
    events: broadcast::Sender<BackendEvent>,
    router: Box<dyn Router>,
    /// Each session's write ledger, by id: made on its first approved or
    /// keyed call, kept across a resume on this edge, gone with the session.
    ledgers: DashMap<String, Arc<crate::session::EdgeLedger>>,
    /// Tasks this edge follows, by tether id: they outlive their socket
    /// (a resume), and their outcome outlives their session, for their ttl.
    tasks: DashMap<String, Arc<crate::session::TaskRecord>>,
    /// The same tasks by session, oldest first: a session's are found without
    /// a scan of every task the edge keeps.
    session_tasks: DashMap<String, Vec<Arc<crate::session::TaskRecord>>>,
}

impl Hub {
    /// A hub with no sessions; `auth` verifies credentials (the edge's own keys suffice).
    pub fn new(config: EdgeConfig, auth: impl Into<Verifier>) -> Arc<Hub> {
        Hub::with_metrics(config, auth.into(), EdgeMetrics::default())
    }

    /// A hub that reports to `metrics` (some of which an identity provider's key set already holds).
    pub fn with_metrics(config: EdgeConfig, auth: Verifier, metrics: EdgeMetrics) -> Arc<Hub> {
        Hub::with_router(config, auth, metrics, Box::new(Local))
    }

    /// A hub whose backend requests go through `router` (a cluster router
    /// reaches sessions other edges hold).
    pub fn with_router(
        config: EdgeConfig,
        auth: Verifier,
        metrics: EdgeMetrics,
        router: Box<dyn Router>,
    ) -> Arc<Hub> {
        let (events, _) = broadcast::channel(config.backend_event_queue.max(1));
        Arc::new(Hub {
            config,
            metrics,
            auth,
            sessions: DashMap::new(),
            closed: Mutex::default(),
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            per_principal: DashMap::new(),
            per_ip_unauthenticated: DashMap::new(),
            idle: Notify::new(),
            events,
            router,
            ledgers: DashMap::new(),
            tasks: DashMap::new(),
            session_tasks: DashMap::new(),
            schemas: crate::gate::SchemaCache::default(),
            catalogs: crate::shared::CatalogCache::default(),
        })
    }

    /// Where backend reads and calls go by session id.
    pub fn router(&self) -> &dyn Router {
        self.router.as_ref()
    }

    /// The flat fallback counters.
    pub fn counters(&self) -> &EdgeCounters {
        &self.metrics.counters
    }

    /// Looks up a connected session.
    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.get(id).map(|s| Arc::clone(s.value()))
    }

    /// All connected sessions, sorted by id.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<_> = self.sessions.iter().map(|s| Arc::clone(s.value())).collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Number of connected sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Lists `session`; returns the session it replaces (a resumed session's
    /// old socket, on this edge).
    pub(crate) fn insert(&self, session: Arc<Session>) -> Option<Arc<Session>> {
        let replaced = self.sessions.insert(session.id.clone(), session);
        self.metrics.sessions.set(i64::try_from(self.sessions.len()).unwrap_or(i64::MAX));
        replaced
    }

    /// Unlists `session` if it is the one listed under its id (a resumed
    /// session's new socket may hold the id by now).
    pub(crate) fn remove(&self, session: &Session) {
        self.sessions.remove_if(&session.id, |_, listed| std::ptr::eq(Arc::as_ptr(listed), session));
        self.metrics.sessions.set(i64::try_from(self.sessions.len()).unwrap_or(i64::MAX));
    }

    /// Another edge resumed `id`: the session this edge holds for it, waiting
    /// for its device, ends as resumed (its keyed calls follow it there).
    pub fn resumed_elsewhere(&self, id: &str) {
        if let Some(s) = self.session(id) {
            if s.phase() == crate::session::Phase::Detached {
                s.end(crate::exit::Exit::Resumed);
            }
        }
    }

    /// Whether the edge is draining: not ready, refusing new work, finishing calls in flight.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Takes one of `principal`'s device connection slots, or None when it has
    /// `max_sessions_per_principal` already; the slot frees when the guard drops.
    pub(crate) fn principal_slot(self: &Arc<Self>, principal: &str) -> Option<PrincipalSlot> {
        let mut n = self.per_principal.entry(principal.to_owned()).or_insert(0);
        if *n >= self.config.max_sessions_per_principal {
            return None;
        }
        *n += 1;
        Some(PrincipalSlot { hub: Arc::clone(self), principal: principal.to_owned() })
    }

    /// Takes one of `ip`'s not-yet-authenticated connection slots, or None when it has
    /// `max_unauthenticated_per_ip` already; the slot frees when the guard drops.
    pub(crate) fn unauthenticated_slot(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<IpSlot> {
        let mut n = self.per_ip_unauthenticated.entry(ip).or_insert(0);
        if *n >= self.config.max_unauthenticated_per_ip {
            return None;
        }
        *n += 1;
        Some(IpSlot { hub: Arc::clone(self), ip })
    }

    /// Connections from `ip` that have not authenticated yet.
    pub fn unauthenticated_from(&self, ip: std::net::IpAddr) -> usize {
        self.per_ip_unauthenticated.get(&ip).map_or(0, |n| *n)
    }

    /// Backend calls in flight right now.
    pub fn calls_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Marks one backend call in flight until the guard drops.
    pub fn call_guard(self: &Arc<Self>) -> CallGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.metrics.calls_in_flight.inc();
        CallGuard { hub: Arc::clone(self) }
    }

    /// Waits until no backend call is in flight, or `deadline`; true when idle.
    pub async fn wait_idle(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.calls_in_flight() == 0 {
                return true;
            }
            tokio::select! {
                _ = &mut idle => {}
                _ = tokio::time::sleep_until(deadline) => return self.calls_in_flight() == 0,
            }
        }
    }

    /// Removes a latched session and remembers why it closed.
    pub(crate) fn remove_closed(&self, session: &Session, reason: &str) {
        self.remove(session);
        self.ledgers.remove(&session.id);
        self.remember_closed(&session.id, reason);
    }

    /// Session `id`'s write ledger, made on first use.
    pub(crate) fn ledger(&self, id: &str) -> Arc<crate::session::EdgeLedger> {
        let made = || {
            let limits = self.config.writes.limits;
            Arc::new(tether_ledger::Ledger::new(self.config.budgets.approval, limits))
        };
        Arc::clone(&self.ledgers.entry(id.to_owned()).or_insert_with(made))
    }

    /// Session `id`'s write ledger, if it has one.
    pub(crate) fn ledger_if_any(&self, id: &str) -> Option<Arc<crate::session::EdgeLedger>> {
        self.ledgers.get(id).map(|l| Arc::clone(&l))
    }

    /// Files a task this edge follows.
    pub(crate) fn file_task(&self, task: Arc<crate::session::TaskRecord>) {
        self.session_tasks.entry(task.session.clone()).or_default().push(Arc::clone(&task));
        self.tasks.insert(task.id.clone(), task);
    }

    /// A task this edge follows, by tether id.
    pub fn task(&self, id: &str) -> Option<Arc<crate::session::TaskRecord>> {
        self.tasks.get(id).map(|t| Arc::clone(&t))
    }

    /// Every task of session `id` this edge follows.
    pub(crate) fn tasks_of(&self, id: &str) -> Vec<Arc<crate::session::TaskRecord>> {
        self.session_tasks.get(id).map(|t| t.clone()).unwrap_or_default()
    }

    /// The task of session `id` that `mine` picks, found without copying the session's list.
    pub(crate) fn task_of(
        &self,
        id: &str,
        mine: impl Fn(&crate::session::TaskRecord) -> bool,
    ) -> Option<Arc<crate::session::TaskRecord>> {
        self.session_tasks.get(id)?.iter().find(|t| mine(t)).cloned()
    }

    /// Forgets a task whose life is over.
    pub(crate) fn forget_task(&self, id: &str) {
        let Some((_, task)) = self.tasks.remove(id) else { return };
        if let dashmap::Entry::Occupied(mut of_session) = self.session_tasks.entry(task.session.clone()) {
            of_session.get_mut().retain(|t| !Arc::ptr_eq(t, &task));
            if of_session.get().is_empty() {
                of_session.remove();
            }
        }
    }

    /// Forgets the ledger of a session that moved to another edge.
    pub(crate) fn forget_ledger(&self, id: &str) {
        self.ledgers.remove(id);
    }

    /// Remembers why a session closed, so a late call gets `channel_closed`
    /// with the reason (a cluster router also remembers other edges' sessions).
    pub fn remember_closed(&self, id: &str, reason: &str) {
        let mut t = match self.closed.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if t.order.len() >= CLOSED_MEMORY {
            if let Some(oldest) = t.order.pop_front() {
                t.reasons.remove(&oldest);
            }
        }
        t.order.push_back(id.to_owned());
        t.reasons.insert(id.to_owned(), reason.to_owned());
    }

    /// Why a recently closed session closed, if it is still remembered.
    pub fn closed_reason(&self, id: &str) -> Option<String> {
        match self.closed.lock() {
            Ok(g) => g.reasons.get(id).cloned(),
            Err(p) => p.into_inner().reasons.get(id).cloned(),
        }
    }

    /// Subscribes a backend to session events.
    pub fn subscribe(&self) -> broadcast::Receiver<BackendEvent> {
        self.events.subscribe()
    }

    /// Tells this edge's backends and the router (which tells the other edges).
    pub(crate) fn publish(&self, event: BackendEvent) {
        self.router.published(&event);
        self.publish_here(event);
    }

    /// Tells this edge's backends only: an event another edge published.
    pub fn publish_here(&self, event: BackendEvent) {
        // No subscribers is normal (no backend connected yet).
        let _ = self.events.send(event);
    }
}

/// One backend call in flight; dropping it lets a drain see the edge go idle.
#[derive(Debug)]
pub struct CallGuard {
    hub: Arc<Hub>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.hub.metrics.calls_in_flight.dec();
        if self.hub.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.hub.idle.notify_waiters();
        }
    }
}

/// One device connection of a principal; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct PrincipalSlot {
    hub: Arc<Hub>,
    principal: String,
}

impl Drop for PrincipalSlot {
    fn drop(&mut self) {
        self.hub.per_principal.remove_if_mut(&self.principal, |_, n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
    }
}

/// One connection from an address that has not authenticated yet.
#[derive(Debug)]
pub(crate) struct IpSlot {
    hub: Arc<Hub>,
    ip: std::net::IpAddr,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        self.hub.per_ip_unauthenticated.remove_if_mut(&self.ip, |_, n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
    }
}
