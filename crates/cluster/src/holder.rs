//! The answering side: this edge's sessions served to the cluster, and the
//! cluster heard on this edge.
//!
//! A session is subscribed at `tether.s.<id>.*` before it is listed (NATS
//! has the interest before anyone hears of the session) until it closes, so
//! a call for it arrives here and nowhere else.
//! Calls from other edges run through [`Local`] exactly as a backend of this
//! edge's would. Besides, one task per concern: replies to this edge's own
//! requests, other edges' events, heartbeats and losses, the gathered list,
//! and the outbox that publishes this edge's events in order.

use std::sync::Arc;

use async_nats::{Message, StatusCode, Subscriber};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, Instrument};

use tether_contract::backend::SessionClosed;
use tether_contract::error::{ErrorKind, WireError};
use tether_contract::tasks::TaskParams;
use tether_contract::writes::DecideParams;
use tether_counters::fallback;
use tether_edge::hub::{BackendEvent, Hub};
use tether_edge::router::{Local, Reader, Router};
use tether_edge::session::{ProgressRelay, Session};
use tether_edge::ws::Outbound;
use tether_rpc::lock;
use tether_telemetry::{self as telemetry, Kind};

use crate::counters::ClusterCounters;
use crate::router::{Incoming, Undelivered};
use crate::subject::{self, is_session_token};
use crate::wire::{
    encode, parse, Answer, Beat, CallRequest, ClaimRequest, Event, EventKind, Gone, ListRequest, ReadOp,
    ReadRequest, Reply,
};
use crate::{ClusterError, Inner};

/// Sessions per `Listed` message, well inside NATS's default 1 MiB payload.
const LIST_CHUNK: usize = 500;

/// Subscribes to the cluster's subjects and spawns the tasks that serve them.
pub(crate) async fn start(
    inner: Arc<Inner>,
    hub: Arc<Hub>,
    outbox: mpsc::UnboundedReceiver<BackendEvent>,
    shutdown: CancellationToken,
) -> Result<(), ClusterError> {
    let client = &inner.client;
    let replies = client.subscribe(subject::replies(&inner.me)).await?;
    let events = client.subscribe(subject::EVENTS).await?;
    let beats = client.subscribe(subject::BEAT).await?;
    let gone = client.subscribe(subject::GONE).await?;
    let lists = client.subscribe(subject::LIST).await?;
    let _ = inner.shutdown.set(shutdown.clone());
    tokio::spawn(serve_replies(Arc::clone(&inner), replies, shutdown.clone()));
    tokio::spawn(serve_events(Arc::clone(&inner), Arc::clone(&hub), events, shutdown.clone()));
    tokio::spawn(serve_lists(Arc::clone(&inner), Arc::clone(&hub), lists, shutdown.clone()));
    tokio::spawn(beat(Arc::clone(&inner), Arc::clone(&hub), beats, gone, shutdown.clone()));
    tokio::spawn(publish_events(inner, outbox, shutdown));
    Ok(())
}

/// Counts and logs a message from the cluster side that cannot be used.
fn bad(inner: &Inner, subject: &str, error: &dyn std::fmt::Display) {
    fallback!(inner.counters().bad_messages, warn, %subject, %error, "message from the cluster dropped");
}

/// Publishes this edge's events in order (a session was held, see [`hold`],
/// before its `opened` or `resumed` event was published here).
async fn publish_events(
    inner: Arc<Inner>,
    mut outbox: mpsc::UnboundedReceiver<BackendEvent>,
    shutdown: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            event = outbox.recv() => match event { Some(e) => e, None => break },
            () = shutdown.cancelled() => break,
        };
        if let BackendEvent::SessionClosed(closed) = &event {
            if let Some(stop) = lock(&inner.held).remove(&closed.session) {
                stop.cancel();
            }
        }
        let message = Event { edge: inner.me.clone(), event: EventKind::from(&event) };
        inner.publish(subject::EVENTS.to_owned(), encode(&message)).await;
        ClusterCounters::bump(&inner.counters().events_sent);
    }
}

