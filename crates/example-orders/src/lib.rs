//! An example server-side tool source: `get_order`, read from an orders
//! backend, and `cancel_order`, a write that runs only with the user's
//! approval bound to the order, the action, the user and the order's state.
//!
//! It shows what core expects of a source that is not a client device, and
//! lives outside core because core names no domain:
//!
//! - [`OrderSource`] verifies the forwarded user credential itself
//!   ([`AuthPosture::VerifiesCredential`](tether_core::AuthPosture)): the
//!   principal comes from the token, never from the arguments.
//! - It authorizes against the ownership index *before* the backend is
//!   touched, so a denied read executes nothing.
//! - Its result shape is an allowlist (`outputSchema` with
//!   `additionalProperties: false`) that core's dispatcher enforces: a backend
//!   answer with an extra field is withheld, not passed on.
//! - Reads retry at most twice within the caller's deadline, never on 401/403;
//!   a backend that does not answer is a timeout whose outcome is unknown.
//!
//! [`snapshot`] holds the fixture-backed [`OrderBackend`] the tests use.

pub mod snapshot;
pub mod source;

pub use snapshot::{Snapshot, SnapshotBackend};
pub use source::{BackendError, JwtVerifier, OrderBackend, OrderSource, CANCEL, SOURCE_ID, TOOL};
