//! One model turn against one client session.
//!
//! [`Turn::begin`] reads the session's catalog once, at turn start, within
//! its own 2 s budget and one retry after a short backoff; that retry is
//! deliberately outside the mid-turn chain. If the read still fails the turn
//! proceeds without client tools (logged and counted), never blocked.
//! [`Turn::call`] re-validates the name and enforces the 12 s per-tool budget.

use std::sync::Arc;

use serde_json::Value;
use tracing::{info, warn};

use tether_contract::backend::{CallMeta, CallParams, Manifest};
use tether_contract::mcp::{CallToolResult, ToolDeclaration};
use tether_contract::{Budgets, ErrorKind, WireError};

use crate::counters::CoreCounters;
use crate::link::BackendLink;
use crate::names;
use crate::scope::CallerProfile;

/// A turn's view of one session: its tools and how to call them.
#[derive(Debug)]
pub struct Turn<'a> {
    link: &'a BackendLink,
    session: String,
    budgets: Budgets,
    turn_id: Option<String>,
    manifest: Option<Manifest>,
    tools: Vec<ToolDeclaration>,
    degraded: Option<WireError>,
    counters: Arc<CoreCounters>,
    profile: Arc<CallerProfile>,
    credential: Option<String>,
}

fn validated(manifest: &Manifest, counters: &CoreCounters) -> Vec<ToolDeclaration> {
    manifest
        .tools
        .iter()
        .filter(|t| match names::check(&t.name) {
            Ok(()) => true,
            Err(violation) => {
                CoreCounters::bump(&counters.names_rejected);
                warn!(session = %manifest.session, name = %t.name, %violation, "edge offered an off-namespace tool name; refused");
                false
            }
        })
        .cloned()
        .collect()
}

impl<'a> Turn<'a> {
    /// Begins a turn that may reach every client tool (see [`Turn::begin_scoped`]).
    pub async fn begin(link: &'a BackendLink, session: &str, budgets: Budgets) -> Turn<'a> {
        Turn::begin_scoped(link, session, budgets, Arc::new(CallerProfile::everything())).await
    }

    /// Begins a turn under a caller profile: `turn/begin` plus the catalog read,
    /// retried once, degrading to no client tools; only tools the profile allows
    /// are listed, and every call re-checks the profile.
    pub async fn begin_scoped(
        link: &'a BackendLink,
        session: &str,
        budgets: Budgets,
        profile: Arc<CallerProfile>,
    ) -> Turn<'a> {
        let counters = link.counters();
        let mut turn = Turn {
            link,
            session: session.to_owned(),
            budgets,
            turn_id: None,
            manifest: None,
            tools: Vec::new(),
            degraded: None,
            counters,
            profile,
            credential: None,
        };
        let mut last = None;
        for attempt in 0..2 {
            if attempt == 1 {
                CoreCounters::bump(&turn.counters.turn_start_retries);
                tokio::time::sleep(budgets.turn_start_backoff).await;
            }
            match turn.read_catalog().await {
                Ok(()) => return turn,
                Err(e) => {
                    let permanent = matches!(
                        e.kind,
                        ErrorKind::SessionNotFound | ErrorKind::Unauthenticated | ErrorKind::Forbidden
                    );
                    last = Some(e);
                    if permanent {
                        break;
                    }
                }
            }
        }
        let err = last.unwrap_or_else(|| WireError::new(ErrorKind::Internal, "turn-start read failed"));
        CoreCounters::bump(&turn.counters.turn_start_fallbacks);
        warn!(session, error = %err, "turn-start catalog read failed; the turn proceeds without client tools");
        turn.degraded = Some(err);
        turn
    }

    async fn read_catalog(&mut self) -> Result<(), WireError> {
        let deadline = tokio::time::Instant::now() + self.budgets.turn_start;
        let begun = self.link.begin_turn(&self.session, self.budgets.turn_start).await?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let manifest = self.link.list_tools(&self.session, left).await?;
        self.turn_id = Some(begun.turn);
        self.apply(manifest);
        Ok(())
    }

