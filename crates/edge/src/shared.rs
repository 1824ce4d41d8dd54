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
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tether_contract::Caps;

use crate::caps::Intake;

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

    /// Shares `value` under `key` (replacing a dead or racing entry).
    pub fn insert(&self, key: K, value: &Arc<V>) {
        let mut entries = self.lock();
        entries.by_key.insert(key, Arc::downgrade(value));
        if entries.by_key.len() >= (entries.swept_at * 2).max(SWEEP_FLOOR) {
            entries.by_key.retain(|_, weak| weak.strong_count() > 0);
            entries.swept_at = entries.by_key.len();
        }
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
    /// Keyed by the caps and the declared catalog's text (not a hash of it: a
    /// device must not be able to collide into another app's catalog).
    table: WeakTable<(Caps, String), Intake>,
}

/// An intake and whether another manifest already held it.
#[derive(Debug)]
pub struct SharedIntake {
    /// The caps applied to the catalog.
    pub intake: Arc<Intake>,
    /// True when it was already made (for another session or an earlier read).
    pub shared: bool,
}

impl CatalogCache {
    /// The intake of the catalog whose JSON text is `text` under `caps`: the
    /// one already in use, or `make()` now. `text` must say everything `make`
    /// reads (the caller marks a catalog cut short by paging in it).
    pub fn intake(&self, caps: &Caps, text: String, make: impl FnOnce() -> Intake) -> SharedIntake {
        let key = (*caps, text);
        if let Some(intake) = self.table.get(&key) {
            return SharedIntake { intake, shared: true };
        }
        // Made outside the lock: two sessions racing make it twice, harmlessly.
        let intake = Arc::new(make());
        self.table.insert(key, &intake);
        SharedIntake { intake, shared: false }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::SchemaCache;
    use serde_json::json;
    use tether_contract::mcp::ToolDeclaration;

    fn intake(cache: &CatalogCache, tools: &[ToolDeclaration], text: &str, caps: &Caps) -> SharedIntake {
        cache.intake(caps, text.to_owned(), || {
            crate::caps::intake(tools.to_vec(), caps, &SchemaCache::default())
        })
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
        assert_eq!(cache.len(), 3);

        drop((first, second, third, fourth));
        assert!(cache.is_empty(), "nothing holds them any more");
        assert!(!intake(&cache, &tools, &text, &caps).shared, "made again once freed");
    }

    #[test]
    fn a_table_of_dead_entries_is_swept_as_it_grows() {
        let table: WeakTable<usize, usize> = WeakTable::default();
        for key in 0..1000 {
            table.insert(key, &Arc::new(key));
        }
        let size = tether_rpc::lock(&table.entries).by_key.len();
        assert!(size < SWEEP_FLOOR, "dead entries were swept (left {size})");
        let kept = Arc::new(7);
        table.insert(1, &kept);
        assert_eq!(table.get(&1).as_deref(), Some(&7));
        assert_eq!(table.len(), 1);
    }
}
