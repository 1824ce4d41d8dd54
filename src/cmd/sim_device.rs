//! `tether sim-device`: the realistic simulated device, online until Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use tether_harness::{DeviceSpec, SimDevice};

use crate::common::keys;

/// Flags of `tether sim-device`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Edge address.
    #[arg(long, default_value = "ws://127.0.0.1:7878")]
    edge: String,
    /// Principal of the device's token.
    #[arg(long, default_value = "mira")]
    sub: String,
    /// A declaration fixture to serve instead of the built-in device.
    #[arg(long)]
    fixture: Option<PathBuf>,
    /// Data directory holding the secret.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// Connects, prints the session once it is callable, and stays online.
pub(crate) async fn run(args: Args) -> Result<(), String> {
    let Args { edge, sub, fixture, data_dir } = args;
    let spec = match fixture {
        Some(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let value: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            DeviceSpec::from_fixture(&value).map_err(|e| e.to_string())?
        }
        None => DeviceSpec::fieldkit_app(),
    };
    let token = keys(data_dir)?
        .issue(&sub, tether_contract::AUD_CLIENT, Duration::from_secs(86_400))
        .map_err(|e| e.to_string())?;
    let tools = spec.tools.len();
    let mut device =
        SimDevice::connect(&edge, &token, spec).await.map_err(|e| format!("connect {edge}: {e}"))?;
    // Printed once the edge lists the session: a script that reads it can call at once.
    let session = device.ready().await.ok_or("edge closed before the first manifest applied")?;
    println!("session {session}");
    eprintln!("simulated device online with {tools} tools as {sub}; Ctrl-C to disconnect");
    tokio::select! {
        _ = device.closed() => Err("edge closed the device connection".into()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
