//! Requests to the device: one outcome each within its leg, backend
//! `tools/call` with its gates and caps, progress relayed to the backend that
//! asked, and the recent calls `sessions/inspect` shows.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, Instrument};

use tether_contract::backend::{CallParams, CallResponse, NamePair, Progress, RecentCall, SessionInspect};
use tether_contract::error::{ErrorKind, WireError};
use tether_contract::jsonrpc;
use tether_contract::mcp::{self, meta, method, RawCallResult, RawResultError};
use tether_contract::tasks::{TaskMetadata, TaskSupport};
use tether_contract::Leg;
use tether_counters::fallback;
use tether_rpc::{lock, Outcome};
use tether_telemetry::{self as telemetry, Kind};

use super::writes::Gated;
use super::{cancel_on_device, ms, Phase, Session};
use crate::counters::EdgeCounters;
use crate::exit::Exit;
use crate::manifest::{AppliedManifest, Digest};
use crate::ws::{Outbound, QueueError};

/// How many recent calls `sessions/inspect` shows.
const RECENT_CALLS: usize = 32;
/// Longest progress message relayed, in characters: a status line, not a payload.
const PROGRESS_MESSAGE_CHARS: usize = 256;

/// What the reader hands a waiting request: a result as the JSON text the
/// device sent (parsed by whoever needs it, into the type it needs), or the
/// device's error.
#[derive(Debug)]
pub(super) enum Answer {
    Result { raw: Box<RawValue>, bytes: usize },
    Error(Value),
}

/// What the edge remembers of a request it gave up on, to log its late answer.
#[derive(Debug)]
pub(super) struct Late {
    pub(super) tool: String,
    pub(super) deadline: Instant,
    /// A call with an idempotency key: it survives a resume (delivered again on the new socket).
    pub(super) keyed: bool,
}

/// Why a request to the device produced no result.
#[derive(Debug)]
pub(super) enum RequestError {
    Closed(String),
    Timeout { id: u64 },
    Remote(Value),
    Overloaded,
    Malformed(String),
}

impl RequestError {
    /// The outcome kind a trace shows for the device leg.
    pub(super) fn kind_str(&self) -> &'static str {
        match self {
            RequestError::Closed(_) => ErrorKind::ChannelClosed.as_str(),
            RequestError::Timeout { .. } => ErrorKind::Timeout.as_str(),
            RequestError::Overloaded => ErrorKind::Overloaded.as_str(),
            RequestError::Remote(_) | RequestError::Malformed(_) => ErrorKind::ClientError.as_str(),
        }
    }
}

/// `tools/call` params as the device receives them, serialized without a `Value` tree.
#[derive(serde::Serialize)]
struct DeviceCall<'a> {
    name: &'a str,
    arguments: &'a Value,
    #[serde(rename = "_meta")]
    meta: &'a Map<String, Value>,
    /// Made as a task: the device answers with its task at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<TaskMetadata>,
}

/// Where a device's progress on one call goes: the backend link that asked, under its token.
#[derive(Debug, Clone)]
pub struct ProgressRelay {
    /// The backend's `_meta.progressToken`.
    pub token: Value,
    /// The backend link's writer queue.
    pub out: mpsc::Sender<Outbound>,
    /// The last progress relayed: MCP's progress only increases.
    last: Option<f64>,
}

impl ProgressRelay {
    /// Relays progress to `out` under the backend's `token`.
    pub fn new(token: Value, out: mpsc::Sender<Outbound>) -> ProgressRelay {
        ProgressRelay { token, out, last: None }
    }
}

/// Stops relaying a call's progress once the call is over, however it ends.
struct ProgressGuard<'a> {
    session: &'a Session,
    token: u64,
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        lock(&self.session.progress).remove(&self.token);
    }
}

