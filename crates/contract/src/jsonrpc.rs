//! JSON-RPC 2.0 framing: one message per text frame.
//!
//! [`parse`] classifies a frame as request, notification or response and
//! reports why a frame is not valid JSON-RPC, so each link can answer bad
//! input with a structured error instead of dropping it. Ids are kept as raw
//! JSON values because peers may use numbers or strings.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{ErrorKind, WireError};

/// The `jsonrpc` member every frame must carry.
pub const VERSION: &str = "2.0";

/// One classified JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A call that expects a response.
    Request {
        /// Caller-chosen id, echoed in the response.
        id: Value,
        /// Method name.
        method: String,
        /// Params (an empty object when absent).
        params: Value,
    },
    /// A fire-and-forget message.
    Notification {
        /// Method name.
        method: String,
        /// Params (an empty object when absent).
        params: Value,
    },
    /// The answer to an earlier request.
    Response {
        /// Id of the request this answers.
        id: Value,
        /// `result` on success, the raw `error` object on failure.
        outcome: Result<Value, Value>,
    },
}

/// Why a text frame is not a usable JSON-RPC message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrameError {
    /// Not JSON at all.
    #[error("frame is not valid JSON: {0}")]
    Parse(String),
    /// JSON, but not a JSON-RPC 2.0 message; `id` is echoed when one was readable.
    #[error("frame is not a JSON-RPC 2.0 message: {reason}")]
    Invalid {
        /// The id, when the frame had a usable one.
        id: Option<Value>,
        /// What is wrong.
        reason: &'static str,
    },
}

impl FrameError {
    /// The wire error to answer with, and the id to answer to (null when unknown).
    pub fn to_wire(&self) -> (Value, WireError) {
        match self {
            FrameError::Parse(_) => {
                (Value::Null, WireError::new(ErrorKind::ParseError, "frame is not valid JSON"))
            }
            FrameError::Invalid { id, reason } => (
                id.clone().unwrap_or(Value::Null),
                WireError::new(ErrorKind::InvalidRequest, format!("not a JSON-RPC 2.0 message: {reason}")),
            ),
        }
    }
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_)) || id.as_i64().is_some() || id.as_u64().is_some()
}

/// Deepest nesting [`parse`] accepts: serde_json refuses a tree 128 deep.
pub const MAX_DEPTH: usize = 127;

/// Whether `json` (valid JSON text, such as a `RawValue`'s) nests no deeper
/// than [`MAX_DEPTH`]: text kept raw skips serde_json's recursion limit, and
/// must not carry past the edge what [`parse`] would have refused.
pub fn within_depth(json: &str) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in json.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// Classifies one text frame.
pub fn parse(text: &str) -> Result<Frame, FrameError> {
    let value: Value = serde_json::from_str(text).map_err(|e| FrameError::Parse(e.to_string()))?;
    classify(value)
}

/// Classifies an already-parsed JSON value.
pub fn classify(value: Value) -> Result<Frame, FrameError> {
    let Value::Object(mut obj) = value else {
        return Err(FrameError::Invalid { id: None, reason: "not an object" });
    };
    let id = obj.remove("id");
    let usable_id = id.clone().filter(valid_id);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
        return Err(FrameError::Invalid { id: usable_id, reason: "jsonrpc must be \"2.0\"" });
    }
    if let Some(method) = obj.remove("method") {
        let Value::String(method) = method else {
            return Err(FrameError::Invalid { id: usable_id, reason: "method must be a string" });
        };
        let params = match obj.remove("params") {
            None => Value::Object(Map::new()),
            Some(p @ (Value::Object(_) | Value::Array(_))) => p,
            Some(_) => {
                return Err(FrameError::Invalid { id: usable_id, reason: "params must be structured" })
            }
        };
        return match id {
            None => Ok(Frame::Notification { method, params }),
            Some(id) if valid_id(&id) => Ok(Frame::Request { id, method, params }),
            Some(_) => Err(FrameError::Invalid { id: None, reason: "id must be a string or integer" }),
        };
    }
    // A response's id is matched by value (`answer_id`): a number such as
    // `7.0` still names request 7, so it is not refused here.
    let Some(id) = usable_id.or(id.filter(Value::is_number)) else {
        return Err(FrameError::Invalid { id: None, reason: "response without a usable id" });
    };
    match (obj.remove("result"), obj.remove("error")) {
        (Some(result), None) => Ok(Frame::Response { id, outcome: Ok(result) }),
        (None, Some(error @ Value::Object(_))) => Ok(Frame::Response { id, outcome: Err(error) }),
        _ => {
            Err(FrameError::Invalid { id: Some(id), reason: "response needs exactly one of result or error" })
        }
    }
}

/// How a response's id matched one of our own request ids (we only ever send
/// unsigned integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerId {
    /// The id is the integer we sent.
    Exact(u64),
    /// The id names our integer by value in another spelling (`"7"`, `7.0`): a
    /// peer bug, but the answer is the call's, so it is delivered, counted and logged.
    Coerced(u64),
    /// No request of ours could have had this id.
    Foreign,
}

/// Reads a response id as one of our request ids, by value.
///
/// JSON-RPC says a response echoes the request's id; a peer that turns `7`
/// into `"7"` or `7.0` still answered request 7, and dropping its answer would
/// leave the caller waiting out a leg for an outcome that already arrived.
/// Only a canonical decimal string or an integral number is read this way:
/// `"07"`, `" 7"` or `7.5` name no id of ours.
pub fn answer_id(id: &Value) -> AnswerId {
    if let Some(n) = id.as_u64() {
        return AnswerId::Exact(n);
    }
    let by_value = match id {
        Value::String(s) => s.parse::<u64>().ok().filter(|n| n.to_string() == *s),
        Value::Number(n) => {
            n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 2f64.powi(53)).map(|f| f as u64)
        }
        _ => None,
    };
    by_value.map_or(AnswerId::Foreign, AnswerId::Coerced)
}

