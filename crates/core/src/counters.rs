//! Counters for every fallback core takes, exportable as Prometheus text.
//!
//! The backend application owns its metrics endpoint; [`CoreCounters::render`]
//! gives it the exposition (`tether_core_<name>_total`) to serve.

use std::collections::BTreeMap;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

macro_rules! counters {
    ($( $(#[doc = $doc:literal])* $name:ident ),* $(,)?) => {
        /// Every counter core keeps; one field per fallback or refusal.
        #[derive(Debug, Default)]
        pub struct CoreCounters {
            $( $(#[doc = $doc])* pub $name: Counter, )*
        }

        impl CoreCounters {
            /// All counters by name, for reports and tests.
            pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
                let mut out = BTreeMap::new();
                $( out.insert(stringify!($name), self.$name.get()); )*
                out
            }

            /// Prometheus / OpenMetrics text for the backend's own `/metrics`.
            pub fn render(&self) -> String {
                let mut registry = Registry::with_prefix("tether_core");
                $( registry.register(stringify!($name), concat!($($doc),*).trim(), self.$name.clone()); )*
                let mut out = String::new();
                // Writing into a String cannot fail.
                let _ = encode(&mut out, &registry);
                out
            }

            /// Every counter name with its help text, for docs and their test.
            pub fn describe() -> Vec<(&'static str, &'static str)> {
                vec![ $( (stringify!($name), concat!($($doc),*).trim()), )* ]
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
    /// Responses whose id named a request by value in another spelling (`"7"` for 7): delivered, logged.
    response_ids_coerced,
    /// Requests refused as `overloaded` because the link's outbound queue was full.
    requests_refused,
    /// Progress notifications dropped: no call waiting for their token, malformed, or the caller's receiver full.
    progress_dropped,
    /// Requests dropped by their caller before an outcome (a cancelled call); the edge was told to cancel.
    requests_cancelled,
    /// Edge notifications dropped because the application did not read them.
    notifications_dropped,
    /// Frames from the edge that were not valid JSON-RPC.
    bad_frames,
    /// Caller profiles that failed to resolve (that caller gets no client tools).
    profile_errors,
    /// Calls refused at dispatch because the caller's profile hides the tool.
    scope_refusals,
    /// Context blocks withheld because the client's concept or context was malformed.
    context_malformed,
    /// Degradation steps taken to fit a context block under its byte cap.
    context_degraded,
    /// Calls refused at dispatch because no reachable source offers the name.
    unknown_tools,
    /// Calls refused at dispatch because the arguments do not match the tool's input schema.
    arguments_rejected,
    /// Results withheld because they do not match the tool's declared output schema.
    results_rejected,
    /// Tools left unlisted because their schema breaks the limits or does not compile.
    schemas_refused,
    /// Calls to a credential-verifying source refused because the turn carries no user credential.
    credential_missing,
}

impl CoreCounters {
    /// Adds one to a counter.
    pub fn bump(counter: &Counter) {
        counter.inc();
    }

    /// Reads one counter by name; None when no counter has that name.
    pub fn try_get(&self, name: &str) -> Option<u64> {
        self.snapshot().get(name).copied()
    }

    /// Reads one counter by name, for tests and reports that name counters in code.
    ///
    /// # Panics
    ///
    /// When no counter has that name: a misspelt name must fail its test, not
    /// read as a counter that stayed at 0.
    pub fn get(&self, name: &str) -> u64 {
        match self.try_get(name) {
            Some(n) => n,
            None => panic!("no counter named {name:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "no counter named")]
    fn a_misspelt_counter_name_fails_instead_of_reading_0() {
        CoreCounters::default().get("late_respones");
    }
}
