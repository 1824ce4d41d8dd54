//! Architecture invariants, checked mechanically (ARCHITECTURE.md).
//!
//! - edge and core never depend on each other, directly or through anything
//!   (cargo's resolved graph); contract depends on neither, reaches no I/O
//!   crate and names no I/O in its source; the bridge reaches neither;
//! - nothing in core or contract names a client or its domain;
//! - the search behind find_tools is pure: no I/O, nothing fetched.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The resolved dependency graph from `cargo metadata`: package names and
/// edges with their kinds, as cargo itself resolved them.
struct Graph {
    names: HashMap<String, String>,
    /// id → (dependency id, whether any of its kinds is a normal or build edge).
    edges: HashMap<String, Vec<(String, bool)>>,
}

impl Graph {
    /// Loaded once per test binary (concurrent `cargo metadata` runs queue on cargo's lock).
    fn get() -> &'static Graph {
        static GRAPH: std::sync::OnceLock<Graph> = std::sync::OnceLock::new();
        GRAPH.get_or_init(Graph::load)
    }

    fn load() -> Graph {
        // This machine's platform only: what the build resolved, with nothing to download.
        let rustc = Command::new("rustc").arg("-vV").output().unwrap();
        let host = String::from_utf8_lossy(&rustc.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
            .unwrap();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", &host])
            .current_dir(root())
            .output()
            .unwrap();
        assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
        let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
        let names = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["id"].as_str().unwrap().to_owned(), p["name"].as_str().unwrap().to_owned()))
            .collect();
        let edges = meta["resolve"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|node| {
                let deps = node["deps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| {
                        let linked = d["dep_kinds"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|k| k["kind"].as_str() != Some("dev"));
                        (d["pkg"].as_str().unwrap().to_owned(), linked)
                    })
                    .collect();
                (node["id"].as_str().unwrap().to_owned(), deps)
            })
            .collect();
        Graph { names, edges }
    }

    fn id(&self, name: &str) -> &str {
        self.names.iter().find(|(_, n)| *n == name).map(|(id, _)| id.as_str()).unwrap()
    }

    /// Every package `name` reaches: its direct dependencies of any kind (dev
    /// included: a test must not link the other side either), then their
    /// normal and build dependencies, transitively.
    fn reach(&self, name: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<String> = self.edges[self.id(name)].iter().map(|(d, _)| d.clone()).collect();
        while let Some(id) = todo.pop() {
            if seen.insert(self.names[&id].clone()) {
                todo.extend(self.edges[&id].iter().filter(|(_, linked)| *linked).map(|(d, _)| d.clone()));
            }
        }
        seen
    }
}

#[test]
fn edge_and_core_never_depend_on_each_other() {
    let graph = Graph::get();
    let edge = graph.reach("tether-edge");
    let core = graph.reach("tether-core");
    assert!(edge.contains("tether-contract") && edge.contains("tokio"), "graph sanity: {edge:?}");
    assert!(!edge.contains("tether-core"), "edge reaches core");
    assert!(!core.contains("tether-edge"), "core reaches edge");
    assert!(
        !graph.reach("tether-harness").contains("tether-edge"),
        "the harness must reach the edge only over the wire"
    );
    let example = graph.reach("tether-example-orders");
    assert!(example.contains("tether-core"), "graph sanity: {example:?}");
    assert!(!example.contains("tether-edge"), "a server-side source links core, never the edge");
    assert!(!core.iter().any(|d| d.starts_with("tether-example")), "core must not know its example sources");
}

#[test]
fn the_pending_table_is_shared_by_edge_and_core_and_depends_on_neither() {
    let graph = Graph::get();
    let rpc = graph.reach("tether-rpc");
    assert!(rpc.contains("tokio"), "graph sanity: {rpc:?}");
    assert!(
        !rpc.iter().any(|d| d.starts_with("tether-")),
        "tether-rpc is a leaf: it pairs answers with waiters and knows no wire types ({rpc:?})"
    );
    for user in ["tether-edge", "tether-core"] {
        assert!(graph.reach(user).contains("tether-rpc"), "{user} writes its own pending table again");
    }
    assert!(!graph.reach("tether-contract").contains("tether-rpc"), "contract stays free of I/O");
}

#[test]
fn configuration_is_resolved_outside_the_edge_and_core() {
    let graph = Graph::get();
    let config = graph.reach("tether-config");
    assert!(config.contains("toml") && config.contains("tether-edge"), "graph sanity: {config:?}");
    assert!(
        !graph.reach("tether-edge").contains("toml"),
        "the edge runs on a checked EdgeConfig; it parses no file"
    );
    for side in ["tether-edge", "tether-core", "tether-gateway"] {
        assert!(
            !graph.reach(side).contains("tether-config"),
            "{side} must not reach the configuration crate"
        );
    }
}

