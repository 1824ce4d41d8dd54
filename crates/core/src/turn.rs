//! One model turn: the tools a caller may be offered, and the dispatcher that
//! gates every call to them.
//!
//! [`Turn::begin`] reads the session's catalog once, at turn start, within
//! its own 2 s budget and one retry after a short backoff; that retry is
//! deliberately outside the mid-turn chain. If the read still fails the turn
//! proceeds without client tools (logged and counted), never blocked.
//!
//! [`Turn::call`] is the enforcement point, in this order, before anything is
//! sent: the name's shape, the caller's scope, that a reachable source offers
//! the name, discovery binding, then the arguments against the tool's input
//! schema. The call runs within the 12 s per-tool budget; a result that
//! declares an output schema must match it or is withheld.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::time::Instant;
use tracing::info;

use tether_contract::backend::{CallMeta, CallParams, Manifest, ReadMeta};
use tether_contract::mcp::{CallToolResult, ToolDeclaration};
use tether_contract::names::PREFIX;
use tether_contract::writes::{Approver, DecideParams, Decided};
use tether_contract::{Budgets, ErrorKind, Leg, SchemaLimits, WireError};

use crate::counters::CoreCounters;
use crate::discovery::{self, Search};
use crate::enforce::ToolSchemas;
use crate::link::BackendLink;
use crate::names;
use crate::registry::{Registry, FIND_TOOLS};
use crate::scope::{Binding, CallerProfile};
use crate::source::{AuthPosture, CallContext, LatencyClass, ToolSource, CLIENT_SOURCE};
use tether_counters::fallback;
use tether_rpc::lock;
use tether_telemetry::{self as telemetry, Kind};

/// The client source: the turn's session, over the backend link.
#[derive(Debug)]
pub(crate) struct ClientSource<'a> {
    link: &'a BackendLink,
    session: String,
    manifest: Mutex<Option<Arc<Manifest>>>,
}

impl ClientSource<'_> {
    fn manifest(&self) -> Option<Arc<Manifest>> {
        lock(&self.manifest).clone()
    }

    fn set_manifest(&self, manifest: Manifest) {
        *lock(&self.manifest) = Some(Arc::new(manifest));
    }

    fn seq(&self) -> Option<u64> {
        lock(&self.manifest).as_ref().map(|m| m.seq)
    }
}

impl ToolSource for ClientSource<'_> {
    fn id(&self) -> &str {
        CLIENT_SOURCE
    }

    fn posture(&self) -> AuthPosture {
        AuthPosture::SessionBound
    }

    fn latency(&self) -> LatencyClass {
        LatencyClass::Interactive
    }

    fn tools(&self) -> Vec<ToolDeclaration> {
        self.manifest().map(|m| m.tools.clone()).unwrap_or_default()
    }

    fn call<'b>(
        &'b self,
        name: &'b str,
        arguments: Value,
        ctx: CallContext<'b>,
    ) -> BoxFuture<'b, Result<CallToolResult, WireError>> {
        Box::pin(async move {
            let budget = ctx.remaining();
            let params = CallParams {
                session: self.session.clone(),
                name: name.to_owned(),
                arguments,
                meta: CallMeta {
                    credential: ctx.credential.map(str::to_owned),
                    budget_ms: Some(u64::try_from(budget.as_millis()).unwrap_or(u64::MAX)),
                    bound_seq: self.seq(),
                    idempotency_key: ctx.idempotency_key.map(str::to_owned),
                    progress_token: None, // set by the link when progress is wanted
                    approval: ctx.approval.map(str::to_owned),
                    approval_required: ctx.approval_required,
                    redelivered: false,
                    task: ctx.task,
                    traceparent: ctx.traceparent.map(str::to_owned),
                    tracestate: ctx.tracestate.map(str::to_owned),
                },
            };
            let response = match ctx.progress {
                Some(progress) => self.link.call_with_progress(params, budget, progress.clone()).await?,
                None => self.link.call(params, budget).await?,
            };
            if let Some(fresh) = response.manifest {
                self.set_manifest(fresh);
            }
            let mut result = response.result;
            if let Some(receipt) = &response.receipt {
                crate::writes::attach_receipt(&mut result, receipt);
            }
            Ok(result)
        })
    }
}

