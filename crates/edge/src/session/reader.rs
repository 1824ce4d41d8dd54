//! The read loop: frames from the device, answers paired with their waiters,
//! notifications dispatched, malformed frames struck, liveness kept, and the
//! [`Exit`] the loop ends with.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use tether_contract::error::{ErrorKind, WireError};
use tether_contract::jsonrpc::{self, AnswerId, Frame};
use tether_contract::mcp::{self, method};
use tether_counters::fallback;
use tether_rpc::Completion;

use super::calls::Answer;
use super::{ms, Session};
use crate::exit::Exit;
use crate::manifest::Digest;
use crate::ws::Outbound;

/// How long malformed frames are remembered: strikes reset after a quiet minute.
const STRIKE_WINDOW: Duration = Duration::from_secs(60);
/// Malformed frames a device may send within a minute before the edge closes it with 1008.
/// Each one still gets its structured error; a buggy device survives a few,
/// a hostile one cannot keep the edge parsing garbage forever.
pub const MAX_STRIKES: u32 = 8;

/// Malformed frames within the current window; only the read loop touches it.
struct Strikes {
    count: u32,
    since: Instant,
}

impl Strikes {
    /// Counts one strike; true once the device has used up its allowance.
    fn strike(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.since) > STRIKE_WINDOW {
            *self = Strikes { count: 0, since: now };
        }
        self.count += 1;
        self.count >= MAX_STRIKES
    }
}

/// Reads until the socket ends; also pings quiet devices, closes half-open
/// ones after the idle deadline, and closes at the credential's expiry.
pub(super) async fn read_loop<S>(
    session: &Arc<Session>,
    mut stream: S,
    shutdown: &CancellationToken,
    expires_at: Option<Instant>,
) -> Exit
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let config = &session.hub.config;
    let mut last_seen = Instant::now();
    let mut strikes = Strikes { count: 0, since: last_seen };
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
            _ = session.socket_done.cancelled() => return Exit::Latched,
            _ = tokio::time::sleep_until(check_at) => {
                let now = Instant::now();
                // Every ping interval: a call table with nothing waiting gives
                // back what a burst grew it to.
                session.calls.shrink_if_idle();
                if expires_at.is_some_and(|e| now >= e) {
                    fallback!(session.counters().credentials_expired, info, session = %session.id, "device credential expired; closing");
                    return Exit::CredentialExpired;
                }
                if now.saturating_duration_since(last_seen) >= config.idle_timeout {
                    fallback!(session.counters().idle_closes, warn, session = %session.id, "no traffic within the idle deadline; closing a half-open socket");
                    return Exit::Idle;
                }
                if now.saturating_duration_since(last_seen) >= config.ping_interval
                    && session.outbound.try_send(Outbound::Ping).is_err()
                {
                    fallback!(session.counters().outbound_full, debug, session = %session.id, "ping not sent: the device's outbound queue is full");
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
            Some(Ok(Message::Text(text))) => {
                if session.on_text(text.as_str()).is_err() && strikes.strike(last_seen) {
                    fallback!(session.counters().strikeouts, warn, session = %session.id, strikes = MAX_STRIKES, "too many malformed frames; closing with 1008");
                    return Exit::StruckOut;
                }
            }
            Some(Ok(Message::Binary(_))) => {
                session.hub.metrics.frame_refused("binary");
                fallback!(session.counters().binary_frames, warn, session = %session.id, "binary frame from device; closing with 1003");
                return Exit::Binary;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                let exit = Exit::from_read_error(&e);
                match exit {
                    Exit::FrameTooLarge => {
                        session.hub.metrics.frame_refused("oversized");
                        fallback!(session.counters().oversized_frames, warn, session = %session.id, error = %e, "frame over the transport ceiling; closing with 1009");
                    }
                    Exit::ProtocolViolation(kind) => {
                        session.hub.metrics.frame_refused(kind);
                        fallback!(session.counters().bad_frames, warn, session = %session.id, kind, error = %e, "device broke WebSocket framing; closing with 1002");
                    }
                    Exit::InvalidUtf8 => {
                        session.hub.metrics.frame_refused("invalid_utf8");
                        fallback!(session.counters().bad_frames, warn, session = %session.id, "text frame that is not UTF-8; closing with 1007");
                    }
                    _ => debug!(session = %session.id, error = %e, "device socket read failed"),
                }
                return exit;
            }
        }
    }
}

/// A text frame that was not a JSON-RPC frame; the device got its structured error.
struct Malformed;

