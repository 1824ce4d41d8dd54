//! The tether edge worker (`tether serve`).
//!
//! Devices dial `/v1/client` and declare tools; agent backends dial
//! `/v1/backend` and call them. Code map:
//!
//! - [`server`] — accept loop, mounted routes, in-process backend links, shutdown.
//! - [`http`] — the router on the one port: upgrades, probes, `/metrics`, mounted routes.
//! - [`upgrade`] — who may open a socket: path, origin, subprotocol, credential, limits.
//! - [`session`] — one device session: its phases, calls, catalog reads and read loop.
//! - [`exit`] — why a session ended, and the close code each reason owns.
//! - [`backend`] — one backend link: multiplexed requests over many sessions.
//! - [`hub`] — shared state: the sessions held here, backend events, admission, drain.
//! - [`router`] — the seam backend requests go through by session id: [`router::Local`]
//!   here, or the cluster's router (`tether-cluster`, over NATS) beside it.
//! - [`manifest`] — the applied manifest and the seq rule for swaps.
//! - [`caps`] — the caps applied to a declared catalog (pure).
//! - [`names`] — slugging into `client__…` and the translation table (pure).
//! - [`shared`] — catalogs and schemas many sessions declare alike, held once.
//! - [`auth`] — JWT verification and the signing secret.
//! - [`config`] — embedded defaults, checked once.
//! - [`counters`] — metrics: a counter for every fallback and drop, families, histograms.
//! - [`ws`] — socket settings and the writer loop.
//!
//! Architecture invariant: the edge never depends on `tether-core`; both
//! speak only the types in `tether-contract`.

pub mod auth;
pub mod backend;
pub mod caps;
pub mod config;
pub mod counters;
pub mod exit;
pub mod gate;
pub mod http;
pub mod hub;
pub mod idp;
pub mod manifest;
pub mod names;
pub mod revision;
pub mod router;
pub mod server;
pub mod session;
pub mod shared;
pub mod upgrade;
pub mod ws;

pub use config::EdgeConfig;
pub use hub::Hub;
pub use server::Edge;

pub(crate) use tether_rpc::lock;
