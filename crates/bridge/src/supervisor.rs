//! Keeps the device up: starts the server, dials the edge, restarts a
//! server that exits, redials an edge that goes away.
//!
//! Two backoff sequences run side by side: server restarts and edge redials.
//! A server exit always ends the device connection (the edge is told why)
//! and restarts the server; an edge loss only redials, and the server keeps
//! running (and keeps its state).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use tether_counters::fallback;

use crate::backoff::Backoff;
use crate::counters::BridgeCounters;
use crate::link::{self, ConnectError, LinkEnd, Shared};
use crate::server::{server_name, Exit, SeqClock, Server, StartError, StartSpec};
use crate::{BridgeConfig, BridgeError, BridgeStatus};

/// How a server's time at the edge ended.
enum Served {
    Exited(Exit),
    Shutdown,
    Refused(u16),
}

/// The bridge's main loop; returns Ok on shutdown, Err on a fatal error.
pub(crate) async fn supervise(
    config: BridgeConfig,
    counters: Arc<BridgeCounters>,
    status: watch::Sender<BridgeStatus>,
    shutdown: CancellationToken,
) -> Result<(), BridgeError> {
    let name = server_name(&config.command);
    let span = tracing::info_span!("bridge", server = %name);
    async move {
        let seq = Arc::new(SeqClock::new());
        let shared = Arc::new(Shared {
            seq: Arc::clone(&seq),
            counters: Arc::clone(&counters),
            status,
            ceiling: config.transport_ceiling,
            deadline: config.deadline,
        });
        let spec = StartSpec {
            command: config.command.clone(),
            lifecycle: config.lifecycle,
            seq,
            counters: Arc::clone(&counters),
        };
        let mut restarts = Backoff::new(config.backoff);
        let mut redials = Backoff::new(config.backoff);
        let mut first = true;
        loop {
            if shutdown.is_cancelled() {
                return Ok(());
            }
            let started = tokio::select! {
                started = Server::start(&spec) => started,
                _ = shutdown.cancelled() => return Ok(()),
            };
            let server = match started {
                Ok(server) => Arc::new(server),
                Err(StartError::Spawn(source)) if first => {
                    return Err(BridgeError::Spawn { program: config.command.join(" "), source });
                }
                Err(e) => {
                    let delay = restarts.next_delay();
                    fallback!(counters.server_start_failures, warn, error = %e, retry_in_ms = delay.as_millis(), "MCP server did not start; trying again");
                    if sleep_or_shutdown(delay, &shutdown).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            first = false;
            BridgeCounters::bump(&counters.server_starts);
            shared.status.send_modify(|s| {
                s.server_pid = server.pid;
                s.server_starts += 1;
                s.protocol = Some(server.protocol());
            });
            let up_since = Instant::now();
            let served = serve_edge(&config, &server, &shared, &mut redials, &shutdown).await;
            let exit = match served {
                Served::Exited(exit) => exit,
                Served::Shutdown => {
                    let exit = server.shutdown().await;
                    info!(%exit, "bridge stopped; MCP server stopped");
                    shared.status.send_modify(|s| s.server_pid = None);
                    return Ok(());
                }
                Served::Refused(status) => {
                    server.shutdown().await;
                    shared.status.send_modify(|s| s.server_pid = None);
                    return Err(BridgeError::Refused { status });
                }
            };
            shared.status.send_modify(|s| s.server_pid = None);
            restarts.settle(up_since.elapsed());
            let delay = restarts.next_delay();
            fallback!(counters.server_exits, warn, %exit, restart_in_ms = delay.as_millis(), "MCP server exited; restarting it");
            if sleep_or_shutdown(delay, &shutdown).await {
                return Ok(());
            }
        }
    }
    .instrument(span)
    .await
}

/// Keeps a device connection up for as long as `server` runs.
async fn serve_edge(
    config: &BridgeConfig,
    server: &Arc<Server>,
    shared: &Arc<Shared>,
    redials: &mut Backoff,
    shutdown: &CancellationToken,
) -> Served {
    let counters = &shared.counters;
    loop {
        let connected = tokio::select! {
            connected = link::connect(&config.edge, &config.token, server.modern()) => connected,
            exit = server.exited() => return Served::Exited(exit),
            _ = shutdown.cancelled() => return Served::Shutdown,
        };
        let wait = match connected {
            Ok(ws) => {
                BridgeCounters::bump(&counters.edge_connects);
                info!(edge = %config.edge, "device connection open");
                let since = Instant::now();
                match link::serve(ws, Arc::clone(server), Arc::clone(shared), shutdown).await {
                    LinkEnd::ServerExited(exit) => return Served::Exited(exit),
                    LinkEnd::Shutdown => return Served::Shutdown,
                    LinkEnd::EdgeLost(reason) => {
                        redials.settle(since.elapsed());
                        let delay = redials.next_delay();
                        fallback!(counters.edge_disconnects, warn, %reason, reconnect_in_ms = delay.as_millis(), "device connection ended; the MCP server keeps running");
                        delay
                    }
                }
            }
            Err(ConnectError::Refused(status @ (401 | 403))) => {
                warn!(status, "the edge refused the device credential");
                return Served::Refused(status);
            }
            Err(e) => {
                let delay = redials.next_delay();
                fallback!(counters.edge_connect_failures, warn, edge = %config.edge, error = %e, retry_in_ms = delay.as_millis(), "cannot reach the edge; trying again");
                delay
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            exit = server.exited() => return Served::Exited(exit),
            _ = shutdown.cancelled() => return Served::Shutdown,
        }
    }
}

/// Sleeps `delay`; true when the bridge was told to stop meanwhile.
async fn sleep_or_shutdown(delay: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => false,
        _ = shutdown.cancelled() => true,
    }
}
