//! The contract suite: what edge and core must agree on, pinned.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use serde_json::{json, Value};
use tether_contract::backend::{CallMeta, CallParams, CallResponse, DropReason, Manifest};
use tether_contract::mcp::{meta, CallToolResult};
use tether_contract::{Budgets, ErrorKind, Leg};

#[test]
fn budgets_are_ordered_client_inside_call_inside_per_tool() {
    let b = Budgets::default();
    assert!(b.client_answer < b.tool_call, "the device must give up before the edge does");
    assert!(b.tool_call < b.per_tool);
    assert!(b.reread < b.per_tool);
    assert!(b.turn_start < b.tool_call, "turn start must be quick");
    assert_eq!(b.validate(), Ok(()));
}

#[test]
fn the_serial_chain_plus_headroom_fits_the_per_tool_budget() {
    let b = Budgets::default();
    assert_eq!(b.tool_call, Duration::from_secs(7));
    assert_eq!(b.reread, Duration::from_secs(4));
    assert_eq!(b.headroom, Duration::from_secs(1));
    assert_eq!(b.per_tool, Duration::from_secs(12));
    assert!(b.tool_call + b.reread + b.headroom <= b.per_tool);
    // The edge's own view of the same numbers must agree.
    assert_eq!(tether_edge::EdgeConfig::default().budgets, b);
}

#[test]
fn negative_the_turn_start_retry_folded_in_would_not_fit() {
    let b = Budgets::default();
    assert!(
        b.chain_with_turn_start_retry() > b.per_tool,
        "if the turn-start read and its retry ever moved mid-turn, the chain would overflow 12 s"
    );
    // And the edge refuses such a configuration outright.
    let folded = Budgets { tool_call: b.tool_call + b.turn_start * 2 + b.turn_start_backoff, ..b };
    assert!(folded.validate().is_err());
}

#[test]
fn error_kind_strings_and_codes_are_pinned() {
    let pinned: &[(&str, i64)] = &[
        ("parse_error", -32700),
        ("invalid_request", -32600),
        ("method_not_found", -32601),
        ("invalid_params", -32602),
        ("channel_closed", -32000),
        ("timeout", -32001),
        ("tool_unavailable", -32003),
        ("invalid_name", -32004),
        ("invalid_arguments", -32005),
        ("session_not_found", -32006),
        ("payload_too_large", -32007),
        ("unauthenticated", -32008),
        ("forbidden", -32009),
        ("client_error", -32010),
        ("rate_limited", -32011),
        ("overloaded", -32012),
        ("approval_required", -32013),
        ("approval_declined", -32014),
        ("approval_expired", -32015),
        ("approval_mismatch", -32016),
        ("idempotency_conflict", -32017),
        ("internal", -32603),
    ];
    assert_eq!(ErrorKind::ALL.len(), pinned.len(), "a kind was added: pin it here and in docs/PROTOCOL.md");
    for (name, code) in pinned {
        let kind = ErrorKind::from_name(name).unwrap_or_else(|| panic!("{name} vanished"));
        assert_eq!(kind.code(), *code, "{name}");
    }
    let protocol = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/PROTOCOL.md")).unwrap();
    for (name, code) in pinned {
        assert!(
            protocol.contains(&format!("`{name}`")) && protocol.contains(&code.to_string()),
            "docs miss {name}"
        );
    }
}

