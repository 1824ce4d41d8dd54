//! The asking side: a backend on this edge reaching sessions other edges hold.
//!
//! Sessions held here go straight to [`Local`]. For the rest, a call is
//! published to the session's subject with a reply subject of this edge's;
//! the holder says `accepted` at once, relays progress, then the outcome. No
//! responders is `session_not_found` at once; a holder lost after accepting
//! (silent past the edge timeout) fails the call with `channel_closed` then,
//! not at the end of the 7 s leg.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use tether_contract::backend::{CallParams, CallResponse, Manifest, SessionInfo, SessionInspect, TurnBegun};
use tether_contract::error::{ErrorKind, WireError};
use tether_contract::mcp::RawCallResult;
use tether_contract::tasks::TaskParams;
use tether_contract::writes::{DecideParams, Decided};
use tether_contract::Leg;
use tether_counters::fallback;
use tether_edge::hub::{BackendEvent, Hub};
use tether_edge::router::{Claimed, Listing, Local, Reader, Routed, Router, TaskAnswer, TaskOp};
use tether_edge::session::{ProgressRelay, Session};
use tether_edge::ws::Outbound;
use tether_rpc::lock;
use tether_telemetry::{self as telemetry, Kind};

use crate::counters::ClusterCounters;
use crate::subject::{self, is_session_token};
use crate::wire::{
    encode, is_moving, parse, Answer, CallRequest, ClaimRequest, ListRequest, ReadOp, ReadRequest, Reply,
};
use crate::Inner;

/// What arrives for one request in flight.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// NATS found no subscriber for the subject: no edge holds the session.
    NoResponders,
    /// A holder's reply (progress is relayed before it gets here).
    Reply(Reply),
}

#[derive(Debug)]
struct Waiter {
    tx: mpsc::UnboundedSender<Incoming>,
    relay: Option<ProgressRelay>,
}

/// This edge's requests in flight, by the id their reply subject carries.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Waiter>>,
}

/// Why a reply found no request.
#[derive(Debug)]
pub(crate) enum Undelivered {
    /// Nobody waits for it any more.
    Late,
    /// Progress the backend's queue had no room for.
    ProgressDropped,
}

impl Waiters {
    fn open(&self, relay: Option<ProgressRelay>) -> Waiting<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.open).insert(id, Waiter { tx, relay });
        Waiting { id, rx, waiters: self }
    }

    /// Hands a reply to its request; progress goes straight to the backend's
    /// queue, so it is there before the outcome.
    pub(crate) fn deliver(&self, id: u64, incoming: Incoming) -> Result<(), Undelivered> {
        let open = lock(&self.open);
        let Some(waiter) = open.get(&id) else { return Err(Undelivered::Late) };
        if let Incoming::Reply(Reply::Progress { frame }) = incoming {
            let relay = waiter.relay.as_ref().ok_or(Undelivered::ProgressDropped)?;
            return relay.out.try_send(Outbound::Text(frame)).map_err(|_| Undelivered::ProgressDropped);
        }
        waiter.tx.send(incoming).map_err(|_| Undelivered::Late)
    }
}

/// One request in flight; dropping it forgets the request.
struct Waiting<'a> {
    id: u64,
    rx: mpsc::UnboundedReceiver<Incoming>,
    waiters: &'a Waiters,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        lock(&self.waiters.open).remove(&self.id);
    }
}

/// A call sent to another edge; if it is dropped before its outcome (the
/// backend cancelled), the holder is told to cancel it on the device.
struct Sent<'a> {
    inner: &'a Inner,
    session: &'a str,
    reply: String,
    done: bool,
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (client, subject, reply) = (
            self.inner.client.clone(),
            subject::session_cancel(self.session),
            std::mem::take(&mut self.reply),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = client.publish(subject, reply.into()).await;
            });
        }
    }
}

/// What a request to another edge was: a call (its arguments can shrink)
/// or a read or resume claim (nothing the backend sent can).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Call,
    Read,
}

