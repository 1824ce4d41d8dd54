//! Test helpers shared by the contract suite: edges over real loopback sockets
//! and over in-memory duplex streams, both stopped on drop.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::DuplexStream;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use tether_core::BackendLink;
use tether_edge::auth::Keys;
use tether_edge::{Edge, EdgeConfig, Hub};
use tether_harness::{DeviceSpec, SimDevice, SimHandle};

pub mod processes;
pub mod source;

/// The fixed secret every test edge uses.
pub const SECRET: &str = "tether-test-secret-0123456789abcdef";

pub fn keys() -> Keys {
    Keys::from_secret(SECRET.as_bytes()).unwrap()
}

/// A user credential for `sub` (what a backend passes as the turn's `_meta.credential`).
pub fn user(sub: &str) -> String {
    keys().issue(sub, "tether-client", Duration::from_secs(600)).unwrap()
}

/// An operator credential: reads every session (`tether sessions`, `tether inspect`).
pub fn operator() -> String {
    keys().issue("ops", tether_contract::AUD_OPERATOR, Duration::from_secs(600)).unwrap()
}

/// A user credential for `sub` that expired an hour ago.
pub fn expired_user(sub: &str) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = tether_edge::auth::Claims {
        sub: sub.into(),
        aud: "tether-client".into(),
        exp: now - 3600,
        nbf: now - 7200,
        iat: now,
    };
    keys().sign(&claims).unwrap()
}

pub fn fixture(path: &str) -> Value {
    let full = format!("{}/proto-fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&full).unwrap()).unwrap()
}

pub fn test_config() -> EdgeConfig {
    EdgeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        jwt_secret: Some(SECRET.into()),
        data_dir: std::env::temp_dir().join("tether-tests-unused"),
        // Fleets in these tests share one principal; the limit has its own test.
        max_sessions_per_principal: 100_000,
        // A lost socket closes its session at once here; the resume tests set a grace of their own.
        resume_grace: Duration::ZERO,
        ..EdgeConfig::default()
    }
}

/// A real edge on 127.0.0.1:0; shuts down when dropped.
pub struct LiveEdge {
    pub url: String,
    pub hub: Arc<Hub>,
    pub shutdown: CancellationToken,
    pub drain: CancellationToken,
    pub task: Option<tokio::task::JoinHandle<()>>,
}

impl LiveEdge {
    pub async fn start() -> LiveEdge {
        Self::start_with(test_config()).await
    }

    pub async fn start_with(config: EdgeConfig) -> LiveEdge {
        let edge = Edge::bind(config).await.unwrap();
        let url = format!("ws://{}", edge.local_addr().unwrap());
        let hub = edge.hub();
        let shutdown = edge.shutdown_token();
        let drain = edge.drain_token();
        let task = Some(tokio::spawn(edge.run()));
        LiveEdge { url, hub, shutdown, drain, task }
    }

    pub fn client_token(&self, sub: &str) -> String {
        keys().issue(sub, "tether-client", Duration::from_secs(600)).unwrap()
    }

    /// An upgrade request for `/v1/client` carrying a valid device token.
    pub fn device_request(&self) -> tokio_tungstenite::tungstenite::handshake::client::Request {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = format!("{}/v1/client", self.url).into_client_request().unwrap();
        let bearer = format!("Bearer {}", self.client_token("mira")).parse().unwrap();
        req.headers_mut().insert("authorization", bearer);
        req
    }

    pub async fn device(&self, spec: DeviceSpec) -> (SimHandle, String) {
        let mut dev = SimDevice::connect(&self.url, &self.client_token("mira"), spec).await.unwrap();
        let session = dev.ready().await.unwrap();
        assert!(self.hub.session(&session).is_some(), "a ready device's session is listed");
        (dev, session)
    }

    pub async fn backend(&self) -> BackendLink {
        let token = keys().issue("agent", "tether-backend", Duration::from_secs(600)).unwrap();
        BackendLink::connect(&self.url, &token).await.unwrap()
    }
}

impl Drop for LiveEdge {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// An edge whose sockets are in-memory duplex pipes, for paused-time tests.
pub struct DuplexEdge {
    pub hub: Arc<Hub>,
    pub shutdown: CancellationToken,
}

const PIPE: usize = 256 * 1024;

impl DuplexEdge {
    pub fn new() -> DuplexEdge {
        Self::with_config(test_config())
    }

