//! What many sessions declare alike, held once.
//!
//! The devices of one app declare the same catalog and the same schemas:
//! 10,000 sessions of it hold one compiled schema and one intake (kept tools,
//! name table, argument gate), not 10,000 copies — a JSON object alone is a
//! 600-byte B-tree node, so a copy per session is most of a session's cost.
//! Entries are weak: a value is freed with the last manifest that uses it,
//! and its key at the next sweep (run when the table has doubled since the
//! last one), so a device that churns through catalogs cannot grow the table.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::convert::Infallible;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use sha2::{Digest, Sha256};

use tether_contract::backend::{DropReason, DroppedTool};
use tether_contract::mcp::ToolDeclaration;
use tether_contract::Caps;

use crate::caps::Intake;
use crate::gate::SchemaCache;

/// Entries below which a table never sweeps.
const SWEEP_FLOOR: usize = 64;

/// Values by key, held weakly: shared while some holder keeps them alive.
#[derive(Debug)]
pub struct WeakTable<K, V> {
    entries: Mutex<Entries<K, V>>,
}

#[derive(Debug)]
struct Entries<K, V> {
    by_key: HashMap<K, Weak<V>>,
    /// Entries after the last sweep: the next sweep runs at twice as many.
    swept_at: usize,
}

impl<K, V> Default for WeakTable<K, V> {
    fn default() -> Self {
        WeakTable { entries: Mutex::new(Entries { by_key: HashMap::new(), swept_at: 0 }) }
    }
}

impl<K: Hash + Eq, V> WeakTable<K, V> {
    /// The live value under `key`, if some holder still keeps it.
    pub fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lock().by_key.get(key).and_then(Weak::upgrade)
    }

    /// The live value under `key`, or `make()`'s, shared under it from now
    /// on; true when it was already there. Made outside the lock: sessions
    /// racing make it more than once, and all keep the first one in.
    pub fn get_or_make<E>(&self, key: K, make: impl FnOnce() -> Result<V, E>) -> Result<(Arc<V>, bool), E> {
        if let Some(live) = self.get(&key) {
            return Ok((live, true));
        }
        let made = Arc::new(make()?);
        let value = self.get_or_insert(key, Arc::clone(&made));
        let shared = !Arc::ptr_eq(&value, &made);
        Ok((value, shared))
    }

    /// The live value under `key`, or `value` shared under it.
    fn get_or_insert(&self, key: K, value: Arc<V>) -> Arc<V> {
        let mut entries = self.lock();
        if let Some(live) = entries.by_key.get(&key).and_then(Weak::upgrade) {
            return live;
        }
        entries.by_key.insert(key, Arc::downgrade(&value));
        if entries.by_key.len() >= (entries.swept_at * 2).max(SWEEP_FLOOR) {
            entries.by_key.retain(|_, weak| weak.strong_count() > 0);
            entries.swept_at = entries.by_key.len();
        }
        value
    }

    /// Distinct values some holder still keeps.
    pub fn len(&self) -> usize {
        self.lock().by_key.values().filter(|w| w.strong_count() > 0).count()
    }

    /// Whether no value is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Entries<K, V>> {
        tether_rpc::lock(&self.entries)
    }
}

/// Intakes shared by every session that declared the same catalog under the
/// same caps: the intake is pure, so the same input always makes the same one.
#[derive(Debug, Default)]
pub struct CatalogCache {
    /// Keyed by a SHA-256 of the caps, the paged-out flag and the declared
    /// catalog's text: 32 bytes per catalog instead of its text, and
    /// collision-resistant, so a device cannot craft a catalog that lands on
    /// another app's intake.
    table: WeakTable<[u8; 32], Intake>,
}

/// An intake and whether another manifest already held it.
#[derive(Debug)]
pub struct SharedIntake {
    /// The intake made from the catalog under the caps.
    pub intake: Arc<Intake>,
    /// True when it was already made (for another session or an earlier read).
    pub shared: bool,
}

