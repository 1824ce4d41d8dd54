//! Client-link payloads: the Model Context Protocol shapes, socket reversed.
//!
//! The edge is the MCP *client* (it sends `initialize`, `tools/list`,
//! `tools/call`, `notifications/cancelled`); the device is the MCP *server*.
//! tether's additions ride in `_meta` under the `tether.dev/` prefix.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Method names on the client link.
pub mod method {
    /// Edge → device handshake.
    pub const INITIALIZE: &str = "initialize";
    /// Edge → device, after the handshake.
    pub const INITIALIZED: &str = "notifications/initialized";
    /// Edge → device catalog read (paged by `cursor`).
    pub const TOOLS_LIST: &str = "tools/list";
    /// Edge → device tool execution.
    pub const TOOLS_CALL: &str = "tools/call";
    /// Device → edge: the catalog moved.
    pub const LIST_CHANGED: &str = "notifications/tools/list_changed";
    /// Edge → device: stop work nobody waits for.
    pub const CANCELLED: &str = "notifications/cancelled";
    /// Device → edge (and edge → backend): how far a call has got.
    pub const PROGRESS: &str = "notifications/progress";
    /// Either direction liveness probe.
    pub const PING: &str = "ping";
    /// Edge → device: which manifest was applied and what the caps dropped.
    pub const MANIFEST_APPLIED: &str = "notifications/tether.dev/manifest_applied";
}

/// `_meta` keys tether adds.
pub mod meta {
    /// The device's catalog sequence number.
    pub const SEQ: &str = "tether.dev/seq";
    /// An opaque string the device derives from its catalog and context (any
    /// hash of them): a moved seq under the digest already applied tells the
    /// edge the catalog did not change, so it re-stamps instead of re-reading.
    pub const DIGEST: &str = "tether.dev/digest";
    /// The device's context: `{pointer, snapshot}`.
    pub const CONTEXT: &str = "tether.dev/context";
    /// The device's structured concept model.
    pub const CONCEPT: &str = "tether.dev/concept";
    /// Milliseconds the edge will wait for this call.
    pub const DEADLINE_MS: &str = "tether.dev/deadline_ms";
    /// Caller-chosen key so a device can de-duplicate a retried call.
    pub const IDEMPOTENCY_KEY: &str = "tether.dev/idempotency_key";
    /// The session id the edge assigned, sent in `initialize`.
    pub const SESSION: &str = "tether.dev/session";
    /// The single-use token that resumes this session after a brief
    /// disconnect, sent in `initialize` (the device presents it as
    /// [`crate::RESUME_QUERY`] when it reconnects).
    pub const RESUME: &str = "tether.dev/resume";
    /// MCP's token a request carries when its caller wants `notifications/progress`.
    pub const PROGRESS_TOKEN: &str = "progressToken";
    /// W3C trace context of the request (MCP carries it in `_meta`, SEP-414).
    pub const TRACEPARENT: &str = "traceparent";
    /// W3C `tracestate`, beside [`TRACEPARENT`].
    pub const TRACESTATE: &str = "tracestate";
}

/// One tool as a device declares it (and, renamed, as the backend sees it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDeclaration {
    /// Tool name.
    pub name: String,
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// MCP tool annotations (hints such as `readOnlyHint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// Whether it runs as a task (`execution.taskSupport`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<crate::tasks::ToolExecution>,
}

