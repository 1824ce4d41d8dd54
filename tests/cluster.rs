//! Edges joined over NATS, as an operator runs them: a real `nats-server`
//! and `tether serve --nats` processes on loopback, a simulated device on one
//! edge and a backend on another. Every process is killed on drop.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;

use common::http_get as get;
use common::processes::{NatsServer, ServeProc};
use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::{ErrorKind, WireError};
use tether_core::{BackendLink, Notification};
use tether_harness::device::tool;
use tether_harness::{Behavior, DeviceSpec, SimDevice, SimHandle};

const BUDGET: Duration = Duration::from_secs(12);
const SHORT: Duration = Duration::from_secs(5);

fn call(session: &str, user: &str) -> CallParams {
    let meta = CallMeta { credential: Some(common::user(user)), ..CallMeta::default() };
    CallParams { session: session.into(), name: "client__a".into(), arguments: json!({"n": 1}), meta }
}

/// Edges `a`, `b` and `c` on `nats`.
fn three_edges(nats: &NatsServer) -> (ServeProc, ServeProc, ServeProc) {
    (
        ServeProc::start(&nats.url(), "a"),
        ServeProc::start(&nats.url(), "b"),
        ServeProc::start(&nats.url(), "c"),
    )
}

async fn backend_on(edge: &ServeProc) -> BackendLink {
    let token = common::keys().issue("agent", "tether-backend", Duration::from_secs(600)).unwrap();
    BackendLink::connect(&edge.url, &token).await.unwrap()
}

async fn device_on(edge: &ServeProc, user: &str, spec: DeviceSpec) -> (SimHandle, String) {
    let mut dev = SimDevice::connect(&edge.url, &common::user(user), spec).await.unwrap();
    let session = dev.ready().await.expect("the device got a session");
    (dev, session)
}

/// Polls `check` until it holds, failing the test past `limit`.
async fn until<F: Future<Output = bool>>(limit: Duration, what: &str, mut check: impl FnMut() -> F) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A plain-HTTP GET of the edge's probes and metrics.
async fn readyz(edge: &ServeProc) -> String {
    match get(format!("{}/readyz", edge.http())).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => format!("unreachable: {e}"),
    }
}

async fn metric(edge: &ServeProc, name: &str) -> u64 {
    let text = get(format!("{}/metrics", edge.http())).await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in /metrics"))
}

/// A cluster counter of `edge` (`tether_cluster_{name}_total`).
async fn cluster(edge: &ServeProc, name: &str) -> u64 {
    metric(edge, &format!("tether_cluster_{name}_total")).await
}

/// Waits until every edge is connected to NATS (ready, not degraded).
async fn joined(edges: &[&ServeProc]) {
    for edge in edges {
        until(SHORT, "the edge joins the cluster", || async { readyz(edge).await == "ready\n" }).await;
    }
}

async fn next_opened(events: &mut mpsc::Receiver<Notification>, session: &str) {
    let wait = async {
        while let Some(n) = events.recv().await {
            if matches!(&n, Notification::SessionOpened(o) if o.session == session) {
                return;
            }
        }
        panic!("notifications ended");
    };
    tokio::time::timeout(SHORT, wait).await.expect("session_opened reached the other edge's backend");
}