impl Session {
    /// Sends one request to the device and waits up to `leg` for its answer.
    ///
    /// Exactly one outcome: if the answer races the timer, the answer wins and
    /// the timeout is not reported. Dropped mid-flight (the backend cancelled),
    /// the device is told to stop.
    ///
    /// A `keyed` request made while the session is detached is not sent: it
    /// waits for the device to resume (see [`Session::call_tool`]).
    pub(super) async fn request<P: serde::Serialize>(
        &self,
        method: &'static str,
        params: P,
        leg: Duration,
        tool: &str,
        keyed: bool,
    ) -> Result<(Box<RawValue>, usize), RequestError> {
        let deadline = Instant::now() + leg;
        let request =
            self.calls.open(Late { tool: tool.to_owned(), deadline, keyed }).map_err(RequestError::Closed)?;
        let id = request.id();
        let frame = jsonrpc::request(&Value::from(id), method, &params);
        if self.phase() == Phase::Detached {
            if !keyed {
                drop(request);
                return Err(RequestError::Closed(self.detach_reason().to_owned()));
            }
        } else if let Err(e) = self.outbound.try_send(Outbound::Text(frame)) {
            drop(request);
            return Err(match e {
                QueueError::Full => {
                    fallback!(self.counters().outbound_full, warn, session = %self.id, method, "device outbound queue full; request refused");
                    RequestError::Overloaded
                }
                QueueError::Closed => RequestError::Closed("disconnected".into()),
            });
        }
        let abandoned = |id| {
            if method == method::TOOLS_CALL {
                EdgeCounters::bump(&self.counters().calls_cancelled);
            }
            info!(session = %self.id, request_id = id, method, tool, "request dropped by its caller; device told to cancel");
            cancel_on_device(self, id, "the caller cancelled this call");
        };
        match request.wait_until(deadline, abandoned).await {
            Outcome::Answered(Answer::Result { raw, bytes }) => Ok((raw, bytes)),
            Outcome::Answered(Answer::Error(e)) => Err(RequestError::Remote(e)),
            Outcome::Closed(reason) => Err(RequestError::Closed(reason)),
            Outcome::TimedOut => Err(RequestError::Timeout { id }),
        }
    }

    pub(super) fn request_error(&self, err: RequestError, leg: Leg, budget: Duration) -> WireError {
        match err {
            RequestError::Closed(reason) => WireError::channel_closed(&reason),
            RequestError::Timeout { .. } => WireError::timeout(leg, ms(budget)),
            RequestError::Overloaded => {
                WireError::new(ErrorKind::Overloaded, "device outbound queue is full")
            }
            RequestError::Remote(e) => {
                let device = WireError::from_json(&e);
                WireError::new(ErrorKind::ClientError, format!("device error: {}", device.message))
                    .with("device_code", e.get("code").cloned().unwrap_or(Value::Null))
            }
            RequestError::Malformed(why) => WireError::new(ErrorKind::ClientError, why),
        }
    }

    /// Runs one backend `tools/call` against the device, and remembers it for inspection.
    ///
    /// Owns its session so the router can box this future as it is: each
    /// wrapper would keep its own copy of the params, and a boxed call of
    /// more than 1 KiB leaves glibc's per-thread cache for its locked arenas
    /// (a profile showed that on every call).
    pub async fn call_tool(
        self: Arc<Self>,
        params: CallParams,
        progress: Option<ProgressRelay>,
    ) -> Result<CallResponse<RawCallResult>, WireError> {
        // A call the backend cancels is dropped mid-flight; the guard still remembers it.
        let mut remembered =
            Remembered { session: &self, tool: Some(params.name.clone()), started: Instant::now() };
        let span =
            tracing::info_span!("call", session = %self.id, principal = %self.principal, tool = %params.name);
        // Boxed apart: each half stays under 1 KiB, which glibc serves from its per-thread cache.
        let outcome = Box::pin(self.call_tool_inner(&params, progress).instrument(span)).await;
        remembered.finish(outcome.as_ref().map_or_else(|e| e.kind.as_str(), |_| "ok"));
        outcome
    }

    /// Adds a call to the recent calls `sessions/inspect` shows.
    fn remember(&self, call: RecentCall) {
        let mut recent = lock(&self.recent);
        if recent.len() >= RECENT_CALLS {
            recent.pop_front();
        }
        recent.push_back(call);
    }

    /// The operator's view of this session (`tether inspect`).
    pub fn inspect(&self) -> SessionInspect {
        let manifest = self.manifest.current();
        SessionInspect {
            session: self.id.clone(),
            principal: self.principal.clone(),
            server_info: self.server_info(),
            protocol_version: self.revision().as_str().to_owned(),
            seq: manifest.as_ref().map_or(0, |m| m.seq),
            tools: manifest
                .as_ref()
                .map(|m| {
                    m.table()
                        .pairs()
                        .into_iter()
                        .map(|(n, o)| NamePair { namespaced: n.to_owned(), original: o.to_owned() })
                        .collect()
                })
                .unwrap_or_default(),
            dropped: manifest.as_ref().map(|m| m.dropped().to_vec()).unwrap_or_default(),
            pending_calls: self.pending_calls(),
            recent_calls: lock(&self.recent).iter().cloned().collect(),
            receipts: self.hub.ledger_if_any(&self.id).map(|l| l.receipts.recent()).unwrap_or_default(),
        }
    }

