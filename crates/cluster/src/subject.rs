//! The NATS subjects edges speak on, and which session ids may name one.
//!
//! A session is reachable at `tether.s.<session>.call` and `.read` for as
//! long as the edge holding it subscribes there (queue group `holder`), so
//! NATS's own interest is the session directory: no responders means no edge
//! holds the session, at once. Everything else is per edge or cluster-wide.

/// Queue group of session subscriptions: a message reaches one holder.
pub(crate) const HOLDER_GROUP: &str = "holder";
/// Heartbeats: every edge, every beat.
pub(crate) const BEAT: &str = "tether.beat";
/// An edge leaving on purpose (shutdown), so no one waits out its silence.
pub(crate) const GONE: &str = "tether.gone";
/// Session events (opened, closed, manifest moved) for every edge's backends.
pub(crate) const EVENTS: &str = "tether.events";
/// `sessions/list` asked of every edge.
pub(crate) const LIST: &str = "tether.list";

/// The longest session id that may become a subject token.
const MAX_SESSION_ID: usize = 128;

/// Whether `id` can be a subject token: no `.`, wildcard or whitespace.
///
/// A backend names sessions; an id that is not a token cannot be held by any
/// edge (edges mint UUIDs), so it is not found without asking NATS.
pub(crate) fn is_session_token(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Every subject of one held session (`call`, `read`, `claim`, `cancel`).
pub(crate) fn session_all(session: &str) -> String {
    format!("tether.s.{session}.*")
}

/// A call to the session, wherever it is held.
pub(crate) fn session_call(session: &str) -> String {
    format!("tether.s.{session}.call")
}

/// A read of the session (turn, inspect, manifest, list of one).
pub(crate) fn session_read(session: &str) -> String {
    format!("tether.s.{session}.read")
}

/// Claims the session for a device resuming it on another edge.
pub(crate) fn session_claim(session: &str) -> String {
    format!("tether.s.{session}.claim")
}

/// Cancels a call on the session (the payload is the call's reply subject).
pub(crate) fn session_cancel(session: &str) -> String {
    format!("tether.s.{session}.cancel")
}

/// Replies to one of an edge's requests in flight.
pub(crate) fn reply(edge: &str, id: u64) -> String {
    format!("tether.r.{edge}.{id}")
}

/// Every reply to an edge's requests.
pub(crate) fn replies(edge: &str) -> String {
    format!("tether.r.{edge}.*")
}

/// The request id a reply subject carries.
pub(crate) fn reply_id(subject: &str) -> Option<u64> {
    subject.rsplit('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_tokens_name_sessions() {
        assert!(is_session_token("0b6f1c1e-8a0e-4c59-9d8f-2f1f5f7f9a10"));
        for bad in ["", "a.b", "a*", ">", "a b", "a\tb", "ü", &"x".repeat(129)] {
            assert!(!is_session_token(bad), "{bad:?} must not become a subject token");
        }
    }

    #[test]
    fn a_reply_subject_carries_its_id() {
        assert_eq!(reply_id(&reply("edge-1", 42)), Some(42));
        assert_eq!(reply_id("tether.r.edge-1.x"), None);
    }
}
