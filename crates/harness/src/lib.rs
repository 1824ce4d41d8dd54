//! Simulated clients for tests, the README walk-through and (issue #3) load.
//!
//! - [`device`] — a simulated device speaking the client link: answers calls,
//!   navigates (new manifest, new seq), and misbehaves on request: silent,
//!   late, failing, disconnecting. Honest devices obey the client's own 2 s
//!   answer ceiling; faults deliberately do not.
//! - [`faults`] — weighted, seeded fault mixes for fleets.
//!
//! Architecture invariant: the harness depends on `tether-contract` only, so it
//! exercises the edge exactly as a foreign device would.

pub mod device;
pub mod faults;

pub use device::{Behavior, DeviceSpec, SimDevice, SimHandle};
