//! A CI-sized soak: 200 faulty devices, mixed faults, a fixed seed, through the
//! real edge and the real core; the zero-loss invariants must hold and the
//! pending table must drain. Longer soaks run when `TETHER_SOAK_SECS` asks.
//!
//! And the ledger itself is tested: a soak that loses calls, or that never
//! got a fleet to call, must fail and say so.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use common::{keys, test_config, LiveEdge};
use tether_edge::EdgeConfig;
use tether_harness::soak::{run, Load, SoakConfig, DEFAULT_CALL_BUDGET, DEFAULT_FAULTS};

fn config(edge: &LiveEdge, devices: usize, secs: u64, faults: &str) -> SoakConfig {
    let day = Duration::from_secs(86_400);
    SoakConfig {
        edge: edge.url.clone(),
        device_edges: Vec::new(),
        client_tokens: (0..devices)
            .map(|i| keys().issue(&format!("soak-device-{i}"), "tether-client", day).unwrap())
            .collect(),
        backend_token: keys().issue("soak-driver", "tether-backend", day).unwrap(),
        devices,
        duration: Duration::from_secs(secs),
        stop: None,
        load: Load::Concurrency(32),
        faults: faults.into(),
        seed: 7,
        progress: false,
        call_budget: DEFAULT_CALL_BUDGET,
        fleet_deadline: Duration::from_secs(30),
        rolling: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulty_fleet_loses_duplicates_and_misroutes_nothing() {
    let secs: u64 = std::env::var("TETHER_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(15);
    let devices: usize =
        std::env::var("TETHER_SOAK_DEVICES").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    // The edge's default per-principal limit (64): a fleet of one principal
    // per device gets in whole, as a real fleet would.
    let limits = tether_edge::EdgeConfig::default().max_sessions_per_principal;
    let edge = LiveEdge::start_with(EdgeConfig { max_sessions_per_principal: limits, ..test_config() }).await;
    let report = run(config(&edge, devices, secs, DEFAULT_FAULTS)).await.unwrap();
    eprintln!("{}", report.table());
    assert_eq!(report.violations(), Vec::<String>::new());
    assert_eq!(report.devices_connected, devices as u64);
    assert!(report.calls_started > 100, "the soak drove too little load: {}", report.calls_started);
    assert!(report.outcomes.get("ok").copied().unwrap_or(0) > 0);
    assert!(
        report.outcomes.contains_key("timeout"),
        "silent and late faults must surface as the edge's timeouts"
    );
    assert_eq!(report.lost_at_core_budget, 0);
    assert!(report.late_injected > 0 && report.late_counted > 0);
    assert_eq!(edge.hub.calls_in_flight(), 0, "the pending table drained");
    let pending: usize = edge.hub.sessions().iter().map(|s| s.pending_calls()).sum();
    assert_eq!(pending, 0);
}

/// Core's budget set below the edge's 7 s leg: silent devices' calls end at
/// core's budget with no outcome from the edge, which is exactly a lost call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_counts_a_call_the_edge_never_answered_as_lost() {
    let edge = LiveEdge::start().await;
    let mut cfg = config(&edge, 4, 2, "answer=50,silent=50");
    cfg.call_budget = Duration::from_secs(1);
    cfg.load = Load::Concurrency(4);
    let report = run(cfg).await.unwrap();
    eprintln!("{}", report.table());
    assert!(report.lost_at_core_budget > 0, "silent calls ended at core's budget");
    assert_eq!(report.lost_calls, report.lost_at_core_budget);
    assert!(!report.outcomes.contains_key("timeout"), "core's expiry is not an edge outcome");
    let violations = report.violations();
    assert!(
        violations.iter().any(|v| v.contains("never got a terminal outcome from the edge")),
        "{violations:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_whose_devices_never_get_a_session_fails_and_says_why() {
    let edge = LiveEdge::start().await;
    let mut cfg = config(&edge, 3, 30, DEFAULT_FAULTS);
    // Signed with another key: the edge refuses every device at the upgrade.
    let stranger = tether_edge::auth::Keys::from_secret(b"another-secret-0123456789abcdefgh").unwrap();
    cfg.client_tokens =
        vec![stranger.issue("soak-device", "tether-client", Duration::from_secs(600)).unwrap()];
    cfg.fleet_deadline = Duration::from_secs(1);
    let started = tokio::time::Instant::now();
    let report = run(cfg).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(15), "no load is driven at a fleet that is not there");
    assert_eq!(report.devices_connected, 0);
    assert_eq!(report.calls_started, 0);
    let violations = report.violations();
    assert!(
        violations
            .iter()
            .any(|v| v.contains("only 0 of 3 simulated devices got a session") && v.contains("401")),
        "{violations:?}"
    );
    assert!(violations.iter().any(|v| v.contains("no calls were started")), "{violations:?}");
}