#[test]
fn wire_field_names_are_pinned() {
    assert_eq!(meta::SEQ, "tether.dev/seq");
    assert_eq!(meta::CONTEXT, "tether.dev/context");
    assert_eq!(meta::CONCEPT, "tether.dev/concept");
    assert_eq!(meta::DEADLINE_MS, "tether.dev/deadline_ms");
    assert_eq!(meta::IDEMPOTENCY_KEY, "tether.dev/idempotency_key");
    assert_eq!(Leg::ToolCall.as_str(), "tool_call");
    assert_eq!(Leg::Reread.as_str(), "reread");
    assert_eq!(Leg::PerTool.as_str(), "per_tool");

    let params = CallParams {
        session: "s".into(),
        name: "client__x".into(),
        arguments: json!({}),
        meta: CallMeta {
            credential: Some("c".into()),
            budget_ms: Some(12_000),
            bound_seq: Some(3),
            idempotency_key: Some("k".into()),
            progress_token: None,
            approval: Some("ap-1".into()),
            approval_required: true,
            redelivered: false,
            task: None,
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            tracestate: None,
        },
    };
    assert_eq!(
        serde_json::to_value(&params).unwrap(),
        json!({"session":"s","name":"client__x","arguments":{},
               "_meta":{"credential":"c","budget_ms":12000,"bound_seq":3,"idempotency_key":"k",
                        "tether.dev/approval":"ap-1","tether.dev/approval_required":true,
                        "traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
    );
    assert_eq!(tether_contract::writes::meta::APPROVAL, "tether.dev/approval");
    assert_eq!(tether_contract::writes::method::APPROVE, "tether.dev/approve");
    let result = CallToolResult {
        content: vec![json!({"type":"text","text":"t"})],
        structured_content: Some(json!({"a":1})),
        is_error: true,
        meta: Some(serde_json::Map::from_iter([(meta::SEQ.to_owned(), Value::from(2))])),
    };
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        json!({"content":[{"type":"text","text":"t"}],"structuredContent":{"a":1},"isError":true,"_meta":{"tether.dev/seq":2}})
    );
    let resp: CallResponse =
        serde_json::from_value(json!({"result":{"content":[]},"seq":4,"manifest_stale":true})).unwrap();
    assert!(resp.manifest_stale);
    for (reason, name) in [
        (DropReason::DeclarationTooLarge, "declaration_too_large"),
        (DropReason::ManifestTooLarge, "manifest_too_large"),
        (DropReason::TooManyTools, "too_many_tools"),
        (DropReason::TooManyPages, "too_many_pages"),
        (DropReason::InvalidDeclaration, "invalid_declaration"),
        (DropReason::SchemaRejected, "schema_rejected"),
    ] {
        assert_eq!(serde_json::to_value(reason).unwrap(), Value::from(name));
        assert_eq!(reason.as_str(), name);
    }
    let m: Manifest =
        serde_json::from_value(common::fixture("frames/backend/tools_list.response.json")["result"].clone())
            .unwrap();
    assert_eq!(m.seq, 4);
}

#[test]
fn namespace_constants_agree_between_the_transform_and_the_check() {
    // Every name the edge's transform produces passes core's independent check.
    let cases = common::fixture("declarations/needs-slugging.json");
    let originals: Vec<String> =
        cases["cases"].as_array().unwrap().iter().map(|c| c[0].as_str().unwrap().to_owned()).collect();
    let table = tether_edge::names::NameTable::assign(originals.iter().map(String::as_str));
    for o in &originals {
        let name = table.namespaced(o).unwrap();
        assert_eq!(tether_core::check_name(name), Ok(()), "{o:?} → {name}");
    }
    for reserved in tether_contract::names::RESERVED {
        assert!(tether_core::check_name(reserved).is_err());
    }
}

/// The edge gates arguments and core gates them again; both compile a
/// declared schema the same way, so a tool the edge lists is one core can
/// check, and a schema one refuses the other refuses too.
#[test]
fn edge_and_core_compile_the_same_schemas() {
    let limits = tether_contract::SchemaLimits::default();
    let cases = [
        (json!({"type": "object"}), true),
        (
            json!({"type": "object", "properties": {"id": {"type": "string", "pattern": "^WO-[0-9]{3,6}$"}}}),
            true,
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=a)(a+)+$"}}}),
            false,
        ),
        (json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}}), false),
        (json!({"$schema": "http://127.0.0.1:9/meta.json", "type": "object"}), false),
        (json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}), false),
    ];
    for (schema, compiles) in cases {
        let edge = tether_edge::gate::compile(&schema).is_ok();
        let declaration = tether_contract::mcp::ToolDeclaration {
            name: "t".into(),
            title: None,
            description: None,
            input_schema: schema.clone(),
            output_schema: None,
            annotations: None,
            execution: None,
        };
        let core = tether_core::ToolSchemas::compile(&declaration, &limits).is_ok();
        assert_eq!((edge, core), (compiles, compiles), "{schema}");
    }
}
