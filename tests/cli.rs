//! The README walk-through, run with the real binary: serve, sim-device,
//! sessions, call, token. Loopback only, every child killed on drop.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tether");

use common::processes::Proc;

fn tether(data: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("TETHER_JWT_SECRET").env("TETHER_DATA_DIR", data).env("RUST_LOG", "warn");
    c
}

/// Spawns `args` and returns the first stdout line (within 30 s) and the process.
fn spawn_until_line(data: &Path, args: &[&str]) -> (String, Proc) {
    let mut child = tether(data).args(args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("no output line within 30 s");
    (line.trim().to_owned(), Proc(child))
}

/// Runs `cmd` to completion, killing it (and failing the test) past `limit`.
fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child =
        Proc(cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap());
    let tick = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while child.0.try_wait().unwrap().is_none() {
        assert!(waited < limit, "{cmd:?} did not finish within {limit:?}");
        std::thread::sleep(tick); // polling a child process: there is no event to wait on
        waited += tick;
    }
    let mut out = Output { status: child.0.wait().unwrap(), stdout: Vec::new(), stderr: Vec::new() };
    use std::io::Read;
    child.0.stdout.take().unwrap().read_to_end(&mut out.stdout).unwrap();
    child.0.stderr.take().unwrap().read_to_end(&mut out.stderr).unwrap();
    out
}

fn run(data: &Path, args: &[&str]) -> Output {
    tether(data).args(args).output().unwrap()
}

fn data_dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tether-cli-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn version_names_the_release_and_the_commit_it_was_built_from() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap();
    let want = format!("tether {} (commit {})\n", env!("CARGO_PKG_VERSION"), head.trim());
    assert_eq!(printed, want, "a build from this checkout names its commit");
}

