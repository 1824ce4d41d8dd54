//! The write contract: which calls need an approval, what an approval is
//! bound to, the arguments' fingerprint, and the receipt a write leaves.
//!
//! A read may run as soon as the caller may call it. A write (a call that
//! changes something it cannot take back) runs only with a single-use grant bound to the
//! exact call — principal, session, the tool's original name, a fingerprint
//! of the arguments, and the state the caller saw — and leaves a receipt.
//! The same rule is held in two places, like the argument gate: the edge for
//! client tools (every backend, raw or not) and core's dispatcher for
//! server-side sources. Both run [`Binding::differs`], so they refuse alike.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::mcp::ToolDeclaration;

/// `_meta` keys of the write contract on the backend link and the device link.
pub mod meta {
    /// The approval a call presents (`tools/call` `_meta`), or the one an
    /// error asks for (`data.approval`).
    pub const APPROVAL: &str = "tether.dev/approval";
    /// Set by a backend whose own policy needs an approval for this call
    /// (core's caller profile), so the edge asks for one even where its own
    /// policy would not.
    pub const APPROVAL_REQUIRED: &str = "tether.dev/approval_required";
    /// The receipt of an approved or keyed call, in the result's `_meta`.
    pub const RECEIPT: &str = "tether.dev/receipt";
    /// In a device's handshake answer (`initialize` or `server/discover`
    /// `_meta`): `true` when it asks its user to approve calls ([`super::method::APPROVE`]).
    pub const APPROVALS: &str = "tether.dev/approvals";
}

/// Methods of the write contract on the device link.
pub mod method {
    /// Edge → device: ask the device's user to approve one call
    /// ([`super::ApproveParams`]); the device answers [`super::ApproveResult`].
    pub const APPROVE: &str = "tether.dev/approve";
}

/// Params of `tether.dev/approve`: everything the user needs to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApproveParams {
    /// The approval's id.
    pub approval: String,
    /// The tool's name as the device declared it.
    pub tool: String,
    /// Its declared title, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its declared description, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The exact arguments the call would run with.
    pub arguments: Value,
    /// How long the user has to decide, in ms.
    pub expires_in_ms: u64,
}

/// The device's answer to `tether.dev/approve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproveResult {
    /// True when the user approved.
    pub approve: bool,
}

/// Which calls need an approval before they run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    /// No call needs one (a caller that approves out of band, or a test rig).
    Never,
    /// A tool whose `annotations.destructiveHint` is true, or one listed.
    #[default]
    Destructive,
    /// Every call.
    Always,
}

impl ApprovalPolicy {
    /// The stable name in configuration and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Never => "never",
            ApprovalPolicy::Destructive => "destructive",
            ApprovalPolicy::Always => "always",
        }
    }

    /// Reads a configuration value; unknown names stay unknown.
    pub fn from_name(name: &str) -> Option<ApprovalPolicy> {
        [ApprovalPolicy::Never, ApprovalPolicy::Destructive, ApprovalPolicy::Always]
            .into_iter()
            .find(|p| p.as_str() == name)
    }

    /// Whether a call to `tool` needs an approval; `listed` says the policy
    /// names the tool itself. Only an explicit `destructiveHint: true` counts:
    /// a tool without annotations is not destructive unless listed.
    pub fn needs(self, tool: &ToolDeclaration, listed: bool) -> bool {
        match self {
            ApprovalPolicy::Never => false,
            ApprovalPolicy::Always => true,
            ApprovalPolicy::Destructive => listed || is_destructive(tool),
        }
    }
}

/// Whether a declaration says it changes the world irreversibly.
pub fn is_destructive(tool: &ToolDeclaration) -> bool {
    tool.annotations.as_ref().and_then(|a| a.get("destructiveHint")).and_then(Value::as_bool).unwrap_or(false)
}

/// A SHA-256 over a canonical form of a value, as lowercase hex.
///
/// Canonical: object keys sorted by their UTF-8 bytes, no whitespace, numbers
/// and strings as serde_json writes them, so `{"b":1,"a":2}` and
/// `{"a":2,"b":1}` fingerprint alike whatever order a model sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of `value`.
    pub fn of(value: &Value) -> Fingerprint {
        let mut text = String::new();
        canonical(value, &mut text);
        let digest = Sha256::digest(text.as_bytes());
        let mut hex = String::with_capacity(64);
        for b in digest {
            let _ = write!(hex, "{b:02x}");
        }
        Fingerprint(hex)
    }

    /// The fingerprint of a declaration as the caller was shown it: a tool
    /// whose schema or description changed is another tool for an approval.
    pub fn of_declaration(tool: &ToolDeclaration) -> Fingerprint {
        Fingerprint::of(&serde_json::to_value(tool).unwrap_or_default())
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// What an approval authorises, and nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The verified user the call runs for.
    pub principal: String,
    /// The session the call goes to (a server-side source: the turn's session).
    pub session: String,
    /// The tool's original name (the device's own, or the source's).
    pub tool: String,
    /// [`Fingerprint::of`] the arguments.
    pub arguments: Fingerprint,
    /// The state the caller saw: the tool's declaration on a device (so a
    /// newer manifest that changed the tool voids it), or what a source says
    /// the call acts on (a record's status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Fingerprint>,
}

/// One part of a [`Binding`] that differs, named without its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Differs {
    /// Another user.
    Principal,
    /// Another session.
    Session,
    /// Another tool.
    Tool,
    /// Other arguments.
    Arguments,
    /// The tool or what it acts on changed since the approval.
    State,
}

