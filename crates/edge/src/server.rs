//! The accept loop: upgrade, authenticate, route, and shut down in order.
//!
//! Credentials are checked inside the upgrade callback, so a refused peer gets
//! HTTP 401 and no session state ever exists for it. The query string can
//! carry `access_token` for browsers; it is never logged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{header, HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use tether_contract::{BACKEND_PATH, CLIENT_PATH, CLIENT_SUBPROTOCOL};

use crate::auth::{self, AuthError, Keys, Link, SecretError, SecretSource, Verifier};
use crate::config::{ConfigError, EdgeConfig};
use crate::counters::EdgeCounters;
use crate::counters::EdgeMetrics;
use crate::hub::Hub;
use crate::idp::{Idp, IdpCounters};
use crate::revision::Revision;

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

/// Which link an upgrade opened.
#[derive(Debug)]
enum Route {
    Client(String, Option<Duration>, crate::hub::PrincipalSlot, Option<Revision>),
    Backend(String),
}

/// A bound edge, ready to run.
#[derive(Debug)]
pub struct Edge {
    hub: Arc<Hub>,
    listener: TcpListener,
    shutdown: CancellationToken,
    drain: CancellationToken,
}

impl Edge {
    /// Validates configuration, loads the secret and binds the listener.
    pub async fn bind(config: EdgeConfig) -> Result<Edge, EdgeError> {
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
            hub: Hub::with_metrics(config, Verifier::new(keys, idp), metrics),
            listener,
            shutdown: CancellationToken::new(),
            drain: CancellationToken::new(),
        })
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
                    let hub = Arc::clone(&self.hub);
                    let shutdown = self.shutdown.clone();
                    tracker.spawn(connection(stream, peer, hub, shutdown));
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
        info!("shutdown complete");
    }
}

/// An HTTP refusal before the upgrade: status and a one-line body.
type Refusal = (StatusCode, String);

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
    for session in hub.sessions() {
        session.close_with("drain", CloseCode::Restart, "edge draining; reconnect elsewhere");
    }
    shutdown.cancel();
}

fn refuse(status: StatusCode, body: String) -> Refusal {
    (status, body)
}

fn error_response((status, body): Refusal) -> ErrorResponse {
    let mut resp = ErrorResponse::new(Some(body));
    *resp.status_mut() = status;
    resp
}

fn bearer(req: &Request) -> Option<String> {
    if let Some(value) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        return value.strip_prefix("Bearer ").map(|t| t.trim().to_owned());
    }
    req.uri().query()?.split('&').find_map(|pair| pair.strip_prefix("access_token=")).map(str::to_owned)
}

/// The MCP revision a device announced at the upgrade: the `MCP-Protocol-Version`
/// header, or `mcp_protocol_version` in the query (browsers cannot set headers).
fn announced_revision(req: &Request) -> Option<Revision> {
    if let Some(v) = req.headers().get(crate::revision::HEADER).and_then(|v| v.to_str().ok()) {
        return Revision::parse(v);
    }
    let query = req.uri().query()?;
    let prefix = format!("{}=", crate::revision::QUERY);
    query.split('&').find_map(|pair| pair.strip_prefix(prefix.as_str())).and_then(Revision::parse)
}

