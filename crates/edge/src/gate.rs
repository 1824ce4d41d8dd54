//! The argument gate at the edge: every kept tool's `inputSchema`, compiled
//! once at intake, checks a backend's `tools/call` arguments before anything
//! is sent to the device — for backends in any language, not only those that
//! link tether-core (which checks again: the gate is in two places).
//!
//! Compiled as core compiles: offline (no reference is ever fetched) and with
//! the linear-time `regex` engine for `pattern`, past the contract's schema
//! limits already checked at intake. A schema that does not compile so is
//! dropped at intake (`schema_rejected`): the edge never lists a tool it
//! cannot gate (`tests/contract.rs` pins that edge and core agree).

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::{PatternOptions, Validator};
use serde_json::Value;

use tether_contract::{ErrorKind, WireError};

use crate::shared::WeakTable;

/// Largest compiled program one `pattern` may become, in bytes (core's too).
const PATTERN_SIZE_LIMIT: usize = 256 * 1024;

/// Why a declared schema cannot gate calls; its tool is dropped at intake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// Past the shared limits (depth, subschemas) or not self-contained.
    #[error("schema {0}")]
    Limits(#[from] tether_contract::SchemaViolation),
    /// Within the limits but not compilable offline with linear-time patterns.
    #[error("schema does not compile: {0}")]
    Compile(String),
}

/// Compiles one declared schema the way the gate (and core) does.
pub fn compile(schema: &Value) -> Result<Validator, SchemaError> {
    jsonschema::options()
        .offline()
        .with_pattern_options(PatternOptions::regex().size_limit(PATTERN_SIZE_LIMIT))
        .build(schema)
        .map_err(|e| SchemaError::Compile(e.masked().to_string()))
}

/// Compiled input schemas shared by every session of one edge, by schema text.
///
/// A compiled validator is a few KiB even for `{"type": "object"}`, and the
/// devices of one app declare the same schemas: 10,000 sessions compile each
/// schema once and hold one copy (held weakly, see [`crate::shared`]).
#[derive(Debug, Default)]
pub struct SchemaCache {
    table: WeakTable<String, Validator>,
}

/// A compiled schema and whether it was shared rather than compiled.
pub struct Compiled {
    /// The validator, shared with every manifest that declares the same schema.
    pub validator: Arc<Validator>,
    /// True when it was already compiled (for another session, an earlier
    /// read of this one, or another tool of the same catalog).
    pub shared: bool,
}

impl SchemaCache {
    /// The compiled form of `schema`: the one already in use, or compiled now.
    /// Limits are the caller's to check first (they differ by client profile).
    pub fn compile(&self, schema: &Value) -> Result<Compiled, SchemaError> {
        let text = serde_json::to_string(schema).map_err(|e| SchemaError::Compile(e.to_string()))?;
        let (validator, shared) = self.table.get_or_make(text, || compile(schema))?;
        Ok(Compiled { validator, shared })
    }

    /// Distinct compiled schemas some manifest still holds.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no schema is alive.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

/// The compiled input schemas of one manifest, by namespaced name (compiled
/// once, at intake, where the schemas are checked).
#[derive(Clone, Default)]
pub struct ArgumentGate {
    inputs: HashMap<String, Arc<Validator>>,
}

impl FromIterator<(String, Arc<Validator>)> for ArgumentGate {
    fn from_iter<I: IntoIterator<Item = (String, Arc<Validator>)>>(iter: I) -> Self {
        ArgumentGate { inputs: iter.into_iter().collect() }
    }
}

/// Two gates are equal when they gate the same tools (validators have no equality).
impl PartialEq for ArgumentGate {
    fn eq(&self, other: &Self) -> bool {
        self.inputs.len() == other.inputs.len() && self.inputs.keys().all(|k| other.inputs.contains_key(k))
    }
}

impl std::fmt::Debug for ArgumentGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgumentGate").field("tools", &self.inputs.len()).finish()
    }
}

impl ArgumentGate {
    /// Checks a call's arguments against the tool's input schema; the error is
    /// `invalid_arguments` naming where and what, never echoing the values.
    pub fn check(&self, tool: &str, arguments: &Value) -> Result<(), WireError> {
        let Some(validator) = self.inputs.get(tool) else {
            return Err(WireError::new(
                ErrorKind::InvalidArguments,
                format!("the input schema of {tool} cannot be enforced, so it is not called"),
            )
            .with("tool", tool));
        };
        match validator.iter_errors(arguments).next() {
            None => Ok(()),
            Some(e) => {
                let path = e.instance_path().to_string();
                let path = if path.is_empty() { "/".to_owned() } else { path };
                Err(WireError::new(
                    ErrorKind::InvalidArguments,
                    format!("arguments for {tool} do not match its input schema at {path}: {}", e.masked()),
                )
                .with("tool", tool))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_same_schema_is_compiled_once_and_freed_with_its_last_manifest() {
        let cache = SchemaCache::default();
        let schema = json!({"type": "object", "properties": {"id": {"type": "string"}}});
        let first = cache.compile(&schema).unwrap();
        let second = cache.compile(&schema).unwrap();
        assert!(!first.shared && second.shared);
        assert!(Arc::ptr_eq(&first.validator, &second.validator), "one copy");
        let other = cache.compile(&json!({"type": "object"})).unwrap();
        assert!(!other.shared, "another schema is compiled on its own");
        assert_eq!(cache.len(), 2);
        drop((first, second));
        assert_eq!(cache.len(), 1, "freed with its last user");
        assert!(!cache.compile(&schema).unwrap().shared, "compiled again once nobody held it");
    }

    #[test]
    fn arguments_are_checked_against_the_declared_schema_without_echoing_them() {
        let schema = json!({"type": "object", "properties": {"id": {"type": "string", "pattern": "^A-[0-9]+$"}}, "required": ["id"], "additionalProperties": false});
        let gate: ArgumentGate =
            [("client__open".to_owned(), Arc::new(compile(&schema).unwrap()))].into_iter().collect();
        assert_eq!(gate.check("client__open", &json!({"id": "A-104"})), Ok(()));
        for bad in [json!({}), json!({"id": "secret-value"}), json!({"id": "A-1", "extra": 1}), json!("A-1")]
        {
            let err = gate.check("client__open", &bad).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidArguments, "{bad}");
            assert!(!err.message.contains("secret-value"), "values are never echoed: {}", err.message);
        }
        assert_eq!(gate.check("client__missing", &json!({})).unwrap_err().kind, ErrorKind::InvalidArguments);
    }

    #[test]
    fn schemas_core_would_refuse_do_not_compile_here_either() {
        for refused in [
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=a)(a+)+$"}}}),
            json!({"$schema": "http://127.0.0.1:9/meta.json", "type": "object"}),
        ] {
            assert!(compile(&refused).is_err(), "{refused}");
        }
        assert!(compile(&json!({"type": "object"})).is_ok());
    }
}