/// Why NATS refused to carry a request, from a publish or a request error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// Larger than the server's `max_payload`.
    TooLarge,
    /// A subject the server will not take: tether built it wrong.
    InvalidSubject,
    /// The client could not send it (its connection's queue closed, an I/O error).
    NotSent,
}

impl Refusal {
    fn of_publish(kind: async_nats::client::PublishErrorKind) -> Refusal {
        use async_nats::client::PublishErrorKind as K;
        match kind {
            K::MaxPayloadExceeded => Refusal::TooLarge,
            K::InvalidSubject => Refusal::InvalidSubject,
            K::Send => Refusal::NotSent,
        }
    }

    /// `None` for the kinds that are not a refusal (a timeout, no responders).
    fn of_request(kind: async_nats::RequestErrorKind) -> Option<Refusal> {
        use async_nats::RequestErrorKind as K;
        match kind {
            K::MaxPayloadExceeded => Some(Refusal::TooLarge),
            K::InvalidSubject => Some(Refusal::InvalidSubject),
            K::Other => Some(Refusal::NotSent),
            K::TimedOut | K::NoResponders => None,
        }
    }
}

/// What a backend is told when NATS refuses to carry a request of `bytes`
/// (counted as `publish_failures` by the caller): too large is
/// `payload_too_large` with the limit, a bad subject is a bug to report, and
/// anything else is `overloaded`, to retry.
fn refused(
    refusal: Refusal,
    e: &dyn std::fmt::Display,
    asked: Asked,
    session: &str,
    bytes: usize,
    max_payload: usize,
) -> WireError {
    match refusal {
        Refusal::TooLarge => {
            let hint = match asked {
                Asked::Call => "; send smaller arguments",
                Asked::Read => "",
            };
            WireError::new(
                ErrorKind::PayloadTooLarge,
                format!("the request is larger than the cluster carries (NATS max_payload {max_payload} bytes){hint}"),
            )
            .with("direction", "request")
            .with("bytes", bytes)
            .with("limit", max_payload)
        }
        Refusal::InvalidSubject => WireError::new(
            ErrorKind::Internal,
            format!("NATS refused the subject this edge built for session {session} ({e}); this is a bug in tether, and retrying will not help"),
        )
        .with("cluster", "invalid_subject")
        .with("session", session),
        Refusal::NotSent => WireError::new(
            ErrorKind::Overloaded,
            format!("this edge could not send the request to the edge holding the session through NATS ({e}); retry in a moment"),
        )
        .with("retry_after_ms", 1000)
        .with("cluster", "request_failed")
        .with("session", session),
    }
}

/// How often a request for a session that may be moving between edges asks
/// again (for up to `ClusterConfig::move_wait`): a session moving is held by
/// neither edge between the old holder letting go and the new one subscribing.
const MOVE_RETRY: Duration = Duration::from_millis(20);

/// Routes to [`Local`] for sessions held here and over NATS for the rest.
#[derive(Debug)]
pub(crate) struct ClusterRouter {
    inner: Arc<Inner>,
}

impl ClusterRouter {
    pub(crate) fn new(inner: Arc<Inner>) -> ClusterRouter {
        ClusterRouter { inner }
    }

    fn counters(&self) -> &ClusterCounters {
        self.inner.counters()
    }

    /// The answer for a session no edge holds: `channel_closed` with its
    /// reason if it closed recently (here or, by its event, elsewhere), else
    /// `session_not_found`.
    fn absent(hub: &Hub, session: &str) -> WireError {
        match Local::session(hub, session) {
            Err(e) => e,
            Ok(_) => WireError::new(ErrorKind::SessionNotFound, format!("no connected session {session}"))
                .with("session", session),
        }
    }

    fn unreachable(&self, session: &str) -> WireError {
        fallback!(self.counters().cluster_unreachable, warn, session, nats = %self.inner.config.nats, "request for another edge's session refused: NATS is unreachable");
        WireError::new(
            ErrorKind::Overloaded,
            "this edge cannot reach the cluster right now (NATS is unreachable), so sessions held by other edges are out of reach; retry in a moment",
        )
        .with("retry_after_ms", 1000)
        .with("cluster", "unreachable")
        .with("session", session)
    }