/// Decides an upgrade: which link, whose credential, and the response headers.
fn upgrade(req: &Request, mut resp: Response, hub: &Arc<Hub>) -> Result<(Response, Route), Refusal> {
    let metrics = &hub.metrics;
    let counters = &metrics.counters;
    let path = req.uri().path();
    if hub.is_draining() {
        EdgeCounters::bump(&counters.upgrade_refused);
        return Err(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "edge is draining; connect to another edge".into(),
        ));
    }
    let link = match path {
        CLIENT_PATH => Link::Client,
        BACKEND_PATH => Link::Backend,
        _ => {
            EdgeCounters::bump(&counters.upgrade_refused);
            return Err(refuse(
                StatusCode::NOT_FOUND,
                format!("no such endpoint; dial {CLIENT_PATH} or {BACKEND_PATH}"),
            ));
        }
    };
    if !hub.config.allowed_origins.is_empty() {
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let allowed = origin.to_str().is_ok_and(|o| hub.config.allowed_origins.iter().any(|a| a == o));
            if !allowed {
                EdgeCounters::bump(&counters.upgrade_refused);
                metrics.auth_refusals.get_or_create(&[("reason", "origin")]).inc();
                info!(path, "upgrade refused: origin not allowed");
                return Err(refuse(StatusCode::FORBIDDEN, "origin not allowed".into()));
            }
        }
    }
    if let Some(offered) = req.headers().get(header::SEC_WEBSOCKET_PROTOCOL).and_then(|v| v.to_str().ok()) {
        if !offered.split(',').any(|p| p.trim() == CLIENT_SUBPROTOCOL) {
            EdgeCounters::bump(&counters.upgrade_refused);
            return Err(refuse(StatusCode::BAD_REQUEST, format!("subprotocol must be {CLIENT_SUBPROTOCOL}")));
        }
        resp.headers_mut()
            .insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(CLIENT_SUBPROTOCOL));
    }
    let verified = match bearer(req) {
        None => Err(AuthError::Missing),
        Some(token) => hub.auth.verify(&token, link),
    };
    // The leeway forgives clock skew in verification, but a device token already
    // past its `exp` would open a session only to be closed as expired at once
    // (and a client with a fixed token would loop): refuse it here.
    let verified = verified.and_then(|claims| match link {
        Link::Client if claims.exp <= auth::now_secs() => Err(AuthError::Expired),
        _ => Ok(claims),
    });
    match verified {
        Ok(claims) => {
            let route = if link == Link::Client {
                // The credential's remaining life, in the edge's own clock, so expiry obeys paused time too.
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let Some(slot) = hub.principal_slot(&claims.sub) else {
                    EdgeCounters::bump(&counters.principal_limit_refusals);
                    info!(path, "upgrade refused: too many connections for this principal");
                    return Err(refuse(
                        StatusCode::TOO_MANY_REQUESTS,
                        format!(
                            "at most {} device connections per principal",
                            hub.config.max_sessions_per_principal
                        ),
                    ));
                };
                let expires_in = Some(Duration::from_secs(claims.exp.saturating_sub(now)));
                Route::Client(claims.sub, expires_in, slot, announced_revision(req))
            } else {
                Route::Backend(claims.sub)
            };
            Ok((resp, route))
        }
        Err(reason) => {
            EdgeCounters::bump(&counters.auth_refused);
            metrics.auth_refusals.get_or_create(&[("reason", reason.as_str())]).inc();
            info!(path, reason = reason.as_str(), "upgrade refused: unauthenticated");
            Err(refuse(StatusCode::UNAUTHORIZED, format!("unauthenticated: {reason}")))
        }
    }
}

// The upgrade callback's error type is fixed by tungstenite's `Callback` trait.
#[allow(clippy::result_large_err)]
async fn connection(mut stream: TcpStream, peer: SocketAddr, hub: Arc<Hub>, shutdown: CancellationToken) {
    let _ = stream.set_nodelay(true);
    let Some(unauthenticated) = hub.unauthenticated_slot(peer.ip()) else {
        EdgeCounters::bump(&hub.counters().ip_limit_refusals);
        debug!(%peer, "too many unauthenticated connections from this address; dropped");
        return;
    };
    let head = tokio::select! {
        // Boxed: the head buffer and the handshake state are needed once, and
        // unboxed they would stay in this task's future for the session's life.
        r = tokio::time::timeout(hub.config.handshake_timeout, Box::pin(crate::http::read_head(&mut stream))) => r,
        _ = shutdown.cancelled() => return,
    };
    let head = match head {
        Ok(Ok(head)) => head,
        Ok(Err(e)) => {
            debug!(%peer, error = %e, "connection failed before its request head");
            return;
        }
        Err(_) => {
            EdgeCounters::bump(&hub.counters().handshake_timeouts);
            debug!(%peer, "request head did not arrive within the handshake deadline");
            return;
        }
    };
    if let Some(probe) = crate::http::probe_of(&head) {
        if let Err(e) = crate::http::answer(&mut stream, probe, &hub).await {
            debug!(%peer, error = %e, "probe answer failed");
        }
        return;
    }
    if !crate::http::is_upgrade(&head) {
        EdgeCounters::bump(&hub.counters().upgrade_refused);
        let _ = crate::http::not_found(&mut stream).await;
        return;
    }
    let stream = crate::http::Rewind::new(head, stream);
    let mut route = None;
    let callback = |req: &Request, resp: Response| {
        let (resp, decided) = upgrade(req, resp, &hub).map_err(error_response)?;
        route = Some(decided);
        Ok(resp)
    };
    let config = crate::ws::ws_config(&hub.config.caps);
    let handshake = Box::pin(tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)));
    let ws = tokio::select! {
        r = tokio::time::timeout(hub.config.handshake_timeout, handshake) => r,
        _ = shutdown.cancelled() => return,
    };
    let ws = match ws {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            debug!(%peer, error = %e, "upgrade failed");
            return;
        }
        Err(_) => {
            EdgeCounters::bump(&hub.counters().handshake_timeouts);
            debug!(%peer, "upgrade did not finish within the handshake deadline");
            return;
        }
    };
    // Authenticated now: this connection no longer counts against its address.
    drop(unauthenticated);
    let (sink, stream) = ws.split();
    match route {
        Some(Route::Client(principal, expires_in, _slot, announced)) => {
            // `_slot` lives as long as the session: the principal's count drops when it ends.
            crate::session::serve_client(hub, sink, stream, principal, expires_in, announced, shutdown).await
        }
        Some(Route::Backend(principal)) => {
            crate::backend::serve_backend(hub, sink, stream, principal, shutdown).await
        }
        None => warn!(%peer, "upgrade completed without a route"),
    }
}
