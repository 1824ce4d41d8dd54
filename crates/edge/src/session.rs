//! One device session: its socket, its pending calls, its manifest, its latch.
//!
//! The session task reads the device socket; a writer task owns the sink and
//! drains a bounded queue. Calls from backends register a pending entry under
//! the link lock, so the closed latch and the pending table change together:
//! once latched, every call in flight has been failed with `channel_closed`
//! and every new one is refused, at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use tether_contract::backend::{
    CallParams, CallResponse, DropReason, DroppedTool, ListChanged, NamePair, Progress, RecentCall,
    SessionClosed, SessionInspect, SessionOpened,
};
use tether_contract::error::{ErrorKind, WireError};
use tether_contract::jsonrpc::{self, AnswerId, Frame};
use tether_contract::mcp::{self, meta, method, CallToolResult, InitializeResult, ListToolsResult};
use tether_contract::{Caps, Leg, MCP_PROTOCOL_VERSION};

use crate::caps;
use crate::counters::EdgeCounters;
use crate::exit::Exit;
use crate::hub::{BackendEvent, Hub};
use crate::lock;
use crate::manifest::{AppliedManifest, Identity, ManifestState, Swap};
use crate::revision::Revision;
use crate::ws::Outbound;

/// How many timed-out call ids are remembered to recognise late answers.
const LATE_MEMORY: usize = 4096;
/// How long malformed frames are remembered: strikes reset after a quiet minute.
const STRIKE_WINDOW: Duration = Duration::from_secs(60);
/// Malformed frames a device may send within a minute before the edge closes it with 1008.
/// Each one still gets its structured error; a buggy device survives a few,
/// a hostile one cannot keep the edge parsing garbage forever.
pub const MAX_STRIKES: u32 = 8;
/// Least time between two catalog re-reads triggered by `list_changed`.
const LIST_CHANGED_MIN_INTERVAL: Duration = Duration::from_millis(200);
/// How many recent calls `sessions/inspect` shows.
const RECENT_CALLS: usize = 32;

/// `tools/call` params as the device receives them, serialized without a `Value` tree.
#[derive(serde::Serialize)]
struct DeviceCall<'a> {
    name: &'a str,
    arguments: &'a Value,
    #[serde(rename = "_meta")]
    meta: &'a Map<String, Value>,
}

/// Stops relaying a call's progress once the call is over, however it ends.
struct ProgressGuard<'a> {
    session: &'a Session,
    token: u64,
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        lock(&self.session.link).progress.remove(&self.token);
    }
}

/// Cancels a device request whose future was dropped before its outcome.
struct Abandon<'a> {
    session: &'a Session,
    method: &'static str,
    id: u64,
    tool: &'a str,
    deadline: Instant,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        self.session.abandon(self.method, self.id, self.tool, self.deadline);
    }
}

/// Why a request to the device produced no result.
#[derive(Debug)]
enum RequestError {
    Closed(String),
    Timeout { id: u64 },
    Remote(Value),
    Overloaded,
    Malformed(String),
}

/// What the reader hands a waiting request.
#[derive(Debug)]
enum Answer {
    Result { value: Value, bytes: usize },
    Error(Value),
    Closed(String),
}

#[derive(Debug)]
struct Pending {
    tx: oneshot::Sender<Answer>,
}

