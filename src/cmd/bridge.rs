//! `tether bridge`: a stdio MCP server presented to the edge as a device.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::common::{install_signals, keys};

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
    /// The MCP server and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Runs the bridge (restarting the server when it exits) until a signal.
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let Args { edge, token, sub, data_dir, command } = args;
    let token = match token {
        Some(token) => token,
        None => keys(data_dir)?
            .issue(&sub, tether_contract::AUD_CLIENT, Duration::from_secs(86_400))
            .map_err(|e| e.to_string())?,
    };
    let shutdown = CancellationToken::new();
    install_signals(shutdown.clone(), shutdown.clone())?;
    let config = tether_bridge::BridgeConfig::new(edge, token, command);
    tether_bridge::run(config, shutdown).await.map_err(|e| e.to_string())
}
