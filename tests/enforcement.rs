//! Enforcement at dispatch over real sockets: arguments checked against the
//! tool's input schema before anything is sent, results against its output
//! schema, hostile schemas refused at both gates, and no `$ref` ever fetched.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use common::LiveEdge;
use tether_contract::backend::DropReason;
use tether_contract::mcp::ToolDeclaration;
use tether_contract::{Budgets, ErrorKind};
use tether_core::Turn;
use tether_harness::device::tool;
use tether_harness::DeviceSpec;

fn with_schemas(name: &str, input: Value, output: Option<Value>) -> ToolDeclaration {
    ToolDeclaration { input_schema: input, output_schema: output, ..tool(name) }
}

/// A loopback listener that counts connections: proof that nothing was fetched.
async fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/schema.json", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    (url, hits)
}

/// Accepts are counted asynchronously and in order: once a sentinel
/// connection of our own is counted, any earlier one would have been too.
async fn assert_never_contacted(url: &str, hits: &AtomicUsize) {
    let addr = url.trim_start_matches("http://").trim_end_matches("/schema.json").to_owned();
    let _sentinel = tokio::net::TcpStream::connect(addr).await.unwrap();
    common::wait_until(|| hits.load(Ordering::SeqCst) >= 1).await;
    assert_eq!(hits.load(Ordering::SeqCst), 1, "no schema reference was ever fetched");
}

#[tokio::test]
async fn arguments_that_miss_the_input_schema_never_reach_the_device() {
    let edge = LiveEdge::start().await;
    let (dev, session) = edge.device(DeviceSpec::fieldkit()).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let bad = [
        ("client__open_work_order", json!({"workOrderId": "1182"})),
        ("client__open_work_order", json!({})),
        ("client__get_visible_screen", json!({"includeHidden": false, "principal": "leo"})),
        ("client__scan_barcode", json!({"symbologies": []})),
        ("client__scan_barcode", json!("qr")),
    ];
    for (name, args) in bad {
        let err = turn.call(name, args.clone()).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArguments, "{name} {args}");
        assert!(tether_core::for_model(&err).contains("input schema"), "{}", err.message);
    }
    assert!(dev.observed.calls().is_empty(), "nothing reached the device");
    assert_eq!(link.counters().get("arguments_rejected"), 5);
    turn.call("client__open_work_order", json!({"workOrderId": "WO-1182"})).await.unwrap();
    assert_eq!(dev.observed.calls().len(), 1);
}

/// Devices of one app declare the same catalog: the edge makes its intake
/// (kept tools, names, compiled schemas) once and every session holds that
/// one copy; another catalog with the same schemas compiles none again (a
/// compiled schema is a few KiB, a parsed one ~600 bytes an object, so this
/// is most of an idle session's cost). Each session's gate still refuses.
#[tokio::test]
async fn sessions_that_declare_the_same_catalog_share_one_intake_and_schemas_are_compiled_once() {
    let edge = LiveEdge::start().await;
    let (_first, _) = edge.device(DeviceSpec::fieldkit()).await;
    let distinct = edge.hub.schemas.len();
    assert_eq!(edge.hub.counters().get("schemas_shared"), 0);
    let (second, session) = edge.device(DeviceSpec::fieldkit()).await;
    assert_eq!(DeviceSpec::fieldkit().tools.len(), 10);
    assert_eq!(
        edge.hub.counters().get("catalogs_shared"),
        1,
        "the second session holds the first one's intake"
    );
    assert_eq!(edge.hub.catalogs.len(), 1);
    assert_eq!(edge.hub.counters().get("schemas_shared"), 0, "nothing was compiled for it");
    let mut fewer = DeviceSpec::fieldkit();
    fewer.tools.pop();
    assert_eq!(fewer.tools.len(), 9);
    let (_third, _) = edge.device(fewer).await;
    assert_eq!(edge.hub.catalogs.len(), 2, "another catalog, another intake");
    assert_eq!(edge.hub.counters().get("schemas_shared"), 9, "its schemas came from the first session");
    assert_eq!(edge.hub.schemas.len(), distinct, "no second copy");
    let link = edge.backend().await;
    let call = |arguments: Value| tether_contract::backend::CallParams {
        session: session.clone(),
        name: "client__open_work_order".into(),
        arguments,
        meta: tether_contract::backend::CallMeta {
            credential: Some(common::user("mira")),
            ..Default::default()
        },
    };
    let budget = std::time::Duration::from_secs(12);
    let err = link.call(call(json!({"workOrderId": "1182"})), budget).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArguments, "the shared copy gates the second session too");
    assert!(second.observed.calls().is_empty());
}

/// A backend that does not link tether-core sends its `tools/call` straight
/// to the edge: the edge's own gate refuses arguments that miss the schema.
#[tokio::test]
async fn a_raw_backend_call_whose_arguments_miss_the_schema_is_refused_at_the_edge() {
    let edge = LiveEdge::start().await;
    let (dev, session) = edge.device(DeviceSpec::fieldkit()).await;
    let link = edge.backend().await;
    let raw = |name: &str, arguments: Value| tether_contract::backend::CallParams {
        session: session.clone(),
        name: name.into(),
        arguments,
        meta: tether_contract::backend::CallMeta {
            credential: Some(common::user("mira")),
            ..Default::default()
        },
    };
    let budget = std::time::Duration::from_secs(12);
    let err =
        link.call(raw("client__open_work_order", json!({"workOrderId": "1182"})), budget).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidArguments);
    assert!(err.message.contains("at /workOrderId"), "{}", err.message);
    assert!(!err.message.contains("1182"), "the value is not echoed: {}", err.message);
    assert!(dev.observed.calls().is_empty(), "nothing reached the device");
    assert_eq!(edge.hub.counters().get("arguments_refused"), 1);
    link.call(raw("client__open_work_order", json!({"workOrderId": "WO-1182"})), budget).await.unwrap();
    assert_eq!(dev.observed.calls().len(), 1);
}