    async fn call_tool_inner(
        &self,
        params: &CallParams,
        progress: Option<ProgressRelay>,
    ) -> Result<CallResponse<RawCallResult>, WireError> {
        // Only what the call reads, not copies of the budget and cap tables: this state is in every call.
        let tool_call = self.hub.config.budgets.tool_call;
        let Some(applied) = self.manifest.current() else {
            return Err(WireError::new(ErrorKind::ToolUnavailable, "session has no manifest yet")
                .with("available", Vec::<String>::new()));
        };
        if let Some(reason) = self.calls.closed() {
            if reason == Exit::Resumed.as_str() && params.meta.idempotency_key.is_some() {
                // Reached this socket just after the session moved to a new one: follow it.
                let leg =
                    params.meta.budget_ms.map_or(tool_call, |b| Duration::from_millis(b).min(tool_call));
                return Box::pin(self.follow_resumed(params.clone(), progress, leg)).await;
            }
            fallback!(self.counters().calls_channel_closed, debug, session = %self.id, tool = %params.name, reason, "call refused: the session has closed");
            return Err(WireError::channel_closed(&reason));
        }
        let Some(original) = applied.table().original(&params.name).map(str::to_owned) else {
            return Err(WireError::new(
                ErrorKind::ToolUnavailable,
                format!("{} is not in the session's manifest (seq {})", params.name, applied.seq),
            )
            .with("available", applied.available())
            .with("seq", applied.seq));
        };
        if let Err(refused) = applied.gate().check(&params.name, &params.arguments) {
            fallback!(self.counters().arguments_refused, warn, session = %self.id, tool = %params.name, error = %refused.message, "call refused at the edge: arguments do not match the input schema; nothing sent");
            return Err(refused);
        }
        let leg = params.meta.budget_ms.map(|b| Duration::from_millis(b).min(tool_call)).unwrap_or(tool_call);
        let Some(declaration) = applied.tools().iter().find(|t| t.name == params.name) else {
            return Err(WireError::new(ErrorKind::Internal, "a listed tool has no declaration"));
        };
        let support = match declaration.task_support() {
            // The 2026-07-28 extension has no per-tool flag: any call may become a task.
            TaskSupport::Forbidden if self.speaks_task_extension() => TaskSupport::Optional,
            declared => declared,
        };
        let task = self.task_ttl(params, support);
        let call = Gated { params, original: &original, declaration, leg };
        let deliver = self.deliver(params, &original, progress, &applied, leg, task);
        self.gated_write(call, deliver).await
    }

    /// Whether a call runs as a task, and for how long: when its tool needs
    /// one, or allows one and the caller can follow it (its ttl cut to the
    /// edge's). A caller's `tether.dev/task` says it *can* follow a task, as
    /// the 2026-07-28 tasks extension has a client declare it: a tool that
    /// never runs as one is called inline.
    fn task_ttl(&self, params: &CallParams, support: TaskSupport) -> Option<Duration> {
        let budget = self.hub.config.budgets.task;
        let asked =
            params.meta.task.map(|t| t.ttl.map_or(budget, |ms| Duration::from_millis(ms).min(budget)));
        match support {
            TaskSupport::Required => Some(asked.unwrap_or(budget)),
            TaskSupport::Optional => asked,
            TaskSupport::Forbidden => None,
        }
    }