    pub fn with_config(config: EdgeConfig) -> DuplexEdge {
        DuplexEdge { hub: Hub::new(config, keys()), shutdown: CancellationToken::new() }
    }

    /// An in-memory pipe: the edge's end as a configured server socket, and the peer's raw end.
    pub async fn pipe(&self, size: usize) -> (WebSocketStream<DuplexStream>, DuplexStream) {
        let (edge_end, peer_end) = tokio::io::duplex(size);
        let cfg = tether_edge::ws::ws_config(&self.hub.config.caps);
        (WebSocketStream::from_raw_socket(edge_end, Role::Server, Some(cfg)).await, peer_end)
    }

    /// A device-side socket whose other end the edge serves as `/v1/client`.
    pub async fn raw_device(&self) -> WebSocketStream<DuplexStream> {
        self.raw_device_with_pipe(PIPE).await
    }

    /// [`Self::raw_device`] over a pipe of `size` bytes (small pipes model a device that stops reading).
    pub async fn raw_device_with_pipe(&self, size: usize) -> WebSocketStream<DuplexStream> {
        self.raw_device_full(size, None).await
    }

    /// A raw device whose credential expires after `expires_in`.
    pub async fn raw_device_full(
        &self,
        size: usize,
        expires_in: Option<Duration>,
    ) -> WebSocketStream<DuplexStream> {
        self.raw_device_announcing(size, expires_in, None).await
    }

    /// A raw device that announced `revision` at its upgrade.
    pub async fn raw_device_announcing(
        &self,
        size: usize,
        expires_in: Option<Duration>,
        revision: Option<tether_edge::revision::Revision>,
    ) -> WebSocketStream<DuplexStream> {
        let device = tether_edge::session::DeviceUpgrade {
            principal: "mira".into(),
            expires_in,
            announced: revision,
            resume: None,
        };
        self.raw_device_as(size, device).await
    }

    /// A raw device that arrived as `device` says (principal, resume token, …).
    pub async fn raw_device_as(
        &self,
        size: usize,
        device: tether_edge::session::DeviceUpgrade,
    ) -> WebSocketStream<DuplexStream> {
        let (edge_ws, device_end) = self.pipe(size).await;
        let (sink, stream) = edge_ws.split();
        tokio::spawn(tether_edge::session::serve_client(
            Arc::clone(&self.hub),
            sink,
            stream,
            device,
            self.shutdown.clone(),
        ));
        WebSocketStream::from_raw_socket(device_end, Role::Client, None).await
    }

    /// A simulated device connected through a duplex pipe, ready once the edge listed it.
    pub async fn device(&self, spec: DeviceSpec) -> (SimHandle, String) {
        let ws = self.raw_device().await;
        let mut dev = SimDevice::spawn(ws, spec);
        let session = dev.ready().await.unwrap();
        assert!(self.hub.session(&session).is_some(), "a ready device's session is listed");
        (dev, session)
    }

