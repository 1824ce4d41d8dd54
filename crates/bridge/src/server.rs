//! The MCP server side: spawn a stdio server, speak MCP to it through the
//! official Rust SDK (rmcp), follow its tool changes, call its tools under a
//! deadline, and notice when it exits.
//!
//! The bridge owns the child process itself and hands rmcp the process's
//! stdin and stdout (rmcp's newline-delimited stdio transport), rather than
//! using rmcp's `TokioChildProcess`, which keeps the process to itself: the
//! bridge must read the exit status to tell the edge why the device went
//! away. The child is killed when dropped, and stopped the MCP stdio way
//! (stdin closed, then a grace period, then a kill) when the bridge stops it.

use std::collections::HashMap;
use std::fmt;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[allow(deprecated)] // server log messages (SEP-2577) still come from every 2025-11-25 server
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::model::{
    CancelledNotificationParam, ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam,
    ProtocolVersion, RequestId, ServerPeerInfo,
};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, NotificationContext, RoleClient,
    RunningServiceCancellationToken,
};
use rmcp::{ClientHandler, Peer, ServiceError};
use serde_json::{json, Value};
use tokio::process::Command;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use tether_contract::mcp::ToolDeclaration;
use tether_counters::fallback;

use crate::counters::BridgeCounters;
use crate::lock;
use crate::Lifecycle;

mod call;
mod changes;
mod process;
pub(crate) mod tasks;

use changes::listen_for_changes;
use process::{pump_stderr, reap, wait_exit};

pub(crate) use call::{CallOutcome, Failure, Stop, TraceContext};

/// How long the MCP start (rmcp's `server/discover` probe, which waits up to
/// 10 s for a legacy server, then `initialize`) may take.
const HANDSHAKE_BUDGET: Duration = Duration::from_secs(30);
/// How long a server whose MCP stream ended may take to exit by itself before
/// the bridge decides it closed the stream while alive (and stops it).
const STREAM_EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long a server told to stop (stdin closed) may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// The tracing target of everything the MCP server itself says (its stderr, its log messages).
pub(crate) const SERVER_TARGET: &str = "mcp_server";

/// Which MCP era the server turned out to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28 and later: stateless requests, changes on a `subscriptions/listen` stream.
    Modern,
    /// The `initialize` handshake (2025-11-25 and earlier): bare `list_changed` notifications.
    Legacy,
}

/// The catalog's sequence number, shared by everything that moves it.
///
/// It starts at 1, lives as long as the bridge (server restarts and edge
/// reconnects keep counting), and moves once per `list_changed` from the server.
#[derive(Debug)]
pub(crate) struct SeqClock {
    tx: watch::Sender<u64>,
}

impl SeqClock {
    pub(crate) fn new() -> SeqClock {
        SeqClock { tx: watch::channel(1).0 }
    }

    pub(crate) fn current(&self) -> u64 {
        *self.tx.borrow()
    }

    /// Moves the seq on and returns the new value.
    pub(crate) fn bump(&self) -> u64 {
        let mut now = 0;
        self.tx.send_modify(|s| {
            *s += 1;
            now = *s;
        });
        now
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }
}

/// How the server process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exit {
    status: Option<ExitStatus>,
    after_stream_closed: bool,
}

