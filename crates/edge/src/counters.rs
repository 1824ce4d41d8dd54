//! Metrics: a counter for every fallback and drop, plus labelled families and
//! latency histograms, exported as Prometheus text at `/metrics`.
//!
//! Built on `prometheus-client` with one registry per [`crate::Hub`], so two
//! edges in one process (as in tests) never share numbers. Counters are plain
//! atomics underneath: the hot path pays one relaxed add.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

tether_counters::counters! {
    /// Every fallback and event the edge counts; exported as `tether_<name>_total`.
    pub struct EdgeCounters;
    events {
        /// Device sessions that completed the handshake.
        sessions_opened,
        /// Device sessions latched closed.
        sessions_latched,
        /// Backend tools/call requests received.
        calls_started,
        /// Calls that ended with a device result.
        calls_ok,
        /// Calls that ended with a structured error.
        calls_failed,
        /// notifications/cancelled sent to devices.
        cancels_sent,
        /// Identity-provider key sets loaded (at start, on the interval, or for an unknown key id).
        jwks_refreshes,
        /// Manifest candidates applied.
        swaps_accepted,
        /// Catalog re-reads triggered by a call result's newer seq.
        rereads_after_call,
        /// Moved seqs (on a result or a `list_changed`) applied without a catalog read: the device's digest vouched the catalog unchanged.
        rereads_skipped,
        /// Input schemas a catalog read found already compiled (for another session, an earlier read, or another tool): one copy held, not compiled again.
        schemas_shared,
        /// Catalog reads whose catalog another manifest already held under the same caps: the session shares that intake (tools, names, compiled schemas), no copy made.
        catalogs_shared,
        /// Device progress notifications relayed to the backend that asked for them.
        progress_relayed,
        /// Backend requests the backend cancelled (`notifications/cancelled`) before their outcome; no response is sent.
        backend_cancels,
        /// Calls the backend cancelled mid-flight (`notifications/cancelled`, or a dropped request); the device was told to cancel.
        calls_cancelled,
        /// Session reads made with an operator credential (each one is logged).
        operator_reads,
        /// Sessions whose transport went away, detached to wait for their device to resume.
        sessions_detached,
        /// Sessions a device resumed with its token (on this edge, from here or another edge).
        sessions_resumed,
        /// Keyed calls delivered again on a resumed session's new socket.
        calls_redelivered,
        /// Approvals asked for calls that needed one and came without (the call ended there, nothing sent).
        approvals_asked,
        /// Approvals decided, by the device's user or the caller's.
        approvals_decided,
        /// Grants taken by the call they were bound to (each exactly once).
        approvals_used,
        /// Keyed calls answered with their key's first outcome, nothing sent to the device.
        keyed_replays,
        /// Calls that became tasks on their device (the call answered at once, the work goes on).
        tasks_created,
        /// Tasks that ended with their tool's result.
        tasks_completed,
        /// Tasks that ended failed: an error, an `isError` result, or no outcome at all.
        tasks_failed,
        /// Tasks their caller cancelled (the device told).
        tasks_cancelled,
        /// Tasks handed to another edge with their session, which their device resumed there.
        tasks_handed_over,
        /// Tasks taken over from another edge with a session whose device resumed here.
        tasks_adopted,
        /// Write ledgers (grants, keys, receipts) handed to another edge with their session.
        ledgers_handed_over,
        /// Write ledgers taken over from another edge with a session whose device resumed here.
        ledgers_adopted,
    }
    fallbacks {
        /// Device connections that failed the handshake (initialize or first read).
        sessions_failed_init,
        /// Resume tokens refused (malformed, unknown, used, another principal's, or the session gone): the device got a new session.
        resumes_refused,
        /// Detached sessions whose device did not come back within the resume grace; closed then.
        resume_grace_expired,
        /// Backend links closed because a write to the backend did not finish within 10 s (it stopped reading).
        backend_writes_stalled,
        /// Device connections dropped without their close frame: the device stopped reading and the frame could not be written within 5 s.
        close_writes_abandoned,
        /// Upgrades refused for a bad or missing credential.
        auth_refused,
        /// Upgrades refused for a wrong path or subprotocol, or while draining.
        upgrade_refused,
        /// Upgrades that did not finish within the handshake deadline.
        handshake_timeouts,
        /// Device upgrades refused because the principal holds too many connections (429).
        principal_limit_refusals,
        /// Connections dropped because their address held too many unauthenticated ones.
        ip_limit_refusals,
        /// Calls whose tool_call leg expired.
        call_timeouts,
        /// Calls refused or failed because the session was closed.
        calls_channel_closed,
        /// Answers that arrived after their call timed out (logged, dropped).
        late_answers,
        /// Responses for ids the edge never sent or already answered (logged, ignored).
        unknown_responses,
        /// Devices that refused `initialize` and were then started as 2026-07-28 (`server/discover`).
        revision_fallbacks,
        /// `subscriptions/listen` streams a 2026-07-28 device ended (its list_changed no longer arrives).
        subscriptions_ended,
        /// Identity-provider key loads that failed; the last good keys stay in use.
        jwks_refresh_failures,
        /// Unknown-key-id refreshes skipped because one ran too recently or is running.
        jwks_refreshes_rate_limited,
        /// Answers whose id named a call by value in another spelling (`"7"` for 7): delivered, logged.
        answer_ids_coerced,
        /// Backend calls refused before reaching the device: arguments did not match the tool's input schema.
        arguments_refused,
        /// Calls refused before reaching the device: their approval was pending, declined, expired, used, unknown or for another call.
        approvals_refused,
        /// Calls refused before reaching the device: their idempotency key was used for another call.
        idempotency_conflicts,
        /// `approvals/decide` requests refused: unknown, expired or used approvals, another user's, or a changed mind.
        approval_decisions_refused,
        /// Approval requests the device did not answer (or answered too late); the caller may still decide them.
        device_approvals_failed,
        /// Tasks that ended without an outcome: the device never came back, moved out of reach, or the ttl ran out.
        tasks_lost,
        /// Task calls refused because the session already ran its most tasks (the device told to cancel).
        tasks_refused,
        /// Device task statuses dropped: malformed, or for no task this edge follows.
        task_statuses_dropped,
        /// Final tasks forgotten before their ttl: the session already kept its most (256).
        task_outcomes_forgotten,
        /// Results refused for exceeding the result cap.
        results_too_large,
        /// Manifest candidates refused as not newer than the applied one.
        swaps_rejected,
        /// Catalog re-reads that failed or timed out (the old manifest stays).
        reread_failures,
        /// list_changed notifications ignored because their seq was not newer.
        list_changed_stale,
        /// list_changed re-reads held back by the per-session rate limit (5 per second).
        list_changed_rate_limited,
        /// Tools dropped by the caps.
        tools_dropped,
        /// Descriptions cut to the description cap.
        descriptions_truncated,
        /// Frames from a peer that were not valid JSON-RPC.
        bad_frames,
        /// Devices closed with 1008 after too many malformed frames.
        strikeouts,
        /// Devices closed because nothing (not even a pong) arrived within the idle deadline.
        idle_closes,
        /// Session ids a device claimed that were not the one the edge minted (ignored).
        session_claims_ignored,
        /// Device sessions closed because their credential expired mid-session.
        credentials_expired,
        /// Binary frames refused (close 1003).
        binary_frames,
        /// Frames over the transport ceiling (close 1009).
        oversized_frames,
        /// Outbound frames refused because a peer's queue was full.
        outbound_full,
        /// Backend events lost because a backend read too slowly.
        backend_events_lagged,
        /// Backend requests refused because the link had too many in flight.
        backend_requests_refused,
        /// Calls refused because the edge is draining.
        calls_refused_draining,
        /// Calls refused before reaching the device: no, bad, or another user's credential.
        calls_forbidden,
        /// Device progress notifications dropped: no call in flight with their token, malformed, or not increasing.
        progress_dropped,
        /// Session reads (`sessions/list`, `turn/begin`, `tools/list`, `sessions/inspect`) refused: no credential, a bad one, or another user's.
        reads_refused,
        /// Configuration errors survived by degrading (a section or profile fell back).
        config_errors,
        /// Devices that matched no valid client profile and got the default caps.
        client_profile_fallbacks,
    }
}

