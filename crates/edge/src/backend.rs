//! One backend link: an agent backend multiplexing many sessions over one socket.
//!
//! Every request in flight is driven by the link's one task, so a slow device
//! never blocks another session's call and no call hops between tasks; the
//! same task writes answers, session events (manifest moved, session opened
//! or closed) and relayed progress to the socket, batched.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use tether_contract::backend::{method, CallParams, ListParams, ReaderInfo, SessionParams, SessionsList};
use tether_contract::error::{ErrorKind, WireError};
use tether_contract::jsonrpc::{self, Frame};
use tether_contract::mcp;
use tether_contract::tasks::TaskParams;
use tether_contract::writes::DecideParams;
use tether_counters::fallback;
use tether_telemetry::{self as telemetry, Kind};

use crate::auth::Link;
use crate::counters::EdgeCounters;
use crate::hub::Hub;
use crate::router::{Reader, TaskAnswer, TaskOp};
use crate::session::ProgressRelay;
use crate::ws::Outbound;

fn params<T: DeserializeOwned>(value: Value) -> Result<T, WireError> {
    // Absent params read as `{}`, so a method whose params are all optional takes none.
    let value = if value.is_null() { Value::Object(serde_json::Map::new()) } else { value };
    serde_json::from_value(value)
        .map_err(|e| WireError::new(ErrorKind::InvalidParams, format!("invalid params: {e}")))
}

/// Verifies a call's user credential: the turn's verified user, whose
/// sessions alone it may call (the router checks ownership where the session lives).
///
/// The backend's service token opened the link; it does not grant any
/// session. The turn's user credential (`_meta.credential`, a `tether-client`
/// token) must verify.
fn caller(hub: &Hub, session: &str, credential: Option<&str>) -> Result<String, WireError> {
    let refuse = |kind: ErrorKind, message: String| {
        fallback!(
            hub.counters().calls_forbidden,
            debug,
            session,
            kind = kind.as_str(),
            "call refused: no valid user credential"
        );
        Err(WireError::new(kind, message).with("session", session))
    };
    let Some(token) = credential else {
        return refuse(
            ErrorKind::Forbidden,
            "tools/call needs the turn's user credential in _meta.credential".into(),
        );
    };
    match hub.auth.verify_remembered(token, Link::Client) {
        Err(reason) => {
            refuse(ErrorKind::Unauthenticated, format!("the turn's user credential was refused: {reason}"))
        }
        Ok(claims) => Ok(claims.sub),
    }
}

/// Verifies a read's credential: a user's (`tether-client`) or an operator's
/// (`tether-operator`). Nothing else reads, whatever token opened the link.
fn reader(hub: &Hub, method_name: &str, credential: Option<&str>) -> Result<Reader, WireError> {
    reader_until(hub, method_name, credential).map(|(reader, _)| reader)
}

/// [`reader`], and the credential's `exp` (Unix seconds).
fn reader_until(hub: &Hub, method_name: &str, credential: Option<&str>) -> Result<(Reader, u64), WireError> {
    let refuse = |kind: ErrorKind, message: String| {
        fallback!(
            hub.counters().reads_refused,
            debug,
            method = method_name,
            kind = kind.as_str(),
            "session read refused"
        );
        Err(WireError::new(kind, message))
    };
    let Some(token) = credential else {
        return refuse(
            ErrorKind::Forbidden,
            format!("{method_name} needs the user's credential (or an operator's) in _meta.credential"),
        );
    };
    match hub.auth.verify_remembered(token, Link::Client) {
        Ok(claims) => Ok((Reader::User(claims.sub), claims.exp)),
        Err(as_user) => match hub.auth.verify_remembered(token, Link::Operator) {
            Ok(claims) => {
                EdgeCounters::bump(&hub.counters().operator_reads);
                info!(operator = %claims.sub, method = method_name, "operator credential used to read sessions");
                Ok((Reader::Operator(claims.sub), claims.exp))
            }
            Err(_) => {
                refuse(ErrorKind::Unauthenticated, format!("the reader's credential was refused: {as_user}"))
            }
        },
    }
}

/// Serializes a result once, to raw JSON the response embeds as is (no `Value` tree).
fn to_value<T: serde::Serialize>(v: &T) -> Result<Box<RawValue>, WireError> {
    serde_json::value::to_raw_value(v)
        .map_err(|e| WireError::new(ErrorKind::Internal, format!("could not encode result: {e}")))
}