    /// `channel_closed` for a call or read whose holder went silent or away.
    fn edge_lost(&self, session: &str, why: &str) -> WireError {
        fallback!(
            self.counters().calls_edge_lost,
            warn,
            session,
            why,
            "request failed: the edge holding the session was lost"
        );
        WireError::channel_closed("edge_lost").with("session", session)
    }

    /// After no responders: true (having waited [`MOVE_RETRY`]) when the
    /// request should be sent again because an edge still alive announced
    /// the session and it may be moving, for up to the configured move wait
    /// from the first miss (`since`); false when the session is absent.
    async fn awaits_move(&self, session: &str, since: &mut Option<Instant>) -> bool {
        let wait = self.inner.config.move_wait;
        if wait.is_zero() {
            return false;
        }
        let Some(announced_by) = lock(&self.inner.remote).get(session).cloned() else { return false };
        if !self.inner.members.is_alive(&announced_by) {
            return false;
        }
        let first = *since.get_or_insert_with(|| {
            fallback!(self.counters().moves_awaited, info, session, %announced_by, "no edge answers for a session another edge announced; asking again while it may be moving edges");
            Instant::now()
        });
        if first.elapsed() >= wait {
            return false;
        }
        tokio::time::sleep(MOVE_RETRY).await;
        true
    }

    /// No edge holds `session` (after any wait for a move): counted, and
    /// `session_not_found` or the reason it closed.
    fn unheld(&self, hub: &Hub, session: &str, waited: bool) -> WireError {
        fallback!(
            self.counters().no_responders,
            debug,
            session,
            waited,
            "request for a session no edge holds"
        );
        Self::absent(hub, session)
    }

    /// A read of a session another edge holds.
    async fn read<T: DeserializeOwned>(
        &self,
        hub: &Hub,
        session: &str,
        op: ReadOp,
        reader: &Reader,
    ) -> Result<T, WireError> {
        let request = encode(&ReadRequest { op, reader: reader.clone() });
        self.ask(hub, session, subject::session_read(session), request, &self.counters().remote_reads).await
    }

    /// One request/reply to the edge holding `session` (a read or a claim):
    /// no responders is the session's absence, a silent holder `edge_lost`.
    async fn ask<T: DeserializeOwned>(
        &self,
        hub: &Hub,
        session: &str,
        subject: String,
        payload: bytes::Bytes,
        asked: &tether_counters::Counter,
    ) -> Result<T, WireError> {
        if !is_session_token(session) {
            return Err(Self::absent(hub, session));
        }
        if !self.inner.connected() {
            return Err(self.unreachable(session));
        }
        ClusterCounters::bump(asked);
        let bytes = payload.len();
        let mut moving = None;
        loop {
            let request = async_nats::Request::new()
                .payload(payload.clone())
                .timeout(Some(self.inner.config.read_timeout));
            let e = match self.inner.client.send_request(subject.clone(), request).await {
                Ok(message) => {
                    return match parse::<Answer>(&message.payload, self.inner.config.max_message) {
                        Ok(answer) => match answer.into_result() {
                            Err(e) if is_moving(&e) => {
                                if self.awaits_move(session, &mut moving).await {
                                    continue;
                                }
                                Err(self.unheld(hub, session, true))
                            }
                            other => other,
                        },
                        Err(e) => {
                            fallback!(self.counters().bad_messages, warn, session, error = %e, "answer from another edge dropped");
                            Err(WireError::new(
                                ErrorKind::Internal,
                                format!("the edge holding the session answered with a bad message: {e}"),
                            ))
                        }
                    };
                }
                Err(e) => e,
            };
            return Err(match e.kind() {
                async_nats::RequestErrorKind::NoResponders => {
                    if self.awaits_move(session, &mut moving).await {
                        continue;
                    }
                    self.unheld(hub, session, moving.is_some())
                }
                async_nats::RequestErrorKind::TimedOut => self
                    .edge_lost(session, "the edge holding the session did not answer in time")
                    .with("after_ms", ms(self.inner.config.read_timeout)),
                kind => {
                    fallback!(self.counters().publish_failures, warn, session, ?kind, error = %e, "request to another edge not sent: NATS refused it");
                    let refusal = Refusal::of_request(kind).unwrap_or(Refusal::NotSent);
                    refused(refusal, &e, Asked::Read, session, bytes, self.inner.client.max_payload())
                }
            });
        }
    }