    /// A backend link over a duplex pipe.
    pub async fn backend(&self) -> BackendLink {
        let (edge_ws, backend_end) = self.pipe(PIPE).await;
        let (sink, stream) = edge_ws.split();
        tokio::spawn(tether_edge::backend::serve_backend(
            Arc::clone(&self.hub),
            sink,
            stream,
            "agent".into(),
            self.shutdown.clone(),
        ));
        BackendLink::from_stream(WebSocketStream::from_raw_socket(backend_end, Role::Client, None).await)
    }
}

impl Drop for DuplexEdge {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// How long [`wait_until`] waits before calling a condition unreachable: a
/// bound against hangs, not a timing claim (tests that claim "at once" measure
/// elapsed time themselves), so it is generous for a loaded machine.
pub const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// A backend link whose edge end the test drives by hand (a scripted edge
/// over an in-memory pipe), for core's side of the backend link.
pub async fn scripted_backend_edge() -> (Arc<BackendLink>, WebSocketStream<DuplexStream>) {
    let (client_end, edge_end) = tokio::io::duplex(1 << 20);
    let link =
        BackendLink::from_stream(WebSocketStream::from_raw_socket(client_end, Role::Client, None).await);
    (Arc::new(link), WebSocketStream::from_raw_socket(edge_end, Role::Server, None).await)
}

/// The next text frame on a scripted socket, as JSON (every frame, notifications included).
pub async fn next_frame(ws: &mut WebSocketStream<DuplexStream>) -> Value {
    loop {
        if let tokio_tungstenite::tungstenite::Message::Text(t) = ws.next().await.unwrap().unwrap() {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

/// Polls `cond` every millisecond until it holds; panics after [`WAIT_LIMIT`]
/// on the wall clock, or on the runtime's clock when time is paused.
#[allow(clippy::disallowed_types)] // the wall clock bounds a paused-time test too
pub async fn wait_until(mut cond: impl FnMut() -> bool) {
    let (wall, virtual_start) = (std::time::Instant::now(), tokio::time::Instant::now());
    while !cond() {
        assert!(
            wall.elapsed() < WAIT_LIMIT && virtual_start.elapsed() < WAIT_LIMIT,
            "condition not reached within {WAIT_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { std::cell::RefCell::new(None) };
}

/// Writes to the calling thread's capture buffer, if one is active.
struct ThreadWriter;

impl Write for ThreadWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(buf) = c.borrow().as_ref() {
                buf.lock().unwrap().extend_from_slice(b);
            }
        });
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capturing() -> bool {
    CAPTURE.with(|c| c.borrow().is_some())
}

/// Runs `f` with tracing captured into a string, every level from TRACE up
/// (current-thread runtimes only).
///
/// One global subscriber routes each thread's events to that thread's buffer:
/// per-thread subscribers (`set_default`) race on tracing's cached callsite
/// interest when tests run in parallel, and drop lines. Its filter is
/// dynamic (never cached per callsite), so threads that capture nothing pay
/// one thread-local read per event.
pub async fn capture_logs<F: Future>(f: F) -> (F::Output, String) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(|| ThreadWriter)
            .with_ansi(false)
            .with_filter(tracing_subscriber::filter::dynamic_filter_fn(|_, _| capturing()));
        let subscriber = tracing_subscriber::registry().with(layer);
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
    let buf = Arc::new(Mutex::new(Vec::new()));
    CAPTURE.with(|c| *c.borrow_mut() = Some(Arc::clone(&buf)));
    let out = f.await;
    CAPTURE.with(|c| *c.borrow_mut() = None);
    let text = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    (out, text)
}

/// A Python with `mcp` 2.3.0: `TETHER_TEST_PYTHON`, else `<repo>/.venv/bin/python`.
pub fn python() -> String {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let mut candidates = Vec::new();
            if let Ok(p) = std::env::var("TETHER_TEST_PYTHON") {
                candidates.push(p);
            }
            candidates.push(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python").display().to_string());
            let mut found = Vec::new();
            for candidate in &candidates {
                let probe = "import importlib.metadata as m, mcp.server.mcpserver; print(m.version('mcp'))";
                let out = std::process::Command::new(candidate).args(["-c", probe]).output();
                match out {
                    Ok(o) if o.status.success() => {
                        let version = String::from_utf8_lossy(&o.stdout).trim().to_owned();
                        if version == "2.3.0" {
                            return candidate.clone();
                        }
                        found.push(format!("{candidate}: mcp {version}"));
                    }
                    Ok(o) => found.push(format!("{candidate}: {}", String::from_utf8_lossy(&o.stderr).trim())),
                    Err(e) => found.push(format!("{candidate}: {e}")),
                }
            }
            panic!(
                "no Python with the MCP SDK (mcp==2.3.0) for the tests that run MCP servers ({}). Set it up from the repository root:\n  \
                 python3 -m venv .venv && .venv/bin/pip install -r tests/mcp-servers/python/requirements.txt\n\
                 or point TETHER_TEST_PYTHON at a Python that has it.",
                found.join("; ")
            )
        })
        .clone()
}

/// A plain-HTTP GET on loopback. reqwest is built without a default TLS
/// provider, and even plain HTTP needs one installed.
pub async fn http_get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::get(url).await
}

/// A stateless 2026-07-28 request to `{http}/mcp` with `meta` in its `_meta`; its JSON answer.
pub async fn mcp_stateless(http: &str, token: &str, method: &str, mut params: Value, meta: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "agent", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if let (Some(all), Value::Object(more)) = (params["_meta"].as_object_mut(), meta) {
        all.extend(more);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut request = reqwest::Client::new()
        .post(format!("{http}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = params["name"].as_str() {
        request = request.header("Mcp-Name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let response = request.json(&body).send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}
