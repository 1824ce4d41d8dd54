//! A CI-sized soak: 200 faulty devices, mixed faults, a fixed seed, through the
//! real edge and the real core; the zero-loss invariants must hold and the
//! pending table must drain. Longer soaks run when `TETHER_SOAK_SECS` asks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use common::{keys, LiveEdge};
use tether_harness::soak::{run, Load, SoakConfig, DEFAULT_FAULTS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulty_fleet_loses_duplicates_and_misroutes_nothing() {
    let secs: u64 = std::env::var("TETHER_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(15);
    let devices: usize =
        std::env::var("TETHER_SOAK_DEVICES").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let edge = LiveEdge::start().await;
    let day = Duration::from_secs(86_400);
    let report = run(SoakConfig {
        edge: edge.url.clone(),
        client_token: keys().issue("soak-device", "tether-client", day).unwrap(),
        backend_token: keys().issue("soak-driver", "tether-backend", day).unwrap(),
        devices,
        duration: Duration::from_secs(secs),
        load: Load::Concurrency(32),
        faults: DEFAULT_FAULTS.into(),
        seed: 7,
        progress: false,
    })
    .await
    .unwrap();
    eprintln!("{}", report.table());
    assert_eq!(report.violations(), Vec::<String>::new());
    assert!(report.calls_started > 100, "the soak drove too little load: {}", report.calls_started);
    assert!(report.outcomes.get("ok").copied().unwrap_or(0) > 0);
    assert!(report.outcomes.contains_key("timeout"), "silent and late faults must surface as timeouts");
    assert!(report.late_injected > 0 && report.late_counted > 0);
    assert_eq!(edge.hub.calls_in_flight(), 0, "the pending table drained");
    let pending: usize = edge.hub.sessions().iter().map(|s| s.pending_calls()).sum();
    assert_eq!(pending, 0);
}