#[derive(Debug)]
struct Late {
    tool: String,
    deadline: Instant,
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

/// Longest progress message relayed, in characters: a status line, not a payload.
const PROGRESS_MESSAGE_CHARS: usize = 256;

#[derive(Debug, Default)]
struct Link {
    closed: Option<String>,
    pending: HashMap<u64, Pending>,
    /// Calls whose backend asked for progress, by the token the device was given.
    progress: HashMap<u64, ProgressRelay>,
    late: HashMap<u64, Late>,
    late_order: VecDeque<u64>,
}

impl Link {
    fn remember_late(&mut self, id: u64, late: Late) {
        if self.late_order.len() >= LATE_MEMORY {
            if let Some(oldest) = self.late_order.pop_front() {
                self.late.remove(&oldest);
            }
        }
        self.late_order.push_back(id);
        self.late.insert(id, late);
    }
}

/// A connected device session.
#[derive(Debug)]
pub struct Session {
    /// Edge-assigned id, sent to the device in `initialize`.
    pub id: String,
    /// Verified principal of the device credential.
    pub principal: String,
    hub: Arc<Hub>,
    identity: RwLock<Identity>,
    outbound: mpsc::Sender<Outbound>,
    link: Mutex<Link>,
    manifest: ManifestState,
    next_id: AtomicU64,
    read_stamp: AtomicU64,
    refresh: Notify,
    closed: CancellationToken,
    close_code: Mutex<(CloseCode, &'static str)>,
    caps: RwLock<Caps>,
    recent: Mutex<VecDeque<RecentCall>>,
    strikes: Mutex<(u32, Instant)>,
    /// What the device announced at the upgrade, if anything.
    announced: Option<Revision>,
    /// What the handshake settled on.
    revision: OnceLock<Revision>,
    /// Id of the open `subscriptions/listen` request (0: none).
    listen_id: AtomicU64,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Session {
    fn new(
        hub: Arc<Hub>,
        principal: String,
        announced: Option<Revision>,
        outbound: mpsc::Sender<Outbound>,
    ) -> Session {
        Session {
            id: uuid::Uuid::new_v4().to_string(),
            principal,
            identity: RwLock::default(),
            outbound,
            link: Mutex::default(),
            manifest: ManifestState::default(),
            next_id: AtomicU64::new(1),
            read_stamp: AtomicU64::new(0),
            refresh: Notify::new(),
            closed: CancellationToken::new(),
            close_code: Mutex::new((CloseCode::Normal, "session closed")),
            caps: RwLock::new(hub.config.caps),
            recent: Mutex::default(),
            strikes: Mutex::new((0, Instant::now())),
            announced,
            revision: OnceLock::new(),
            listen_id: AtomicU64::new(0),
            hub,
        }
    }

    fn observe_leg(&self, leg: Leg, started: Instant) {
        self.hub
            .metrics
            .leg_seconds
            .get_or_create(&[("leg", leg.as_str())])
            .observe(started.elapsed().as_secs_f64());
    }

    /// The caps this session runs under (its client profile's, or the edge's).
    pub fn caps(&self) -> Caps {
        self.caps.read().map(|c| *c).unwrap_or(self.hub.config.caps)
    }

    /// Picks the client profile matching the device's `serverInfo.name`.
    fn apply_client_profile(&self, server_name: Option<&str>) {
        let Some(server_name) = server_name else { return };
        let config = &self.hub.config;
        if let Some(profile) = config.client_profiles.iter().find(|p| p.server_name == server_name) {
            if let Ok(mut caps) = self.caps.write() {
                *caps = profile.caps;
            }
            debug!(session = %self.id, profile = %profile.name, "client profile applied");
        } else if let Some(broken) =
            config.broken_profiles.iter().find(|p| p.server_name.as_deref() == Some(server_name))
        {
            EdgeCounters::bump(&self.counters().client_profile_fallbacks);
            warn!(session = %self.id, profile = %broken.name, "client profile is invalid; this device gets the default caps");
        }
    }

    fn counters(&self) -> &EdgeCounters {
        self.hub.counters()
    }

    /// The applied manifest, once the first catalog read has landed.
    pub fn manifest(&self) -> Option<Arc<AppliedManifest>> {
        self.manifest.current()
    }

    /// The device's `serverInfo`.
    pub fn server_info(&self) -> Value {
        self.identity.read().map(|i| i.server_info.clone()).unwrap_or_default()
    }

    /// Whether the session has latched closed.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Frames queued for the device's socket right now (bounded by the outbound queue).
    pub fn queued_frames(&self) -> usize {
        self.outbound.max_capacity() - self.outbound.capacity()
    }

    /// Calls waiting for the device right now.
    pub fn pending_calls(&self) -> usize {
        lock(&self.link).pending.len()
    }

    /// Forgets a request nobody waits for any more and tells the device to
    /// cancel it; its answer, if one still comes, is counted as late.
    fn abandon(&self, method: &str, id: u64, tool: &str, deadline: Instant) {
        let mut link = lock(&self.link);
        if link.pending.remove(&id).is_none() {
            return; // answered, timed out or latched: nothing is waiting
        }
        link.remember_late(id, Late { tool: tool.to_owned(), deadline });
        drop(link);
        if method == method::TOOLS_CALL {
            EdgeCounters::bump(&self.counters().calls_cancelled);
        }
        EdgeCounters::bump(&self.counters().cancels_sent);
        info!(session = %self.id, request_id = id, method, tool, "request dropped by its caller; device told to cancel");
        self.send_notification(
            method::CANCELLED,
            &json!({"requestId": id, "reason": "the caller cancelled this call"}),
        );
    }

    fn send_notification(&self, method: &str, params: &Value) {
        let frame = jsonrpc::notification(method, params);
        if self.outbound.try_send(Outbound::Text(frame)).is_err() {
            EdgeCounters::bump(&self.counters().outbound_full);
            debug!(session = %self.id, method, "notification dropped: outbound queue full or closed");
        }
    }

    /// Sends one request to the device and waits up to `leg` for its answer.
    ///
    /// Exactly one outcome: if the answer races the timer, the answer wins and
    /// the timeout is not reported.
    async fn request<P: serde::Serialize>(
        &self,
        method: &'static str,
        params: P,
        leg: Duration,
        tool: &str,
    ) -> Result<(Value, usize), RequestError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = oneshot::channel();
        {
            let mut link = lock(&self.link);
            if let Some(reason) = &link.closed {
                return Err(RequestError::Closed(reason.clone()));
            }
            link.pending.insert(id, Pending { tx });
        }
        let frame = jsonrpc::request(&Value::from(id), method, &params);
        if let Err(e) = self.outbound.try_send(Outbound::Text(frame)) {
            lock(&self.link).pending.remove(&id);
            return Err(match e {
                mpsc::error::TrySendError::Full(_) => {
                    EdgeCounters::bump(&self.counters().outbound_full);
                    warn!(session = %self.id, method, "device outbound queue full; request refused");
                    RequestError::Overloaded
                }
                mpsc::error::TrySendError::Closed(_) => RequestError::Closed("disconnected".into()),
            });
        }
        let deadline = Instant::now() + leg;
        // Dropped mid-flight (the backend cancelled): the device is told to stop.
        let _abandon = Abandon { session: self, method, id, tool, deadline };
        let answer = match tokio::time::timeout_at(deadline, &mut rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Answer::Closed("session ended".into()),
            Err(_) => {
                let mut link = lock(&self.link);
                if link.pending.remove(&id).is_some() {
                    link.remember_late(id, Late { tool: tool.to_owned(), deadline });
                    return Err(RequestError::Timeout { id });
                }
                drop(link);
                // The reader or the latch completed it between the timer and the lock.
                match rx.try_recv() {
                    Ok(answer) => answer,
                    Err(_) => Answer::Closed("session ended".into()),
                }
            }
        };
        match answer {
            Answer::Result { value, bytes } => Ok((value, bytes)),
            Answer::Error(e) => Err(RequestError::Remote(e)),
            Answer::Closed(reason) => Err(RequestError::Closed(reason)),
        }
    }

    fn request_error(&self, err: RequestError, leg: Leg, budget: Duration) -> WireError {
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
    pub async fn call_tool(
        &self,
        params: CallParams,
        progress: Option<ProgressRelay>,
    ) -> Result<CallResponse, WireError> {
        let started = Instant::now();
        let tool = params.name.clone();
        let span = tracing::info_span!("call", session = %self.id, principal = %self.principal, tool = %tool);
        let outcome = self.call_tool_inner(params, progress).instrument(span).await;
        let call = RecentCall {
            tool,
            outcome: outcome.as_ref().map_or_else(|e| e.kind.as_str().to_owned(), |_| "ok".to_owned()),
            latency_ms: ms(started.elapsed()),
        };
        let mut recent = lock(&self.recent);
        if recent.len() >= RECENT_CALLS {
            recent.pop_front();
        }
        recent.push_back(call);
        outcome
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
                    m.table
                        .pairs()
                        .into_iter()
                        .map(|(n, o)| NamePair { namespaced: n.to_owned(), original: o.to_owned() })
                        .collect()
                })
                .unwrap_or_default(),
            dropped: manifest.as_ref().map(|m| m.dropped().to_vec()).unwrap_or_default(),
            pending_calls: self.pending_calls(),
            recent_calls: lock(&self.recent).iter().cloned().collect(),
        }
    }

