//! The MCP endpoint (`/mcp`) with the official clients nobody here wrote: the
//! Python `mcp` package (2.3.0; both the 2025-11-25 handshake and 2026-07-28)
//! and the TypeScript `@modelcontextprotocol/sdk` (1.32.2; 2025-11-25),
//! against a real edge on 127.0.0.1:0 with the gateway mounted as
//! `tether serve` mounts it. Each client runs a scenario in its own process
//! (`tests/mcp-servers/python/client_checks.py`, `tests/mcp-servers/ts_client.mjs`)
//! and prints what it observed; the device side is observed here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::{test_config, wait_until, LiveEdge};
use tether_edge::{Edge, EdgeConfig};
use tether_gateway::{Gateway, GatewayConfig};
use tether_harness::device::{task_tool, tool};
use tether_harness::{Behavior, DeviceSpec, SimDevice, SimHandle};

/// An edge serving `/mcp` on its own port, as `tether serve` does.
struct McpEdge {
    edge: LiveEdge,
    gateway: Gateway,
    mcp: String,
}

impl McpEdge {
    async fn start() -> McpEdge {
        McpEdge::start_with(test_config()).await
    }

    async fn start_with(config: EdgeConfig) -> McpEdge {
        let issuer = config.identity.as_ref().and_then(|idp| idp.issuer.clone());
        let budgets = config.budgets;
        let edge = Edge::bind(config).await.unwrap();
        let addr = edge.local_addr().unwrap();
        let gateway_config = GatewayConfig { issuer, budgets, ..GatewayConfig::default() };
        let (gateway, end) = Gateway::in_process(gateway_config);
        edge.attach_backend("tether-mcp", end.answers, end.requests);
        let edge =
            edge.mount(gateway.router(), |r| r.extensions().get::<tether_gateway::Authenticated>().is_some());
        let (hub, shutdown, drain) = (edge.hub(), edge.shutdown_token(), edge.drain_token());
        let task = Some(tokio::spawn(edge.run()));
        let live = LiveEdge { url: format!("ws://{addr}"), hub, shutdown, drain, task };
        McpEdge { edge: live, gateway, mcp: format!("http://{addr}/mcp") }
    }

    /// A device for `sub`, listed and callable.
    async fn device(&self, sub: &str, spec: DeviceSpec) -> (SimHandle, String) {
        let mut device =
            SimDevice::connect(&self.edge.url, &self.edge.client_token(sub), spec).await.unwrap();
        let session = device.ready().await.unwrap();
        (device, session)
    }
}

/// An official MCP client, run as its own process.
#[derive(Debug, Clone, Copy)]
enum Sdk {
    /// Python `mcp`, the 2025-11-25 initialize handshake.
    PythonHandshake,
    /// Python `mcp`, `server/discover` and 2026-07-28.
    PythonModern,
    /// TypeScript `@modelcontextprotocol/sdk`.
    TypeScript,
}

const ALL: [Sdk; 3] = [Sdk::PythonHandshake, Sdk::PythonModern, Sdk::TypeScript];

impl Sdk {
    fn command(self) -> tokio::process::Command {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut cmd = match self {
            Sdk::PythonHandshake | Sdk::PythonModern => {
                let mut cmd = tokio::process::Command::new(common::python());
                let mode = if matches!(self, Sdk::PythonHandshake) { "legacy" } else { "auto" };
                cmd.arg(format!("{root}/tests/mcp-servers/python/client_checks.py")).arg(mode);
                cmd
            }
            Sdk::TypeScript => {
                let mut cmd = tokio::process::Command::new("node");
                cmd.arg(format!("{root}/tests/mcp-servers/ts_client.mjs"));
                cmd
            }
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        cmd
    }

    /// Runs one scenario to completion (bounded) and returns what the client observed.
    async fn observe(self, scenario: &str, url: &str, token: &str, args: &[&str]) -> Value {
        let child = self.command().arg(scenario).arg(url).arg(token).args(args).spawn().unwrap();
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("{self:?} {scenario} did not finish within 60 s"))
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line =
            stdout.lines().last().unwrap_or_else(|| panic!("{self:?} {scenario}: no output\n{stderr}"));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{self:?} {scenario}: {e}: {line}\n{stderr}"))
    }
}

