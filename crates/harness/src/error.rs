//! Why a soak or a bench could not run: one enum with stable kinds, so a
//! caller (the CLI, a test) can tell a bad fault spec from a dead edge.

use tether_contract::WireError;

/// A fault mix spec that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    /// A part without `=`.
    #[error("fault {0:?}: expected name=weight")]
    NotNameWeight(String),
    /// A weight that is not a whole number.
    #[error("fault {0:?}: weight must be a whole number")]
    NotWhole(String),
    /// A name that is not a fault.
    #[error("unknown fault {name:?}; known: {known}")]
    Unknown {
        /// The name given.
        name: String,
        /// Every fault name, comma-separated.
        known: String,
    },
    /// Every weight is zero.
    #[error("the fault mix needs at least one positive weight")]
    NoWeight,
}

/// Why a soak or bench stopped before it could report.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The `--faults` spec.
    #[error(transparent)]
    Faults(#[from] FaultSpecError),
    /// A backend link to the edge could not be opened.
    #[error("backend link to {url}: {source}")]
    Link {
        /// The edge's address.
        url: String,
        /// What the link said.
        source: WireError,
    },
    /// A process, file or socket the run needs.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A server the bench started did not print its address.
    #[error("{server} printed {line:?} instead of `listening on …`")]
    Startup {
        /// Which server.
        server: String,
        /// What it printed.
        line: String,
    },
    /// A bench peer (the independent bench's devices or driver) failed or said nothing usable.
    #[error("bench: {0}")]
    Peer(String),
    /// The MCP client could not open its session.
    #[error("MCP client: {0}")]
    Mcp(String),
    /// A token could not be minted.
    #[error("token: {0}")]
    Token(#[from] jsonwebtoken::errors::Error),
    /// A latency histogram could not be built.
    #[error("histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
    /// The report's plot could not be drawn.
    #[error("plot {path}: {detail}")]
    Plot {
        /// Where it was being written.
        path: String,
        /// What the plotting library said.
        detail: String,
    },
}

impl HarnessError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> HarnessError {
        HarnessError::Io { what: what.into(), source }
    }
}
