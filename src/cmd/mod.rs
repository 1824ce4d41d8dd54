//! One module per subcommand: its flags (`Args`) and what it does (`run`).

pub(crate) mod bench;
pub(crate) mod bridge;
pub(crate) mod config;
pub(crate) mod eval;
pub(crate) mod gateway;
pub(crate) mod probe;
pub(crate) mod read;
pub(crate) mod serve;
pub(crate) mod sim_device;
pub(crate) mod sim_server;
pub(crate) mod soak;
pub(crate) mod token;