#[test]
fn the_readme_walk_through_gets_a_call_through() {
    let data = data_dir("walk");
    let (listening, _edge) = spawn_until_line(&data, &["serve", "--listen", "127.0.0.1:0"]);
    let url = listening.strip_prefix("listening on ").unwrap().to_owned();
    assert!(url.starts_with("ws://127.0.0.1:"), "{listening}");

    let (session_line, _device) = spawn_until_line(&data, &["sim-device", "--edge", &url]);
    let session = session_line.strip_prefix("session ").unwrap().to_owned();

    let sessions = run(&data, &["sessions", "--edge", &url]);
    let listed = String::from_utf8_lossy(&sessions.stdout);
    assert!(sessions.status.success());
    assert!(
        listed.contains(&session) && listed.contains("principal=mira") && listed.contains("tools=10"),
        "{listed}"
    );

    let call = run(
        &data,
        &[
            "call",
            "--edge",
            &url,
            "--session",
            &session,
            "--tool",
            "client__scan_barcode",
            "--args",
            r#"{"symbologies":["qr"]}"#,
        ],
    );
    assert!(call.status.success(), "{}", String::from_utf8_lossy(&call.stderr));
    let result: serde_json::Value = serde_json::from_slice(&call.stdout).unwrap();
    let echo = &result["_meta"][tether_harness::device::ECHO_META];
    assert_eq!(echo["tool"], "scanBarcode", "the device got its own name");
    assert_eq!(echo["arguments"]["symbologies"][0], "qr");
    assert!(result["structuredContent"].is_object(), "a result matching the declared output schema");

    let inspect = run(&data, &["inspect", &session, "--edge", &url]);
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let shown = String::from_utf8_lossy(&inspect.stdout);
    assert!(shown.contains("client__scan_barcode") && shown.contains("<- scanBarcode"), "{shown}");
    assert!(shown.contains("<- print-label.v2"), "{shown}");
    assert!(shown.lines().any(|l| l.contains("client__scan_barcode") && l.contains(" ok ")), "{shown}");

    let missing = run(&data, &["call", "--edge", &url, "--session", &session, "--tool", "client__nope"]);
    assert!(!missing.status.success());
    let err: serde_json::Value = serde_json::from_slice(&missing.stdout).unwrap();
    assert_eq!(err["error"]["data"]["kind"], "tool_unavailable");
    assert!(err["for_model"].as_str().unwrap().contains("client__scan_barcode"));

    let bad_args =
        run(&data, &["call", "--edge", &url, "--session", &session, "--tool", "client__x", "--args", "{"]);
    assert!(!bad_args.status.success());
    assert!(String::from_utf8_lossy(&bad_args.stderr).contains("--args is not valid JSON"));

    // A destructive tool asks for the user's approval first; the CLI decides it as the user.
    let submit = |extra: &[&str]| {
        let mut argv = vec!["call", "--edge", &url, "--session", &session, "--tool", "client__submit_form"];
        argv.extend_from_slice(&["--args", r#"{"formId":"F-1"}"#]);
        argv.extend_from_slice(extra);
        run(&data, &argv)
    };
    let asked = submit(&[]);
    assert!(!asked.status.success());
    let err: serde_json::Value = serde_json::from_slice(&asked.stdout).unwrap();
    assert_eq!(err["error"]["data"]["kind"], "approval_required", "{err}");
    let id = err["error"]["data"]["approval"].as_str().unwrap().to_owned();
    let done = submit(&["--approval", &id, "--approve", "--key", "K-1"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let result: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(result["_meta"]["tether.dev/receipt"]["approval"]["id"], id.as_str());
    let inspect = run(&data, &["inspect", &session, "--edge", &url]);
    let shown = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        shown.lines().any(|l| l.contains("client__submit_form") && l.contains("key=K-1") && l.contains(&id)),
        "{shown}"
    );
    let _ = std::fs::remove_dir_all(&data);
}

/// README's "Connect any agent over MCP": `tether serve`, `tether sim-device`,
/// and each example agent (the official Python and TypeScript MCP clients)
/// gets its calls through, re-plans on an `isError` and hears the mid-turn change.
#[test]
fn the_agent_examples_get_calls_through_over_mcp() {
    let root = env!("CARGO_MANIFEST_DIR");
    let ts_agent = format!("{root}/examples/ts-agent/dist/agent.js");
    assert!(Path::new(&ts_agent).exists(), "build the TypeScript example first (scripts/test-deps does)");
    let data = data_dir("agents");
    // A blocking /mcp call waits 1 s for a task: the signature (2.5 s) outlasts it, so it is handed off and followed.
    std::fs::create_dir_all(&data).unwrap();
    let config = data.join("tether.toml");
    std::fs::write(&config, "[budgets]\ntask_wait_ms = 1000\n").unwrap();
    let config = config.to_str().unwrap().to_owned();
    let (listening, _edge) =
        spawn_until_line(&data, &["serve", "--listen", "127.0.0.1:0", "--config", config.as_str()]);
    let addr = listening.strip_prefix("listening on ws://").unwrap().to_owned();
    let mcp = format!("http://{addr}/mcp");
    let agents = [
        ("mira", common::python(), format!("{root}/examples/python-agent/agent.py")),
        ("leo", "node".to_owned(), ts_agent),
    ];
    for (user, program, script) in agents {
        // Each agent's user has one fresh device: its turn opens a work order and sees the tools change.
        let edge = format!("ws://{addr}");
        let (_, _device) = spawn_until_line(&data, &["sim-device", "--edge", &edge, "--sub", user]);
        let token = String::from_utf8(run(&data, &["token", "--sub", user, "--aud", "tether-client"]).stdout)
            .unwrap();
        let out = output_within(
            Command::new(&program).arg(&script).args(["--url", &mcp, "--token", token.trim()]),
            Duration::from_secs(120),
        );
        let said = String::from_utf8_lossy(&out.stdout);
        let why = format!("{program} {script}:\n{said}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{why}");
        assert!(said.contains("-> isError: The tool rejected the arguments"), "{why}");
        assert!(said.contains("-> ok: scanBarcode done"), "re-planned after the isError: {why}");
        assert!(said.contains("new: client__add_work_note"), "{why}");
        if script.ends_with("agent.py") {
            // The write asked for the user's approval, and ran once they agreed.
            assert!(said.contains("client__submit_form {\"formId\": \"WO-1182\"} -> isError: This action needs the user's approval"), "{why}");
            assert!(said.contains("call client__submit_form approved -> ok: submitForm done"), "{why}");
            // The signature outlasted the 1 s wait: handed off with its task, and followed to its end.
            assert!(said.contains("-> ok: This call started task"), "{why}");
            assert!(said.contains("still running; waiting for it again"), "{why}");
            assert!(
                said.contains("call client__collect_signature followed -> ok: collectSignature done"),
                "{why}"
            );
        }
        assert!(
            said.contains("-> ok: addWorkNote done") && said.trim_end().ends_with("turn complete"),
            "{why}"
        );
    }
    let _ = std::fs::remove_dir_all(&data);
}

/// `tether gateway`: the MCP endpoint apart from a private edge. The Python
/// agent gets its turn through it exactly as through the edge's own `/mcp`.
#[test]
fn the_gateway_serves_the_mcp_endpoint_apart_from_the_edge() {
    let data = data_dir("gateway");
    let (listening, _edge) = spawn_until_line(&data, &["serve", "--listen", "127.0.0.1:0"]);
    let edge = listening.strip_prefix("listening on ").unwrap().to_owned();
    let public = ["--public-url", "https://agents.example.com", "--issuer", "https://idp.example.com/"];
    let mut args = vec!["gateway", "--edge", edge.as_str(), "--listen", "127.0.0.1:0"];
    args.extend(public);
    let (serving, _gateway) = spawn_until_line(&data, &args);
    let mcp = serving
        .strip_prefix("MCP endpoint on ")
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .to_owned();
    assert!(mcp.starts_with("http://127.0.0.1:") && mcp.ends_with("/mcp"), "{serving}");
    let (_, _device) = spawn_until_line(&data, &["sim-device", "--edge", &edge]);
    let token =
        String::from_utf8(run(&data, &["token", "--sub", "mira", "--aud", "tether-client"]).stdout).unwrap();
    let agent = format!("{}/examples/python-agent/agent.py", env!("CARGO_MANIFEST_DIR"));
    let out = output_within(
        Command::new(common::python()).args([agent.as_str(), "--url", &mcp, "--token", token.trim()]),
        Duration::from_secs(120),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("-> ok: addWorkNote done") && said.trim_end().ends_with("turn complete"), "{said}");
    // Behind a proxy, the metadata names the public address and the identity provider.
    let gateway_addr = mcp.trim_start_matches("http://").trim_end_matches("/mcp");
    let metadata = http_get(gateway_addr, "/.well-known/oauth-protected-resource/mcp");
    let document: serde_json::Value =
        serde_json::from_str(metadata.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(document["resource"], "https://agents.example.com/mcp", "{metadata}");
    assert_eq!(document["authorization_servers"], serde_json::json!(["https://idp.example.com/"]));
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn token_is_signed_with_the_same_secret_the_edge_uses() {
    let data = data_dir("token");
    let out = run(&data, &["token", "--sub", "mira", "--aud", "tether-client", "--ttl", "1h"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).unwrap();
    let (keys, _) = tether_edge::auth::Keys::load(None, &data).unwrap();
    let claims = keys.verify(token.trim(), "tether-client").unwrap();
    assert_eq!(claims.sub, "mira");
    assert!(claims.exp - claims.nbf == 3600);
    let bad = run(&data, &["token", "--sub", "mira", "--aud", "everyone"]);
    assert!(!bad.status.success());
    let bad_ttl = run(&data, &["token", "--sub", "mira", "--aud", "tether-client", "--ttl", "soon"]);
    assert!(!bad_ttl.status.success());
    let _ = std::fs::remove_dir_all(&data);
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn counter(exposition: &str, name: &str) -> Option<u64> {
    let series = format!("tether_{name}_total ");
    exposition.lines().find_map(|l| l.strip_prefix(&series).and_then(|v| v.trim().parse().ok()))
}

#[test]
fn a_degraded_config_boots_counts_and_says_where() {
    let data = data_dir("config");
    std::fs::create_dir_all(&data).unwrap();
    let file = data.join("tether.toml");
    std::fs::write(
        &file,
        "[caps]\nmanifest_bytes = 99999\n[clients.kiosk]\nserver_name = \"k\"\nmax_tool = 1\n",
    )
    .unwrap();
    let file_arg = file.display().to_string();

    let check = run(&data, &["config", "check", &file_arg]);
    assert!(!check.status.success());
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(report.contains("tether.toml:1 [caps]: degraded:"), "{report}");
    assert!(
        report.contains("tether.toml:3 [clients.kiosk]: degraded:") && report.contains("max_tool"),
        "{report}"
    );

    let (listening, _edge) =
        spawn_until_line(&data, &["serve", "--config", &file_arg, "--listen", "127.0.0.1:0"]);
    let addr = listening.strip_prefix("listening on ws://").unwrap().to_owned();
    let metrics = http_get(&addr, "/metrics");
    assert_eq!(counter(&metrics, "config_errors"), Some(2), "{metrics}");

    std::fs::write(&file, "listen = \"nowhere\"\n").unwrap();
    let fatal = run(&data, &["serve", "--config", &file_arg]);
    assert!(!fatal.status.success(), "a bad listen address cannot degrade");
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn a_malformed_origin_allowlist_is_fatal_at_start_up() {
    let data = data_dir("origins");
    std::fs::create_dir_all(&data).unwrap();
    let file = data.join("tether.toml");
    // A string, not a list: guessing would mean allowing any origin.
    std::fs::write(&file, "allowed_origins = \"https://app.example.com\"\n").unwrap();
    let out = tether(&data)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&file)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the edge must not start");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening on"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("tether.toml:1") && said.contains("allowed_origins"), "{said}");
    let _ = std::fs::remove_dir_all(&data);
}

/// A served edge, a device whose tool never answers, and one call in flight
/// to it; returns the edge process, its address and the pending call.
struct CallInFlight {
    edge: Proc,
    addr: String,
    call: tokio::task::JoinHandle<Result<tether_contract::backend::CallResponse, tether_contract::WireError>>,
    _device: tether_harness::SimHandle,
    _link: std::sync::Arc<tether_core::BackendLink>,
}

async fn call_in_flight(data: &Path) -> CallInFlight {
    use tether_contract::backend::{CallMeta, CallParams};
    use tether_harness::{device::tool, Behavior, DeviceSpec, SimDevice};
    let (listening, edge) = spawn_until_line(data, &["serve", "--listen", "127.0.0.1:0"]);
    let url = listening.strip_prefix("listening on ").unwrap().to_owned();
    let (keys, _) = tether_edge::auth::Keys::load(None, data).unwrap();
    let hour = Duration::from_secs(3600);
    let user = keys.issue("mira", "tether-client", hour).unwrap();
    let spec = DeviceSpec::minimal(vec![tool("wait")]).with("wait", Behavior::Silent);
    let mut device = SimDevice::connect(&url, &user, spec).await.unwrap();
    let session = device.ready().await.unwrap();
    let backend = keys.issue("agent", "tether-backend", hour).unwrap();
    let link = std::sync::Arc::new(tether_core::BackendLink::connect(&url, &backend).await.unwrap());
    let meta = CallMeta { credential: Some(user), ..CallMeta::default() };
    let params = CallParams { session, name: "client__wait".into(), arguments: serde_json::json!({}), meta };
    let call = {
        let link = link.clone();
        tokio::spawn(async move { link.call(params, Duration::from_secs(12)).await })
    };
    while device.observed.calls().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let addr = url.trim_start_matches("ws://").to_owned();
    CallInFlight { edge, addr, call, _device: device, _link: link }
}

fn signal(p: &Proc, name: &str) {
    let status = Command::new("kill").args([&format!("-{name}"), &p.0.id().to_string()]).status().unwrap();
    assert!(status.success());
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn sigint_stops_at_once_and_fails_the_call_in_flight() {
    let data = data_dir("sigint");
    runtime().block_on(async {
        let mut f = call_in_flight(&data).await;
        signal(&f.edge, "INT");
        let err = f.call.await.unwrap().unwrap_err();
        assert_eq!(err.kind, tether_contract::ErrorKind::ChannelClosed, "{err:?}");
        assert_eq!(err.detail("reason"), Some(&serde_json::json!("shutdown")), "not drained: stopped");
        let status = f.edge.0.wait().unwrap();
        assert!(status.success(), "{status:?}");
    });
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn a_second_sigterm_stops_a_drain_at_once() {
    let data = data_dir("sigterm2");
    runtime().block_on(async {
        let mut f = call_in_flight(&data).await;
        signal(&f.edge, "TERM");
        // Draining: the call is held (its 7 s leg, the 12 s drain timeout), readiness is gone.
        while !http_get(&f.addr, "/readyz").contains(" 503 ") {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!f.call.is_finished(), "a drain lets the call in flight run");
        signal(&f.edge, "TERM");
        let err = f.call.await.unwrap().unwrap_err();
        assert_eq!(err.kind, tether_contract::ErrorKind::ChannelClosed, "{err:?}");
        assert_eq!(err.detail("reason"), Some(&serde_json::json!("shutdown")));
        let status = f.edge.0.wait().unwrap();
        assert!(status.success(), "{status:?}");
    });
    let _ = std::fs::remove_dir_all(&data);
}

/// Every call shape `tether bench` measures completes against a real edge
/// without one error: a bench that counted refusals as calls (an approval it
/// never got, a task it never followed) would measure nothing. The fleet and
/// the driver run in this process here; the bench runs them as processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bench_call_shape_completes_against_a_real_edge_without_errors() {
    use tether_harness::bench::driver::{self, DriverConfig, Shape};
    use tether_harness::bench::fleet::{self, FleetConfig};
    let data = data_dir("bench-shapes");
    std::fs::create_dir_all(&data).unwrap();
    let config = data.join("tether.toml");
    std::fs::write(&config, format!("jwt_secret = \"{}\"\n", common::SECRET)).unwrap();
    let config = config.to_str().unwrap().to_owned();
    let (listening, _edge) =
        spawn_until_line(&data, &["serve", "--listen", "127.0.0.1:0", "--config", &config]);
    let url = listening.strip_prefix("listening on ").unwrap().to_owned();
    let backend = common::keys().issue("bench-driver", "tether-backend", Duration::from_secs(600)).unwrap();
    for shape in [Shape::Plain, Shape::Keyed, Shape::Approved, Shape::Task, Shape::Mcp] {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cfg = FleetConfig {
            url: url.clone(),
            devices: 4,
            secret: common::SECRET.into(),
            relay: false,
            move_seq: false,
            digest: false,
            tasks: shape == Shape::Task,
            source: None,
        };
        let devices = tokio::spawn(fleet::run(cfg, move |sessions| {
            let _ = tx.send(sessions);
        }));
        let sessions = tokio::time::timeout(Duration::from_secs(10), rx).await.unwrap().unwrap();
        let cfg = DriverConfig {
            url: url.clone(),
            backend_token: backend.clone(),
            sessions,
            tool: "client__op".into(),
            links: 2,
            in_flight: 8,
            shape,
            warmup: Duration::from_millis(100),
            window: Duration::from_millis(400),
        };
        let report = driver::run(cfg, |_| {}).await.unwrap();
        assert!(report.calls > 10, "{shape:?}: {report:?}");
        assert_eq!(report.errors, 0, "{shape:?}: {report:?}");
        devices.abort();
    }
    let _ = std::fs::remove_dir_all(&data);
}

/// `tether soak --rolling` drives keyed load at a running edge (the ledger
/// counts the calls resent under their keys); without an edge it is refused.
#[test]
fn soak_rolling_rides_a_running_edge_and_asks_for_one() {
    let data = data_dir("soak-rolling");
    let refused = run(&data, &["soak", "--rolling", "--duration", "1s"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--edge"), "{refused:?}");

    let (listening, _edge) = spawn_until_line(&data, &["serve", "--listen", "127.0.0.1:0"]);
    let url = listening.strip_prefix("listening on ").unwrap().to_owned();
    let data_arg = data.display().to_string();
    let args = ["soak", "--edge", &url, "--data-dir", &data_arg, "--rolling", "--devices", "10"];
    let soak = output_within(
        tether(&data).args(args).args(["--duration", "2s", "--concurrency", "4", "--faults", "answer=100"]),
        Duration::from_secs(60),
    );
    let ledger = String::from_utf8_lossy(&soak.stderr);
    assert!(soak.status.success(), "{ledger}");
    assert!(ledger.contains("keyed calls resent") && ledger.contains("all invariants held"), "{ledger}");
}

/// `tether probe` (the image's HEALTHCHECK): exit 0 on /healthz's 200, and a
/// sentence and a failure on anything else.
#[test]
fn probe_passes_on_a_healthy_edge_and_says_why_it_fails() {
    let data = data_dir("probe");
    let (listening, _edge) = spawn_until_line(&data, &["serve", "--listen", "127.0.0.1:0"]);
    let base = listening.strip_prefix("listening on ").unwrap().replacen("ws://", "http://", 1);
    let healthy = run(&data, &["probe", "--url", &format!("{base}/healthz")]);
    assert!(healthy.status.success(), "{healthy:?}");
    assert!(run(&data, &["probe", "--url", &format!("{base}/readyz")]).status.success());

    let missing = run(&data, &["probe", "--url", &format!("{base}/no-such-probe")]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("404"), "{missing:?}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let refused = run(&data, &["probe", "--url", &format!("http://{closed}/healthz"), "--timeout", "1s"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains(&closed.to_string()), "{refused:?}");
    let https = run(&data, &["probe", "--url", "https://127.0.0.1:1/healthz"]);
    assert!(String::from_utf8_lossy(&https.stderr).contains("only http://"), "{https:?}");
}
