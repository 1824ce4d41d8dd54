//! Who is calling, and which devices the call may reach.
//!
//! The gateway holds no keys. Every request's bearer token goes to the edge
//! as a `sessions/list` read: the edge verifies it exactly as it verifies a
//! device's (its own secret, or the identity provider's JWKS) and answers with
//! the sessions that user owns. A missing or refused token is 401 with
//! `WWW-Authenticate` naming the protected-resource metadata (RFC 9728), as
//! MCP's authorization spec asks; an operator credential is 403 (it reads
//! sessions for operations and calls no tools).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use tether_contract::backend::SessionInfo;
use tether_contract::ErrorKind;
use tether_counters::fallback;

use crate::memory::Known;
use crate::metrics::GatewayCounters;
use crate::Shared;

/// Where the MCP endpoint lives on its port.
pub const MCP_PATH: &str = "/mcp";
/// The protected-resource metadata document for [`MCP_PATH`] (RFC 9728 §3.1).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
/// The same document at the root well-known location, for clients that look there first.
pub const METADATA_ROOT_PATH: &str = "/.well-known/oauth-protected-resource";

/// Marks a response whose request the gateway authenticated: the server it is
/// mounted on may stop counting that connection as a stranger's.
#[derive(Debug, Clone, Copy)]
pub struct Authenticated;

/// Who opened each MCP session (2025-11-25 sessions carry `Mcp-Session-Id`):
/// a session answers only the user who opened it, whatever valid token
/// another user presents with its id.
#[derive(Debug, Default)]
pub(crate) struct SessionOwners {
    owners: std::sync::Mutex<std::collections::HashMap<String, (String, tokio::time::Instant)>>,
}

/// Most MCP sessions remembered; past it the oldest owner entries go first.
const MAX_SESSIONS: usize = 100_000;

impl SessionOwners {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (String, tokio::time::Instant)>> {
        self.owners.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bind(&self, session: &str, principal: &str) {
        let mut owners = self.lock();
        if owners.len() >= MAX_SESSIONS {
            if let Some(oldest) = owners.iter().min_by_key(|(_, (_, at))| *at).map(|(id, _)| id.clone()) {
                owners.remove(&oldest);
            }
        }
        owners.insert(session.to_owned(), (principal.to_owned(), tokio::time::Instant::now()));
    }

    /// False when `session` was opened by someone other than `principal`.
    fn allows(&self, session: &str, principal: &str) -> bool {
        self.lock().get(session).is_none_or(|(owner, _)| owner == principal)
    }

    fn forget(&self, session: &str) {
        self.lock().remove(session);
    }
}

/// The MCP session header (Streamable HTTP, 2025-11-25).
const SESSION_HEADER: &str = "mcp-session-id";

/// A verified caller and the devices this request may reach.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The bearer token, forwarded as the turn's user credential.
    pub token: String,
    /// The verified principal.
    pub principal: String,
    /// The user's sessions this request reaches (one, on `/mcp/sessions/{id}`).
    pub sessions: Vec<SessionInfo>,
    /// The session id when the path pins one device.
    pub pinned: Option<String>,
    /// What the endpoint remembers of this token on this path (its turn starts).
    pub(crate) known: Option<Arc<Known>>,
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned()).filter(|t| !t.is_empty())
}

/// The URL clients reach this server at: configured, or from the `Host` header.
fn base_url(shared: &Shared, headers: &HeaderMap) -> String {
    if let Some(url) = &shared.config.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    format!("http://{host}")
}

fn challenge(
    shared: &Shared,
    headers: &HeaderMap,
    error: Option<&str>,
    status: StatusCode,
    body: &str,
) -> Response {
    let metadata = format!("{}{METADATA_PATH}", base_url(shared, headers));
    let mut value = format!("Bearer resource_metadata=\"{metadata}\"");
    if let Some(error) = error {
        value.push_str(&format!(", error=\"{error}\""));
    }
    let mut response = (status, format!("{body}\n")).into_response();
    if let Ok(v) = HeaderValue::from_str(&value) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    response
}

/// The session a path pins (`/mcp/sessions/{id}`), if any.
fn pinned(path: &str) -> Option<String> {
    path.strip_prefix(MCP_PATH)?.strip_prefix("/sessions/").map(|id| id.trim_end_matches('/').to_owned())
}