impl Exit {
    /// An exit with no status read, for tests of what is said about one.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Exit {
        Exit { status: None, after_stream_closed: false }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "{status}")?,
            None => f.write_str("exit status unknown")?,
        }
        if self.after_stream_closed {
            f.write_str(", after it closed its MCP stream")?;
        }
        Ok(())
    }
}

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The process could not be spawned.
    #[error("spawn failed: {0}")]
    Spawn(#[source] std::io::Error),
    /// The process came up without the pipes it was spawned with.
    #[error("the server's stdio pipes were not available")]
    Pipes,
    /// rmcp's `server/discover` / `initialize` failed.
    #[error("MCP handshake failed: {0}")]
    Handshake(#[source] Box<ClientInitializeError>),
    /// The handshake took longer than [`HANDSHAKE_BUDGET`].
    #[error("MCP handshake did not finish within {0:?}")]
    HandshakeTimeout(Duration),
    /// The server exited during the handshake.
    #[error("the server exited during the MCP handshake ({0})")]
    Exited(Exit),
    /// The handshake finished without telling who the server is.
    #[error("the MCP handshake left no server information")]
    NoPeerInfo,
}

/// What the bridge needs to start a server.
#[derive(Debug, Clone)]
pub(crate) struct StartSpec {
    pub(crate) command: Vec<String>,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) seq: Arc<SeqClock>,
    pub(crate) counters: Arc<BridgeCounters>,
}

/// Calls in flight on the server, by the request id rmcp gave them, so a
/// server that cancels one of them (a legacy server may) ends it at once.
#[derive(Debug, Default)]
struct InFlight {
    calls: Mutex<HashMap<RequestId, oneshot::Sender<()>>>,
}

/// The rmcp client handler: turns server notifications into seq moves and log lines.
struct Handler {
    config: ClientConfig,
    name: Arc<str>,
    seq: Arc<SeqClock>,
    inflight: Arc<InFlight>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    // Legacy servers announce changes with a bare notification; 2026-07-28
    // servers use the listen stream (see `listen_for_changes`).
    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        let seq = self.seq.bump();
        info!(server = %self.name, seq, "server announced tools/list_changed");
    }

    async fn on_cancelled(&self, params: CancelledNotificationParam, _ctx: NotificationContext<RoleClient>) {
        let Some(id) = params.request_id else { return };
        let waiter = lock(&self.inflight.calls).remove(&id);
        match waiter {
            Some(tx) => {
                warn!(server = %self.name, request = %id, reason = params.reason.as_deref().unwrap_or(""), "server cancelled a call in flight");
                let _ = tx.send(());
            }
            None => {
                debug!(server = %self.name, request = %id, "server cancelled a request the bridge is not waiting on")
            }
        }
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _ctx: NotificationContext<RoleClient>) {
        debug!(server = %self.name, token = ?params.progress_token, progress = params.progress, total = ?params.total, "server progress");
    }

    #[allow(deprecated)] // see the import: legacy servers still log this way
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        let logger = params.logger.as_deref().unwrap_or("");
        info!(target: SERVER_TARGET, server = %self.name, level = ?params.level, logger, "{}", params.data);
    }
}

/// A running MCP server the bridge speaks to.
pub(crate) struct Server {
    peer: Peer<RoleClient>,
    info: Arc<ServerPeerInfo>,
    pub(crate) era: Era,
    pub(crate) pid: Option<u32>,
    pub(crate) name: Arc<str>,
    exit: watch::Receiver<Option<Exit>>,
    stop: CancellationToken,
    /// Set when the bridge itself ends the server, so its exit is not blamed on the server.
    stopping: Arc<AtomicBool>,
    service: Mutex<Option<RunningServiceCancellationToken>>,
    inflight: Arc<InFlight>,
    counters: Arc<BridgeCounters>,
    /// Ends the `subscriptions/listen` stream (2026-07-28 servers) before the bridge stops the server.
    unlisten: CancellationToken,
    subscription: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .field("era", &self.era)
            .finish()
    }
}

/// The short name the logs use for the server: its program's file name.
pub(crate) fn server_name(command: &[String]) -> Arc<str> {
    let program = command.first().map(String::as_str).unwrap_or("mcp-server");
    let base = std::path::Path::new(program).file_name().and_then(|n| n.to_str()).unwrap_or(program);
    Arc::from(base)
}

