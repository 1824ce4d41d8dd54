//! `tether eval`: measures tool selection on a catalogue and a set of turns.
//!
//! The catalogue (a `tools/list` result) is declared as a device's tools
//! would be: through the edge's intake, so names are namespaced exactly as
//! the edge does (`_2` suffixes on collision included) and descriptions are
//! cut to the edge's cap. The per-device count and byte caps are lifted: the
//! catalogue stands for everything a caller reaches across many devices.
//! Each turn's `query` is ranked by the index `find_tools` uses
//! (`tether_search::Index`) and by the word-overlap baseline it replaced;
//! the report gives recall@1/5/10 and MRR, overall and per kind, the worst
//! misses, what each binding costs in prompt bytes, and the search's latency
//! at 1,000 tools. `--json` writes each turn's ranking under original names.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use tether_contract::mcp::ToolDeclaration;
use tether_contract::Caps;
use tether_core::discovery::{self, FIND_TOOLS_LIMIT};
use tether_edge::caps::intake;
use tether_edge::names::NameTable;
use tether_search::baseline::word_overlap;
use tether_search::Index;

/// The cut-offs recall is reported at.
const KS: [usize; 3] = [1, 5, 10];
/// How deep each ranking goes (recall@10 and MRR@10 need ten).
const DEPTH: usize = 10;
/// The kinds of turn the golden set defines, reported in this order.
const KINDS: [&str; 5] = ["direct", "paraphrase", "indirect", "disambiguation", "multi"];
/// Catalogue size the latency line is measured at.
const LATENCY_TOOLS: usize = 1_000;
/// Fewest searches timed for the latency line.
const LATENCY_SAMPLES: usize = 5_000;
/// Bytes per token for the prompt-size estimate (a rough rule for English and JSON).
const BYTES_PER_TOKEN: usize = 4;

/// `tether eval` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct EvalArgs {
    /// The catalogue: a `tools/list` result, `{"tools": [...]}`, with the apps' original names.
    #[arg(long)]
    catalogue: PathBuf,
    /// The turns: one JSON object a line, `{"id", "utterance", "query", "expected", "kind"}`.
    #[arg(long)]
    turns: PathBuf,
    /// Write each turn's ranking here, one `{"id", "ranked": [original names]}` a line.
    #[arg(long)]
    json: Option<PathBuf>,
    /// How many of the worst misses to list.
    #[arg(long, default_value_t = 15)]
    misses: usize,
}

/// Why an eval could not run: which file, and where in it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EvalError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The catalogue is not JSON.
    #[error("{path}: not JSON: {source}")]
    CatalogueJson { path: PathBuf, source: serde_json::Error },
    /// The catalogue is JSON but not `{"tools": [...]}`.
    #[error("{path}: expected a tools/list result, an object with a \"tools\" array")]
    CatalogueShape { path: PathBuf },
    /// The catalogue declares no tools.
    #[error("{path}: the \"tools\" array is empty")]
    NoTools { path: PathBuf },
    /// One declaration is not a tool declaration.
    #[error("{path}: tools[{index}] is not a tool declaration: {source}")]
    Declaration { path: PathBuf, index: usize, source: serde_json::Error },
    /// Two declarations share a name.
    #[error("{path}: tools[{index}]: the name {name:?} is declared twice")]
    DuplicateTool { path: PathBuf, index: usize, name: String },
    /// One line of the turns file is wrong.
    #[error("{path}:{line}: {problem}")]
    Turn { path: PathBuf, line: usize, problem: TurnProblem },
    /// The turns file holds no turns.
    #[error("{path}: no turns")]
    NoTurns { path: PathBuf },
}

/// What is wrong with one turn.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TurnProblem {
    /// The line is not JSON.
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    /// The line is JSON but not an object.
    #[error("not a JSON object")]
    NotObject,
    /// A required field is missing or not a non-empty string.
    #[error("field {0:?} must be a non-empty string")]
    NotString(&'static str),
    /// `expected` is not a non-empty array of strings.
    #[error("field \"expected\" must be a non-empty array of tool names")]
    Expected,
    /// `expected` names a tool the catalogue does not declare.
    #[error("expected tool {0:?} is not in the catalogue")]
    UnknownTool(String),
    /// Two turns share an id.
    #[error("id {0:?} is used twice")]
    DuplicateId(String),
}

/// One turn of the golden set.
#[derive(Debug, Clone)]
struct Turn {
    id: String,
    query: String,
    expected: Vec<String>,
    kind: String,
}