/// How one call runs beyond its name and arguments.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// Passed to the device so it can de-duplicate a retried call.
    pub idempotency_key: Option<String>,
    /// Where the device's progress goes while the call runs.
    pub progress: Option<crate::link::ProgressSender>,
    /// The approval the user gave for exactly this call (the id an
    /// `approval_required` error carried, decided with [`Turn::decide`]).
    pub approval: Option<String>,
    /// Run a long-running tool as a task: the call answers its task at once
    /// (followed with [`crate::BackendLink::task_result`]).
    pub task: Option<tether_contract::tasks::TaskMetadata>,
    /// The caller's W3C trace context (`traceparent`): the call's spans join
    /// that trace, and it travels on to the device.
    pub traceparent: Option<String>,
    /// W3C `tracestate`, beside `traceparent`.
    pub tracestate: Option<String>,
}

/// Where a callable name goes.
#[derive(Debug, Clone)]
enum Route {
    Client,
    Server(Arc<dyn ToolSource>),
}

/// One callable tool: its route and its compiled gate.
#[derive(Debug, Clone)]
struct Gate {
    route: Route,
    declaration: ToolDeclaration,
    schemas: Arc<ToolSchemas>,
}

/// A turn's view of one session and the caller's server-side sources.
#[derive(Debug)]
pub struct Turn<'a> {
    client: ClientSource<'a>,
    budgets: Budgets,
    turn_id: Option<String>,
    degraded: Option<WireError>,
    counters: Arc<CoreCounters>,
    profile: Arc<CallerProfile>,
    credential: Option<String>,
    /// The turn's user as the edge verified them at turn start.
    principal: Option<String>,
    registry: Registry,
    /// Shared with the [`TurnStart`] it was taken from or given: read-only once built.
    gates: Arc<HashMap<String, Gate>>,
    listed: Arc<Vec<ToolDeclaration>>,
    discovered: HashSet<String>,
    search: Search,
}

/// What a turn's start read and compiled (the bound manifest, the verified
/// user, the gates), kept so a later turn of the same user on the same
/// session starts without reading again: a door that serves one request per
/// turn (`/mcp`) pays the catalog read once per session, not once per call.
///
/// It stays right while the session's catalog does: whoever keeps one drops
/// it when the session's list changes, and the edge checks every call
/// against the manifest it applied regardless (a stale seq gets the fresh
/// manifest back with the answer).
#[derive(Debug, Clone)]
pub struct TurnStart {
    session: String,
    manifest: Arc<Manifest>,
    turn_id: Option<String>,
    principal: Option<String>,
    profile: Arc<CallerProfile>,
    registry: Registry,
    gates: Arc<HashMap<String, Gate>>,
    listed: Arc<Vec<ToolDeclaration>>,
}

impl TurnStart {
    /// The manifest's seq the gates were built from.
    pub fn seq(&self) -> u64 {
        self.manifest.seq
    }

    /// The session it was read from.
    pub fn session(&self) -> &str {
        &self.session
    }
}