/// Subscribes a session about to be listed here and serves it to the
/// cluster; returns once NATS has the interest (a flush), so whoever hears
/// of the session next can reach it. Cut off from NATS, it only lists
/// locally; [`rehold`] subscribes it when NATS returns.
pub(crate) async fn hold(
    inner: &Arc<Inner>,
    hub: &Arc<Hub>,
    session: &Arc<Session>,
) -> Result<(), WireError> {
    let id = session.id.as_str();
    if !is_session_token(id) || !inner.connected() {
        return Ok(());
    }
    let Some(shutdown) = inner.shutdown.get() else { return Ok(()) };
    // This edge holds it now, whatever an earlier event said.
    lock(&inner.remote).remove(id);
    let stop = shutdown.child_token();
    // A session resumed on this edge replaces its old socket's subscription.
    if let Some(old) = lock(&inner.held).insert(id.to_owned(), stop.clone()) {
        old.cancel();
    }
    let sub = match inner.client.queue_subscribe(subject::session_all(id), subject::HOLDER_GROUP.into()).await
    {
        Ok(sub) => sub,
        Err(e) => {
            release(inner, id, &stop);
            fallback!(inner.counters().publish_failures, warn, session = %id, error = %e, "could not subscribe a session: other edges cannot reach it");
            return Err(WireError::new(ErrorKind::Internal, format!("could not subscribe the session: {e}")));
        }
    };
    if session.is_closed() {
        // It ended while subscribing: its `closed` event may have gone by already.
        release(inner, id, &stop);
        return Ok(());
    }
    tokio::spawn(serve_session(Arc::clone(inner), Arc::clone(hub), id.to_owned(), sub, stop));
    if let Err(e) = inner.client.flush().await {
        debug!(session = %id, error = %e, "flush after subscribing a session failed; it is sent on reconnect");
    }
    Ok(())
}

/// Stops holding `id` if `stop` is still its entry.
fn release(inner: &Inner, id: &str, stop: &CancellationToken) {
    stop.cancel();
    let mut held = lock(&inner.held);
    if held.get(id).is_some_and(CancellationToken::is_cancelled) {
        held.remove(id);
    }
}

/// Subscribes the sessions listed here that are not held (they opened
/// while NATS was unreachable), once NATS is back.
async fn rehold(inner: Arc<Inner>, hub: Arc<Hub>) {
    let unheld: Vec<Arc<Session>> =
        hub.sessions().into_iter().filter(|s| !lock(&inner.held).contains_key(&s.id)).collect();
    if unheld.is_empty() {
        return;
    }
    info!(sessions = unheld.len(), "NATS is back: subscribing the sessions that opened without it");
    for session in unheld {
        let _ = hold(&inner, &hub, &session).await;
    }
}

/// Serves one held session's subjects until it closes.
async fn serve_session(
    inner: Arc<Inner>,
    hub: Arc<Hub>,
    session: String,
    mut sub: Subscriber,
    stop: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            m = sub.next() => match m { Some(m) => m, None => break },
            () = stop.cancelled() => break,
        };
        match message.subject.rsplit('.').next() {
            Some("call") => {
                // Registered before the call runs, so a cancel right behind it is never missed.
                let cancel = CancellationToken::new();
                if let Some(reply) = &message.reply {
                    lock(&inner.serving).insert(reply.to_string(), cancel.clone());
                }
                tokio::spawn(serve_call(Arc::clone(&inner), Arc::clone(&hub), message, cancel));
            }
            Some("read") => {
                tokio::spawn(serve_read(Arc::clone(&inner), Arc::clone(&hub), session.clone(), message));
            }
            Some("claim") => serve_claim(&inner, &hub, &session, &message, &stop).await,
            Some("cancel") => match std::str::from_utf8(&message.payload) {
                Ok(reply) => {
                    if let Some(token) = lock(&inner.serving).get(reply) {
                        token.cancel();
                    }
                }
                Err(e) => bad(&inner, &message.subject, &e),
            },
            _ => bad(&inner, &message.subject, &"no such session subject"),
        }
    }
    let _ = sub.unsubscribe().await;
}

