//! The bare relay: the ceiling of this stack, for `tether bench` to compare with.
//!
//! tokio-tungstenite alone, the same JSON-RPC shapes as tether (so the same
//! devices and the same backend client drive it), a session map and a pending
//! map — and nothing else: no auth, validation, budgets, namespacing, caps or
//! metrics. Devices get `initialize` (for their session id); backends may call
//! `sessions/list` and `tools/call {session, name, arguments}`.
//!
//! Its HTTP door is the floor of any HTTP door to a device on this stack:
//! hyper's HTTP/1.1 alone, `POST /mcp/sessions/{id}` with a JSON-RPC
//! `tools/call` body relayed to that device, its result the response body.
//! No MCP server, router, auth or turn.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use tether_contract::jsonrpc::{self, Frame};

/// Socket buffers the relay runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffers {
    /// tungstenite's defaults (128 KiB read buffer, zero-filled before every read).
    Default,
    /// A 4 KiB read buffer, as tether uses.
    Small,
}

#[derive(Default)]
struct Relay {
    devices: DashMap<String, mpsc::Sender<Message>>,
    /// relay id → (who waits, their id)
    pending: DashMap<u64, (Waiter, Value)>,
    next: AtomicU64,
}

impl Relay {
    /// Sends a backend's `tools/call` on to `device` under a relay id of its
    /// own, remembering who waits and under which id; the relay id.
    async fn forward(
        &self,
        device: &mpsc::Sender<Message>,
        waiter: Waiter,
        id: Value,
        params: &Value,
    ) -> u64 {
        let relay_id = self.next.fetch_add(1, Ordering::Relaxed) + 1_000_000_000;
        self.pending.insert(relay_id, (waiter, id));
        let call = json!({"name": params["name"], "arguments": params["arguments"]});
        let _ =
            device.send(Message::text(jsonrpc::request(&Value::from(relay_id), "tools/call", &call))).await;
        relay_id
    }
}

/// Who waits for a device's answer.
enum Waiter {
    /// A backend link: the answer goes to its queue as a frame.
    Link(mpsc::Sender<Message>),
    /// An HTTP request: the answer is its response body.
    Http(oneshot::Sender<String>),
}

/// Serves until the process ends.
pub async fn serve(listener: TcpListener, buffers: Buffers) {
    let relay = Arc::new(Relay::default());
    let config = match buffers {
        Buffers::Default => WebSocketConfig::default(),
        Buffers::Small => WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0),
    };
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(Arc::clone(&relay), stream, config));
    }
}

/// Binds `addr` and serves (for the `tether relay` command).
pub async fn bind_and_serve(addr: SocketAddr, buffers: Buffers) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(serve(listener, buffers));
    Ok(local)
}