impl<'a> Turn<'a> {
    /// Begins a turn for `user` that may reach every client tool (see [`Turn::begin_scoped`]).
    pub async fn begin(
        link: &'a BackendLink,
        session: &str,
        user: Option<&str>,
        budgets: Budgets,
    ) -> Turn<'a> {
        Turn::begin_scoped(link, session, user, budgets, Arc::new(CallerProfile::everything())).await
    }

    /// Begins a turn under a caller profile: `turn/begin` plus the catalog read,
    /// retried once, degrading to no client tools; only tools the profile allows
    /// are listed, and every call re-checks the profile.
    ///
    /// `user` is the turn's user credential: the edge shows and runs a session
    /// only for the user who owns it, and server-side sources verify it
    /// themselves. Without one the turn has no client tools.
    pub async fn begin_scoped(
        link: &'a BackendLink,
        session: &str,
        user: Option<&str>,
        budgets: Budgets,
        profile: Arc<CallerProfile>,
    ) -> Turn<'a> {
        let mut turn = Turn::unbound(link, session, user.map(str::to_owned), budgets, profile);
        let mut last = None;
        for attempt in 0..2 {
            if attempt == 1 {
                fallback!(turn.counters.turn_start_retries, info, session = %turn.client.session, "turn-start catalog read failed; retrying once after the backoff");
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
        fallback!(turn.counters.turn_start_fallbacks, warn, session, error = %err, "turn-start catalog read failed; the turn proceeds without client tools");
        turn.degraded = Some(err);
        turn.rebuild();
        turn
    }

    /// A turn on `session` with nothing read or bound yet.
    fn unbound(
        link: &'a BackendLink,
        session: &str,
        credential: Option<String>,
        budgets: Budgets,
        profile: Arc<CallerProfile>,
    ) -> Turn<'a> {
        Turn {
            client: ClientSource { link, session: session.to_owned(), manifest: Mutex::new(None) },
            budgets,
            turn_id: None,
            degraded: None,
            counters: link.counters(),
            profile,
            credential,
            principal: None,
            registry: Registry::new(),
            gates: Arc::default(),
            listed: Arc::default(),
            discovered: HashSet::new(),
            search: Search::default(),
        }
    }

    /// What this turn's start bound, to start another turn from without
    /// reading again ([`Turn::resume`]); None when the start read failed.
    pub fn start(&self) -> Option<TurnStart> {
        if self.degraded.is_some() {
            return None;
        }
        Some(TurnStart {
            session: self.client.session.clone(),
            manifest: self.client.manifest()?,
            turn_id: self.turn_id.clone(),
            principal: self.principal.clone(),
            profile: Arc::clone(&self.profile),
            registry: self.registry.clone(),
            gates: Arc::clone(&self.gates),
            listed: Arc::clone(&self.listed),
        })
    }

    /// Starts a turn from what an earlier turn of the same user bound
    /// ([`Turn::start`]), with no read: the same manifest, gates and caller
    /// profile, nothing discovered yet. `user` must be the credential that
    /// turn started with (the edge checks it on every call).
    pub fn resume(link: &'a BackendLink, start: &TurnStart, user: &str, budgets: Budgets) -> Turn<'a> {
        let profile = Arc::clone(&start.profile);
        let mut turn = Turn::unbound(link, &start.session, Some(user.to_owned()), budgets, profile);
        turn.client.manifest = Mutex::new(Some(Arc::clone(&start.manifest)));
        turn.turn_id.clone_from(&start.turn_id);
        turn.principal.clone_from(&start.principal);
        turn.registry = start.registry.clone();
        turn.gates = Arc::clone(&start.gates);
        turn.listed = Arc::clone(&start.listed);
        if turn.profile.binding == Binding::Discovery {
            // What the earlier turn found is its own; this one starts from find_tools.
            turn.rebuild();
        }
        turn
    }

    async fn read_catalog(&mut self) -> Result<(), WireError> {
        let deadline = Instant::now() + self.budgets.turn_start;
        let link = self.client.link;
        let Some(credential) = self.credential.as_deref() else {
            return Err(WireError::new(
                ErrorKind::Forbidden,
                "a turn without the user's credential reads no session",
            ));
        };
        let begun = link.begin_turn(&self.client.session, credential, self.budgets.turn_start).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        let manifest = link.list_tools(&self.client.session, credential, left).await?;
        self.turn_id = Some(begun.turn);
        self.principal = begun.principal;
        info!(session = %self.client.session, seq = manifest.seq, "turn bound to manifest");
        self.client.set_manifest(manifest);
        self.rebuild();
        Ok(())
    }

    /// Recomputes what is callable and what is listed from the client manifest,
    /// the registry and the profile.
    fn rebuild(&mut self) {
        let limits = SchemaLimits::default();
        let mut gates = HashMap::new();
        let mut order = Vec::new();
        if self.profile.reaches(CLIENT_SOURCE, self.client.latency()) {
            for decl in self.client.tools() {
                if let Err(violation) = names::check(&decl.name) {
                    fallback!(self.counters.names_rejected, warn, session = %self.client.session, name = %decl.name, %violation, "edge offered an off-namespace tool name; refused");
                    continue;
                }
                if !self.profile.allows(&decl.name) {
                    continue;
                }
                // Reuse a gate whose declaration did not change: compiling is the costly part.
                let schemas = match self.gates.get(&decl.name).filter(|g| g.declaration == decl) {
                    Some(gate) => Arc::clone(&gate.schemas),
                    None => match ToolSchemas::compile(&decl, &limits) {
                        Ok(compiled) => Arc::new(compiled),
                        Err(reason) => {
                            fallback!(self.counters.schemas_refused, warn, session = %self.client.session, name = %decl.name, %reason, "client tool schema refused; tool not offered");
                            continue;
                        }
                    },
                };
                order.push(decl.name.clone());
                gates.insert(decl.name.clone(), Gate { route: Route::Client, declaration: decl, schemas });
            }
        }
        for tool in self.registry.tools() {
            let name = &tool.declaration.name;
            if self.profile.reaches(tool.source.id(), tool.source.latency()) && self.profile.allows(name) {
                order.push(name.clone());
                gates.insert(
                    name.clone(),
                    Gate {
                        route: Route::Server(Arc::clone(&tool.source)),
                        declaration: tool.declaration.clone(),
                        schemas: Arc::clone(&tool.schemas),
                    },
                );
            }
        }
        self.listed = Arc::new(match self.profile.binding {
            Binding::Direct => {
                order.iter().filter_map(|n| gates.get(n)).map(|g| g.declaration.clone()).collect()
            }
            Binding::Discovery => std::iter::once(discovery::declaration())
                .chain(
                    order
                        .iter()
                        .filter(|n| self.discovered.contains(*n))
                        .filter_map(|n| gates.get(n))
                        .map(|g| g.declaration.clone()),
                )
                .collect(),
        });
        if self.profile.binding == Binding::Discovery {
            self.search
                .update(order.iter().filter_map(|n| gates.get(n)).map(|g| g.declaration.clone()).collect());
        }
        self.gates = Arc::new(gates);
    }

    /// Adds the backend's server-side sources; the caller's profile decides
    /// which of their tools this turn reaches.
    pub fn with_sources(mut self, registry: &Registry) -> Self {
        self.registry = registry.clone();
        self.rebuild();
        self
    }

    /// The tools the model may be offered now (names re-validated, schemas compiled).
    pub fn tools(&self) -> &[ToolDeclaration] {
        &self.listed
    }

    /// The client manifest this turn is bound to (None when degraded).
    pub fn manifest(&self) -> Option<Manifest> {
        self.client.manifest().map(|m| (*m).clone())
    }

    /// The client's concept and context as one delimited block of information
    /// for the model's prompt, within `max_bytes` (see [`crate::context`]).
    pub fn context_block(&self, max_bytes: usize) -> Option<String> {
        crate::context::context_block(&*self.client.manifest()?, max_bytes, &self.counters)
    }

    /// Why the turn has no client tools, when the turn-start read failed.
    pub fn degraded(&self) -> Option<&WireError> {
        self.degraded.as_ref()
    }

    /// The edge's turn id, for correlation.
    pub fn id(&self) -> Option<&str> {
        self.turn_id.as_deref()
    }

    /// Calls a tool and blocks until its one outcome, within the per-tool budget.
    ///
    /// A source-side failure (`isError`) comes back as a `client_error` carrying
    /// the source's `code`, `retryable` and `retry_after_ms`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before its outcome leaves nothing behind: the
    /// link's pending entry and progress route go, the edge is told
    /// (`notifications/cancelled`) and cancels the call on the device, and the
    /// turn's bindings are untouched (a fresh manifest is applied only together
    /// with an answer).
    pub async fn call(&mut self, name: &str, arguments: Value) -> Result<CallToolResult, WireError> {
        self.call_with_key(name, arguments, None).await
    }

    fn refuse_unknown(&self, name: &str, why: &str) -> WireError {
        fallback!(self.counters.unknown_tools, warn, session = %self.client.session, name, why, "call to a tool no reachable source offers refused at dispatch");
        let available: Vec<&str> = self.listed.iter().map(|t| t.name.as_str()).collect();
        WireError::new(ErrorKind::ToolUnavailable, format!("{name} {why}")).with("available", available)
    }

    /// Checks everything dispatch checks, in order, and returns the gate to use.
    fn admit(&self, name: &str, arguments: &Value) -> Result<Gate, WireError> {
        if name.starts_with(PREFIX) {
            if let Err(violation) = names::check(name) {
                fallback!(self.counters.names_rejected, warn, session = %self.client.session, name, %violation, "call to an off-namespace tool name refused");
                return Err(WireError::new(ErrorKind::InvalidName, format!("tool name {name} {violation}")));
            }
        }
        let source_reachable = match self.registry.tool(name) {
            Some(tool) => self.profile.reaches(tool.source.id(), tool.source.latency()),
            None if name.starts_with(PREFIX) => self.profile.reaches(CLIENT_SOURCE, self.client.latency()),
            None => true,
        };
        if !self.profile.allows(name) || !source_reachable {
            fallback!(self.counters.scope_refusals, warn, session = %self.client.session, name, profile = %self.profile.name, "call outside the caller's profile refused at dispatch");
            return Err(WireError::new(
                ErrorKind::Forbidden,
                format!("{name} is not available to this caller"),
            )
            .with("profile", self.profile.name.as_str()));
        }
        let Some(gate) = self.gates.get(name) else {
            return Err(self.refuse_unknown(name, "is not offered by any source this turn reaches"));
        };
        if let Route::Server(source) = &gate.route {
            if source.posture() == AuthPosture::VerifiesCredential && self.credential.is_none() {
                fallback!(self.counters.credential_missing, warn, session = %self.client.session, name, source = source.id(), "call to a credential-verifying source without a user credential refused");
                return Err(WireError::new(
                    ErrorKind::Unauthenticated,
                    format!("{name} needs the user's credential and this turn carries none"),
                ));
            }
        }
        if self.profile.binding == Binding::Discovery && !self.discovered.contains(name) {
            return Err(
                self.refuse_unknown(name, &format!("has not been found yet; call {FIND_TOOLS} first"))
            );
        }
        if let Err(err) = gate.schemas.check_arguments(name, arguments) {
            fallback!(self.counters.arguments_rejected, warn, session = %self.client.session, name, error = %err, "arguments refused at dispatch");
            return Err(err);
        }
        Ok(gate.clone())
    }

    /// [`Turn::call`] with an idempotency key the source can de-duplicate on.
    pub async fn call_with_key(
        &mut self,
        name: &str,
        arguments: Value,
        idempotency_key: Option<String>,
    ) -> Result<CallToolResult, WireError> {
        self.call_with(name, arguments, CallOptions { idempotency_key, ..CallOptions::default() }).await
    }

    /// Calls a tool with options: an idempotency key, and where its progress goes.
    pub async fn call_with(
        &mut self,
        name: &str,
        arguments: Value,
        options: CallOptions,
    ) -> Result<CallToolResult, WireError> {
        let span = telemetry::leg(Kind::Client, "tools/call", name, "dispatch");
        telemetry::adopt(&span, options.traceparent.as_deref(), options.tracestate.as_deref());
        let onward = span.clone();
        telemetry::run(span, self.dispatch(name, arguments, options, &onward)).await
    }

    /// [`Turn::call_with`] inside its dispatch span.
    async fn dispatch(
        &mut self,
        name: &str,
        arguments: Value,
        options: CallOptions,
        span: &tracing::Span,
    ) -> Result<CallToolResult, WireError> {
        let CallOptions { idempotency_key, progress, approval, task, traceparent, tracestate } = options;
        if name == FIND_TOOLS && self.profile.binding == Binding::Discovery {
            return Ok(self.find_tools(&arguments));
        }
        // Models often send no arguments for a tool that takes none.
        let arguments = if arguments.is_null() { json!({}) } else { arguments };
        let gate_span = telemetry::leg(Kind::Internal, "gate", name, "gate");
        let admitted = gate_span.in_scope(|| self.admit(name, &arguments));
        telemetry::ended(&gate_span, &admitted);
        let gate = admitted?;
        let needs_approval = self.profile.needs_approval(&gate.declaration);
        let budget = self.budgets.per_tool;
        let (traceparent, tracestate) = telemetry::onward(span, traceparent, tracestate);
        let ctx = CallContext {
            credential: self.credential.as_deref(),
            deadline: Instant::now() + budget,
            idempotency_key: idempotency_key.as_deref(),
            progress: progress.as_ref(),
            approval: approval.as_deref(),
            approval_required: needs_approval,
            task,
            traceparent: traceparent.as_deref(),
            tracestate: tracestate.as_deref(),
        };
        let outcome = match &gate.route {
            // The link enforces the budget itself, and cleans up its pending entry on expiry.
            Route::Client => {
                let seq = self.client.seq();
                let outcome = self.client.call(name, arguments, ctx).await;
                if self.client.seq() != seq {
                    self.rebuild();
                }
                outcome
            }
            Route::Server(source) => {
                let ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
                let gated = self.server_write(source.as_ref(), name, arguments, ctx, needs_approval);
                tokio::time::timeout(budget, gated)
                    .await
                    .unwrap_or_else(|_| Err(WireError::timeout(Leg::PerTool, ms)))
            }
        };
        let result = match outcome {
            Ok(result) => result,
            Err(e) => {
                if e.timed_out_leg() == Some(Leg::PerTool) {
                    fallback!(self.counters.per_tool_timeouts, warn, session = %self.client.session, name, "per-tool budget expired");
                }
                return Err(e);
            }
        };
        if result.is_error {
            let mut err = WireError::new(
                ErrorKind::ClientError,
                result.first_text().unwrap_or("the tool reported an error"),
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
        if let Err(err) = gate.schemas.check_result(name, &result) {
            fallback!(self.counters.results_rejected, warn, session = %self.client.session, name, error = %err, "result withheld: it does not match the declared output shape");
            return Err(err);
        }
        Ok(result)
    }

    /// A server-side call through the write gate: the source's state is read
    /// when an approval is checked, so the grant binds it.
    async fn server_write(
        &self,
        source: &dyn ToolSource,
        name: &str,
        arguments: Value,
        ctx: CallContext<'_>,
        needs_approval: bool,
    ) -> Result<CallToolResult, WireError> {
        let write = crate::writes::ServerWrite {
            ledger: self.client.link.writes(self.budgets.approval),
            counters: &self.counters,
            principal: self.principal.as_deref(),
            session: &self.client.session,
            name,
            arguments: &arguments,
            key: ctx.idempotency_key,
            approval: ctx.approval,
            needs_approval,
        };
        let state = source.approval_state(name, &arguments, ctx);
        let run = source.call(name, arguments.clone(), ctx);
        crate::writes::gated(write, state, run).await
    }

    /// The user's answer to an approval this turn's calls asked for: `true`
    /// runs the call it names (once, with exactly its arguments), `false`
    /// refuses it for good. Decided where the approval was asked — this
    /// backend for a server-side tool, the session's edge for a device's.
    pub async fn decide(&self, approval: &str, approve: bool) -> Result<Decided, WireError> {
        self.approval(approval, Some(approve)).await
    }

    /// Where an approval stands (a device's user may be deciding it now).
    pub async fn approval_state(&self, approval: &str) -> Result<Decided, WireError> {
        self.approval(approval, None).await
    }

    async fn approval(&self, approval: &str, approve: Option<bool>) -> Result<Decided, WireError> {
        let ledger = self.client.link.writes(self.budgets.approval);
        if ledger.approvals.binding(approval).is_some() {
            let Some(principal) = self.principal.as_deref() else {
                return Err(WireError::new(
                    ErrorKind::Unauthenticated,
                    "this turn has no verified user to decide",
                ));
            };
            let outcome = match approve {
                Some(approve) => ledger.approvals.decide(approval, principal, approve, Approver::Caller),
                None => ledger.approvals.state(approval, principal),
            };
            return outcome.map_err(|r| r.to_wire(approval));
        }
        let params = DecideParams {
            session: self.client.session.clone(),
            approval: approval.to_owned(),
            approve,
            meta: ReadMeta { credential: self.credential.clone() },
        };
        self.client.link.decide(&params, self.budgets.turn_start).await
    }

    /// The discovery meta-tool: ranks the tools this caller may reach for the
    /// query (see [`crate::discovery`]) and binds what it returns.
    fn find_tools(&mut self, arguments: &Value) -> CallToolResult {
        let (query, cut) = discovery::query(arguments);
        if cut {
            fallback!(
                self.counters.find_tools_queries_cut,
                debug,
                max_chars = discovery::QUERY_MAX_CHARS,
                "find_tools query longer than declared; searched for its first characters"
            );
        }
        let found = self.search.find(query);
        self.discovered.extend(found.iter().map(|t| t.name.clone()));
        self.rebuild();
        discovery::result(&found)
    }
}