    /// Publishes a call to the edge holding `session`, replies to `reply`;
    /// a refusal is counted, logged and told as what it is.
    async fn publish_call(
        &self,
        session: &str,
        reply: &str,
        payload: &bytes::Bytes,
    ) -> Result<(), WireError> {
        let published = self
            .inner
            .client
            .publish_with_reply(subject::session_call(session), reply.to_owned(), payload.clone())
            .await;
        published.map_err(|e| {
            fallback!(self.counters().publish_failures, warn, session, kind = ?e.kind(), error = %e, "call to another edge not sent: NATS refused it");
            let max_payload = self.inner.client.max_payload();
            refused(Refusal::of_publish(e.kind()), &e, Asked::Call, session, payload.len(), max_payload)
        })
    }

    /// [`ClusterRouter::call_remote`] as the cluster hop's span, whose context
    /// the holding edge's spans join.
    async fn call_traced(
        &self,
        hub: &Hub,
        mut params: CallParams,
        owner: &str,
        progress: Option<ProgressRelay>,
    ) -> Result<CallResponse<RawCallResult>, WireError> {
        let span = telemetry::leg(
            Kind::Client,
            tether_contract::backend::method::TOOLS_CALL,
            &params.name,
            "cluster_hop",
        );
        span.record("tether.session", params.session.as_str());
        telemetry::carry(&span, &mut params.meta);
        telemetry::run(span, self.call_remote(hub, params, owner, progress)).await
    }

    /// A call on a session another edge holds.
    async fn call_remote(
        &self,
        hub: &Hub,
        mut params: CallParams,
        owner: &str,
        progress: Option<ProgressRelay>,
    ) -> Result<CallResponse<RawCallResult>, WireError> {
        let session = params.session.clone();
        if !is_session_token(&session) {
            return Err(Self::absent(hub, &session));
        }
        if !self.inner.connected() {
            return Err(self.unreachable(&session));
        }
        ClusterCounters::bump(&self.counters().remote_calls);
        let (budgets, config) = (self.inner.budgets, &self.inner.config);
        let leg = params
            .meta
            .budget_ms
            .map(|b| Duration::from_millis(b).min(budgets.tool_call))
            .unwrap_or(budgets.tool_call);
        // The holder's legs (call, then a re-read) plus the hop, inside the chain's headroom.
        let deadline = Instant::now() + leg + budgets.reread + config.hop;
        // The user's credential was verified here; it does not travel.
        params.meta.credential = None;
        let progress_token = progress.as_ref().map(|r| r.token.clone());
        let mut waiting = self.inner.waiters.open(progress);
        let reply = subject::reply(&self.inner.me, waiting.id);
        let request =
            CallRequest { from: self.inner.me.clone(), owner: owner.to_owned(), params, progress_token };
        let payload = encode(&request);
        self.publish_call(&session, &reply, &payload).await?;
        let mut sent = Sent { inner: &self.inner, session: &session, reply, done: false };
        let accept_by = Instant::now() + config.edge_timeout;
        let mut holder: Option<watch::Receiver<bool>> = None;
        let mut connection = self.inner.metrics.connection.subscribe();
        let mut moving = None;
        loop {
            let mut unheld = false;
            tokio::select! {
                incoming = waiting.rx.recv() => match incoming {
                    Some(Incoming::NoResponders) => unheld = true,
                    Some(Incoming::Reply(Reply::Accepted { edge })) => holder = Some(self.inner.members.watch(&edge)),
                    Some(Incoming::Reply(Reply::Done { outcome })) => {
                        sent.done = true;
                        return outcome.into_result();
                    }
                    Some(Incoming::Reply(other)) => {
                        fallback!(self.counters().bad_messages, warn, session, reply = ?other, "unexpected reply to a call dropped");
                    }
                    None => return Err(WireError::new(ErrorKind::Internal, "the call's reply channel closed")),
                },
                () = lost(&mut holder) => return Err(self.edge_lost(&session, "it went silent past the edge timeout or left")),
                _ = connection.wait_for(|up| !*up) => {
                    fallback!(self.counters().cluster_unreachable, warn, session, "call in flight to another edge failed: NATS became unreachable; its outcome is unknown");
                    return Err(WireError::channel_closed("cluster_unreachable").with("session", session.as_str()));
                }
                () = tokio::time::sleep_until(accept_by), if holder.is_none() => {
                    return Err(self.edge_lost(&session, "no edge took the call within the edge timeout"));
                }
                () = tokio::time::sleep_until(deadline) => {
                    return Err(WireError::timeout(Leg::ToolCall, ms(leg))
                        .with("cluster", "the edge holding the session did not answer within the call's legs and the hop"));
                }
            }
            if unheld {
                if !self.awaits_move(&session, &mut moving).await {
                    sent.done = true;
                    return Err(self.unheld(hub, &session, moving.is_some()));
                }
                // No edge received it, so sending it again cannot run it twice.
                if let Err(refused) = self.publish_call(&session, &sent.reply, &payload).await {
                    sent.done = true;
                    return Err(refused);
                }
            }
        }
    }

