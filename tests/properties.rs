//! Property tests for the pure rules both sides rely on: every name the
//! edge's slugging produces passes core's independent check and is unique in
//! its manifest; the manifest seq rule keeps the newest whatever the arrival
//! order; the caps cut does not depend on declaration order.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

use std::collections::HashSet;

use proptest::prelude::*;
use serde_json::json;

use tether_contract::mcp::ToolDeclaration;
use tether_contract::names::RESERVED;
use tether_contract::Caps;
use tether_edge::caps::intake;
use tether_edge::gate::SchemaCache;
use tether_edge::manifest::{AppliedManifest, ManifestState, Swap};
use tether_edge::names::{slug, NameTable};
use unicode_normalization::UnicodeNormalization;

/// Declared names as devices write them: any Unicode, plus look-alikes that
/// collide after slugging (case, punctuation, prefixes, reserved names).
fn declared_name() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9 ._-]{0,80}",
        Just("context".to_owned()),
        Just("client__context".to_owned()),
        Just("refresh-tools".to_owned()),
        "client__[a-z_]{0,70}",
        "(scan|Scan|SCAN)[-_. ]?(barcode|Barcode)[0-9]?",
    ]
}

fn decl(name: &str, pad: usize) -> ToolDeclaration {
    ToolDeclaration {
        name: name.to_owned(),
        title: None,
        description: Some("x".repeat(pad)),
        input_schema: json!({"type": "object"}),
        output_schema: None,
        annotations: None,
        execution: None,
    }
}

/// Names with accented letters, the case where composition forms differ.
fn accented_name() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-zA-ZàáâãäåçèéêëìíîïñòóôõöùúûüýÀÉÑÖÜǅﬁ ._-]{0,40}"]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn one_name_gets_one_slug_however_it_was_composed(name in accented_name()) {
        let composed: String = name.nfc().collect();
        let decomposed: String = name.nfd().collect();
        prop_assert_eq!(slug(&composed), slug(&decomposed), "{:?}", name);
        prop_assert_eq!(slug(&name), slug(&composed));
        // As a whole manifest entry, too: the model-facing name is the same.
        let a = NameTable::assign([composed.as_str()]);
        let b = NameTable::assign([decomposed.as_str()]);
        prop_assert_eq!(a.namespaced(&composed), b.namespaced(&decomposed));
    }

    #[test]
    fn slugged_names_always_pass_cores_check_and_are_injective(
        names in proptest::collection::vec(declared_name(), 0..40)
    ) {
        let table = NameTable::assign(names.iter().map(String::as_str));
        let distinct: HashSet<&str> = names.iter().map(String::as_str).collect();
        prop_assert_eq!(table.len(), distinct.len());
        let mut seen = HashSet::new();
        for original in &distinct {
            let namespaced = table.namespaced(original).unwrap();
            prop_assert_eq!(tether_core::check_name(namespaced), Ok(()), "{:?} -> {}", original, namespaced);
            prop_assert!(!RESERVED.contains(&namespaced));
            prop_assert!(seen.insert(namespaced.to_owned()), "{} assigned twice", namespaced);
            prop_assert_eq!(table.original(namespaced), Some(*original), "routes back");
        }
    }

    #[test]
    fn the_seq_rule_keeps_the_newest_whatever_the_arrival_order(
        seqs in proptest::collection::vec(0u64..20, 1..30)
    ) {
        let state = ManifestState::default();
        let mut newest: Option<u64> = None;
        for seq in seqs {
            let candidate = AppliedManifest::new(
                seq,
                std::sync::Arc::new(intake(vec![decl("t", 1)], &Caps::default(), &SchemaCache::default())),
                None,
                tether_edge::manifest::Fingerprint::of("[t]", None),
            );
            let swap = state.offer(candidate);
            let accepted = newest.is_none_or(|n| seq > n);
            prop_assert_eq!(matches!(swap, Swap::Accepted { .. }), accepted, "seq {} over {:?}", seq, newest);
            if accepted {
                newest = Some(seq);
            }
            prop_assert_eq!(state.seq(), newest);
        }
    }

    #[test]
    fn the_caps_cut_does_not_depend_on_declaration_order(
        sizes in proptest::collection::vec(0usize..900, 1..50),
        rotation in 0usize..50,
    ) {
        let caps = Caps { manifest_bytes: 4_000, max_tools: 12, ..Caps::default() };
        let tools: Vec<_> = sizes.iter().enumerate().map(|(i, s)| decl(&format!("tool_{i}"), *s)).collect();
        let mut shuffled = tools.clone();
        shuffled.rotate_left(rotation % tools.len());
        shuffled.reverse();
        let (a, b) = (intake(tools, &caps, &SchemaCache::default()), intake(shuffled, &caps, &SchemaCache::default()));
        let dropped = |i: &tether_edge::caps::Intake| {
            let mut d: Vec<_> = i.dropped.iter().map(|d| (d.name.clone(), d.reason)).collect();
            d.sort_by(|x, y| x.0.cmp(&y.0));
            d
        };
        prop_assert_eq!(dropped(&a), dropped(&b));
        prop_assert!(a.bytes <= caps.manifest_bytes && a.tools.len() <= caps.max_tools);
    }
}
