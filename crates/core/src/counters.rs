//! Counters for every fallback core takes, exportable as Prometheus text.
//!
//! The backend application owns its metrics endpoint; [`CoreCounters::render`]
//! gives it the exposition (`tether_core_<name>_total`) to serve.

tether_counters::counters! {
    /// Every counter core keeps; one field per fallback or refusal.
    pub struct CoreCounters;
    events {
        /// Requests dropped by their caller before an outcome (a cancelled call); the edge was told to cancel.
        requests_cancelled,
        /// Approvals asked for server-side calls that needed one and came without (nothing ran).
        approvals_asked,
        /// Server-side calls answered with their key's first outcome (the source not called again).
        keyed_replays,
    }
    fallbacks {
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
        /// `find_tools` queries longer than the declared 200 characters, searched for their first 200.
        find_tools_queries_cut,
        /// Server-side calls refused at dispatch: their approval was pending, declined, expired, used, unknown or for another call.
        approvals_refused,
        /// Server-side calls refused at dispatch: their idempotency key was used for another call.
        idempotency_conflicts,
        /// Server-side calls that need an approval refused because the turn has no verified user to bind it to.
        approvals_unbound,
    }
}

impl CoreCounters {
    /// Prometheus / OpenMetrics text for the backend's own `/metrics`.
    pub fn render(&self) -> String {
        self.exposition("tether_core")
    }
}