    /// `sessions/list` of every other edge alive; an edge that does not
    /// answer in time is left out, counted and logged.
    async fn gather(&self, reader: &Reader) -> (Vec<SessionInfo>, bool) {
        if !self.inner.connected() {
            fallback!(
                self.counters().lists_partial,
                warn,
                "sessions/list answered with this edge's sessions only: NATS is unreachable"
            );
            return (Vec::new(), true);
        }
        let mut expected: HashSet<String> = self.inner.members.alive().into_iter().collect();
        if expected.is_empty() {
            // Alone, or joined too recently to have heard every edge's heartbeat.
            let settled = lock(&self.inner.metrics.up_since)
                .is_some_and(|up| up.elapsed() >= self.inner.config.edge_timeout);
            return (Vec::new(), !settled);
        }
        ClusterCounters::bump(&self.counters().lists_gathered);
        let mut waiting = self.inner.waiters.open(None);
        let request = ListRequest { from: self.inner.me.clone(), reader: reader.clone() };
        let reply = subject::reply(&self.inner.me, waiting.id);
        if let Err(e) = self.inner.client.publish_with_reply(subject::LIST, reply, encode(&request)).await {
            fallback!(self.counters().publish_failures, warn, error = %e, "could not ask the other edges for their sessions");
            return (Vec::new(), true);
        }
        let until = Instant::now() + self.inner.config.read_timeout;
        let mut sessions = Vec::new();
        while !expected.is_empty() {
            tokio::select! {
                incoming = waiting.rx.recv() => match incoming {
                    Some(Incoming::Reply(Reply::Listed { edge, sessions: part, last })) => {
                        sessions.extend(part);
                        if last {
                            expected.remove(&edge);
                        }
                    }
                    Some(_) => {}
                    None => break,
                },
                () = tokio::time::sleep_until(until) => {
                    fallback!(
                        self.counters().lists_partial,
                        warn,
                        missing = ?expected,
                        "sessions/list answered without the edges that did not answer in time"
                    );
                    break;
                }
            }
        }
        // Whole only when every edge expected answered.
        let partial = !expected.is_empty();
        (sessions, partial)
    }
}

/// Resolves when the watched edge is lost; never without one.
async fn lost(holder: &mut Option<watch::Receiver<bool>>) {
    match holder {
        Some(alive) => {
            let _ = alive.wait_for(|alive| !*alive).await;
        }
        None => std::future::pending().await,
    }
}

