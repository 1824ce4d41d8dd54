//! Architecture invariants, checked mechanically (ARCHITECTURE.md).
//!
//! - edge and core never depend on each other; contract depends on neither
//!   and does no I/O;
//! - nothing in core or contract names a client or its domain.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `[dependencies]`, `[dev-dependencies]` and `[build-dependencies]` names of a crate.
fn deps(krate: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("crates").join(krate).join("Cargo.toml")).unwrap();
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.ends_with("dependencies]");
            continue;
        }
        if in_deps {
            if let Some((name, _)) = line.split_once(['=', '.']) {
                if !name.trim().is_empty() && !name.starts_with('#') {
                    out.push(name.trim().to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn edge_and_core_never_depend_on_each_other() {
    let edge = deps("edge");
    let core = deps("core");
    assert!(edge.contains(&"tether-contract".to_owned()), "parser sanity: {edge:?}");
    assert!(!edge.iter().any(|d| d == "tether-core"), "edge depends on core: {edge:?}");
    assert!(!core.iter().any(|d| d == "tether-edge"), "core depends on edge: {core:?}");
    let harness = deps("harness");
    assert!(
        !harness.iter().any(|d| d == "tether-edge"),
        "the harness must reach the edge only over the wire"
    );
    let example = deps("example-orders");
    assert!(example.contains(&"tether-core".to_owned()), "parser sanity: {example:?}");
    assert!(!example.iter().any(|d| d == "tether-edge"), "a server-side source links core, never the edge");
    assert!(!core.iter().any(|d| d.starts_with("tether-example")), "core must not know its example sources");
}

#[test]
fn contract_is_types_and_rules_only() {
    let contract = deps("contract");
    for forbidden in ["tether-edge", "tether-core", "tokio", "tokio-tungstenite", "futures", "dashmap"] {
        assert!(!contract.iter().any(|d| d == forbidden), "contract depends on {forbidden}");
    }
}

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((path.display().to_string(), std::fs::read_to_string(&path).unwrap().to_lowercase()));
        }
    }
}

#[test]
fn core_and_contract_name_no_client_domain() {
    // Words from the client fixtures' domains; add a client, add its nouns here.
    let domain = [
        "fieldkit",
        "barcode",
        "technician",
        "work order",
        "work_order",
        "workorder",
        "inspection form",
        "asset",
        "camera",
        "printer",
        "screen",
        "mira",
        // the example server-side source's domain
        "get_order",
        "order_id",
        "a-104",
        "ka3-orders",
    ];
    let mut files = Vec::new();
    for krate in ["core", "contract"] {
        sources(&root().join("crates").join(krate).join("src"), &mut files);
    }
    assert!(files.len() >= 5, "scanned too few files: {}", files.len());
    for (path, text) in &files {
        for word in domain {
            assert!(!text.contains(word), "{path} names client domain word {word:?}");
        }
    }
}
