//! `tether eval` on the project's golden set (`evals/`): the recall floors
//! find_tools' search must keep, recomputed here from the `--json` rankings
//! so the binary's own arithmetic is checked too, and the errors a bad turns
//! file gets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Floors, a little below what the search achieves (evals/README.md has the
/// table): overall recall@1 and recall@5, and recall@5 for every kind.
const FLOOR_ALL_AT_1: f64 = 0.80;
const FLOOR_ALL_AT_5: f64 = 0.93;
const FLOOR_KIND_AT_5: f64 = 0.90;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tether-eval-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn eval(catalogue: &Path, turns: &Path, json: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.arg("eval").arg("--catalogue").arg(catalogue).arg("--turns").arg(turns);
    if let Some(json) = json {
        cmd.arg("--json").arg(json);
    }
    cmd.output().unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Capped recall: expected names in the top k over min(k, expected).
fn recall(expected: &[Value], ranked: &[Value], k: usize) -> f64 {
    let top = &ranked[..ranked.len().min(k)];
    let hits = expected.iter().filter(|e| top.contains(e)).count();
    hits as f64 / expected.len().min(k) as f64
}

#[test]
fn tether_eval_keeps_the_golden_set_recall_floors() {
    let turns_path = root().join("evals/turns.jsonl");
    let json = scratch("ranked.jsonl");
    let out = eval(&root().join("evals/catalogue.json"), &turns_path, Some(&json));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tether eval failed: {}", String::from_utf8_lossy(&out.stderr));
    for needle in ["R@1", "R@5", "R@10", "MRR", "baseline", "worst misses", "prompt size", "p99"] {
        assert!(stdout.contains(needle), "the report lacks {needle}:\n{stdout}");
    }

    let turns = lines(&turns_path);
    let ranked: BTreeMap<String, Vec<Value>> = lines(&json)
        .into_iter()
        .map(|l| (l["id"].as_str().unwrap().to_owned(), l["ranked"].as_array().unwrap().clone()))
        .collect();
    assert_eq!(ranked.len(), turns.len(), "one --json line per turn");
    let mut by_kind: BTreeMap<String, (f64, f64, usize)> = BTreeMap::new();
    for turn in &turns {
        let expected = turn["expected"].as_array().unwrap();
        let got = &ranked[turn["id"].as_str().unwrap()];
        assert!(got.len() <= 10);
        for key in [turn["kind"].as_str().unwrap(), "all"] {
            let entry = by_kind.entry(key.to_owned()).or_default();
            entry.0 += recall(expected, got, 1);
            entry.1 += recall(expected, got, 5);
            entry.2 += 1;
        }
    }
    let mean = |kind: &str| {
        let (at1, at5, n) = by_kind[kind];
        (at1 / n as f64, at5 / n as f64)
    };
    let (all1, all5) = mean("all");
    assert!(all1 >= FLOOR_ALL_AT_1, "recall@1 {all1:.3} fell below {FLOOR_ALL_AT_1}");
    assert!(all5 >= FLOOR_ALL_AT_5, "recall@5 {all5:.3} fell below {FLOOR_ALL_AT_5}");
    for kind in ["direct", "paraphrase", "indirect", "disambiguation", "multi"] {
        let (_, at5) = mean(kind);
        assert!(at5 >= FLOOR_KIND_AT_5, "{kind}: recall@5 {at5:.3} fell below {FLOOR_KIND_AT_5}");
    }
    // The rankings carry the apps' original names, collisions included.
    assert!(ranked.values().flatten().any(|n| n == "set_volume"), "set_volume is ranked under its own name");
    assert!(!ranked.values().flatten().any(|n| n.as_str().unwrap().starts_with("client__")));
}

#[test]
fn tether_eval_names_the_line_of_a_bad_turn() {
    let catalogue = root().join("evals/catalogue.json");
    let cases = [
        (
            "{\"id\": \"a\", \"query\": \"x\", \"expected\": [\"play\"], \"kind\": \"direct\"}\nnot json\n",
            "2: not JSON",
        ),
        (
            "{\"id\": \"a\", \"query\": \"x\", \"expected\": [\"nope\"], \"kind\": \"direct\"}\n",
            "1: expected tool \"nope\"",
        ),
        (
            "\n{\"id\": \"a\", \"query\": \"\", \"expected\": [\"play\"], \"kind\": \"direct\"}\n",
            "2: field \"query\"",
        ),
        (
            "{\"id\": \"a\", \"query\": \"x\", \"expected\": [], \"kind\": \"direct\"}\n",
            "1: field \"expected\"",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let turns = scratch(&format!("bad-{i}.jsonl"));
        std::fs::write(&turns, text).unwrap();
        let out = eval(&catalogue, &turns, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} should fail");
        assert!(stderr.contains(want), "case {i}: wanted {want:?} in {stderr}");
    }
    let bad_catalogue = scratch("catalogue.json");
    std::fs::write(&bad_catalogue, "{\"tools\": [{\"description\": \"no name\"}]}").unwrap();
    let out = eval(&bad_catalogue, &root().join("evals/turns.jsonl"), None);
    assert!(String::from_utf8_lossy(&out.stderr).contains("tools[0] is not a tool declaration"));
}
