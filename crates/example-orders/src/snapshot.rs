//! The fixture snapshot of the orders service, and a backend that serves it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::source::{BackendError, OrderBackend};

/// The bundled snapshot: A-104 (mira, processing) and B-205 (leo).
pub const FIXTURE: &str = include_str!("../fixtures/orders-snapshot.json");

/// One order as the snapshot records it.
#[derive(Debug, Clone, Deserialize)]
pub struct Order {
    /// Order id.
    pub order_id: String,
    /// Principal who owns it.
    pub owner: String,
    /// Fulfilment status.
    pub status: String,
}

/// What the orders service looked like at one instant.
#[derive(Debug, Clone, Deserialize)]
pub struct Snapshot {
    /// Version of the service that produced it, echoed in every result.
    pub source_version: String,
    /// When it was observed (RFC 3339), echoed as `as_of`.
    pub observed_at: String,
    /// The orders.
    pub orders: Vec<Order>,
}

impl Snapshot {
    /// The bundled fixture.
    pub fn fixture() -> Result<Snapshot, serde_json::Error> {
        serde_json::from_str(FIXTURE)
    }

    /// Who owns each order: the authorization index, consulted before any read.
    pub fn owners(&self) -> HashMap<String, String> {
        self.orders.iter().map(|o| (o.order_id.clone(), o.owner.clone())).collect()
    }
}

/// Serves reads from a snapshot, applies fictional cancellations to it in
/// memory (de-duplicated by idempotency key, as a real orders API would), and
/// counts every execution.
#[derive(Debug)]
pub struct SnapshotBackend {
    snapshot: Snapshot,
    /// Each order's status now: the snapshot's, moved by cancellations and tests.
    statuses: Mutex<HashMap<String, String>>,
    /// What each idempotency key's cancellation answered.
    applied: Mutex<HashMap<String, Value>>,
    executions: AtomicU64,
    cancellations: AtomicU64,
}

impl SnapshotBackend {
    /// A backend over `snapshot`.
    pub fn new(snapshot: Snapshot) -> SnapshotBackend {
        let statuses = snapshot.orders.iter().map(|o| (o.order_id.clone(), o.status.clone())).collect();
        SnapshotBackend {
            snapshot,
            statuses: Mutex::new(statuses),
            applied: Mutex::default(),
            executions: AtomicU64::new(0),
            cancellations: AtomicU64::new(0),
        }
    }

    /// Moves an order to `status`, as the world does between a question and its answer.
    pub fn set_status(&self, order_id: &str, status: &str) {
        lock(&self.statuses).insert(order_id.to_owned(), status.to_owned());
    }

    fn status(&self, order_id: &str) -> Option<String> {
        lock(&self.statuses).get(order_id).cloned()
    }
}

impl OrderBackend for SnapshotBackend {
    fn read<'a>(&'a self, order_id: &'a str) -> BoxFuture<'a, Result<Value, BackendError>> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        let found = self.status(order_id).map(|status| {
            json!({
                "order_id": order_id,
                "status": status,
                "as_of": self.snapshot.observed_at,
                "source_version": self.snapshot.source_version,
            })
        });
        Box::pin(async move { found.ok_or(BackendError::Status(404)) })
    }

    fn cancel<'a>(
        &'a self,
        order_id: &'a str,
        key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, BackendError>> {
        let outcome = (|| {
            if let Some(first) = key.and_then(|k| lock(&self.applied).get(k).cloned()) {
                return Ok(first);
            }
            let mut statuses = lock(&self.statuses);
            match statuses.get(order_id).map(String::as_str) {
                None => return Err(BackendError::Status(404)),
                Some("processing") => {}
                Some(_) => return Err(BackendError::Status(409)),
            }
            statuses.insert(order_id.to_owned(), "cancelled".to_owned());
            let n = self.cancellations.fetch_add(1, Ordering::SeqCst) + 1;
            let receipt = json!({
                "order_id": order_id,
                "status": "cancelled",
                "cancellation_id": format!("CX-{n:04}"),
                "source_version": self.snapshot.source_version,
            });
            if let Some(k) = key {
                lock(&self.applied).insert(k.to_owned(), receipt.clone());
            }
            Ok(receipt)
        })();
        Box::pin(async move { outcome })
    }

    fn executions(&self) -> u64 {
        self.executions.load(Ordering::SeqCst)
    }

    fn cancellations(&self) -> u64 {
        self.cancellations.load(Ordering::SeqCst)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