/// Unanswered waits for one task's outcome asked again before the loss is the caller's.
const TASK_WAITS_LOST: u32 = 2;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Router for ClusterRouter {
    fn list<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        reader: &'a Reader,
        only: Option<&'a str>,
    ) -> Routed<'a, Vec<SessionInfo>> {
        Box::pin(async move { self.listing(hub, reader, only).await.map(|l| l.sessions) })
    }

    fn listing<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        reader: &'a Reader,
        only: Option<&'a str>,
    ) -> Routed<'a, Listing> {
        Box::pin(async move {
            match only {
                Some(id) if hub.session(id).is_some() => {
                    Ok(Listing { sessions: Local.list(hub, reader, only).await?, partial: false })
                }
                Some(id) => match self.read(hub, id, ReadOp::List, reader).await {
                    Err(e) if matches!(e.kind, ErrorKind::SessionNotFound | ErrorKind::ChannelClosed) => {
                        Ok(Listing { sessions: Vec::new(), partial: !self.inner.connected() })
                    }
                    other => other.map(|sessions| Listing { sessions, partial: false }),
                },
                None => {
                    let mut all = Local.list(hub, reader, None).await?;
                    let (others, partial) = self.gather(reader).await;
                    all.extend(others);
                    all.sort_by(|a, b| a.session.cmp(&b.session));
                    all.dedup_by(|a, b| a.session == b.session);
                    Ok(Listing { sessions: all, partial })
                }
            }
        })
    }

    fn begin_turn<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, TurnBegun> {
        if hub.session(session).is_some() {
            return Local.begin_turn(hub, session, reader);
        }
        Box::pin(self.read(hub, session, ReadOp::BeginTurn, reader))
    }

    fn decide<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        params: &'a DecideParams,
        reader: &'a Reader,
    ) -> Routed<'a, Decided> {
        if hub.session(&params.session).is_some() {
            return Local.decide(hub, params, reader);
        }
        Box::pin(self.read(hub, &params.session, ReadOp::Decide(params.clone()), reader))
    }

    fn inspect<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, SessionInspect> {
        if hub.session(session).is_some() {
            return Local.inspect(hub, session, reader);
        }
        Box::pin(self.read(hub, session, ReadOp::Inspect, reader))
    }

    fn manifest<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, Arc<Manifest>> {
        if hub.session(session).is_some() {
            return Local.manifest(hub, session, reader);
        }
        Box::pin(
            async move { self.read::<Manifest>(hub, session, ReadOp::Manifest, reader).await.map(Arc::new) },
        )
    }

    fn call<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        params: CallParams,
        owner: &'a str,
        progress: Option<ProgressRelay>,
    ) -> Routed<'a, CallResponse<RawCallResult>> {
        if hub.session(&params.session).is_some() {
            return Local.call(hub, params, owner, progress);
        }
        Box::pin(self.call_traced(hub, params, owner, progress))
    }

    fn claim<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        secret: &'a str,
        principal: &'a str,
    ) -> Routed<'a, Claimed> {
        if hub.session(session).is_some() {
            return Local.claim(hub, session, secret, principal);
        }
        let claim = encode(&ClaimRequest { secret: secret.to_owned(), principal: principal.to_owned() });
        Box::pin(self.ask(
            hub,
            session,
            subject::session_claim(session),
            claim,
            &self.counters().remote_reads,
        ))
    }

    fn task<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        params: &'a TaskParams,
        op: TaskOp,
        owner: &'a str,
    ) -> Routed<'a, TaskAnswer> {
        // Followed here (its session held or waiting for its device here): answered here.
        if hub.task(&params.task).is_some() {
            return Box::pin(Local::task(hub, params, op, owner));
        }
        // Elsewhere, a wait for the outcome is cut to fit one request; the backend asks again.
        let op = match op {
            TaskOp::Outcome { wait_ms } => {
                TaskOp::Outcome { wait_ms: wait_ms.min(ms(self.inner.config.read_timeout) / 4) }
            }
            op => op,
        };
        Box::pin(async move {
            let reader = Reader::User(owner.to_owned());
            let mut lost = 0;
            loop {
                let read = ReadOp::Task { task: params.task.clone(), op };
                match self.read(hub, &params.session, read, &reader).await {
                    // A wait for the outcome asked while the session moves can
                    // land on the edge it left, which never answers: that read
                    // was counted lost; the wait goes on where the session is.
                    Err(e)
                        if matches!(op, TaskOp::Outcome { .. })
                            && e.closed_reason() == Some("edge_lost")
                            && lost < TASK_WAITS_LOST =>
                    {
                        lost += 1;
                        tracing::info!(session = %params.session, task = %params.task, lost, "wait for a task's outcome got no answer; asking again where the session is");
                    }
                    other => return other,
                }
            }
        })
    }

    fn hold<'a>(&'a self, hub: &'a Arc<Hub>, session: &'a Arc<Session>) -> Routed<'a, ()> {
        Box::pin(crate::holder::hold(&self.inner, hub, session))
    }

    fn published(&self, event: &BackendEvent) {
        // The outbox task sends it in order; it outlives every session.
        let _ = self.inner.outbox.send(event.clone());
    }

    fn degraded(&self) -> Option<String> {
        (!self.inner.connected()).then(|| format!("NATS unreachable at {}", self.inner.config.nats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::client::{PublishError, PublishErrorKind};
    use async_nats::{RequestError, RequestErrorKind};

    fn request_refused(kind: RequestErrorKind) -> WireError {
        let e = RequestError::with_source(kind, "broken pipe");
        let refusal = Refusal::of_request(kind).unwrap_or(Refusal::NotSent);
        refused(refusal, &e, Asked::Read, "s1", 4096, 2048)
    }

    fn call_refused(kind: PublishErrorKind) -> WireError {
        let e = PublishError::with_source(kind, "broken pipe");
        refused(Refusal::of_publish(kind), &e, Asked::Call, "s1", 4096, 2048)
    }

    #[test]
    fn a_request_nats_will_not_carry_is_payload_too_large_with_its_size_and_the_limit() {
        for err in [
            request_refused(RequestErrorKind::MaxPayloadExceeded),
            call_refused(PublishErrorKind::MaxPayloadExceeded),
        ] {
            assert_eq!(err.kind, ErrorKind::PayloadTooLarge, "{err:?}");
            assert!(err.message.contains("2048"), "{}", err.message);
            assert_eq!(err.details.get("bytes"), Some(&serde_json::json!(4096)));
            assert_eq!(err.details.get("limit"), Some(&serde_json::json!(2048)));
        }
        // Only a call's arguments can shrink; a read has none to send smaller.
        assert!(call_refused(PublishErrorKind::MaxPayloadExceeded).message.contains("smaller arguments"));
        assert!(!request_refused(RequestErrorKind::MaxPayloadExceeded).message.contains("arguments"));
    }

    #[test]
    fn a_request_the_client_could_not_send_says_so_and_when_to_retry() {
        for err in [request_refused(RequestErrorKind::Other), call_refused(PublishErrorKind::Send)] {
            assert_eq!(err.kind, ErrorKind::Overloaded, "{err:?}");
            assert!(err.message.contains("broken pipe") && err.message.contains("retry"), "{}", err.message);
            assert_eq!(err.details.get("cluster"), Some(&serde_json::json!("request_failed")));
            assert_eq!(err.details.get("session"), Some(&serde_json::json!("s1")));
        }
    }

    #[test]
    fn a_subject_nats_refuses_is_a_bug_to_report_not_a_retry() {
        for err in [
            request_refused(RequestErrorKind::InvalidSubject),
            call_refused(PublishErrorKind::InvalidSubject),
        ] {
            assert_eq!(err.kind, ErrorKind::Internal, "{err:?}");
            assert!(err.details.get("retry_after_ms").is_none(), "{err:?}");
            assert_eq!(err.details.get("cluster"), Some(&serde_json::json!("invalid_subject")));
        }
    }

    #[test]
    fn a_timeout_or_no_responders_is_not_a_refusal() {
        assert_eq!(Refusal::of_request(RequestErrorKind::TimedOut), None);
        assert_eq!(Refusal::of_request(RequestErrorKind::NoResponders), None);
    }
}
