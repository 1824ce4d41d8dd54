//! `tether sessions`, `tether inspect` and `tether call`: the backend link
//! driven from a shell, reading with a short-lived operator credential.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use tether_contract::{Budgets, AUD_BACKEND, AUD_CLIENT};
use tether_core::{BackendLink, Turn};
use tether_edge::auth::Keys;

use crate::common::{keys, operator, print_error};

/// Flags of `tether sessions`.
#[derive(clap::Args)]
pub(crate) struct SessionsArgs {
    /// Edge address.
    #[arg(long, default_value = "ws://127.0.0.1:7878")]
    edge: String,
    /// Data directory holding the secret.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// Flags of `tether inspect`.
#[derive(clap::Args)]
pub(crate) struct InspectArgs {
    /// Session id.
    session: String,
    /// Edge address.
    #[arg(long, default_value = "ws://127.0.0.1:7878")]
    edge: String,
    /// Data directory holding the secret.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// Flags of `tether call`.
#[derive(clap::Args)]
pub(crate) struct CallArgs {
    /// Session id (see `tether sessions`).
    #[arg(long)]
    session: String,
    /// Namespaced tool name (client__…).
    #[arg(long)]
    tool: String,
    /// Arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    args: String,
    /// Edge address.
    #[arg(long, default_value = "ws://127.0.0.1:7878")]
    edge: String,
    /// Data directory holding the secret.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Present this approval (the id an `approval_required` error gave).
    #[arg(long)]
    approval: Option<String>,
    /// Decide `--approval` as the session's user first: approve it...
    #[arg(long, requires = "approval", conflicts_with = "decline")]
    approve: bool,
    /// ...or decline it (nothing runs).
    #[arg(long, requires = "approval")]
    decline: bool,
    /// An idempotency key: the same key with the same call gets its first outcome.
    #[arg(long)]
    key: Option<String>,
}

/// A backend link for the CLI, signed with the local secret.
async fn link(edge: &str, signing: &Keys) -> Result<BackendLink, tether_core::WireError> {
    let token = signing
        .issue("cli", AUD_BACKEND, Duration::from_secs(300))
        .map_err(|e| tether_core::WireError::new(tether_core::ErrorKind::Unauthenticated, e.to_string()))?;
    BackendLink::connect(edge, &token).await
}

/// Lists every connected session.
pub(crate) async fn sessions(args: SessionsArgs) -> Result<(), String> {
    let signing = keys(args.data_dir)?;
    let link = link(&args.edge, &signing).await.map_err(|e| e.to_string())?;
    let list =
        link.sessions(&operator(&signing)?, Duration::from_secs(5)).await.map_err(|e| e.to_string())?;
    if list.sessions.is_empty() {
        println!("no sessions connected");
    }
    for s in list.sessions {
        let name = s.server_info.get("name").and_then(Value::as_str).unwrap_or("?");
        println!(
            "{}  principal={}  device={}  mcp={}  seq={}  tools={}",
            s.session, s.principal, name, s.protocol_version, s.seq, s.tools
        );
    }
    Ok(())
}

/// Shows one session: names, drops, recent calls.
pub(crate) async fn inspect(args: InspectArgs) -> Result<(), String> {
    let signing = keys(args.data_dir)?;
    let link = link(&args.edge, &signing).await.map_err(|e| e.to_string())?;
    let view = match link.inspect(&args.session, &operator(&signing)?, Duration::from_secs(5)).await {
        Ok(v) => v,
        Err(e) => {
            print_error(&e);
            return Err("inspect failed".into());
        }
    };
    let name = view.server_info.get("name").and_then(Value::as_str).unwrap_or("?");
    println!(
        "session {}  principal={}  device={name}  mcp={}  seq={}  pending={}",
        view.session, view.principal, view.protocol_version, view.seq, view.pending_calls
    );
    println!("tools:");
    for t in &view.tools {
        println!("  {:<40} <- {}", t.namespaced, t.original);
    }
    if !view.dropped.is_empty() {
        println!("dropped:");
        for d in &view.dropped {
            println!("  {:<40} {} bytes  {}", d.name, d.bytes, d.reason.as_str());
        }
    }
    println!("recent calls:");
    for c in &view.recent_calls {
        println!("  {:<40} {:<18} {} ms", c.tool, c.outcome, c.latency_ms);
    }
    if !view.receipts.is_empty() {
        println!("receipts:");
        for r in &view.receipts {
            let approval = r
                .approval
                .as_ref()
                .map_or_else(String::new, |a| format!("  approved by {:?} ({})", a.by, a.id));
            let key = r.key.as_deref().map_or_else(String::new, |k| format!("  key={k}"));
            println!(
                "  {:<40} {:<18} fingerprint={}{key}{approval}",
                r.tool,
                r.outcome,
                &r.fingerprint.as_str()[..12]
            );
        }
    }
    Ok(())
}

/// Calls one tool through core's dispatcher, as an agent backend would.
pub(crate) async fn call(args: CallArgs) -> Result<(), String> {
    let CallArgs { session, tool, args, edge, data_dir, approval, approve, decline, key } = args;
    let arguments: Value =
        serde_json::from_str(&args).map_err(|e| format!("--args is not valid JSON: {e}"))?;
    let signing = keys(data_dir)?;
    let link = match link(&edge, &signing).await {
        Ok(link) => link,
        Err(e) => {
            print_error(&e);
            return Err("call failed".into());
        }
    };
    // The edge runs a call only for the user who owns the session. This is an
    // operator's tool holding the secret, so it looks the owner up with an
    // operator credential and speaks for them; a real backend forwards the
    // turn's user credential instead.
    let owner = link
        .sessions(&operator(&signing)?, Duration::from_secs(5))
        .await
        .ok()
        .and_then(|l| l.sessions.into_iter().find(|s| s.session == session))
        .map(|s| s.principal)
        .unwrap_or_default();
    let credential =
        signing.issue(&owner, AUD_CLIENT, Duration::from_secs(300)).map_err(|e| e.to_string())?;
    let mut turn = Turn::begin(&link, &session, Some(&credential), Budgets::default()).await;
    if let Some(e) = turn.degraded() {
        print_error(e);
        return Err("call failed".into());
    }
    if let Some(id) = approval.as_deref().filter(|_| approve || decline) {
        match turn.decide(id, approve).await {
            Ok(decided) => eprintln!("approval {id}: {:?}", decided.state),
            Err(e) => {
                print_error(&e);
                return Err("decide failed".into());
            }
        }
        if decline {
            return Ok(());
        }
    }
    let options = tether_core::CallOptions { idempotency_key: key, approval, ..Default::default() };
    match turn.call_with(&tool, arguments, options).await {
        Ok(result) => {
            println!("{}", serde_json::to_string_pretty(&result).unwrap_or_default());
            Ok(())
        }
        Err(e) => {
            print_error(&e);
            Err("call failed".into())
        }
    }
}