// Frames are serialized straight from borrowed parts: building a `json!` tree
// first cost a map insert per member and a tree drop per frame (the profile's
// top entries, docs/PERFORMANCE.md).
#[derive(Serialize)]
struct Out<'a, T: Serialize + ?Sized, E: Serialize + ?Sized> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a E>,
}

fn write<T: Serialize + ?Sized, E: Serialize + ?Sized>(out: &Out<'_, T, E>) -> String {
    // Serializing these shapes into a String cannot fail.
    serde_json::to_string(out).unwrap_or_default()
}

/// Serializes a request.
pub fn request<P: Serialize + ?Sized>(id: &Value, method: &str, params: &P) -> String {
    write::<P, Value>(&Out {
        jsonrpc: VERSION,
        id: Some(id),
        method: Some(method),
        params: Some(params),
        result: None,
        error: None,
    })
}

/// Serializes a notification.
pub fn notification<P: Serialize + ?Sized>(method: &str, params: &P) -> String {
    write::<P, Value>(&Out {
        jsonrpc: VERSION,
        id: None,
        method: Some(method),
        params: Some(params),
        result: None,
        error: None,
    })
}

/// Serializes a success response; `result` may be any serializable value (no tree is built).
pub fn response<R: Serialize + ?Sized>(id: &Value, result: &R) -> String {
    write::<R, Value>(&Out {
        jsonrpc: VERSION,
        id: Some(id),
        method: None,
        params: None,
        result: Some(result),
        error: None,
    })
}

/// Serializes an error response.
pub fn error_response(id: &Value, error: &WireError) -> String {
    write::<Value, Value>(&Out {
        jsonrpc: VERSION,
        id: Some(id),
        method: None,
        params: None,
        result: None,
        error: Some(&error.to_json()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_depth_check_refuses_what_a_tree_parse_refuses_and_no_more() {
        for n in 120..=136 {
            let nested = format!("{}{}", "[".repeat(n), "]".repeat(n));
            let objects = format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
            for text in [nested, objects] {
                let tree = serde_json::from_str::<Value>(&text).is_ok();
                assert_eq!(within_depth(&text), tree, "depth {n}");
            }
        }
        // Brackets inside strings, escaped quotes and backslashes are not nesting.
        let strings = format!(r#"{{"s":"{}","t":"\"[[","u":"\\"}}"#, "[{".repeat(500));
        assert!(serde_json::from_str::<Value>(&strings).is_ok());
        assert!(within_depth(&strings));
    }

    #[test]
    fn serialized_frames_are_what_the_parser_reads() {
        let id = json!(7);
        assert_eq!(
            request(&id, "m", &json!({"a": 1})),
            r#"{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":1}}"#
        );
        assert_eq!(notification("n", &json!({})), r#"{"jsonrpc":"2.0","method":"n","params":{}}"#);
        assert_eq!(response(&id, &json!({"ok": true})), r#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#);
        let err = error_response(&id, &WireError::new(ErrorKind::Timeout, "t"));
        assert!(matches!(parse(&err), Ok(Frame::Response { outcome: Err(_), .. })));
    }

    #[test]
    fn classifies_the_three_shapes() {
        assert!(matches!(parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Ok(Frame::Request { .. })));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","method":"n","params":{}}"#),
            Ok(Frame::Notification { .. })
        ));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Ok(Frame::Response { outcome: Ok(_), .. })
        ));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"x"}}"#),
            Ok(Frame::Response { outcome: Err(_), .. })
        ));
    }

    #[test]
    fn answer_ids_match_by_value_and_only_by_value() {
        let cases = [
            (json!(7), AnswerId::Exact(7)),
            (json!("7"), AnswerId::Coerced(7)),
            (json!(7.0), AnswerId::Coerced(7)),
            (json!("07"), AnswerId::Foreign),
            (json!(" 7"), AnswerId::Foreign),
            (json!("+7"), AnswerId::Foreign),
            (json!(7.5), AnswerId::Foreign),
            (json!(-7), AnswerId::Foreign),
            (json!("x"), AnswerId::Foreign),
            (json!(null), AnswerId::Foreign),
        ];
        for (id, want) in cases {
            assert_eq!(answer_id(&id), want, "{id}");
        }
    }

    #[test]
    fn bad_frames_say_why_and_keep_the_id() {
        let cases = [
            ("not json", None),
            ("[1,2]", None),
            (r#"{"id":3,"method":"x"}"#, Some(json!(3))),
            (r#"{"jsonrpc":"1.0","id":"k","method":"x"}"#, Some(json!("k"))),
            (r#"{"jsonrpc":"2.0","id":4,"method":7}"#, Some(json!(4))),
            (r#"{"jsonrpc":"2.0","id":5,"method":"x","params":3}"#, Some(json!(5))),
            (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#, None),
            (r#"{"jsonrpc":"2.0","result":{}}"#, None),
            (r#"{"jsonrpc":"2.0","id":6,"result":{},"error":{}}"#, Some(json!(6))),
        ];
        for (text, want_id) in cases {
            let err = parse(text).err();
            let Some(err) = err else { panic!("{text} parsed") };
            let (id, wire) = err.to_wire();
            assert_eq!(id, want_id.unwrap_or(Value::Null), "{text}");
            assert!(matches!(wire.kind, ErrorKind::ParseError | ErrorKind::InvalidRequest));
        }
    }
}
