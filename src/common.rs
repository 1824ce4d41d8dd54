//! What several subcommands share: the signing keys, durations on the command
//! line, logging, signals, and printing an error the way a model would see it.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use tether_config::LogFormat;
use tether_core::{for_model, WireError};
use tether_edge::auth::Keys;
use tether_edge::config::default_data_dir;
use tether_telemetry::TelemetryConfig;

/// Reads a duration like 90s, 30m, 1h or 2d (a bare number is seconds).
pub(crate) fn parse_ttl(s: &str) -> Result<Duration, String> {
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

/// The edge's signing keys from `data_dir` (or the default data directory).
pub(crate) fn keys(data_dir: Option<PathBuf>) -> Result<Keys, String> {
    let dir = data_dir.unwrap_or_else(default_data_dir);
    Keys::load(None, &dir).map(|(k, _)| k).map_err(|e| e.to_string())
}

/// A short-lived operator credential: the CLI's `sessions`, `inspect` and
/// `call` read every session with it, and the edge logs each use.
pub(crate) fn operator(signing: &Keys) -> Result<String, String> {
    signing
        .issue("tether-cli", tether_contract::AUD_OPERATOR, Duration::from_secs(300))
        .map_err(|e| e.to_string())
}

/// The edge logs at info by default; the client commands only warn, so their stdout stays readable.
pub(crate) fn init_tracing(default: &str, format: LogFormat) {
    // Without an endpoint nothing exports and nothing can fail.
    let _ = install_tracing(default, format, &TelemetryConfig::default());
}

/// Logs to stderr, and exports the call's spans over OTLP when `telemetry`
/// names an endpoint: keep the returned guard for the process's life (it
/// sends what is queued when dropped).
pub(crate) fn install_tracing(
    default: &str,
    format: LogFormat,
    telemetry: &TelemetryConfig,
) -> Option<tether_telemetry::Exporting> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // The legs of a traced call are for the exporter, not the log: with
    // export off no layer wants them, so they cost a disabled callsite.
    let filter = match format!("{}=off", tether_telemetry::TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    // log_internal_errors(false): its fallback is eprintln!, which panics when
    // stderr is a closed pipe and would take the signal or drain task with it.
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).log_internal_errors(false);
    let log = match format {
        LogFormat::Json => {
            log.json().with_current_span(true).with_span_list(false).with_filter(filter).boxed()
        }
        LogFormat::Pretty => log.with_filter(filter).boxed(),
    };
    let mut layers = vec![log];
    let (exporting, refused) = match tether_telemetry::start::<Registry>(telemetry) {
        Ok(Some((layer, exporting))) => {
            layers.push(layer);
            (Some(exporting), None)
        }
        Ok(None) => (None, None),
        Err(e) => (None, Some(e)),
    };
    tracing_subscriber::registry().with(layers).init();
    if let Some(e) = refused {
        tracing::warn!(error = %e, "traces are not exported");
    }
    exporting
}

/// SIGTERM drains (finish calls in flight, devices reconnect elsewhere);
/// SIGINT, or a second signal, shuts down at once (calls in flight fail).
///
/// The handlers are installed before this returns, so a signal sent the moment
/// `listening on` is printed is never lost to the default action.
pub(crate) fn install_signals(drain: CancellationToken, shutdown: CancellationToken) -> Result<(), String> {
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

/// Prints a wire error and the sentence core would hand the model for it.
pub(crate) fn print_error(err: &WireError) {
    let json = serde_json::json!({"error": err.to_json(), "for_model": for_model(err)});
    println!("{}", serde_json::to_string_pretty(&json).unwrap_or_default());
}

/// Prints a line for whoever reads stdout; a closed stdout must not stop a server.
pub(crate) fn announce(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}").and_then(|()| std::io::stdout().flush());
}
