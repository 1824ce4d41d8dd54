//! Edges joined over NATS: a backend connected to any edge reaches every
//! session in the cluster.
//!
//! Without a cluster, an edge answers for the sessions it holds
//! ([`tether_edge::router::Local`]). With one, [`Cluster::router`] answers for
//! the rest: a call for a session held elsewhere crosses NATS request/reply to
//! the edge that holds it, which runs it as if its backend had asked.
//!
//! - [`subject`] — the subjects; a subject per session is the directory.
//! - [`wire`] — what edges say to each other, parsed in one place.
//! - [`members`] — which edges are alive (heartbeats, the edge timeout).
//! - [`router`] — the asking side: remote calls, reads, the gathered list.
//! - [`holder`] — the answering side: the sessions this edge holds, served to the others.
//! - [`counters`] — the cluster's counters and gauges.
//!
//! NATS is the trust boundary: whoever may publish on `tether.>` may call any
//! session, so the NATS account is tether's alone (see docs/OPERATIONS.md).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, ConnectOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

use tether_contract::Budgets;
use tether_counters::fallback;
use tether_edge::hub::{BackendEvent, Hub};
use tether_edge::router::Router;

mod counters;
mod holder;
mod members;
mod router;
mod subject;
mod wire;

pub use counters::ClusterCounters;

use counters::ClusterMetrics;
use members::Members;
use router::{ClusterRouter, Waiters};

