//! Manifest intake: the caps applied to a device's declared catalog.
//!
//! Pure and deterministic: the same declarations always keep and drop the
//! same tools. Oversized declarations go first; then, while the manifest is
//! over its tool count or byte cap, the largest remaining declaration is
//! dropped (ties broken by namespaced name). Each drop is returned so the
//! caller can log it, count it and report it to the device. A tool whose
//! input or output schema breaks the schema limits (too deep, too many
//! subschemas, a non-local `$ref`) is dropped before any of that.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::Validator;

use tether_contract::backend::{DropReason, DroppedTool};
use tether_contract::mcp::ToolDeclaration;
use tether_contract::{schema, Caps, SchemaLimits};

use crate::gate::{ArgumentGate, Compiled, SchemaCache};
use crate::names::NameTable;

/// What the caps made of one declared catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct Intake {
    /// Kept tools under their namespaced names, in declaration order.
    pub tools: Vec<ToolDeclaration>,
    /// Namespaced ↔ original names of the kept tools.
    pub table: NameTable,
    /// Tools left out, each with its size and reason.
    pub dropped: Vec<DroppedTool>,
    /// Descriptions cut to the description cap.
    pub descriptions_truncated: usize,
    /// Serialized size of the kept tool array, in bytes.
    pub bytes: usize,
    /// The kept tools' compiled input schemas.
    pub gate: ArgumentGate,
    /// Input schemas another manifest had already compiled (shared, not compiled again).
    pub schemas_shared: usize,
}

/// Serialized size of a declaration as the backend will receive it.
fn size_of(decl: &ToolDeclaration) -> usize {
    serde_json::to_vec(decl).map(|v| v.len()).unwrap_or(usize::MAX)
}

/// JSON array size of declarations whose sizes sum to `sum`.
fn array_bytes(count: usize, sum: usize) -> usize {
    sum + count.saturating_sub(1) + 2
}

/// Applies names and caps to a declared catalog; input schemas are compiled
/// through `schemas`, so sessions declaring the same one share it.
pub fn intake(declared: Vec<ToolDeclaration>, caps: &Caps, schemas: &SchemaCache) -> Intake {
    let mut dropped = Vec::new();
    let mut inputs: HashMap<String, Arc<Validator>> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    let mut decls = Vec::with_capacity(declared.len());
    let mut descriptions_truncated = 0;
    let mut schemas_shared = 0;
    for mut decl in declared {
        if !seen.insert(decl.name.clone()) {
            dropped.push(DroppedTool {
                bytes: size_of(&decl),
                name: decl.name,
                reason: DropReason::InvalidDeclaration,
                detail: None,
            });
            continue;
        }
        match compiled_input(&decl, &caps.schema_limits(), schemas) {
            Ok(input) => {
                schemas_shared += usize::from(input.shared);
                inputs.insert(decl.name.clone(), input.validator);
            }
            Err(refused) => {
                dropped.push(DroppedTool {
                    bytes: size_of(&decl),
                    name: decl.name,
                    reason: DropReason::SchemaRejected,
                    detail: Some(refused.to_string()),
                });
                continue;
            }
        }
        if let Some(desc) = decl.description.as_mut() {
            if let Some((cut, _)) = desc.char_indices().nth(caps.description_chars) {
                desc.truncate(cut);
                descriptions_truncated += 1;
            }
        }
        decls.push(decl);
    }

    let full_table = NameTable::assign(decls.iter().map(|d| d.name.as_str()));
    // (declaration index, namespaced declaration, size)
    let mut candidates: Vec<(usize, String, ToolDeclaration, usize)> = Vec::with_capacity(decls.len());
    for (index, decl) in decls.into_iter().enumerate() {
        let original = decl.name.clone();
        let namespaced = full_table.namespaced(&original).unwrap_or_default().to_owned();
        let renamed = ToolDeclaration { name: namespaced, ..decl };
        let bytes = size_of(&renamed);
        if bytes > caps.declaration_bytes {
            dropped.push(DroppedTool {
                name: original,
                bytes,
                reason: DropReason::DeclarationTooLarge,
                detail: None,
            });
        } else {
            candidates.push((index, original, renamed, bytes));
        }
    }

    // Cut order: largest first, ties by namespaced name.
    candidates.sort_by(|a, b| b.3.cmp(&a.3).then_with(|| a.2.name.cmp(&b.2.name)));
    let mut sum: usize = candidates.iter().map(|c| c.3).sum();
    let mut cut = 0;
    while cut < candidates.len() {
        let remaining = candidates.len() - cut;
        let reason = if remaining > caps.max_tools {
            DropReason::TooManyTools
        } else if array_bytes(remaining, sum) > caps.manifest_bytes {
            DropReason::ManifestTooLarge
        } else {
            break;
        };
        let (_, original, _, bytes) = &candidates[cut];
        dropped.push(DroppedTool { name: original.clone(), bytes: *bytes, reason, detail: None });
        sum -= bytes;
        cut += 1;
    }
    let mut kept: Vec<_> = candidates.split_off(cut);
    kept.sort_by_key(|c| c.0);

    let mut table = full_table;
    table.retain(|namespaced| kept.iter().any(|c| c.2.name == namespaced));
    let bytes = array_bytes(kept.len(), sum);
    let gate = kept.iter().filter_map(|c| inputs.remove(&c.1).map(|v| (c.2.name.clone(), v))).collect();
    Intake {
        tools: kept.into_iter().map(|c| c.2).collect(),
        table,
        dropped,
        descriptions_truncated,
        bytes,
        gate,
        schemas_shared,
    }
}

