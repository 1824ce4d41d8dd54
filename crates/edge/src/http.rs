//! HTTP on the edge's one port, on hyper and axum: the WebSocket upgrades
//! (`/v1/client`, `/v1/backend`), the probes (`/healthz`, `/readyz`),
//! `/metrics`, and the routes the binary mounts (the MCP endpoint).
//!
//! hyper reads and bounds the request head (size and time: the slowloris
//! bound); [`crate::upgrade`] decides who may open a socket; the socket is
//! then served by [`crate::session`] or [`crate::backend`].

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use tether_contract::{BACKEND_PATH, CLIENT_PATH};
use tether_counters::fallback;

use crate::hub::{Hub, IpSlot};
use crate::upgrade::{self, Route};

/// Largest request head the edge reads before answering 431. Also hyper's
/// smallest allowed read buffer: lower, and hyper panics on every connection.
pub const MAX_HEAD: usize = 8 * 1024;

/// What every handler on the edge's port shares.
#[derive(Debug, Clone)]
pub(crate) struct Door {
    pub(crate) hub: Arc<Hub>,
    pub(crate) shutdown: CancellationToken,
    /// Sockets opened through upgrades: shutdown waits for them.
    pub(crate) sockets: TaskTracker,
}

/// One connection's claim on its address's not-yet-authenticated slots.
///
/// The connection holds it until it authenticates: a WebSocket upgrade, or a
/// mounted route whose response the mount's predicate says it authenticated.
/// Then it frees, so a backend with many authenticated connections from one
/// address is not counted as a flood of strangers.
#[derive(Debug, Clone)]
pub(crate) struct Unauthenticated(Arc<Mutex<Option<IpSlot>>>);

impl Unauthenticated {
    pub(crate) fn new(slot: IpSlot) -> Unauthenticated {
        Unauthenticated(Arc::new(Mutex::new(Some(slot))))
    }

    /// This connection proved who it is: it no longer counts against its address.
    pub(crate) fn authenticated(&self) {
        crate::lock(&self.0).take();
    }
}

/// Whether a mounted route's response shows its request was authenticated.
pub type AuthenticatedBy = fn(&Response) -> bool;

/// The router for the edge's port: its own routes plus `mounted`.
pub(crate) fn router(door: Door, mounted: Router, authenticated: AuthenticatedBy) -> Router {
    let mounted =
        mounted.layer(axum::middleware::from_fn(move |request: Request, next: axum::middleware::Next| {
            release_when_authenticated(request, next, authenticated)
        }));
    Router::new()
        .route("/healthz", get(|| async { text(StatusCode::OK, "ok\n") }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(CLIENT_PATH, any(websocket))
        .route(BACKEND_PATH, any(websocket))
        .fallback(not_found)
        .with_state(door)
        .merge(mounted)
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    let mut response = (status, body.into()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

async fn readyz(State(door): State<Door>) -> Response {
    if door.hub.is_draining() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
    }
    // A degraded cluster still serves this edge's own sessions: ready, and says so.
    match door.hub.router().degraded() {
        Some(why) => text(StatusCode::OK, format!("ready (degraded: {why})\n")),
        None => text(StatusCode::OK, "ready\n"),
    }
}

async fn metrics(State(door): State<Door>) -> Response {
    let mut response = (StatusCode::OK, door.hub.metrics.render()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(tether_counters::OPENMETRICS_CONTENT_TYPE));
    response
}

async fn not_found(State(door): State<Door>) -> Response {
    fallback!(door.hub.counters().upgrade_refused, debug, "request for an unknown path answered 404");
    text(
        StatusCode::NOT_FOUND,
        format!("not found: WebSocket endpoints are {CLIENT_PATH} and {BACKEND_PATH}; probes are /healthz, /readyz, /metrics\n"),
    )
}

/// Frees the connection's stranger slot once a mounted route authenticated it
/// (a public route, like a metadata document, never does).
async fn release_when_authenticated(
    request: Request,
    next: axum::middleware::Next,
    authenticated: AuthenticatedBy,
) -> Response {
    let slot = request.extensions().get::<Unauthenticated>().cloned();
    let response = next.run(request).await;
    if authenticated(&response) {
        if let Some(slot) = slot {
            slot.authenticated();
        }
    }
    response
}

/// Whether `request` is a well-formed RFC 6455 upgrade; the client's key when it is.
fn websocket_key(request: &Request) -> Option<HeaderValue> {
    let headers = request.headers();
    let has = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token)))
    };
    let version_13 = headers.get(header::SEC_WEBSOCKET_VERSION).is_some_and(|v| v == "13");
    let ok = request.method() == http::Method::GET
        && has(header::CONNECTION, "upgrade")
        && has(header::UPGRADE, "websocket")
        && version_13;
    ok.then(|| headers.get(header::SEC_WEBSOCKET_KEY).cloned()).flatten()
}

/// `/v1/client` and `/v1/backend`: decide, answer 101, then serve the socket.
async fn websocket(State(door): State<Door>, request: Request) -> Response {
    let Some(key) = websocket_key(&request) else {
        fallback!(
            door.hub.counters().upgrade_refused,
            debug,
            path = request.uri().path(),
            "socket path asked without a WebSocket upgrade; answered 426"
        );
        let mut response =
            text(StatusCode::UPGRADE_REQUIRED, "this endpoint takes a WebSocket upgrade (RFC 6455)\n");
        response.headers_mut().insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        return response;
    };
    let (mut parts, _body) = request.into_parts();
    let accepted = match upgrade::decide(&parts, &door.hub) {
        Ok(accepted) => accepted,
        Err((status, body)) => return text(status, body),
    };
    // Present on every hyper connection served `with_upgrades`.
    let Some(on_upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "this connection cannot be upgraded\n");
    };
    if let Some(slot) = parts.extensions.get::<Unauthenticated>() {
        slot.authenticated();
    }
    let door_for_socket = door.clone();
    door.sockets.spawn(async move {
        let upgraded = tokio::select! {
            upgraded = on_upgrade => upgraded,
            _ = door_for_socket.shutdown.cancelled() => return,
        };
        let upgraded = match upgraded {
            Ok(upgraded) => upgraded,
            Err(e) => {
                debug!(error = %e, "upgrade failed after 101");
                return;
            }
        };
        let config = crate::ws::ws_config(&door_for_socket.hub.config.caps);
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
        serve(door_for_socket, ws, accepted.route).await;
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    headers.extend(accepted.headers);
    response
}

async fn serve<S>(door: Door, ws: WebSocketStream<S>, route: Route)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    match route {
        Route::Client(device, _slot) => {
            // `_slot` lives as long as the socket (not a detached session's grace).
            crate::session::serve_client(door.hub, sink, stream, device, door.shutdown).await
        }
        Route::Backend(principal) => {
            crate::backend::serve_backend(door.hub, sink, stream, principal, door.shutdown).await
        }
    }
}