/// Runs a call another edge's backend made: accepted at once, progress
/// relayed, the outcome last; cancelled when the asking edge says so.
async fn serve_call(inner: Arc<Inner>, hub: Arc<Hub>, message: Message, cancel: CancellationToken) {
    let Some(reply) = message.reply.as_ref().map(|r| r.to_string()) else {
        return bad(&inner, &message.subject, &"a call without a reply subject");
    };
    let request: CallRequest = match parse(&message.payload, inner.config.max_message) {
        Ok(r) => r,
        Err(e) => {
            bad(&inner, &message.subject, &e);
            let refused = WireError::new(
                ErrorKind::InvalidParams,
                format!("the edge holding the session could not read the call: {e}"),
            );
            let done = Reply::Done { outcome: Answer::of::<Value>(Err(refused)) };
            lock(&inner.serving).remove(&reply);
            return inner.publish(reply, encode(&done)).await;
        }
    };
    inner.publish(reply.clone(), encode(&Reply::Accepted { edge: inner.me.clone() })).await;
    ClusterCounters::bump(&inner.counters().calls_served);
    debug!(session = %request.params.session, from = %request.from, "serving a call for another edge");
    let _in_flight = hub.call_guard();
    let (tx, mut progress) = mpsc::channel(hub.config.outbound_queue.max(1));
    let relay = request.progress_token.map(|token| ProgressRelay::new(token, tx));
    let mut params = request.params;
    let span =
        telemetry::leg(Kind::Server, tether_contract::backend::method::TOOLS_CALL, &params.name, "holder");
    telemetry::adopt_meta(&span, &params.meta);
    span.record("tether.session", params.session.as_str());
    telemetry::carry(&span, &mut params.meta);
    let mut call = Box::pin(Local.call(&hub, params, &request.owner, relay).instrument(span.clone()));
    let outcome = loop {
        tokio::select! {
            outcome = &mut call => break Some(outcome),
            Some(Outbound::Text(frame)) = progress.recv() => {
                inner.publish(reply.clone(), encode(&Reply::Progress { frame })).await;
            }
            () = cancel.cancelled() => break None,
        }
    };
    // Dropped mid-flight, the call tells the device to cancel.
    drop(call);
    while let Ok(Outbound::Text(frame)) = progress.try_recv() {
        inner.publish(reply.clone(), encode(&Reply::Progress { frame })).await;
    }
    if let Some(outcome) = outcome {
        telemetry::ended(&span, &outcome);
        inner.publish(reply.clone(), encode(&Reply::Done { outcome: Answer::of(outcome) })).await;
    }
    lock(&inner.serving).remove(&reply);
}

/// Hands a session held here to a device resuming it on another edge: once
/// the token checks out, this edge stops answering for the session, so the
/// new holder is the only one; its calls with a key follow it there when it
/// announces the resume.
async fn serve_claim(
    inner: &Inner,
    hub: &Arc<Hub>,
    session: &str,
    message: &Message,
    stop: &CancellationToken,
) {
    let Some(reply) = message.reply.as_ref().map(|r| r.to_string()) else {
        return bad(inner, &message.subject, &"a claim without a reply subject");
    };
    let answer = match parse::<ClaimRequest>(&message.payload, inner.config.max_message) {
        Err(e) => {
            bad(inner, &message.subject, &e);
            Answer::of::<u64>(Err(WireError::new(
                ErrorKind::InvalidParams,
                format!("the edge holding the session could not read the claim: {e}"),
            )))
        }
        Ok(claim) => {
            let mut outcome = Local.claim(hub, session, &claim.secret, &claim.principal).await;
            if let Ok(claimed) = &mut outcome {
                lock(&inner.held).remove(session);
                stop.cancel();
                // The new holder follows the session's tasks from here on.
                claimed.tasks = tether_edge::session::hand_over_tasks(hub, session);
                claimed.ledger = tether_edge::session::hand_over_ledger(hub, session);
            }
            Answer::of(outcome)
        }
    };
    inner.publish(reply, encode(&answer)).await;
}

/// Answers a read another edge's backend made of a session held here.
async fn serve_read(inner: Arc<Inner>, hub: Arc<Hub>, session: String, message: Message) {
    let Some(reply) = message.reply.as_ref().map(|r| r.to_string()) else {
        return bad(&inner, &message.subject, &"a read without a reply subject");
    };
    let answer = match parse::<ReadRequest>(&message.payload, inner.config.max_message) {
        Err(e) => {
            bad(&inner, &message.subject, &e);
            Answer::of::<Value>(Err(WireError::new(
                ErrorKind::InvalidParams,
                format!("the edge holding the session could not read the request: {e}"),
            )))
        }
        Ok(ReadRequest { op, reader }) => {
            ClusterCounters::bump(&inner.counters().reads_served);
            let answer = match op {
                ReadOp::BeginTurn => Answer::of(Local.begin_turn(&hub, &session, &reader).await),
                ReadOp::Inspect => Answer::of(Local.inspect(&hub, &session, &reader).await),
                ReadOp::Manifest => {
                    Answer::of(Local.manifest(&hub, &session, &reader).await.map(Arc::unwrap_or_clone))
                }
                ReadOp::List => Answer::of(Local.list(&hub, &reader, Some(&session)).await),
                // A task is read for the session named by the subject, and only its own user's.
                ReadOp::Task { task, op } => match &reader {
                    Reader::User(owner) => {
                        let params = TaskParams { session: session.clone(), task, meta: Default::default() };
                        Answer::of(Local::task(&hub, &params, op, owner).await)
                    }
                    Reader::Operator(_) => Answer::of::<Value>(Err(WireError::new(
                        ErrorKind::Forbidden,
                        "an operator credential cannot read a user's task",
                    ))),
                },
                // The holder decides for the session named by the subject, whatever the params say.
                ReadOp::Decide(params) => Answer::of(Local::decide(
                    &hub,
                    &DecideParams { session: session.clone(), ..params },
                    &reader,
                )),
            };
            // Refused because its device resumed elsewhere meanwhile (its tasks
            // went with it): the asker waits for the new holder and asks there.
            if answer.is_err() && !lock(&inner.held).contains_key(&session) {
                Answer::of::<Value>(Err(crate::wire::moving(&session)))
            } else {
                answer
            }
        }
    };
    inner.publish(reply, encode(&answer)).await;
}