    async fn call_tool_inner(
        &self,
        params: CallParams,
        progress: Option<ProgressRelay>,
    ) -> Result<CallResponse, WireError> {
        let budgets = self.hub.config.budgets;
        let caps = self.caps();
        let Some(applied) = self.manifest.current() else {
            return Err(WireError::new(ErrorKind::ToolUnavailable, "session has no manifest yet")
                .with("available", Vec::<String>::new()));
        };
        if self.is_closed() {
            EdgeCounters::bump(&self.counters().calls_channel_closed);
            return Err(WireError::channel_closed(lock(&self.link).closed.as_deref().unwrap_or("closed")));
        }
        let Some(original) = applied.table.original(&params.name).map(str::to_owned) else {
            return Err(WireError::new(
                ErrorKind::ToolUnavailable,
                format!("{} is not in the session's manifest (seq {})", params.name, applied.seq),
            )
            .with("available", applied.available())
            .with("seq", applied.seq));
        };
        if let Err(refused) = applied.gate.check(&params.name, &params.arguments) {
            EdgeCounters::bump(&self.counters().arguments_refused);
            warn!(session = %self.id, tool = %params.name, error = %refused.message, "call refused at the edge: arguments do not match the input schema; nothing sent");
            return Err(refused);
        }
        let leg = params
            .meta
            .budget_ms
            .map(|b| Duration::from_millis(b).min(budgets.tool_call))
            .unwrap_or(budgets.tool_call);
        let mut call_meta = self.request_meta();
        call_meta.insert(meta::DEADLINE_MS.into(), Value::from(ms(leg)));
        if let Some(key) = &params.meta.idempotency_key {
            call_meta.insert(meta::IDEMPOTENCY_KEY.into(), Value::from(key.as_str()));
        }
        // The device gets a token of the edge's own; its progress goes back under the backend's.
        let _progress = progress.map(|relay| {
            let token = self.next_id.fetch_add(1, Ordering::Relaxed);
            call_meta.insert(meta::PROGRESS_TOKEN.into(), Value::from(token));
            lock(&self.link).progress.insert(token, relay);
            ProgressGuard { session: self, token }
        });
        let device_params = DeviceCall { name: &original, arguments: &params.arguments, meta: &call_meta };
        let started = Instant::now();
        let outcome = self.request(method::TOOLS_CALL, device_params, leg, &original).await;
        self.observe_leg(Leg::ToolCall, started);
        let (value, bytes) = match outcome {
            Ok(ok) => ok,
            Err(RequestError::Timeout { id }) => {
                EdgeCounters::bump(&self.counters().call_timeouts);
                self.send_notification(
                    method::CANCELLED,
                    &json!({"requestId": id, "reason": format!("tether edge stopped waiting after {} ms", ms(leg))}),
                );
                EdgeCounters::bump(&self.counters().cancels_sent);
                warn!(session = %self.id, call_id = id, tool = %params.name, original = %original, leg_ms = ms(leg), "tool_call leg expired; device told to cancel");
                return Err(WireError::timeout(Leg::ToolCall, ms(leg)));
            }
            Err(RequestError::Closed(reason)) => {
                EdgeCounters::bump(&self.counters().calls_channel_closed);
                return Err(WireError::channel_closed(&reason));
            }
            Err(e) => return Err(self.request_error(e, Leg::ToolCall, leg)),
        };
        if bytes > caps.result_bytes {
            EdgeCounters::bump(&self.counters().results_too_large);
            warn!(session = %self.id, tool = %params.name, bytes, limit = caps.result_bytes, "tool result over the result cap refused");
            return Err(WireError::new(
                ErrorKind::PayloadTooLarge,
                format!("tool result of {bytes} bytes exceeds the {} byte cap", caps.result_bytes),
            )
            .with("direction", "response")
            .with("bytes", bytes)
            .with("limit", caps.result_bytes));
        }
        if crate::revision::input_required(&value) {
            return Err(WireError::new(
                ErrorKind::ClientError,
                "the device asked for more input (input_required), which a tool call through the edge cannot supply",
            )
            .with("device_code", "input_required"));
        }
        let result: CallToolResult = serde_json::from_value(value).map_err(|e| {
            WireError::new(ErrorKind::ClientError, format!("device sent a malformed CallToolResult: {e}"))
        })?;
        debug!(session = %self.id, tool = %params.name, elapsed_ms = ms(started.elapsed()), "call answered");

        let mut response = CallResponse { result, manifest: None, seq: applied.seq, manifest_stale: false };
        let moved = response.result.seq().is_some_and(|s| s > applied.seq);
        if moved {
            EdgeCounters::bump(&self.counters().rereads_after_call);
            if let Err(e) = self.read_catalog(budgets.reread).await {
                EdgeCounters::bump(&self.counters().reread_failures);
                warn!(session = %self.id, error = %e, "catalog re-read after call failed; manifest may be stale");
                response.manifest_stale = true;
            }
        }
        let current = self.manifest.current();
        let stale_binding =
            params.meta.bound_seq.is_some_and(|b| current.as_ref().is_some_and(|c| b < c.seq));
        if let Some(current) = current {
            if moved || stale_binding || current.seq != applied.seq {
                response.manifest = Some((*current.view).clone());
            }
            response.seq = current.seq;
        }
        Ok(response)
    }