    /// Sends a call that passed every gate to the device, and reads its answer
    /// (for a call made as a task, the task it started).
    async fn deliver(
        &self,
        params: &CallParams,
        original: &str,
        progress: Option<ProgressRelay>,
        applied: &AppliedManifest,
        leg: Duration,
        task: Option<Duration>,
    ) -> Result<CallResponse<RawCallResult>, WireError> {
        let result_cap = self.caps().result_bytes;
        // A 2026-07-28 device sees that this call may become a task in the
        // envelope; a 2025-11-25 device in the call's `task`.
        let extension = task.is_some() && self.speaks_task_extension();
        let mut call_meta = if extension { crate::revision::task_envelope() } else { self.request_meta() };
        call_meta.insert(meta::DEADLINE_MS.into(), Value::from(ms(leg)));
        if let Some(key) = &params.meta.idempotency_key {
            call_meta.insert(meta::IDEMPOTENCY_KEY.into(), Value::from(key.as_str()));
        }
        // The device leg's span; the device's handler joins the trace through `_meta`.
        let span = telemetry::leg(Kind::Client, method::TOOLS_CALL, original, "device");
        span.record("tether.session", self.id.as_str());
        span.record("network.transport", "websocket");
        let (traceparent, tracestate) =
            telemetry::onward(&span, params.meta.traceparent.clone(), params.meta.tracestate.clone());
        if let Some(traceparent) = traceparent {
            call_meta.insert(meta::TRACEPARENT.into(), Value::from(traceparent));
        }
        if let Some(tracestate) = tracestate {
            call_meta.insert(meta::TRACESTATE.into(), Value::from(tracestate));
        }
        let relay = progress.clone();
        // The device gets a token of the edge's own; its progress goes back under the backend's.
        let _progress = progress.map(|relay| {
            let token = self.calls.fresh_id();
            call_meta.insert(meta::PROGRESS_TOKEN.into(), Value::from(token));
            lock(&self.progress).insert(token, relay);
            ProgressGuard { session: self, token }
        });
        let device_params = DeviceCall {
            name: original,
            arguments: &params.arguments,
            meta: &call_meta,
            task: task.filter(|_| !extension).map(|ttl| TaskMetadata { ttl: Some(ms(ttl)) }),
        };
        // While it is in flight, a status the device sends right behind its task is held for it.
        let _asking = task.map(|_| self.asking_task());
        let started = Instant::now();
        let keyed = params.meta.idempotency_key.is_some();
        let outcome = self
            .request(method::TOOLS_CALL, device_params, leg, original, keyed)
            .instrument(span.clone())
            .await;
        self.observe_leg(Leg::ToolCall, started);
        telemetry::outcome(&span, outcome.as_ref().err().map(RequestError::kind_str));
        let (raw, bytes) = match outcome {
            Ok(ok) => ok,
            Err(RequestError::Closed(reason)) if keyed && reason == Exit::Resumed.as_str() => {
                // The device resumed on a new socket (here or on another edge):
                // the call follows it there, within what is left of its leg.
                drop(_progress);
                let left = leg.saturating_sub(started.elapsed());
                return Box::pin(self.follow_resumed(params.clone(), relay, left)).await;
            }
            Err(RequestError::Timeout { id }) => {
                cancel_on_device(self, id, &format!("tether edge stopped waiting after {} ms", ms(leg)));
                fallback!(self.counters().call_timeouts, warn, session = %self.id, call_id = id, tool = %params.name, original = %original, leg_ms = ms(leg), "tool_call leg expired; device told to cancel");
                return Err(WireError::timeout(Leg::ToolCall, ms(leg)));
            }
            Err(RequestError::Closed(reason)) => {
                fallback!(self.counters().calls_channel_closed, info, session = %self.id, tool = %params.name, reason, "call failed: the session closed while it was in flight");
                return Err(WireError::channel_closed(&reason));
            }
            Err(e) => return Err(self.request_error(e, Leg::ToolCall, leg)),
        };
        if bytes > result_cap {
            fallback!(self.counters().results_too_large, warn, session = %self.id, tool = %params.name, bytes, limit = result_cap, "tool result over the result cap refused");
            return Err(WireError::new(
                ErrorKind::PayloadTooLarge,
                format!("tool result of {bytes} bytes exceeds the {} byte cap", result_cap),
            )
            .with("direction", "response")
            .with("bytes", bytes)
            .with("limit", result_cap));
        }
        if let Some(ttl) = task {
            if let Some(started) = super::tasks::started_task(raw.get()) {
                return self.begin_task(started, &params.name, ttl, applied.seq);
            }
            // A device may run an optional task inline: its answer is the result.
        }
        // Checked and read without a tree; forwarded as the device wrote it.
        let (result, stamps) = RawCallResult::read(raw).map_err(|e| match e {
            RawResultError::InputRequired => WireError::new(
                ErrorKind::ClientError,
                "the device asked for more input (input_required), which a tool call through the edge cannot supply",
            )
            .with("device_code", "input_required"),
            RawResultError::Malformed(e) => {
                WireError::new(ErrorKind::ClientError, format!("device sent a malformed CallToolResult: {e}"))
            }
        })?;
        debug!(session = %self.id, tool = %params.name, elapsed_ms = ms(started.elapsed()), "call answered");

        let mut response =
            CallResponse { result, manifest: None, seq: applied.seq, manifest_stale: false, receipt: None };
        let moved = stamps.seq.filter(|s| *s > applied.seq);
        if moved.is_some_and(|seq| !self.restamp(seq, stamps.digest.as_deref().map(Digest::of))) {
            EdgeCounters::bump(&self.counters().rereads_after_call);
            // Boxed: the rare path, kept out of every call's state.
            let reread = telemetry::leg(Kind::Client, method::TOOLS_LIST, &params.name, "reread");
            let read = telemetry::run(reread, self.read_catalog(self.hub.config.budgets.reread));
            if let Err(e) = Box::pin(read).await {
                fallback!(self.counters().reread_failures, warn, session = %self.id, error = %e, "catalog re-read after call failed; manifest may be stale");
                response.manifest_stale = true;
            }
        }
        // The manifest goes back only when its content changed since what the
        // backend holds: a seq that moved over the same catalog sends nothing.
        if let Some(current) = self.manifest.current() {
            let held = params.meta.bound_seq.unwrap_or(applied.seq);
            if current.content_seq > held {
                response.manifest = Some(self.view(&current));
            }
            response.seq = current.seq;
        }
        Ok(response)
    }

