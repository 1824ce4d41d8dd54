//! The cluster's counters, exported beside the edge's at `/metrics`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

tether_counters::counters! {
    /// Every cluster event and fallback; exported as `tether_cluster_<name>_total`.
    pub struct ClusterCounters;
    events {
        /// Calls sent to the edge holding their session.
        remote_calls,
        /// Reads (turn, inspect, manifest, list of one) and resume claims sent to the edge holding their session.
        remote_reads,
        /// `sessions/list` asked of every edge.
        lists_gathered,
        /// Calls this edge ran for a backend on another edge.
        calls_served,
        /// Reads this edge answered for a backend on another edge.
        reads_served,
        /// Session events sent to the other edges.
        events_sent,
        /// Session events from other edges told to this edge's backends.
        events_received,
        /// Times the connection to NATS came (back) up.
        nats_connects,
    }
    fallbacks {
        /// Requests for a session no edge holds (NATS had no responders, after any wait for a move): `session_not_found`.
        no_responders,
        /// Requests that found no edge answering for a session another edge announced, and asked again for up to the move wait while it may be moving edges.
        moves_awaited,
        /// Edges lost: silent past the edge timeout (a clean shutdown says so and is not counted here).
        edges_lost,
        /// Calls (and reads) failed with `channel_closed` because the edge holding their session was lost, never took them, or did not answer a read in time.
        calls_edge_lost,
        /// Requests for other edges' sessions refused because NATS was unreachable.
        cluster_unreachable,
        /// Malformed or oversized messages on a tether subject, dropped.
        bad_messages,
        /// Replies for a request nobody waits for any more (it ended first), dropped.
        late_replies,
        /// `sessions/list` answered without some edge's part: it did not answer in time.
        lists_partial,
        /// Times the connection to NATS was lost (the edge keeps serving its own sessions and reconnects).
        nats_disconnects,
        /// Messages that could not be published to NATS, requests it refused (too large, client error), or subscriptions that could not be made.
        publish_failures,
        /// Progress from another edge not relayed: the backend did not ask, or its queue was full.
        progress_dropped,
    }
}

/// The cluster's counters, its gauges, and the connection state calls watch.
#[derive(Debug)]
pub(crate) struct ClusterMetrics {
    pub(crate) counters: ClusterCounters,
    /// 1 while connected to NATS.
    pub(crate) connected: Gauge,
    /// Other edges alive, as this edge sees them.
    pub(crate) edges: Gauge,
    /// True while connected to NATS: a call in flight to another edge fails when it turns false.
    pub(crate) connection: tokio::sync::watch::Sender<bool>,
    /// Since when this edge has been connected: until every edge's heartbeat
    /// can have been heard, an empty member list proves nothing.
    pub(crate) up_since: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Default for ClusterMetrics {
    fn default() -> Self {
        ClusterMetrics {
            counters: ClusterCounters::default(),
            connected: Gauge::default(),
            edges: Gauge::default(),
            connection: tokio::sync::watch::channel(false).0,
            up_since: std::sync::Mutex::new(None),
        }
    }
}

impl ClusterMetrics {
    /// The Prometheus text exposition of the cluster's families.
    pub(crate) fn render(&self) -> String {
        let mut registry = Registry::with_prefix("tether_cluster");
        self.counters.register(&mut registry);
        registry.register("connected", "1 while this edge is connected to NATS", self.connected.clone());
        registry.register("edges", "Other edges alive, as this edge sees them", self.edges.clone());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}