/// The tool names an observation carries (`tools`: declarations or bare names).
fn names(listed: &Value) -> Vec<String> {
    let tools = listed["tools"].as_array().unwrap_or_else(|| panic!("no tools in {listed}"));
    tools.iter().map(|t| t.get("name").unwrap_or(t).as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_clients_list_and_call_with_results_intact_and_is_error_sentences() {
    let mcp = McpEdge::start().await;
    let (_device, _session) = mcp.device("mira", DeviceSpec::fieldkit()).await;
    let mira = common::user("mira");
    let declared = DeviceSpec::fieldkit().tools;
    for sdk in ALL {
        let listed = sdk.observe("list", &mcp.mcp, &mira, &[]).await;
        let tools = names(&listed);
        assert_eq!(tools.len(), 10, "{sdk:?}: {listed}");
        assert!(tools.contains(&"client__print_label_v2".to_owned()), "{sdk:?}: namespaced names: {tools:?}");
        // Schemas arrive as the device declared them.
        let scan =
            listed["tools"].as_array().unwrap().iter().find(|t| t["name"] == "client__scan_barcode").unwrap();
        let original = declared.iter().find(|t| t.name == "scanBarcode").unwrap();
        assert_eq!(scan["inputSchema"], original.input_schema, "{sdk:?}");
        assert!(listed["instructions"].as_str().unwrap().contains("<client-context>"), "{sdk:?}: {listed}");

        let ok = sdk.observe("call", &mcp.mcp, &mira, &["client__get_visible_screen", "{}"]).await;
        assert_eq!(ok["isError"], json!(false), "{sdk:?}: {ok}");
        assert!(ok["structuredContent"].is_object(), "{sdk:?}: structured result intact: {ok}");

        let bad = sdk.observe("call", &mcp.mcp, &mira, &["client__scan_barcode", "{}"]).await;
        assert_eq!(bad["isError"], json!(true), "{sdk:?}: {bad}");
        assert!(
            bad["text"].as_str().unwrap().contains("fix them to match the tool's input schema"),
            "{sdk:?}: {bad}"
        );

        let gone = sdk.observe("call", &mcp.mcp, &mira, &["client__format_disk", "{}"]).await;
        assert_eq!(gone["isError"], json!(true), "{sdk:?}: {gone}");
        let said = gone["text"].as_str().unwrap();
        assert!(said.contains("not available") && said.contains("client__scan_barcode"), "{sdk:?}: {said}");
    }
    let calls = mcp.gateway.metrics().render();
    assert!(calls.contains("tether_mcp_calls_total{outcome=\"ok\"} 3"), "{calls}");
    assert!(calls.contains("tether_mcp_calls_total{outcome=\"invalid_arguments\"} 3"), "{calls}");
}

/// One raw POST to `/mcp` with `headers` (each ending in CRLF), read to the
/// end: for what the SDKs do not show (status, headers).
async fn post(url: &str, headers: &str, body: &str) -> String {
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// A raw 2025-11-25 `initialize`, with `authorization` as given.
async fn post_initialize(url: &str, authorization: Option<&str>) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    post(url, &auth, body).await
}

/// A raw POST on an existing MCP session.
async fn post_with(url: &str, token: &str, session: &str, body: &str) -> String {
    let headers = format!(
        "Authorization: Bearer {token}\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
    );
    post(url, &headers, body).await
}

/// A public route (the metadata) does not make a connection "authenticated";
/// an authenticated request does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_authenticated_request_frees_a_connections_stranger_slot() {
    let mcp = McpEdge::start().await;
    let addr = mcp.mcp.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let get = format!("GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    conn.write_all(get.as_bytes()).await.unwrap();
    let mut buf = [0u8; 4096];
    let n = conn.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert_eq!(mcp.edge.hub.unauthenticated_from(ip), 1, "the metadata is public: still a stranger");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let post = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n{body}",
        common::user("mira"),
        body.len()
    );
    conn.write_all(post.as_bytes()).await.unwrap();
    wait_until(|| mcp.edge.hub.unauthenticated_from(ip) == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_or_a_bad_one_is_401_and_another_users_devices_stay_invisible() {
    let mcp = McpEdge::start().await;
    let (device, mira_session) = mcp.device("mira", DeviceSpec::fieldkit()).await;
    for (token, why) in
        [("", "no token"), ("not-a-token", "garbage"), (&common::expired_user("mira"), "expired")]
    {
        for sdk in ALL {
            let connect = sdk.observe("connect", &mcp.mcp, token, &[]).await;
            assert_eq!(connect["ok"], json!(false), "{sdk:?}, {why}: {connect}");
            assert!(
                connect.to_string().contains("401"),
                "{sdk:?}, {why}: the client sees the 401: {connect}"
            );
        }
    }
    let refused = post_initialize(&mcp.mcp, None).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let metadata = format!(
        "resource_metadata=\"{}\"",
        mcp.mcp.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    );
    assert!(
        refused.to_ascii_lowercase().contains("www-authenticate: bearer") && refused.contains(&metadata),
        "{refused}"
    );
    assert!(post_initialize(&mcp.mcp, Some("Bearer x")).await.contains("error=\"invalid_token\""));
    // The backend's own service token is no user: it reaches nothing here either.
    let service = common::keys().issue("agent", "tether-backend", Duration::from_secs(600)).unwrap();
    assert!(post_initialize(&mcp.mcp, Some(&format!("Bearer {service}"))).await.starts_with("HTTP/1.1 401"));
    assert!(mcp.gateway.metrics().get("unauthenticated") >= 10);
    // An operator credential reads sessions for operations; it calls no tools.
    let operator = common::operator();
    let refused = post_initialize(&mcp.mcp, Some(&format!("Bearer {operator}"))).await;
    assert!(
        refused.starts_with("HTTP/1.1 403") && refused.contains("error=\"insufficient_scope\""),
        "{refused}"
    );
    assert_eq!(mcp.gateway.metrics().get("forbidden"), 1);

    // An MCP session answers only the user who opened it, whatever token comes with its id.
    let opened = post_initialize(&mcp.mcp, Some(&format!("Bearer {}", common::user("mira")))).await;
    let session = opened
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("mcp-session-id: ").map(|v| v.trim().to_owned()))
        .unwrap_or_else(|| panic!("no session id: {opened}"));
    let hijack = post_with(
        &mcp.mcp,
        &common::user("leo"),
        &session,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    )
    .await;
    assert!(hijack.starts_with("HTTP/1.1 404"), "{hijack}");
    assert_eq!(mcp.gateway.metrics().get("forbidden"), 2);
    let own = post_with(
        &mcp.mcp,
        &common::user("mira"),
        &session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert!(own.starts_with("HTTP/1.1 202"), "{own}");

    // leo is a real user with no devices: he sees no tools, and mira's are not his to call.
    let leo = common::user("leo");
    for sdk in ALL {
        assert_eq!(names(&sdk.observe("list", &mcp.mcp, &leo, &[]).await), Vec::<String>::new(), "{sdk:?}");
        let call = sdk.observe("call", &mcp.mcp, &leo, &["client__get_visible_screen", "{}"]).await;
        assert_eq!(call["isError"], json!(true), "{sdk:?}: {call}");
    }
    let pinned = format!("{}/sessions/{mira_session}", mcp.mcp);
    let connect = Sdk::PythonHandshake.observe("connect", &pinned, &leo, &[]).await;
    assert!(connect.to_string().contains("404"), "another user's session is not found: {connect}");
    assert!(device.observed.calls().is_empty(), "nothing reached mira's device");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_devices_get_labelled_names_and_one_device_can_be_pinned() {
    let mcp = McpEdge::start().await;
    let (fieldkit, _) = mcp.device("mira", DeviceSpec::fieldkit()).await;
    let (kiosk, kiosk_session) =
        mcp.device("mira", DeviceSpec::minimal(vec![tool("print_receipt"), tool("scan_barcode")])).await;
    let mira = common::user("mira");
    for sdk in ALL {
        let tools = names(&sdk.observe("list", &mcp.mcp, &mira, &[]).await);
        assert_eq!(tools.len(), 12, "{sdk:?}: {tools:?}");
        assert!(tools.contains(&"fieldkit_mobile__client__scan_barcode".to_owned()), "{sdk:?}: {tools:?}");
        assert!(tools.contains(&"sim_device__client__scan_barcode".to_owned()), "{sdk:?}: {tools:?}");
    }
    let call = Sdk::PythonModern
        .observe("call", &mcp.mcp, &mira, &["sim_device__client__print_receipt", "{}"])
        .await;
    assert_eq!(call["isError"], json!(false), "{call}");
    // A bare name offered by one device reaches it; offered by both, the model is told the full names.
    let bare = Sdk::TypeScript.observe("call", &mcp.mcp, &mira, &["client__print_receipt", "{}"]).await;
    assert_eq!(bare["isError"], json!(false), "{bare}");
    let ambiguous = Sdk::TypeScript
        .observe("call", &mcp.mcp, &mira, &["client__scan_barcode", "{\"symbologies\":[\"qr\"]}"])
        .await;
    assert_eq!(ambiguous["isError"], json!(true), "{ambiguous}");
    assert!(ambiguous["text"].as_str().unwrap().contains("sim_device__client__scan_barcode"), "{ambiguous}");
    assert_eq!(kiosk.observed.calls().len(), 2);
    assert!(fieldkit.observed.calls().is_empty());

    let pinned = format!("{}/sessions/{kiosk_session}", mcp.mcp);
    let tools = names(&Sdk::PythonHandshake.observe("list", &pinned, &mira, &[]).await);
    assert_eq!(tools, ["client__print_receipt", "client__scan_barcode"], "one device, its own names");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_swap_mid_turn_reaches_the_client_as_list_changed() {
    let mcp = McpEdge::start().await;
    // One user and device per client: a second navigation to the same screen
    // moves the seq over the same catalog, which is no list change at all.
    let mut devices = Vec::new();
    for (i, sdk) in ALL.into_iter().enumerate() {
        let user = format!("mira-{i}");
        devices.push(mcp.device(&user, DeviceSpec::fieldkit_app()).await);
        let seen = sdk
            .observe(
                "list_changed",
                &mcp.mcp,
                &common::user(&user),
                &["client__open_work_order", "{\"workOrderId\":\"WO-1182\"}"],
            )
            .await;
        assert_eq!(seen["notified"], json!(true), "{sdk:?}: {seen}");
        assert!(names(&seen).contains(&"client__add_work_note".to_owned()), "{sdk:?}: {seen}");
    }
    assert!(mcp.gateway.metrics().get("list_changed_sent") >= 3);
}

/// A device that goes away takes its tools away the same way: list_changed,
/// and the re-list no longer has them (the one left keeps its plain names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_disconnects_takes_its_tools_away_with_list_changed() {
    let mcp = McpEdge::start().await;
    let (_stays, _) = mcp.device("mira", DeviceSpec::fieldkit()).await;
    let mira = common::user("mira");
    for sdk in ALL {
        let leaving = DeviceSpec::minimal(vec![tool("bye")]).with("bye", Behavior::Disconnect);
        let (_leaves, _) = mcp.device("mira", leaving).await;
        let seen = sdk.observe("list_changed", &mcp.mcp, &mira, &["sim_device__client__bye", "{}"]).await;
        assert_eq!(seen["notified"], json!(true), "{sdk:?}: {seen}");
        let tools = names(&seen);
        assert_eq!(tools.len(), 10, "{sdk:?}: only the device that stayed: {tools:?}");
        assert!(
            tools.iter().all(|t| t.starts_with("client__")),
            "{sdk:?}: one device, plain names: {tools:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_cancelled_on_the_device() {
    let mcp = McpEdge::start().await;
    let spec = DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent);
    let (device, _) = mcp.device("mira", spec).await;
    let mira = common::user("mira");
    for (n, sdk) in ALL.into_iter().enumerate() {
        let seen = sdk.observe("cancel", &mcp.mcp, &mira, &["client__wait", "{}", "500"]).await;
        assert_eq!(seen["aborted"], json!(true), "{sdk:?}: {seen}");
        wait_until(|| device.observed.cancels().len() == n + 1).await;
        let reason = &device.observed.cancels()[n]["reason"];
        assert_eq!(
            reason,
            &json!("the caller cancelled this call"),
            "{sdk:?}: cancelled by the client, not the 7 s leg"
        );
    }
    assert_eq!(mcp.gateway.metrics().get("calls_cancelled"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_says_the_outcome_is_unknown_and_a_vanished_device_fails_at_once() {
    let mut config = test_config();
    config.budgets.tool_call = Duration::from_millis(800);
    config.budgets.client_answer = Duration::from_millis(400);
    let mcp = McpEdge::start_with(config).await;
    let spec = DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent);
    let (_device, _) = mcp.device("mira", spec).await;
    let mira = common::user("mira");
    for sdk in ALL {
        let seen = sdk.observe("call", &mcp.mcp, &mira, &["client__wait", "{}"]).await;
        assert_eq!(seen["isError"], json!(true), "{sdk:?}: {seen}");
        assert!(
            seen["text"].as_str().unwrap().contains("whether the action happened is unknown"),
            "{sdk:?}: {seen}"
        );
        assert!(seen["ms"].as_u64().unwrap() < 12_000, "{sdk:?}: {seen}");
    }

    // A device that disconnects mid-call fails the call at once, not at the 7 s leg.
    let spec = DeviceSpec::minimal(vec![tool("hold")]).with("hold", Behavior::Silent);
    let mcp = McpEdge::start().await;
    for sdk in ALL {
        let (device, session) = mcp.device("mira", spec.clone()).await;
        let pinned = format!("{}/sessions/{session}", mcp.mcp);
        let call = tokio::spawn({
            let mira = mira.clone();
            async move { sdk.observe("call", &pinned, &mira, &["client__hold", "{}"]).await }
        });
        wait_until(|| device.observed.calls().len() == 1).await;
        drop(device);
        let seen = call.await.unwrap();
        assert_eq!(seen["isError"], json!(true), "{sdk:?}: {seen}");
        assert!(seen["text"].as_str().unwrap().contains("disconnected"), "{sdk:?}: {seen}");
        assert!(seen["ms"].as_u64().unwrap() < 5_000, "{sdk:?}: failed at once, not at the leg: {seen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_devices_progress_reaches_the_mcp_client() {
    let mcp = McpEdge::start().await;
    let spec = DeviceSpec::minimal(vec![tool("sync")]).with("sync", Behavior::Progress { steps: 3 });
    let (_device, _) = mcp.device("mira", spec).await;
    let mira = common::user("mira");
    for sdk in ALL {
        let seen = sdk.observe("progress", &mcp.mcp, &mira, &["client__sync", "{}"]).await;
        assert_eq!(seen["isError"], json!(false), "{sdk:?}: {seen}");
        // Sorted: the Python SDK runs each progress callback in its own task, so
        // callbacks may interleave even though the stream carries them in order.
        let mut steps: Vec<(u64, u64, String)> = seen["progress"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let n = |v: &Value| v.as_f64().unwrap() as u64;
                (n(&p["progress"]), n(&p["total"]), p["message"].as_str().unwrap().to_owned())
            })
            .collect();
        steps.sort();
        let want: Vec<_> = (1..=3).map(|n| (n, 3, format!("step {n} of 3"))).collect();
        assert_eq!(steps, want, "{sdk:?}: {seen}");
    }
    assert_eq!(mcp.edge.hub.counters().get("progress_relayed"), 9);
}

/// A gateway whose edge is gone answers 503 with Retry-After, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_without_its_edge_answers_503_at_once() {
    let (gateway, end) = Gateway::in_process(GatewayConfig::default());
    drop(end);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(tether_gateway::serve(listener, gateway.router(), Duration::from_secs(5), stop.clone()));
    let answered = post_initialize(&url, Some(&format!("Bearer {}", common::user("mira")))).await;
    assert!(answered.starts_with("HTTP/1.1 503"), "{answered}");
    assert!(answered.to_ascii_lowercase().contains("retry-after: 1"), "{answered}");
    assert_eq!(gateway.metrics().get("edge_unavailable"), 1);
    stop.cancel();
}

/// The user's identity-provider token (RS256 against a JWKS) is verified for
/// the MCP client exactly as for the device; the metadata names the issuer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_provider_token_reaches_the_users_devices() {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let keys = format!("{}/proto-fixtures/test-keys", env!("CARGO_MANIFEST_DIR"));
    let mut idp = tether_edge::idp::IdpConfig::new(tether_edge::idp::JwksSource::File(
        format!("{keys}/rsa-a.jwks.json").into(),
    ));
    idp.issuer = Some("https://idp.test/".into());
    idp.client_audience = "tether-app".into();
    let mut config = test_config();
    config.identity = Some(idp);
    let mcp = McpEdge::start_with(config).await;
    let pem = std::fs::read_to_string(format!("{keys}/rsa-a.pem")).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let token = |sub: &str| {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("test-rsa-a".into());
        let claims = json!({"sub": sub, "aud": "tether-app", "iss": "https://idp.test/", "exp": now + 600, "iat": now});
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap()).unwrap()
    };
    let mut device = SimDevice::connect(&mcp.edge.url, &token("mira"), DeviceSpec::fieldkit()).await.unwrap();
    device.ready().await.unwrap();
    let listed = Sdk::PythonModern.observe("list", &mcp.mcp, &token("mira"), &[]).await;
    assert_eq!(names(&listed).len(), 10, "{listed}");
    assert_eq!(names(&Sdk::TypeScript.observe("list", &mcp.mcp, &token("leo"), &[]).await).len(), 0);

    let metadata = mcp.mcp.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");
    let addr = metadata.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let path = metadata.trim_start_matches("http://").trim_start_matches(addr.as_str()).to_owned();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let document: Value = serde_json::from_str(out.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(document["authorization_servers"], json!(["https://idp.test/"]));
    assert_eq!(document["resource"], json!(mcp.mcp));
}

/// A destructive tool over `/mcp`: a client that declared elicitation is asked
/// (form mode: `elicitation/create` on 2025-11-25, `input_required` on
/// 2026-07-28) and the call runs once only if its user accepts; a client that
/// did not is told, in the `isError` sentence, to ask the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_call_is_approved_by_the_mcp_clients_user_or_explained() {
    let mcp = McpEdge::start().await;
    let (device, _session) = mcp.device("mira", DeviceSpec::fieldkit()).await;
    let mira = common::user("mira");
    let submit = ["client__submit_form", r#"{"formId":"F-1"}"#];
    let sdk = Sdk::PythonHandshake;
    let submitted = || device.observed.calls().iter().filter(|c| c.name == "submitForm").count();

    let approved = sdk.observe("approve", &mcp.mcp, &mira, &[submit[0], submit[1], "accept"]).await;
    assert_eq!(approved["isError"], json!(false), "{approved}");
    let asked = approved["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{approved}");
    assert!(
        asked[0].as_str().unwrap().contains("client__submit_form")
            && asked[0].as_str().unwrap().contains("F-1")
    );
    assert_eq!(approved["receipt"]["approval"]["by"], "caller", "{approved}");
    assert_eq!(submitted(), 1);

    let declined = sdk.observe("approve", &mcp.mcp, &mira, &[submit[0], submit[1], "decline"]).await;
    assert_eq!(declined["isError"], json!(true), "{declined}");
    assert!(declined["text"].as_str().unwrap().contains("declined"), "{declined}");
    assert_eq!(submitted(), 1, "declined: nothing ran");

    // No elicitation declared: the model is told what to do, with the approval's id.
    let told = sdk.observe("call", &mcp.mcp, &mira, &submit).await;
    assert_eq!(told["isError"], json!(true), "{told}");
    let said = told["text"].as_str().unwrap();
    assert!(said.contains("needs the user's approval") && said.contains("ap-"), "{said}");
    assert_eq!(submitted(), 1);

    // A 2026-07-28 client is asked through input_required; its SDK puts the
    // form to its user and calls again with the answer.
    let modern = Sdk::PythonModern;
    let approved = modern.observe("approve", &mcp.mcp, &mira, &[submit[0], submit[1], "accept"]).await;
    assert_eq!(approved["isError"], json!(false), "{approved}");
    assert_eq!(approved["asked"].as_array().unwrap().len(), 1, "{approved}");
    assert!(approved["asked"][0].as_str().unwrap().contains("F-1"), "{approved}");
    assert_eq!(approved["receipt"]["approval"]["by"], "caller", "{approved}");
    assert_eq!(submitted(), 2);
    let declined = modern.observe("approve", &mcp.mcp, &mira, &[submit[0], submit[1], "decline"]).await;
    assert_eq!(declined["isError"], json!(true), "{declined}");
    assert!(declined["text"].as_str().unwrap().contains("declined"), "{declined}");
    assert_eq!(submitted(), 2, "declined: nothing ran");

    let counters = &mcp.gateway.metrics().counters;
    assert_eq!(counters.get("approvals_elicited"), 4);
    assert_eq!(counters.get("approvals_not_elicited"), 1);
}

/// A long-running device tool reached over `/mcp`: the gateway asks for a
/// task and follows it, so a short one answers its result, and one still
/// running after `task_wait` hands the model its id and how to wait again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_tool_is_followed_as_a_task_and_handed_off_when_it_outlasts_the_wait() {
    let mut config = test_config();
    config.budgets.task_wait = Duration::from_millis(1_500);
    let mcp = McpEdge::start_with(config).await;
    let spec = DeviceSpec::minimal(vec![task_tool("scan"), task_tool("survey")])
        .with("scan", Behavior::Task { after: Duration::from_millis(300) })
        .with("survey", Behavior::Task { after: Duration::from_secs(30) });
    let (_device, _) = mcp.device("mira", spec).await;
    let mira = common::user("mira");
    let sdk = Sdk::PythonHandshake;

    let seen = sdk.observe("call", &mcp.mcp, &mira, &["client__scan", "{}"]).await;
    assert_eq!(seen["isError"], json!(false), "{seen}");
    let text = seen["text"].as_str().unwrap();
    assert!(!text.contains("task"), "the task's own result, not a sentence about it: {seen}");

    let seen = sdk.observe("call", &mcp.mcp, &mira, &["client__survey", "{}"]).await;
    let text = seen["text"].as_str().unwrap();
    assert!(text.contains("still running") && text.contains("tether.dev/task"), "{seen}");
    assert!(seen["ms"].as_u64().unwrap() < 5_000, "handed off at the wait, not the task's end: {seen}");
    let counters = mcp.gateway.metrics();
    assert_eq!(counters.get("tasks_followed"), 2);
    assert_eq!(counters.get("tasks_handed_off"), 1);
}

/// An rmcp client that declared the 2026-07-28 tasks extension, over `/mcp` with `token`.
async fn tasks_client(
    url: &str,
    token: &str,
) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
    use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned());
    let info = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("t", "1"),
    );
    info.serve(StreamableHttpClientTransport::from_config(config)).await.unwrap()
}

/// Polls `tasks/get` (at the task's poll interval, bounded) until the task is final.
async fn settled(client: &rmcp::Peer<rmcp::RoleClient>, id: &str) -> rmcp::model::DetailedTask {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = client.get_task(rmcp::model::GetTaskParams::new(id.to_owned())).await.unwrap();
        if got.task.status().is_terminal() {
            return got.task;
        }
        assert!(tokio::time::Instant::now() < deadline, "task {id} still {:?} after 20 s", got.task.status());
        tokio::time::sleep(Duration::from_millis(got.task.task.poll_interval_ms.unwrap_or(100))).await;
    }
}

/// A client of the tasks extension gets the task itself, reads its outcome
/// with `tasks/get` (the result the call would have given inline), and stops
/// one with `tasks/cancel`, which reaches the device; nobody else reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_extension_client_gets_the_task_and_follows_it_with_get_and_cancel() {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, TaskPayload, TaskStatus,
    };
    let mut config = test_config();
    config.budgets.task_poll = Duration::from_millis(50);
    let mcp = McpEdge::start_with(config).await;
    let spec = DeviceSpec::minimal(vec![task_tool("scan"), task_tool("survey")])
        .with("scan", Behavior::Task { after: Duration::from_millis(300) })
        .with("survey", Behavior::Task { after: Duration::from_secs(30) });
    let (device, session) = mcp.device("mira", spec).await;
    let client = tasks_client(&mcp.mcp, &common::user("mira")).await;

    let started = tokio::time::Instant::now();
    let CallToolResponse::Task(made) =
        client.call_tool_once(CallToolRequestParams::new("client__scan")).await.unwrap()
    else {
        panic!("a tasks client gets the task")
    };
    assert!(started.elapsed() < Duration::from_millis(300), "answered before the work ended");
    let id = made.task.task_id.clone();
    assert!(id.ends_with(&format!("@{session}")), "{id}");
    assert_eq!(made.task.status, TaskStatus::Working);
    let done = settled(client.peer(), &id).await;
    let TaskPayload::Completed { result } = &done.payload else { panic!("{done:?}") };
    assert_ne!(result.get("isError"), Some(&json!(true)), "{result:?}");
    assert_eq!(
        result["_meta"][tether_contract::tasks::meta::RELATED_TASK]["taskId"],
        json!(id),
        "{result:?}"
    );
    assert!(
        !result["content"][0]["text"].as_str().unwrap().contains("task"),
        "the device's own result: {result:?}"
    );

    let CallToolResponse::Task(long) =
        client.call_tool_once(CallToolRequestParams::new("client__survey")).await.unwrap()
    else {
        panic!("a tasks client gets the task")
    };
    let long = long.task.task_id;
    // Another user, or an id this server never made, reads nothing.
    let noor = tasks_client(&mcp.mcp, &common::user("noor")).await;
    assert!(noor.get_task(GetTaskParams::new(long.clone())).await.is_err(), "noor reads mira's task");
    assert!(client.get_task(GetTaskParams::new("forged")).await.is_err());
    client.cancel_task(CancelTaskParams::new(long.clone())).await.unwrap();
    assert_eq!(settled(client.peer(), &long).await.status(), TaskStatus::Cancelled);
    wait_until(|| device.observed.task_cancels().len() == 1).await;
    assert_eq!(mcp.gateway.metrics().get("tasks_returned"), 2);
}

