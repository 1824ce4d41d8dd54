//! Who may open a socket: the decision an upgrade request gets before any
//! session state exists.
//!
//! Credentials are checked here, so a refused peer gets an HTTP status (401,
//! 403, 429, 503) and nothing else. The query string can carry `access_token`
//! for browsers; it is never logged.

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, StatusCode};

use tether_contract::{BACKEND_PATH, CLIENT_PATH, CLIENT_SUBPROTOCOL};
use tether_counters::fallback;

use crate::auth::{self, AuthError, Link};
use crate::hub::{Hub, PrincipalSlot};
use crate::revision::Revision;

/// Which link an accepted upgrade opens, and for whom.
#[derive(Debug)]
pub(crate) enum Route {
    /// A device session: its principal, the credential's remaining life, the
    /// principal's connection slot (held for the session's life), and the MCP
    /// revision it announced.
    Client(crate::session::DeviceUpgrade, PrincipalSlot),
    /// A backend link for this service principal.
    Backend(String),
}

/// An accepted upgrade: where it goes and the headers the 101 carries.
#[derive(Debug)]
pub(crate) struct Accepted {
    /// The link it opens.
    pub(crate) route: Route,
    /// Extra response headers (the chosen subprotocol).
    pub(crate) headers: HeaderMap,
}

/// A refused upgrade: the status and a one-line body.
pub(crate) type Refusal = (StatusCode, String);

fn bearer(parts: &Parts) -> Option<String> {
    if let Some(value) = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        return value.strip_prefix("Bearer ").map(|t| t.trim().to_owned());
    }
    parts.uri.query()?.split('&').find_map(|pair| pair.strip_prefix("access_token=")).map(str::to_owned)
}

/// The MCP revision a device announced at the upgrade: the `MCP-Protocol-Version`
/// header, or `mcp_protocol_version` in the query (browsers cannot set headers).
fn announced_revision(parts: &Parts) -> Option<Revision> {
    if let Some(v) = parts.headers.get(crate::revision::HEADER).and_then(|v| v.to_str().ok()) {
        return Revision::parse(v);
    }
    let query = parts.uri.query()?;
    let prefix = format!("{}=", crate::revision::QUERY);
    query.split('&').find_map(|pair| pair.strip_prefix(prefix.as_str())).and_then(Revision::parse)
}

/// The resume token a reconnecting device presents (`?resume=`).
fn resume_token(parts: &Parts) -> Option<String> {
    let prefix = format!("{}=", tether_contract::RESUME_QUERY);
    parts.uri.query()?.split('&').find_map(|pair| pair.strip_prefix(prefix.as_str())).map(str::to_owned)
}

/// Decides an upgrade: which link, whose credential, and the response headers.
pub(crate) fn decide(parts: &Parts, hub: &Arc<Hub>) -> Result<Accepted, Refusal> {
    let metrics = &hub.metrics;
    let counters = &metrics.counters;
    let path = parts.uri.path();
    if hub.is_draining() {
        fallback!(counters.upgrade_refused, info, path, "upgrade refused: the edge is draining");
        return Err((StatusCode::SERVICE_UNAVAILABLE, "edge is draining; connect to another edge".into()));
    }
    let link = match path {
        CLIENT_PATH => Link::Client,
        BACKEND_PATH => Link::Backend,
        _ => {
            fallback!(counters.upgrade_refused, debug, path, "upgrade refused: no such endpoint");
            return Err((
                StatusCode::NOT_FOUND,
                format!("no such endpoint; dial {CLIENT_PATH} or {BACKEND_PATH}"),
            ));
        }
    };
    if !hub.config.allowed_origins.is_empty() {
        if let Some(origin) = parts.headers.get(header::ORIGIN) {
            let allowed = origin.to_str().is_ok_and(|o| hub.config.allowed_origins.iter().any(|a| a == o));
            if !allowed {
                metrics.auth_refusals.get_or_create(&[("reason", "origin")]).inc();
                fallback!(counters.upgrade_refused, info, path, "upgrade refused: origin not allowed");
                return Err((StatusCode::FORBIDDEN, "origin not allowed".into()));
            }
        }
    }
    let mut headers = HeaderMap::new();
    if let Some(offered) = parts.headers.get(header::SEC_WEBSOCKET_PROTOCOL).and_then(|v| v.to_str().ok()) {
        if !offered.split(',').any(|p| p.trim() == CLIENT_SUBPROTOCOL) {
            fallback!(
                counters.upgrade_refused,
                info,
                path,
                offered,
                "upgrade refused: subprotocol not offered"
            );
            return Err((StatusCode::BAD_REQUEST, format!("subprotocol must be {CLIENT_SUBPROTOCOL}")));
        }
        headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(CLIENT_SUBPROTOCOL));
    }
    let verified = match bearer(parts) {
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
    let claims = match verified {
        Ok(claims) => claims,
        Err(reason) => {
            metrics.auth_refusals.get_or_create(&[("reason", reason.as_str())]).inc();
            fallback!(
                counters.auth_refused,
                info,
                path,
                reason = reason.as_str(),
                "upgrade refused: unauthenticated"
            );
            return Err((StatusCode::UNAUTHORIZED, format!("unauthenticated: {reason}")));
        }
    };
    if link != Link::Client {
        return Ok(Accepted { route: Route::Backend(claims.sub), headers });
    }
    let Some(slot) = hub.principal_slot(&claims.sub) else {
        fallback!(
            counters.principal_limit_refusals,
            info,
            path,
            "upgrade refused: too many connections for this principal"
        );
        return Err((
            StatusCode::TOO_MANY_REQUESTS,
            format!("at most {} device connections per principal", hub.config.max_sessions_per_principal),
        ));
    };
    // The credential's remaining life, in the edge's own clock, so expiry obeys paused time too.
    let expires_in = Some(Duration::from_secs(claims.exp.saturating_sub(auth::now_secs())));
    let device = crate::session::DeviceUpgrade {
        principal: claims.sub,
        expires_in,
        announced: announced_revision(parts),
        resume: resume_token(parts),
    };
    Ok(Accepted { route: Route::Client(device, slot), headers })
}
