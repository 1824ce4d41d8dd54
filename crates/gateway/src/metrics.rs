//! The gateway's counters, exported beside the edge's at `/metrics` (or on
//! `tether gateway`'s own port), with the counters of its tether-core link.
//! Every fallback here has one and a log line.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use tether_core::CoreCounters;

/// Counters of the MCP endpoint; exported as `tether_mcp_<name>_total`.
#[derive(Debug, Default)]
pub struct GatewayMetrics {
    /// Requests refused with 401: no bearer token, or one the edge refused.
    pub unauthenticated: Counter,
    /// Requests refused: an operator credential (403; it reads sessions, it calls no tools), or another user's MCP session id (404).
    pub forbidden: Counter,
    /// Requests answered 503 because the link to the edge failed (the client may retry).
    pub edge_unavailable: Counter,
    /// `tools/call` outcomes by `ok` or error kind (`isError` results carry the kind).
    pub calls: Family<Vec<(String, String)>, Counter>,
    /// Calls the MCP client cancelled (`notifications/cancelled`); the device was told to cancel.
    pub calls_cancelled: Counter,
    /// `notifications/tools/list_changed` sent to MCP clients.
    pub list_changed_sent: Counter,
    /// Edge events a watcher missed because it fell behind; it told its client to re-list (the fallback).
    pub events_lagged: Counter,
    /// The gateway's own link to the edge, as tether-core counts it (turn-start fallbacks and more).
    core: Option<Arc<CoreCounters>>,
}

impl GatewayMetrics {
    /// Counters for a gateway whose core link counts into `core`.
    pub(crate) fn with_core(core: Arc<CoreCounters>) -> GatewayMetrics {
        GatewayMetrics { core: Some(core), ..GatewayMetrics::default() }
    }

    /// Bumps a plain counter (one relaxed add).
    pub fn bump(counter: &Counter) {
        counter.inc();
    }

    fn plain(&self) -> [(&'static str, &'static str, &Counter); 6] {
        [
            (
                "unauthenticated",
                "Requests refused with 401: no bearer token, or one the edge refused",
                &self.unauthenticated,
            ),
            (
                "forbidden",
                "Requests refused with 403: an operator credential calls no tools",
                &self.forbidden,
            ),
            (
                "edge_unavailable",
                "Requests answered 503 because the link to the edge failed",
                &self.edge_unavailable,
            ),
            (
                "calls_cancelled",
                "Calls the MCP client cancelled; the device was told to cancel",
                &self.calls_cancelled,
            ),
            (
                "list_changed_sent",
                "notifications/tools/list_changed sent to MCP clients",
                &self.list_changed_sent,
            ),
            (
                "events_lagged",
                "Edge events a watcher missed; its client was told to re-list",
                &self.events_lagged,
            ),
        ]
    }

    /// Every plain counter with its help text, for docs and their test.
    pub fn describe() -> Vec<(&'static str, &'static str)> {
        GatewayMetrics::default().plain().iter().map(|(name, help, _)| (*name, *help)).collect()
    }

    /// One plain counter's value by name; panics on a name that is not one (a misspelt test cannot pass).
    pub fn get(&self, name: &str) -> u64 {
        match self.plain().iter().find(|(n, _, _)| *n == name) {
            Some((_, _, counter)) => counter.get(),
            None => panic!("no gateway counter {name}"),
        }
    }

    /// The exposition text (OpenMetrics families, without the closing `# EOF`).
    pub fn render(&self) -> String {
        let mut registry = Registry::with_prefix("tether_mcp");
        for (name, help, counter) in self.plain() {
            registry.register(name, help, counter.clone());
        }
        registry.register("calls", "tools/call outcomes by ok or error kind", self.calls.clone());
        let mut text = String::new();
        if encode(&mut text, &registry).is_err() {
            return String::new();
        }
        let mut text = text.trim_end().trim_end_matches("# EOF").to_owned();
        if let Some(core) = &self.core {
            for (name, help) in CoreCounters::describe() {
                let series = format!("tether_core_{name}");
                text.push_str(&format!(
                    "# HELP {series} {help}\n# TYPE {series} counter\n{series}_total {}\n",
                    core.get(name)
                ));
            }
        }
        text
    }
}
