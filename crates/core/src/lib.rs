//! What an agent backend links to call tools that run on clients.
//!
//! Code map:
//!
//! - [`link`] — the backend link: one socket to an edge, many sessions, blocking calls.
//! - [`turn`] — one model turn against one session: the turn-start catalog read
//!   (with its single retry and its no-client-tools fallback) and calls within
//!   the per-tool budget.
//! - [`context`] — client-declared concept and context as one delimited, capped block of information.
//! - [`names`] — independent re-validation of namespaced names.
//! - [`scope`] — caller profiles: which tools a caller sees and may call.
//! - [`error`] — a sentence for the model for every error kind.
//! - [`counters`] — every fallback, counted.
//!
//! Architecture invariant: core never depends on `tether-edge` and names no
//! client or client domain; it speaks only `tether-contract`.

pub mod context;
pub mod counters;
pub mod error;
pub mod link;
pub mod names;
pub mod scope;
pub mod turn;

pub use counters::CoreCounters;
pub use error::for_model;
pub use link::{BackendLink, Notification};
pub use scope::{CallerProfile, Profiles};
pub use tether_contract::{ErrorKind, WireError};
pub use turn::Turn;