// The upgrade callback's error type is fixed by tungstenite's `Callback` trait.
#[allow(clippy::result_large_err)]
async fn connection(relay: Arc<Relay>, stream: TcpStream, config: WebSocketConfig) {
    let mut method = [0u8; 4];
    if matches!(stream.peek(&mut method).await, Ok(4)) && &method == b"POST" {
        return http(relay, stream).await;
    }
    let mut path = String::new();
    let callback = |req: &Request, mut resp: Response| {
        path = req.uri().path().to_owned();
        if let Some(p) = req.headers().get("sec-websocket-protocol") {
            // Echo the first offered subprotocol, as a client that offers one requires.
            let first =
                p.to_str().unwrap_or_default().split(',').next().unwrap_or_default().trim().to_owned();
            if let Ok(v) = first.parse() {
                resp.headers_mut().insert("sec-websocket-protocol", v);
            }
        }
        Ok(resp)
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)).await else {
        return;
    };
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Message>(1024);
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if sink.send(m).await.is_err() {
                break;
            }
        }
    });
    if path == "/v1/client" {
        let session = relay.next.fetch_add(1, Ordering::Relaxed).to_string();
        relay.devices.insert(session.clone(), tx.clone());
        let init = json!({"protocolVersion": "2025-11-25", "_meta": {"tether.dev/session": session}});
        let _ = tx.send(Message::text(jsonrpc::request(&Value::from(0), "initialize", &init))).await;
        while let Some(Ok(msg)) = stream.next().await {
            let Message::Text(text) = msg else { continue };
            if let Ok(Frame::Response { id, outcome }) = jsonrpc::parse(text.as_str()) {
                let Some((_, (waiter, their_id))) = id.as_u64().and_then(|id| relay.pending.remove(&id))
                else {
                    continue;
                };
                // A backend link's result carries the session's seq, as tether's does.
                let frame = match (&waiter, outcome) {
                    (_, Err(error)) => json!({"jsonrpc": "2.0", "id": their_id, "error": error}).to_string(),
                    (Waiter::Link(_), Ok(result)) => {
                        jsonrpc::response(&their_id, &json!({"result": result, "seq": 0}))
                    }
                    (Waiter::Http(_), Ok(result)) => jsonrpc::response(&their_id, &result),
                };
                match waiter {
                    Waiter::Link(backend) => drop(backend.send(Message::text(frame)).await),
                    Waiter::Http(request) => drop(request.send(frame)),
                }
            }
        }
        relay.devices.remove(&session);
    } else {
        while let Some(Ok(msg)) = stream.next().await {
            let Message::Text(text) = msg else { continue };
            let Ok(Frame::Request { id, method, params }) = jsonrpc::parse(text.as_str()) else { continue };
            match method.as_str() {
                "tools/call" => {
                    let session = params["session"].as_str().unwrap_or_default().to_owned();
                    let device = relay.devices.get(&session).map(|d| d.clone());
                    let Some(device) = device else {
                        let err = json!({"code": -32006, "message": "no such session"});
                        let _ = tx
                            .send(Message::text(json!({"jsonrpc":"2.0","id":id,"error":err}).to_string()))
                            .await;
                        continue;
                    };
                    relay.forward(&device, Waiter::Link(tx.clone()), id, &params).await;
                }
                "sessions/list" => {
                    let sessions: Vec<Value> = relay
                        .devices
                        .iter()
                        .map(|d| json!({"session": d.key(), "principal": "", "seq": 0, "tools": 1}))
                        .collect();
                    let _ =
                        tx.send(Message::text(jsonrpc::response(&id, &json!({"sessions": sessions})))).await;
                }
                _ => {}
            }
        }
    }
}

/// One HTTP/1.1 connection: each `POST /mcp/sessions/{id}` relays its
/// `tools/call` to that device and answers with the device's result.
async fn http(relay: Arc<Relay>, stream: TcpStream) {
    let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let relay = Arc::clone(&relay);
        async move {
            let (status, body) = relay_post(&relay, request).await;
            let mut response = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
            *response.status_mut() = status;
            let json = http::HeaderValue::from_static("application/json");
            response.headers_mut().insert(http::header::CONTENT_TYPE, json);
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let io = hyper_util::rt::TokioIo::new(stream);
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
}

/// Relays one POST's `tools/call`: its status and body.
async fn relay_post(
    relay: &Relay,
    request: hyper::Request<hyper::body::Incoming>,
) -> (http::StatusCode, String) {
    use http_body_util::BodyExt;
    let session = request.uri().path().strip_prefix("/mcp/sessions/").unwrap_or_default().to_owned();
    let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
        return (http::StatusCode::BAD_REQUEST, String::new());
    };
    let text = String::from_utf8_lossy(&body);
    let Ok(Frame::Request { id, method, params }) = jsonrpc::parse(&text) else {
        return (http::StatusCode::BAD_REQUEST, String::new());
    };
    let device = relay.devices.get(&session).map(|d| d.clone());
    let (Some(device), "tools/call") = (device, method.as_str()) else {
        return (http::StatusCode::NOT_FOUND, String::new());
    };
    let (answer, answered) = oneshot::channel();
    let relay_id = relay.forward(&device, Waiter::Http(answer), id, &params).await;
    // A device that left never answers: the request ends at tether's per-tool budget.
    let budget = tether_contract::Budgets::default().per_tool;
    match tokio::time::timeout(budget, answered).await {
        Ok(Ok(body)) => (http::StatusCode::OK, body),
        Ok(Err(_)) => (http::StatusCode::BAD_GATEWAY, String::new()),
        Err(_) => {
            relay.pending.remove(&relay_id);
            (http::StatusCode::GATEWAY_TIMEOUT, String::new())
        }
    }
}