/// A one-label set, e.g. `[("kind", "timeout")]`.
pub type Label = [(&'static str, &'static str); 1];

/// Everything `/metrics` exports for one edge.
pub struct EdgeMetrics {
    /// Flat fallback and drop counters.
    pub counters: EdgeCounters,
    /// Calls by outcome (`ok` or an error kind).
    pub calls: Family<Label, Counter>,
    /// Manifest drops by reason.
    pub drops: Family<Label, Counter>,
    /// Upgrade refusals by reason.
    pub auth_refusals: Family<Label, Counter>,
    /// Bad frames by kind.
    pub frames_refused: Family<Label, Counter>,
    /// Latency per budget leg, in seconds.
    pub leg_seconds: Family<Label, Histogram>,
    /// Device sessions opened, by the MCP revision they speak.
    pub sessions_by_revision: Family<Label, Counter>,
    /// Connected device sessions.
    pub sessions: Gauge,
    /// Backend calls in flight.
    pub calls_in_flight: Gauge,
    /// Resident memory of the edge process, refreshed at each scrape.
    pub resident_bytes: Gauge,
    registry: Registry,
    /// More exposition from what the binary mounts (the MCP endpoint's and the cluster's counters).
    mounted: std::sync::Mutex<Vec<Box<dyn Fn() -> String + Send + Sync>>>,
}

