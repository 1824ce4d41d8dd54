//! `OrderSource`: the `get_order` tool, its credential check, its
//! authorization and its retrying read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::warn;

use tether_contract::mcp::{CallToolResult, ToolDeclaration};
use tether_contract::{ErrorKind, WireError};
use tether_core::read_with_retries;
use tether_core::{AuthPosture, CallContext, LatencyClass, ToolSource};

/// The source id caller profiles name.
pub const SOURCE_ID: &str = "orders";
/// The read this source offers.
pub const TOOL: &str = "get_order";
/// The write this source offers: destructive, so it runs only with the user's approval.
pub const CANCEL: &str = "cancel_order";
/// Audience of the user credentials this source accepts.
const AUDIENCE: &str = "tether-client";

/// How a backend read failed, as its transport reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendError {
    /// The backend answered with this HTTP status.
    Status(u16),
    /// The connection failed before an answer.
    Transport,
}

/// The service behind the source (an HTTP API in production).
pub trait OrderBackend: Send + Sync + std::fmt::Debug {
    /// Reads one order; the response is passed on as the tool's result.
    fn read<'a>(&'a self, order_id: &'a str) -> BoxFuture<'a, Result<Value, BackendError>>;

    /// Cancels one order that has not shipped, de-duplicated by `key`: the
    /// same key answers its first cancellation again without cancelling twice.
    fn cancel<'a>(
        &'a self,
        _order_id: &'a str,
        _key: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Value, BackendError>> {
        Box::pin(std::future::ready(Err(BackendError::Status(501))))
    }

    /// How many reads it has executed, for tests and metrics.
    fn executions(&self) -> u64;

    /// How many orders it has cancelled (a replayed key is not one).
    fn cancellations(&self) -> u64 {
        0
    }
}

#[derive(Debug, Deserialize)]
struct UserClaims {
    sub: String,
}

/// Verifies the forwarded user credential (HS256, audience `tether-client`, exp/nbf checked).
#[derive(Clone)]
pub struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JwtVerifier")
    }
}

impl JwtVerifier {
    /// A verifier for tokens signed with `secret`.
    pub fn hs256(secret: &[u8]) -> JwtVerifier {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "nbf", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.set_audience(&[AUDIENCE]);
        JwtVerifier { key: DecodingKey::from_secret(secret), validation }
    }

    /// The principal the credential proves, or `unauthenticated`.
    pub fn principal(&self, credential: Option<&str>) -> Result<String, WireError> {
        let token = credential.ok_or_else(|| {
            WireError::new(
                ErrorKind::Unauthenticated,
                "get_order needs the user's credential; none was forwarded",
            )
        })?;
        jsonwebtoken::decode::<UserClaims>(token, &self.key, &self.validation)
            .map(|d| d.claims.sub)
            .map_err(|e| WireError::new(ErrorKind::Unauthenticated, format!("user credential refused: {e}")))
    }
}

/// The `get_order` source.
#[derive(Debug)]
pub struct OrderSource {
    backend: Arc<dyn OrderBackend>,
    owners: HashMap<String, String>,
    verifier: JwtVerifier,
    attempt_timeout: Duration,
    retry_backoff: Duration,
    denials: AtomicU64,
}

impl OrderSource {
    /// A source reading from `backend`, authorizing against `owners`
    /// (order id → principal), verifying credentials with `verifier`.
    pub fn new(
        backend: Arc<dyn OrderBackend>,
        owners: HashMap<String, String>,
        verifier: JwtVerifier,
    ) -> Self {
        OrderSource {
            backend,
            owners,
            verifier,
            attempt_timeout: Duration::from_secs(3),
            retry_backoff: Duration::from_millis(200),
            denials: AtomicU64::new(0),
        }
    }

    /// Calls refused at authorization.
    pub fn denials(&self) -> u64 {
        self.denials.load(Ordering::SeqCst)
    }

