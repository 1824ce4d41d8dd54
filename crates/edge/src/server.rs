//! The accept loop: bind, serve each connection over HTTP, and shut down in order.
//!
//! Every connection is served by hyper with the router of [`crate::http`]:
//! upgrades to device and backend sockets, probes, metrics, and routes the
//! binary mounts. Draining turns `/readyz` false, finishes calls in flight,
//! and tells devices to reconnect elsewhere.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use futures::{Sink, Stream};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;
use tracing::{debug, info, warn};

use tether_counters::fallback;

use crate::auth::{Keys, SecretError, SecretSource, Verifier};
use crate::config::{ConfigError, EdgeConfig};
use crate::counters::EdgeMetrics;
use crate::exit::Exit;
use crate::http::{Door, Unauthenticated, MAX_HEAD};
use crate::hub::Hub;
use crate::idp::{Idp, IdpCounters};

/// Why the edge could not start.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// Configuration cannot run.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// The JWT secret could not be loaded or created.
    #[error("{0}")]
    Secret(#[from] SecretError),
    /// The identity provider's key file could not be loaded.
    #[error("identity provider: {0}")]
    Idp(#[from] crate::idp::IdpError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// A bound edge, ready to run.
#[derive(Debug)]
pub struct Edge {
    hub: Arc<Hub>,
    listener: TcpListener,
    shutdown: CancellationToken,
    drain: CancellationToken,
    mounted: Router,
    authenticated: crate::http::AuthenticatedBy,
    sockets: TaskTracker,
}

impl Edge {
    /// Validates configuration, loads the secret and binds the listener.
    pub async fn bind(config: EdgeConfig) -> Result<Edge, EdgeError> {
        Edge::bind_routed(config, Box::new(crate::router::Local)).await
    }

    /// As [`Edge::bind`], with backend requests going through `router` (a
    /// cluster router reaches sessions other edges hold).
    pub async fn bind_routed(
        config: EdgeConfig,
        router: Box<dyn crate::router::Router>,
    ) -> Result<Edge, EdgeError> {
        config.validate()?;
        let (keys, source) = Keys::load(config.jwt_secret.as_deref(), &config.data_dir)?;
        match &source {
            SecretSource::Created(p) => info!(path = %p.display(), "generated a new JWT secret"),
            SecretSource::File(p) => info!(path = %p.display(), "using JWT secret file"),
            SecretSource::Env => info!("using JWT secret from TETHER_JWT_SECRET"),
            SecretSource::Config => info!("using JWT secret from configuration"),
        }
        let metrics = EdgeMetrics::default();
        let idp = match &config.identity {
            Some(idp) => Some(Idp::load(idp.clone(), IdpCounters::from(&metrics.counters)).await?),
            None => None,
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| EdgeError::Bind { addr: config.listen, source })?;
        Ok(Edge {
            hub: Hub::with_router(config, Verifier::new(keys, idp), metrics, router),
            listener,
            shutdown: CancellationToken::new(),
            drain: CancellationToken::new(),
            mounted: Router::new(),
            authenticated: |_| false,
            sockets: TaskTracker::new(),
        })
    }

    /// Serves `routes` on the edge's port beside its own (the MCP endpoint).
    ///
    /// `authenticated` says from a response whether its request proved who it
    /// is; such a connection stops counting against its address's limit on
    /// unauthenticated connections (a public route never should).
    pub fn mount(mut self, routes: Router, authenticated: crate::http::AuthenticatedBy) -> Edge {
        self.mounted = self.mounted.merge(routes);
        self.authenticated = authenticated;
        self
    }

    /// Serves a backend link inside this process for `principal`, as a socket
    /// on `/v1/backend` is served but with no TCP, no WebSocket and no token:
    /// `requests` are the link's frames, `answers` where the edge's go.
    pub fn attach_backend<S, W>(&self, principal: &str, answers: W, requests: S)
    where
        S: Stream<Item = Result<Message, WsError>> + Unpin + Send + 'static,
        W: Sink<Message, Error = WsError> + Unpin + Send + 'static,
    {
        let (hub, shutdown, principal) = (Arc::clone(&self.hub), self.shutdown.clone(), principal.to_owned());
        self.sockets.spawn(async move {
            info!(%principal, "in-process backend link attached");
            crate::backend::serve_backend(hub, answers, requests, principal, shutdown).await;
        });
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The shared state, for inspection and tests.
    pub fn hub(&self) -> Arc<Hub> {
        Arc::clone(&self.hub)
    }

    /// Cancel this to stop the edge: stop accepting, fail calls, close with 1001.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The signing keys (the CLI mints tokens with the same secret).
    pub fn keys(&self) -> &Keys {
        self.hub.auth.own()
    }

    /// Cancel this to drain: `/readyz` turns false, new sessions and calls are
    /// refused, calls in flight finish within their budgets, devices are told to
    /// reconnect elsewhere (1012), then the edge shuts down.
    pub fn drain_token(&self) -> CancellationToken {
        self.drain.clone()
    }

    /// Accepts connections until shutdown, draining first when asked to.
    pub async fn run(self) {
        let tracker = TaskTracker::new();
        let door = Door {
            hub: Arc::clone(&self.hub),
            shutdown: self.shutdown.clone(),
            sockets: self.sockets.clone(),
        };
        let router = crate::http::router(door.clone(), self.mounted, self.authenticated);
        if let Some(idp) = self.hub.auth.idp() {
            idp.spawn_refresher(self.shutdown.clone());
        }
        let mut draining = false;
        loop {
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                _ = self.shutdown.cancelled() => break,
                _ = self.drain.cancelled(), if !draining => {
                    draining = true;
                    tokio::spawn(drain(Arc::clone(&self.hub), self.shutdown.clone()));
                    continue;
                }
            };
            match accepted {
                Ok((stream, peer)) => {
                    tracker.spawn(connection(stream, peer, door.clone(), router.clone()));
                }
                Err(e) => {
                    // Out of fds and friends: back off briefly instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        drop(self.listener);
        info!(sessions = self.hub.session_count(), "shutting down: listener closed, draining connections");
        tracker.close();
        tracker.wait().await;
        self.sockets.close();
        self.sockets.wait().await;
        info!("shutdown complete");
    }
}

/// Finishes calls in flight (bounded by the drain timeout), tells devices to
/// reconnect elsewhere, then triggers shutdown.
async fn drain(hub: Arc<Hub>, shutdown: CancellationToken) {
    hub.start_draining();
    let in_flight = hub.calls_in_flight();
    info!(
        sessions = hub.session_count(),
        in_flight, "draining: not ready, refusing new work, finishing calls in flight"
    );
    let deadline = tokio::time::Instant::now() + hub.config.drain_timeout;
    if hub.wait_idle(deadline).await {
        info!("drain: no calls in flight");
    } else {
        warn!(in_flight = hub.calls_in_flight(), "drain timeout reached with calls still in flight");
    }
    // Devices are told to go elsewhere (1012) and their sessions wait here,
    // detached, for the edge they resume on to claim them (their keyed
    // receipts and tasks go with the claim). Shutdown waits for those claims,
    // up to the shutdown grace; sessions nobody claimed then close.
    for session in hub.sessions() {
        session.leave(Exit::Draining);
    }
    let handover = tokio::time::Instant::now() + hub.config.shutdown_grace;
    let waiting = || hub.sessions().iter().filter(|s| !s.handed_over()).count();
    while waiting() > 0 && tokio::time::Instant::now() < handover {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match waiting() {
        0 => info!("drain: every session handed over or closed"),
        left => info!(left, "drain: sessions not claimed within the shutdown grace close now"),
    }
    // Keyed calls that reached a claimed session meanwhile follow it to its
    // new edge while this one can still carry their outcomes back.
    for session in hub.sessions() {
        session.step_aside();
    }
    if !hub.wait_idle(tokio::time::Instant::now() + hub.config.shutdown_grace).await {
        warn!(
            in_flight = hub.calls_in_flight(),
            "drain: calls following their sessions still in flight at shutdown"
        );
    }
    shutdown.cancel();
}

/// Serves one TCP connection with hyper until it closes, is upgraded, or the
/// edge shuts down. hyper bounds the request head in size ([`MAX_HEAD`], 431)
/// and in time (the handshake deadline: the slowloris bound).
async fn connection(stream: TcpStream, peer: SocketAddr, door: Door, router: Router) {
    let _ = stream.set_nodelay(true);
    let Some(slot) = door.hub.unauthenticated_slot(peer.ip()) else {
        fallback!(door.hub.counters().ip_limit_refusals, debug, %peer, "too many unauthenticated connections from this address; dropped");
        return;
    };
    let unauthenticated = Unauthenticated::new(slot);
    let per_request = unauthenticated.clone();
    // A head timeout on a connection that already served a request is an idle keep-alive closing, not slowloris.
    let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = Arc::clone(&served);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        seen.store(true, std::sync::atomic::Ordering::Relaxed);
        request.extensions_mut().insert(per_request.clone());
        let mut router = router.clone();
        async move { router.call(request.map(axum::body::Body::new)).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(door.hub.config.handshake_timeout)
        .max_buf_size(MAX_HEAD);
    let conn = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let outcome = tokio::select! {
        outcome = conn.as_mut() => outcome,
        _ = door.shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(door.hub.config.shutdown_grace, conn.as_mut()).await {
                Ok(outcome) => outcome,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = outcome {
        if e.is_timeout() && !served.load(std::sync::atomic::Ordering::Relaxed) {
            fallback!(door.hub.counters().handshake_timeouts, debug, %peer, "request head did not arrive within the handshake deadline");
        } else if e.is_timeout() {
            debug!(%peer, "idle keep-alive connection closed at the head deadline");
        } else {
            debug!(%peer, error = %e, "HTTP connection ended with an error");
        }
    }
    drop(unauthenticated);
}
