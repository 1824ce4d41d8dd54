//! `tether bench`: tether against a bare tokio-tungstenite relay in the same
//! run, and `tether relay`, that relay in its own process.

use std::path::PathBuf;

use tether_harness::bench::{driver, fleet};
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
    /// Only the independent driver's rows (devices, driver and server in three processes).
    #[arg(long)]
    independent: bool,
    /// Only idle memory per session and fail-fast latency.
    #[arg(long, conflicts_with = "independent")]
    idle: bool,
    /// With --independent: only the MCP door beside the native link (100 and
    /// 1,000 sessions, 1 and 64 in flight), and the summary ratios.
    #[arg(long, requires = "independent")]
    mcp: bool,
    /// The cluster bench instead: idle sessions over edges joined by one NATS
    /// server (needs nats-server), then calls local and across edges.
    #[arg(long)]
    cluster: bool,
    /// Sessions for --cluster.
    #[arg(long, default_value_t = 100_000)]
    cluster_sessions: usize,
    /// Edges for --cluster (one device process per edge).
    #[arg(long, default_value_t = 6)]
    edges: usize,
    /// Measure another build's `tether serve` (e.g. the previous commit's) with this build's drivers.
    #[arg(long)]
    server_exe: Option<PathBuf>,
}

/// Flags of the hidden `tether bench-fleet` (the independent bench's devices).
#[derive(clap::Args)]
pub(crate) struct FleetArgs {
    /// The server under test.
    #[arg(long)]
    url: String,
    /// Devices, one principal each.
    #[arg(long)]
    devices: usize,
    /// The server is the bare relay.
    #[arg(long)]
    relay: bool,
    /// Move the seq on every call.
    #[arg(long)]
    move_seq: bool,
    /// Stamp a catalog digest beside the seq.
    #[arg(long)]
    digest: bool,
    /// Declare the tool task-capable and run calls made as tasks as tasks.
    #[arg(long)]
    tasks: bool,
    /// Loopback source address to dial from (e.g. 127.0.0.2).
    #[arg(long)]
    source: Option<std::net::IpAddr>,
    /// The server's HS256 secret.
    #[arg(long, env = "TETHER_BENCH_SECRET", hide_env_values = true)]
    secret: String,
}

/// Flags of the hidden `tether bench-driver` (the independent bench's load).
#[derive(clap::Args)]
pub(crate) struct DriverArgs {
    /// The server under test.
    #[arg(long)]
    url: String,
    /// The sessions file `bench-fleet` reported (JSON).
    #[arg(long)]
    sessions: PathBuf,
    /// The tool to call.
    #[arg(long)]
    tool: String,
    /// Backend links.
    #[arg(long, default_value_t = 4)]
    links: usize,
    /// Calls in flight across the links.
    #[arg(long)]
    in_flight: usize,
    /// Seconds measured (after 500 ms of warm-up).
    #[arg(long)]
    seconds: u64,
    /// The backend link's token.
    #[arg(long, env = "TETHER_BENCH_BACKEND_TOKEN", hide_env_values = true)]
    token: String,
    /// What each call is: plain, keyed, approved or task.
    #[arg(long, default_value = "plain")]
    shape: driver::Shape,
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
    if args.cluster {
        let cfg = tether_harness::bench::cluster::ClusterBenchConfig {
            exe,
            sessions: args.cluster_sessions,
            edges: args.edges,
            seconds: args.seconds,
        };
        let report = tether_harness::bench::cluster::run(cfg).await.map_err(|e| e.to_string())?;
        println!("{}", report.table());
        if let Some(path) = args.json {
            let text = serde_json::to_string_pretty(&report).unwrap_or_default();
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        return Ok(());
    }
    let cfg = tether_harness::bench::BenchConfig {
        exe,
        seconds: if args.quick { 2 } else { args.seconds },
        idle_sessions: if args.quick { 2_000 } else { args.idle_sessions },
        quick: args.quick,
        independent_only: args.independent,
        idle_only: args.idle,
        mcp_only: args.mcp,
        server: args.server_exe,
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

/// Connects the fleet, prints its sessions as one JSON line, and answers until killed.
pub(crate) async fn fleet(args: FleetArgs) -> Result<(), String> {
    let cfg = fleet::FleetConfig {
        url: args.url,
        devices: args.devices,
        secret: args.secret,
        relay: args.relay,
        move_seq: args.move_seq,
        digest: args.digest,
        tasks: args.tasks,
        source: args.source,
    };
    fleet::run(cfg, |sessions| announce(&serde_json::to_string(&sessions).unwrap_or_default()))
        .await
        .map_err(|e| e.to_string())
}

/// Drives load, printing `measuring`, `done`, then the report as one JSON line.
pub(crate) async fn driver(args: DriverArgs) -> Result<(), String> {
    let text =
        std::fs::read_to_string(&args.sessions).map_err(|e| format!("{}: {e}", args.sessions.display()))?;
    let sessions = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", args.sessions.display()))?;
    let cfg = driver::DriverConfig {
        url: args.url,
        backend_token: args.token,
        sessions,
        tool: args.tool,
        links: args.links,
        in_flight: args.in_flight,
        shape: args.shape,
        warmup: std::time::Duration::from_millis(500),
        window: std::time::Duration::from_secs(args.seconds),
    };
    let report = driver::run(cfg, announce).await.map_err(|e| e.to_string())?;
    announce(&serde_json::to_string(&report).unwrap_or_default());
    Ok(())
}
