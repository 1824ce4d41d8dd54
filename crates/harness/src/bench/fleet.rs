//! The independent bench's devices: one process, one thread, raw frames.
//!
//! Each device holds its own principal (a real fleet has one user per
//! device), answers `initialize` and `tools/list`, and answers every call at
//! once with a fixed result that carries the seq — moved on every call when
//! asked, so the edge re-reads the catalog each time. With tasks, a call made
//! as a task answers its task at once and the edge's `tasks/result` at once. Nothing here goes
//! through tether-core or the simulated device: its cost stays off the
//! server's books and cannot be the bottleneck that hides the server's cost.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use tether_contract::mcp::method;
use tether_contract::tasks::method::TASKS_RESULT;

use super::jwt::Signer;
use crate::error::HarnessError;

/// Handshakes one fleet runs at once: under the edge's default limit of
/// unauthenticated connections per address (256).
const CONNECTING: usize = 128;

/// What the fleet process runs.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// `ws://host:port` of the server under test.
    pub url: String,
    /// Devices to connect.
    pub devices: usize,
    /// The server's HS256 secret, to mint one device token per principal.
    pub secret: String,
    /// The bare relay: ready once greeted (it has no manifest to apply).
    pub relay: bool,
    /// Move the seq on every call (the edge re-reads the catalog each time).
    pub move_seq: bool,
    /// Stamp a catalog digest beside the seq (the catalog never changes, so
    /// the edge re-stamps a moved seq without re-reading).
    pub digest: bool,
    /// Declare the tool task-capable and run a call made as a task as one:
    /// answer its task at once, and the edge's `tasks/result` with the result.
    pub tasks: bool,
    /// Loopback source address to dial from (127.0.0.x): each address has
    /// its own ~28,000 ephemeral ports, so large fleets spread over several.
    pub source: Option<std::net::IpAddr>,
}

/// One connected device: its session and the user credential calls to it carry.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct FleetSession {
    /// The session id the server gave.
    pub session: String,
    /// The device principal's `tether-client` token (also the turn's user credential).
    pub credential: String,
}

#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

/// Whether a call asks to run as a task.
#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    task: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct InitParams {
    #[serde(rename = "_meta")]
    meta: Option<InitMeta>,
}

#[derive(Deserialize)]
struct InitMeta {
    #[serde(rename = "tether.dev/session")]
    session: Option<String>,
}

/// Connects the fleet, hands every session to `ready` once all are callable,
/// then answers until the process is stopped.
pub async fn run(cfg: FleetConfig, ready: impl FnOnce(Vec<FleetSession>)) -> Result<(), HarnessError> {
    let signer = Signer::new(cfg.secret.as_bytes());
    let readied = Arc::new(AtomicUsize::new(0));
    let all_ready = Arc::new(Notify::new());
    // A fleet connects like a reconnect storm a server should survive: many at
    // once, but not more handshakes in flight than one address may hold.
    let connecting = Arc::new(tokio::sync::Semaphore::new(CONNECTING));
    let sessions = Arc::new(std::sync::Mutex::new(Vec::with_capacity(cfg.devices)));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..cfg.devices {
        let credential = signer.issue(&format!("bench-user-{i}"), "tether-client")?;
        let device = Device {
            url: cfg.url.clone(),
            credential,
            relay: cfg.relay,
            move_seq: cfg.move_seq,
            digest: cfg.digest,
            tasks: cfg.tasks,
            tasks_made: 0,
            source: cfg.source,
            seq: 1,
            total: cfg.devices,
            readied: Arc::clone(&readied),
            connecting: Arc::clone(&connecting),
            all_ready: Arc::clone(&all_ready),
            sessions: Arc::clone(&sessions),
        };
        tasks.spawn(device.run());
        // Connect in bounded bursts: a server's accept queue is not the thing measured.
        if i % 64 == 63 {
            tokio::task::yield_now().await;
        }
    }
    let notified = all_ready.notified();
    if readied.load(Ordering::Acquire) < cfg.devices {
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep(Duration::from_secs(300)) => {}
            Some(Err(e)) = tasks.join_next() => {
                return Err(HarnessError::Peer(format!("a bench device failed: {e}")));
            }
        }
    }
    let list = std::mem::take(&mut *tether_rpc::lock(&sessions));
    ready(list);
    while let Some(done) = tasks.join_next().await {
        if let Ok(Err(e)) = done {
            return Err(e);
        }
    }
    Ok(())
}

struct Device {
    url: String,
    credential: String,
    relay: bool,
    move_seq: bool,
    digest: bool,
    tasks: bool,
    /// Tasks made so far (their ids).
    tasks_made: u64,
    source: Option<std::net::IpAddr>,
    seq: u64,
    total: usize,
    readied: Arc<AtomicUsize>,
    connecting: Arc<tokio::sync::Semaphore>,
    all_ready: Arc<Notify>,
    sessions: Arc<std::sync::Mutex<Vec<FleetSession>>>,
}