/// Hands replies to this edge's requests in flight.
async fn serve_replies(inner: Arc<Inner>, mut replies: Subscriber, shutdown: CancellationToken) {
    loop {
        let message = tokio::select! {
            m = replies.next() => match m { Some(m) => m, None => break },
            () = shutdown.cancelled() => break,
        };
        let Some(id) = subject::reply_id(&message.subject) else {
            bad(&inner, &message.subject, &"a reply subject without a request id");
            continue;
        };
        let incoming = if message.status == Some(StatusCode::NO_RESPONDERS) {
            Incoming::NoResponders
        } else {
            match parse::<Reply>(&message.payload, inner.config.max_message) {
                Ok(reply) => Incoming::Reply(reply),
                Err(e) => {
                    bad(&inner, &message.subject, &e);
                    continue;
                }
            }
        };
        if let Err(undelivered) = inner.waiters.deliver(id, incoming) {
            count_undelivered(inner.counters(), id, &undelivered);
        }
    }
}

/// Counts and logs a reply that reached no request.
fn count_undelivered(counters: &ClusterCounters, id: u64, undelivered: &Undelivered) {
    match undelivered {
        Undelivered::Late => {
            fallback!(counters.late_replies, debug, id, "reply for a request that already ended dropped");
        }
        Undelivered::ProgressDropped => {
            fallback!(
                counters.progress_dropped,
                debug,
                id,
                "progress from another edge not relayed: no token, or the backend's queue is full"
            );
        }
    }
}

/// Tells this edge's backends what other edges' sessions did.
async fn serve_events(inner: Arc<Inner>, hub: Arc<Hub>, mut events: Subscriber, shutdown: CancellationToken) {
    loop {
        let message = tokio::select! {
            m = events.next() => match m { Some(m) => m, None => break },
            () = shutdown.cancelled() => break,
        };
        let event: Event = match parse(&message.payload, inner.config.max_message) {
            Ok(e) => e,
            Err(e) => {
                bad(&inner, &message.subject, &e);
                continue;
            }
        };
        if event.edge == inner.me {
            continue;
        }
        ClusterCounters::bump(&inner.counters().events_received);
        match &event.event {
            EventKind::SessionOpened(opened) => {
                lock(&inner.remote).insert(opened.session.clone(), event.edge.clone());
            }
            EventKind::SessionResumed(resumed) => {
                lock(&inner.remote).insert(resumed.session.clone(), event.edge.clone());
                // If this edge held it, waiting for its device: its keyed calls follow it there.
                hub.resumed_elsewhere(&resumed.session);
            }
            EventKind::SessionClosed(closed) => {
                lock(&inner.remote).remove(&closed.session);
                hub.remember_closed(&closed.session, &closed.reason);
            }
            EventKind::ListChanged(_) | EventKind::TaskStatus(_) => {}
        }
        hub.publish_here(event.event.into());
    }
}

/// Answers `sessions/list` for the other edges with this edge's part.
async fn serve_lists(inner: Arc<Inner>, hub: Arc<Hub>, mut lists: Subscriber, shutdown: CancellationToken) {
    loop {
        let message = tokio::select! {
            m = lists.next() => match m { Some(m) => m, None => break },
            () = shutdown.cancelled() => break,
        };
        let request: ListRequest = match parse(&message.payload, inner.config.max_message) {
            Ok(r) => r,
            Err(e) => {
                bad(&inner, &message.subject, &e);
                continue;
            }
        };
        if request.from == inner.me {
            continue;
        }
        let Some(reply) = message.reply.as_ref().map(|r| r.to_string()) else {
            bad(&inner, &message.subject, &"a list request without a reply subject");
            continue;
        };
        let sessions = Local.list(&hub, &request.reader, None).await.unwrap_or_default();
        let parts = sessions.chunks(LIST_CHUNK).count().max(1);
        let mut chunks = sessions.chunks(LIST_CHUNK);
        for n in 0..parts {
            let part = chunks.next().map(<[_]>::to_vec).unwrap_or_default();
            let listed = Reply::Listed { edge: inner.me.clone(), sessions: part, last: n + 1 == parts };
            inner.publish(reply.clone(), encode(&listed)).await;
        }
    }
}

