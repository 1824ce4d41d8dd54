//! `tether soak`: a simulated fleet with faults and a load driver; the
//! invariants (nothing lost, duplicated or misrouted) checked at the end.

use std::path::PathBuf;
use std::time::Duration;

use tether_contract::{AUD_BACKEND, AUD_CLIENT};
use tether_edge::auth::Keys;
use tether_edge::Edge;
use tether_harness::soak::{self, Load, SoakConfig};

use crate::common::{keys, parse_ttl};

/// Flags of `tether soak`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Simulated devices.
    #[arg(long, default_value_t = 200)]
    devices: usize,
    /// How long to drive load, e.g. 60s, 10m.
    #[arg(long, default_value = "60s", value_parser = parse_ttl)]
    duration: Duration,
    /// Calls per second (instead of --concurrency).
    #[arg(long, conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Callers calling back to back.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Fault mix, e.g. answer=80,error=5,silent=1,late=2,twice=2,disconnect=1,navigate=4,malformed=2,oversize=1,flood=2.
    #[arg(long, default_value = soak::DEFAULT_FAULTS)]
    faults: String,
    /// Seed for every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A running edge; without it an edge is embedded in this process.
    #[arg(long)]
    edge: Option<String>,
    /// Edges of the same cluster the devices connect to, round-robin (repeat
    /// the flag); by default they connect to --edge, where the backend is.
    #[arg(long = "device-edge", requires = "edge")]
    device_edges: Vec<String>,
    /// Write the report as JSON here (and a plot next to it, .svg).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Data directory holding the secret (with --edge).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// How long every device may take to get a session before the soak fails, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = parse_ttl)]
    fleet_timeout: Duration,
    /// Ride a rolling restart of the --device-edge edges while it runs: every
    /// call keyed and sent again under its key when an edge refuses or drops
    /// it, devices resuming on the next edge (needs --edge).
    #[arg(long, requires = "edge")]
    rolling: bool,
}

/// Runs the soak; broken invariants fail the command.
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let (url, keys, embedded) = match args.edge {
        Some(url) => (url, keys(args.data_dir)?, None),
        None => {
            let secret = format!("soak-{}-{}", args.seed, "k".repeat(32));
            let config = tether_edge::EdgeConfig {
                listen: "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
                jwt_secret: Some(secret.clone()),
                ..tether_edge::EdgeConfig::default()
            };
            let edge = Edge::bind(config).await.map_err(|e| e.to_string())?;
            let url = format!("ws://{}", edge.local_addr().map_err(|e| e.to_string())?);
            let shutdown = edge.shutdown_token();
            let task = tokio::spawn(edge.run());
            (url, Keys::from_secret(secret.as_bytes()).map_err(|e| e.to_string())?, Some((shutdown, task)))
        }
    };
    let day = Duration::from_secs(86_400);
    let cfg = SoakConfig {
        edge: url,
        device_edges: args.device_edges,
        // One principal per device, as a real fleet has: the edge's per-principal limit never bites.
        client_tokens: (0..args.devices)
            .map(|i| keys.issue(&format!("soak-device-{i}"), AUD_CLIENT, day))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
        backend_token: keys.issue("soak-driver", AUD_BACKEND, day).map_err(|e| e.to_string())?,
        devices: args.devices,
        duration: args.duration,
        stop: None,
        load: match args.rate {
            Some(r) => Load::Rate(r),
            None => Load::Concurrency(args.concurrency),
        },
        faults: args.faults,
        seed: args.seed,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        call_budget: soak::DEFAULT_CALL_BUDGET,
        fleet_deadline: args.fleet_timeout,
        rolling: args.rolling,
    };
    let report = soak::run(cfg).await.map_err(|e| e.to_string())?;
    if let Some((shutdown, task)) = embedded {
        shutdown.cancel();
        let _ = task.await;
    }
    eprint!("{}", report.table());
    if let Some(path) = args.json {
        let text = serde_json::to_string_pretty(&soak::to_json(&report)).unwrap_or_default();
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        let svg = path.with_extension("svg");
        soak::plot(&report, &svg).map_err(|e| e.to_string())?;
        eprintln!("report: {}  plot: {}", path.display(), svg.display());
    }
    let violations = report.violations();
    if violations.is_empty() {
        eprintln!("soak: all invariants held");
        Ok(())
    } else {
        Err(format!("soak invariants broken: {}", violations.join("; ")))
    }
}
