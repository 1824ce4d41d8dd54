//! `tether serve`: the edge worker, with the MCP endpoint on its own port.

use std::path::PathBuf;

use tether_cluster::Cluster;
use tether_config::{Flags, LogFormat, Resolved};
use tether_edge::Edge;
use tether_gateway::{Gateway, GatewayConfig};

use crate::common::{announce, install_signals, install_tracing};

/// Flags of `tether serve`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// TOML configuration file (also TETHER_CONFIG).
    #[arg(long, env = "TETHER_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port [default: 127.0.0.1:7878].
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Where the generated JWT secret lives (default: $TETHER_DATA_DIR or ~/.local/share/tether).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Log format: pretty or json.
    #[arg(long)]
    log_format: Option<LogFormat>,
    /// The URL agents reach the MCP endpoint's server at, behind a proxy
    /// (e.g. https://agents.example.com; also TETHER_PUBLIC_URL or public_url
    /// in the file); by default built from the request's Host.
    #[arg(long)]
    public_url: Option<String>,
    /// Join the cluster on this NATS server (e.g. nats://127.0.0.1:4222; also TETHER_NATS or [cluster] nats).
    #[arg(long)]
    nats: Option<String>,
}

/// Resolves the configuration file (if any) with the environment and `flags`.
pub(crate) fn read_config(path: Option<&PathBuf>, flags: &Flags) -> Result<Resolved, String> {
    let text = match path {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| format!("config {}: {e}", p.display()))?),
        None => None,
    };
    let file = path.zip(text.as_deref()).map(|(p, t)| (p.as_path(), t));
    Ok(tether_config::resolve(file, |k| std::env::var(k).ok(), flags))
}

/// Runs the edge until a signal stops it.
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let Args { config, listen, data_dir, log_format, public_url, nats } = args;
    let flags = Flags { listen, data_dir, log_format, nats, public_url };
    let resolved = read_config(config.as_ref(), &flags)?;
    // Held to the end of `run`: dropping it sends the spans still queued.
    let exporting = install_tracing("info", resolved.log_format, &resolved.telemetry);
    if let Some(endpoint) = resolved.telemetry.traces_url().filter(|_| exporting.is_some()) {
        tracing::info!(%endpoint, "exporting traces over OTLP");
    }
    for issue in resolved.issues.iter().filter(|i| i.fatal) {
        tracing::error!(location = %issue.location, "{}", issue.message);
    }
    if resolved.is_fatal() {
        return Err("configuration cannot start the edge (see the errors above)".into());
    }
    // Every session is a socket: lift the soft fd limit to the hard one.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!(error = %e, "could not raise the open-file limit");
    }
    let degraded: Vec<_> = resolved.issues.clone();
    let issuer = resolved.config.identity.as_ref().and_then(|idp| idp.issuer.clone());
    let budgets = resolved.config.budgets;
    let public_url = resolved.public_url.clone();
    let cluster = match resolved.cluster.clone() {
        Some(c) => Some(Cluster::connect(c, resolved.config.budgets).await.map_err(|e| e.to_string())?),
        None => None,
    };
    let edge = match &cluster {
        Some(cluster) => Edge::bind_routed(resolved.config, cluster.router()).await,
        None => Edge::bind(resolved.config).await,
    }
    .map_err(|e| e.to_string())?;
    let edge = mount_mcp(edge, GatewayConfig { issuer, public_url, budgets, ..GatewayConfig::default() });
    if let Some(cluster) = &cluster {
        cluster.start(&edge.hub(), edge.shutdown_token()).await.map_err(|e| e.to_string())?;
    }
    if let Some(counters) = exporting.as_ref().map(|e| std::sync::Arc::clone(e.counters())) {
        edge.hub().metrics.also_render(move || counters.exposition("tether_trace"));
    }
    for issue in &degraded {
        tether_counters::fallback!(edge.hub().counters().config_errors, warn, location = %issue.location, "configuration degraded: {}", issue.message);
    }
    let addr = edge.local_addr().map_err(|e| e.to_string())?;
    install_signals(edge.drain_token(), edge.shutdown_token())?;
    announce(&format!("listening on ws://{addr}\nMCP endpoint on http://{addr}/mcp"));
    if let (Some(cluster), Some(c)) = (&cluster, &resolved.cluster) {
        announce(&format!("cluster edge {} on {}", cluster.edge(), c.nats));
    }
    edge.run().await;
    if let Some(cluster) = &cluster {
        cluster.leave().await;
    }
    Ok(())
}

/// Mounts the MCP endpoint on the edge's own port, over an in-process backend link.
/// It waits for tasks under the edge's own `[budgets]`.
fn mount_mcp(edge: Edge, config: GatewayConfig) -> Edge {
    let (gateway, end) = Gateway::in_process(config);
    edge.attach_backend("tether-mcp", end.answers, end.requests);
    let routes = gateway.router();
    let (stop_streams, shutdown) = (gateway.shutdown_token(), edge.shutdown_token());
    tokio::spawn(async move {
        shutdown.cancelled().await;
        stop_streams.cancel();
    });
    edge.hub().metrics.also_render(move || gateway.metrics().render());
    edge.mount(routes, |response| response.extensions().get::<tether_gateway::Authenticated>().is_some())
}