impl ToolDeclaration {
    /// Whether calls of this tool may, must or must not become tasks.
    pub fn task_support(&self) -> crate::tasks::TaskSupport {
        self.execution.as_ref().and_then(|e| e.task_support).unwrap_or_default()
    }
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

/// The device's answer to `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// MCP protocol revision the device speaks.
    #[serde(default)]
    pub protocol_version: String,
    /// `{name, version}` of the device software.
    #[serde(default)]
    pub server_info: Value,
    /// MCP capabilities; `tools.listChanged` matters here.
    #[serde(default)]
    pub capabilities: Value,
    /// Free-text concept model for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// `_meta`, carrying `tether.dev/concept`.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// One page of the device's catalog.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult {
    /// The tools on this page.
    #[serde(default)]
    pub tools: Vec<ToolDeclaration>,
    /// Cursor for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// `_meta`, carrying `tether.dev/seq` and `tether.dev/context`.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// MCP `CallToolResult`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    /// Content blocks (`{type:"text", text}` and friends).
    #[serde(default)]
    pub content: Vec<Value>,
    /// Machine-readable result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// True when the device reports a tool-level failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// `_meta`, carrying `tether.dev/seq`.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// What a device puts in `structuredContent` of an `isError` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFailure {
    /// Device-defined failure code (`user_declined`, `busy`, …).
    pub code: String,
    /// Whether trying again may succeed.
    #[serde(default)]
    pub retryable: bool,
    /// How long to wait before retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// Reads `_meta["tether.dev/seq"]` from any payload's `_meta`.
pub fn seq_of(meta: Option<&Map<String, Value>>) -> Option<u64> {
    meta.and_then(|m| m.get(meta::SEQ)).and_then(Value::as_u64)
}

/// Reads `_meta["tether.dev/digest"]` from any payload's `_meta`.
pub fn digest_of(meta: Option<&Map<String, Value>>) -> Option<&str> {
    meta.and_then(|m| m.get(meta::DIGEST)).and_then(Value::as_str)
}

/// A device's `CallToolResult` as the JSON it sent. The edge checks its
/// shape and reads its stamps, then forwards the text as it came: no tree is
/// built for it, on the thread that reads the device, only to be serialized
/// again on the one that answers the backend.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawCallResult(Box<RawValue>);

/// What the edge reads from a raw result: the stamps beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultStamps {
    /// `_meta["tether.dev/seq"]`, when a non-negative integer.
    pub seq: Option<u64>,
    /// `_meta["tether.dev/digest"]`, when a string.
    pub digest: Option<String>,
    /// `isError`: the tool reports a failure.
    pub is_error: bool,
}

/// Why a raw result was not forwarded.
#[derive(Debug, thiserror::Error)]
pub enum RawResultError {
    /// The device asked for more input (`resultType: input_required`), which a
    /// tool call cannot supply.
    #[error("the result asks for more input")]
    InputRequired,
    /// Not a `CallToolResult` (as [`CallToolResult`] parses one).
    #[error("{0}")]
    Malformed(#[from] serde_json::Error),
}

/// `_meta`'s stamps; any other key is the device's business. Only an
/// object is `_meta` (as the typed map requires), never an array.
#[derive(Default)]
struct Stamps {
    seq: Option<Value>,
    digest: Option<Value>,
}

impl<'de> Deserialize<'de> for Stamps {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Stamps, D::Error> {
        d.deserialize_map(StampsVisitor)
    }
}

struct StampsVisitor;

impl<'de> serde::de::Visitor<'de> for StampsVisitor {
    type Value = Stamps;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a _meta object")
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Stamps, M::Error> {
        let mut stamps = Stamps::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                meta::SEQ => stamps.seq = Some(map.next_value()?),
                meta::DIGEST => stamps.digest = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(stamps)
    }
}

/// The shape [`CallToolResult`] accepts, read without keeping it.
#[derive(Deserialize)]
#[allow(dead_code)] // `content`, `structured_content` are read to check their types.
struct Shape {
    #[serde(default)]
    content: Vec<IgnoredAny>,
    #[serde(default, rename = "structuredContent")]
    structured_content: Option<IgnoredAny>,
    #[serde(default, rename = "isError")]
    is_error: bool,
    #[serde(default, rename = "_meta")]
    meta: Option<Stamps>,
    #[serde(default, rename = "resultType")]
    result_type: Option<Value>,
}

/// Only `resultType`, for a result of another shape.
#[derive(Deserialize)]
struct Kind {
    #[serde(default, rename = "resultType")]
    result_type: Option<Value>,
}

/// Whether a result's `resultType` says the server needs more input
/// (`input_required`, MCP 2026-07-28), which a tool call cannot supply.
pub fn asks_for_input(result_type: Option<&Value>) -> bool {
    result_type.and_then(Value::as_str) == Some("input_required")
}

impl RawCallResult {
    /// Checks that `raw` parses as a [`CallToolResult`] would (without
    /// building one) and is not an `input_required` answer; returns it with
    /// its stamps.
    pub fn read(raw: Box<RawValue>) -> Result<(RawCallResult, ResultStamps), RawResultError> {
        let shape: Shape = match serde_json::from_str(raw.get()) {
            Ok(shape) => shape,
            Err(e) => {
                let kind = serde_json::from_str::<Kind>(raw.get()).ok().and_then(|k| k.result_type);
                return Err(if asks_for_input(kind.as_ref()) {
                    RawResultError::InputRequired
                } else {
                    e.into()
                });
            }
        };
        if asks_for_input(shape.result_type.as_ref()) {
            return Err(RawResultError::InputRequired);
        }
        let mut stamps = shape.meta.map_or_else(ResultStamps::default, |m| ResultStamps {
            seq: m.seq.as_ref().and_then(Value::as_u64),
            digest: m.digest.as_ref().and_then(Value::as_str).map(str::to_owned),
            is_error: false,
        });
        stamps.is_error = shape.is_error;
        Ok((RawCallResult(raw), stamps))
    }

