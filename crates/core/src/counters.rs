//! Counters for every fallback core takes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Every counter core keeps; one field per fallback or refusal.
        #[derive(Debug, Default)]
        pub struct CoreCounters {
            $( $(#[$doc])* pub $name: AtomicU64, )*
        }

        impl CoreCounters {
            /// All counters by name, for reports and tests.
            pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
                let mut out = BTreeMap::new();
                $( out.insert(stringify!($name), self.$name.load(Ordering::Relaxed)); )*
                out
            }
        }
    };
}

counters! {
    /// Tool names refused by namespace re-validation.
    names_rejected,
    /// Turn-start catalog reads retried once.
    turn_start_retries,
    /// Turns that proceeded without client tools.
    turn_start_fallbacks,
    /// Calls that ran out of the per-tool budget.
    per_tool_timeouts,
    /// Responses from the edge that arrived after their request gave up.
    late_responses,
    /// Edge notifications dropped because the application did not read them.
    notifications_dropped,
    /// Frames from the edge that were not valid JSON-RPC.
    bad_frames,
    /// Caller profiles that failed to resolve (that caller gets no client tools).
    profile_errors,
    /// Calls refused at dispatch because the caller's profile hides the tool.
    scope_refusals,
}

impl CoreCounters {
    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads one counter by name; 0 for an unknown name.
    pub fn get(&self, name: &str) -> u64 {
        self.snapshot().get(name).copied().unwrap_or(0)
    }
}