impl Server {
    /// Spawns the server and speaks MCP to it until it is ready.
    pub(crate) async fn start(spec: &StartSpec) -> Result<Server, StartError> {
        let Some((program, args)) = spec.command.split_first() else {
            return Err(StartError::Spawn(std::io::Error::other("empty command")));
        };
        let name = server_name(&spec.command);
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(StartError::Spawn)?;
        let pid = child.id();
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(StartError::Pipes);
        };
        let span = tracing::info_span!("mcp_server", server = %name, pid);
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(
                pump_stderr(stderr, Arc::clone(&name), pid, Arc::clone(&spec.counters))
                    .instrument(span.clone()),
            );
        }
        let stop = CancellationToken::new();
        let stream_closed = Arc::new(AtomicBool::new(false));
        let (exit_tx, exit_rx) = watch::channel(None);
        tokio::spawn(reap(child, stop.clone(), exit_tx, Arc::clone(&stream_closed)).instrument(span.clone()));

        let inflight = Arc::new(InFlight::default());
        let handler = Handler {
            config: ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("tether-bridge", env!("CARGO_PKG_VERSION")),
            )
            // The version offered if the server turns out to need `initialize`.
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE),
            name: Arc::clone(&name),
            seq: Arc::clone(&spec.seq),
            inflight: Arc::clone(&inflight),
        };
        let lifecycle = match spec.lifecycle {
            Lifecycle::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            Lifecycle::Legacy => ClientLifecycleMode::Initialize,
        };
        let mut exit_wait = exit_rx.clone();
        let handshake =
            tokio::time::timeout(HANDSHAKE_BUDGET, handler.serve_with_lifecycle((stdout, stdin), lifecycle));
        let running = tokio::select! {
            started = handshake => match started {
                Ok(Ok(running)) => running,
                Ok(Err(e)) => {
                    stop.cancel();
                    return Err(StartError::Handshake(Box::new(e)));
                }
                Err(_) => {
                    stop.cancel();
                    return Err(StartError::HandshakeTimeout(HANDSHAKE_BUDGET));
                }
            },
            exit = wait_exit(&mut exit_wait) => return Err(StartError::Exited(exit)),
        };
        let Some(info) = running.peer().peer_info() else {
            stop.cancel();
            return Err(StartError::NoPeerInfo);
        };
        let era = if info.protocol_version.has_initialize() { Era::Legacy } else { Era::Modern };
        let peer = running.peer().clone();
        let service = running.cancellation_token();
        let stopping = Arc::new(AtomicBool::new(false));
        // When rmcp's loop ends (stdout closed, the stream broke), the server
        // is no use any more: end its process too, so the bridge restarts it.
        {
            let (stop, mut exit, stream_closed) = (stop.clone(), exit_rx.clone(), Arc::clone(&stream_closed));
            let stopping = Arc::clone(&stopping);
            tokio::spawn(
                async move {
                    let reason = running.waiting().await;
                    // A process that dies closes its stdout as it goes: give its
                    // exit a moment to land before blaming the stream.
                    let exited =
                        tokio::time::timeout(STREAM_EXIT_GRACE, exit.wait_for(Option::is_some)).await.is_ok();
                    if !exited && !stopping.load(Ordering::Relaxed) {
                        stream_closed.store(true, Ordering::Relaxed);
                        warn!(?reason, "the server closed its MCP stream but kept running; stopping it");
                    }
                    stop.cancel();
                }
                .instrument(span.clone()),
            );
        }
        let unlisten = CancellationToken::new();
        let subscription = (era == Era::Modern).then(|| {
            tokio::spawn(
                listen_for_changes(
                    peer.clone(),
                    Arc::clone(&spec.seq),
                    Arc::clone(&spec.counters),
                    Arc::clone(&name),
                    unlisten.clone(),
                )
                .instrument(span.clone()),
            )
        });
        if info.capabilities.tools.is_none() {
            warn!(server = %name, "server declares no tools capability; the device will offer no tools");
        }
        info!(
            server = %name,
            pid,
            protocol = %info.protocol_version,
            era = ?era,
            server_info = ?info.server_info.as_ref().map(|i| format!("{} {}", i.name, i.version)),
            "MCP server ready"
        );
        Ok(Server {
            peer,
            info,
            era,
            pid,
            name,
            exit: exit_rx,
            stop,
            stopping,
            service: Mutex::new(Some(service)),
            inflight,
            counters: Arc::clone(&spec.counters),
            unlisten,
            subscription: Mutex::new(subscription),
        })
    }

    /// Whether the server speaks 2026-07-28 (no `initialize`): the bridge
    /// then speaks 2026-07-28 to the edge too.
    pub(crate) fn modern(&self) -> bool {
        self.era == Era::Modern
    }

    /// The revision the server and the bridge agreed on.
    pub(crate) fn protocol(&self) -> String {
        self.info.protocol_version.to_string()
    }

    /// The server's `serverInfo` (its name when it gave none).
    pub(crate) fn server_info(&self) -> Value {
        self.info
            .server_info
            .as_ref()
            .and_then(|i| serde_json::to_value(i).ok())
            .unwrap_or_else(|| json!({"name": &*self.name, "version": "unknown"}))
    }

    /// The server's instructions for the model.
    pub(crate) fn instructions(&self) -> Option<&str> {
        self.info.instructions.as_deref()
    }

    /// Every tool the server lists now (rmcp follows every page); none for a
    /// server without the tools capability, which is a device with no tools
    /// rather than one whose every catalog read fails.
    pub(crate) async fn tools(&self) -> Result<Vec<ToolDeclaration>, ServiceError> {
        if self.info.capabilities.tools.is_none() {
            return Ok(Vec::new());
        }
        let tools = self.peer.list_all_tools().await?;
        let mut out = Vec::with_capacity(tools.len());
        for tool in tools {
            let name = tool.name.to_string();
            match serde_json::to_value(&tool).and_then(serde_json::from_value::<ToolDeclaration>) {
                Ok(decl) => out.push(decl),
                Err(e) => {
                    fallback!(self.counters.tools_unreadable, warn, server = %self.name, tool = %name, error = %e, "server tool is not a readable declaration; left out");
                }
            }
        }
        Ok(out)
    }

    /// Waits until the server process has ended (cancel safe).
    pub(crate) async fn exited(&self) -> Exit {
        let mut exit = self.exit.clone();
        wait_exit(&mut exit).await
    }

    /// Stops the server the MCP stdio way: end the listen stream, close its
    /// stdin, give it [`STOP_GRACE`] to exit, then kill it; returns once it is gone.
    ///
    /// The listen stream goes first: a server whose stdin closes with the
    /// stream open answers it on a stdout that is already closed.
    pub(crate) async fn shutdown(&self) -> Exit {
        self.stopping.store(true, Ordering::Relaxed);
        self.unlisten.cancel();
        let subscription = lock(&self.subscription).take();
        if let Some(mut task) = subscription {
            if tokio::time::timeout(STOP_GRACE, &mut task).await.is_err() {
                task.abort();
            }
        }
        if let Some(service) = lock(&self.service).take() {
            service.cancel();
        }
        self.stop.cancel();
        self.exited().await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = lock(&self.subscription).take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seq_starts_at_one_and_only_moves_forward() {
        let clock = SeqClock::new();
        let mut rx = clock.subscribe();
        assert_eq!(clock.current(), 1);
        assert_eq!(clock.bump(), 2);
        assert_eq!(clock.bump(), 3);
        assert!(rx.has_changed().unwrap_or(false));
        assert_eq!(*rx.borrow_and_update(), 3);
    }

    #[test]
    fn the_server_is_named_after_its_program() {
        let cmd = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(&*server_name(&cmd(&["/usr/bin/python3", "server.py"])), "python3");
        assert_eq!(&*server_name(&cmd(&["node"])), "node");
        assert_eq!(&*server_name(&[]), "mcp-server");
    }
}