/// Runs `tether eval` and prints its report.
pub(crate) fn run(args: &EvalArgs) -> Result<(), EvalError> {
    let declared = load_catalogue(&args.catalogue)?;
    let originals: HashSet<String> = declared.iter().map(|t| t.name.clone()).collect();
    let turns = load_turns(&args.turns, &originals)?;
    let declared_count = declared.len();

    // Declared as a device would be: the edge's intake, without the per-device count and byte caps.
    let caps = Caps { max_tools: usize::MAX, manifest_bytes: usize::MAX, ..Caps::default() };
    let manifest = intake(declared, &caps, &tether_edge::gate::SchemaCache::default());
    let tools = manifest.tools;
    let table = manifest.table;
    let original = |i: usize| table.original(&tools[i].name).unwrap_or(&tools[i].name).to_owned();

    let index = Index::build(&tools);
    let searched: Vec<Vec<String>> = turns
        .iter()
        .map(|t| index.search(&t.query, DEPTH).into_iter().map(|h| original(h.index)).collect())
        .collect();
    let baseline: Vec<Vec<String>> = turns
        .iter()
        .map(|t| word_overlap(&tools, &t.query, DEPTH).into_iter().map(original).collect())
        .collect();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "tether eval: {} turns over {} tools, declared as a device's and namespaced as the edge does",
        turns.len(),
        tools.len()
    );
    for drop in &manifest.dropped {
        let _ = writeln!(out, "  the edge's intake dropped {} ({})", drop.name, drop.reason.as_str());
    }
    if manifest.descriptions_truncated > 0 {
        let _ = writeln!(out, "  {} descriptions cut to the edge's cap", manifest.descriptions_truncated);
    }
    let _ = writeln!(out, "  renamed on collision: {}", collisions(&table, declared_count));
    out.push('\n');
    out.push_str(&report(&turns, &searched, &baseline));
    out.push('\n');
    out.push_str(&worst_misses(&turns, &searched, args.misses));
    out.push('\n');
    out.push_str(&prompt_sizes(&tools, &index, &turns));
    out.push('\n');
    out.push_str(&latency(&tools, &turns));
    print!("{out}");

    if let Some(path) = &args.json {
        let mut lines = String::new();
        for (turn, ranked) in turns.iter().zip(&searched) {
            lines.push_str(&json!({"id": turn.id, "ranked": ranked}).to_string());
            lines.push('\n');
        }
        std::fs::write(path, lines).map_err(|source| EvalError::Io { path: path.clone(), source })?;
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, EvalError> {
    std::fs::read_to_string(path).map_err(|source| EvalError::Io { path: path.to_owned(), source })
}

/// Reads a `tools/list` result.
fn load_catalogue(path: &Path) -> Result<Vec<ToolDeclaration>, EvalError> {
    let text = read(path)?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|source| EvalError::CatalogueJson { path: path.to_owned(), source })?;
    let Some(list) = value.get("tools").and_then(Value::as_array) else {
        return Err(EvalError::CatalogueShape { path: path.to_owned() });
    };
    if list.is_empty() {
        return Err(EvalError::NoTools { path: path.to_owned() });
    }
    let mut seen = HashSet::new();
    let mut tools = Vec::with_capacity(list.len());
    for (index, entry) in list.iter().enumerate() {
        let tool: ToolDeclaration = serde_json::from_value(entry.clone())
            .map_err(|source| EvalError::Declaration { path: path.to_owned(), index, source })?;
        if !seen.insert(tool.name.clone()) {
            return Err(EvalError::DuplicateTool { path: path.to_owned(), index, name: tool.name });
        }
        tools.push(tool);
    }
    Ok(tools)
}

/// Reads the turns, one JSON object a line (blank lines skipped).
fn load_turns(path: &Path, catalogue: &HashSet<String>) -> Result<Vec<Turn>, EvalError> {
    let text = read(path)?;
    let mut turns = Vec::new();
    let mut ids = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let wrong = |problem| EvalError::Turn { path: path.to_owned(), line: n + 1, problem };
        let turn = parse_turn(line, catalogue).map_err(wrong)?;
        if !ids.insert(turn.id.clone()) {
            return Err(wrong(TurnProblem::DuplicateId(turn.id)));
        }
        turns.push(turn);
    }
    if turns.is_empty() {
        return Err(EvalError::NoTurns { path: path.to_owned() });
    }
    Ok(turns)
}

fn parse_turn(line: &str, catalogue: &HashSet<String>) -> Result<Turn, TurnProblem> {
    let value: Value = serde_json::from_str(line).map_err(TurnProblem::NotJson)?;
    let object = value.as_object().ok_or(TurnProblem::NotObject)?;
    let text = |key: &'static str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned)
            .ok_or(TurnProblem::NotString(key))
    };
    let expected: Vec<String> = object
        .get("expected")
        .and_then(Value::as_array)
        .filter(|list| !list.is_empty())
        .and_then(|list| list.iter().map(|v| v.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>())
        .ok_or(TurnProblem::Expected)?;
    if let Some(unknown) = expected.iter().find(|name| !catalogue.contains(*name)) {
        return Err(TurnProblem::UnknownTool(unknown.clone()));
    }
    Ok(Turn { id: text("id")?, query: text("query")?, expected, kind: text("kind")? })
}