#[tokio::test]
async fn every_declared_output_shape_is_checked_and_a_mismatch_is_withheld() {
    let edge = LiveEdge::start().await;
    // Honest answers: the simulated device returns a minimal instance of each output schema.
    let (_dev, session) = edge.device(DeviceSpec::fieldkit()).await;
    let link = edge.backend().await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let shaped = [
        ("client__get_visible_screen", json!({})),
        ("client__scan_barcode", json!({"symbologies": ["qr"]})),
        ("client__list_nearby_devices", json!({})),
    ];
    for (name, args) in shaped {
        assert!(turn.tools().iter().any(|t| t.name == name && t.output_schema.is_some()), "{name}");
        turn.call(name, args).await.unwrap();
    }
    assert_eq!(link.counters().get("results_rejected"), 0);

    // A device whose answer cannot match what it declared.
    let strict = json!({
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^A-"}},
        "required": ["id"],
        "additionalProperties": false
    });
    let decl = with_schemas("read_id", json!({"type": "object"}), Some(strict));
    let (dev, session) = edge.device(DeviceSpec::minimal(vec![decl])).await;
    let mut turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let err = turn.call("client__read_id", json!({})).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Internal);
    assert_eq!(err.detail("reason"), Some(&json!("result_shape")));
    assert_eq!(dev.observed.calls().len(), 1, "the call ran; its result was withheld");
    assert_eq!(link.counters().get("results_rejected"), 1);
    assert!(tether_core::for_model(&err).contains("did not match"), "{}", tether_core::for_model(&err));
}

#[tokio::test]
async fn hostile_schemas_are_refused_at_the_edge_and_at_core_and_nothing_is_fetched() {
    let edge = LiveEdge::start().await;
    let (url, hits) = counting_listener().await;
    let mut deep = json!({"type": "string"});
    for _ in 0..20 {
        deep = json!({"type": "object", "properties": {"a": deep}});
    }
    let tools = vec![
        tool("fine"),
        with_schemas("remote_ref", json!({"type": "object", "properties": {"a": {"$ref": url}}}), None),
        with_schemas("deep", deep, None),
        // Structurally fine, so the edge keeps it; core will not compile either.
        with_schemas("remote_meta", json!({"$schema": url, "type": "object"}), None),
        with_schemas(
            "backtracking",
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=a)(a+)+$"}}}),
            None,
        ),
    ];
    let (_dev, session) = edge.device(DeviceSpec::minimal(tools)).await;
    let link = edge.backend().await;
    let turn = Turn::begin(&link, &session, Some(&common::user("mira")), Budgets::default()).await;
    let manifest = turn.manifest().unwrap();
    let dropped: Vec<_> = manifest.dropped.iter().map(|d| (d.name.as_str(), d.reason)).collect();
    let rejected = DropReason::SchemaRejected;
    assert_eq!(
        dropped,
        [("remote_ref", rejected), ("deep", rejected), ("remote_meta", rejected), ("backtracking", rejected)],
        "the edge lists no tool it cannot gate"
    );
    let listed: Vec<_> = turn.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(listed, ["client__fine"]);
    assert_eq!(link.counters().get("schemas_refused"), 0, "nothing reached core that it had to refuse");
    assert_never_contacted(&url, &hits).await;
}

/// A server-side source with whatever schemas the test gives it.
#[derive(Debug)]
struct Declares(Vec<ToolDeclaration>);

impl tether_core::ToolSource for Declares {
    fn id(&self) -> &str {
        "declares"
    }
    fn posture(&self) -> tether_core::AuthPosture {
        tether_core::AuthPosture::VerifiesCredential
    }
    fn latency(&self) -> tether_core::LatencyClass {
        tether_core::LatencyClass::Interactive
    }
    fn tools(&self) -> Vec<ToolDeclaration> {
        self.0.clone()
    }
    fn call<'a>(
        &'a self,
        _: &'a str,
        _: Value,
        _: tether_core::CallContext<'a>,
    ) -> futures::future::BoxFuture<
        'a,
        Result<tether_contract::mcp::CallToolResult, tether_contract::WireError>,
    > {
        Box::pin(async { Ok(tether_contract::mcp::CallToolResult::default()) })
    }
}

/// Core alone, with no edge in front of it: schemas that point at a listener
/// (a remote `$ref`, a remote `$schema`, in input and output schemas) are
/// refused at registration, and the listener is never contacted.
#[tokio::test]
async fn core_never_fetches_a_schema_a_server_side_source_points_at() {
    let (url, hits) = counting_listener().await;
    let object_with_remote_ref = json!({"type": "object", "properties": {"a": {"$ref": url}}});
    let cases = [
        with_schemas("input_ref", object_with_remote_ref.clone(), None),
        with_schemas("input_meta", json!({"$schema": url, "type": "object"}), None),
        with_schemas("input_root_ref", json!({"$ref": url}), None),
        with_schemas("output_ref", json!({"type": "object"}), Some(object_with_remote_ref)),
        with_schemas("output_meta", json!({"type": "object"}), Some(json!({"$schema": url}))),
    ];
    for declaration in cases {
        let name = declaration.name.clone();
        let mut registry = tether_core::Registry::new();
        let refused = registry.register(Arc::new(Declares(vec![declaration])));
        assert!(matches!(refused, Err(tether_core::RegistryError::Schema { .. })), "{name}: {refused:?}");
    }
    assert_never_contacted(&url, &hits).await;
}
