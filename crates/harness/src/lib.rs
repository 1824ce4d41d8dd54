//! Simulated clients for tests, the README walk-through and (issue #3) load.
//!
//! - [`device`] — a simulated device speaking the client link: answers calls,
//!   navigates (new manifest, new seq), and misbehaves on request: silent,
//!   late, failing, disconnecting. Honest devices obey the client's own 2 s
//!   answer ceiling; faults deliberately do not.
//! - [`faults`] — weighted, seeded fault mixes for fleets.
//! - [`error`] — why a soak or bench could not run.
//! - [`bench`] — `tether bench`: tether against the bare relay, same run, ratios.
//! - [`relay`] — the bare tokio-tungstenite relay `tether bench` compares with.
//! - [`soak`] — a faulty fleet plus a load driver through `tether-core`, with invariants.
//!
//! Architecture invariant: the harness never depends on `tether-edge`: devices
//! speak only the contract, and the load driver goes through `tether-core`, so
//! both exercise the edge exactly as foreign clients would.

pub mod bench;
pub mod device;
pub mod error;
pub mod faults;
pub mod relay;
pub mod soak;
pub mod stdio_server;

pub use device::{Behavior, DeviceSpec, SimDevice, SimHandle};
pub use error::{FaultSpecError, HarnessError};