#[test]
fn the_bridge_reaches_the_edge_only_over_the_wire() {
    let bridge = Graph::get().reach("tether-bridge");
    assert!(bridge.contains("tether-contract") && bridge.contains("rmcp"), "graph sanity: {bridge:?}");
    assert!(!bridge.contains("tether-edge"), "the bridge must reach the edge only over the wire");
    assert!(!bridge.contains("tether-core"), "the bridge is a device, not a backend: it must not link core");
}

#[test]
fn the_mcp_gateway_is_a_backend_that_reaches_the_edge_only_over_the_link() {
    let gateway = Graph::get().reach("tether-gateway");
    assert!(gateway.contains("tether-core") && gateway.contains("rmcp"), "graph sanity: {gateway:?}");
    assert!(!gateway.contains("tether-edge"), "the gateway must reach the edge only over the backend link");
    assert!(!Graph::get().reach("tether-edge").contains("rmcp"), "MCP server code stays out of the edge");
}

#[test]
fn the_cluster_is_a_router_beside_the_edge_and_nats_stays_out_of_edge_and_core() {
    let graph = Graph::get();
    let cluster = graph.reach("tether-cluster");
    assert!(cluster.contains("tether-edge") && cluster.contains("async-nats"), "graph sanity: {cluster:?}");
    assert!(!cluster.contains("tether-core"), "the cluster routes for the edge; it never links core");
    for crate_name in ["tether-edge", "tether-core", "tether-contract"] {
        assert!(!graph.reach(crate_name).contains("async-nats"), "{crate_name} reaches async-nats");
    }
}

#[test]
fn the_search_crate_is_pure_and_offline() {
    let search = Graph::get().reach("tether-search");
    assert!(
        search.contains("tether-contract") && search.contains("rust-stemmers"),
        "graph sanity: {search:?}"
    );
    let io = ["tether-edge", "tether-core", "tokio", "mio", "socket2", "hyper", "reqwest", "futures-util"];
    for forbidden in io {
        assert!(!search.contains(forbidden), "tether-search reaches {forbidden}");
    }
    let mut files = Vec::new();
    sources(&root().join("crates/search/src"), &mut files);
    assert!(!files.is_empty());
    for (path, text) in &files {
        for word in ["std::fs", "std::net", "std::io", "std::process", "std::env", "tokio"] {
            assert!(!text.contains(word), "{path} uses {word}: the search reads and fetches nothing");
        }
    }
    // One table is compiled in, the word vectors, and it stays small: a
    // model that needs a download or a runtime does not belong here.
    let embedded: Vec<&str> = files
        .iter()
        .flat_map(|(_, text)| text.match_indices("include_bytes!(").map(|(at, _)| &text[at..]))
        .map(|rest| rest.split(')').next().unwrap_or(rest))
        .collect();
    assert_eq!(embedded, [r#"include_bytes!("../data/glove-20k-50d.tvec""#], "what the search compiles in");
    let table = std::fs::metadata(root().join("crates/search/data/glove-20k-50d.tvec")).unwrap().len();
    assert!(table <= 1_500_000, "the word-vector table is {table} bytes");
}

#[test]
fn contract_is_types_and_rules_only() {
    let contract = Graph::get().reach("tether-contract");
    assert!(contract.contains("serde_json"), "graph sanity: {contract:?}");
    let io =
        ["tether-edge", "tether-core", "tokio", "mio", "socket2", "tungstenite", "futures-util", "hyper"];
    for forbidden in io {
        assert!(!contract.contains(forbidden), "contract reaches {forbidden}");
    }
    // And its own source names no I/O.
    let mut files = Vec::new();
    sources(&root().join("crates/contract/src"), &mut files);
    for (path, text) in &files {
        for word in ["std::fs", "std::net", "std::io", "std::process", "std::thread", "std::env", "tokio"] {
            assert!(!text.contains(word), "{path} uses {word}");
        }
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
        // the TypeScript SDK's browser example and its kind of client
        "browser",
        "chromium",
        "shopper",
        "cart",
        "checkout",
        "outdoor",
        // the bridge and the MCP servers it runs, and the revision tests' devices
        "bridge",
        "python",
        "server-everything",
        "shelf",
        "warehouse",
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

#[test]
fn logic_reads_only_the_runtimes_clock() {
    // clippy (run by .ci/run) refuses the type; this pins that the ban is configured
    // and that no crate's source reaches for the wall clock under another path.
    let clippy = std::fs::read_to_string(root().join("clippy.toml")).unwrap();
    assert!(clippy.contains("path = \"std::time::Instant\""), "clippy.toml must ban std::time::Instant");
    let mut files = Vec::new();
    for krate in ["contract", "edge", "core", "harness", "example-orders", "bridge"] {
        sources(&root().join("crates").join(krate).join("src"), &mut files);
    }
    sources(&root().join("src"), &mut files);
    assert!(files.len() >= 20, "scanned too few files: {}", files.len());
    for (path, text) in &files {
        let wall = text.matches("time::instant").count() - text.matches("tokio::time::instant").count();
        assert_eq!(wall, 0, "{path} reads the wall clock");
    }
}
