//! The edge's reading of the shared declarations in `proto-fixtures/`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: a panic is a failed test

use serde_json::Value;
use tether_contract::backend::DropReason;
use tether_contract::mcp::ListToolsResult;
use tether_contract::Caps;
use tether_edge::caps::intake;
use tether_edge::gate::SchemaCache;
use tether_edge::names::NameTable;

fn fixture(path: &str) -> Value {
    let full = format!("{}/../../proto-fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{full}: {e}"))
}

#[test]
fn names_that_need_slugging_get_the_pinned_names() {
    let cases = fixture("declarations/needs-slugging.json");
    let cases: Vec<(String, String)> = serde_json::from_value(cases["cases"].clone()).unwrap();
    let table = NameTable::assign(cases.iter().map(|(o, _)| o.as_str()));
    for (original, want) in &cases {
        assert_eq!(table.namespaced(original), Some(want.as_str()), "{original:?}");
        assert_eq!(table.original(want), Some(original.as_str()));
    }
}

#[test]
fn the_realistic_device_survives_the_caps_whole() {
    let device = fixture("declarations/fieldkit-device.json");
    let list: ListToolsResult = serde_json::from_value(device["tools_list"].clone()).unwrap();
    let declared = list.tools.clone();
    let out = intake(list.tools, &Caps::default(), &SchemaCache::default());
    assert!(out.dropped.is_empty(), "{:?}", out.dropped);
    assert_eq!(out.tools.len(), 10);
    let expected = device["expected_namespaced"].as_object().unwrap();
    for (kept, original) in out.tools.iter().zip(&declared) {
        assert_eq!(Some(&Value::from(kept.name.as_str())), expected.get(&original.name));
        assert_eq!(kept.input_schema, original.input_schema, "schemas pass through untouched");
        assert_eq!(kept.output_schema, original.output_schema);
        assert_eq!(kept.annotations, original.annotations);
        assert_eq!(kept.description, original.description);
    }
}

#[test]
fn the_over_cap_manifest_is_cut_the_same_way_every_time() {
    let device = fixture("declarations/over-caps.json");
    let list: ListToolsResult = serde_json::from_value(device["tools_list"].clone()).unwrap();
    let caps = Caps::default();
    let first = intake(list.tools.clone(), &caps, &SchemaCache::default());
    for _ in 0..5 {
        let mut shuffled = list.tools.clone();
        shuffled.rotate_left(7);
        let again = intake(shuffled, &caps, &SchemaCache::default());
        assert_eq!(again.dropped, first.dropped);
        assert_eq!(again.table, first.table);
    }
    assert!(first.tools.len() <= caps.max_tools);
    assert!(first.bytes <= caps.manifest_bytes);
    assert!(first.descriptions_truncated > 0);
    let too_large: Vec<_> = first
        .dropped
        .iter()
        .filter(|d| d.reason == DropReason::DeclarationTooLarge)
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(too_large, ["bulk_tool_07"]);
    assert!(first
        .dropped
        .iter()
        .any(|d| matches!(d.reason, DropReason::TooManyTools | DropReason::ManifestTooLarge)));
    assert_eq!(first.tools.len() + first.dropped.len(), 40, "every declared tool is kept or reported");
}
