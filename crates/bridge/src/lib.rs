//! `tether bridge`: any stdio MCP server becomes a tether device.
//!
//! The bridge spawns an MCP server, speaks MCP to it with the official Rust
//! SDK (rmcp; whichever revision the server speaks, 2026-07-28 or the
//! `initialize` era), and presents it to a tether edge over `/v1/client` as
//! a device of that same revision (announced at the upgrade for 2026-07-28,
//! so the edge asks `server/discover` and opens a listen stream; a legacy
//! server's device is greeted with `initialize`): the server's identity and
//! instructions, its tools (paged under the frame ceiling), its tool changes,
//! and calls run under the edge's deadline with cancellation both ways.
//!
//! It keeps the device up: a server that exits closes the device connection
//! with a reason and is restarted with jittered exponential backoff; an edge
//! that goes away is redialed while the server keeps running; each new
//! connection declares the tools again. Every fallback moves a counter in
//! [`BridgeCounters`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), tether_bridge::BridgeError> {
//! let config = tether_bridge::BridgeConfig::new(
//!     "ws://127.0.0.1:7878",
//!     "<a tether-client token>",
//!     vec!["python3".into(), "server.py".into()],
//! );
//! let counters = std::sync::Arc::new(tether_bridge::BridgeCounters::default());
//! tether_bridge::run(config, counters, tokio_util::sync::CancellationToken::new()).await
//! # }
//! ```
//!
//! Architecture invariant: the bridge links the contract and rmcp, never
//! `tether-edge` or `tether-core` (`tests/layering.rs`): it reaches the edge
//! only over the wire, as any device would.

mod backoff;
mod counters;
mod error;
mod link;
mod paging;
mod server;
mod supervisor;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use backoff::BackoffPolicy;
pub use counters::BridgeCounters;
pub use error::{BridgeError, ConfigError};

/// The tracing target of the MCP server's own words (its stderr lines and log
/// messages), so they can be filtered apart from the bridge's: `RUST_LOG=mcp_server=info`.
pub const SERVER_LOG_TARGET: &str = server::SERVER_TARGET;

/// How the bridge starts MCP with the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Lifecycle {
    /// Probe with `server/discover` (2026-07-28) and fall back to `initialize`
    /// (2025-11-25) for a legacy server: whatever revision the server speaks.
    #[default]
    Auto,
    /// Only the `initialize` handshake (2025-11-25), for a server whose
    /// probe misbehaves.
    Legacy,
}

/// Who ends a call that runs up to the edge's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlinePolicy {
    /// The bridge gives up this long before the edge's deadline, cancels the
    /// call on the server and answers a structured `server_timeout` error, so
    /// the backend learns the server was stopped rather than "outcome unknown".
    Ahead(Duration),
    /// The bridge leaves the deadline to the edge, whose `notifications/cancelled`
    /// stops the call on the server (the backend gets the edge's timeout); a
    /// backstop 2 s past the deadline cancels it if that notification never comes.
    Edge,
}

impl Default for DeadlinePolicy {
    fn default() -> Self {
        DeadlinePolicy::Ahead(Duration::from_millis(250))
    }
}

/// What to bridge and where.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The edge, `ws://host:port` (`/v1/client` is added when absent).
    pub edge: String,
    /// A `tether-client` token for the device connection.
    pub token: String,
    /// The MCP server: program, then its arguments.
    pub command: Vec<String>,
    /// How MCP starts with the server.
    pub lifecycle: Lifecycle,
    /// Who ends a call at the edge's deadline.
    pub deadline: DeadlinePolicy,
    /// Delays between server restarts and between edge redials.
    pub backoff: BackoffPolicy,
    /// The edge's transport ceiling: no frame the bridge sends is larger.
    pub transport_ceiling: usize,
}