/// Beats, hears the other edges beat or leave, and loses the silent ones.
async fn beat(
    inner: Arc<Inner>,
    hub: Arc<Hub>,
    mut beats: Subscriber,
    mut gone: Subscriber,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(inner.config.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connection = inner.metrics.connection.subscribe();
    let beat_now = || encode(&Beat { edge: inner.me.clone(), sessions: hub.session_count() });
    loop {
        tokio::select! {
            Ok(()) = connection.changed() => {
                if *connection.borrow_and_update() {
                    // (Back) on NATS: say so at once, and hold what opened without it.
                    inner.publish(subject::BEAT.to_owned(), beat_now()).await;
                    tokio::spawn(rehold(Arc::clone(&inner), Arc::clone(&hub)));
                }
            }
            _ = tick.tick() => {
                inner.publish(subject::BEAT.to_owned(), beat_now()).await;
                // Silence heard while this edge is cut off from NATS is its own: lose no one for it.
                let lost = if inner.connected() {
                    inner.members.sweep()
                } else {
                    inner.members.touch_all();
                    Vec::new()
                };
                for edge in lost {
                    fallback!(inner.counters().edges_lost, warn, %edge, timeout_ms = inner.config.edge_timeout.as_millis(), "edge lost: silent past the edge timeout; its calls fail and its sessions close here");
                    close_remote_sessions(&inner, &hub, &edge);
                }
                inner.metrics.edges.set(i64::try_from(inner.members.alive().len()).unwrap_or(i64::MAX));
            }
            Some(message) = beats.next() => match parse::<Beat>(&message.payload, inner.config.max_message) {
                Ok(beat) if beat.edge != inner.me => {
                    // A newcomer learns the cluster from the beats it provokes, not a beat later.
                    if inner.members.seen(&beat.edge) {
                        inner.publish(subject::BEAT.to_owned(), beat_now()).await;
                    }
                }
                Ok(_) => {}
                Err(e) => bad(&inner, &message.subject, &e),
            },
            Some(message) = gone.next() => match parse::<Gone>(&message.payload, inner.config.max_message) {
                Ok(left) if left.edge != inner.me => {
                    if inner.members.lost(&left.edge) {
                        info!(edge = %left.edge, "edge left the cluster");
                    }
                    close_remote_sessions(&inner, &hub, &left.edge);
                }
                Ok(_) => {}
                Err(e) => bad(&inner, &message.subject, &e),
            },
            () = shutdown.cancelled() => break,
        }
    }
}

/// Tells the other edges this one is leaving, so their calls to it fail now.
pub(crate) async fn leave(inner: &Inner) {
    if !inner.connected() {
        return;
    }
    inner.publish(subject::GONE.to_owned(), encode(&Gone { edge: inner.me.clone() })).await;
    match tokio::time::timeout(inner.config.read_timeout, inner.client.flush()).await {
        Ok(Ok(())) => {}
        _ => {
            fallback!(
                inner.counters().publish_failures,
                warn,
                "could not tell the cluster this edge is leaving; the others will lose it by its silence"
            );
        }
    }
}

/// Tells this edge's backends that a lost edge's sessions are closed.
fn close_remote_sessions(inner: &Inner, hub: &Hub, edge: &str) {
    let sessions: Vec<String> = {
        let mut remote = lock(&inner.remote);
        let theirs: Vec<String> = remote
            .iter()
            .filter(|(s, e)| e.as_str() == edge && hub.session(s).is_none())
            .map(|(s, _)| s.clone())
            .collect();
        for s in &theirs {
            remote.remove(s);
        }
        theirs
    };
    for session in sessions {
        hub.remember_closed(&session, "edge_lost");
        hub.publish_here(BackendEvent::SessionClosed(SessionClosed { session, reason: "edge_lost".into() }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_for_no_request_and_progress_nobody_asked_for_are_counted() {
        let counters = ClusterCounters::default();
        count_undelivered(&counters, 7, &Undelivered::Late);
        count_undelivered(&counters, 8, &Undelivered::ProgressDropped);
        assert_eq!(counters.get("late_replies"), 1);
        assert_eq!(counters.get("progress_dropped"), 1);
    }
}