    /// The result's JSON text, as the device sent it.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl CallToolResult {
    /// The seq the device stamped on this result, if any.
    pub fn seq(&self) -> Option<u64> {
        seq_of(self.meta.as_ref())
    }

    /// The catalog digest the device stamped beside the seq, if any.
    pub fn digest(&self) -> Option<&str> {
        digest_of(self.meta.as_ref())
    }

    /// The first text block, for error messages and logs.
    pub fn first_text(&self) -> Option<&str> {
        self.content.iter().find_map(|c| c.get("text").and_then(Value::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<(RawCallResult, ResultStamps), RawResultError> {
        let raw = RawValue::from_string(text.to_owned()).unwrap_or_else(|e| panic!("{text}: {e}"));
        RawCallResult::read(raw)
    }

    /// The raw read accepts and stamps exactly what the typed one does.
    #[test]
    fn a_raw_result_reads_as_the_typed_one_and_is_forwarded_as_sent() {
        let cases = [
            r#"{"content":[{"type":"text","text":"ok"}],"_meta":{"tether.dev/seq":7,"tether.dev/digest":"d1"}}"#,
            r#"{"content":[],"isError":true,"structuredContent":{"code":"busy"}}"#,
            r#"{"_meta":{"tether.dev/seq":"7","other":1}}"#,
            r#"{"content":[1,"two",{"three":3}],"extra":{"kept":true}}"#,
            r#"{}"#,
        ];
        for text in cases {
            let typed: CallToolResult = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let (raw, stamps) = read(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(raw.get(), text, "forwarded as it came");
            assert_eq!(stamps.seq, typed.seq(), "{text}");
            assert_eq!(stamps.digest.as_deref(), typed.digest(), "{text}");
        }
        for bad in [r#"{"content":"text"}"#, r#"{"isError":"yes"}"#, r#"{"_meta":[]}"#, r#"3"#] {
            assert!(serde_json::from_str::<CallToolResult>(bad).is_err(), "{bad} is refused typed");
            assert!(matches!(read(bad), Err(RawResultError::Malformed(_))), "{bad} is refused raw");
        }
        for asks in [
            r#"{"resultType":"input_required","content":[]}"#,
            r#"{"resultType":"input_required","content":7}"#,
        ] {
            assert!(matches!(read(asks), Err(RawResultError::InputRequired)), "{asks}");
        }
        let stamped = format!(r#"{{"_meta":{{"{}":3,"{}":"x"}}}}"#, meta::SEQ, meta::DIGEST);
        assert_eq!(
            read(&stamped).ok().map(|r| r.1),
            Some(ResultStamps { seq: Some(3), digest: Some("x".into()), is_error: false })
        );
    }
}
