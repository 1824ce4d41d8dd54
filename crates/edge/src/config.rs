//! Edge configuration: embedded defaults, resolved and checked once.
//!
//! `tether serve` with no flags runs on these defaults. Resolution checks the
//! caps against the transport ceiling and the budget chain, so a deployment
//! that could never meet its own limits refuses to boot with a sentence
//! saying which limit is wrong.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tether_contract::{BudgetError, Budgets, CapError, Caps};

/// The default listen address: loopback, a fixed port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// Bound of each socket's outbound queue; past it a call fails `overloaded`.
pub const DEFAULT_OUTBOUND_QUEUE: usize = 256;

/// Everything the edge needs to run.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// Address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Size caps.
    pub caps: Caps,
    /// Time budgets.
    pub budgets: Budgets,
    /// Where the generated JWT secret is kept.
    pub data_dir: PathBuf,
    /// Explicit JWT secret (wins over the data-dir file; `TETHER_JWT_SECRET` wins over both).
    pub jwt_secret: Option<String>,
    /// How long a peer has to finish the WebSocket upgrade.
    pub handshake_timeout: Duration,
    /// Outbound queue bound per socket.
    pub outbound_queue: usize,
    /// Longest a drain waits for backends to receive their last answers.
    pub shutdown_grace: Duration,
    /// How long a session whose transport went away waits for its device to
    /// resume it (zero: no resume; the session ends with its socket).
    pub resume_grace: Duration,
    /// Longest a drain waits for calls in flight (default: the per-tool budget).
    pub drain_timeout: Duration,
    /// Session events buffered per backend; a slower backend loses events (counted).
    pub backend_event_queue: usize,
    /// Requests one backend link may have in flight; past it they get `overloaded`.
    pub backend_max_in_flight: usize,
    /// How often the edge pings a quiet device.
    pub ping_interval: Duration,
    /// A device that sends nothing (not even a pong) for this long is closed (half-open sockets).
    pub idle_timeout: Duration,
    /// Device connections one principal may hold at once; more get HTTP 429.
    pub max_sessions_per_principal: usize,
    /// Connections one address may hold before authenticating; more are dropped.
    pub max_unauthenticated_per_ip: usize,
    /// Browser origins allowed to upgrade, matched exactly; empty allows any.
    /// Requests without an `Origin` header (native clients) are not affected.
    pub allowed_origins: Vec<String>,
    /// Per-client profiles, matched by the device's `serverInfo.name`.
    pub client_profiles: Vec<ClientProfile>,
    /// Profiles that failed to resolve; their devices fall back to the default caps.
    pub broken_profiles: Vec<BrokenProfile>,
    /// The users' identity provider, whose tokens are accepted beside the edge's own.
    pub identity: Option<crate::idp::IdpConfig>,
    /// Which client tools need an approval, and how much of the write ledger is kept.
    pub writes: WritesConfig,
}

/// The edge's write contract: its approval policy (the floor for every
/// backend: a backend's own policy can ask for more, never less) and the
/// bounds of each session's ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WritesConfig {
    /// Which calls to client tools need an approval.
    pub approval: tether_contract::writes::ApprovalPolicy,
    /// Tools (the device's original names) that need one whatever their annotations say.
    pub approval_tools: Vec<String>,
    /// Approvals, keys and receipts kept per session.
    pub limits: tether_ledger::LedgerLimits,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            caps: Caps::default(),
            budgets: Budgets::default(),
            data_dir: default_data_dir(),
            jwt_secret: None,
            handshake_timeout: Duration::from_secs(10),
            outbound_queue: DEFAULT_OUTBOUND_QUEUE,
            shutdown_grace: Duration::from_secs(2),
            resume_grace: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(12),
            backend_event_queue: 1024,
            backend_max_in_flight: 4096,
            ping_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            max_sessions_per_principal: 64,
            max_unauthenticated_per_ip: 256,
            allowed_origins: Vec::new(),
            client_profiles: Vec::new(),
            broken_profiles: Vec::new(),
            identity: None,
            writes: WritesConfig::default(),
        }
    }
}

/// Why a configuration cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The caps are inconsistent.
    #[error("caps: {0}")]
    Caps(#[from] CapError),
    /// The budget chain does not fit.
    #[error("budgets: {0}")]
    Budgets(#[from] BudgetError),
    /// The outbound queue bound is zero.
    #[error("outbound_queue must be at least 1")]
    OutboundQueue,
}

impl EdgeConfig {
    /// Checks what cannot degrade; run before binding.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.caps.validate()?;
        self.budgets.validate()?;
        if self.outbound_queue == 0 {
            return Err(ConfigError::OutboundQueue);
        }
        Ok(())
    }
}

/// `$TETHER_DATA_DIR`, else `$XDG_DATA_HOME/tether`, else `~/.local/share/tether`, else `./.tether`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TETHER_DATA_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(dir).join("tether");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".local/share/tether");
    }
    PathBuf::from(".tether")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_ones_name_the_limit() {
        assert!(EdgeConfig::default().validate().is_ok());
        let mut c = EdgeConfig::default();
        c.caps.manifest_bytes = 20_000;
        let msg = c.validate().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("manifest_bytes") && msg.contains("15360"), "{msg}");
        let mut c = EdgeConfig::default();
        c.budgets.reread = Duration::from_secs(5);
        let msg = c.validate().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("per_tool"), "{msg}");
    }
}

/// A per-client profile: caps for devices whose `serverInfo.name` matches.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClientProfile {
    /// Profile name (`[clients.NAME]`).
    pub name: String,
    /// Matched against the device's `serverInfo.name`.
    pub server_name: String,
    /// The caps for matching devices.
    pub caps: Caps,
}

/// A profile that failed to resolve; devices it names fall back to defaults (counted).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BrokenProfile {
    /// Profile name.
    pub name: String,
    /// Its `server_name`, when that much was readable.
    pub server_name: Option<String>,
}
