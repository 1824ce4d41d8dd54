//! `tether bench`: a fixed, repeatable set of measurements of tether against
//! the bare relay ([`crate::relay`]) in the same run, on the same machine.
//!
//! Two drivers. The independent one ([`independent`]) runs devices
//! ([`fleet`]) and a raw-frame driver ([`driver`]) in processes of their
//! own, so the server runs hot and its cost shows. The through-core one
//! (this module) drives the server through tether-core from this process
//! with simulated devices beside it: it measures what a backend linking core
//! sees, and saturates before the server does. The server under test always
//! runs in its own process so its CPU time and memory can be read from `/proc`.

pub mod cluster;
pub mod driver;
pub mod fleet;
pub mod independent;

use crate::error::HarnessError;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::time::Instant;

use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::mcp::ToolDeclaration;
use tether_core::BackendLink;

use crate::device::{tool, Behavior, DeviceSpec, SimDevice, SimHandle};
use crate::faults::FaultMix;

/// What a bench run needs.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The `tether` binary (to spawn `serve` and `relay`).
    pub exe: PathBuf,
    /// Seconds per throughput measurement.
    pub seconds: u64,
    /// Sessions for the idle-memory measurement.
    pub idle_sessions: usize,
    /// Skip the 1,000-session rows and use fewer idle sessions.
    pub quick: bool,
    /// Only the independent driver's rows.
    pub independent_only: bool,
    /// Only idle memory and fail-fast (the rows a memory change moves).
    pub idle_only: bool,
    /// Only the MCP door beside the native link (independent rows).
    pub mcp_only: bool,
    /// Another build's `tether` whose `serve` is measured instead (devices,
    /// drivers and the relay stay this build's): a before/after in one run.
    pub server: Option<PathBuf>,
}

impl BenchConfig {
    /// The binary that runs `target`: `--server-exe` for tether, this build for the relay.
    pub fn exe_for(&self, target: Target) -> &PathBuf {
        match (target.is_tether(), &self.server) {
            (true, Some(server)) => server,
            _ => &self.exe,
        }
    }
}

/// The server under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Target {
    /// The bare relay with tungstenite's default buffers.
    BareDefault,
    /// The bare relay with a 4 KiB read buffer (the baseline).
    Bare,
    /// tether.
    Tether,
    /// tether through its MCP endpoint (`/mcp`), driven by the official Rust MCP client.
    TetherMcp,
}

impl Target {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Target::BareDefault => "bare (128 KiB buffers)",
            Target::Bare => "bare (4 KiB buffers)",
            Target::Tether => "tether",
            Target::TetherMcp => "tether via /mcp",
        }
    }

    pub(crate) fn is_tether(self) -> bool {
        matches!(self, Target::Tether | Target::TetherMcp)
    }
}

pub(crate) const SECRET: &str = "tether-bench-secret-0123456789abcdef";

pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
    pub(crate) pid: u32,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub(crate) fn start(exe: &PathBuf, target: Target) -> Result<Server, HarnessError> {
        let mut cmd = Command::new(exe);
        match target {
            Target::Tether | Target::TetherMcp => {
                let dir = std::env::temp_dir().join(format!("tether-bench-{}", std::process::id()));
                // The bench's devices share one principal; lift the per-principal limit.
                let config = dir.join("bench.toml");
                std::fs::create_dir_all(&dir).map_err(|e| HarnessError::io(dir.display().to_string(), e))?;
                std::fs::write(&config, "[limits]\nmax_sessions_per_principal = 1000000\n")
                    .map_err(|e| HarnessError::io(config.display().to_string(), e))?;
                cmd.args(["serve", "--listen", "127.0.0.1:0", "--config"])
                    .arg(config)
                    .arg("--data-dir")
                    .arg(dir);
                cmd.env("TETHER_JWT_SECRET", SECRET);
            }
            Target::Bare => {
                cmd.args(["relay", "--listen", "127.0.0.1:0"]);
            }
            Target::BareDefault => {
                cmd.args(["relay", "--listen", "127.0.0.1:0", "--default-buffers"]);
            }
        }
        cmd.env("RUST_LOG", "error").stdout(Stdio::piped()).stderr(Stdio::null()).stdin(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| HarnessError::io(format!("spawn {}", exe.display()), e))?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            BufReader::new(stdout)
                .read_line(&mut line)
                .map_err(|e| HarnessError::io(format!("read {}'s address", target.name()), e))?;
        }
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| HarnessError::Startup { server: target.name().to_owned(), line: line.clone() })?;
        let pid = child.id();
        Ok(Server { child, url: addr.to_owned(), pid })
    }

    pub(crate) fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid)
    }

    fn rss_bytes(&self) -> u64 {
        rss_bytes(self.pid)
    }
}

