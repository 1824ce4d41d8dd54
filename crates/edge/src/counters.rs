//! Counters for every fallback and drop the edge takes.
//!
//! Plain atomics so the hot path pays one relaxed add; issue #5 exports them
//! as Prometheus metrics. Tests read [`EdgeCounters::get`] to prove a fallback
//! actually ran.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Every counter the edge keeps; one field per fallback or drop.
        #[derive(Debug, Default)]
        pub struct EdgeCounters {
            $( $(#[$doc])* pub $name: AtomicU64, )*
        }

        impl EdgeCounters {
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
    /// Device sessions that completed the handshake.
    sessions_opened,
    /// Device sessions latched closed.
    sessions_latched,
    /// Device connections that failed the handshake (initialize or first read).
    sessions_failed_init,
    /// Upgrades refused for a bad or missing credential.
    auth_refused,
    /// Upgrades refused for a wrong path or subprotocol.
    upgrade_refused,
    /// Upgrades that did not finish within the handshake deadline.
    handshake_timeouts,
    /// Backend `tools/call` requests received.
    calls_started,
    /// Calls that ended with a device result.
    calls_ok,
    /// Calls that ended with a structured error.
    calls_failed,
    /// Calls whose tool_call leg expired.
    call_timeouts,
    /// `notifications/cancelled` sent to devices.
    cancels_sent,
    /// Calls refused or failed because the session was closed.
    calls_channel_closed,
    /// Answers that arrived after their call timed out.
    late_answers,
    /// Responses for ids the edge never sent (or already forgot).
    unknown_responses,
    /// Results refused for exceeding the result cap.
    results_too_large,
    /// Manifest candidates applied.
    swaps_accepted,
    /// Manifest candidates refused as not newer than the applied one.
    swaps_rejected,
    /// Catalog re-reads triggered by a call result's newer seq.
    rereads_after_call,
    /// Catalog re-reads that failed or timed out (the old manifest stays).
    reread_failures,
    /// `list_changed` notifications ignored because their seq was not newer.
    list_changed_stale,
    /// Tools dropped by the caps.
    tools_dropped,
    /// Descriptions cut to the description cap.
    descriptions_truncated,
    /// Frames from a peer that were not valid JSON-RPC.
    bad_frames,
    /// Binary frames refused (close 1003).
    binary_frames,
    /// Frames over the transport ceiling (close 1009).
    oversized_frames,
    /// Outbound frames refused because a peer's queue was full.
    outbound_full,
    /// Backend events lost because a backend read too slowly.
    backend_events_lagged,
}

impl EdgeCounters {
    /// Adds one to a counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads one counter by name; 0 for an unknown name.
    pub fn get(&self, name: &str) -> u64 {
        self.snapshot().get(name).copied().unwrap_or(0)
    }
}