impl Device {
    /// The digest entry of `_meta`, when stamped: the fleet's catalog (one
    /// tool, no context) never changes, so neither does its digest.
    fn digest_meta(&self) -> &'static str {
        if self.digest {
            r#","tether.dev/digest":"bench-op-1""#
        } else {
            ""
        }
    }

    async fn run(mut self) -> Result<(), HarnessError> {
        let mut request = format!("{}/v1/client", self.url)
            .into_client_request()
            .map_err(|e| HarnessError::Peer(format!("bench device url: {e}")))?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", self.credential))
            .map_err(|e| HarnessError::Peer(format!("bench device token: {e}")))?;
        request.headers_mut().insert("authorization", bearer);
        let config = WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0);
        let mut handshake = Arc::clone(&self.connecting).acquire_owned().await.ok();
        let mut ws = None;
        for _ in 0..50 {
            match self.dial(request.clone(), config).await {
                Some(socket) => {
                    ws = Some(socket);
                    break;
                }
                None => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let Some(mut ws) = ws else {
            return Err(HarnessError::Peer(format!("bench device could not connect to {}", self.url)));
        };
        let mut session = None;
        while let Some(Ok(message)) = ws.next().await {
            let Message::Text(text) = message else { continue };
            let Ok(frame) = serde_json::from_str::<Incoming<'_>>(text.as_str()) else { continue };
            let Some(method_name) = frame.method.as_deref() else { continue };
            let reply = match (method_name, frame.id) {
                (method::TOOLS_CALL, Some(id)) if self.tasks && asks_task(frame.params) => {
                    self.tasks_made += 1;
                    Some(format!(
                        r#"{{"jsonrpc":"2.0","id":{},"result":{{"task":{{"taskId":"t{}","status":"working","ttl":60000}}}}}}"#,
                        id.get(),
                        self.tasks_made,
                    ))
                }
                (method::TOOLS_CALL | TASKS_RESULT, Some(id)) => {
                    if self.move_seq {
                        self.seq += 1;
                    }
                    Some(format!(
                        r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":"ok"}}],"_meta":{{"tether.dev/seq":{}{}}}}}}}"#,
                        id.get(),
                        self.seq,
                        self.digest_meta(),
                    ))
                }
                (method::TOOLS_LIST, Some(id)) => Some(format!(
                    r#"{{"jsonrpc":"2.0","id":{},"result":{{"tools":[{{"name":"op","description":"Answers at once.","inputSchema":{{"type":"object"}}{}}}],"_meta":{{"tether.dev/seq":{}{}}}}}}}"#,
                    id.get(),
                    if self.tasks { r#","execution":{"taskSupport":"optional"}"# } else { "" },
                    self.seq,
                    self.digest_meta(),
                )),
                (method::INITIALIZE, Some(id)) => {
                    session = frame
                        .params
                        .and_then(|p| serde_json::from_str::<InitParams>(p.get()).ok())
                        .and_then(|p| p.meta?.session);
                    let reply = format!(
                        r#"{{"jsonrpc":"2.0","id":{},"result":{{"protocolVersion":"2025-11-25","capabilities":{{"tools":{{"listChanged":true}}}},"serverInfo":{{"name":"bench-device","version":"1"}}}}}}"#,
                        id.get()
                    );
                    if self.relay {
                        ws.send(Message::text(reply)).await.ok();
                        self.ready(session.take());
                        drop(handshake.take());
                        continue;
                    }
                    Some(reply)
                }
                (method::MANIFEST_APPLIED, None) => {
                    self.ready(session.take());
                    drop(handshake.take());
                    None
                }
                (_, Some(id)) => Some(format!(
                    r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32601,"message":"not served"}}}}"#,
                    id.get()
                )),
                _ => None,
            };
            if let Some(reply) = reply {
                if ws.send(Message::text(reply)).await.is_err() {
                    break;
                }
            }
        }
        Ok(())
    }

    /// One WebSocket connection, from the fleet's source address when it has one.
    async fn dial(
        &self,
        request: tokio_tungstenite::tungstenite::handshake::client::Request,
        config: WebSocketConfig,
    ) -> Option<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>>
    {
        let Some(source) = self.source else {
            return tokio_tungstenite::connect_async_with_config(request, Some(config), true)
                .await
                .ok()
                .map(|(ws, _)| ws);
        };
        let addr: std::net::SocketAddr =
            self.url.trim_start_matches("ws://").trim_end_matches('/').parse().ok()?;
        let socket = tokio::net::TcpSocket::new_v4().ok()?;
        socket.bind(std::net::SocketAddr::new(source, 0)).ok()?;
        let stream = socket.connect(addr).await.ok()?;
        stream.set_nodelay(true).ok()?;
        let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
        tokio_tungstenite::client_async_with_config(request, stream, Some(config))
            .await
            .ok()
            .map(|(ws, _)| ws)
    }

    fn ready(&self, session: Option<String>) {
        let Some(session) = session else { return };
        tether_rpc::lock(&self.sessions).push(FleetSession { session, credential: self.credential.clone() });
        if self.readied.fetch_add(1, Ordering::AcqRel) + 1 == self.total {
            self.all_ready.notify_one();
        }
    }
}

/// Whether a `tools/call`'s params ask for a task.
fn asks_task(params: Option<&RawValue>) -> bool {
    params
        .and_then(|p| serde_json::from_str::<CallParams<'_>>(p.get()).ok())
        .is_some_and(|p| p.task.is_some())
}