/// The frame a device sends most: a success response, read with its result
/// left as text. Anything else (an error, a request, a stray field, another
/// version) goes the general way, [`jsonrpc::parse`], with its checks.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Success<'a> {
    jsonrpc: &'a str,
    id: Value,
    #[serde(borrow)]
    result: &'a RawValue,
}

impl Session {
    /// Handles one text frame.
    fn on_text(self: &Arc<Self>, text: &str) -> Result<(), Malformed> {
        // Raw text skips serde_json's depth limit: a deeper frame goes the
        // general way, which refuses it as it always did.
        if let Ok(Success { jsonrpc: jsonrpc::VERSION, id, result }) =
            serde_json::from_str::<Success<'_>>(text)
        {
            if jsonrpc::within_depth(text) {
                self.complete(&id, Answer::Result { raw: result.to_owned(), bytes: text.len() });
                return Ok(());
            }
        }
        match jsonrpc::parse(text) {
            Ok(Frame::Response { id, outcome }) => {
                let answer = match outcome {
                    Ok(value) => match serde_json::value::to_raw_value(&value) {
                        Ok(raw) => Answer::Result { raw, bytes: text.len() },
                        Err(e) => Answer::Error(
                            json!({"code": -32603, "message": format!("result could not be kept: {e}")}),
                        ),
                    },
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
                self.send(frame, "answer to a device request");
            }
            Err(e) => {
                fallback!(self.counters().bad_frames, debug, session = %self.id, error = %e, "bad frame from device");
                let (id, err) = e.to_wire();
                self.hub.metrics.frame_refused(err.kind.as_str());
                self.send(jsonrpc::error_response(&id, &err), "structured error for a bad frame");
                return Err(Malformed);
            }
        }
        Ok(())
    }

    /// Pairs a device's answer with the request waiting for it.
    fn complete(&self, raw_id: &Value, answer: Answer) {
        let id = match jsonrpc::answer_id(raw_id) {
            AnswerId::Exact(id) => id,
            AnswerId::Coerced(id) => {
                fallback!(self.counters().answer_ids_coerced, warn, session = %self.id, call_id = id, answered = %raw_id, "device answered request {id} with the id spelled {raw_id} (JSON-RPC requires the same id); delivered by value");
                id
            }
            AnswerId::Foreign => {
                fallback!(self.counters().unknown_responses, debug, session = %self.id, id = %raw_id, "response for an id the edge never used");
                return;
            }
        };
        if id != 0 && id == self.listen_id.load(Ordering::Relaxed) {
            fallback!(self.counters().subscriptions_ended, warn, session = %self.id, "device ended its list_changed subscription; its catalog changes reach the edge only after calls that move the seq");
            return;
        }
        match self.calls.complete(id, answer) {
            Completion::Delivered => {}
            Completion::Late(late) => {
                let lateness = Instant::now().saturating_duration_since(late.deadline);
                fallback!(self.counters().late_answers, warn, session = %self.id, call_id = id, tool = %late.tool, lateness_ms = ms(lateness), "late answer dropped");
            }
            Completion::Unknown => {
                fallback!(self.counters().unknown_responses, debug, session = %self.id, call_id = id, "response for an unknown or already answered id");
            }
        }
    }

    fn on_notification(self: &Arc<Self>, method: &str, params: &Value) {
        if method == crate::revision::method::SUBSCRIPTIONS_ACKNOWLEDGED {
            debug!(session = %self.id, "device acknowledged the list_changed subscription");
            return;
        }
        if method == mcp::method::PROGRESS {
            self.relay_progress(params);
            return;
        }
        if method == tether_contract::tasks::method::STATUS
            || method == tether_contract::tasks::extension::STATUS
        {
            self.task_moved(params);
            return;
        }
        if method != method::LIST_CHANGED {
            debug!(session = %self.id, method, "device notification ignored");
            return;
        }
        let meta = params.get("_meta").and_then(Value::as_object);
        let announced = mcp::seq_of(meta);
        if let (Some(announced), Some(applied)) = (announced, self.manifest.seq()) {
            if announced <= applied {
                fallback!(self.counters().list_changed_stale, debug, session = %self.id, announced, applied, "list_changed not newer than applied manifest");
                return;
            }
        }
        // One pending change: a burst of list_changed coalesces into one re-read
        // (or, under the applied digest, one re-stamp), rate-limited either way.
        self.catalog_changed(announced.zip(mcp::digest_of(meta).map(Digest::of)));
    }
}
