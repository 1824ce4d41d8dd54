//! `tether bench`: tether against a bare tokio-tungstenite relay in the same
//! run, and `tether relay`, that relay in its own process.

use std::path::PathBuf;

use tether_harness::relay::Buffers;

use crate::common::announce;

/// Flags of `tether bench`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Seconds per throughput measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Sessions for the idle-memory measurement.
    #[arg(long, default_value_t = 10_000)]
    idle_sessions: usize,
    /// Only the 100-session rows, 2,000 idle sessions, 2 s each (a smoke run).
    #[arg(long)]
    quick: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Flags of `tether relay`.
#[derive(clap::Args)]
pub(crate) struct RelayArgs {
    /// Loopback address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Keep tungstenite's default 128 KiB buffers.
    #[arg(long)]
    default_buffers: bool,
}

/// Runs the bench and prints its table.
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let cfg = tether_harness::bench::BenchConfig {
        exe,
        seconds: if args.quick { 2 } else { args.seconds },
        idle_sessions: if args.quick { 2_000 } else { args.idle_sessions },
        quick: args.quick,
    };
    let report = tether_harness::bench::run(cfg).await.map_err(|e| e.to_string())?;
    println!("{}", report.table());
    if let Some(path) = args.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Serves the bare relay on loopback until killed.
pub(crate) async fn relay(args: RelayArgs) -> Result<(), String> {
    if !args.listen.ip().is_loopback() {
        return Err("the bare relay has no auth; it only listens on loopback".into());
    }
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let buffers = if args.default_buffers { Buffers::Default } else { Buffers::Small };
    let addr =
        tether_harness::relay::bind_and_serve(args.listen, buffers).await.map_err(|e| e.to_string())?;
    announce(&format!("listening on ws://{addr}"));
    std::future::pending::<()>().await;
    Ok(())
}