    /// Reads the device catalog (following `nextCursor`) within `budget`,
    /// offers it to the manifest state, and reports an applied swap to the device.
    pub async fn read_catalog(&self, budget: Duration) -> Result<Swap, WireError> {
        let (swap, report) = self.fetch_catalog(budget).await?;
        if let Some(report) = report {
            self.send_notification(method::MANIFEST_APPLIED, &report);
        }
        Ok(swap)
    }

    /// [`Self::read_catalog`] without telling the device: returns the
    /// `manifest_applied` report of an accepted swap for the caller to send.
    async fn fetch_catalog(&self, budget: Duration) -> Result<(Swap, Option<Value>), WireError> {
        let caps = self.caps();
        let stamp = self.read_stamp.fetch_add(1, Ordering::Relaxed) + 1;
        let read_started = Instant::now();
        let deadline = read_started + budget;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seq = None;
        let mut context = None;
        let mut pages = 0;
        let mut paged_out = false;
        loop {
            pages += 1;
            let mut params = Map::new();
            if let Some(c) = &cursor {
                params.insert("cursor".into(), Value::from(c.as_str()));
            }
            let envelope = self.request_meta();
            if !envelope.is_empty() {
                params.insert("_meta".into(), Value::Object(envelope));
            }
            let params = Value::Object(params);
            let left = deadline.saturating_duration_since(Instant::now());
            let (value, _) = self
                .request(method::TOOLS_LIST, params, left, method::TOOLS_LIST)
                .await
                .map_err(|e| self.request_error(e, Leg::Reread, budget))?;
            let page: ListToolsResult = serde_json::from_value(value).map_err(|e| {
                WireError::new(
                    ErrorKind::ClientError,
                    format!("device sent a malformed tools/list result: {e}"),
                )
            })?;
            seq = seq.or(mcp::seq_of(page.meta.as_ref()));
            if context.is_none() {
                context = page.meta.as_ref().and_then(|m| m.get(meta::CONTEXT)).cloned();
            }
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if pages < caps.max_list_pages && tools.len() <= caps.max_tools * 4 => {
                    cursor = Some(next)
                }
                Some(_) => {
                    paged_out = true;
                    break;
                }
                None => break,
            }
        }
        self.observe_leg(Leg::Reread, read_started);
        let seq = seq.unwrap_or(stamp);
        let mut intake = caps::intake(tools, &caps);
        if paged_out {
            intake.dropped.push(DroppedTool {
                name: "*".into(),
                bytes: 0,
                reason: DropReason::TooManyPages,
                detail: None,
            });
        }
        for drop in &intake.dropped {
            EdgeCounters::bump(&self.counters().tools_dropped);
            self.hub.metrics.drops.get_or_create(&[("reason", drop.reason.as_str())]).inc();
            warn!(session = %self.id, seq, tool = %drop.name, bytes = drop.bytes, reason = drop.reason.as_str(), detail = drop.detail.as_deref().unwrap_or(""), "tool dropped from manifest");
        }
        for _ in 0..intake.descriptions_truncated {
            EdgeCounters::bump(&self.counters().descriptions_truncated);
        }
        if intake.descriptions_truncated > 0 {
            warn!(session = %self.id, seq, count = intake.descriptions_truncated, limit = caps.description_chars, "tool descriptions cut to the description cap");
        }
        let report = json!({"seq": seq, "kept": intake.tools.len(), "dropped": intake.dropped});
        let identity = self.identity.read().map(|i| i.clone()).unwrap_or_default();
        let candidate = AppliedManifest::new(&self.id, seq, intake, context, &identity);
        let swap = self.manifest.offer(candidate);
        let mut applied = None;
        match swap {
            Swap::Accepted { from, to } => {
                EdgeCounters::bump(&self.counters().swaps_accepted);
                info!(session = %self.id, from = ?from, to, "manifest swap accepted");
                applied = Some(report);
                if from.is_some() {
                    self.hub.publish(BackendEvent::ListChanged(ListChanged {
                        session: self.id.clone(),
                        seq: to,
                    }));
                }
            }
            Swap::Rejected { applied, offered } => {
                EdgeCounters::bump(&self.counters().swaps_rejected);
                info!(session = %self.id, applied, offered, "stale manifest swap rejected");
            }
        }
        Ok((swap, applied))
    }

    /// The handshake: `initialize`, then the first catalog read. Returns the
    /// first `manifest_applied` report, which the caller sends once the session
    /// is listed: a device told its manifest applied can be called at once.
    async fn initialize(&self) -> Result<Option<Value>, WireError> {
        let budget = self.hub.config.budgets.reread;
        let revision = match self.announced {
            Some(Revision::V2026_07_28) => {
                self.discover(budget).await?;
                Revision::V2026_07_28
            }
            _ => match self.initialize_2025(budget).await {
                Ok(()) => Revision::V2025_11_25,
                // A device that answers `initialize` with an error may be one that
                // speaks only 2026-07-28 and did not announce it: ask it that way.
                Err(RequestError::Remote(error)) => {
                    EdgeCounters::bump(&self.counters().revision_fallbacks);
                    info!(session = %self.id, error = %error, "device refused initialize; trying server/discover (2026-07-28)");
                    self.discover(budget).await?;
                    Revision::V2026_07_28
                }
                Err(e) => return Err(self.request_error(e, Leg::Reread, budget)),
            },
        };
        let _ = self.revision.set(revision);
        self.hub.metrics.sessions_by_revision.get_or_create(&[("revision", revision.as_str())]).inc();
        let report = self.fetch_catalog(budget).await.map(|(_, report)| report)?;
        if revision.stateless() {
            self.listen_for_changes();
        }
        Ok(report)
    }

    /// The 2025-11-25 handshake: `initialize`, then `notifications/initialized`.
    async fn initialize_2025(&self, budget: Duration) -> Result<(), RequestError> {
        let params = json!({
            "protocolVersion": MCP_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "tether-edge", "version": env!("CARGO_PKG_VERSION")},
            "_meta": {meta::SESSION: self.id},
        });
        let (value, _) = self.request(method::INITIALIZE, params, budget, method::INITIALIZE).await?;
        let init: InitializeResult = serde_json::from_value(value).map_err(|e| {
            RequestError::Malformed(format!("device sent a malformed initialize result: {e}"))
        })?;
        self.claimed_session(init.meta.as_ref());
        let concept = init.meta.as_ref().and_then(|m| m.get(meta::CONCEPT)).cloned();
        self.set_identity(Identity {
            server_info: init.server_info,
            instructions: init.instructions,
            concept,
        });
        self.send_notification(method::INITIALIZED, &json!({}));
        Ok(())
    }

    /// The 2026-07-28 start: `server/discover` with the envelope; no handshake follows.
    async fn discover(&self, budget: Duration) -> Result<(), WireError> {
        let mut meta = crate::revision::envelope();
        meta.insert(meta::SESSION.into(), Value::from(self.id.as_str()));
        let discover = crate::revision::method::SERVER_DISCOVER;
        let (value, _) = self
            .request(discover, json!({ "_meta": meta }), budget, discover)
            .await
            .map_err(|e| self.request_error(e, Leg::Reread, budget))?;
        let found = crate::revision::read_discover(&value)
            .map_err(|e| WireError::new(ErrorKind::ClientError, format!("device's server/discover: {e}")))?;
        self.claimed_session(value.get("_meta").and_then(Value::as_object));
        self.set_identity(Identity {
            server_info: found.server_info,
            instructions: found.instructions,
            concept: found.concept,
        });
        Ok(())
    }

    /// Session identity is the edge's to mint, never a device's to claim.
    fn claimed_session(&self, meta: Option<&Map<String, Value>>) {
        if let Some(claimed) = meta.and_then(|m| m.get(meta::SESSION)) {
            if claimed.as_str() != Some(self.id.as_str()) {
                EdgeCounters::bump(&self.counters().session_claims_ignored);
                let mut shown = claimed.to_string();
                tether_contract::error::truncate_utf8(&mut shown, 80);
                warn!(session = %self.id, claimed = %shown, "device claimed another session id; ignored");
            }
        }
    }

    fn set_identity(&self, identity: Identity) {
        self.apply_client_profile(identity.server_info.get("name").and_then(Value::as_str));
        if let Ok(mut guard) = self.identity.write() {
            *guard = identity;
        }
    }

    /// Opens the 2026-07-28 `subscriptions/listen` stream for `list_changed`.
    /// The request stays open for the session's life, so it has no pending
    /// entry and no leg; its id is remembered to recognise its end.
    fn listen_for_changes(&self) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.listen_id.store(id, Ordering::Relaxed);
        let params = json!({
            "notifications": {"toolsListChanged": true},
            "_meta": crate::revision::envelope(),
        });
        let frame =
            jsonrpc::request(&Value::from(id), crate::revision::method::SUBSCRIPTIONS_LISTEN, &params);
        if self.outbound.try_send(Outbound::Text(frame)).is_err() {
            EdgeCounters::bump(&self.counters().outbound_full);
            warn!(session = %self.id, "could not open the list_changed subscription: outbound queue full");
        }
    }

    /// The revision this session speaks (2025-11-25 until the handshake says otherwise).
    pub fn revision(&self) -> Revision {
        self.revision.get().copied().unwrap_or(Revision::V2025_11_25)
    }

    /// Request params' `_meta` for this session's revision: the envelope on 2026-07-28.
    fn request_meta(&self) -> Map<String, Value> {
        if self.revision().stateless() {
            crate::revision::envelope()
        } else {
            Map::new()
        }
    }

    /// Latches with `reason` and closes the socket with `code` and `text`.
    ///
    /// The first latch wins: a session already closed keeps its close code.
    pub fn close_with(&self, reason: &str, code: CloseCode, text: &'static str) {
        self.latch_with(reason, Some((code, text)));
    }

    /// Latches the session closed: fail everything in flight, refuse the rest, tell the backends.
    pub fn latch(&self, reason: &str) {
        self.latch_with(reason, None);
    }

    fn latch_with(&self, reason: &str, close: Option<(CloseCode, &'static str)>) {
        let drained = {
            let mut link = lock(&self.link);
            if link.closed.is_some() {
                return;
            }
            link.closed = Some(reason.to_owned());
            if let Some(close) = close {
                *lock(&self.close_code) = close;
            }
            std::mem::take(&mut link.pending)
        };
        let in_flight = drained.len();
        for (_, pending) in drained {
            let _ = pending.tx.send(Answer::Closed(reason.to_owned()));
        }
        self.closed.cancel();
        self.hub.remove_closed(&self.id, reason);
        EdgeCounters::bump(&self.counters().sessions_latched);
        info!(session = %self.id, principal = %self.principal, reason, in_flight, "session latched closed");
        self.hub.publish(BackendEvent::SessionClosed(SessionClosed {
            session: self.id.clone(),
            reason: reason.to_owned(),
        }));
    }

    fn on_text(&self, text: &str) {
        match jsonrpc::parse(text) {
            Ok(Frame::Response { id, outcome }) => {
                let answer = match outcome {
                    Ok(value) => Answer::Result { value, bytes: text.len() },
                    Err(error) => Answer::Error(error),
                };
                self.complete(&id, answer);
            }
            Ok(Frame::Notification { method, params }) => self.on_notification(&method, &params),
            Ok(Frame::Request { id, method, .. }) => {
                let frame = if method == method::PING {
                    jsonrpc::response(&id, &json!({}))
                } else {
                    let err = WireError::new(
                        ErrorKind::MethodNotFound,
                        format!("the edge does not serve {method}"),
                    );
                    jsonrpc::error_response(&id, &err)
                };
                if self.outbound.try_send(Outbound::Text(frame)).is_err() {
                    EdgeCounters::bump(&self.counters().outbound_full);
                }
            }
            Err(e) => {
                EdgeCounters::bump(&self.counters().bad_frames);
                debug!(session = %self.id, error = %e, "bad frame from device");
                let (id, err) = e.to_wire();
                self.hub.metrics.frame_refused(err.kind.as_str());
                if self.outbound.try_send(Outbound::Text(jsonrpc::error_response(&id, &err))).is_err() {
                    EdgeCounters::bump(&self.counters().outbound_full);
                }
                let struck_out = {
                    let mut strikes = lock(&self.strikes);
                    let now = Instant::now();
                    if now.saturating_duration_since(strikes.1) > STRIKE_WINDOW {
                        *strikes = (0, now);
                    }
                    strikes.0 += 1;
                    strikes.0 >= MAX_STRIKES
                };
                if struck_out {
                    EdgeCounters::bump(&self.counters().strikeouts);
                    warn!(session = %self.id, strikes = MAX_STRIKES, "too many malformed frames; closing with 1008");
                    self.close_with("protocol_error", CloseCode::Policy, "too many malformed frames");
                }
            }
        }
    }

    fn complete(&self, raw_id: &Value, answer: Answer) {
        let id = match jsonrpc::answer_id(raw_id) {
            AnswerId::Exact(id) => id,
            AnswerId::Coerced(id) => {
                EdgeCounters::bump(&self.counters().answer_ids_coerced);
                warn!(session = %self.id, call_id = id, answered = %raw_id, "device answered request {id} with the id spelled {raw_id} (JSON-RPC requires the same id); delivered by value");
                id
            }
            AnswerId::Foreign => {
                EdgeCounters::bump(&self.counters().unknown_responses);
                debug!(session = %self.id, id = %raw_id, "response for an id the edge never used");
                return;
            }
        };
        if id != 0 && id == self.listen_id.load(Ordering::Relaxed) {
            EdgeCounters::bump(&self.counters().subscriptions_ended);
            warn!(session = %self.id, "device ended its list_changed subscription; its catalog changes reach the edge only after calls that move the seq");
            return;
        }
        let mut link = lock(&self.link);
        if let Some(pending) = link.pending.remove(&id) {
            drop(link);
            let _ = pending.tx.send(answer);
            return;
        }
        if let Some(late) = link.late.remove(&id) {
            link.late_order.retain(|x| *x != id);
            drop(link);
            EdgeCounters::bump(&self.counters().late_answers);
            let lateness = Instant::now().saturating_duration_since(late.deadline);
            warn!(session = %self.id, call_id = id, tool = %late.tool, lateness_ms = ms(lateness), "late answer dropped");
            return;
        }
        drop(link);
        EdgeCounters::bump(&self.counters().unknown_responses);
        debug!(session = %self.id, call_id = id, "response for an unknown or already answered id");
    }

    fn on_notification(&self, method: &str, params: &Value) {
        if method == crate::revision::method::SUBSCRIPTIONS_ACKNOWLEDGED {
            debug!(session = %self.id, "device acknowledged the list_changed subscription");
            return;
        }
        if method == mcp::method::PROGRESS {
            self.relay_progress(params);
            return;
        }
        if method != method::LIST_CHANGED {
            debug!(session = %self.id, method, "device notification ignored");
            return;
        }
        let announced = params.get("_meta").and_then(|m| m.get(meta::SEQ)).and_then(Value::as_u64);
        if let (Some(announced), Some(applied)) = (announced, self.manifest.seq()) {
            if announced <= applied {
                EdgeCounters::bump(&self.counters().list_changed_stale);
                debug!(session = %self.id, announced, applied, "list_changed not newer than applied manifest");
                return;
            }
        }
        // Notify holds one permit: a burst of list_changed coalesces into one re-read.
        self.refresh.notify_one();
    }

    /// Relays a device's `notifications/progress` to the backend that asked for
    /// it. Progress for no call in flight, malformed, or not increasing is
    /// dropped and counted (MCP: progress only increases).
    fn relay_progress(&self, params: &Value) {
        let token = params.get(meta::PROGRESS_TOKEN).and_then(Value::as_u64);
        let progress = params.get("progress").and_then(Value::as_f64).filter(|p| p.is_finite());
        let total = params.get("total").and_then(Value::as_f64).filter(|t| t.is_finite());
        let relay = {
            let mut link = lock(&self.link);
            match (token.and_then(|t| link.progress.get_mut(&t)), progress) {
                (Some(relay), Some(p)) if relay.last.is_none_or(|last| p > last) => {
                    relay.last = Some(p);
                    Some(relay.clone())
                }
                _ => None,
            }
        };
        let (Some(relay), Some(progress)) = (relay, progress) else {
            EdgeCounters::bump(&self.counters().progress_dropped);
            debug!(session = %self.id, "device progress dropped: no call in flight with its token, malformed, or not increasing");
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
            EdgeCounters::bump(&self.counters().outbound_full);
            debug!(session = %self.id, "progress not relayed: the backend's queue is full or closed");
            return;
        }
        EdgeCounters::bump(&self.counters().progress_relayed);
    }

    /// Re-reads the catalog whenever the device says it changed, one read at a time.
    ///
    /// Rate-limited: at most one `list_changed` re-read per `LIST_CHANGED_MIN_INTERVAL`;
    /// notifications that arrive meanwhile coalesce into the next read (counted).
    async fn refresher(self: Arc<Self>) {
        let budget = self.hub.config.budgets.reread;
        let mut last_read: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = self.refresh.notified() => {}
                _ = self.closed.cancelled() => return,
            }
            if let Some(earliest) = last_read.map(|t| t + LIST_CHANGED_MIN_INTERVAL) {
                if Instant::now() < earliest {
                    EdgeCounters::bump(&self.counters().list_changed_rate_limited);
                    debug!(session = %self.id, "list_changed re-read held back by the rate limit");
                    tokio::select! {
                        _ = tokio::time::sleep_until(earliest) => {}
                        _ = self.closed.cancelled() => return,
                    }
                }
            }
            last_read = Some(Instant::now());
            if let Err(e) = Box::pin(self.read_catalog(budget)).await {
                EdgeCounters::bump(&self.counters().reread_failures);
                warn!(session = %self.id, error = %e, "catalog re-read after list_changed failed; keeping the applied manifest");
            }
        }
    }
}

