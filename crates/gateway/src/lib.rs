//! tether as an MCP server for agent backends: any MCP client (Python,
//! TypeScript, an agent framework) calls the tools on its user's devices over
//! Streamable HTTP at `/mcp`, through tether-core's dispatcher.
//!
//! Code map:
//!
//! - [`auth`] — the bearer token, verified by the edge; 401 with the
//!   protected-resource metadata; the devices a request may reach.
//! - [`devices`] — one device or several: tool names that never collide.
//! - [`handler`] — the rmcp server: list, call, instructions, subscriptions.
//! - [`watch`] — manifest swaps and devices coming and going become `list_changed`.
//! - [`metrics`] — the endpoint's counters.
//!
//! The gateway links `tether-core` and speaks to an edge over the backend
//! link: in process under `tether serve` (the edge's own port), or over a
//! socket as `tether gateway --edge ws://…` where edges stay private. It
//! never depends on `tether-edge`.

mod approval;
pub mod auth;
pub mod devices;
mod handler;
mod memory;
pub mod metrics;
mod tasks;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use tether_contract::Budgets;
use tether_core::{BackendLink, CallerProfile, Notification};

pub use auth::{Authenticated, Scope, MCP_PATH, METADATA_PATH};
pub use metrics::GatewayMetrics;

/// How the MCP endpoint behaves; the defaults fit `tether serve` on loopback.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The URL clients reach the server at (for the resource metadata); by default from `Host`.
    pub public_url: Option<String>,
    /// The identity provider's issuer, advertised as the authorization server.
    pub issuer: Option<String>,
    /// The budget chain (turn-start read, per-tool budget).
    pub budgets: Budgets,
    /// What every MCP caller may reach (default: every client tool, direct binding).
    pub profile: Arc<CallerProfile>,
    /// Largest request body, in bytes.
    pub max_body: usize,
    /// Cap of each device's context block in the instructions, in bytes.
    pub context_bytes: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            public_url: None,
            issuer: None,
            budgets: Budgets::default(),
            profile: Arc::new(CallerProfile::everything()),
            max_body: 1024 * 1024,
            context_bytes: 2048,
        }
    }
}

/// What every request and watcher shares.
#[derive(Debug)]
pub(crate) struct Shared {
    link: BackendLink,
    config: GatewayConfig,
    events: broadcast::Sender<Notification>,
    metrics: GatewayMetrics,
    owners: auth::SessionOwners,
    memory: Arc<memory::Memory>,
}

/// The MCP endpoint over one backend link to an edge.
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    edge_gone: CancellationToken,
}

/// How many edge events a slow watcher may fall behind before it re-lists.
const EVENT_BACKLOG: usize = 1024;

impl Gateway {
    /// Serves MCP over `link` (which must be fresh: the gateway takes its notifications).
    pub fn new(link: BackendLink, config: GatewayConfig) -> Gateway {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let edge_gone = CancellationToken::new();
        let from_edge = link.notifications();
        // Without the edge's events nothing remembered could be kept true: nothing is.
        let memory = Arc::new(memory::Memory::new(from_edge.is_some()));
        match from_edge {
            Some(from_edge) => drop(tokio::spawn(watch::pump(
                from_edge,
                events.clone(),
                Arc::clone(&memory),
                edge_gone.clone(),
            ))),
            None => tracing::warn!(
                "the backend link's notifications were taken; MCP clients will not hear list_changed"
            ),
        }
        let metrics = GatewayMetrics::with_core(link.counters());
        let owners = auth::SessionOwners::default();
        let shared = Arc::new(Shared { link, config, events, metrics, owners, memory });
        Gateway { shared, shutdown: CancellationToken::new(), edge_gone }
    }

    /// Serves MCP over a backend link to an edge in this process: hand the
    /// returned end to `Edge::attach_backend` (no socket, no token).
    pub fn in_process(config: GatewayConfig) -> (Gateway, tether_core::in_process::EdgeEnd) {
        let (link, end) = BackendLink::in_process();
        (Gateway::new(link, config), end)
    }

    /// The routes to serve: `/mcp`, `/mcp/sessions/{id}` and the
    /// protected-resource metadata.
    pub fn router(&self) -> Router {
        let shared = Arc::clone(&self.shared);
        let config = StreamableHttpServerConfig::default()
            // Every request carries a bearer token the edge verifies, so a
            // rebinding page has nothing ambient to ride on: any Host is fine.
            .disable_allowed_hosts()
            .with_max_request_body_bytes(self.shared.config.max_body)
            .with_sse_keep_alive(Some(Duration::from_secs(15)))
            // A 2026-07-28 call that answers with nothing before its result
            // gets one JSON body (one write), not an event stream; progress
            // before the result still streams.
            .with_json_response(true)
            .with_cancellation_token(self.shutdown.child_token());
        let factory_shared = Arc::clone(&shared);
        let service = StreamableHttpService::new(
            move || Ok(handler::McpServer::new(Arc::clone(&factory_shared))),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let mcp = Router::new()
            .route_service(MCP_PATH, service.clone())
            .route_service(&format!("{MCP_PATH}/sessions/{{id}}"), service)
            .layer(axum::middleware::from_fn_with_state(Arc::clone(&shared), auth::authenticate));
        let metadata = Router::new()
            .route(METADATA_PATH, get(auth::metadata))
            .route(auth::METADATA_ROOT_PATH, get(auth::metadata))
            .with_state(shared);
        mcp.merge(metadata)
    }

    /// The endpoint's counters.
    pub fn metrics(&self) -> &GatewayMetrics {
        &self.shared.metrics
    }

    /// Cancel this to end every MCP stream (the edge's shutdown does).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Fires when the link to the edge has closed (a standalone gateway exits then).
    pub fn edge_gone(&self) -> CancellationToken {
        self.edge_gone.clone()
    }
}

/// Serves `router` on `listener` with hyper until `shutdown`: the request
/// head bounded in size (8 KiB) and time (`head_timeout`), as on the edge.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    head_timeout: Duration,
    shutdown: CancellationToken,
) {
    use tower_service::Service;
    let tracker = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            let service =
                hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let mut router = router.clone();
                    async move { router.call(request.map(axum::body::Body::new)).await }
                });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(head_timeout)
                .max_buf_size(8 * 1024);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                outcome = conn.as_mut() => if let Err(e) = outcome {
                    tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
                },
                () = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
    tracker.close();
    tracker.wait().await;
}
