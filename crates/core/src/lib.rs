//! What an agent backend links to call tools that run on clients.
//!
//! The API is what a backend needs, re-exported at the crate root; the
//! modules are private but `in_process`. Code map:
//!
//! - `link` — the backend link: one socket to an edge, many sessions, blocking calls.
//! - `in_process` — the edge's end of a link inside one process (no socket, no framing).
//! - `turn` — one model turn: the turn-start catalog read (with its single
//!   retry and its no-client-tools fallback) and the dispatcher that gates
//!   every call (name, scope, source, binding, arguments, result shape) within
//!   the per-tool budget.
//! - `discovery` — `find_tools`: its declaration, its BM25F search
//!   (`tether-search`) and its result.
//! - `source` — the `ToolSource` trait: where tools run and how each source
//!   authorizes (session-bound client, or server-side verifying the credential).
//! - `registry` — the server-side sources a backend offers, checked once.
//! - `enforce` — compiled input/output schemas: offline, bounded, linear-time patterns.
//! - `context` — client-declared concept and context as one delimited, capped block of information.
//! - `names` — independent re-validation of namespaced names.
//! - `scope` — caller profiles: which sources and tools a caller sees and
//!   may call, direct or discovery binding, and a latency class.
//! - `error` — a sentence for the model for every error kind.
//! - `counters` — every fallback, counted.
//!
//! Architecture invariant: core never depends on `tether-edge` and names no
//! client or client domain; it speaks only `tether-contract`.

mod context;
mod counters;
pub mod discovery;
mod enforce;
mod error;
pub mod in_process;
mod link;
mod names;
mod registry;
mod scope;
mod source;
mod turn;
mod writes;

pub use context::DEFAULT_MAX_BYTES as CONTEXT_MAX_BYTES;
pub use counters::CoreCounters;
pub use enforce::{SchemaError, ToolSchemas};
pub use error::for_model;
pub use link::{BackendLink, Notification, ProgressSender};
pub use names::check as check_name;
pub use registry::{Registry, RegistryError, FIND_TOOLS};
pub use scope::{Binding, CallerProfile, ProfileError, Profiles};
pub use source::{read_with_retries, AuthPosture, CallContext, LatencyClass, ToolSource};
pub use tether_contract::{ErrorKind, WireError};
pub use turn::{CallOptions, Turn, TurnStart};
