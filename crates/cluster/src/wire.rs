//! What edges say to each other over NATS: JSON, one message per subject use.
//!
//! Every message from the cluster side is parsed here and nowhere else, so
//! a malformed or oversized one is counted and dropped in one place.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use tether_contract::backend::{
    CallParams, ListChanged, SessionClosed, SessionInfo, SessionOpened, SessionResumed,
};
use tether_contract::error::{ErrorKind, WireError};
use tether_edge::hub::BackendEvent;
use tether_edge::router::Reader;

/// A call for a session another edge holds, on `tether.s.<session>.call`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CallRequest {
    /// The edge asking (its replies subject is in the message's reply).
    pub(crate) from: String,
    /// The turn's verified user; the holder checks ownership.
    pub(crate) owner: String,
    /// The backend's call, without its credential (verified by the asking edge).
    pub(crate) params: CallParams,
    /// The backend's progress token, when it asked for progress.
    pub(crate) progress_token: Option<Value>,
}

/// A read of a session another edge holds, on `tether.s.<session>.read`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ReadRequest {
    pub(crate) op: ReadOp,
    pub(crate) reader: Reader,
}

/// A device reconnecting to another edge with this session's resume token,
/// on `tether.s.<session>.claim`: the holder checks it and lets the session go.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ClaimRequest {
    pub(crate) secret: String,
    pub(crate) principal: String,
}

/// Which read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReadOp {
    /// `approvals/decide`: the user's answer (or a look), decided where the session lives.
    Decide(tether_contract::writes::DecideParams),
    /// `turn/begin`.
    BeginTurn,
    /// `sessions/inspect`.
    Inspect,
    /// `tools/list`.
    Manifest,
    /// `sessions/list` of this one session.
    List,
    /// `tasks/get`, `tasks/cancel` or a slice of `tasks/result`, for the reader's own task.
    Task {
        /// tether's task id.
        task: String,
        /// What is asked of it.
        op: tether_edge::router::TaskOp,
    },
}

/// `sessions/list` asked of every edge, on `tether.list`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ListRequest {
    pub(crate) from: String,
    pub(crate) reader: Reader,
}

/// A reply to an edge's request, on its reply subject.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Reply {
    /// The holder took the call: from now on, its liveness is the call's.
    Accepted { edge: String },
    /// Device progress, as the backend-link notification frame it becomes.
    Progress { frame: String },
    /// The call's one outcome.
    Done { outcome: Answer },
    /// Part of an edge's `sessions/list` answer; `last` ends that edge's part.
    Listed { edge: String, sessions: Vec<SessionInfo>, last: bool },
}

/// An outcome as it crosses: a result, or the structured error as on the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Answer {
    Ok(Value),
    Err(Value),
}

/// The answer of an edge a session just left for another: ask the new holder.
pub(crate) fn moving(session: &str) -> WireError {
    WireError::new(ErrorKind::SessionNotFound, "the session is moving to another edge")
        .with("session", session)
        .with(MOVING, true)
}

/// The detail that marks [`moving`].
const MOVING: &str = "moving";

/// Whether `e` is [`moving`].
pub(crate) fn is_moving(e: &WireError) -> bool {
    e.details.get(MOVING).and_then(serde_json::Value::as_bool) == Some(true)
}

impl Answer {
    /// Whether it answers an error.
    pub(crate) fn is_err(&self) -> bool {
        matches!(self, Answer::Err(_))
    }

    pub(crate) fn of<T: Serialize>(outcome: Result<T, WireError>) -> Answer {
        match outcome.and_then(|v| {
            serde_json::to_value(v)
                .map_err(|e| WireError::new(ErrorKind::Internal, format!("could not encode an answer: {e}")))
        }) {
            Ok(v) => Answer::Ok(v),
            Err(e) => Answer::Err(e.to_json()),
        }
    }

    /// The outcome, typed; a result of the wrong shape is a malformed message.
    pub(crate) fn into_result<T: serde::de::DeserializeOwned>(self) -> Result<T, WireError> {
        match self {
            Answer::Ok(v) => serde_json::from_value(v).map_err(|e| malformed(&e)),
            Answer::Err(e) => Err(WireError::from_json(&e)),
        }
    }
}

