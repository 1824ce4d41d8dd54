//! The in-process router: which sessions are connected, and who hears about them.
//!
//! This is the seam DESIGN §10 scales out behind: a later NATS router answers
//! the same questions for sessions held by other edges.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use serde_json::Value;
use tether_contract::backend::{method, ListChanged, SessionClosed};
use tether_contract::jsonrpc;
use tokio::sync::broadcast;

use crate::config::EdgeConfig;
use crate::counters::EdgeCounters;
use crate::session::Session;

/// Bound of the backend event fan-out; a slower backend loses events (counted).
const EVENT_QUEUE: usize = 1024;
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
}

impl BackendEvent {
    /// The notification frame for the backend link.
    pub fn to_frame(&self) -> String {
        let (m, params) = match self {
            BackendEvent::ListChanged(p) => (method::LIST_CHANGED, serde_json::to_value(p)),
            BackendEvent::SessionClosed(p) => (method::SESSION_CLOSED, serde_json::to_value(p)),
        };
        jsonrpc::notification(m, &params.unwrap_or(Value::Null))
    }
}

/// Shared state of one edge process.
#[derive(Debug)]
pub struct Hub {
    /// Resolved configuration.
    pub config: EdgeConfig,
    /// Every fallback and drop, counted.
    pub counters: EdgeCounters,
    sessions: DashMap<String, Arc<Session>>,
    closed: Mutex<Tombstones>,
    events: broadcast::Sender<BackendEvent>,
}

impl Hub {
    /// A hub with no sessions.
    pub fn new(config: EdgeConfig) -> Arc<Hub> {
        let (events, _) = broadcast::channel(EVENT_QUEUE);
        Arc::new(Hub {
            config,
            counters: EdgeCounters::default(),
            sessions: DashMap::new(),
            closed: Mutex::default(),
            events,
        })
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

    pub(crate) fn insert(&self, session: Arc<Session>) {
        self.sessions.insert(session.id.clone(), session);
    }

    pub(crate) fn remove(&self, id: &str) {
        self.sessions.remove(id);
    }

    /// Removes a latched session and remembers why it closed.
    pub(crate) fn remove_closed(&self, id: &str, reason: &str) {
        self.sessions.remove(id);
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

    pub(crate) fn publish(&self, event: BackendEvent) {
        // No subscribers is normal (no backend connected yet).
        let _ = self.events.send(event);
    }
}