fn tokens() -> Result<(String, String), HarnessError> {
    // Minted here with the same secret the spawned edge is given.
    let keys = jwt::Signer::new(SECRET.as_bytes());
    Ok((keys.issue("bench-device", "tether-client")?, keys.issue("bench-driver", "tether-backend")?))
}

/// Mints HS256 tokens with the claims tether requires, so the harness needs no edge code.
/// Resident memory of process `pid`, in bytes; 0 when unreadable.
pub(crate) fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU time (user + system) of process `pid`, in seconds; 0 when unreadable.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat_cpu_ticks(&stat) as f64 / 100.0
}

/// utime + stime, fields 14 and 15 of a `/proc/PID/stat` line, in clock ticks
/// (100 Hz on Linux). Fields are counted by position: some are negative (a
/// process with no terminal has tpgid -1), so skipping what is not a `u64`
/// would shift every later field and read stime + cutime instead.
fn stat_cpu_ticks(stat: &str) -> u64 {
    // The name, field 2, may hold spaces: count from its closing ')', which is field 3's start.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let field =
        |n: usize| after.split_whitespace().nth(n - 3).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    field(14) + field(15)
}

#[cfg(test)]
mod stat_tests {
    use super::stat_cpu_ticks;

    #[test]
    fn cpu_ticks_count_fields_by_position_past_a_negative_tpgid() {
        // A daemon's line: tty_nr 0, tpgid -1; utime 700, stime 40, cutime 5, cstime 6.
        let line = "42 (tether serve) S 1 42 42 0 -1 4194304 73 0 0 0 700 40 5 6 20 0 9 0 3682853";
        assert_eq!(stat_cpu_ticks(line), 740);
    }
}

pub(crate) mod jwt {
    pub(crate) struct Signer(Vec<u8>);
    impl Signer {
        pub(crate) fn new(secret: &[u8]) -> Signer {
            Signer(secret.to_vec())
        }
        pub(crate) fn issue(&self, sub: &str, aud: &str) -> Result<String, jsonwebtoken::errors::Error> {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let claims =
                serde_json::json!({"sub": sub, "aud": aud, "nbf": now, "iat": now, "exp": now + 86_400});
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                &claims,
                &jsonwebtoken::EncodingKey::from_secret(&self.0),
            )
        }
    }
}