impl std::fmt::Debug for EdgeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeMetrics").field("counters", &self.counters).finish_non_exhaustive()
    }
}

fn leg_histogram() -> Histogram {
    // 0.5 ms … ~16 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Default for EdgeMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tether");
        let counters = EdgeCounters::default();
        counters.register(&mut registry);
        let m = EdgeMetrics {
            counters,
            calls: Family::default(),
            drops: Family::default(),
            auth_refusals: Family::default(),
            frames_refused: Family::default(),
            sessions_by_revision: Family::default(),
            leg_seconds: Family::new_with_constructor(leg_histogram as fn() -> Histogram),
            sessions: Gauge::default(),
            calls_in_flight: Gauge::default(),
            resident_bytes: Gauge::default(),
            registry,
            mounted: std::sync::Mutex::default(),
        };
        let mut registry = m.registry;
        registry.register(
            "calls_by_outcome",
            "Backend calls by outcome: ok or the error kind",
            m.calls.clone(),
        );
        registry.register("manifest_drops", "Tools dropped from manifests, by reason", m.drops.clone());
        registry.register("auth_refusals", "Upgrades refused, by reason", m.auth_refusals.clone());
        registry.register("frames_refused", "Frames refused from peers, by kind", m.frames_refused.clone());
        registry.register("leg_seconds", "Latency of each budget leg, in seconds", m.leg_seconds.clone());
        registry.register(
            "sessions",
            "Device sessions listed: connected, or detached and waiting to resume",
            m.sessions.clone(),
        );
        registry.register(
            "sessions_by_revision",
            "Device sessions opened, by the MCP revision they speak",
            m.sessions_by_revision.clone(),
        );
        registry.register("calls_in_flight", "Backend calls in flight", m.calls_in_flight.clone());
        registry.register(
            "process_resident_bytes",
            "Resident memory of this process, in bytes",
            m.resident_bytes.clone(),
        );
        EdgeMetrics { registry, ..m }
    }
}

impl EdgeMetrics {
    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        if let Some(rss) = resident_bytes() {
            self.resident_bytes.set(i64::try_from(rss).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        let mounted = crate::lock(&self.mounted);
        if !mounted.is_empty() {
            // One exposition: the mounted families go before the one closing `# EOF`.
            let mut body = out.trim_end().trim_end_matches("# EOF").to_owned();
            for render in mounted.iter() {
                body.push_str(render().trim_end().trim_end_matches("# EOF").trim_end());
                body.push('\n');
            }
            out = format!("{body}# EOF\n");
        }
        out
    }

    /// Appends `render`'s families to every scrape.
    pub fn also_render(&self, render: impl Fn() -> String + Send + Sync + 'static) {
        crate::lock(&self.mounted).push(Box::new(render));
    }

    /// Counts one refused frame of `kind`.
    pub fn frame_refused(&self, kind: &'static str) {
        self.frames_refused.get_or_create(&[("kind", kind)]).inc();
    }
}

/// Resident set size of this process (Linux `/proc/self/statm`); None elsewhere.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

impl From<&EdgeCounters> for crate::idp::IdpCounters {
    fn from(c: &EdgeCounters) -> Self {
        crate::idp::IdpCounters {
            refreshes: c.jwks_refreshes.clone(),
            refresh_failures: c.jwks_refresh_failures.clone(),
            refreshes_rate_limited: c.jwks_refreshes_rate_limited.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "no counter named")]
    fn a_misspelt_counter_name_fails_instead_of_reading_0() {
        EdgeCounters::default().get("late_answer");
    }
}