/// Verifies the bearer token with the edge and attaches the caller's [`Scope`].
pub(crate) async fn authenticate(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers().clone();
    let Some(token) = bearer(&headers) else {
        fallback!(shared.metrics.counters.unauthenticated, debug, path = %request.uri().path(), "MCP request refused: no bearer token");
        return challenge(&shared, &headers, None, StatusCode::UNAUTHORIZED, "a bearer token is required");
    };
    let pinned = pinned(request.uri().path());
    let known = match shared.memory.known(&token, pinned.as_deref()) {
        Some(known) => {
            GatewayCounters::bump(&shared.metrics.counters.requests_remembered);
            known
        }
        None => match ask_edge(&shared, &headers, &token, pinned.as_deref()).await {
            Ok(known) => known,
            Err(refused) => return refused,
        },
    };
    let principal = known.principal.clone();
    let claimed = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(session) = &claimed {
        if !shared.owners.allows(session, &principal) {
            fallback!(shared.metrics.counters.forbidden, info, %principal, "MCP request refused: its session was opened by another user");
            return (StatusCode::NOT_FOUND, "no such MCP session\n").into_response();
        }
    }
    let ends_session = request.method() == http::Method::DELETE;
    let sessions = known.sessions.clone();
    let scope = Scope { token, principal: principal.clone(), sessions, pinned, known: Some(known) };
    request.extensions_mut().insert(scope);
    let mut response = next.run(request).await;
    match (&claimed, response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())) {
        (None, Some(opened)) => shared.owners.bind(opened, &principal),
        (Some(session), _) if ends_session => shared.owners.forget(session),
        _ => {}
    }
    response.extensions_mut().insert(Authenticated);
    response
}

/// 503 with `Retry-After`: the edge could not answer who the caller is.
fn unavailable(body: &'static str) -> Response {
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Asks the edge who `token` is and which of its user's sessions the path
/// reaches (`pinned`: its one session); remembers an answer that admits the
/// request, and answers any other with the response the client gets.
async fn ask_edge(
    shared: &Shared,
    headers: &HeaderMap,
    token: &str,
    pinned: Option<&str>,
) -> Result<Arc<Known>, Response> {
    let budget = shared.config.budgets.turn_start;
    // Taken before asking: an event that lands while the answer travels keeps it from being remembered.
    let epoch = shared.memory.epoch();
    // A pinned path asks about its one session, not every session the user has.
    let listed = match pinned {
        Some(id) => shared.link.session_info(id, token, budget).await,
        None => shared.link.sessions(token, budget).await,
    };
    let list = match listed {
        Ok(list) => list,
        Err(e) if matches!(e.kind, ErrorKind::Unauthenticated | ErrorKind::Forbidden) => {
            fallback!(shared.metrics.counters.unauthenticated, info, reason = %e.message, "MCP request refused: the edge did not accept its token");
            return Err(challenge(
                shared,
                headers,
                Some("invalid_token"),
                StatusCode::UNAUTHORIZED,
                "the bearer token was refused",
            ));
        }
        Err(e) => {
            fallback!(shared.metrics.counters.edge_unavailable, warn, error = %e, "MCP request answered 503: the edge could not be asked who the caller is");
            return Err(unavailable("the tool broker is unavailable; retry shortly\n"));
        }
    };
    let Some(reader) = list.reader else {
        fallback!(
            shared.metrics.counters.edge_unavailable,
            warn,
            "MCP request answered 503: the edge did not say who the caller is (an older edge)"
        );
        return Err(unavailable("the edge is too old for the MCP endpoint\n"));
    };
    if reader.operator {
        fallback!(shared.metrics.counters.forbidden, info, operator = %reader.principal, "MCP request refused: operator credentials call no tools");
        return Err(challenge(
            shared,
            headers,
            Some("insufficient_scope"),
            StatusCode::FORBIDDEN,
            "an operator credential reads sessions; it calls no tools",
        ));
    }
    // A list the edge could not gather from its whole cluster serves this request only.
    let expires_at = if list.partial {
        fallback!(shared.metrics.counters.lists_not_remembered, debug, principal = %reader.principal, "the edge's session list is partial (its cluster is unreachable); not remembered");
        None
    } else {
        reader.expires_at
    };
    let mut sessions = list.sessions;
    if let Some(id) = pinned {
        sessions.retain(|s| s.session == id);
        if sessions.is_empty() {
            return Err(
                (StatusCode::NOT_FOUND, format!("no connected session {id} of yours\n")).into_response()
            );
        }
    }
    Ok(shared.memory.remember(token, pinned, epoch, reader.principal, sessions, expires_at))
}

/// The protected-resource metadata document (RFC 9728) for the MCP endpoint.
pub(crate) async fn metadata(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let base = base_url(&shared, &headers);
    let mut document = json!({
        "resource": format!("{base}{MCP_PATH}"),
        "bearer_methods_supported": ["header"],
        "resource_name": "tether: tools that run on the user's devices",
    });
    if let Some(issuer) = &shared.config.issuer {
        document["authorization_servers"] = json!([issuer]);
    }
    Json(document).into_response()
}
