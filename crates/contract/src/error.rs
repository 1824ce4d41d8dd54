//! Error kinds that cross the wire, with stable numeric codes.
//!
//! One enum for every error either link can carry. The numeric code and the
//! `data.kind` string of each variant are part of the protocol: never renumber,
//! only add. Protocol errors reuse JSON-RPC's codes; tether's own live in
//! −32000…−32019, skipping −32002 (MCP's "resource not found"), with −32000
//! for a closed channel and −32001 for a timeout as the MCP TypeScript SDK does.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest `message` an error may carry on the wire, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 256;

macro_rules! kinds {
    ($( $(#[$doc:meta])* $variant:ident = $code:expr, $name:literal; )*) => {
        /// Every error kind tether can report; the wire form is the snake_case name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorKind {
            $( $(#[$doc])* $variant, )*
        }

        impl ErrorKind {
            /// All kinds, in code order: tests and docs iterate this.
            pub const ALL: &'static [ErrorKind] = &[ $( ErrorKind::$variant, )* ];

            /// The stable JSON-RPC `error.code`.
            pub const fn code(self) -> i64 {
                match self { $( ErrorKind::$variant => $code, )* }
            }

            /// The stable `error.data.kind` string.
            pub const fn as_str(self) -> &'static str {
                match self { $( ErrorKind::$variant => $name, )* }
            }

            /// Parses a `data.kind` string; unknown kinds stay unknown rather than guessed.
            pub fn from_name(name: &str) -> Option<ErrorKind> {
                match name { $( $name => Some(ErrorKind::$variant), )* _ => None }
            }

            /// Maps a bare code back to its kind, for peers that omit `data.kind`.
            pub fn from_code(code: i64) -> Option<ErrorKind> {
                match code { $( $code => Some(ErrorKind::$variant), )* _ => None }
            }
        }
    };
}

kinds! {
    /// The frame was not JSON.
    ParseError = -32700, "parse_error";
    /// The frame was JSON but not a JSON-RPC 2.0 request.
    InvalidRequest = -32600, "invalid_request";
    /// The method does not exist on this link.
    MethodNotFound = -32601, "method_not_found";
    /// The method's params had the wrong shape.
    InvalidParams = -32602, "invalid_params";
    /// The session's socket closed; nothing more will arrive on it.
    ChannelClosed = -32000, "channel_closed";
    /// A budget leg expired; the outcome on the device is unknown.
    Timeout = -32001, "timeout";
    /// The tool is not in the session's manifest now.
    ToolUnavailable = -32003, "tool_unavailable";
    /// The tool name is not a valid namespaced name.
    InvalidName = -32004, "invalid_name";
    /// The arguments were rejected before reaching the device.
    InvalidArguments = -32005, "invalid_arguments";
    /// No connected session has that id.
    SessionNotFound = -32006, "session_not_found";
    /// A request or response exceeded a size cap.
    PayloadTooLarge = -32007, "payload_too_large";
    /// The credential was missing, malformed or expired.
    Unauthenticated = -32008, "unauthenticated";
    /// The credential is valid but does not grant this.
    Forbidden = -32009, "forbidden";
    /// The device itself reported a failure.
    ClientError = -32010, "client_error";
    /// Too many requests; retry after the given delay.
    RateLimited = -32011, "rate_limited";
    /// The edge is shedding load; retry later or elsewhere.
    Overloaded = -32012, "overloaded";
    /// The call changes something and needs its user's approval first; nothing ran.
    ApprovalRequired = -32013, "approval_required";
    /// The user declined the approval; the call did not run.
    ApprovalDeclined = -32014, "approval_declined";
    /// The approval ran out, was used already, or is unknown; the call did not run.
    ApprovalExpired = -32015, "approval_expired";
    /// The approval was for another call (`data.differs` says which part); nothing ran.
    ApprovalMismatch = -32016, "approval_mismatch";
    /// The idempotency key was used for a different call; nothing ran.
    IdempotencyConflict = -32017, "idempotency_conflict";
    /// A bug or invariant breach inside tether.
    Internal = -32603, "internal";
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A JSON-RPC error object whose `data.kind` is an [`ErrorKind`].
///
/// `data` holds the kind plus kind-specific fields (`leg`, `outcome`,
/// `available`, `limit`, `retry_after_ms`, …) so a caller can act on them
/// without parsing prose.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct WireError {
    /// What went wrong, as a stable kind.
    pub kind: ErrorKind,
    /// A short human sentence, at most [`MAX_MESSAGE_BYTES`].
    pub message: String,
    /// Kind-specific structured fields, excluding `kind` itself.
    pub details: Map<String, Value>,
}

impl WireError {
    /// Builds an error, cutting the message to the wire limit on a char boundary.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let mut message = message.into();
        truncate_utf8(&mut message, MAX_MESSAGE_BYTES);
        WireError { kind, message, details: Map::new() }
    }

    /// Adds one structured field to `data`.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// Reads a structured field back.
    pub fn detail(&self, key: &str) -> Option<&Value> {
        self.details.get(key)
    }

    /// A timeout on `leg`; the outcome on the device is always unknown.
    pub fn timeout(leg: crate::Leg, after_ms: u64) -> Self {
        WireError::new(ErrorKind::Timeout, format!("{} leg expired after {after_ms} ms", leg.as_str()))
            .with("leg", leg.as_str())
            .with("outcome", "unknown")
            .with("budget_ms", after_ms)
    }

    /// The leg that ran out, when this is a timeout (typed: no string compare at call sites).
    pub fn timed_out_leg(&self) -> Option<crate::Leg> {
        if self.kind != ErrorKind::Timeout {
            return None;
        }
        self.detail("leg").and_then(Value::as_str).and_then(crate::Leg::from_name)
    }

    /// Why the channel closed, when this is `channel_closed`.
    pub fn closed_reason(&self) -> Option<&str> {
        (self.kind == ErrorKind::ChannelClosed)
            .then(|| self.detail("reason").and_then(Value::as_str))
            .flatten()
    }

    /// The session's channel is closed, with why.
    pub fn channel_closed(reason: &str) -> Self {
        WireError::new(ErrorKind::ChannelClosed, format!("session channel closed: {reason}"))
            .with("reason", reason)
    }

    /// The JSON-RPC error object: `{code, message, data:{kind, …}}`.
    pub fn to_json(&self) -> Value {
        let mut data = self.details.clone();
        data.insert("kind".into(), Value::from(self.kind.as_str()));
        serde_json::json!({ "code": self.kind.code(), "message": self.message, "data": data })
    }

    /// Reads a JSON-RPC error object from a peer, trusting `data.kind` over the code.
    pub fn from_json(value: &Value) -> WireError {
        let code = value.get("code").and_then(Value::as_i64);
        let message = value.get("message").and_then(Value::as_str).unwrap_or("").to_owned();
        let mut details = value.get("data").and_then(Value::as_object).cloned().unwrap_or_default();
        let named = details.remove("kind").and_then(|k| k.as_str().and_then(ErrorKind::from_name));
        let kind = named.or_else(|| code.and_then(ErrorKind::from_code)).unwrap_or(ErrorKind::Internal);
        if let (None, Some(code)) = (named, code) {
            details.insert("code".into(), Value::from(code));
        }
        let mut err = WireError::new(kind, message);
        err.details = details;
        err
    }
}

/// Cuts `s` to at most `max` bytes without splitting a character.
pub fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_in_range() {
        let mut seen = std::collections::HashSet::new();
        for kind in ErrorKind::ALL {
            assert!(seen.insert(kind.code()), "duplicate code {}", kind.code());
            let c = kind.code();
            let protocol = matches!(c, -32700 | -32600 | -32601 | -32602 | -32603);
            assert!(protocol || (-32019..=-32000).contains(&c), "{kind} code {c} out of range");
            assert_ne!(c, -32002, "-32002 is reserved by MCP");
        }
    }

    #[test]
    fn names_round_trip_through_serde() {
        for kind in ErrorKind::ALL {
            let json = serde_json::to_value(kind).unwrap_or_default();
            assert_eq!(json, Value::from(kind.as_str()));
            assert_eq!(ErrorKind::from_name(kind.as_str()), Some(*kind));
            assert_eq!(ErrorKind::from_code(kind.code()), Some(*kind));
        }
    }

    #[test]
    fn message_is_capped_on_a_char_boundary() {
        let err = WireError::new(ErrorKind::Internal, "é".repeat(300));
        assert!(err.message.len() <= MAX_MESSAGE_BYTES);
        assert!(err.message.chars().all(|c| c == 'é'));
    }

    #[test]
    fn json_round_trip_keeps_details() {
        let err = WireError::timeout(crate::Leg::ToolCall, 7000);
        let back = WireError::from_json(&err.to_json());
        assert_eq!(back, err);
        assert_eq!(back.detail("outcome"), Some(&Value::from("unknown")));
        assert_eq!(back.timed_out_leg(), Some(crate::Leg::ToolCall));
        assert_eq!(WireError::channel_closed("idle").closed_reason(), Some("idle"));
        assert_eq!(WireError::new(ErrorKind::Internal, "x").with("leg", "tool_call").timed_out_leg(), None);
    }

    #[test]
    fn unknown_kind_falls_back_to_code() {
        let v = serde_json::json!({"code": -32000, "message": "x", "data": {"kind": "nope"}});
        assert_eq!(WireError::from_json(&v).kind, ErrorKind::ChannelClosed);
        let v = serde_json::json!({"code": 42, "message": "x"});
        let e = WireError::from_json(&v);
        assert_eq!(e.kind, ErrorKind::Internal);
        assert_eq!(e.detail("code"), Some(&Value::from(42)));
    }
}
