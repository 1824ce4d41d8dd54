//! tether's configuration: one TOML file, `TETHER_*` environment variables
//! and CLI flags, resolved into the edge's [`EdgeConfig`] and core's caller
//! [`Profiles`].
//!
//! It lives apart from both: the edge runs with a checked `EdgeConfig` and
//! never parses a file, and core's `[callers]` table never passes through the
//! edge. Only the binary links this crate.
//!
//! - [`resolve`] — precedence, degradation, and every problem as an [`Issue`].

pub mod resolve;

pub use resolve::{resolve, Flags, Issue, LogFormat, Resolved};
pub use tether_core::Profiles;
pub use tether_edge::EdgeConfig;

use tether_contract::{BudgetError, CapError};

/// Why one setting was refused; its sentence becomes the [`Issue`]'s message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    /// A section or value of the wrong shape (an unknown key, a string for a number).
    #[error("{0}")]
    Shape(String),
    /// Caps that break their own rules.
    #[error(transparent)]
    Caps(#[from] CapError),
    /// Budgets that break the chain.
    #[error(transparent)]
    Budgets(#[from] BudgetError),
    /// A rule of one setting, stated as the sentence to fix it.
    #[error("{0}")]
    Rule(&'static str),
    /// `[auth] jwks_url` that is not http(s).
    #[error("jwks_url must be an http(s) URL, not {0:?}")]
    JwksUrl(String),
    /// A client profile may tighten caps, never loosen the transport ceiling.
    #[error("a client profile cannot raise the transport ceiling above the edge's {0}")]
    CeilingRaised(usize),
    /// `log_format` other than pretty or json.
    #[error("log format must be pretty or json, not {0:?}")]
    LogFormat(String),
}