/// Names the edge had to suffix because their slugs collided.
fn collisions(table: &NameTable, declared: usize) -> String {
    let renamed: Vec<String> = table
        .pairs()
        .into_iter()
        .filter(|(namespaced, original)| {
            let natural = format!("{}{}", tether_contract::names::PREFIX, tether_edge::names::slug(original));
            *namespaced != natural
        })
        .map(|(namespaced, original)| format!("{original} → {namespaced}"))
        .collect();
    if renamed.is_empty() {
        format!("none of {declared}")
    } else {
        renamed.join(", ")
    }
}

/// One turn's scores: capped recall at each of [`KS`] and reciprocal rank.
#[derive(Debug, Clone, Copy, Default)]
struct Scores {
    recall: [f64; 3],
    rr: f64,
}

/// Recall@k is capped (hits in the top k over min(k, expected)), so a turn
/// that needs three tools can still score 1 at k = 1; the reciprocal rank is
/// that of the first expected tool in the top [`DEPTH`].
fn score(turn: &Turn, ranked: &[String]) -> Scores {
    let mut scores = Scores::default();
    for (slot, k) in KS.iter().enumerate() {
        let top = &ranked[..ranked.len().min(*k)];
        let hits = turn.expected.iter().filter(|e| top.contains(e)).count();
        scores.recall[slot] = hits as f64 / turn.expected.len().min(*k) as f64;
    }
    scores.rr = ranked
        .iter()
        .position(|name| turn.expected.contains(name))
        .map_or(0.0, |rank| 1.0 / (rank + 1) as f64);
    scores
}

/// Mean scores per kind, in report order, then `all`.
fn by_kind(turns: &[Turn], ranked: &[Vec<String>]) -> Vec<(String, usize, Scores)> {
    let mut sums: BTreeMap<&str, (usize, Scores)> = BTreeMap::new();
    for (turn, ranked) in turns.iter().zip(ranked) {
        let s = score(turn, ranked);
        for key in [turn.kind.as_str(), "all"] {
            let (n, sum) = sums.entry(key).or_default();
            *n += 1;
            for i in 0..KS.len() {
                sum.recall[i] += s.recall[i];
            }
            sum.rr += s.rr;
        }
    }
    let mut order: Vec<&str> = KINDS.iter().copied().filter(|k| sums.contains_key(k)).collect();
    order.extend(sums.keys().copied().filter(|k| !KINDS.contains(k) && *k != "all"));
    order.push("all");
    order
        .into_iter()
        .filter_map(|kind| {
            let (n, sum) = sums.get(kind)?;
            let mean = |x: f64| x / *n as f64;
            let scores = Scores { recall: sum.recall.map(mean), rr: mean(sum.rr) };
            Some((kind.to_owned(), *n, scores))
        })
        .collect()
}

/// The recall/MRR table, search beside baseline.
fn report(turns: &[Turn], searched: &[Vec<String>], baseline: &[Vec<String>]) -> String {
    let new = by_kind(turns, searched);
    let old = by_kind(turns, baseline);
    let mut out = String::new();
    let _ =
        writeln!(out, "{:<15} {:>5} | {:^27} | {:^27}", "", "", "search (BM25F)", "baseline (word overlap)");
    let _ = writeln!(
        out,
        "{:<15} {:>5} | {:>6}{:>7}{:>7}{:>7} | {:>6}{:>7}{:>7}{:>7}",
        "kind", "turns", "R@1", "R@5", "R@10", "MRR", "R@1", "R@5", "R@10", "MRR"
    );
    for ((kind, n, s), (_, _, b)) in new.iter().zip(&old) {
        let _ = writeln!(
            out,
            "{kind:<15} {n:>5} | {:>6.3}{:>7.3}{:>7.3}{:>7.3} | {:>6.3}{:>7.3}{:>7.3}{:>7.3}",
            s.recall[0], s.recall[1], s.recall[2], s.rr, b.recall[0], b.recall[1], b.recall[2], b.rr
        );
    }
    let _ = writeln!(
        out,
        "R@k: expected tools in the top k over min(k, expected), per turn, averaged; MRR over the top {DEPTH}."
    );
    out
}