/// Serves one device over an upgraded WebSocket until it closes, the edge
/// shuts down, or the device breaks the protocol.
pub async fn serve_client<S, W>(
    hub: Arc<Hub>,
    sink: W,
    stream: S,
    principal: String,
    expires_in: Option<Duration>,
    announced: Option<Revision>,
    shutdown: CancellationToken,
) where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
    W: futures::Sink<Message, Error = WsError> + Unpin + Send + 'static,
{
    let expires_at = expires_in.map(|d| Instant::now() + d);
    let (tx, rx) = mpsc::channel(hub.config.outbound_queue);
    let session = Arc::new(Session::new(Arc::clone(&hub), principal, announced, tx));
    let writer_session = Arc::clone(&session);
    let writer = tokio::spawn(async move {
        let closed = writer_session.closed.clone();
        let code_of = {
            let s = Arc::clone(&writer_session);
            move || *lock(&s.close_code)
        };
        if let Err(e) = crate::ws::write_loop(sink, rx, closed, code_of).await {
            debug!(session = %writer_session.id, error = %e, "device socket write failed");
            writer_session.latch("transport_error");
        }
    });
    let lifecycle_session = Arc::clone(&session);
    let lifecycle_span =
        tracing::info_span!("session", session = %session.id, principal = %session.principal);
    let lifecycle = tokio::spawn(
        async move {
            let s = lifecycle_session;
            // Boxed so the idle task keeps only the refresher's small state.
            match Box::pin(s.initialize()).await {
                Ok(report) => {
                    EdgeCounters::bump(&s.counters().sessions_opened);
                    let seq = s.manifest.seq().unwrap_or(0);
                    info!(session = %s.id, principal = %s.principal, seq, "device session ready");
                    if !s.is_closed() {
                        s.hub.insert(Arc::clone(&s));
                        // A latch can race the insert; make sure a closed session never stays listed.
                        if s.is_closed() {
                            s.hub.remove(&s.id);
                        } else {
                            s.hub.publish(BackendEvent::SessionOpened(SessionOpened {
                                session: s.id.clone(),
                                seq,
                            }));
                        }
                    }
                    // Listed first, then told: the device's "ready" means callable.
                    if let Some(report) = report {
                        s.send_notification(method::MANIFEST_APPLIED, &report);
                    }
                    s.refresher().await;
                }
                Err(_) if s.is_closed() => {}
                Err(e) => {
                    EdgeCounters::bump(&s.counters().sessions_failed_init);
                    warn!(session = %s.id, error = %e, "device handshake failed");
                    s.close_with(
                        "handshake_failed",
                        CloseCode::Policy,
                        "initialize or first tools/list failed",
                    );
                }
            }
        }
        .instrument(lifecycle_span),
    );

    let span = tracing::info_span!("session", session = %session.id, principal = %session.principal);
    let exit = read_loop(&session, stream, &shutdown, expires_at).instrument(span).await;
    match exit.close() {
        Some((code, text)) => session.close_with(exit.as_str(), code, text),
        None => session.latch(exit.as_str()),
    }
    let _ = lifecycle.await;
    let _ = writer.await;
}

