//! `tether`: the edge worker and its companion commands.
//!
//! `tether serve` runs the edge; `tether token` mints credentials with the
//! edge's secret; `tether sim-device` connects a simulated device;
//! `tether call` and `tether sessions` drive the backend link from a shell;
//! `tether bridge` presents a stdio MCP server to the edge as a device;
//! `tether gateway` serves the MCP endpoint apart from a private edge (the
//! edge itself serves it at `/mcp` too).

mod eval;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use tether_contract::{Budgets, AUD_BACKEND};
use tether_core::{for_model, BackendLink, Profiles, Turn, WireError};
use tether_edge::auth::Keys;
use tether_edge::config::default_data_dir;
use tether_edge::settings::{self, Flags, LogFormat, Resolved};
use tether_edge::Edge;
use tether_gateway::{Gateway, GatewayConfig};
use tether_harness::{DeviceSpec, SimDevice};

#[derive(Parser)]
#[command(name = "tether", version, about = "Realtime broker for tools that run on the client")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the edge worker (defaults: 127.0.0.1:7878, no config needed).
    Serve {
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
        /// (e.g. https://agents.example.com); by default built from the request's Host.
        #[arg(long, env = "TETHER_PUBLIC_URL")]
        public_url: Option<String>,
    },
    /// Check a configuration file: print the resolved configuration, or every error with its location.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Print a token signed with the edge's secret.
    Token {
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
    },
    /// Connect a simulated device (the realistic fixture device) and keep it online.
    SimDevice {
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
    },
    /// Present a stdio MCP server to the edge as a device (restarted if it exits).
    Bridge {
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
    },
    /// Call a tool on a session, as an agent backend would.
    Call {
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
    },
    /// Show one session: namespaced ↔ original names, seq, drops, recent calls.
    Inspect {
        /// Session id.
        session: String,
        /// Edge address.
        #[arg(long, default_value = "ws://127.0.0.1:7878")]
        edge: String,
        /// Data directory holding the secret.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Run a simulated fleet with faults and a load driver; check the invariants.
    Soak {
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
        #[arg(long, default_value = tether_harness::soak::DEFAULT_FAULTS)]
        faults: String,
        /// Seed for every random choice.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// A running edge; without it an edge is embedded in this process.
        #[arg(long)]
        edge: Option<String>,
        /// Write the report as JSON here (and a plot next to it, .svg).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Data directory holding the secret (with --edge).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// How long every device may take to get a session before the soak fails, e.g. 30s.
        #[arg(long, default_value = "30s", value_parser = parse_ttl)]
        fleet_timeout: Duration,
    },
    /// Measure tether against a bare tokio-tungstenite relay in the same run.
    Bench {
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
    },
    /// The bare relay the bench compares with (no auth, no validation: never expose it).
    #[command(hide = true)]
    Relay {
        /// Loopback address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Keep tungstenite's default 128 KiB buffers.
        #[arg(long)]
        default_buffers: bool,
    },
    /// Measure tool selection: recall and MRR of find_tools' search on a catalogue and turns.
    Eval(eval::EvalArgs),
    /// List connected sessions.
    Sessions {
        /// Edge address.
        #[arg(long, default_value = "ws://127.0.0.1:7878")]
        edge: String,
        /// Data directory holding the secret.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Serve the MCP endpoint (`/mcp`) for agent backends, apart from the edges
    /// (which stay private); `tether serve` serves it on its own port already.
    Gateway {
        /// The edge's address.
        #[arg(long, default_value = "ws://127.0.0.1:7878")]
        edge: String,
        /// Where MCP clients connect.
        #[arg(long, default_value = "127.0.0.1:7879")]
        listen: std::net::SocketAddr,
        /// A tether-backend token for the edge; without it one is minted with the local secret.
        #[arg(long, env = "TETHER_BACKEND_TOKEN")]
        token: Option<String>,
        /// The URL MCP clients reach this gateway at (for its resource metadata).
        #[arg(long)]
        public_url: Option<String>,
        /// The identity provider's issuer, advertised as the authorization server in the metadata.
        #[arg(long)]
        issuer: Option<String>,
        /// Data directory holding the secret.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

/// Mounts the MCP endpoint on the edge's own port, over an in-process backend link.
async fn mount_mcp(edge: Edge, issuer: Option<String>, public_url: Option<String>) -> Edge {
    let pipe = edge.attach_backend("tether-mcp");
    let gateway =
        Gateway::attach(pipe, GatewayConfig { issuer, public_url, ..GatewayConfig::default() }).await;
    let routes = gateway.router();
    let (stop_streams, shutdown) = (gateway.shutdown_token(), edge.shutdown_token());
    tokio::spawn(async move {
        shutdown.cancelled().await;
        stop_streams.cancel();
    });
    edge.hub().metrics.also_render(move || gateway.metrics().render());
    edge.mount(routes, |response| response.extensions().get::<tether_gateway::Authenticated>().is_some())
}

#[derive(Subcommand)]
enum ConfigAction {
    /// Resolve FILE (with the environment) and report.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 =
        digits.parse().map_err(|_| format!("ttl {s:?}: expected a number followed by s, m, h or d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("ttl {s:?}: unit must be s, m, h or d")),
    };
    if secs == 0 {
        return Err("ttl must be longer than zero".into());
    }
    Ok(Duration::from_secs(secs))
}

fn keys(data_dir: Option<PathBuf>) -> Result<Keys, String> {
    let dir = data_dir.unwrap_or_else(default_data_dir);
    Keys::load(None, &dir).map(|(k, _)| k).map_err(|e| e.to_string())
}

/// The edge logs at info by default; the client commands only warn, so their stdout stays readable.
fn init_tracing(default: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // log_internal_errors(false): its fallback is eprintln!, which panics when
    // stderr is a closed pipe and would take the signal or drain task with it.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    match format {
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).init(),
        LogFormat::Pretty => builder.init(),
    }
}

fn read_config(path: Option<&PathBuf>, flags: &Flags) -> Result<Resolved, String> {
    let text = match path {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| format!("config {}: {e}", p.display()))?),
        None => None,
    };
    let file = path.zip(text.as_deref()).map(|(p, t)| (p.as_path(), t));
    Ok(settings::resolve(file, |k| std::env::var(k).ok(), flags))
}

