//! `tether gateway`: the MCP endpoint served apart from the edges, which stay private.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use tether_contract::AUD_BACKEND;
use tether_core::BackendLink;
use tether_gateway::{Gateway, GatewayConfig};

use crate::common::{announce, install_signals, keys};

/// Flags of `tether gateway`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The edge's address.
    #[arg(long, default_value = "ws://127.0.0.1:7878")]
    edge: String,
    /// Where MCP clients connect.
    #[arg(long, default_value = "127.0.0.1:7879")]
    listen: std::net::SocketAddr,
    /// A tether-backend token for the edge; without it one is minted with the local secret.
    #[arg(long, env = "TETHER_BACKEND_TOKEN")]
    token: Option<String>,
    /// The URL MCP clients reach this gateway at (for its resource metadata;
    /// also TETHER_PUBLIC_URL or public_url in the file).
    #[arg(long)]
    public_url: Option<String>,
    /// The identity provider's issuer, advertised as the authorization server in the metadata.
    #[arg(long)]
    issuer: Option<String>,
    /// Data directory holding the secret.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// TOML configuration file (also TETHER_CONFIG): its `[budgets]` bound how long calls and tasks are waited for.
    #[arg(long, env = "TETHER_CONFIG")]
    config: Option<PathBuf>,
}

/// Serves `/mcp` until a signal, or until the link to the edge closes (an error).
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let Args { edge, listen, token, public_url, issuer, data_dir, config } = args;
    let flags = tether_config::Flags { public_url, ..tether_config::Flags::default() };
    let resolved = crate::cmd::serve::read_config(config.as_ref(), &flags)?;
    if resolved.is_fatal() {
        return Err("configuration cannot start the gateway (run `tether config check FILE`)".into());
    }
    let budgets = resolved.config.budgets;
    let public_url = resolved.public_url.clone();
    let token = match token {
        Some(token) => token,
        None => keys(data_dir)?
            .issue("tether-gateway", AUD_BACKEND, Duration::from_secs(30 * 24 * 3600))
            .map_err(|e| e.to_string())?,
    };
    let link =
        BackendLink::connect(&edge, &token).await.map_err(|e| format!("connect {edge}: {}", e.message))?;
    let gateway =
        Gateway::new(link, GatewayConfig { public_url, issuer, budgets, ..GatewayConfig::default() });
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let metrics = gateway.clone();
    let router = gateway.router().route("/healthz", axum::routing::get(|| async { "ok\n" })).route(
        "/metrics",
        axum::routing::get(move || {
            let text = format!("{}\n# EOF\n", metrics.metrics().render());
            async move { text }
        }),
    );
    let shutdown = CancellationToken::new();
    install_signals(shutdown.clone(), shutdown.clone())?;
    let edge_gone = gateway.edge_gone();
    announce(&format!("MCP endpoint on http://{addr}/mcp (edge {edge})"));
    let serving = tether_gateway::serve(listener, router, Duration::from_secs(10), shutdown.clone());
    tokio::select! {
        () = serving => Ok(()),
        () = edge_gone.cancelled() => {
            shutdown.cancel();
            Err(format!("the link to {edge} closed; restart the gateway (or let its supervisor)"))
        }
    }
}
