//! `tether sim-server`: a simulated MCP server on stdio, to bridge
//! (`tether bridge -- tether sim-server`) without writing a server.

use std::time::Duration;

use tether_harness::stdio_server::SimServer;

/// Flags of `tether sim-server`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// How long `collect_signature` takes, in ms (as a task, or inline for a
    /// client without the tasks extension).
    #[arg(long, default_value_t = 2_500)]
    signing_ms: u64,
}

/// Serves MCP on stdin/stdout until stdin closes (logs go to stderr).
pub(crate) async fn run(args: Args) -> Result<(), String> {
    SimServer::new(Duration::from_millis(args.signing_ms)).serve_stdio().await.map_err(|e| e.to_string())
}
