//! Limits on a client-declared JSON Schema, checked before anything compiles it.
//!
//! A schema is input like any other: a device can declare one nested past any
//! sane depth, with thousands of subschemas, or with a `$ref` that points at a
//! network address. The edge refuses such a tool at intake and core refuses it
//! again before it builds a validator; both use [`check`], so the two gates
//! cannot drift. Only local references (`#…`) are allowed: nothing ever
//! fetches a schema from anywhere.

use serde_json::Value;

/// Keywords whose value is a reference that a validator would resolve.
const REFERENCE_KEYWORDS: &[&str] = &["$ref", "$dynamicRef", "$recursiveRef"];

/// How complex a declared schema may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Deepest JSON nesting (objects and arrays) in the schema.
    pub max_depth: usize,
    /// Most JSON objects (subschemas and their keyword maps) in the schema.
    pub max_nodes: usize,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        SchemaLimits { max_depth: 16, max_nodes: 128 }
    }
}

/// Why a schema was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaViolation {
    /// Not a JSON object (MCP requires an object schema).
    #[error("is not a JSON object")]
    NotAnObject,
    /// Nested deeper than the limit.
    #[error("nests deeper than {limit} levels")]
    TooDeep {
        /// The depth limit.
        limit: usize,
    },
    /// More objects than the limit.
    #[error("has more than {limit} subschemas")]
    TooManyNodes {
        /// The node limit.
        limit: usize,
    },
    /// A reference that is not local to the schema (`#…`).
    #[error("references {reference:?}; only local references (#…) are allowed and none is ever fetched")]
    RemoteReference {
        /// The offending reference, cut to 64 bytes.
        reference: String,
    },
}

impl SchemaViolation {
    /// Stable name for logs and metrics.
    pub const fn as_str(&self) -> &'static str {
        match self {
            SchemaViolation::NotAnObject => "not_an_object",
            SchemaViolation::TooDeep { .. } => "too_deep",
            SchemaViolation::TooManyNodes { .. } => "too_many_nodes",
            SchemaViolation::RemoteReference { .. } => "remote_reference",
        }
    }
}

/// Checks one schema against `limits`, without recursion (a hostile depth
/// cannot overflow the stack here).
pub fn check(schema: &Value, limits: &SchemaLimits) -> Result<(), SchemaViolation> {
    if !schema.is_object() {
        return Err(SchemaViolation::NotAnObject);
    }
    let mut nodes = 0usize;
    let mut stack: Vec<(&Value, usize)> = vec![(schema, 1)];
    while let Some((value, depth)) = stack.pop() {
        if depth > limits.max_depth {
            return Err(SchemaViolation::TooDeep { limit: limits.max_depth });
        }
        match value {
            Value::Object(map) => {
                nodes += 1;
                if nodes > limits.max_nodes {
                    return Err(SchemaViolation::TooManyNodes { limit: limits.max_nodes });
                }
                for (key, child) in map {
                    if REFERENCE_KEYWORDS.contains(&key.as_str()) {
                        if let Value::String(reference) = child {
                            if !reference.starts_with('#') {
                                let mut reference = reference.clone();
                                crate::error::truncate_utf8(&mut reference, 64);
                                return Err(SchemaViolation::RemoteReference { reference });
                            }
                        }
                    }
                    if child.is_object() || child.is_array() {
                        stack.push((child, depth + 1));
                    }
                }
            }
            Value::Array(items) => {
                stack.extend(items.iter().filter(|v| v.is_object() || v.is_array()).map(|v| (v, depth + 1)));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut schema = json!({"type": "string"});
        for _ in 1..levels {
            schema = json!({"type": "object", "properties": {"a": schema}});
        }
        schema
    }

    #[test]
    fn limits_table() {
        let limits = SchemaLimits::default();
        let wide: serde_json::Map<String, Value> =
            (0..200).map(|i| (format!("p{i}"), json!({"type": "string"}))).collect();
        let cases: Vec<(&str, Value, Result<(), &str>)> = vec![
            ("plain", json!({"type": "object", "properties": {"x": {"type": "integer"}}}), Ok(())),
            ("local ref", json!({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"}), Ok(())),
            ("8 levels (16 JSON levels)", nested(8), Ok(())),
            ("9 levels", nested(9), Err("too_deep")),
            ("200 properties", json!({"type": "object", "properties": wide}), Err("too_many_nodes")),
            ("http ref", json!({"$ref": "http://127.0.0.1:9/x.json"}), Err("remote_reference")),
            (
                "relative ref",
                json!({"properties": {"a": {"$ref": "other.json#/a"}}}),
                Err("remote_reference"),
            ),
            ("dynamic ref", json!({"$dynamicRef": "https://example.com/s"}), Err("remote_reference")),
            ("a property named $ref", json!({"properties": {"$ref": {"type": "string"}}}), Ok(())),
            ("boolean schema", json!(true), Err("not_an_object")),
            ("string", json!("lol"), Err("not_an_object")),
        ];
        for (name, schema, want) in cases {
            let got = check(&schema, &limits).map_err(|e| e.as_str());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn depth_counts_arrays_too() {
        let mut deep = json!(1);
        for _ in 0..1_000 {
            deep = json!([deep]);
        }
        let schema = json!({ "enum": deep });
        let limits = SchemaLimits::default();
        assert_eq!(check(&schema, &limits), Err(SchemaViolation::TooDeep { limit: limits.max_depth }));
    }
}