    fn apply(&mut self, manifest: Manifest) {
        let profile = Arc::clone(&self.profile);
        self.tools =
            validated(&manifest, &self.counters).into_iter().filter(|t| profile.allows(&t.name)).collect();
        info!(session = %self.session, seq = manifest.seq, tools = self.tools.len(), "turn bound to manifest");
        self.manifest = Some(manifest);
    }

    /// Attaches the turn's user credential, sent with every call: the edge runs a
    /// call only when this credential's principal owns the session.
    pub fn with_credential(mut self, credential: impl Into<String>) -> Self {
        self.credential = Some(credential.into());
        self
    }

    /// The client tools the model may be offered now (names re-validated).
    pub fn tools(&self) -> &[ToolDeclaration] {
        &self.tools
    }

    /// The manifest this turn is bound to (None when degraded).
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// The client's concept and context as one delimited block of information
    /// for the model's prompt, within `max_bytes` (see [`crate::context`]).
    pub fn context_block(&self, max_bytes: usize) -> Option<String> {
        crate::context::context_block(self.manifest.as_ref()?, max_bytes, &self.counters)
    }

    /// Why the turn has no client tools, when the turn-start read failed.
    pub fn degraded(&self) -> Option<&WireError> {
        self.degraded.as_ref()
    }

    /// The edge's turn id, for correlation.
    pub fn id(&self) -> Option<&str> {
        self.turn_id.as_deref()
    }

    /// Calls a client tool and blocks until its one outcome, within the per-tool budget.
    ///
    /// A device-side failure (`isError`) comes back as a `client_error` carrying
    /// the device's `code`, `retryable` and `retry_after_ms`.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Result<CallToolResult, WireError> {
        self.call_with_key(name, arguments, None).await
    }

    /// [`Turn::call`] with an idempotency key the device can de-duplicate on.
    pub async fn call_with_key(
        &mut self,
        name: &str,
        arguments: Value,
        idempotency_key: Option<String>,
    ) -> Result<CallToolResult, WireError> {
        if let Err(violation) = names::check(name) {
            CoreCounters::bump(&self.counters.names_rejected);
            warn!(session = %self.session, name, %violation, "call to an off-namespace tool name refused");
            return Err(WireError::new(ErrorKind::InvalidName, format!("tool name {name} {violation}")));
        }
        if !self.profile.allows(name) {
            CoreCounters::bump(&self.counters.scope_refusals);
            warn!(session = %self.session, name, profile = %self.profile.name, "call outside the caller's profile refused at dispatch");
            return Err(WireError::new(
                ErrorKind::Forbidden,
                format!("{name} is not available to this caller"),
            )
            .with("profile", self.profile.name.as_str()));
        }
        let budget = self.budgets.per_tool;
        let params = CallParams {
            session: self.session.clone(),
            name: name.to_owned(),
            arguments,
            meta: CallMeta {
                credential: self.credential.clone(),
                budget_ms: Some(u64::try_from(budget.as_millis()).unwrap_or(u64::MAX)),
                bound_seq: self.manifest.as_ref().map(|m| m.seq),
                idempotency_key,
            },
        };
        let response = match self.link.call(params, budget).await {
            Ok(r) => r,
            Err(e) => {
                if e.kind == ErrorKind::Timeout && e.detail("leg").and_then(Value::as_str) == Some("per_tool")
                {
                    CoreCounters::bump(&self.counters.per_tool_timeouts);
                    warn!(session = %self.session, name, "per-tool budget expired");
                }
                return Err(e);
            }
        };
        if let Some(fresh) = response.manifest {
            self.apply(fresh);
        }
        let result = response.result;
        if result.is_error {
            let mut err = WireError::new(
                ErrorKind::ClientError,
                result.first_text().unwrap_or("the device reported an error"),
            );
            if let Some(Value::Object(fields)) = &result.structured_content {
                for key in ["code", "retryable", "retry_after_ms"] {
                    if let Some(v) = fields.get(key) {
                        err = err.with(key, v.clone());
                    }
                }
            }
            return Err(err);
        }
        Ok(result)
    }
}