/// A stateless 2026-07-28 request (`tools/list` or `tools/call`), raw.
async fn post_stateless(url: &str, token: &str, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut headers = format!(
        "Authorization: Bearer {token}\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"
    );
    if let Some(name) = params["name"].as_str() {
        headers.push_str(&format!("Mcp-Name: {name}\r\n"));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let response = post(url, &headers, &body).await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{response}");
    // One JSON body for an answer with nothing before it.
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A stateless `tools/call` of the kiosk's `print_receipt` with no arguments.
async fn print_receipt(url: &str, token: &str) -> Value {
    post_stateless(url, token, "tools/call", json!({"name": "client__print_receipt", "arguments": {}})).await
}

/// `/mcp` remembers who a token is and the catalog its turn bound, so a
/// call is one round trip to the edge; a device coming online or going
/// away, or a catalog moving, is seen on the very next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_remembers_a_token_and_forgets_what_the_edge_changes() {
    let mcp = McpEdge::start().await;
    let (kiosk, _) = mcp.device("mira", DeviceSpec::minimal(vec![tool("print_receipt")])).await;
    let mira = common::user("mira");
    let listed = |v: &Value| -> Vec<String> {
        v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = post_stateless(&mcp.mcp, &mira, "tools/list", json!({})).await;
    assert_eq!(listed(&first), ["client__print_receipt"], "{first}");
    for _ in 0..2 {
        let call = print_receipt(&mcp.mcp, &mira).await;
        assert_eq!(call["result"]["content"][0]["text"], json!("print_receipt done"), "{call}");
    }
    assert_eq!(kiosk.observed.calls().len(), 2);
    assert_eq!(mcp.gateway.metrics().get("requests_remembered"), 2, "both calls came from memory");

    // A second device: its session opening is an edge event the memory heeds.
    let (scanner, _) = mcp.device("mira", DeviceSpec::minimal(vec![tool("scan_barcode")])).await;
    let both = post_stateless(&mcp.mcp, &mira, "tools/list", json!({})).await;
    assert_eq!(listed(&both).len(), 2, "the new device is listed at once: {both}");
    // It goes away again: so do its tools.
    scanner.disconnect().await;
    wait_until(|| mcp.edge.hub.session_count() == 1).await;
    let one = post_stateless(&mcp.mcp, &mira, "tools/list", json!({})).await;
    assert_eq!(listed(&one), ["client__print_receipt"], "{one}");
}

/// Arguments over the edge's transport ceiling refuse that one call with a
/// sentence; the in-process link stays up and the next call goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_call_is_refused_alone_and_the_door_stays_open() {
    let mcp = McpEdge::start().await;
    let (kiosk, _) = mcp.device("mira", DeviceSpec::minimal(vec![tool("print_receipt")])).await;
    let mira = common::user("mira");
    let huge = "x".repeat(mcp.edge.hub.config.caps.transport_ceiling + 1);
    let refused = post_stateless(
        &mcp.mcp,
        &mira,
        "tools/call",
        json!({"name": "client__print_receipt", "arguments": {"note": huge}}),
    )
    .await;
    assert_eq!(refused["result"]["isError"], json!(true), "{refused}");
    let said = refused["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    let limit =
        format!("request was larger than the {} byte limit", mcp.edge.hub.config.caps.transport_ceiling);
    assert!(said.contains(&limit), "the model is told why: {said}");
    let call = print_receipt(&mcp.mcp, &mira).await;
    assert_eq!(call["result"]["content"][0]["text"], json!("print_receipt done"), "{call}");
    assert_eq!(kiosk.observed.calls().len(), 1, "only the small call reached the device");
    assert_eq!(mcp.edge.hub.counters().get("oversized_frames"), 1);
}
