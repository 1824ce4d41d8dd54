//! The docs cite tests as evidence; a cited test that no longer exists is a
//! claim nobody checks. This fails when docs/SECURITY.md names a missing one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

use std::path::Path;

fn rust_sources(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.ends_with("target") {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
}

#[test]
fn every_test_the_security_doc_cites_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/SECURITY.md")).unwrap();
    let mut code = String::new();
    rust_sources(&root.join("tests"), &mut code);
    rust_sources(&root.join("crates"), &mut code);
    // Test names are backticked snake_case phrases of five words or more (metric
    // names start with `tether_`, config keys are shorter).
    let cited: Vec<&str> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.rsplit("::").next().unwrap_or(s))
        .filter(|s| {
            s.matches('_').count() >= 4
                && !s.starts_with("tether_")
                && s.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        })
        .collect();
    assert!(cited.len() >= 10, "parser sanity: {cited:?}");
    for name in cited {
        assert!(
            code.contains(&format!("fn {name}(")),
            "docs/SECURITY.md cites {name}, which no test defines"
        );
    }
}