/// Answers one backend request; `writer` is the asking link's outbound queue,
/// where a call's progress goes when the backend asked for it.
pub async fn handle(
    hub: &Arc<Hub>,
    method_name: &str,
    raw: Value,
    writer: &mpsc::Sender<Outbound>,
) -> Result<Box<RawValue>, WireError> {
    let router = hub.router();
    match method_name {
        method::SESSIONS_LIST => {
            let p: ListParams = params(raw)?;
            let (reader, expires_at) = reader_until(hub, method_name, p.meta.credential.as_deref())?;
            let listed = router.listing(hub, &reader, p.session.as_deref()).await?;
            let info = ReaderInfo { expires_at: Some(expires_at), ..reader.info() };
            to_value(&SessionsList { sessions: listed.sessions, reader: Some(info), partial: listed.partial })
        }
        method::TURN_BEGIN => {
            let p: SessionParams = params(raw)?;
            let reader = reader(hub, method_name, p.meta.credential.as_deref())?;
            to_value(&router.begin_turn(hub, &p.session, &reader).await?)
        }
        method::SESSIONS_INSPECT => {
            let p: SessionParams = params(raw)?;
            let reader = reader(hub, method_name, p.meta.credential.as_deref())?;
            to_value(&router.inspect(hub, &p.session, &reader).await?)
        }
        method::TOOLS_LIST => {
            let p: SessionParams = params(raw)?;
            let reader = reader(hub, method_name, p.meta.credential.as_deref())?;
            to_value(&*router.manifest(hub, &p.session, &reader).await?)
        }
        method::APPROVALS_DECIDE => {
            let p: DecideParams = params(raw)?;
            let reader = reader(hub, method_name, p.meta.credential.as_deref())?;
            to_value(&router.decide(hub, &p, &reader).await?)
        }
        method::TOOLS_CALL => {
            let mut p: CallParams = params(raw)?;
            // Only an edge delivers a call again; a backend's request is always a first delivery.
            p.meta.redelivered = false;
            EdgeCounters::bump(&hub.counters().calls_started);
            let outcome = if hub.is_draining() {
                fallback!(hub.counters().calls_refused_draining, info, session = %p.session, "call refused: the edge is draining");
                Err(WireError::new(ErrorKind::Overloaded, "edge is draining; retry on another edge")
                    .with("retry_after_ms", 1000))
            } else {
                let _in_flight = hub.call_guard();
                let span = telemetry::leg(Kind::Server, method::TOOLS_CALL, &p.name, "edge");
                telemetry::adopt_meta(&span, &p.meta);
                span.record("tether.session", p.session.as_str());
                telemetry::carry(&span, &mut p.meta);
                let called = async {
                    let owner = caller(hub, &p.session, p.meta.credential.as_deref())?;
                    let relay = p.meta.progress_token.clone().map(|t| ProgressRelay::new(t, writer.clone()));
                    router.call(hub, p, &owner, relay).await
                };
                telemetry::run(span, called).await
            };
            let outcome_label = match &outcome {
                Ok(_) => {
                    EdgeCounters::bump(&hub.counters().calls_ok);
                    "ok"
                }
                Err(e) => {
                    EdgeCounters::bump(&hub.counters().calls_failed);
                    e.kind.as_str()
                }
            };
            hub.metrics.calls.get_or_create(&[("outcome", outcome_label)]).inc();
            to_value(&outcome?)
        }
        method::TASKS_GET | method::TASKS_RESULT | method::TASKS_CANCEL => {
            let p: TaskParams = params(raw)?;
            let owner = caller(hub, &p.session, p.meta.credential.as_deref())?;
            let op = match method_name {
                method::TASKS_GET => TaskOp::Get,
                method::TASKS_CANCEL => TaskOp::Cancel,
                _ => TaskOp::Outcome { wait_ms: OUTCOME_SLICE_MS },
            };
            // tasks/result asks in slices: a task whose session moved to another
            // edge meanwhile is asked for again where it went.
            loop {
                match router.task(hub, &p, op, &owner).await? {
                    TaskAnswer::State(state) => break to_value(&state),
                    TaskAnswer::Outcome(Some(outcome)) => break to_value(&outcome),
                    TaskAnswer::Outcome(None) => {}
                }
            }
        }
        other => {
            Err(WireError::new(ErrorKind::MethodNotFound, format!("the backend link has no method {other}")))
        }
    }
}

/// A backend request running inside its link's task: its id, the key its
/// cancellation is filed under, and its outcome (None: the backend cancelled it).
type Running =
    Pin<Box<dyn Future<Output = (Value, String, Option<Result<Box<RawValue>, WireError>>)> + Send>>;