async fn connect_devices(
    url: &str,
    token: &str,
    n: usize,
    spec: &DeviceSpec,
    relay: bool,
) -> Vec<(SimHandle, String)> {
    let mut out = Vec::with_capacity(n);
    let mut pending = tokio::task::JoinSet::new();
    let mut started = 0;
    while out.len() < n {
        while started < n && pending.len() < 128 {
            let (url, token, spec) = (url.to_owned(), token.to_owned(), spec.clone());
            pending.spawn(async move {
                for _ in 0..5 {
                    if let Ok(mut dev) = SimDevice::connect(&url, &token, spec.clone()).await {
                        // The relay has no manifest to apply: its devices are ready once greeted.
                        let id = if relay { dev.session_id().await } else { dev.ready().await };
                        if let Some(id) = id {
                            return Some((dev, id));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                None
            });
            started += 1;
        }
        match pending.join_next().await {
            Some(Ok(Some(d))) => out.push(d),
            Some(_) => {}
            None => break,
        }
    }
    out
}

/// Waits until `user` (the devices' shared principal) sees `n` sessions listed.
async fn wait_listed(link: &BackendLink, user: &str, n: usize) {
    for _ in 0..600 {
        if link.sessions(user, Duration::from_secs(5)).await.map(|l| l.sessions.len() >= n).unwrap_or(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One throughput measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Server under test.
    pub target: Target,
    /// Connected sessions.
    pub sessions: usize,
    /// Calls in flight.
    pub in_flight: usize,
    /// Whether every result moved the seq (forcing a catalog re-read).
    pub reread: bool,
    /// Whether the tool declares a realistic input schema (the edge checks every call's arguments against it).
    pub checked: bool,
    /// Calls completed in the window.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
    /// Calls per second.
    pub calls_per_s: f64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// Server CPU (user + system) per completed call, µs.
    pub cpu_us_per_call: f64,
}

/// A realistic input schema (required fields, a pattern, a range, an enum)
/// and arguments that pass it: what the edge's argument gate costs per call.
fn checked_tool() -> (ToolDeclaration, Value) {
    let schema = json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
            "order": {"type": "string", "pattern": "^WO-[0-9]{3,6}$"},
            "mode": {"enum": ["scan", "photo", "manual"]},
            "note": {"type": "string", "maxLength": 200}
        },
        "required": ["n", "order", "mode"],
        "additionalProperties": false
    });
    (
        ToolDeclaration { input_schema: schema, ..tool("op") },
        json!({"order": "WO-1182", "mode": "scan", "note": "bench"}),
    )
}

async fn throughput(
    cfg: &BenchConfig,
    target: Target,
    sessions: usize,
    in_flight: usize,
    reread: bool,
    checked: bool,
) -> Result<Row, HarnessError> {
    let server = Server::start(cfg.exe_for(target), target)?;
    let (device_token, backend_token) = tokens()?;
    let (declaration, extra) = if checked { checked_tool() } else { (tool("op"), json!({})) };
    let extra: Arc<Value> = Arc::new(extra);
    let mut spec = DeviceSpec::minimal(vec![declaration]);
    spec.record_calls = false;
    if reread {
        spec.default_behavior = Behavior::Mixed(Arc::new(FaultMix::parse("navigate=1", 1)?));
    }
    let devices = connect_devices(&server.url, &device_token, sessions, &spec, !target.is_tether()).await;
    let ids: Arc<Vec<String>> = Arc::new(devices.iter().map(|(_, id)| id.clone()).collect());
    let link = Arc::new(
        BackendLink::connect(&server.url, &backend_token)
            .await
            .map_err(|source| HarnessError::Link { url: server.url.clone(), source })?,
    );
    if target.is_tether() {
        wait_listed(&link, &device_token, ids.len()).await;
    }
    let mcp = if target == Target::TetherMcp {
        Some(Arc::new(McpDriver::connect(&server.url, &device_token, &ids, in_flight).await?))
    } else {
        None
    };
    let name = if target.is_tether() { "client__op" } else { "op" };
    // The devices run as the device token's principal: it is also the turns' user credential.
    let credential: Arc<str> = Arc::from(device_token.as_str());
    let calls = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let warmup = Instant::now() + Duration::from_millis(500);
    let end = warmup + Duration::from_secs(cfg.seconds);
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..in_flight {
        let (link, ids, calls, errors) =
            (Arc::clone(&link), Arc::clone(&ids), Arc::clone(&calls), Arc::clone(&errors));
        let (credential, extra, mcp) = (Arc::clone(&credential), Arc::clone(&extra), mcp.clone());
        workers.spawn(async move {
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).ok();
            let mut i = w;
            loop {
                let now = Instant::now();
                if now >= end || ids.is_empty() {
                    break;
                }
                i = (i + 7919) % ids.len();
                let params = CallParams {
                    session: ids[i].clone(),
                    name: name.into(),
                    arguments: {
                        let mut a = (*extra).clone();
                        a["n"] = json!(i);
                        a
                    },
                    meta: CallMeta {
                        budget_ms: Some(12_000),
                        credential: Some(credential.to_string()),
                        ..CallMeta::default()
                    },
                };
                let ok = match &mcp {
                    Some(mcp) => mcp.call(w, params.arguments).await,
                    None => link.call(params, Duration::from_secs(12)).await.is_ok(),
                };
                if now >= warmup {
                    if ok {
                        calls.fetch_add(1, Ordering::Relaxed);
                        if let Some(h) = h.as_mut() {
                            let _ =
                                h.record(u64::try_from(now.elapsed().as_micros()).unwrap_or(u64::MAX).max(1));
                        }
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            h
        });
    }
    tokio::time::sleep_until(warmup).await;
    let cpu0 = server.cpu_seconds();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    while let Some(r) = workers.join_next().await {
        if let Ok(Some(h)) = r {
            let _ = all.add(h);
        }
    }
    let cpu = server.cpu_seconds() - cpu0;
    let n = calls.load(Ordering::Relaxed);
    if let Some(mcp) = mcp.and_then(Arc::into_inner) {
        mcp.close().await; // while the server still answers the sessions' DELETE
    }
    drop(devices);
    Ok(Row {
        target,
        sessions,
        in_flight,
        reread,
        checked,
        calls: n,
        errors: errors.load(Ordering::Relaxed),
        calls_per_s: n as f64 / cfg.seconds as f64,
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        cpu_us_per_call: if n > 0 { cpu * 1e6 / n as f64 } else { 0.0 },
    })
}

/// MCP clients on `/mcp`, one per worker, each pinned to one device
/// (`/mcp/sessions/{id}`): an agent serving one user's device, as most do.
struct McpDriver {
    clients: Vec<(rmcp::service::RunningService<rmcp::RoleClient, ()>, String)>,
}

impl McpDriver {
    async fn connect(
        edge: &str,
        token: &str,
        sessions: &[String],
        workers: usize,
    ) -> Result<McpDriver, HarnessError> {
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::ServiceExt;
        // reqwest needs a TLS provider chosen even for http://; ring, as the edge uses.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // A pooled client: rmcp's default opens a connection per request, which would
        // measure TCP setup instead of the endpoint.
        let http = reqwest::Client::builder().build().map_err(|e| HarnessError::Mcp(e.to_string()))?;
        let base = edge.replace("ws://", "http://");
        let mut clients = Vec::new();
        for w in 0..workers.min(sessions.len().max(1)) {
            let Some(session) = sessions.get(w % sessions.len().max(1)) else { break };
            let url = format!("{base}/mcp/sessions/{session}");
            let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token.to_owned());
            let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
            let client = ().serve(transport).await.map_err(|e| HarnessError::Mcp(e.to_string()))?;
            clients.push((client, session.clone()));
        }
        Ok(McpDriver { clients })
    }

    /// Ends every MCP session.
    async fn close(self) {
        for (client, _) in self.clients {
            let _ = client.cancel().await;
        }
    }

    /// One `tools/call` through the endpoint on worker `w`'s client; true when it succeeded.
    async fn call(&self, w: usize, arguments: Value) -> bool {
        let Some((client, _)) = self.clients.get(w % self.clients.len().max(1)) else { return false };
        let Value::Object(arguments) = arguments else { return false };
        let params = rmcp::model::CallToolRequestParams::new("client__op").with_arguments(arguments);
        matches!(client.call_tool(params).await, Ok(r) if r.is_error != Some(true))
    }
}

/// Idle memory per session.
#[derive(Debug, Clone, Serialize)]
pub struct Idle {
    /// Server under test.
    pub target: Target,
    /// Sessions connected.
    pub sessions: usize,
    /// RSS growth divided by sessions, bytes.
    pub bytes_per_session: f64,
}

async fn idle(cfg: &BenchConfig, target: Target) -> Result<Idle, HarnessError> {
    let server = Server::start(cfg.exe_for(target), target)?;
    let (device_token, backend_token) = tokens()?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = server.rss_bytes();
    let mut spec = DeviceSpec::minimal(vec![tool("op")]);
    spec.record_calls = false;
    let devices =
        connect_devices(&server.url, &device_token, cfg.idle_sessions, &spec, target != Target::Tether).await;
    if target == Target::Tether {
        let link = BackendLink::connect(&server.url, &backend_token)
            .await
            .map_err(|source| HarnessError::Link { url: server.url.clone(), source })?;
        wait_listed(&link, &device_token, devices.len()).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = server.rss_bytes();
    let n = devices.len();
    drop(devices);
    Ok(Idle { target, sessions: n, bytes_per_session: after.saturating_sub(before) as f64 / n.max(1) as f64 })
}

/// Time from a device socket closing to `channel_closed` at the backend.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FailFast {
    /// Calls in flight when their devices closed.
    pub calls: usize,
    /// 50th percentile, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// Calls that ended in `channel_closed`.
    pub channel_closed: usize,
}

async fn fail_fast(cfg: &BenchConfig) -> Result<FailFast, HarnessError> {
    let server = Server::start(cfg.exe_for(Target::Tether), Target::Tether)?;
    let (device_token, backend_token) = tokens()?;
    let mut spec = DeviceSpec::minimal(vec![tool("op")]);
    spec.record_calls = false;
    spec.default_behavior = Behavior::Silent;
    let n = 100;
    let devices = connect_devices(&server.url, &device_token, n, &spec, false).await;
    let link = Arc::new(
        BackendLink::connect(&server.url, &backend_token)
            .await
            .map_err(|source| HarnessError::Link { url: server.url.clone(), source })?,
    );
    wait_listed(&link, &device_token, devices.len()).await;
    let mut calls = Vec::new();
    for (_, id) in &devices {
        let link = Arc::clone(&link);
        let params = CallParams {
            session: id.clone(),
            name: "client__op".into(),
            arguments: json!({}),
            meta: CallMeta { credential: Some(device_token.clone()), ..CallMeta::default() },
        };
        calls.push(tokio::spawn(async move {
            let r = link.call(params, Duration::from_secs(12)).await;
            (r.err().map(|e| e.kind), Instant::now())
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut closed_at = Vec::new();
    for (dev, _) in &devices {
        closed_at.push(Instant::now());
        dev.disconnect().await;
    }
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut closed = 0;
    for (c, t0) in calls.into_iter().zip(closed_at) {
        if let Ok((kind, at)) = c.await {
            if kind == Some(tether_contract::ErrorKind::ChannelClosed) {
                closed += 1;
            }
            let _ = h.record(
                u64::try_from(at.saturating_duration_since(t0).as_micros()).unwrap_or(u64::MAX).max(1),
            );
        }
    }
    Ok(FailFast {
        calls: n,
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        channel_closed: closed,
    })
}

/// Everything a bench run measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Throughput under the independent driver (server, devices and driver in three processes).
    pub independent: Vec<independent::IndependentRow>,
    /// `/mcp` over the native link at 100 sessions / 64 in flight, when both were measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<independent::McpSummary>,
    /// Throughput rows under the through-core driver.
    pub rows: Vec<Row>,
    /// Idle memory per target.
    pub idle: Vec<Idle>,
    /// tether's fail-fast latency.
    pub fail_fast: FailFast,
}

/// Runs the fixed bench set.
pub async fn run(cfg: BenchConfig) -> Result<BenchReport, HarnessError> {
    if cfg.idle_only {
        let idle = idle_rows(&cfg).await?;
        eprintln!("bench: tether fail-fast");
        let fail_fast = fail_fast(&cfg).await?;
        return Ok(BenchReport { independent: Vec::new(), summary: None, rows: Vec::new(), idle, fail_fast });
    }
    let independent = independent::run(&cfg).await?;
    let summary = independent::McpSummary::of(&independent);
    if cfg.independent_only {
        return Ok(BenchReport {
            independent,
            summary,
            rows: Vec::new(),
            idle: Vec::new(),
            fail_fast: FailFast::default(),
        });
    }
    let session_counts: &[usize] = if cfg.quick { &[100] } else { &[100, 1000] };
    let mut rows = Vec::new();
    for &sessions in session_counts {
        for &in_flight in &[1usize, 64, 256] {
            for target in [Target::BareDefault, Target::Bare, Target::Tether] {
                eprintln!("bench: {} sessions={sessions} in_flight={in_flight}", target.name());
                rows.push(throughput(&cfg, target, sessions, in_flight, false, false).await?);
            }
        }
    }
    for target in [Target::Bare, Target::Tether] {
        eprintln!("bench: {} reread on every call", target.name());
        rows.push(throughput(&cfg, target, 100, 64, true, false).await?);
    }
    // The argument gate: a realistic schema the edge checks on every call, beside the same load without one.
    for target in [Target::Bare, Target::Tether] {
        eprintln!("bench: {} with a checked input schema", target.name());
        rows.push(throughput(&cfg, target, 100, 64, false, true).await?);
    }
    // The MCP endpoint beside the native backend link, same load, same run.
    for in_flight in [1, 64] {
        for target in [Target::Tether, Target::TetherMcp] {
            eprintln!("bench: {} sessions=100 in_flight={in_flight} (MCP endpoint pair)", target.name());
            rows.push(throughput(&cfg, target, 100, in_flight, false, false).await?);
        }
    }
    let idle = idle_rows(&cfg).await?;
    eprintln!("bench: tether fail-fast");
    let fail_fast = fail_fast(&cfg).await?;
    Ok(BenchReport { independent, summary, rows, idle, fail_fast })
}

/// Idle memory of both relays and tether.
async fn idle_rows(cfg: &BenchConfig) -> Result<Vec<Idle>, HarnessError> {
    let mut rows = Vec::new();
    for target in [Target::BareDefault, Target::Bare, Target::Tether] {
        eprintln!("bench: {} idle memory at {} sessions", target.name(), cfg.idle_sessions);
        rows.push(idle(cfg, target).await?);
    }
    Ok(rows)
}

impl BenchReport {
    /// The report as one table, with ratios against the bare relay (4 KiB) measured in the same run.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if !self.independent.is_empty() {
            out.push_str("Independent driver (devices, driver and server in three processes):\n\n");
            out.push_str(&independent::table(&self.independent));
            if let Some(s) = &self.summary {
                out.push_str(&format!(
                    "\n/mcp over the native link (100 sessions, 64 in flight): {:.2}x the calls/s, {:.2}x the server CPU per call\n",
                    s.mcp_over_native_calls_per_s, s.mcp_over_native_cpu_per_call
                ));
                if let (Some(floor), Some(over)) =
                    (s.bare_http_over_native_cpu_per_call, s.mcp_over_bare_http_cpu_per_call)
                {
                    out.push_str(&format!(
                        "the bare relay's HTTP door alone: {floor:.2}x the native link's server CPU per call; /mcp {over:.2}x that door's\n"
                    ));
                }
            }
        }
        if !self.rows.is_empty() {
            out.push_str(&self.through_core_table());
        }
        if !self.idle.is_empty() {
            out.push_str(&self.idle_table());
        }
        out
    }

    fn through_core_table(&self) -> String {
        let mut out =
            String::from("\nThrough tether-core (driver and simulated devices in the bench process):\n\n");
        out.push_str("| target | sessions | in flight | seq moves | schema | calls/s | × bare | p50 µs | p99 µs | CPU µs/call | × bare | errors |\n");
        out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let base = self.rows.iter().find(|b| {
                b.target == Target::Bare
                    && b.sessions == r.sessions
                    && b.in_flight == r.in_flight
                    && !b.reread
                    && b.checked == r.checked
            });
            let ratio = |x: f64, y: Option<f64>| {
                y.filter(|y| *y > 0.0).map_or("—".into(), |y| format!("{:.2}", x / y))
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {:.1} | {} | {} |\n",
                r.target.name(),
                r.sessions,
                r.in_flight,
                if r.reread { "every call" } else { "never" },
                if r.checked { "checked" } else { "object" },
                r.calls_per_s,
                ratio(r.calls_per_s, base.map(|b| b.calls_per_s)),
                r.p50_us,
                r.p99_us,
                r.cpu_us_per_call,
                ratio(r.cpu_us_per_call, base.map(|b| b.cpu_us_per_call)),
                r.errors,
            ));
        }
        out
    }

    fn idle_table(&self) -> String {
        let mut out = String::new();
        let bare = self.idle.iter().find(|i| i.target == Target::Bare).map(|i| i.bytes_per_session);
        out.push_str("\n| target | idle sessions | KiB per session | × bare |\n|---|---|---|---|\n");
        for i in &self.idle {
            let ratio =
                bare.filter(|b| *b > 0.0).map_or("—".into(), |b| format!("{:.2}", i.bytes_per_session / b));
            out.push_str(&format!(
                "| {} | {} | {:.1} | {} |\n",
                i.target.name(),
                i.sessions,
                i.bytes_per_session / 1024.0,
                ratio
            ));
        }
        let f = &self.fail_fast;
        out.push_str(&format!(
            "\nfail-fast (tether): {} calls in flight, {} got channel_closed; socket close → backend p50 {} µs, p99 {} µs\n",
            f.calls, f.channel_closed, f.p50_us, f.p99_us
        ));
        out
    }
}
