//! The backend link: one socket to an edge, many sessions, blocking calls.
//!
//! Requests are multiplexed by id; a reader task completes them (in one
//! process, the edge's writes do: [`crate::in_process`]). When the
//! socket closes, every request in flight fails with `channel_closed` at once
//! and new ones are refused. Notifications from the edge go to a bounded
//! queue the application reads with [`BackendLink::notifications`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;
use tracing::{debug, warn};

use tether_contract::backend::{
    method, CallParams, CallResponse, ListChanged, Manifest, Progress, SessionClosed, SessionInspect,
    SessionOpened, SessionResumed, SessionsList, TurnBegun,
};
use tether_contract::jsonrpc::{self, AnswerId, Frame};
use tether_contract::{ErrorKind, Leg, WireError, BACKEND_PATH};
use tether_counters::fallback;
use tether_rpc::{lock, Completion, Outcome, Pending};

use crate::counters::CoreCounters;

/// Bound of the outbound request queue.
const OUTBOUND_QUEUE: usize = 1024;
/// Bound of the notification queue; past it notifications are dropped (counted).
const NOTIFICATION_QUEUE: usize = 1024;
/// How many given-up requests are remembered to recognise the edge's late answers.
const LATE_MEMORY: usize = 1024;

/// Something the edge told this backend without being asked.
#[derive(Debug, Clone, PartialEq)]
pub enum Notification {
    /// A session's manifest moved.
    ListChanged(ListChanged),
    /// A session latched closed.
    SessionClosed(SessionClosed),
    /// A session came online (listed and callable).
    SessionOpened(SessionOpened),
    /// A session's device came back within the grace period: same session, new socket.
    SessionResumed(SessionResumed),
    /// A task's status moved (made by a call of this or another backend of the user).
    TaskStatus(tether_contract::tasks::TaskState),
    /// A notification this version does not know.
    Other {
        /// Method name.
        method: String,
        /// Params.
        params: Value,
    },
}

fn task_params(params: &tether_contract::tasks::TaskParams) -> Result<Value, WireError> {
    serde_json::to_value(params)
        .map_err(|e| WireError::new(ErrorKind::InvalidParams, format!("bad task params: {e}")))
}

/// Where a call's progress goes while it runs (bounded: a slow reader loses
/// progress, never the call).
pub type ProgressSender = mpsc::Sender<Progress>;

#[derive(Debug)]
pub(crate) struct Inner {
    outbound: mpsc::Sender<Message>,
    /// Requests waiting for the edge, and the latch.
    calls: Pending<Result<Value, WireError>>,
    /// Calls that asked for progress, by the token they sent.
    progress: Mutex<HashMap<u64, ProgressSender>>,
    counters: Arc<CoreCounters>,
}

impl Inner {
    /// Hands a `notifications/progress` to the call that asked for it; any
    /// other (unknown token, malformed, or a full receiver) is dropped, counted.
    fn route_progress(&self, params: Value) {
        let parsed: Option<Progress> = serde_json::from_value(params).ok();
        let sender = parsed
            .as_ref()
            .and_then(|p| p.progress_token.as_u64())
            .and_then(|token| lock(&self.progress).get(&token).cloned());
        let delivered = match (parsed, sender) {
            (Some(progress), Some(sender)) => sender.try_send(progress).is_ok(),
            _ => false,
        };
        if !delivered {
            fallback!(
                self.counters.progress_dropped,
                debug,
                "edge progress dropped: no call waiting for it, malformed, or its reader is behind"
            );
        }
    }

