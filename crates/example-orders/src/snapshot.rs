//! The fixture snapshot of the orders service, and a backend that serves it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Serves reads from a snapshot and counts every execution.
#[derive(Debug)]
pub struct SnapshotBackend {
    snapshot: Snapshot,
    executions: AtomicU64,
}

impl SnapshotBackend {
    /// A backend over `snapshot`.
    pub fn new(snapshot: Snapshot) -> SnapshotBackend {
        SnapshotBackend { snapshot, executions: AtomicU64::new(0) }
    }
}

impl OrderBackend for SnapshotBackend {
    fn read<'a>(&'a self, order_id: &'a str) -> BoxFuture<'a, Result<Value, BackendError>> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        let found = self.snapshot.orders.iter().find(|o| o.order_id == order_id).map(|o| {
            json!({
                "order_id": o.order_id,
                "status": o.status,
                "as_of": self.snapshot.observed_at,
                "source_version": self.snapshot.source_version,
            })
        });
        Box::pin(async move { found.ok_or(BackendError::Status(404)) })
    }

    fn executions(&self) -> u64 {
        self.executions.load(Ordering::SeqCst)
    }
}
