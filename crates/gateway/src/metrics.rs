//! The gateway's counters, exported beside the edge's at `/metrics` (or on
//! `tether gateway`'s own port), with the counters of its tether-core link.
//! Every fallback here has one and a log line.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use tether_core::CoreCounters;

tether_counters::counters! {
    /// The MCP endpoint's plain counters; exported as `tether_mcp_<name>_total`.
    pub struct GatewayCounters;
    events {
        /// Calls the MCP client cancelled; the device was told to cancel.
        calls_cancelled,
        /// notifications/tools/list_changed sent to MCP clients.
        list_changed_sent,
        /// Approvals asked of the MCP client's user with a form (`elicitation/create`, or `input_required` on 2026-07-28).
        approvals_elicited,
        /// Calls that became tasks on their device, followed by the gateway for its client.
        tasks_followed,
        /// Calls that became tasks, returned as tasks to clients of the 2026-07-28 tasks extension.
        tasks_returned,
        /// Requests whose caller and sessions came from memory: no `sessions/list` to the edge.
        requests_remembered,
    }
    fallbacks {
        /// Session lists not remembered because the edge could not reach its whole cluster.
        lists_not_remembered,
        /// Requests refused with 401: no bearer token, or one the edge refused.
        unauthenticated,
        /// Requests refused: an operator credential (403; it calls no tools), or another user's MCP session id (404).
        forbidden,
        /// Requests answered 503 because the link to the edge failed (the client may retry).
        edge_unavailable,
        /// Edge events a watcher missed; its client was told to re-list.
        events_lagged,
        /// A watcher could not ask the edge about its user's sessions (its token expired, or the edge was out of reach).
        watcher_lookups_failed,
        /// Requests whose token was another user's than the MCP session's; their token was not kept for its watcher.
        foreign_tokens_ignored,
        /// Approvals that could not be asked of the MCP client's user (no form elicitation declared, or no answer): the model got the `approval_required` sentence instead.
        approvals_not_elicited,
        /// Tasks still running when the client's call had waited `task_wait_ms`: the model got the task id and how to wait again.
        tasks_handed_off,
    }
}

/// Everything the MCP endpoint exports, with the counters of its tether-core link.
#[derive(Debug, Default)]
pub struct GatewayMetrics {
    /// Plain counters: every fallback here moves with its log line.
    pub counters: GatewayCounters,
    /// `tools/call` outcomes by `ok` or error kind (`isError` results carry the kind).
    pub calls: Family<Vec<(String, String)>, Counter>,
    /// The gateway's own link to the edge, as tether-core counts it (turn-start fallbacks and more).
    core: Option<Arc<CoreCounters>>,
}

impl GatewayMetrics {
    /// Counters for a gateway whose core link counts into `core`.
    pub(crate) fn with_core(core: Arc<CoreCounters>) -> GatewayMetrics {
        GatewayMetrics { core: Some(core), ..GatewayMetrics::default() }
    }

    /// Every plain counter with its help text, for docs and their test.
    pub fn describe() -> Vec<(&'static str, &'static str)> {
        GatewayCounters::describe()
    }

    /// One plain counter's value by name; panics on a name that is not one (a misspelt test cannot pass).
    pub fn get(&self, name: &str) -> u64 {
        self.counters.get(name)
    }

    /// The exposition text (OpenMetrics families, without the closing `# EOF`).
    pub fn render(&self) -> String {
        let mut registry = Registry::with_prefix("tether_mcp");
        self.counters.register(&mut registry);
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