/// Checks a declaration's schemas against the limits and compiles them as
/// the gate does (input first, then output); returns the input's validator.
/// The edge gates arguments with it, so a schema it cannot compile is not listed.
fn compiled_input(
    decl: &ToolDeclaration,
    limits: &SchemaLimits,
    schemas: &SchemaCache,
) -> Result<Compiled, crate::gate::SchemaError> {
    schema::check(&decl.input_schema, limits)?;
    let input = schemas.compile(&decl.input_schema)?;
    if let Some(output) = &decl.output_schema {
        schema::check(output, limits)?;
        crate::gate::compile(output)?;
    }
    Ok(input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decl(name: &str, pad: usize) -> ToolDeclaration {
        ToolDeclaration {
            name: name.into(),
            title: None,
            description: Some("x".repeat(pad)),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            execution: None,
        }
    }

    #[test]
    fn under_the_caps_nothing_is_dropped() {
        let out = intake(vec![decl("a", 10), decl("b", 10)], &Caps::default(), &SchemaCache::default());
        assert!(out.dropped.is_empty());
        assert_eq!(out.tools.len(), 2);
        assert_eq!(out.table.original("client__a"), Some("a"));
    }

    #[test]
    fn largest_goes_first_and_ties_break_by_name() {
        let caps = Caps { manifest_bytes: 700, ..Caps::default() };
        let tools = vec![decl("small", 10), decl("big_b", 300), decl("big_a", 300), decl("mid", 100)];
        let out = intake(tools, &caps, &SchemaCache::default());
        let names: Vec<_> = out.dropped.iter().map(|d| (d.name.as_str(), d.reason)).collect();
        assert_eq!(names, [("big_a", DropReason::ManifestTooLarge)]);
        assert!(out.bytes <= 700);
        let kept: Vec<_> = out.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(kept, ["client__small", "client__big_b", "client__mid"], "declaration order kept");
        assert_eq!(out.table.original("client__big_a"), None, "dropped tools are not routable");
    }

    #[test]
    fn count_cap_and_declaration_cap() {
        let caps = Caps { max_tools: 2, declaration_bytes: 500, ..Caps::default() };
        let out = intake(
            vec![decl("huge", 600), decl("a", 1), decl("b", 2), decl("c", 3)],
            &caps,
            &SchemaCache::default(),
        );
        let got: Vec<_> = out.dropped.iter().map(|d| (d.name.as_str(), d.reason)).collect();
        assert_eq!(got, [("huge", DropReason::DeclarationTooLarge), ("c", DropReason::TooManyTools)]);
        assert_eq!(out.tools.len(), 2);
    }

    #[test]
    fn duplicates_and_long_descriptions() {
        let caps = Caps { description_chars: 5, ..Caps::default() };
        let out = intake(vec![decl("a", 10), decl("a", 1)], &caps, &SchemaCache::default());
        assert_eq!(out.dropped.len(), 1);
        assert_eq!(out.dropped[0].reason, DropReason::InvalidDeclaration);
        assert_eq!(out.descriptions_truncated, 1);
        assert_eq!(out.tools[0].description.as_deref(), Some("xxxxx"));
    }

    #[test]
    fn hostile_schemas_are_dropped_before_the_cut() {
        let mut remote = decl("remote", 1);
        remote.input_schema =
            json!({"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/s.json"}}});
        let mut deep = decl("deep", 1);
        let mut schema = json!({"type": "string"});
        for _ in 0..20 {
            schema = json!({"type": "object", "properties": {"a": schema}});
        }
        deep.output_schema = Some(schema);
        let mut not_object = decl("not_object", 1);
        not_object.input_schema = json!("anything");
        let out = intake(
            vec![remote, decl("fine", 1), deep, not_object],
            &Caps::default(),
            &SchemaCache::default(),
        );
        let got: Vec<_> = out.dropped.iter().map(|d| (d.name.as_str(), d.reason)).collect();
        assert_eq!(
            got,
            [
                ("remote", DropReason::SchemaRejected),
                ("deep", DropReason::SchemaRejected),
                ("not_object", DropReason::SchemaRejected)
            ]
        );
        let kept: Vec<_> = out.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(kept, ["client__fine"]);
        let detail = out.dropped[0].detail.as_deref().unwrap_or_default();
        assert!(detail.contains("127.0.0.1:9") && detail.contains("only local references"), "{detail}");
    }

    #[test]
    fn the_cut_is_the_same_whatever_the_order() {
        let caps = Caps { manifest_bytes: 700, ..Caps::default() };
        let a = vec![decl("p", 200), decl("q", 200), decl("r", 200), decl("s", 50)];
        let mut b = a.clone();
        b.reverse();
        let (x, y) = (intake(a, &caps, &SchemaCache::default()), intake(b, &caps, &SchemaCache::default()));
        assert_eq!(x.dropped, y.dropped);
        assert_eq!(x.table, y.table);
    }
}