    /// Handles one frame from the edge: an answer completes its request,
    /// progress goes to its call, a notification to the application's queue.
    pub(crate) fn receive(&self, text: &str, notify: &mpsc::Sender<Notification>) {
        match jsonrpc::parse(text) {
            Ok(Frame::Response { id, outcome }) => {
                self.complete(&id, outcome.map_err(|e| WireError::from_json(&e)))
            }
            Ok(Frame::Notification { method, params })
                if method == tether_contract::mcp::method::PROGRESS =>
            {
                self.route_progress(params)
            }
            Ok(Frame::Notification { method, params }) => {
                if notify.try_send(decode_notification(method, params)).is_err() {
                    fallback!(
                        self.counters.notifications_dropped,
                        debug,
                        "edge notification dropped: application is not reading notifications"
                    );
                }
            }
            Ok(Frame::Request { .. }) => debug!("edge sent a request; backends serve none"),
            Err(e) => {
                fallback!(self.counters.bad_frames, warn, error = %e, "bad frame from edge");
            }
        }
    }

    pub(crate) fn latch(&self, reason: &str) {
        if let Some(in_flight) = self.calls.latch(reason) {
            debug!(reason, in_flight, "backend link latched closed");
        }
    }

    /// Tells the edge a request's caller stopped waiting, so it stops the call on the device.
    fn cancel(&self, id: u64) {
        CoreCounters::bump(&self.counters.requests_cancelled);
        let params = json!({"requestId": id, "reason": "the caller stopped waiting"});
        let note = Message::text(jsonrpc::notification(tether_contract::mcp::method::CANCELLED, &params));
        if self.outbound.try_send(note).is_err() {
            warn!(id, "request dropped mid-flight; the edge could not be told (queue full or closed)");
        } else {
            debug!(id, "request dropped mid-flight; edge told to cancel");
        }
    }

    fn complete(&self, raw_id: &Value, outcome: Result<Value, WireError>) {
        let id = match jsonrpc::answer_id(raw_id) {
            AnswerId::Exact(id) => Some(id),
            AnswerId::Coerced(id) => {
                fallback!(self.counters.response_ids_coerced, warn, request = id, answered = %raw_id, "edge answered request {id} with the id spelled {raw_id}; delivered by value");
                Some(id)
            }
            AnswerId::Foreign => None,
        };
        match id.map_or(Completion::Unknown, |id| self.calls.complete(id, outcome)) {
            Completion::Delivered => {}
            Completion::Late(()) => {
                fallback!(self.counters.late_responses, debug, id = %raw_id, "edge response for a request that already gave up");
            }
            Completion::Unknown => {
                fallback!(self.counters.late_responses, debug, id = %raw_id, "edge response for a request id this link never used or long forgot");
            }
        }
    }
}

/// A connection to an edge's `/v1/backend`.
#[derive(Debug)]
pub struct BackendLink {
    inner: Arc<Inner>,
    notifications: Mutex<Option<mpsc::Receiver<Notification>>>,
    /// Approvals, keys and receipts of this backend's server-side writes
    /// (the edge keeps the client tools'), made with the first turn's window.
    writes: std::sync::OnceLock<Arc<crate::writes::CoreLedger>>,
}