/// Serves one backend connection until it closes or the edge shuts down.
///
/// One task per link: it reads requests, drives every request in flight
/// (no task per request), and writes answers, events and relayed progress to
/// the socket itself — batched, flushed once per turn of the loop — so a
/// call costs no hop between tasks on the backend's side.
pub async fn serve_backend<S, W>(
    hub: Arc<Hub>,
    mut sink: W,
    mut stream: S,
    principal: String,
    shutdown: CancellationToken,
) where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
    W: Sink<Message, Error = WsError> + Unpin + Send + 'static,
{
    // Progress relayed from devices arrives here (bounded; a full queue drops progress, counted).
    let (tx, mut relayed) = mpsc::channel::<Outbound>(hub.config.outbound_queue * 4);
    let mut running: FuturesUnordered<Running> = FuturesUnordered::new();
    // Requests in flight by id (as JSON text), so `notifications/cancelled` can stop one.
    let mut cancels: HashMap<String, CancellationToken> = HashMap::new();
    let mut events = hub.subscribe();
    let mut close = (CloseCode::Normal, "backend link closed");
    let mut out: Vec<String> = Vec::new();
    let mut writable = true;
    loop {
        tokio::select! {
            next = stream.next() => match next {
                // A socket's frames are bounded by the WebSocket layer (1009
                // below); an in-process link's are not, so the bound is here,
                // and it refuses the one request rather than the whole link.
                Some(Ok(Message::Text(text))) if text.len() > hub.config.caps.transport_ceiling => {
                    hub.metrics.frame_refused("oversized");
                    fallback!(hub.counters().oversized_frames, warn, %principal, bytes = text.len(), "backend request over the transport ceiling; refused with payload_too_large");
                    if let Ok(Frame::Request { id, .. }) = jsonrpc::parse(text.as_str()) {
                        let ceiling = hub.config.caps.transport_ceiling;
                        let err = WireError::new(
                            ErrorKind::PayloadTooLarge,
                            format!("the request is {} bytes, over the edge's {ceiling}-byte ceiling; send smaller arguments", text.len()),
                        )
                        .with("direction", "request")
                        .with("limit", ceiling);
                        out.push(jsonrpc::error_response(&id, &err));
                    }
                }
                Some(Ok(Message::Text(text))) => match jsonrpc::parse(text.as_str()) {
                    Ok(Frame::Request { id, .. }) if running.len() >= hub.config.backend_max_in_flight => {
                        fallback!(hub.counters().backend_requests_refused, warn, %principal, limit = hub.config.backend_max_in_flight, "backend request refused: too many in flight on this link");
                        let err = WireError::new(ErrorKind::Overloaded, "too many requests in flight on this link");
                        out.push(jsonrpc::error_response(&id, &err));
                    }
                    Ok(Frame::Request { id, .. }) if cancels.contains_key(&id.to_string()) => {
                        // Its cancellation would be ambiguous: ids name one request in flight.
                        hub.metrics.frame_refused("duplicate_id");
                        fallback!(hub.counters().bad_frames, warn, %principal, id = %id, "backend request refused: its id is already in flight on this link");
                        let err = WireError::new(ErrorKind::InvalidRequest, "a request with this id is already in flight on this link");
                        out.push(jsonrpc::error_response(&id, &err));
                    }
                    Ok(Frame::Request { id, method, params }) => {
                        let key = id.to_string();
                        let cancelled = CancellationToken::new();
                        cancels.insert(key.clone(), cancelled.clone());
                        let (hub, tx) = (Arc::clone(&hub), tx.clone());
                        running.push(Box::pin(async move {
                            let outcome = tokio::select! {
                                outcome = handle(&hub, &method, params, &tx) => Some(outcome),
                                // Dropping `handle` mid-call tells the device to cancel.
                                _ = cancelled.cancelled() => {
                                    EdgeCounters::bump(&hub.counters().backend_cancels);
                                    debug!(method = %method, "backend cancelled its request; no response sent");
                                    None
                                }
                            };
                            (id, key, outcome)
                        }));
                    }
                    Ok(Frame::Notification { method, params }) if method == mcp::method::CANCELLED => {
                        let key = params.get("requestId").map(Value::to_string).unwrap_or_default();
                        match cancels.get(&key) {
                            Some(token) => token.cancel(),
                            None => debug!(%principal, id = %key, "cancellation for a request not in flight ignored"),
                        }
                    }
                    Ok(_) => debug!(%principal, "backend notification or response ignored"),
                    Err(e) => {
                        fallback!(hub.counters().bad_frames, debug, %principal, error = %e, "bad frame from backend; answered with a structured error");
                        let (id, err) = e.to_wire();
                        hub.metrics.frame_refused(err.kind.as_str());
                        out.push(jsonrpc::error_response(&id, &err));
                    }
                },
                Some(Ok(Message::Binary(_))) => {
                    hub.metrics.frame_refused("binary");
                    fallback!(hub.counters().binary_frames, warn, %principal, "binary frame from backend; closing with 1003");
                    close = (CloseCode::Unsupported, "binary frames are not accepted");
                    break;
                }
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(WsError::Capacity(_))) => {
                    hub.metrics.frame_refused("oversized");
                    fallback!(hub.counters().oversized_frames, warn, %principal, "backend frame over the transport ceiling; closing with 1009");
                    close = (CloseCode::Size, "frame exceeds the transport ceiling");
                    break;
                }
                Some(Err(e)) => {
                    debug!(%principal, error = %e, "backend socket read failed");
                    break;
                }
            },
            Some((id, key, outcome)) = running.next(), if !running.is_empty() => {
                cancels.remove(&key);
                if let Some(outcome) = outcome {
                    // A call's progress was relayed before its answer: it goes out first.
                    take_relayed(&mut relayed, &mut out);
                    out.push(answer(&id, outcome));
                }
            }
            Some(relayed) = relayed.recv() => {
                if let Outbound::Text(frame) = relayed {
                    out.push(frame);
                }
            }
            event = events.recv() => match event {
                Ok(event) => out.push(event.to_frame()),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    fallback!(hub.counters().backend_events_lagged, warn, %principal, lost = n, "backend fell behind; session events lost");
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = shutdown.cancelled() => {
                close = (CloseCode::Away, "edge shutting down");
                break;
            }
        }
        // Everything else already done lands in the same write.
        while let Some(Some((id, key, outcome))) = running.next().now_or_never() {
            cancels.remove(&key);
            if let Some(outcome) = outcome {
                take_relayed(&mut relayed, &mut out);
                out.push(answer(&id, outcome));
            }
        }
        if !out.is_empty() {
            // A backend that stopped reading would otherwise stop this link for ever.
            match tokio::time::timeout(BACKEND_WRITE_DEADLINE, write(&mut sink, &mut out)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    debug!(%principal, error = %e, "backend socket write failed");
                    writable = false;
                    break;
                }
                Err(_) => {
                    fallback!(hub.counters().backend_writes_stalled, warn, %principal, deadline_s = BACKEND_WRITE_DEADLINE.as_secs(), "backend stopped reading: a write did not finish in time; link closed");
                    writable = false;
                    break;
                }
            }
        }
    }
    if !shutdown.is_cancelled() && !cancels.is_empty() {
        // The backend left: nobody waits for these outcomes, so the devices stop the work.
        warn!(%principal, in_flight = cancels.len(), "backend link closed with requests in flight; cancelling them");
        for token in cancels.values() {
            token.cancel();
        }
    }
    // Let calls in flight deliver their outcomes (sessions fail them at once on shutdown).
    let grace = tokio::time::sleep(hub.config.shutdown_grace);
    tokio::pin!(grace);
    while !running.is_empty() {
        tokio::select! {
            Some((id, _, outcome)) = running.next() => {
                if let Some(outcome) = outcome {
                    out.push(answer(&id, outcome));
                }
            }
            () = &mut grace => {
                warn!(%principal, "backend calls still running at close; their outcomes are lost with the socket");
                break;
            }
        }
    }
    if writable && (out.is_empty() || write(&mut sink, &mut out).await.is_ok()) {
        let _ = crate::ws::send_close(&mut sink, close.0, close.1).await;
    }
}

/// Moves relayed progress already queued into `out`.
fn take_relayed(relayed: &mut mpsc::Receiver<Outbound>, out: &mut Vec<String>) {
    while let Ok(Outbound::Text(frame)) = relayed.try_recv() {
        out.push(frame);
    }
}

/// A request's response frame.
fn answer(id: &Value, outcome: Result<Box<RawValue>, WireError>) -> String {
    match outcome {
        Ok(result) => jsonrpc::response(id, &result),
        Err(err) => jsonrpc::error_response(id, &err),
    }
}

/// Longest one ask for a task's outcome waits where the task is followed, in ms.
const OUTCOME_SLICE_MS: u64 = 5_000;

/// How long one write to a backend may take before the link is closed: a
/// healthy backend reads continuously, so this only ends a stuck one.
const BACKEND_WRITE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes every pending frame, then flushes once.
async fn write<W>(sink: &mut W, out: &mut Vec<String>) -> Result<(), WsError>
where
    W: Sink<Message, Error = WsError> + Unpin,
{
    for frame in out.drain(..) {
        sink.feed(Message::text(frame)).await?;
    }
    sink.flush().await
}