async fn next_closed(events: &mut mpsc::Receiver<Notification>, session: &str) -> String {
    let wait = async {
        while let Some(n) = events.recv().await {
            if let Notification::SessionClosed(c) = n {
                if c.session == session {
                    return c.reason;
                }
            }
        }
        panic!("notifications ended");
    };
    tokio::time::timeout(SHORT, wait).await.expect("session_closed reached the other edge's backend")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_on_any_edge_reaches_a_device_on_another() {
    let nats = NatsServer::start();
    let (a, b, c) = three_edges(&nats);
    joined(&[&a, &b, &c]).await;
    let on_b = backend_on(&b).await;
    let mut heard_on_b = on_b.notifications().unwrap();
    let on_a = backend_on(&a).await;

    let (dev, session) = device_on(&c, "mira", DeviceSpec::minimal(vec![tool("a")])).await;
    next_opened(&mut heard_on_b, &session).await;

    // The list spans the cluster; a user sees only their own sessions.
    let listed = on_a.sessions(&common::user("mira"), SHORT).await.unwrap();
    assert_eq!(
        listed.sessions.iter().map(|s| s.session.as_str()).collect::<Vec<_>>(),
        vec![session.as_str()]
    );
    assert!(on_a.sessions(&common::user("eve"), SHORT).await.unwrap().sessions.is_empty());
    let one = on_a.session_info(&session, &common::user("mira"), SHORT).await.unwrap();
    assert_eq!(one.sessions.len(), 1, "a list of one session reaches the edge holding it");

    // Calls and reads from A run on C's device.
    let answer = on_a.call(call(&session, "mira"), BUDGET).await.unwrap();
    assert_eq!(answer.result.structured_content.as_ref().unwrap()["arguments"], json!({"n": 1}));
    assert_eq!(dev.observed.calls().len(), 1, "the call reached the device once");
    let turn = on_a.begin_turn(&session, &common::user("mira"), SHORT).await.unwrap();
    assert_eq!(turn.session, session);
    let manifest = on_a.list_tools(&session, &common::user("mira"), SHORT).await.unwrap();
    assert_eq!(manifest.tools.len(), 1);
    let inspect = on_a.inspect(&session, &common::user("mira"), SHORT).await.unwrap();
    assert_eq!(inspect.recent_calls.len(), 1, "the holder remembers the call A made");

    // Ownership is checked where the session lives.
    let refused = on_a.call(call(&session, "eve"), BUDGET).await.unwrap_err();
    assert_eq!(refused.kind, ErrorKind::Forbidden);
    let refused = on_a.inspect(&session, &common::user("eve"), SHORT).await.unwrap_err();
    assert_eq!(refused.kind, ErrorKind::Forbidden);

    // A session no edge holds: no responders, not found at once.
    let started = Instant::now();
    let missing = on_a.call(call("0b6f1c1e-0000-4000-8000-000000000000", "mira"), BUDGET).await.unwrap_err();
    assert_eq!(missing.kind, ErrorKind::SessionNotFound);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "no responders is immediate: {:?}",
        started.elapsed()
    );

    // The device's socket drops: the session waits for it to resume, and a
    // call without an idempotency key fails at once, saying why.
    drop(dev);
    until(SHORT, "a call on the dropped socket fails at once", || async {
        let late = on_a.call(call(&session, "mira"), BUDGET).await;
        late.is_err_and(|e| e.closed_reason() == Some("connection_lost"))
    })
    .await;

    // What crossed, counted on both sides.
    assert!(cluster(&a, "remote_calls").await >= 1);
    assert!(cluster(&a, "remote_reads").await >= 1);
    assert!(cluster(&a, "lists_gathered").await >= 1);
    assert!(cluster(&a, "no_responders").await >= 1);
    assert!(cluster(&a, "events_received").await >= 1);
    assert!(cluster(&a, "nats_connects").await >= 1);
    assert!(cluster(&c, "calls_served").await >= 1);
    assert!(cluster(&c, "reads_served").await >= 1);
    assert!(cluster(&c, "events_sent").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_edge_that_holds_a_session_fails_calls_in_flight_within_two_seconds() {
    let nats = NatsServer::start();
    let (a, mut c) = (ServeProc::start(&nats.url(), "a"), ServeProc::start(&nats.url(), "c"));
    joined(&[&a, &c]).await;
    let on_a = std::sync::Arc::new(backend_on(&a).await);
    let mut heard_on_a = on_a.notifications().unwrap();
    let spec = DeviceSpec::minimal(vec![tool("a")]).with("a", Behavior::Silent);
    let (dev, session) = device_on(&c, "mira", spec).await;
    next_opened(&mut heard_on_a, &session).await;

    let (link, s) = (std::sync::Arc::clone(&on_a), session.clone());
    let in_flight = tokio::spawn(async move { link.call(call(&s, "mira"), BUDGET).await });
    until(SHORT, "the call reaches the device", || async { dev.observed.calls().len() == 1 }).await;
    let killed = Instant::now();
    c.proc.kill();
    let err = in_flight.await.unwrap().unwrap_err();
    let took = killed.elapsed();
    assert_eq!(err.closed_reason(), Some("edge_lost"), "{err:?}");
    assert!(
        took <= Duration::from_secs(2),
        "a dead edge fails its calls within 2 s, not the 7 s leg: {took:?}"
    );
    assert_eq!(
        next_closed(&mut heard_on_a, &session).await,
        "edge_lost",
        "its sessions close for backends elsewhere"
    );
    let after = on_a.call(call(&session, "mira"), BUDGET).await.unwrap_err();
    assert_eq!(after.closed_reason(), Some("edge_lost"), "{after:?}");
    assert!(on_a.sessions(&common::user("mira"), SHORT).await.unwrap().sessions.is_empty());
    assert!(cluster(&a, "calls_edge_lost").await >= 1);
    assert!(cluster(&a, "edges_lost").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nats_local_calls_work_remote_ones_fail_structured_and_it_recovers() {
    let mut nats = NatsServer::start();
    let (a, c) = (ServeProc::start(&nats.url(), "a"), ServeProc::start(&nats.url(), "c"));
    joined(&[&a, &c]).await;
    let on_a = backend_on(&a).await;
    let mut heard_on_a = on_a.notifications().unwrap();
    let (_local_dev, local) = device_on(&a, "mira", DeviceSpec::minimal(vec![tool("a")])).await;
    let spec = DeviceSpec::minimal(vec![tool("a"), tool("b")]).with("b", Behavior::Silent);
    let (remote_dev, remote) = device_on(&c, "mira", spec).await;
    next_opened(&mut heard_on_a, &remote).await;
    on_a.call(call(&remote, "mira"), BUDGET).await.unwrap();
    let on_a = std::sync::Arc::new(on_a);
    let (link, s) = (std::sync::Arc::clone(&on_a), remote.clone());
    let in_flight = tokio::spawn(async move {
        let mut params = call(&s, "mira");
        params.name = "client__b".into();
        link.call(params, BUDGET).await
    });
    until(SHORT, "the call reaches the device", || async { remote_dev.observed.calls().len() == 2 }).await;

    nats.stop();
    let cut = Instant::now();
    let err = in_flight.await.unwrap().unwrap_err();
    assert_eq!(err.closed_reason(), Some("cluster_unreachable"), "{err:?}");
    assert!(
        cut.elapsed() < Duration::from_secs(2),
        "a call in flight fails when NATS goes: {:?}",
        cut.elapsed()
    );
    until(SHORT, "the edge says it is degraded", || async { readyz(&a).await.contains("degraded") }).await;
    let listed = on_a.sessions(&common::user("mira"), SHORT).await.unwrap();
    assert_eq!(listed.sessions.len(), 1, "only this edge's own session is listed without NATS");
    assert!(cluster(&a, "lists_partial").await >= 1);
    on_a.call(call(&local, "mira"), BUDGET).await.expect("local sessions keep working without NATS");
    let started = Instant::now();
    let err = on_a.call(call(&remote, "mira"), BUDGET).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Overloaded, "{err:?}");
    assert_eq!(err.detail("cluster"), Some(&json!("unreachable")));
    assert!(started.elapsed() < Duration::from_millis(500), "refused at once: {:?}", started.elapsed());
    assert_eq!(metric(&a, "tether_cluster_connected").await, 0);
    assert!(cluster(&a, "cluster_unreachable").await >= 2);
    assert!(cluster(&a, "nats_disconnects").await >= 1);

    nats.restart();
    until(Duration::from_secs(15), "remote calls work again once NATS is back", || async {
        on_a.call(call(&remote, "mira"), BUDGET).await.is_ok()
    })
    .await;
    assert_eq!(readyz(&a).await, "ready\n");
    assert_eq!(metric(&a, "tether_cluster_connected").await, 1);
    assert!(cluster(&a, "nats_connects").await >= 2);
    assert_eq!(
        cluster(&a, "edges_lost").await,
        0,
        "an outage of NATS loses no edge: the silence was not theirs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_leg_governs_a_remote_call_and_fits_the_budget_chain() {
    let nats = NatsServer::start();
    let (a, c) = (ServeProc::start(&nats.url(), "a"), ServeProc::start(&nats.url(), "c"));
    joined(&[&a, &c]).await;
    let on_a = backend_on(&a).await;
    let spec = DeviceSpec::minimal(vec![tool("a")]).with("a", Behavior::Silent);
    let (dev, session) = device_on(&c, "mira", spec).await;
    let mut params = call(&session, "mira");
    params.meta.budget_ms = Some(1_000);
    let started = Instant::now();
    let err = on_a.call(params, BUDGET).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.timed_out_leg(), Some(tether_contract::Leg::ToolCall), "{err:?}");
    assert!(err.detail("cluster").is_none(), "the holder's own leg expired, not the hop: {err:?}");
    assert!(took >= Duration::from_millis(1_000) && took < Duration::from_millis(1_500), "{took:?}");
    until(SHORT, "the device is told to cancel", || async { !dev.observed.cancels().is_empty() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_on_tether_subjects_are_counted_and_dropped() {
    let nats = NatsServer::start();
    let (a, c) = (ServeProc::start(&nats.url(), "a"), ServeProc::start(&nats.url(), "c"));
    joined(&[&a, &c]).await;
    let on_a = backend_on(&a).await;
    let mut heard_on_a = on_a.notifications().unwrap();
    let (_dev, session) = device_on(&c, "mira", DeviceSpec::minimal(vec![tool("a")])).await;
    next_opened(&mut heard_on_a, &session).await;

    let intruder = async_nats::connect(nats.url()).await.unwrap();
    let garbage: &[(&str, &[u8])] = &[
        ("tether.beat", b"not json"),
        ("tether.gone", b"{\"edge\":7}"),
        ("tether.events", b"{\"edge\":\"x\",\"event\":\"nope\"}"),
        ("tether.list", b"[]"),
        ("tether.r.a.1", b"{\"type\":\"done\"}"),
        ("tether.r.a.x", b"{}"),
        ("tether.r.a.999999", b"{\"type\":\"accepted\",\"edge\":\"x\"}"),
    ];
    for (subject, payload) in garbage {
        intruder.publish(*subject, payload.to_vec().into()).await.unwrap();
    }
    let oversized = vec![b'x'; 2 << 20];
    let _ = intruder.publish("tether.beat", oversized.into()).await;
    // A malformed call with a reply gets a structured refusal, not silence.
    let reply =
        intruder.request(format!("tether.s.{session}.call"), b"{\"owner\":1}".to_vec().into()).await.unwrap();
    let answered: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(answered["type"], "done", "{answered}");
    assert_eq!(answered["outcome"]["err"]["data"]["kind"], "invalid_params", "{answered}");
    intruder.flush().await.unwrap();

    until(SHORT, "the bad messages are counted", || async {
        metric(&a, "tether_cluster_bad_messages_total").await >= 5
    })
    .await;
    assert!(cluster(&a, "bad_messages").await >= 5);
    until(SHORT, "a reply for no request is counted", || async { cluster(&a, "late_replies").await >= 1 })
        .await;
    on_a.call(call(&session, "mira"), BUDGET).await.expect("the cluster still works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_larger_than_nats_carries_is_payload_too_large_not_a_wait() {
    let nats = NatsServer::with_config("max_payload: 2048\n");
    let (a, c) = (ServeProc::start(&nats.url(), "a"), ServeProc::start(&nats.url(), "c"));
    joined(&[&a, &c]).await;
    let on_a = backend_on(&a).await;
    let mut heard_on_a = on_a.notifications().unwrap();
    let (dev, session) = device_on(&c, "mira", DeviceSpec::minimal(vec![tool("a")])).await;
    next_opened(&mut heard_on_a, &session).await;
    let mut params = call(&session, "mira");
    params.arguments = json!({ "blob": "x".repeat(4000) });
    let started = Instant::now();
    let err = on_a.call(params, BUDGET).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::PayloadTooLarge, "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(500));
    assert!(dev.observed.calls().is_empty(), "nothing reached the device");
    assert!(cluster(&a, "publish_failures").await >= 1);
    on_a.call(call(&session, "mira"), BUDGET).await.expect("a call that fits still crosses");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_across_three_edges_with_an_edge_restart_and_a_nats_restart_loses_nothing() {
    use tether_harness::soak::{run, Load, SoakConfig, DEFAULT_CALL_BUDGET, DEFAULT_FAULTS};
    let mut nats = NatsServer::start();
    let (a, b, mut c) = three_edges(&nats);
    joined(&[&a, &b, &c]).await;
    let day = Duration::from_secs(86_400);
    let devices = 60;
    let stop = tokio_util::sync::CancellationToken::new();
    let config = SoakConfig {
        edge: a.url.clone(),
        device_edges: vec![a.url.clone(), b.url.clone(), c.url.clone()],
        client_tokens: (0..devices)
            .map(|i| common::keys().issue(&format!("soak-device-{i}"), "tether-client", day).unwrap())
            .collect(),
        backend_token: common::keys().issue("soak-driver", "tether-backend", day).unwrap(),
        devices,
        // A ceiling: the test stops the load once its faults have landed.
        duration: Duration::from_secs(120),
        stop: Some(stop.clone()),
        load: Load::Concurrency(16),
        faults: DEFAULT_FAULTS.into(),
        seed: 13,
        progress: false,
        call_budget: DEFAULT_CALL_BUDGET,
        fleet_deadline: Duration::from_secs(30),
        rolling: false,
    };
    let soak = tokio::spawn(run(config));
    // Faults land while load runs: each after A has answered more calls.
    let answered = |n: u64| {
        let a = &a;
        move || async move { metric(a, "tether_calls_ok_total").await >= n }
    };
    until(Duration::from_secs(40), "load starts", answered(300)).await;
    c.restart();
    until(SHORT, "the restarted edge rejoins", || async { readyz(&c).await == "ready\n" }).await;
    let before_outage = metric(&a, "tether_calls_ok_total").await;
    until(Duration::from_secs(20), "load goes on", answered(before_outage + 300)).await;
    nats.stop();
    until(SHORT, "the edge sees NATS gone", || async { readyz(&a).await.contains("degraded") }).await;
    nats.restart();
    joined(&[&a, &b, &c]).await;
    let after_outage = metric(&a, "tether_calls_ok_total").await;
    until(Duration::from_secs(20), "load recovers", answered(after_outage + 300)).await;
    stop.cancel();

    let report = soak.await.unwrap().unwrap();
    eprint!("{}", report.table());
    assert!(report.violations().is_empty(), "{:?}", report.violations());
    assert_eq!((report.lost_calls, report.duplicate_outcomes, report.misrouted_results), (0, 0, 0));
    let outcome = |k: &str| report.outcomes.get(k).copied().unwrap_or(0);
    assert!(
        outcome("overloaded") > 0,
        "calls met the NATS outage and were refused structured: {:?}",
        report.outcomes
    );
    assert!(
        metric(&a, "tether_cluster_remote_calls_total").await > 0,
        "calls crossed edges (devices on B and C, the backend on A)"
    );
}

/// The sum of `tether_calls_ok_total` over `edges` (an edge restarted since counts from 0).
async fn answered_by(edges: &[&ServeProc]) -> u64 {
    let mut sum = 0;
    for edge in edges {
        if let Ok(r) = get(format!("{}/metrics", edge.http())).await {
            let text = r.text().await.unwrap_or_default();
            sum += text
                .lines()
                .find_map(|l| l.strip_prefix("tether_calls_ok_total "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    sum
}

/// An upgrade as an operator rolls it: each edge in turn is drained with
/// SIGTERM and started again while keyed load runs through all three, and
/// the soak's ledger shows nothing lost, duplicated or misrouted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_three_edges_under_keyed_load_loses_nothing() {
    use tether_harness::soak::{run, Load, SoakConfig, DEFAULT_CALL_BUDGET};
    let nats = NatsServer::start();
    let (mut a, mut b, mut c) = three_edges(&nats);
    joined(&[&a, &b, &c]).await;
    let day = Duration::from_secs(86_400);
    let devices = 30;
    let stop = tokio_util::sync::CancellationToken::new();
    let config = SoakConfig {
        edge: a.url.clone(),
        device_edges: vec![a.url.clone(), b.url.clone(), c.url.clone()],
        client_tokens: (0..devices)
            .map(|i| common::keys().issue(&format!("roll-device-{i}"), "tether-client", day).unwrap())
            .collect(),
        backend_token: common::keys().issue("roll-driver", "tether-backend", day).unwrap(),
        devices,
        // A ceiling: the test stops the load once every edge has been restarted.
        duration: Duration::from_secs(180),
        stop: Some(stop.clone()),
        load: Load::Concurrency(16),
        // No injected faults: the restarts are the only disruption.
        faults: "answer=100".into(),
        seed: 21,
        progress: false,
        call_budget: DEFAULT_CALL_BUDGET,
        fleet_deadline: Duration::from_secs(30),
        rolling: true,
    };
    let soak = tokio::spawn(run(config));
    for restarted in ["a", "b", "c"] {
        let (edge, others): (&mut ServeProc, [&ServeProc; 2]) = match restarted {
            "a" => (&mut a, [&b, &c]),
            "b" => (&mut b, [&a, &c]),
            _ => (&mut c, [&a, &b]),
        };
        // Load runs on the edges that stay before this one goes.
        let before = answered_by(&others).await;
        until(Duration::from_secs(40), "load runs", || async { answered_by(&others).await >= before + 200 })
            .await;
        tokio::task::block_in_place(|| edge.drain_restart());
        let edge: &ServeProc = edge;
        until(SHORT, "the restarted edge rejoins", || async { readyz(edge).await == "ready\n" }).await;
    }
    let before = answered_by(&[&a, &b, &c]).await;
    until(Duration::from_secs(30), "load goes on after the roll", || async {
        answered_by(&[&a, &b, &c]).await >= before + 200
    })
    .await;
    stop.cancel();
    // A drained edge's devices resume their sessions on the next edge (the
    // draining edge waits for the claims): none gets a new session. Each
    // edge counts the resumes it took since its own restart.
    let (mut resumed, mut refused) = (0, 0);
    for edge in [&a, &b, &c] {
        resumed += metric(edge, "tether_sessions_resumed_total").await;
        refused += metric(edge, "tether_resumes_refused_total").await;
    }
    assert!(
        resumed > 0 && refused == 0,
        "sessions resumed across the roll: {resumed} resumed, {refused} refused"
    );

    let report = soak.await.unwrap().unwrap();
    eprint!("{}", report.table());
    assert!(report.violations().is_empty(), "{:?}", report.violations());
    assert_eq!((report.lost_calls, report.duplicate_outcomes, report.misrouted_results), (0, 0, 0));
    // Every call has its one outcome; most are ok. The rest are structured
    // answers a backend acts on (sent again under the same key, they are
    // safe), given after a call's retries ran out of budget mid-move: the
    // roll's remaining cost, written down in docs/DEPLOY.md.
    let ok = report.outcomes.get("ok").copied().unwrap_or(0);
    assert!(ok * 10 >= report.calls_started * 9, "at least 90% ok across the roll: {:?}", report.outcomes);
    for kind in report.outcomes.keys() {
        assert!(
            ["ok", "overloaded", "session_not_found", "tool_unavailable", "channel_closed"]
                .contains(&kind.as_str()),
            "an outcome a rolling restart explains: {kind} in {:?}",
            report.outcomes
        );
    }
    assert!(report.calls_resent > 0, "calls met a draining edge and were sent again under their key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_dropped_mid_call_resumes_on_another_edge_and_its_keyed_call_completes_exactly_once() {
    let nats = NatsServer::start();
    let (a, b, c) = three_edges(&nats);
    joined(&[&a, &b, &c]).await;
    let on_a = std::sync::Arc::new(backend_on(&a).await);
    let mut heard_on_a = on_a.notifications().unwrap();
    let spec = DeviceSpec::minimal(vec![tool("a"), tool("pay")]).with("pay", Behavior::Disconnect);
    let (first, session) = device_on(&c, "mira", spec.clone()).await;
    next_opened(&mut heard_on_a, &session).await;
    let token = first.resume_token().expect("initialize carried a resume token");

    let (link, s) = (std::sync::Arc::clone(&on_a), session.clone());
    let keyed = tokio::spawn(async move {
        let mut params = call(&s, "mira");
        params.name = "client__pay".into();
        params.meta.idempotency_key = Some("order-7".into());
        link.call(params, BUDGET).await
    });
    // The device got the call and its network dropped; it comes back through another edge.
    until(SHORT, "the call reaches the device", || async { first.observed.calls().len() == 1 }).await;
    let back = spec.with("pay", Behavior::Answer { latency: Duration::ZERO });
    let mut second = SimDevice::resume(&b.url, &common::user("mira"), back, Some(&token)).await.unwrap();
    assert_eq!(second.ready().await.as_deref(), Some(session.as_str()), "the session id survives the move");

    let answer = keyed.await.unwrap().expect("the keyed call completes on the new socket");
    assert_eq!(answer.result.structured_content.unwrap()["tool"], json!("pay"));
    let delivered: Vec<_> = second.observed.calls().into_iter().filter(|c| c.name == "pay").collect();
    assert_eq!(delivered.len(), 1, "delivered again exactly once");
    let resumed = tokio::time::timeout(SHORT, async {
        while let Some(n) = heard_on_a.recv().await {
            match n {
                Notification::SessionResumed(r) if r.session == session => return true,
                Notification::SessionClosed(c) if c.session == session => return false,
                _ => {}
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(resumed, "backends hear one session_resumed, never a close");
    on_a.call(call(&session, "mira"), BUDGET).await.expect("new calls reach the device on its new edge");
    assert_eq!(second.observed.calls().iter().filter(|c| c.name == "a").count(), 1);
    assert!(metric(&b, "tether_sessions_resumed_total").await >= 1);
    assert!(metric(&c, "tether_calls_redelivered_total").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_that_boots_without_nats_serves_its_own_sessions_and_joins_when_nats_comes() {
    // A port nothing listens on yet: NATS will come up there later.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("nats://127.0.0.1:{port}");
    let (a, c) = (ServeProc::start(&url, "a"), ServeProc::start(&url, "c"));
    until(SHORT, "the edge boots degraded", || async { readyz(&a).await.contains("degraded") }).await;
    let on_a = backend_on(&a).await;
    let (_local_dev, local) = device_on(&a, "mira", DeviceSpec::minimal(vec![tool("a")])).await;
    on_a.call(call(&local, "mira"), BUDGET).await.expect("its own sessions work without NATS");
    let (_remote_dev, remote) = device_on(&c, "mira", DeviceSpec::minimal(vec![tool("a")])).await;
    let err = on_a.call(call(&remote, "mira"), BUDGET).await.unwrap_err();
    assert_eq!(err.detail("cluster"), Some(&json!("unreachable")), "{err:?}");

    let _nats = NatsServer::on(port);
    joined(&[&a, &c]).await;
    until(Duration::from_secs(15), "the session held elsewhere is reachable once NATS is up", || async {
        on_a.call(call(&remote, "mira"), BUDGET).await.is_ok()
    })
    .await;
}

/// `/mcp` never remembers a session list its edge gathered without the
/// whole cluster: a list read while NATS was down holds only the edge's own
/// sessions, and the user's devices on other edges are listed as soon as the
/// edge rejoins, not when a remembered answer runs out 30 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_list_gathered_without_the_whole_cluster_is_not_remembered() {
    let mut nats = NatsServer::start();
    let b = ServeProc::start(&nats.url(), "b");
    joined(&[&b]).await;
    let (_device, _) = device_on(&b, "mira", DeviceSpec::minimal(vec![tool("scan")])).await;
    // B's device opened before A exists: no event of it will ever reach A.
    nats.stop();
    let a = ServeProc::start(&nats.url(), "a");
    until(SHORT, "the edge boots degraded", || async { readyz(&a).await.contains("degraded") }).await;
    let mira = common::user("mira");
    let tools = |v: &serde_json::Value| v["result"]["tools"].as_array().map_or(0, Vec::len);
    let alone = common::mcp_stateless(&a.http(), &mira, "tools/list", json!({}), json!({})).await;
    assert_eq!(tools(&alone), 0, "without NATS, A lists only its own sessions: {alone}");
    assert!(metric(&a, "tether_mcp_lists_not_remembered_total").await >= 1);

    nats.restart();
    joined(&[&a, &b]).await;
    until(SHORT, "A lists the device on B once it rejoins", || async {
        tools(&common::mcp_stateless(&a.http(), &mira, "tools/list", json!({}), json!({})).await) == 1
    })
    .await;
}

/// A session moving between edges (its device resuming elsewhere) is held by
/// neither for a moment: the old holder has let go and the new one has not
/// subscribed yet. A third edge's call in that moment waits for the new
/// holder instead of answering `session_not_found` for a session that exists.
/// Here an impostor edge `z` announces the session and subscribes as its
/// holder only once edge `a` has found nobody holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_for_a_session_between_holders_waits_for_the_new_one() {
    let nats = NatsServer::start();
    // The longest wait the edge timeout allows: the impostor reacts to a polled counter.
    let a = ServeProc::start_with(&nats.url(), "a", "edge_timeout_ms = 5000\nmove_wait_ms = 4000");
    joined(&[&a]).await;
    let on_a = std::sync::Arc::new(backend_on(&a).await);
    let z = async_nats::connect(nats.url()).await.unwrap();
    // z is an edge `a` hears beat: a session announced by an edge not alive is not waited for.
    z.publish("tether.beat", json!({"edge": "z", "sessions": 1}).to_string().into()).await.unwrap();
    let session = "moving-session-1";
    let opened = json!({"edge": "z", "event": "session_opened", "params": {"session": session, "seq": 1}});
    z.publish("tether.events", opened.to_string().into()).await.unwrap();
    // And one announced by `y`, an edge `a` never heard beat: not waited for.
    let ghost =
        json!({"edge": "y", "event": "session_opened", "params": {"session": "ghost-session", "seq": 1}});
    z.publish("tether.events", ghost.to_string().into()).await.unwrap();
    z.flush().await.unwrap();
    until(SHORT, "a hears both sessions", || async { cluster(&a, "events_received").await >= 2 }).await;
    let err = on_a.call(call("ghost-session", "mira"), BUDGET).await.expect_err("nobody holds it");
    assert_eq!(err.kind, ErrorKind::SessionNotFound, "{err:?}");
    assert_eq!(cluster(&a, "moves_awaited").await, 0, "an announcer that is not alive is not waited for");

    let (link, s) = (std::sync::Arc::clone(&on_a), session.to_owned());
    let calling = tokio::spawn(async move { link.call(call(&s, "mira"), BUDGET).await });
    until(SHORT, "a asks and finds no holder", || async { cluster(&a, "moves_awaited").await >= 1 }).await;

    let mut held = z.queue_subscribe(format!("tether.s.{session}.*"), "holder".into()).await.unwrap();
    z.flush().await.unwrap();
    let request = tokio::time::timeout(SHORT, held.next()).await.expect("a asked again").unwrap();
    assert_eq!(request.subject.as_str(), format!("tether.s.{session}.call"));
    let refused = WireError::new(ErrorKind::Forbidden, "held by z now");
    let done = json!({"type": "done", "outcome": {"err": refused.to_json()}});
    z.publish(request.reply.unwrap(), done.to_string().into()).await.unwrap();
    z.flush().await.unwrap();

    let err = calling.await.unwrap().expect_err("z's answer, not a result");
    assert_eq!(err.kind, ErrorKind::Forbidden, "the new holder answered, not session_not_found: {err:?}");
    assert_eq!(err.message, "held by z now");
    assert_eq!(cluster(&a, "moves_awaited").await, 1);
}

/// A task lives where its session does: a backend on A reads and follows a
/// task its device runs on C, and when the device resumes on B mid-task,
/// the task goes with it (C hands it over, B follows it on) and A reads its
/// outcome from B, with no loss and no second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_read_from_any_edge_and_moves_with_its_session_to_another() {
    use tether_contract::backend::ReadMeta;
    use tether_contract::tasks::{TaskMetadata, TaskParams, TaskState, TaskStatus};
    let nats = NatsServer::start();
    let (a, b, c) = three_edges(&nats);
    joined(&[&a, &b, &c]).await;
    let on_a = std::sync::Arc::new(backend_on(&a).await);
    let mut heard_on_a = on_a.notifications().unwrap();
    let spec = DeviceSpec::minimal(vec![tether_harness::device::task_tool("scan")])
        .with("scan", Behavior::Task { after: Duration::from_secs(4) });
    let (first, session) = device_on(&c, "mira", spec.clone()).await;
    next_opened(&mut heard_on_a, &session).await;
    let token = first.resume_token().expect("initialize carried a resume token");

    let mut params = call(&session, "mira");
    params.name = "client__scan".into();
    params.meta.task = Some(TaskMetadata { ttl: None });
    let answered = on_a.call(params, BUDGET).await.expect("the task call answers from C");
    let task = TaskState::in_result(answered.result.meta.as_ref()).expect("the result names its task");
    let about = |who: &str| TaskParams {
        session: session.clone(),
        task: task.task.clone(),
        meta: ReadMeta { credential: Some(common::user(who)) },
    };
    let now = on_a.task(&about("mira"), SHORT).await.expect("tasks/get from A reaches the task on C");
    assert_eq!((now.status, now.status_message.as_deref()), (TaskStatus::Working, Some("started")));
    let err = on_a.task(&about("leo"), SHORT).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams, "another user's task reads as unknown: {err:?}");

    // A waits for the outcome; meanwhile the device drops and comes back through B.
    let waiting = {
        let (link, params) = (std::sync::Arc::clone(&on_a), about("mira"));
        tokio::spawn(async move { link.task_result(&params, Duration::from_secs(60)).await })
    };
    first.disconnect().await;
    let mut second = SimDevice::resume(&b.url, &common::user("mira"), spec, Some(&token)).await.unwrap();
    assert_eq!(second.ready().await.as_deref(), Some(session.as_str()), "the session id survives the move");

    let outcome = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the outcome arrives")
        .unwrap()
        .expect("the task completes on B");
    assert_eq!(outcome.result.structured_content.unwrap()["arguments"], json!({"n": 1}));
    let done = on_a.task(&about("mira"), SHORT).await.unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(metric(&c, "tether_tasks_handed_over_total").await, 1);
    assert_eq!(metric(&b, "tether_tasks_adopted_total").await, 1);
    assert_eq!(metric(&b, "tether_tasks_completed_total").await, 1);
    assert_eq!(metric(&c, "tether_tasks_lost_total").await, 0, "C let it go, it did not lose it");
    assert_eq!(second.observed.calls().len(), 0, "the work was not started again");
}

/// Keys, grants and receipts move with the session: after its device
/// resumes on another edge, a retried keyed call replays its first outcome
/// there (the device is not asked again), the same key for another call is
/// still a conflict, and the receipt is read where the session now lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_calls_outcome_and_receipt_move_with_its_session_to_another_edge() {
    let nats = NatsServer::start();
    let (a, b, c) = three_edges(&nats);
    joined(&[&a, &b, &c]).await;
    let on_a = backend_on(&a).await;
    let mut heard_on_a = on_a.notifications().unwrap();
    let spec = DeviceSpec::minimal(vec![tool("a"), tool("pay")]);
    let (first, session) = device_on(&c, "mira", spec.clone()).await;
    next_opened(&mut heard_on_a, &session).await;
    let token = first.resume_token().expect("initialize carried a resume token");
    let pay = |n: u64| {
        let mut params = call(&session, "mira");
        params.name = "client__pay".into();
        params.arguments = json!({"n": n});
        params.meta.idempotency_key = Some("order-9".into());
        params
    };
    let paid = on_a.call(pay(1), BUDGET).await.expect("the keyed call runs on C");
    assert_eq!(first.observed.calls().len(), 1);

    first.disconnect().await;
    let mut second = SimDevice::resume(&b.url, &common::user("mira"), spec, Some(&token)).await.unwrap();
    assert_eq!(second.ready().await.as_deref(), Some(session.as_str()));

    let again = on_a.call(pay(1), BUDGET).await.expect("the retry replays on B");
    assert_eq!(again.result, paid.result, "the first outcome, as the device gave it");
    assert!(paid.receipt.is_some());
    assert_eq!(again.receipt, paid.receipt, "with the original receipt");
    assert_eq!(second.observed.calls().len(), 0, "the device is not asked again");
    assert_eq!(second.observed.deduplicated(), Vec::<String>::new(), "not even to de-duplicate it");
    let err = on_a.call(pay(2), BUDGET).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::IdempotencyConflict, "{err:?}");
    let seen = on_a.inspect(&session, &common::user("mira"), SHORT).await.unwrap();
    assert!(
        seen.receipts.iter().any(|r| r.key.as_deref() == Some("order-9") && r.outcome == "ok"),
        "the receipt moved: {:?}",
        seen.receipts
    );
    assert_eq!(metric(&c, "tether_ledgers_handed_over_total").await, 1);
    assert_eq!(metric(&b, "tether_ledgers_adopted_total").await, 1);
    assert_eq!(metric(&b, "tether_keyed_replays_total").await, 1);
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made
/// with the openssl command line in `dir`: (ca, server cert, server key,
/// client cert, client key).
fn tls_files(dir: &std::path::Path) -> [std::path::PathBuf; 5] {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl must be installed (Debian: apt install openssl; .ci/run installs it)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=tether test CA"],
        ]
        .concat(),
    );
    for (name, ext) in [
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        let (key, csr, pem, extfile) =
            (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("{name}.ext"));
        openssl(
            &[
                &["req"][..],
                &ec,
                &["-keyout", &key, "-out", &csr, "-subj", &format!("/CN=tether test {name}")],
            ]
            .concat(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            &pem,
            "-extfile",
            &extfile,
        ]);
    }
    ["ca.pem", "server.pem", "server.key", "client.pem", "client.key"].map(|f| dir.join(f))
}

/// `[cluster] tls_ca`, `tls_cert` and `tls_key`: edges join a NATS server
/// that requires TLS and verifies client certificates, and a call crosses
/// between them over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_join_a_nats_server_that_requires_tls_and_client_certificates() {
    let dir = std::env::temp_dir().join(format!("tether-nats-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let [ca, cert, key, client_cert, client_key] = tls_files(&dir);
    let nats = NatsServer::with_config(&format!(
        "tls {{\n  cert_file: {cert:?}\n  key_file: {key:?}\n  ca_file: {ca:?}\n  verify: true\n  timeout: 2\n}}\n"
    ));
    let secured = format!("tls_ca = {ca:?}\ntls_cert = {client_cert:?}\ntls_key = {client_key:?}\n");
    let a = ServeProc::start_with(&nats.url(), "a", &secured);
    let b = ServeProc::start_with(&nats.url(), "b", &secured);
    joined(&[&a, &b]).await;
    let on_a = backend_on(&a).await;
    let (dev, session) = device_on(&b, "mira", DeviceSpec::minimal(vec![tool("a")])).await;
    let mut answer = on_a.call(call(&session, "mira"), BUDGET).await;
    // The session is announced to A a moment after the device opens it on B.
    let start = Instant::now();
    while answer.as_ref().is_err_and(|e| e.kind == ErrorKind::SessionNotFound) && start.elapsed() < SHORT {
        tokio::time::sleep(Duration::from_millis(20)).await;
        answer = on_a.call(call(&session, "mira"), BUDGET).await;
    }
    assert!(answer.is_ok(), "a call from A reached B's device over TLS: {answer:?}");
    assert_eq!(dev.observed.calls().len(), 1);
    assert!(cluster(&a, "remote_calls").await >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}
