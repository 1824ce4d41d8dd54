//! One trace from the agent's MCP request to the device's handler, across two
//! clustered edges, exported to a real OTLP collector (rotel, from PyPI).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::time::Duration;

use serde_json::{json, Value};

use common::processes::{NatsServer, OtlpReceiver, ServeProc};
use tether_harness::device::tool;
use tether_harness::{DeviceSpec, SimDevice};

/// The agent's own trace and span, as its MCP client sends them in `_meta`.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const AGENT_SPAN: &str = "00f067aa0ba902b7";

/// Polls `check` every 50 ms, failing past `limit`.
async fn until<T>(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let tries = limit.as_millis() / 50;
    for _ in 0..tries {
        if let Some(found) = check().await {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not within {limit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_through_two_edges_is_one_trace_from_the_agent_to_the_device() {
    let receiver = OtlpReceiver::start();
    let nats = NatsServer::start();
    let a = ServeProc::start_traced(&nats.url(), "a", &receiver.endpoint);
    let b = ServeProc::start_traced(&nats.url(), "b", &receiver.endpoint);
    for edge in [&a, &b] {
        until(Duration::from_secs(15), "the edge joins the cluster", || async {
            let ready = common::http_get(format!("{}/readyz", edge.http())).await.ok()?.text().await.ok()?;
            (ready == "ready\n").then_some(())
        })
        .await;
    }
    let mut device =
        SimDevice::connect(&b.url, &common::user("mira"), DeviceSpec::minimal(vec![tool("scan")]))
            .await
            .unwrap();
    device.ready().await.expect("the device got a session on B");
    let mira = common::user("mira");

    // The agent reaches A; the device is held by B.
    let name = until(Duration::from_secs(15), "A lists the device on B", || async {
        let listed = common::mcp_stateless(&a.http(), &mira, "tools/list", json!({}), json!({})).await;
        listed["result"]["tools"][0]["name"].as_str().map(str::to_owned)
    })
    .await;
    let traceparent = format!("00-{TRACE}-{AGENT_SPAN}-01");
    let answer = common::mcp_stateless(
        &a.http(),
        &mira,
        "tools/call",
        json!({"name": name, "arguments": {}}),
        json!({"traceparent": traceparent, "tracestate": "agent=1"}),
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], json!("scan done"), "{answer}");

    // The device's handler got the trace: same trace id, its parent the device leg.
    let calls = device.observed.calls();
    let seen = calls[0].meta["traceparent"].as_str().expect("the device saw a traceparent").to_owned();
    assert!(seen.starts_with(&format!("00-{TRACE}-")), "{seen}");
    assert_eq!(calls[0].meta["tracestate"], json!("agent=1"), "tracestate travels beside it");

    // The collector holds one chain from the agent's span to that device leg.
    let spans = until(Duration::from_secs(20), "both edges' spans reach the collector", || async {
        let spans: Vec<Value> =
            receiver.spans().into_iter().filter(|s| s["trace_id"] == json!(TRACE)).collect();
        let legs = |leg: &str| spans.iter().any(|s| s["attributes"]["tether.leg"] == json!(leg));
        (legs("device") && legs("mcp") && legs("gate")).then_some(spans)
    })
    .await;
    let by_id = |id: &str| spans.iter().find(|s| s["span_id"] == json!(id));
    let device_leg = spans.iter().find(|s| s["attributes"]["tether.leg"] == json!("device")).unwrap();
    assert_eq!(
        seen.split('-').nth(2),
        device_leg["span_id"].as_str(),
        "the device's parent is the device leg"
    );
    let mut chain = Vec::new();
    let mut at = device_leg;
    loop {
        let leg = at["attributes"]["tether.leg"].as_str().unwrap_or("?");
        chain.push((leg.to_owned(), at["service"].as_str().unwrap_or("?").to_owned()));
        match by_id(at["parent_span_id"].as_str().unwrap()) {
            Some(parent) => at = parent,
            None => break,
        }
    }
    let chain: Vec<(&str, &str)> = chain.iter().map(|(l, s)| (l.as_str(), s.as_str())).collect();
    assert_eq!(
        chain,
        [
            ("device", "edge-b"),
            ("holder", "edge-b"),
            ("cluster_hop", "edge-a"),
            ("edge", "edge-a"),
            ("dispatch", "edge-a"),
            ("mcp", "edge-a"),
        ],
        "every leg chains to the MCP request"
    );
    assert_eq!(at["parent_span_id"], json!(AGENT_SPAN), "the MCP request's parent is the agent's span");
    assert_eq!(at["name"], json!(format!("tools/call {name}")));
    assert_eq!(at["kind"], json!(2), "the MCP request is a server span");
    assert_eq!(at["attributes"]["mcp.method.name"], json!("tools/call"));
    assert_eq!(at["attributes"]["jsonrpc.request.id"], json!("7"));
    assert_eq!(at["attributes"]["mcp.protocol.version"], json!("2026-07-28"));
    assert_eq!(device_leg["name"], json!("tools/call scan"), "the device leg names the device's own tool");
    assert_eq!(device_leg["kind"], json!(3), "the device leg is a client span");
    for span in &spans {
        assert_eq!(span["attributes"]["tether.outcome"], json!("ok"), "{span}");
        assert_eq!(span["attributes"]["gen_ai.operation.name"], json!("execute_tool"), "{span}");
    }
    let gate = spans.iter().find(|s| s["attributes"]["tether.leg"] == json!("gate")).unwrap();
    let dispatch = spans.iter().find(|s| s["attributes"]["tether.leg"] == json!("dispatch")).unwrap();
    assert_eq!(gate["parent_span_id"], dispatch["span_id"], "the gate is a leg of the dispatch");
}