impl Differs {
    /// The stable name in `data.differs`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Differs::Principal => "principal",
            Differs::Session => "session",
            Differs::Tool => "tool",
            Differs::Arguments => "arguments",
            Differs::State => "state",
        }
    }
}

impl Binding {
    /// The parts of `call` that differ from what was approved, in a fixed order.
    pub fn differs(&self, call: &Binding) -> Vec<Differs> {
        let mut out = Vec::new();
        if self.principal != call.principal {
            out.push(Differs::Principal);
        }
        if self.session != call.session {
            out.push(Differs::Session);
        }
        if self.tool != call.tool {
            out.push(Differs::Tool);
        }
        if self.arguments != call.arguments {
            out.push(Differs::Arguments);
        }
        if self.state != call.state {
            out.push(Differs::State);
        }
        out
    }
}

/// Who decided an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approver {
    /// The device's user, asked on the device.
    Device,
    /// The caller's user, through the backend (or an MCP client's elicitation).
    Caller,
}

/// `approvals/decide` params on the backend link: the user's answer to an
/// approval request (or a look at where it stands), with their credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideParams {
    /// The session the approval was asked for.
    pub session: String,
    /// The approval's id, from the `approval_required` error.
    pub approval: String,
    /// True: run it; false: do not; absent: only say where it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<bool>,
    /// The deciding user's credential.
    #[serde(default, rename = "_meta")]
    pub meta: crate::backend::ReadMeta,
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// Asked, not yet answered.
    Pending,
    /// Approved and not yet used.
    Granted,
    /// Declined: the call it names will not run.
    Declined,
    /// Used by its call.
    Used,
}

/// `approvals/decide` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    /// The approval's id.
    pub approval: String,
    /// Where it stands now.
    pub state: ApprovalState,
    /// How long the grant is good for, in ms.
    pub expires_in_ms: u64,
}

/// What an approved or keyed call left behind: enough to say what happened,
/// nothing secret (no credential, no argument value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The tool's namespaced name (what the caller called).
    pub tool: String,
    /// The idempotency key, when the call had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// [`Fingerprint::of`] the arguments.
    pub fingerprint: Fingerprint,
    /// The approval that let it run, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ReceiptApproval>,
    /// `ok`, or the error kind it ended with.
    pub outcome: String,
    /// The session's manifest seq after the call (a device's), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// When the call started, in ms since the Unix epoch.
    pub started_at_ms: u64,
    /// How long it took, in ms.
    pub latency_ms: u64,
}

/// The approval part of a [`Receipt`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptApproval {
    /// The approval's id.
    pub id: String,
    /// Who decided.
    pub by: Approver,
    /// When, in ms since the Unix epoch.
    pub at_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding(arguments: Value) -> Binding {
        Binding {
            principal: "u1".into(),
            session: "s1".into(),
            tool: "t_write".into(),
            arguments: Fingerprint::of(&arguments),
            state: None,
        }
    }

    #[test]
    fn a_fingerprint_ignores_key_order_and_nothing_else() {
        let a = Fingerprint::of(&json!({"item": "x1", "reason": {"why": "late", "code": 2}}));
        let b = Fingerprint::of(&json!({"reason": {"code": 2, "why": "late"}, "item": "x1"}));
        assert_eq!(a, b);
        assert_eq!(a.as_str().len(), 64);
        for other in [
            json!({"item": "x2", "reason": {"why": "late", "code": 2}}),
            json!({"item": "x1", "reason": {"why": "late", "code": 2.5}}),
            json!({"item": "x1", "reason": {"why": "late", "code": "2"}}),
            json!({"item": "x1", "reason": ["late", 2]}),
            json!({"item": "x1"}),
        ] {
            assert_ne!(Fingerprint::of(&other), a, "{other}");
        }
        // A key that needs escaping is escaped, not spliced into the text.
        assert_ne!(Fingerprint::of(&json!({"a\":1,\"b": 1})), Fingerprint::of(&json!({"a": 1, "b": 1})));
    }

    #[test]
    fn a_binding_names_what_differs_without_values() {
        let approved = binding(json!({"item": "x1"}));
        assert!(approved.differs(&approved.clone()).is_empty());
        let mut call = binding(json!({"item": "x2"}));
        call.principal = "u2".into();
        call.state = Some(Fingerprint::of(&json!("cancelled")));
        assert_eq!(approved.differs(&call), [Differs::Principal, Differs::Arguments, Differs::State]);
    }

    #[test]
    fn only_an_explicit_destructive_hint_counts_unless_listed() {
        let tool = |annotations: Option<Value>| ToolDeclaration {
            name: "t".into(),
            title: None,
            description: None,
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations,
            execution: None,
        };
        let destructive = tool(Some(json!({"destructiveHint": true})));
        let plain = tool(None);
        let read_only = tool(Some(json!({"readOnlyHint": true})));
        let p = ApprovalPolicy::Destructive;
        assert!(p.needs(&destructive, false));
        assert!(!p.needs(&plain, false) && !p.needs(&read_only, false));
        assert!(p.needs(&plain, true));
        assert!(ApprovalPolicy::Always.needs(&read_only, false));
        assert!(!ApprovalPolicy::Never.needs(&destructive, true));
        for policy in [ApprovalPolicy::Never, ApprovalPolicy::Destructive, ApprovalPolicy::Always] {
            assert_eq!(ApprovalPolicy::from_name(policy.as_str()), Some(policy));
        }
    }
}