/// SIGTERM drains (finish calls in flight, devices reconnect elsewhere);
/// SIGINT, or a second signal, shuts down at once (calls in flight fail).
///
/// The handlers are installed before this returns, so a signal sent the moment
/// `listening on` is printed is never lost to the default action.
fn install_signals(drain: CancellationToken, shutdown: CancellationToken) -> Result<(), String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => shutdown.cancel(),
                _ = term.recv() => {
                    // Not eprintln!: a closed stderr must never kill the drain.
                    tracing::info!("SIGTERM: draining (send it again to stop at once)");
                    drain.cancel();
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    shutdown.cancel();
                }
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        let _ = (drain, tokio::signal::ctrl_c().await);
        shutdown.cancel();
    });
    Ok(())
}

fn print_error(err: &WireError) {
    let json = serde_json::json!({"error": err.to_json(), "for_model": for_model(err)});
    println!("{}", serde_json::to_string_pretty(&json).unwrap_or_default());
}

async fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Serve { config, listen, data_dir, log_format, public_url } => {
            let flags = Flags { listen, data_dir, log_format };
            let resolved = read_config(config.as_ref(), &flags)?;
            init_tracing("info", resolved.log_format);
            for issue in &resolved.issues {
                if issue.fatal {
                    tracing::error!(location = %issue.location, "{}", issue.message);
                } else {
                    tracing::warn!(location = %issue.location, "configuration degraded: {}", issue.message);
                }
            }
            if resolved.is_fatal() {
                return Err("configuration cannot start the edge (see the errors above)".into());
            }
            // Every session is a socket: lift the soft fd limit to the hard one.
            if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
                tracing::warn!(error = %e, "could not raise the open-file limit");
            }
            let degraded = resolved.issues.len() as u64;
            let issuer = resolved.config.identity.as_ref().and_then(|idp| idp.issuer.clone());
            let edge = Edge::bind(resolved.config).await.map_err(|e| e.to_string())?;
            let edge = mount_mcp(edge, issuer, public_url).await;
            edge.hub().counters().config_errors.inc_by(degraded);
            let addr = edge.local_addr().map_err(|e| e.to_string())?;
            install_signals(edge.drain_token(), edge.shutdown_token())?;
            // A closed stdout must not stop the edge; the line is for whoever is reading.
            let _ =
                writeln!(std::io::stdout(), "listening on ws://{addr}\nMCP endpoint on http://{addr}/mcp")
                    .and_then(|()| std::io::stdout().flush());

            edge.run().await;
            Ok(())
        }
        Command::Gateway { edge, listen, token, public_url, issuer, data_dir } => {
            let token = match token {
                Some(token) => token,
                None => keys(data_dir)?
                    .issue("tether-gateway", AUD_BACKEND, Duration::from_secs(30 * 24 * 3600))
                    .map_err(|e| e.to_string())?,
            };
            let link = BackendLink::connect(&edge, &token)
                .await
                .map_err(|e| format!("connect {edge}: {}", e.message))?;
            let gateway =
                Gateway::new(link, GatewayConfig { public_url, issuer, ..GatewayConfig::default() });
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
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
            let _ = writeln!(std::io::stdout(), "MCP endpoint on http://{addr}/mcp (edge {edge})")
                .and_then(|()| std::io::stdout().flush());
            let serving = tether_gateway::serve(listener, router, Duration::from_secs(10), shutdown.clone());
            tokio::select! {
                () = serving => Ok(()),
                () = edge_gone.cancelled() => {
                    shutdown.cancel();
                    Err(format!("the link to {edge} closed; restart the gateway (or let its supervisor)"))
                }
            }
        }
        Command::Config { action: ConfigAction::Check { file } } => {
            let mut resolved = read_config(Some(&file), &Flags::default())?;
            // Caller profiles belong to tether-core; check them here too so one command covers the file.
            let profiles = Profiles::from_table(resolved.callers.clone(), std::sync::Arc::default());
            for name in profiles.names() {
                if let Err(e) = profiles.get(&name) {
                    resolved.issues.push(settings::Issue {
                        location: format!("{} [callers.{name}]", file.display()),
                        message: format!("{}; this caller would get no client tools", e.message),
                        fatal: false,
                    });
                }
            }
            if resolved.issues.is_empty() {
                print!("{}", resolved.to_toml());
                return Ok(());
            }
            for issue in &resolved.issues {
                let what = if issue.fatal { "error" } else { "degraded" };
                println!("{}: {what}: {}", issue.location, issue.message);
            }
            Err(format!("{} problem(s) in {}", resolved.issues.len(), file.display()))
        }
        Command::Token { sub, aud, ttl, data_dir } => {
            let audiences = [tether_contract::AUD_CLIENT, AUD_BACKEND, tether_contract::AUD_OPERATOR];
            if !audiences.contains(&aud.as_str()) {
                return Err(format!("--aud must be one of {}", audiences.join(", ")));
            }
            let token = keys(data_dir)?.issue(&sub, &aud, ttl).map_err(|e| e.to_string())?;
            println!("{token}");
            Ok(())
        }
        Command::SimDevice { edge, sub, fixture, data_dir } => {
            let spec = match fixture {
                Some(path) => {
                    let text =
                        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                    let value: Value =
                        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
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
        Command::Bridge { edge, token, sub, data_dir, command } => {
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
        Command::Call { session, tool, args, edge, data_dir } => {
            let arguments: Value =
                serde_json::from_str(&args).map_err(|e| format!("--args is not valid JSON: {e}"))?;
            let signing = keys(data_dir)?;
            let token =
                signing.issue("cli", AUD_BACKEND, Duration::from_secs(300)).map_err(|e| e.to_string())?;
            let link = match BackendLink::connect(&edge, &token).await {
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
            let credential = signing
                .issue(&owner, tether_contract::AUD_CLIENT, Duration::from_secs(300))
                .map_err(|e| e.to_string())?;
            let mut turn = Turn::begin(&link, &session, Some(&credential), Budgets::default()).await;
            if let Some(e) = turn.degraded() {
                print_error(e);
                return Err("call failed".into());
            }
            match turn.call(&tool, arguments).await {
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
        Command::Inspect { session, edge, data_dir } => {
            let signing = keys(data_dir)?;
            let token =
                signing.issue("cli", AUD_BACKEND, Duration::from_secs(300)).map_err(|e| e.to_string())?;
            let link = BackendLink::connect(&edge, &token).await.map_err(|e| e.to_string())?;
            let view = match link.inspect(&session, &operator(&signing)?, Duration::from_secs(5)).await {
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
            Ok(())
        }
        Command::Soak {
            devices,
            duration,
            rate,
            concurrency,
            faults,
            seed,
            edge,
            json,
            data_dir,
            fleet_timeout,
        } => {
            let _ = rlimit::increase_nofile_limit(u64::MAX);
            let (url, keys, embedded) = match edge {
                Some(url) => (url, keys(data_dir)?, None),
                None => {
                    let secret = format!("soak-{seed}-{}", "k".repeat(32));
                    let config = tether_edge::EdgeConfig {
                        listen: "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
                        jwt_secret: Some(secret.clone()),
                        // The whole fleet shares one device principal.
                        max_sessions_per_principal: usize::MAX,
                        ..tether_edge::EdgeConfig::default()
                    };
                    let edge = Edge::bind(config).await.map_err(|e| e.to_string())?;
                    let url = format!("ws://{}", edge.local_addr().map_err(|e| e.to_string())?);
                    let shutdown = edge.shutdown_token();
                    let task = tokio::spawn(edge.run());
                    (
                        url,
                        Keys::from_secret(secret.as_bytes()).map_err(|e| e.to_string())?,
                        Some((shutdown, task)),
                    )
                }
            };
            let day = Duration::from_secs(86_400);
            let cfg = tether_harness::soak::SoakConfig {
                edge: url,
                client_token: keys
                    .issue("soak-device", tether_contract::AUD_CLIENT, day)
                    .map_err(|e| e.to_string())?,
                backend_token: keys.issue("soak-driver", AUD_BACKEND, day).map_err(|e| e.to_string())?,
                devices,
                duration,
                load: match rate {
                    Some(r) => tether_harness::soak::Load::Rate(r),
                    None => tether_harness::soak::Load::Concurrency(concurrency),
                },
                faults,
                seed,
                progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
                call_budget: tether_harness::soak::DEFAULT_CALL_BUDGET,
                fleet_deadline: fleet_timeout,
            };
            let report = tether_harness::soak::run(cfg).await?;
            if let Some((shutdown, task)) = embedded {
                shutdown.cancel();
                let _ = task.await;
            }
            eprint!("{}", report.table());
            if let Some(path) = json {
                let text =
                    serde_json::to_string_pretty(&tether_harness::soak::to_json(&report)).unwrap_or_default();
                std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
                let svg = path.with_extension("svg");
                tether_harness::soak::plot(&report, &svg)?;
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
        Command::Bench { seconds, idle_sessions, quick, json } => {
            let _ = rlimit::increase_nofile_limit(u64::MAX);
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let cfg = tether_harness::bench::BenchConfig {
                exe,
                seconds: if quick { 2 } else { seconds },
                idle_sessions: if quick { 2_000 } else { idle_sessions },
                quick,
            };
            let report = tether_harness::bench::run(cfg).await?;
            println!("{}", report.table());
            if let Some(path) = json {
                let text = serde_json::to_string_pretty(&report).unwrap_or_default();
                std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Ok(())
        }
        Command::Relay { listen, default_buffers } => {
            if !listen.ip().is_loopback() {
                return Err("the bare relay has no auth; it only listens on loopback".into());
            }
            let _ = rlimit::increase_nofile_limit(u64::MAX);
            let buffers = if default_buffers {
                tether_harness::relay::Buffers::Default
            } else {
                tether_harness::relay::Buffers::Small
            };
            let addr =
                tether_harness::relay::bind_and_serve(listen, buffers).await.map_err(|e| e.to_string())?;
            let _ = writeln!(std::io::stdout(), "listening on ws://{addr}")
                .and_then(|()| std::io::stdout().flush());
            std::future::pending::<()>().await;
            Ok(())
        }
        Command::Eval(args) => eval::run(&args).map_err(|e| e.to_string()),
        Command::Sessions { edge, data_dir } => {
            let signing = keys(data_dir)?;
            let token =
                signing.issue("cli", AUD_BACKEND, Duration::from_secs(300)).map_err(|e| e.to_string())?;
            let link = BackendLink::connect(&edge, &token).await.map_err(|e| e.to_string())?;
            let list = link
                .sessions(&operator(&signing)?, Duration::from_secs(5))
                .await
                .map_err(|e| e.to_string())?;
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
    }
}

/// A short-lived operator credential: the CLI's `sessions`, `inspect` and
/// `call` read every session with it, and the edge logs each use.
fn operator(signing: &tether_edge::auth::Keys) -> Result<String, String> {
    signing
        .issue("tether-cli", tether_contract::AUD_OPERATOR, Duration::from_secs(300))
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // `serve` sets up logging itself once it knows the configured format.
    match cli.command {
        Command::Serve { .. } => {}
        // A soak injects faults on purpose; their warnings would drown the report.
        Command::Soak { .. } => init_tracing("error", LogFormat::Pretty),
        // The bridge's log carries the MCP server's stderr (target mcp_server) at info.
        Command::Bridge { .. } => init_tracing("info,rmcp=warn", LogFormat::Pretty),
        _ => init_tracing("warn", LogFormat::Pretty),
    }
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tether: {e}");
            ExitCode::FAILURE
        }
    }
}
