//! `tether bridge`: a stdio MCP server presented to the edge as a device.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use tether_bridge::BridgeCounters;

use crate::common::{announce, install_signals, keys};

/// Flags of `tether bridge`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Edge address.
    #[arg(long, default_value = "ws://127.0.0.1:7878")]
    edge: String,
    /// A tether-client token; without it one is minted with the local secret for --sub.
    #[arg(long, env = "TETHER_DEVICE_TOKEN")]
    token: Option<String>,
    /// Principal of the minted token.
    #[arg(long, default_value = "mira")]
    sub: String,
    /// Data directory holding the secret.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Serve the bridge's counters at http://ADDR/metrics (and /healthz), e.g. 127.0.0.1:9465.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// The MCP server and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Runs the bridge (restarting the server when it exits) until a signal.
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let Args { edge, token, sub, data_dir, metrics, command } = args;
    let token = match token {
        Some(token) => token,
        None => keys(data_dir)?
            .issue(&sub, tether_contract::AUD_CLIENT, Duration::from_secs(86_400))
            .map_err(|e| e.to_string())?,
    };
    let shutdown = CancellationToken::new();
    install_signals(shutdown.clone(), shutdown.clone())?;
    let config = tether_bridge::BridgeConfig::new(edge, token, command);
    let counters = Arc::new(BridgeCounters::default());
    if let Some(addr) = metrics {
        serve_metrics(addr, Arc::clone(&counters), shutdown.clone()).await?;
    }
    tether_bridge::run(config, counters, shutdown).await.map_err(|e| e.to_string())
}

/// Serves `/metrics` and `/healthz` on `addr` until `shutdown`; announces
/// the bound address on stdout (port 0 picks one).
async fn serve_metrics(
    addr: SocketAddr,
    counters: Arc<BridgeCounters>,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let router =
        axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok\n" })).route(
            "/metrics",
            axum::routing::get(move || {
                // A whole exposition, `# EOF` included: the bridge is the only thing on this port.
                let text = counters.exposition("tether_bridge");
                async move {
                    ([(axum::http::header::CONTENT_TYPE, tether_counters::OPENMETRICS_CONTENT_TYPE)], text)
                }
            }),
        );
    announce(&format!("bridge metrics on http://{bound}/metrics"));
    tokio::spawn(async move {
        let serving = axum::serve(listener, router).with_graceful_shutdown(shutdown.cancelled_owned());
        if let Err(e) = serving.await {
            tracing::warn!(error = %e, "the bridge's metrics listener stopped");
        }
    });
    Ok(())
}