impl BridgeConfig {
    /// A configuration with the defaults: automatic revision, answer before
    /// the edge's deadline, 250 ms to 30 s backoff, the contract's 15,360-byte ceiling.
    pub fn new(edge: impl Into<String>, token: impl Into<String>, command: Vec<String>) -> BridgeConfig {
        BridgeConfig {
            edge: edge.into(),
            token: token.into(),
            command,
            lifecycle: Lifecycle::default(),
            deadline: DeadlinePolicy::default(),
            backoff: BackoffPolicy::default(),
            transport_ceiling: tether_contract::Caps::default().transport_ceiling,
        }
    }

    /// Checks what can be checked before anything starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.command.first().is_none_or(|p| p.is_empty()) {
            return Err(ConfigError::EmptyCommand);
        }
        if !(self.edge.starts_with("ws://") || self.edge.starts_with("wss://")) {
            return Err(ConfigError::EdgeUrl(self.edge.clone()));
        }
        if self.transport_ceiling <= paging::ENVELOPE_RESERVE {
            return Err(ConfigError::Ceiling(self.transport_ceiling));
        }
        Ok(())
    }
}

/// What the bridge is doing now, for an embedding program (and tests) to watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeStatus {
    /// The running server's process id.
    pub server_pid: Option<u32>,
    /// How many times a server was started and finished its MCP handshake.
    pub server_starts: u64,
    /// The MCP revision the running server speaks.
    pub protocol: Option<String>,
    /// The edge session while the device is connected and its manifest applied.
    pub session: Option<String>,
    /// How many edge sessions this bridge has opened.
    pub sessions: u64,
    /// Why the last device connection ended.
    pub last_close: Option<String>,
}

/// Runs the bridge until `shutdown` is cancelled (Ok) or a fatal error,
/// counting into `counters` (which the caller may serve as metrics).
pub async fn run(
    config: BridgeConfig,
    counters: Arc<BridgeCounters>,
    shutdown: CancellationToken,
) -> Result<(), BridgeError> {
    config.validate()?;
    let (status, _) = watch::channel(BridgeStatus::default());
    supervisor::supervise(config, counters, status, shutdown).await
}

/// A bridge running in the background of this program, stopped on drop.
#[derive(Debug)]
pub struct Bridge {
    status: watch::Receiver<BridgeStatus>,
    counters: Arc<BridgeCounters>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), BridgeError>>>,
}

impl Bridge {
    /// Starts a bridge on the current Tokio runtime.
    pub fn start(config: BridgeConfig) -> Result<Bridge, BridgeError> {
        config.validate()?;
        let (status_tx, status) = watch::channel(BridgeStatus::default());
        let counters = Arc::new(BridgeCounters::default());
        let shutdown = CancellationToken::new();
        let task =
            tokio::spawn(supervisor::supervise(config, Arc::clone(&counters), status_tx, shutdown.clone()));
        Ok(Bridge { status, counters, shutdown, task: Some(task) })
    }

    /// A receiver of the bridge's status, to wait for a session or a restart.
    pub fn status(&self) -> watch::Receiver<BridgeStatus> {
        self.status.clone()
    }

    /// The bridge's fallback counters.
    pub fn counters(&self) -> Arc<BridgeCounters> {
        Arc::clone(&self.counters)
    }

    /// Stops the bridge: closes the device connection, stops the server, and
    /// returns how the bridge ended (an error if it had already failed).
    pub async fn stop(mut self) -> Result<(), BridgeError> {
        self.shutdown.cancel();
        self.finish().await
    }

    /// Waits until the bridge ends by itself, which only a fatal error does
    /// (a refused credential, a command that cannot start), and returns it.
    pub async fn join(mut self) -> Result<(), BridgeError> {
        self.finish().await
    }

    async fn finish(&mut self) -> Result<(), BridgeError> {
        match self.task.take() {
            Some(task) => match task.await {
                Ok(ended) => ended,
                Err(e) => Err(BridgeError::Aborted(e.to_string())),
            },
            None => Ok(()),
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Locks `m`, taking the data back from a poisoned lock: a panicked holder
/// must not wedge every later caller.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