impl CatalogCache {
    /// The intake of `declared` (whose JSON text is `text`) under `caps`:
    /// the one already in use, or made now with schemas from `schemas`. A
    /// catalog `paged_out` (the device had more pages than the caps follow)
    /// says so among its drops.
    pub fn intake(
        &self,
        declared: Vec<ToolDeclaration>,
        text: &str,
        paged_out: bool,
        caps: &Caps,
        schemas: &SchemaCache,
    ) -> SharedIntake {
        let make = || {
            let mut intake = crate::caps::intake(declared, caps, schemas);
            if paged_out {
                intake.dropped.push(DroppedTool {
                    name: "*".into(),
                    bytes: 0,
                    reason: DropReason::TooManyPages,
                    detail: None,
                });
            }
            Ok::<_, Infallible>(intake)
        };
        let Ok((intake, shared)) = self.table.get_or_make(key(caps, paged_out, text), make);
        SharedIntake { intake, shared }
    }

    /// Distinct catalogs some manifest still holds.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no catalog is alive.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

/// The cache key of a catalog: a SHA-256 of everything its intake reads.
fn key(caps: &Caps, paged_out: bool, text: &str) -> [u8; 32] {
    /// Feeds `Hash` (the caps' derive) into SHA-256.
    struct Feed(Sha256);
    impl Hasher for Feed {
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
        fn finish(&self) -> u64 {
            0
        }
    }
    let mut feed = Feed(Sha256::new());
    (caps, paged_out, text).hash(&mut feed);
    feed.0.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn intake(cache: &CatalogCache, tools: &[ToolDeclaration], text: &str, caps: &Caps) -> SharedIntake {
        cache.intake(tools.to_vec(), text, false, caps, &SchemaCache::default())
    }

    fn catalog(names: &[&str]) -> (Vec<ToolDeclaration>, String) {
        let tools: Vec<ToolDeclaration> = names
            .iter()
            .map(|n| ToolDeclaration {
                name: (*n).into(),
                title: None,
                description: Some(format!("does {n}")),
                input_schema: json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
                output_schema: None,
                annotations: None,
                execution: None,
            })
            .collect();
        let text = serde_json::to_string(&tools).unwrap_or_default();
        (tools, text)
    }

    #[test]
    fn the_same_catalog_under_the_same_caps_is_one_intake_freed_with_its_last_holder() {
        let (cache, caps) = (CatalogCache::default(), Caps::default());
        let (tools, text) = catalog(&["a", "b"]);
        let first = intake(&cache, &tools, &text, &caps);
        let second = intake(&cache, &tools, &text, &caps);
        assert!(!first.shared && second.shared);
        assert!(Arc::ptr_eq(&first.intake, &second.intake), "one intake for both sessions");
        assert_eq!(cache.len(), 1);

        let (other, other_text) = catalog(&["a", "c"]);
        let third = intake(&cache, &other, &other_text, &caps);
        assert!(!third.shared, "another catalog is another intake");
        let tight = Caps { max_tools: 1, ..caps };
        let fourth = intake(&cache, &tools, &text, &tight);
        assert!(!fourth.shared, "other caps make another intake");
        assert_eq!(fourth.intake.tools.len(), 1);
        let paged = cache.intake(tools.clone(), &text, true, &caps, &SchemaCache::default());
        assert!(!paged.shared, "a catalog cut short by paging is not the complete one");
        assert!(paged.intake.dropped.iter().any(|d| d.reason == DropReason::TooManyPages));
        assert!(first.intake.dropped.is_empty());
        assert_eq!(cache.len(), 4);

        drop((first, second, third, fourth, paged));
        assert!(cache.is_empty(), "nothing holds them any more");
        assert!(!intake(&cache, &tools, &text, &caps).shared, "made again once freed");
    }

    #[test]
    fn a_table_of_dead_entries_is_swept_as_it_grows() {
        let table: WeakTable<usize, usize> = WeakTable::default();
        for key in 0..1000 {
            table.get_or_insert(key, Arc::new(key));
        }
        let size = tether_rpc::lock(&table.entries).by_key.len();
        assert!(size < SWEEP_FLOOR, "dead entries were swept (left {size})");
        let kept = table.get_or_insert(1, Arc::new(7));
        assert_eq!(table.get(&1).as_deref(), Some(&7));
        let racer = table.get_or_insert(1, Arc::new(8));
        assert!(Arc::ptr_eq(&kept, &racer), "a racer gets the live value, not its own");
        assert_eq!(table.len(), 1);
    }
}