/// The turns whose expected tools the search ranks lowest.
fn worst_misses(turns: &[Turn], searched: &[Vec<String>], limit: usize) -> String {
    let mut misses: Vec<(Scores, &Turn, &Vec<String>)> = turns
        .iter()
        .zip(searched)
        .map(|(t, r)| (score(t, r), t, r))
        .filter(|(s, _, _)| s.recall[1] < 1.0)
        .collect();
    misses.sort_by(|a, b| {
        a.0.recall[1]
            .total_cmp(&b.0.recall[1])
            .then(a.0.rr.total_cmp(&b.0.rr))
            .then_with(|| a.1.id.cmp(&b.1.id))
    });
    let mut out = format!("worst misses ({} turns miss an expected tool in the top 5):\n", misses.len());
    for (_, turn, ranked) in misses.into_iter().take(limit) {
        let expected: Vec<String> = turn
            .expected
            .iter()
            .map(|e| match ranked.iter().position(|r| r == e) {
                Some(rank) => format!("{e} (#{})", rank + 1),
                None => format!("{e} (not in top {DEPTH})"),
            })
            .collect();
        let got: Vec<&str> = ranked.iter().take(3).map(String::as_str).collect();
        let _ = writeln!(
            out,
            "  {} {:<14} {:?}: wants {}; top 3: {}",
            turn.id,
            turn.kind,
            turn.query,
            expected.join(", "),
            if got.is_empty() { "nothing".to_owned() } else { got.join(", ") }
        );
    }
    out
}

/// Serialized size of a JSON value, as it would sit in a prompt.
fn bytes_of(value: &Value) -> usize {
    value.to_string().len()
}

fn sized(bytes: usize) -> String {
    format!("{bytes:>7} B ≈ {:>6} tokens", bytes / BYTES_PER_TOKEN)
}

fn percentile(sorted: &[usize], p: f64) -> usize {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or(0)
}

/// What each binding puts in the prompt: direct lists every declaration;
/// discovery lists `find_tools`, then a result and the tools it found.
fn prompt_sizes(tools: &[ToolDeclaration], index: &Index, turns: &[Turn]) -> String {
    let direct = bytes_of(&json!(tools));
    let mean = direct / tools.len().max(1);
    let caps = Caps::default();
    let device = (mean * caps.max_tools).min(caps.manifest_bytes);
    let declaration = bytes_of(&json!(discovery::declaration()));
    let mut results = Vec::with_capacity(turns.len());
    let mut listed = Vec::with_capacity(turns.len());
    for turn in turns {
        let found: Vec<ToolDeclaration> =
            index.search(&turn.query, FIND_TOOLS_LIMIT).into_iter().map(|h| tools[h.index].clone()).collect();
        results.push(bytes_of(&json!(discovery::result(&found))));
        listed.push(bytes_of(&json!(found)));
    }
    results.sort_unstable();
    listed.sort_unstable();
    let (result, found) = (percentile(&results, 0.5), percentile(&listed, 0.5));
    let rows = [
        (format!("direct binding: the whole catalogue, {} tools", tools.len()), direct),
        (format!("direct binding: one device at the default caps ({} × {mean} B)", caps.max_tools), device),
        ("discovery: the find_tools declaration".to_owned(), declaration),
        (format!("discovery: one find_tools result (median; p90 {} B)", percentile(&results, 0.9)), result),
        (format!("discovery: its {FIND_TOOLS_LIMIT} found tools, then listed (median)"), found),
        (
            "discovery: one turn with one find_tools (the three above)".to_owned(),
            declaration + result + found,
        ),
    ];
    let mut out = format!("prompt size (bytes of JSON; ≈ tokens at {BYTES_PER_TOKEN} bytes a token):\n");
    for (label, bytes) in rows {
        let _ = writeln!(out, "  {label:<62}{}", sized(bytes));
    }
    out
}

/// The search's cost at [`LATENCY_TOOLS`] tools: the catalogue repeated
/// under fresh names, every turn's query timed until enough samples.
fn latency(tools: &[ToolDeclaration], turns: &[Turn]) -> String {
    let big: Vec<ToolDeclaration> = tools
        .iter()
        .cycle()
        .take(LATENCY_TOOLS.max(tools.len()))
        .enumerate()
        .map(|(i, t)| ToolDeclaration { name: format!("{}_{}", t.name, i / tools.len().max(1)), ..t.clone() })
        .collect();
    let started = tokio::time::Instant::now();
    let index = Index::build(&big);
    let build = started.elapsed();
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES + turns.len());
    while samples.len() < LATENCY_SAMPLES {
        for turn in turns {
            let started = tokio::time::Instant::now();
            let hits = index.search(&turn.query, FIND_TOOLS_LIMIT);
            samples.push(started.elapsed());
            std::hint::black_box(hits);
        }
    }
    samples.sort_unstable();
    let micros = |p: f64| {
        let rank = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len());
        samples[rank - 1].as_secs_f64() * 1e6
    };
    let build_name = if cfg!(debug_assertions) { "debug build" } else { "release build" };
    format!(
        "search at {} tools ({build_name}): index built in {:.1} ms; one query p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs ({} queries)\n",
        big.len(),
        build.as_secs_f64() * 1e3,
        micros(0.5),
        micros(0.99),
        micros(1.0),
        samples.len()
    )
}
