//! `tether token`: a credential signed with the edge's secret.

use std::path::PathBuf;
use std::time::Duration;

use tether_contract::{AUD_BACKEND, AUD_CLIENT, AUD_OPERATOR};

use crate::common::{keys, parse_ttl};

/// Flags of `tether token`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Principal (`sub`).
    #[arg(long)]
    sub: String,
    /// Audience: tether-client (a device, or a turn's user), tether-backend (an
    /// agent backend's link), or tether-operator (reads every session; each use is logged).
    #[arg(long)]
    aud: String,
    /// Lifetime, e.g. 90s, 30m, 1h, 2d.
    #[arg(long, default_value = "1h", value_parser = parse_ttl)]
    ttl: Duration,
    /// Data directory holding the secret.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// Prints the token.
pub(crate) fn run(args: Args) -> Result<(), String> {
    let audiences = [AUD_CLIENT, AUD_BACKEND, AUD_OPERATOR];
    if !audiences.contains(&args.aud.as_str()) {
        return Err(format!("--aud must be one of {}", audiences.join(", ")));
    }
    let token = keys(args.data_dir)?.issue(&args.sub, &args.aud, args.ttl).map_err(|e| e.to_string())?;
    println!("{token}");
    Ok(())
}
