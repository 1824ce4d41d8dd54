//! What an agent backend links to call tools that run on clients.
//!
//! Code map:
//!
//! - [`link`] — the backend link: one socket to an edge, many sessions, blocking calls.
//! - [`turn`] — one model turn: the turn-start catalog read (with its single
//!   retry and its no-client-tools fallback) and the dispatcher that gates
//!   every call (name, scope, source, binding, arguments, result shape) within
//!   the per-tool budget.
//! - [`discovery`] — `find_tools`: its declaration, its BM25F search
//!   (`tether-search`) and its result.
//! - [`source`] — the `ToolSource` trait: where tools run and how each source
//!   authorizes (session-bound client, or server-side verifying the credential).
//! - [`registry`] — the server-side sources a backend offers, checked once.
//! - [`enforce`] — compiled input/output schemas: offline, bounded, linear-time patterns.
//! - [`context`] — client-declared concept and context as one delimited, capped block of information.
//! - [`names`] — independent re-validation of namespaced names.
//! - [`scope`] — caller profiles: which sources and tools a caller sees and
//!   may call, direct or discovery binding, and a latency class.
//! - [`error`] — a sentence for the model for every error kind.
//! - [`counters`] — every fallback, counted.
//!
//! Architecture invariant: core never depends on `tether-edge` and names no
//! client or client domain; it speaks only `tether-contract`.

pub mod context;
pub mod counters;
pub mod discovery;
pub mod enforce;
pub mod error;
pub mod link;
pub mod names;
pub mod registry;
pub mod scope;
pub mod source;
pub mod turn;

pub use counters::CoreCounters;
pub use error::for_model;
pub use link::{BackendLink, Notification, ProgressSender};
pub use registry::{Registry, RegistryError, FIND_TOOLS};
pub use scope::{Binding, CallerProfile, Profiles};
pub use source::{AuthPosture, CallContext, LatencyClass, ToolSource};
pub use tether_contract::{ErrorKind, WireError};
pub use turn::{CallOptions, Turn};