    /// Delivers a keyed call again to the session that resumed this one,
    /// through the router (the new socket may be on another edge); the device
    /// de-duplicates by the idempotency key.
    async fn follow_resumed(
        &self,
        mut params: CallParams,
        progress: Option<ProgressRelay>,
        left: Duration,
    ) -> Result<CallResponse<RawCallResult>, WireError> {
        if left.is_zero() {
            return Err(WireError::timeout(Leg::ToolCall, 0));
        }
        EdgeCounters::bump(&self.counters().calls_redelivered);
        info!(session = %self.id, tool = %params.name, left_ms = ms(left), "keyed call delivered again on the resumed session's new socket");
        params.meta.budget_ms = Some(ms(left).max(1));
        // Its write gate ran on the first delivery (its grant is spent, its key running).
        params.meta.redelivered = true;
        let hub = std::sync::Arc::clone(&self.hub);
        hub.router().call(&hub, params, &self.principal, progress).await
    }

    /// Relays a device's `notifications/progress` to the backend that asked for
    /// it. Progress for no call in flight, malformed, or not increasing is
    /// dropped and counted (MCP: progress only increases).
    pub(super) fn relay_progress(&self, params: &Value) {
        let token = params.get(meta::PROGRESS_TOKEN).and_then(Value::as_u64);
        let progress = params.get("progress").and_then(Value::as_f64).filter(|p| p.is_finite());
        let total = params.get("total").and_then(Value::as_f64).filter(|t| t.is_finite());
        let relay = {
            let mut relays = lock(&self.progress);
            match (token.and_then(|t| relays.get_mut(&t)), progress) {
                (Some(relay), Some(p)) if relay.last.is_none_or(|last| p > last) => {
                    relay.last = Some(p);
                    Some(relay.clone())
                }
                _ => None,
            }
        };
        let (Some(relay), Some(progress)) = (relay, progress) else {
            fallback!(self.counters().progress_dropped, debug, session = %self.id, "device progress dropped: no call in flight with its token, malformed, or not increasing");
            return;
        };
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .map(|m| m.chars().take(PROGRESS_MESSAGE_CHARS).collect::<String>());
        let note =
            Progress { session: self.id.clone(), progress_token: relay.token, progress, total, message };
        let frame =
            jsonrpc::notification(mcp::method::PROGRESS, &serde_json::to_value(&note).unwrap_or_default());
        if relay.out.try_send(Outbound::Text(frame)).is_err() {
            fallback!(self.counters().outbound_full, debug, session = %self.id, "progress not relayed: the backend's queue is full or closed");
            return;
        }
        EdgeCounters::bump(&self.counters().progress_relayed);
    }
}

/// Remembers one call among the recent calls: with its outcome when it ends,
/// or as `cancelled` when the backend cancels it and its future is dropped.
struct Remembered<'a> {
    session: &'a Session,
    tool: Option<String>,
    started: Instant,
}

impl Remembered<'_> {
    fn finish(&mut self, outcome: &str) {
        if let Some(tool) = self.tool.take() {
            let latency_ms = ms(self.started.elapsed());
            self.session.remember(RecentCall { tool, outcome: outcome.to_owned(), latency_ms });
        }
    }
}

impl Drop for Remembered<'_> {
    fn drop(&mut self) {
        self.finish("cancelled");
    }
}