/// How an edge joins the cluster (`[cluster]`, `tether serve --nats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The NATS server, e.g. `nats://127.0.0.1:4222`.
    pub nats: String,
    /// This edge's name in the cluster (a subject token); a fresh UUID when unset.
    pub name: Option<String>,
    /// A NATS credentials file (`.creds`: the user's JWT and NKey seed), for an account-secured server.
    pub credentials: Option<PathBuf>,
    /// CA certificates (PEM) to trust for the NATS server's TLS; setting it requires TLS.
    pub tls_ca: Option<PathBuf>,
    /// This edge's client certificate (PEM), for a server that verifies clients; with `tls_key`.
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM); with `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// How often this edge says it is alive.
    pub heartbeat: Duration,
    /// Silence after which another edge is lost and calls waiting on it fail.
    pub edge_timeout: Duration,
    /// The cross-edge hop's share of the budget chain, taken from its headroom.
    pub hop: Duration,
    /// How long a read of another edge's session, or the gathered list, waits.
    pub read_timeout: Duration,
    /// How long a request for a session another edge announced keeps asking
    /// when no edge answers: a session moving between edges (its device
    /// resuming elsewhere) is held by neither for a moment.
    pub move_wait: Duration,
    /// Largest message accepted from the cluster side, in bytes.
    pub max_message: usize,
}

impl ClusterConfig {
    /// A cluster on `nats` with the default timings.
    pub fn new(nats: impl Into<String>) -> ClusterConfig {
        ClusterConfig {
            nats: nats.into(),
            name: None,
            credentials: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            heartbeat: Duration::from_millis(250),
            edge_timeout: Duration::from_millis(1000),
            hop: Duration::from_millis(500),
            read_timeout: Duration::from_millis(1000),
            move_wait: Duration::from_millis(500),
            max_message: 1 << 20,
        }
    }

    /// Checks the timings against each other and the budget chain.
    pub fn validate(&self, budgets: &Budgets) -> Result<(), ClusterError> {
        if let Some(name) = &self.name {
            if !subject::is_session_token(name) {
                return Err(ClusterError::Name(name.clone()));
            }
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(ClusterError::ClientCertificate);
        }
        if self.heartbeat.is_zero() || self.heartbeat * 2 > self.edge_timeout {
            return Err(ClusterError::Heartbeat { beat: self.heartbeat, timeout: self.edge_timeout });
        }
        if self.hop.is_zero() || self.hop >= budgets.headroom {
            return Err(ClusterError::Hop { hop: self.hop, headroom: budgets.headroom });
        }
        // A call waiting for a moving session must still be taken, hop included, within the edge timeout.
        if self.move_wait + self.hop > self.edge_timeout {
            return Err(ClusterError::MoveWait { wait: self.move_wait, timeout: self.edge_timeout });
        }
        Ok(())
    }
}

/// Why an edge could not join the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The edge's name cannot be a subject token.
    #[error("cluster name {0:?} must be letters, digits, '-' or '_' (at most 128)")]
    Name(String),
    /// Heartbeats too sparse for the edge timeout (a live edge would be lost).
    #[error("heartbeat {beat:?} must be non-zero and at most half the edge timeout {timeout:?}")]
    Heartbeat {
        /// The heartbeat.
        beat: Duration,
        /// The edge timeout.
        timeout: Duration,
    },
    /// The hop does not fit the budget chain's headroom.
    #[error("the cross-edge hop {hop:?} must be non-zero and shorter than the budget headroom {headroom:?}")]
    Hop {
        /// The hop.
        hop: Duration,
        /// The headroom it is taken from.
        headroom: Duration,
    },
    /// The wait for a moving session does not fit inside the edge timeout.
    #[error("the move wait {wait:?} plus the hop must fit in the edge timeout {timeout:?}")]
    MoveWait {
        /// The move wait.
        wait: Duration,
        /// The edge timeout.
        timeout: Duration,
    },
    /// Half of a client certificate.
    #[error("tls_cert and tls_key go together: set both for a client certificate, or neither")]
    ClientCertificate,
    /// The credentials file could not be read or is not one.
    #[error("NATS credentials {path}: {source}")]
    Credentials {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The NATS address is not one.
    #[error("NATS {url}: {source}")]
    Connect {
        /// The address.
        url: String,
        /// The cause.
        source: async_nats::ConnectError,
    },
    /// A subscription could not be made.
    #[error("NATS subscription: {0}")]
    Subscribe(#[from] async_nats::SubscribeError),
}

/// State both sides of the cluster share.
#[derive(Debug)]
pub(crate) struct Inner {
    /// This edge's name in the cluster.
    pub(crate) me: String,
    pub(crate) config: ClusterConfig,
    pub(crate) budgets: Budgets,
    pub(crate) client: Client,
    pub(crate) members: Members,
    pub(crate) waiters: Waiters,
    pub(crate) metrics: Arc<ClusterMetrics>,
    /// Events this edge published, on their way to NATS in order.
    pub(crate) outbox: mpsc::UnboundedSender<BackendEvent>,
    /// Calls this edge runs for other edges, by reply subject: their cancellation.
    pub(crate) serving: Mutex<HashMap<String, CancellationToken>>,
    /// Other edges' sessions, from their events: closed for backends here if the edge is lost.
    pub(crate) remote: Mutex<HashMap<String, String>>,
    /// Sessions this edge serves to the cluster: cancelling one unsubscribes it.
    pub(crate) held: Mutex<HashMap<String, CancellationToken>>,
    /// The edge's shutdown, once started: held sessions stop serving with it.
    pub(crate) shutdown: std::sync::OnceLock<CancellationToken>,
}

impl Inner {
    pub(crate) fn counters(&self) -> &ClusterCounters {
        &self.metrics.counters
    }

    /// Whether NATS is reachable, as the client's connection events say (the
    /// one source `/readyz`, refusals and calls in flight all read).
    pub(crate) fn connected(&self) -> bool {
        *self.metrics.connection.borrow()
    }

    /// Publishes, counting a failure (the client queues while reconnecting).
    /// Cut off from NATS, nothing is queued: the client's command queue would
    /// fill and stall every task that publishes (the outage is counted once
    /// per message, at debug level; `tether_cluster_connected` says it).
    pub(crate) async fn publish(&self, subject: String, payload: bytes::Bytes) {
        if !self.connected() {
            fallback!(self.counters().publish_failures, debug, %subject, "not published: NATS is unreachable");
            return;
        }
        if let Err(e) = self.client.publish(subject.clone(), payload).await {
            fallback!(self.counters().publish_failures, warn, %subject, error = %e, "could not publish to NATS");
        }
    }
}

/// `options` with the config's credentials and TLS, as async-nats reads them.
async fn secured(
    mut options: ConnectOptions,
    config: &ClusterConfig,
) -> Result<ConnectOptions, ClusterError> {
    if let Some(path) = &config.credentials {
        options = options
            .credentials_file(path)
            .await
            .map_err(|source| ClusterError::Credentials { path: path.display().to_string(), source })?;
    }
    if let Some(ca) = &config.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) {
        options = options.add_client_certificate(cert.clone(), key.clone()).require_tls(true);
    }
    Ok(options)
}

/// This edge's membership in a cluster.
#[derive(Debug)]
pub struct Cluster {
    inner: Arc<Inner>,
    outbox: Mutex<Option<mpsc::UnboundedReceiver<BackendEvent>>>,
}

impl Cluster {
    /// Joins the cluster at `config.nats`. NATS need not be up: the edge
    /// starts degraded and connects when it can.
    pub async fn connect(config: ClusterConfig, budgets: Budgets) -> Result<Cluster, ClusterError> {
        config.validate(&budgets)?;
        let me = config.name.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let metrics = Arc::new(ClusterMetrics::default());
        let on_event = Arc::clone(&metrics);
        let url = config.nats.clone();
        let client = secured(ConnectOptions::new(), &config)
            .await?
            .name(format!("tether-edge {me}"))
            .retry_on_initial_connect()
            .max_reconnects(None)
            .reconnect_delay_callback(|attempt| {
                Duration::from_millis(100 * u64::try_from(attempt).unwrap_or(10).min(10))
            })
            .event_callback(move |event| {
                let metrics = Arc::clone(&on_event);
                let url = url.clone();
                async move { connection_event(&metrics, &url, &event) }
            })
            .connect(config.nats.as_str())
            .await
            .map_err(|source| ClusterError::Connect { url: config.nats.clone(), source })?;
        let (outbox, rx) = mpsc::unbounded_channel();
        info!(edge = %me, nats = %config.nats, "joining the cluster");
        Ok(Cluster {
            inner: Arc::new(Inner {
                me,
                members: Members::new(config.edge_timeout),
                config,
                budgets,
                client,
                waiters: Waiters::default(),
                metrics,
                outbox,
                serving: Mutex::default(),
                remote: Mutex::default(),
                held: Mutex::default(),
                shutdown: std::sync::OnceLock::new(),
            }),
            outbox: Mutex::new(Some(rx)),
        })
    }

    /// This edge's name in the cluster.
    pub fn edge(&self) -> &str {
        &self.inner.me
    }

    /// The router the edge's hub takes: local sessions here, the rest over NATS.
    pub fn router(&self) -> Box<dyn Router> {
        Box::new(ClusterRouter::new(Arc::clone(&self.inner)))
    }

    /// Starts serving `hub`'s sessions to the cluster and hearing the other
    /// edges, until `shutdown`; then says this edge is gone. Once only.
    pub async fn start(&self, hub: &Arc<Hub>, shutdown: CancellationToken) -> Result<(), ClusterError> {
        let Some(outbox) = tether_rpc::lock(&self.outbox).take() else { return Ok(()) };
        let metrics = Arc::clone(&self.inner.metrics);
        hub.metrics.also_render(move || metrics.render());
        holder::start(Arc::clone(&self.inner), Arc::clone(hub), outbox, shutdown).await
    }

    /// Says this edge is leaving (after its sessions have closed), so the
    /// other edges fail calls to it at once instead of by its silence.
    pub async fn leave(&self) {
        holder::leave(&self.inner).await;
    }

    /// The cluster's counters (tests and the soak read them).
    pub fn counters(&self) -> &ClusterCounters {
        self.inner.counters()
    }
}

/// Logs and counts a change of the connection to NATS.
fn connection_event(metrics: &ClusterMetrics, url: &str, event: &async_nats::Event) {
    match event {
        async_nats::Event::Connected => {
            ClusterCounters::bump(&metrics.counters.nats_connects);
            metrics.connected.set(1);
            metrics.connection.send_replace(true);
            *tether_rpc::lock(&metrics.up_since) = Some(tokio::time::Instant::now());
            info!(nats = %url, "connected to NATS: the cluster is whole");
        }
        async_nats::Event::Disconnected => {
            metrics.connected.set(0);
            metrics.connection.send_replace(false);
            *tether_rpc::lock(&metrics.up_since) = None;
            fallback!(metrics.counters.nats_disconnects, warn, nats = %url, "lost NATS: serving this edge's sessions only until it returns");
        }
        other => tracing::debug!(nats = %url, event = %other, "NATS client event"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_that_contradict_each_other_are_refused_at_boot() {
        let budgets = Budgets::default();
        let ok = ClusterConfig::new("nats://127.0.0.1:4222");
        assert!(ok.validate(&budgets).is_ok());
        let sparse = ClusterConfig { heartbeat: ok.edge_timeout, ..ClusterConfig::new("n") };
        assert!(matches!(sparse.validate(&budgets), Err(ClusterError::Heartbeat { .. })));
        let wide = ClusterConfig { hop: budgets.headroom, ..ClusterConfig::new("n") };
        assert!(matches!(wide.validate(&budgets), Err(ClusterError::Hop { .. })));
        // A call waiting for a moving session would be lost to the edge timeout first.
        let long = ClusterConfig { move_wait: ok.edge_timeout, ..ClusterConfig::new("n") };
        let refused = long.validate(&budgets);
        assert!(matches!(refused, Err(ClusterError::MoveWait { .. })), "{refused:?}");
        let named = ClusterConfig { name: Some("a.b".into()), ..ClusterConfig::new("n") };
        assert!(matches!(named.validate(&budgets), Err(ClusterError::Name(_))));
    }
}