/// An edge's heartbeat, on `tether.beat`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Beat {
    pub(crate) edge: String,
    pub(crate) sessions: usize,
}

/// An edge leaving on purpose, on `tether.gone`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Gone {
    pub(crate) edge: String,
}

/// A session event another edge's backends should hear, on `tether.events`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Event {
    pub(crate) edge: String,
    #[serde(flatten)]
    pub(crate) event: EventKind,
}

/// [`BackendEvent`] as it crosses.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", content = "params", rename_all = "snake_case")]
pub(crate) enum EventKind {
    ListChanged(ListChanged),
    SessionClosed(SessionClosed),
    SessionOpened(SessionOpened),
    SessionResumed(SessionResumed),
    TaskStatus(tether_contract::tasks::TaskState),
}

impl From<&BackendEvent> for EventKind {
    fn from(e: &BackendEvent) -> EventKind {
        match e {
            BackendEvent::ListChanged(p) => EventKind::ListChanged(p.clone()),
            BackendEvent::SessionClosed(p) => EventKind::SessionClosed(p.clone()),
            BackendEvent::SessionOpened(p) => EventKind::SessionOpened(p.clone()),
            BackendEvent::SessionResumed(p) => EventKind::SessionResumed(p.clone()),
            BackendEvent::TaskStatus(p) => EventKind::TaskStatus(p.clone()),
        }
    }
}

impl From<EventKind> for BackendEvent {
    fn from(e: EventKind) -> BackendEvent {
        match e {
            EventKind::ListChanged(p) => BackendEvent::ListChanged(p),
            EventKind::SessionClosed(p) => BackendEvent::SessionClosed(p),
            EventKind::SessionOpened(p) => BackendEvent::SessionOpened(p),
            EventKind::SessionResumed(p) => BackendEvent::SessionResumed(p),
            EventKind::TaskStatus(p) => BackendEvent::TaskStatus(p),
        }
    }
}

/// Why a message from the cluster side was dropped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadMessage {
    /// Larger than the edge accepts from the cluster.
    #[error("{bytes} bytes exceeds the {limit} byte limit for cluster messages")]
    Oversized { bytes: usize, limit: usize },
    /// Not the JSON this subject carries.
    #[error("malformed: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Parses one message from the cluster side, refusing oversized ones unread.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(payload: &[u8], limit: usize) -> Result<T, BadMessage> {
    if payload.len() > limit {
        return Err(BadMessage::Oversized { bytes: payload.len(), limit });
    }
    Ok(serde_json::from_slice(payload)?)
}

/// Encodes a message; every type here encodes (no maps with non-string keys).
pub(crate) fn encode<T: Serialize>(message: &T) -> bytes::Bytes {
    serde_json::to_vec(message).unwrap_or_default().into()
}

fn malformed(e: &serde_json::Error) -> WireError {
    WireError::new(ErrorKind::Internal, format!("another edge sent a malformed answer: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_crosses_with_its_kind_and_details() {
        let err = WireError::channel_closed("disconnected").with("session", "s1");
        let back = Answer::of::<Value>(Err(err.clone())).into_result::<Value>();
        assert_eq!(back, Err(err));
    }

    #[test]
    fn oversized_and_malformed_messages_are_refused() {
        assert!(matches!(parse::<Beat>(&[b' '; 10], 4), Err(BadMessage::Oversized { bytes: 10, limit: 4 })));
        assert!(matches!(parse::<Beat>(b"{\"edge\":1}", 100), Err(BadMessage::Malformed(_))));
        let beat: Beat = parse(br#"{"edge":"a","sessions":3}"#, 100).expect("a beat parses");
        assert_eq!((beat.edge.as_str(), beat.sessions), ("a", 3));
    }

    #[test]
    fn events_cross_unchanged() {
        let event =
            BackendEvent::SessionClosed(SessionClosed { session: "s".into(), reason: "shutdown".into() });
        let wire = encode(&Event { edge: "e".into(), event: EventKind::from(&event) });
        let back: Event = parse(&wire, 1 << 20).expect("an event parses");
        assert_eq!(BackendEvent::from(back.event), event);
    }
}