impl BackendLink {
    /// Dials `url` (`ws://host:port`, the path defaults to `/v1/backend`) with a backend token.
    pub async fn connect(url: &str, token: &str) -> Result<BackendLink, WireError> {
        let url = if url.trim_end_matches('/').matches('/').count() <= 2 {
            format!("{}{BACKEND_PATH}", url.trim_end_matches('/'))
        } else {
            url.to_owned()
        };
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| WireError::new(ErrorKind::InvalidParams, format!("bad edge url {url}: {e}")))?;
        let bearer = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| WireError::new(ErrorKind::Unauthenticated, "token is not a valid header value"))?;
        request.headers_mut().insert("authorization", bearer);
        // Nagle off: a request is one small frame, and delayed ACKs would stall it ~40 ms.
        let config = WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0);
        let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
        let (ws, _) = connecting.await.map_err(|e| match e {
            WsError::Http(resp) if resp.status().as_u16() == 401 => {
                let body =
                    resp.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                WireError::new(ErrorKind::Unauthenticated, format!("edge refused the backend token: {body}"))
            }
            other => WireError::channel_closed(&format!("could not connect to {url}: {other}")),
        })?;
        Ok(BackendLink::from_stream(ws))
    }

    /// Runs the link over an already-upgraded WebSocket (tests use in-memory duplex streams).
    pub fn from_stream<S>(ws: WebSocketStream<S>) -> BackendLink
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (link, mut queue, notify_tx) = BackendLink::open();
        let inner = &link.inner;
        let (mut sink, mut stream) = ws.split();
        let writer_inner = Arc::clone(inner);
        tokio::spawn(async move {
            while let Some(msg) = queue.recv().await {
                if let Err(e) = sink.send(msg).await {
                    debug!(error = %e, "backend link write failed");
                    writer_inner.latch("edge connection lost");
                    return;
                }
            }
            let _ = sink.close().await;
        });
        let reader_inner = Arc::clone(inner);
        tokio::spawn(async move {
            let reason = loop {
                match stream.next().await {
                    Some(Ok(Message::Text(text))) => reader_inner.receive(text.as_str(), &notify_tx),
                    Some(Ok(Message::Close(frame))) => break close_reason(frame),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break format!("edge connection lost: {e}"),
                    None => break "edge connection lost".to_owned(),
                }
            };
            reader_inner.latch(&reason);
        });
        link
    }

    /// A link whose edge runs in this process: the edge serves the returned
    /// end's requests and hands its frames straight to this link's waiting
    /// calls, with no socket, no WebSocket framing and no reader task between.
    pub fn in_process() -> (BackendLink, crate::in_process::EdgeEnd) {
        let (link, queue, notify) = BackendLink::open();
        let end = crate::in_process::EdgeEnd::new(Arc::clone(&link.inner), queue, notify);
        (link, end)
    }

    /// A link not yet attached to anything: its outbound queue, and where the
    /// edge's notifications go.
    fn open() -> (BackendLink, mpsc::Receiver<Message>, mpsc::Sender<Notification>) {
        let (outbound, queue) = mpsc::channel::<Message>(OUTBOUND_QUEUE);
        let (notify_tx, notify_rx) = mpsc::channel(NOTIFICATION_QUEUE);
        let inner = Arc::new(Inner {
            outbound,
            calls: Pending::new(LATE_MEMORY),
            progress: Mutex::default(),
            counters: Arc::new(CoreCounters::default()),
        });
        let link = BackendLink {
            inner,
            notifications: Mutex::new(Some(notify_rx)),
            writes: std::sync::OnceLock::new(),
        };
        (link, queue, notify_tx)
    }

    /// Takes the notification queue (once; later calls get None).
    pub fn notifications(&self) -> Option<mpsc::Receiver<Notification>> {
        lock(&self.notifications).take()
    }

    /// Fallback counters of this link and the turns run over it.
    pub fn counters(&self) -> Arc<CoreCounters> {
        Arc::clone(&self.inner.counters)
    }

    /// Whether the link has closed.
    pub fn is_closed(&self) -> bool {
        self.inner.calls.is_closed()
    }

    /// Sends one request and waits at most `budget`; expiry is a `timeout` on `leg`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before its outcome leaves nothing behind: the
    /// pending entry goes, and the edge is told (`notifications/cancelled`)
    /// so it stops the call on the device.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        leg: Leg,
        budget: Duration,
    ) -> Result<Value, WireError> {
        let request = self.inner.calls.open(()).map_err(|reason| WireError::channel_closed(&reason))?;
        let id = request.id();
        let frame = Message::text(jsonrpc::request(&Value::from(id), method, &params));
        if let Err(refused) = self.inner.outbound.try_send(frame) {
            drop(request);
            if matches!(refused, mpsc::error::TrySendError::Closed(_)) {
                return Err(WireError::channel_closed("edge connection lost"));
            }
            fallback!(
                self.inner.counters.requests_refused,
                warn,
                method,
                queue = OUTBOUND_QUEUE,
                "backend link outbound queue is full; request refused as overloaded"
            );
            return Err(WireError::new(ErrorKind::Overloaded, "backend link outbound queue is full"));
        }
        let deadline = Instant::now() + budget;
        match request.wait_until(deadline, |id| self.inner.cancel(id)).await {
            Outcome::Answered(outcome) => outcome,
            Outcome::Closed(reason) => Err(WireError::channel_closed(&reason)),
            Outcome::TimedOut => {
                let ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
                Err(WireError::timeout(leg, ms))
            }
        }
    }

    async fn typed<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        leg: Leg,
        budget: Duration,
    ) -> Result<T, WireError> {
        let value = self.request(method, params, leg, budget).await?;
        serde_json::from_value(value).map_err(|e| {
            WireError::new(ErrorKind::Internal, format!("edge sent a malformed {method} result: {e}"))
        })
    }

    /// Lists the sessions `credential` may read: a user's own, or every one for
    /// an operator credential (`tether-operator`).
    pub async fn sessions(&self, credential: &str, budget: Duration) -> Result<SessionsList, WireError> {
        let params = json!({ "_meta": { "credential": credential } });
        self.typed(method::SESSIONS_LIST, params, Leg::TurnStart, budget).await
    }

    /// [`BackendLink::sessions`] narrowed to one session: empty when it is not
    /// connected or not the credential's to read. The reader is named either way.
    pub async fn session_info(
        &self,
        session: &str,
        credential: &str,
        budget: Duration,
    ) -> Result<SessionsList, WireError> {
        let params = json!({ "session": session, "_meta": { "credential": credential } });
        self.typed(method::SESSIONS_LIST, params, Leg::TurnStart, budget).await
    }

    /// Starts a turn against `session` for its user.
    pub async fn begin_turn(
        &self,
        session: &str,
        credential: &str,
        budget: Duration,
    ) -> Result<TurnBegun, WireError> {
        self.typed(method::TURN_BEGIN, read_params(session, credential), Leg::TurnStart, budget).await
    }

    /// The operator's view of one session: names, drops, recent calls (its user
    /// may read it too).
    pub async fn inspect(
        &self,
        session: &str,
        credential: &str,
        budget: Duration,
    ) -> Result<SessionInspect, WireError> {
        self.typed(method::SESSIONS_INSPECT, read_params(session, credential), Leg::TurnStart, budget).await
    }

    /// Reads `session`'s applied manifest for its user.
    pub async fn list_tools(
        &self,
        session: &str,
        credential: &str,
        budget: Duration,
    ) -> Result<Manifest, WireError> {
        self.typed(method::TOOLS_LIST, read_params(session, credential), Leg::TurnStart, budget).await
    }

    /// The user's answer to an approval the edge asked for (`approve: None`
    /// only reads where it stands); prefer [`crate::Turn::decide`].
    pub async fn decide(
        &self,
        params: &tether_contract::writes::DecideParams,
        budget: Duration,
    ) -> Result<tether_contract::writes::Decided, WireError> {
        let value = serde_json::to_value(params)
            .map_err(|e| WireError::new(ErrorKind::InvalidParams, format!("bad decide params: {e}")))?;
        self.typed(method::APPROVALS_DECIDE, value, Leg::TurnStart, budget).await
    }

    /// A task's status now (`tasks/get`), within `budget`.
    pub async fn task(
        &self,
        params: &tether_contract::tasks::TaskParams,
        budget: Duration,
    ) -> Result<tether_contract::tasks::TaskState, WireError> {
        self.typed(method::TASKS_GET, task_params(params)?, Leg::TurnStart, budget).await
    }

    /// A task's outcome (`tasks/result`): waits up to `budget` for it to end;
    /// the call's result, or the error it ended with.
    pub async fn task_result(
        &self,
        params: &tether_contract::tasks::TaskParams,
        budget: Duration,
    ) -> Result<CallResponse, WireError> {
        self.typed(method::TASKS_RESULT, task_params(params)?, Leg::Task, budget).await
    }

    /// Stops a task on its device (`tasks/cancel`); cancelled is final.
    pub async fn cancel_task(
        &self,
        params: &tether_contract::tasks::TaskParams,
        budget: Duration,
    ) -> Result<tether_contract::tasks::TaskState, WireError> {
        self.typed(method::TASKS_CANCEL, task_params(params)?, Leg::TurnStart, budget).await
    }

    /// The ledger of this backend's server-side writes.
    pub(crate) fn writes(&self, window: Duration) -> &Arc<crate::writes::CoreLedger> {
        self.writes.get_or_init(|| {
            Arc::new(tether_ledger::Ledger::new(window, tether_ledger::LedgerLimits::default()))
        })
    }

    /// Receipts of this backend's server-side writes (a device's are in `sessions/inspect`).
    pub fn receipts(&self) -> Vec<tether_contract::writes::Receipt> {
        self.writes.get().map(|l| l.receipts.recent()).unwrap_or_default()
    }

    /// One raw `tools/call` whose device progress goes to `progress` while it
    /// runs (prefer [`crate::Turn::call_with`]).
    pub async fn call_with_progress(
        &self,
        mut params: CallParams,
        budget: Duration,
        progress: ProgressSender,
    ) -> Result<CallResponse, WireError> {
        let token = self.inner.calls.fresh_id();
        params.meta.progress_token = Some(Value::from(token));
        lock(&self.inner.progress).insert(token, progress);
        let _route = ProgressRoute { inner: &self.inner, token };
        self.call(params, budget).await
    }

    /// One raw `tools/call` within `budget` (prefer [`crate::Turn::call`], which re-validates names).
    pub async fn call(&self, params: CallParams, budget: Duration) -> Result<CallResponse, WireError> {
        let value = serde_json::to_value(&params).map_err(|e| {
            WireError::new(ErrorKind::InvalidArguments, format!("arguments do not serialize: {e}"))
        })?;
        self.typed(method::TOOLS_CALL, value, Leg::PerTool, budget).await
    }
}

