//! The gateway's counters, exported beside the edge's at `/metrics` (or on
//! `tether gateway`'s own port). Every fallback here has one and a log line.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Counters of the MCP endpoint; exported as `tether_mcp_<name>_total`.
#[derive(Debug, Default)]
pub struct GatewayMetrics {
    /// Requests refused with 401: no bearer token, or one the edge refused.
    pub unauthenticated: Counter,
    /// Requests refused with 403: an operator credential (it reads sessions; it calls no tools).
    pub forbidden: Counter,
    /// Requests answered 503 because the link to the edge failed (a fallback: the client may retry).
    pub edge_unavailable: Counter,
    /// `tools/call` outcomes by `ok` or error kind (`isError` results carry the kind).
    pub calls: Family<Vec<(String, String)>, Counter>,
    /// Calls the MCP client cancelled (`notifications/cancelled`); the device was told to cancel.
    pub calls_cancelled: Counter,
    /// `notifications/tools/list_changed` sent to MCP clients.
    pub list_changed_sent: Counter,
    /// Edge events a watcher missed because it fell behind; it told its client to re-list (the fallback).
    pub events_lagged: Counter,
    /// Devices whose catalog read failed while listing; their tools were left out (the turn-start fallback).
    pub devices_degraded: Counter,
}

impl GatewayMetrics {
    /// Bumps a plain counter (one relaxed add).
    pub fn bump(counter: &Counter) {
        counter.inc();
    }

    /// The exposition text (OpenMetrics), without the trailing `# EOF`.
    pub fn render(&self) -> String {
        let mut registry = Registry::with_prefix("tether_mcp");
        registry.register(
            "unauthenticated",
            "Requests refused with 401: no bearer token, or one the edge refused",
            self.unauthenticated.clone(),
        );
        registry.register(
            "forbidden",
            "Requests refused with 403: an operator credential calls no tools",
            self.forbidden.clone(),
        );
        registry.register(
            "edge_unavailable",
            "Requests answered 503 because the link to the edge failed",
            self.edge_unavailable.clone(),
        );
        registry.register("calls", "tools/call outcomes by ok or error kind", self.calls.clone());
        registry.register(
            "calls_cancelled",
            "Calls the MCP client cancelled; the device was told to cancel",
            self.calls_cancelled.clone(),
        );
        registry.register(
            "list_changed_sent",
            "notifications/tools/list_changed sent to MCP clients",
            self.list_changed_sent.clone(),
        );
        registry.register(
            "events_lagged",
            "Edge events a watcher missed; its client was told to re-list",
            self.events_lagged.clone(),
        );
        registry.register(
            "devices_degraded",
            "Devices whose catalog read failed while listing; their tools were left out",
            self.devices_degraded.clone(),
        );
        let mut text = String::new();
        if encode(&mut text, &registry).is_err() {
            return String::new();
        }
        text.trim_end().trim_end_matches("# EOF").to_owned()
    }

    /// One counter's value by name, for tests and reports.
    pub fn get(&self, name: &str) -> Option<u64> {
        Some(match name {
            "unauthenticated" => self.unauthenticated.get(),
            "forbidden" => self.forbidden.get(),
            "edge_unavailable" => self.edge_unavailable.get(),
            "calls_cancelled" => self.calls_cancelled.get(),
            "list_changed_sent" => self.list_changed_sent.get(),
            "events_lagged" => self.events_lagged.get(),
            "devices_degraded" => self.devices_degraded.get(),
            _ => return None,
        })
    }
}