    /// The tool's declaration: a strict input and an allowlisted result shape.
    pub fn declaration() -> ToolDeclaration {
        ToolDeclaration {
            name: TOOL.to_owned(),
            title: Some("Read an order".to_owned()),
            description: Some(
                "Reads the status of one of the user's orders by its id (for example A-104).".to_owned(),
            ),
            input_schema: json!({
                "type": "object",
                "properties": {"order_id": {"type": "string", "pattern": "^[A-Z]-[0-9]{3}$"}},
                "required": ["order_id"],
                "additionalProperties": false
            }),
            output_schema: Some(json!({
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "status": {"type": "string", "enum": ["processing", "shipped", "delivered", "cancelled"]},
                    "as_of": {"type": "string"},
                    "source_version": {"type": "string"}
                },
                "required": ["order_id", "status", "as_of", "source_version"],
                "additionalProperties": false
            })),
            annotations: Some(json!({"readOnlyHint": true, "idempotentHint": true})),
            execution: None,
        }
    }

    /// The cancellation's declaration: destructive (it needs an approval),
    /// idempotent under a key, with an allowlisted result.
    pub fn cancel_declaration() -> ToolDeclaration {
        ToolDeclaration {
            name: CANCEL.to_owned(),
            title: Some("Cancel an order".to_owned()),
            description: Some(
                "Cancels one of the user's orders that has not shipped yet, by its id (for example A-104)."
                    .to_owned(),
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "pattern": "^[A-Z]-[0-9]{3}$"},
                    "reason": {"type": "string", "maxLength": 200}
                },
                "required": ["order_id"],
                "additionalProperties": false
            }),
            output_schema: Some(json!({
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "status": {"type": "string", "enum": ["cancelled"]},
                    "cancellation_id": {"type": "string"},
                    "source_version": {"type": "string"}
                },
                "required": ["order_id", "status", "cancellation_id", "source_version"],
                "additionalProperties": false
            })),
            annotations: Some(
                json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true}),
            ),
            execution: None,
        }
    }

    /// The order a call names, once its user is verified and allowed it.
    fn authorized_order<'a>(
        &self,
        arguments: &'a Value,
        ctx: &CallContext<'_>,
    ) -> Result<&'a str, WireError> {
        let principal = self.verifier.principal(ctx.credential)?;
        let order_id = arguments
            .get("order_id")
            .and_then(Value::as_str)
            .ok_or_else(|| WireError::new(ErrorKind::InvalidArguments, "order_id is required"))?;
        self.authorize(&principal, order_id)?;
        Ok(order_id)
    }

    fn authorize(&self, principal: &str, order_id: &str) -> Result<(), WireError> {
        if self.owners.get(order_id).map(String::as_str) == Some(principal) {
            return Ok(());
        }
        self.denials.fetch_add(1, Ordering::SeqCst);
        warn!(principal, order_id, "get_order denied at authorization");
        // The same answer for "not yours" and "no such order": existence is not leaked.
        Err(WireError::new(ErrorKind::Forbidden, format!("order {order_id} is not readable by this user")))
    }

    async fn read(&self, order_id: &str, ctx: CallContext<'_>) -> Result<Value, WireError> {
        let timeout_ms = u64::try_from(self.attempt_timeout.as_millis()).unwrap_or(u64::MAX);
        read_with_retries(ctx.deadline, self.retry_backoff, |_| async move {
            match tokio::time::timeout(self.attempt_timeout, self.backend.read(order_id)).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(e)) => Err(classify(e)),
                Err(_) => Err(WireError::new(
                    ErrorKind::Timeout,
                    format!("orders backend did not answer within {timeout_ms} ms"),
                )
                .with("leg", "source")
                .with("outcome", "unknown")
                .with("budget_ms", timeout_ms)),
            }
        })
        .await
    }
}

/// One classification of backend failures into the contract's kinds.
fn classify(err: BackendError) -> WireError {
    match err {
        BackendError::Status(401) => {
            WireError::new(ErrorKind::Unauthenticated, "orders backend refused the credential")
        }
        BackendError::Status(403) => WireError::new(ErrorKind::Forbidden, "orders backend refused the read"),
        BackendError::Status(404) => {
            WireError::new(ErrorKind::Forbidden, "order is not readable by this user")
        }
        BackendError::Status(409) => {
            WireError::new(ErrorKind::ClientError, "the order cannot be cancelled in its current state")
                .with("code", "not_cancellable")
                .with("retryable", false)
        }
        BackendError::Status(429) => {
            WireError::new(ErrorKind::RateLimited, "orders backend is rate limiting")
                .with("retry_after_ms", 1000)
        }
        BackendError::Status(s) if s >= 500 => {
            WireError::new(ErrorKind::Overloaded, format!("orders backend failed with HTTP {s}"))
        }
        BackendError::Status(s) => {
            WireError::new(ErrorKind::Internal, format!("orders backend answered HTTP {s}"))
        }
        BackendError::Transport => WireError::channel_closed("orders backend unreachable"),
    }
}

impl ToolSource for OrderSource {
    fn id(&self) -> &str {
        SOURCE_ID
    }

    fn posture(&self) -> AuthPosture {
        AuthPosture::VerifiesCredential
    }

    fn latency(&self) -> LatencyClass {
        LatencyClass::Interactive
    }

    fn tools(&self) -> Vec<ToolDeclaration> {
        vec![OrderSource::declaration(), OrderSource::cancel_declaration()]
    }

    /// A cancellation's approval binds the order's status when it was asked:
    /// approved while processing, it does not run once the order moved on.
    fn approval_state<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Value,
        ctx: CallContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Value>, WireError>> {
        Box::pin(async move {
            if name != CANCEL {
                return Ok(None);
            }
            let order_id = self.authorized_order(arguments, &ctx)?;
            let order = self.read(order_id, ctx).await?;
            Ok(Some(json!({"order_id": order_id, "status": order.get("status")})))
        })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: Value,
        ctx: CallContext<'a>,
    ) -> BoxFuture<'a, Result<CallToolResult, WireError>> {
        Box::pin(async move {
            if name != TOOL && name != CANCEL {
                return Err(WireError::new(
                    ErrorKind::ToolUnavailable,
                    format!("{name} is not an orders tool"),
                ));
            }
            let order_id = self.authorized_order(&arguments, &ctx)?;
            let record = if name == CANCEL {
                // A write is never retried here: the key, passed on, makes a retry the caller's to make safely.
                self.backend.cancel(order_id, ctx.idempotency_key).await.map_err(classify)?
            } else {
                self.read(order_id, ctx).await?
            };
            Ok(CallToolResult {
                content: vec![json!({"type": "text", "text": record.to_string()})],
                structured_content: Some(record),
                ..CallToolResult::default()
            })
        })
    }
}