impl Drop for BackendLink {
    fn drop(&mut self) {
        self.inner.latch("backend link dropped");
        let _ = self.inner.outbound.try_send(Message::Close(None));
    }
}

/// Stops routing a call's progress once the call is over, however it ends.
struct ProgressRoute<'a> {
    inner: &'a Inner,
    token: u64,
}

impl Drop for ProgressRoute<'_> {
    fn drop(&mut self) {
        lock(&self.inner.progress).remove(&self.token);
    }
}

/// Params of a read naming one session: the edge shows it only to its user or an operator.
fn read_params(session: &str, credential: &str) -> Value {
    json!({ "session": session, "_meta": { "credential": credential } })
}

/// Why the edge closed the link, from its close frame.
pub(crate) fn close_reason(frame: Option<tokio_tungstenite::tungstenite::protocol::CloseFrame>) -> String {
    frame.map_or_else(|| "edge closed the link".to_owned(), |f| f.reason.to_string())
}

fn decode_notification(method: String, params: Value) -> Notification {
    let decoded = match method.as_str() {
        method::LIST_CHANGED => serde_json::from_value(params.clone()).ok().map(Notification::ListChanged),
        method::SESSION_CLOSED => {
            serde_json::from_value(params.clone()).ok().map(Notification::SessionClosed)
        }
        method::SESSION_OPENED => {
            serde_json::from_value(params.clone()).ok().map(Notification::SessionOpened)
        }
        method::SESSION_RESUMED => {
            serde_json::from_value(params.clone()).ok().map(Notification::SessionResumed)
        }
        method::TASK_STATUS => serde_json::from_value(params.clone()).ok().map(Notification::TaskStatus),
        _ => None,
    };
    decoded.unwrap_or(Notification::Other { method, params })
}
