//! Which MCP revision a device speaks, and what each one asks of the edge.
//!
//! A 2025-11-25 device is greeted with `initialize`. A 2026-07-28 device has
//! no handshake: the edge asks `server/discover`, every request carries the
//! per-request envelope in `_meta` (protocol version, client info, client
//! capabilities), and `list_changed` arrives on a `subscriptions/listen`
//! stream the edge opens. A device announces 2026-07-28 at the upgrade (the
//! `MCP-Protocol-Version` header, or `mcp_protocol_version` in the query for
//! browsers), so neither revision pays an extra round trip; one that does not
//! announce and refuses `initialize` is asked `server/discover` next.

use serde_json::{json, Map, Value};

/// An MCP revision the edge serves devices of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Revision {
    /// The `initialize` handshake (tether's original contract).
    V2025_11_25,
    /// Stateless requests: `server/discover`, the `_meta` envelope, `subscriptions/listen`.
    V2026_07_28,
}

/// The header a device announces its revision in at the upgrade.
pub const HEADER: &str = "mcp-protocol-version";
/// The query parameter a browser (which cannot set headers) announces it in.
pub const QUERY: &str = "mcp_protocol_version";

/// Methods of the 2026-07-28 lifecycle.
pub mod method {
    /// Edge → device: who are you, what do you support (replaces `initialize`).
    pub const SERVER_DISCOVER: &str = "server/discover";
    /// Edge → device: a long-lived request that carries change notifications.
    pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
    /// Device → edge: the listen stream is open.
    pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
}

/// `_meta` keys of the 2026-07-28 envelope.
pub mod meta {
    /// The revision of this request (required on every request).
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// Who is asking.
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// What the asker supports (required on every request).
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// Who answered, in a result's `_meta`.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// Which listen stream a notification belongs to.
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
}

impl Revision {
    /// Every revision, oldest first.
    pub const ALL: [Revision; 2] = [Revision::V2025_11_25, Revision::V2026_07_28];

    /// The revision's date string, as it travels on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Revision::V2025_11_25 => "2025-11-25",
            Revision::V2026_07_28 => "2026-07-28",
        }
    }

    /// Reads an announced revision; an unknown one is None (the device is greeted as 2025-11-25).
    pub fn parse(announced: &str) -> Option<Revision> {
        Revision::ALL.into_iter().find(|r| r.as_str() == announced.trim())
    }

    /// Whether requests carry the per-request envelope.
    pub const fn stateless(self) -> bool {
        matches!(self, Revision::V2026_07_28)
    }
}

/// The per-request `_meta` envelope of 2026-07-28.
pub fn envelope() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(meta::PROTOCOL_VERSION.into(), Value::from(Revision::V2026_07_28.as_str()));
    m.insert(meta::CLIENT_INFO.into(), json!({"name": "tether-edge", "version": env!("CARGO_PKG_VERSION")}));
    m.insert(meta::CLIENT_CAPABILITIES.into(), json!({}));
    m
}

/// The envelope of a request that may be answered with a task: its client
/// capabilities declare the tasks extension, which a device must see before
/// it answers `resultType: "task"`.
pub fn task_envelope() -> Map<String, Value> {
    let mut m = envelope();
    let extensions = json!({ tether_contract::tasks::extension::ID: {} });
    m.insert(meta::CLIENT_CAPABILITIES.into(), json!({ "extensions": extensions }));
    m
}

/// What a device said about itself in its `server/discover` result.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// `_meta["io.modelcontextprotocol/serverInfo"]`.
    pub server_info: Value,
    /// `instructions`.
    pub instructions: Option<String>,
    /// `_meta["tether.dev/concept"]`.
    pub concept: Option<Value>,
    /// `capabilities.extensions` holds the tasks extension: its calls may become tasks.
    pub tasks: bool,
}

/// Why a `server/discover` result cannot start a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoverError {
    /// The result is not an object.
    #[error("server/discover result is not an object")]
    NotAnObject,
    /// The device does not list 2026-07-28 among `supportedVersions`.
    #[error("the device supports {0:?}, not 2026-07-28")]
    Unsupported(Vec<String>),
    /// The device asked for input (`resultType: "input_required"`) the edge cannot give.
    #[error("the device asked for input during discovery")]
    InputRequired,
}

/// Whether a result asks the caller for more input instead of completing
/// (2026-07-28's multi-round-trip requests, which a broker cannot answer).
pub fn input_required(result: &Value) -> bool {
    tether_contract::mcp::asks_for_input(result.get("resultType"))
}

/// Reads a `server/discover` result.
pub fn read_discover(result: &Value) -> Result<Discovered, DiscoverError> {
    let Some(obj) = result.as_object() else { return Err(DiscoverError::NotAnObject) };
    if input_required(result) {
        return Err(DiscoverError::InputRequired);
    }
    let supported: Vec<String> = obj
        .get("supportedVersions")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    if !supported.iter().any(|v| v == Revision::V2026_07_28.as_str()) {
        return Err(DiscoverError::Unsupported(supported));
    }
    let meta = obj.get("_meta");
    Ok(Discovered {
        server_info: meta.and_then(|m| m.get(meta::SERVER_INFO)).cloned().unwrap_or(Value::Null),
        instructions: obj.get("instructions").and_then(Value::as_str).map(str::to_owned),
        concept: meta.and_then(|m| m.get(tether_contract::mcp::meta::CONCEPT)).cloned(),
        tasks: obj
            .get("capabilities")
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(tether_contract::tasks::extension::ID))
            .is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_results_are_read_or_refused_with_why() {
        let ok = json!({
            "resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {"listChanged": true}},
            "instructions": "A kiosk.", "ttlMs": 1000, "cacheScope": "public",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "kiosk", "version": "1"}, "tether.dev/concept": {"nouns": ["shelf"]}}
        });
        let d = read_discover(&ok).unwrap();
        assert_eq!(d.server_info["name"], "kiosk");
        assert_eq!(d.instructions.as_deref(), Some("A kiosk."));
        assert_eq!(d.concept, Some(json!({"nouns": ["shelf"]})));
        assert!(!d.tasks, "no tasks extension declared");
        let mut with_tasks = ok.clone();
        with_tasks["capabilities"]["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
        assert!(read_discover(&with_tasks).unwrap().tasks);
        let declared = &task_envelope()[meta::CLIENT_CAPABILITIES];
        assert_eq!(declared["extensions"]["io.modelcontextprotocol/tasks"], json!({}));
        assert_eq!(
            read_discover(&json!({"supportedVersions": ["2027-01-01"]})),
            Err(DiscoverError::Unsupported(vec!["2027-01-01".into()]))
        );
        assert_eq!(
            read_discover(&json!({"resultType": "input_required"})),
            Err(DiscoverError::InputRequired)
        );
        assert_eq!(read_discover(&json!([])), Err(DiscoverError::NotAnObject));
        assert_eq!(Revision::parse(" 2026-07-28"), Some(Revision::V2026_07_28));
        assert_eq!(Revision::parse("2099-01-01"), None);
    }
}
