//! The bridge's boundary errors: what stops `tether bridge` for good.
//!
//! Everything else (a server that crashes, an edge that drops the socket, a
//! call that fails) is a fallback the bridge survives, logs and counts; only
//! these end [`crate::run`].

/// Why the bridge stopped, or could not start.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The configuration cannot work: fix it and start again.
    #[error("bridge configuration: {0}")]
    Config(#[from] ConfigError),
    /// The MCP server's program could not be started at all on the first try
    /// (not found, not executable): fix the command.
    #[error("cannot start the MCP server `{program}`: {source}")]
    Spawn {
        /// The program that failed to start.
        program: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The edge refused the device credential at the upgrade (HTTP 401 or
    /// 403); reconnecting with the same token cannot help, so mint a fresh one.
    #[error("the edge refused the device credential (HTTP {status}); use a fresh tether-client token")]
    Refused {
        /// The HTTP status of the refusal.
        status: u16,
    },
    /// The bridge's task panicked or was cancelled: a bug, report it.
    #[error("the bridge task ended abnormally: {0}")]
    Aborted(String),
}

/// What is wrong with a [`crate::BridgeConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No command to run.
    #[error("no MCP server command given (tether bridge ... -- CMD ARGS...)")]
    EmptyCommand,
    /// The edge address is not a `ws://` or `wss://` URL.
    #[error("edge address {0:?} must start with ws:// or wss://")]
    EdgeUrl(String),
    /// The transport ceiling leaves no room for a frame.
    #[error("transport ceiling of {0} bytes is too small for any frame")]
    Ceiling(usize),
}