/// Reads until the socket ends; also pings quiet devices, closes half-open
/// ones after the idle deadline, and closes at the credential's expiry.
async fn read_loop<S>(
    session: &Session,
    mut stream: S,
    shutdown: &CancellationToken,
    expires_at: Option<Instant>,
) -> Exit
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let config = &session.hub.config;
    let mut last_seen = Instant::now();
    // The next moment something may be due: a ping, the idle deadline (exactly
    // `idle_timeout` after the last frame), or the credential's expiry.
    let next_check = |now: Instant, last_seen: Instant| {
        let due = (now + config.ping_interval).min(last_seen + config.idle_timeout);
        expires_at.map_or(due, |e| e.min(due))
    };
    let mut check_at = next_check(last_seen, last_seen);
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = shutdown.cancelled() => return Exit::Shutdown,
            _ = session.closed.cancelled() => return Exit::Latched,
            _ = tokio::time::sleep_until(check_at) => {
                let now = Instant::now();
                if expires_at.is_some_and(|e| now >= e) {
                    EdgeCounters::bump(&session.counters().credentials_expired);
                    info!(session = %session.id, "device credential expired; closing");
                    return Exit::CredentialExpired;
                }
                if now.saturating_duration_since(last_seen) >= config.idle_timeout {
                    EdgeCounters::bump(&session.counters().idle_closes);
                    warn!(session = %session.id, "no traffic within the idle deadline; closing a half-open socket");
                    return Exit::Idle;
                }
                if now.saturating_duration_since(last_seen) >= config.ping_interval
                    && session.outbound.try_send(Outbound::Ping).is_err()
                {
                    EdgeCounters::bump(&session.counters().outbound_full);
                }
                check_at = next_check(now, last_seen);
                continue;
            }
        };
        last_seen = Instant::now();
        match next {
            None => return Exit::Disconnected,
            Some(Ok(Message::Close(frame))) => {
                // The device's own word on why it left (a bridge names its server's exit).
                let Some(frame) = frame else { return Exit::PeerClosed(CloseCode::Normal) };
                let mut why = frame.reason.to_string();
                tether_contract::error::truncate_utf8(&mut why, 123);
                info!(session = %session.id, code = u16::from(frame.code), reason = %why, "device closed the connection");
                return Exit::PeerClosed(frame.code);
            }
            Some(Ok(Message::Text(text))) => session.on_text(text.as_str()),
            Some(Ok(Message::Binary(_))) => {
                EdgeCounters::bump(&session.counters().binary_frames);
                session.hub.metrics.frame_refused("binary");
                warn!(session = %session.id, "binary frame from device; closing with 1003");
                return Exit::Binary;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                let exit = Exit::from_read_error(&e);
                match exit {
                    Exit::FrameTooLarge => {
                        EdgeCounters::bump(&session.counters().oversized_frames);
                        session.hub.metrics.frame_refused("oversized");
                        warn!(session = %session.id, error = %e, "frame over the transport ceiling; closing with 1009");
                    }
                    Exit::ProtocolViolation(kind) => {
                        EdgeCounters::bump(&session.counters().bad_frames);
                        session.hub.metrics.frame_refused(kind);
                        warn!(session = %session.id, kind, error = %e, "device broke WebSocket framing; closing with 1002");
                    }
                    Exit::InvalidUtf8 => {
                        EdgeCounters::bump(&session.counters().bad_frames);
                        session.hub.metrics.frame_refused("invalid_utf8");
                        warn!(session = %session.id, "text frame that is not UTF-8; closing with 1007");
                    }
                    _ => debug!(session = %session.id, error = %e, "device socket read failed"),
                }
                return exit;
            }
        }
    }
}
