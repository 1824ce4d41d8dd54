//! The canonical contract between a tether edge and an agent backend.
//!
//! Everything both sides must agree on lives here and nowhere else: the
//! JSON-RPC framing ([`jsonrpc`]), the MCP-shaped client-link payloads
//! ([`mcp`]), the backend-link payloads ([`backend`]), the error kinds with
//! their stable codes ([`error`]), the namespace shape ([`names`]), the size
//! caps ([`limits`]), the limits on declared schemas ([`schema`]), the time budgets ([`budget`])
//! and the write contract: approvals, fingerprints, receipts ([`writes`]),
//! and calls that outlive the turn ([`tasks`]).
//!
//! Architecture invariant: this crate does no I/O and names no client or
//! client domain. It is types and rules only, so both deployables can link it
//! without dragging each other in.

pub mod backend;
pub mod budget;
pub mod error;
pub mod jsonrpc;
pub mod limits;
pub mod mcp;
pub mod names;
pub mod schema;
pub mod tasks;
pub mod writes;

pub use budget::{BudgetError, Budgets, Leg};
pub use error::{ErrorKind, WireError};
pub use limits::{CapError, Caps};
pub use schema::{SchemaLimits, SchemaViolation};

/// Subprotocol a client offers at upgrade; the edge refuses to guess versions.
pub const CLIENT_SUBPROTOCOL: &str = "tether.v1";
/// Query parameter of a device upgrade carrying its resume token
/// (`/v1/client?resume=…`): not every WebSocket client can set headers.
pub const RESUME_QUERY: &str = "resume";
/// Path a device dials.
pub const CLIENT_PATH: &str = "/v1/client";
/// Path an agent backend dials.
pub const BACKEND_PATH: &str = "/v1/backend";
/// JWT audience of a device credential.
pub const AUD_CLIENT: &str = "tether-client";
/// JWT audience of a backend service credential.
pub const AUD_BACKEND: &str = "tether-backend";
/// JWT audience of an operator credential: reads every session, never calls a tool.
pub const AUD_OPERATOR: &str = "tether-operator";
/// MCP protocol revision the client link speaks.
pub const MCP_PROTOCOL_VERSION: &str = "2025-11-25";
