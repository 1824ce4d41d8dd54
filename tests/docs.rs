//! The docs cite tests as evidence; a cited test that no longer exists, or a
//! name that is not a test at all, is a claim nobody checks. This fails when
//! a document cites one, when an invariant in ARCHITECTURE.md cites none, or
//! when a section of docs/OPERATIONS.md that makes claims cites none.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::collections::BTreeSet;
use std::path::Path;

/// Where test functions live.
const TEST_DIRS: &[&str] = &["tests", "crates", "fuzz/src"];

/// The documents that cite tests.
const DOCS: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "docs/SECURITY.md",
    "docs/OPERATIONS.md",
    "docs/PROTOCOL.md",
    "docs/PERFORMANCE.md",
];

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// Test names a text cites: backticked snake_case phrases of five words or
/// more (`file::name` allowed); metric names start with `tether_`.
fn cited(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.rsplit("::").next().unwrap_or(s))
        .filter(|s| {
            s.matches('_').count() >= 4
                && !s.starts_with("tether_")
                // Tool names (`phone__client__scan`) are not test names: those never hold `__`.
                && !s.contains("__")
                && s.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        })
        .collect()
}

fn test_names() -> BTreeSet<String> {
    common::source::test_fns(TEST_DIRS).into_iter().map(|t| t.name).collect()
}

#[test]
fn every_test_a_document_cites_is_a_test_that_exists() {
    let tests = test_names();
    assert!(tests.len() >= 100, "scanner sanity: {} test functions", tests.len());
    let mut total = 0;
    for doc in DOCS {
        for name in cited(&read(doc)) {
            total += 1;
            assert!(tests.contains(name), "{doc} cites {name}, which is not a test function");
        }
    }
    assert!(total >= 40, "parser sanity: {total} citations");
}

/// The bullets of one `## heading` section (a bullet runs until the next one).
fn bullets(text: &str, heading: &str) -> Vec<String> {
    let start = text.find(heading).unwrap_or_else(|| panic!("no section {heading}"));
    let body = &text[start + heading.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut out: Vec<String> = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("- ") {
            out.push(rest.to_owned());
        } else if let Some(last) = out.last_mut() {
            if line.starts_with("  ") {
                last.push(' ');
                last.push_str(line.trim());
            }
        }
    }
    out
}

#[test]
fn every_architecture_invariant_cites_a_test() {
    let text = read("ARCHITECTURE.md");
    let invariants = bullets(&text, "## Invariants\n");
    assert!(invariants.len() >= 10, "parser sanity: {invariants:?}");
    for invariant in invariants {
        assert!(
            !cited(&invariant).is_empty(),
            "ARCHITECTURE.md states an invariant no test is cited for: {invariant}"
        );
    }
}

#[test]
fn every_operations_section_that_makes_claims_cites_a_test() {
    let text = read("docs/OPERATIONS.md");
    let sections: Vec<&str> = text.split("\n## ").skip(1).collect();
    assert!(sections.len() >= 6, "parser sanity: {} sections", sections.len());
    for section in sections {
        let heading = section.lines().next().unwrap_or_default();
        assert!(!cited(section).is_empty(), "docs/OPERATIONS.md section {heading:?} cites no test");
    }
}

#[test]
fn a_cited_name_must_be_a_test_not_just_a_function() {
    // The scanner's own check: a helper named like a test is not one.
    let text = "fn not_a_test_but_named_like_one() {}\n#[test]\nfn a_real_test_with_a_long_name() {}";
    let found: Vec<_> = common::source::tests_in("f", text).into_iter().map(|t| t.name).collect();
    assert_eq!(found, ["a_real_test_with_a_long_name"]);
}
