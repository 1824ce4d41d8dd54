//! A counter for every fallback the bridge takes, readable by name.
//!
//! The bridge survives crashes, dropped sockets and failed calls; each such
//! path moves one of these (through `fallback!`, which logs as it counts) so
//! an operator (and a test) can see it happened. `tether bridge --metrics`
//! serves them as `tether_bridge_<name>_total`.

tether_counters::counters! {
    /// The bridge's counters; read them with [`BridgeCounters::try_get`].
    pub struct BridgeCounters;
    events {
        /// MCP servers started (the first and every restart).
        server_starts,
        /// Lines the server wrote to stderr (each logged).
        server_stderr_lines,
        /// Successful WebSocket upgrades at the edge.
        edge_connects,
        /// `tools/call` requests received.
        calls,
        /// Calls the edge cancelled (cancelled on the server, not answered).
        calls_cancelled_by_edge,
        /// Server `list_changed` notifications forwarded to the edge.
        list_changed_forwarded,
        /// Calls the server answered with a task (2026-07-28 tasks extension), sent on to the edge.
        tasks_started,
        /// `tasks/cancel` from the edge sent on to the server.
        task_cancels_forwarded,
    }
    fallbacks {
        /// `tasks/get` or `tasks/cancel` the server refused or did not answer in time (the edge gets the error).
        task_requests_failed,
        /// Starts that failed: spawn error, handshake error or timeout.
        server_start_failures,
        /// Times the MCP server process ended while the bridge wanted it running.
        server_exits,
        /// stderr lines cut at the line cap.
        server_stderr_lines_truncated,
        /// Failed attempts to reach the edge.
        edge_connect_failures,
        /// Device connections that ended because the edge side went away.
        edge_disconnects,
        /// Frames from the edge that were not JSON-RPC (each answered with an error).
        edge_bad_frames,
        /// Requests from the edge for a method the bridge does not serve.
        edge_unknown_methods,
        /// Binary frames from the edge (ignored).
        edge_binary_frames,
        /// Calls whose server answered with a JSON-RPC error (sent as an `isError` result).
        calls_server_error,
        /// Calls the bridge gave up on at the edge's deadline (cancelled on the server).
        calls_timed_out,
        /// Calls the server cancelled or abandoned (sent as an `isError` result).
        calls_abandoned_by_server,
        /// Calls that failed because the server went away mid-call.
        calls_server_gone,
        /// Calls whose server answered with something that is not a tool result.
        calls_unsupported_result,
        /// Calls in flight when the edge connection dropped (cancelled on the server).
        calls_orphaned,
        /// Calls whose edge deadline passed with no cancel from the edge (DeadlinePolicy::Edge's backstop).
        calls_backstopped,
        /// `isError` results without a `{code, retryable}` that the bridge filled in.
        error_codes_filled,
        /// Results too large for one frame, replaced by an `isError` result.
        results_too_large,
        /// `notifications/cancelled` from the edge for no call in flight.
        edge_cancels_unmatched,
        /// Catalog reads from the server that failed or timed out.
        list_failures,
        /// Tools the server declared that could not be read as a declaration.
        tools_unreadable,
        /// Tools too large for any `tools/list` page (dropped by the bridge).
        tools_oversized,
        /// Tools the edge reported it dropped from the manifest.
        tools_dropped_by_edge,
        /// `tools/list` cursors that named an older catalog read.
        stale_cursors,
        /// `initialize` answers whose instructions were cut to fit one frame.
        instructions_truncated,
        /// `subscriptions/listen` requests that failed (2026-07-28 servers).
        subscription_failures,
        /// `subscriptions/listen` streams that ended while the server lived.
        subscriptions_ended,
    }
}
