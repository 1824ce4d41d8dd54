//! The bare relay: the ceiling of this stack, for `tether bench` to compare with.
//!
//! tokio-tungstenite alone, the same JSON-RPC shapes as tether (so the same
//! devices and the same backend client drive it), a session map and a pending
//! map — and nothing else: no auth, validation, budgets, namespacing, caps or
//! metrics. Devices get `initialize` (for their session id); backends may call
//! `sessions/list` and `tools/call {session, name, arguments}`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
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
    /// relay id → (backend queue, backend id)
    pending: DashMap<u64, (mpsc::Sender<Message>, Value)>,
    next: AtomicU64,
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
                let Some((_, (backend, backend_id))) = id.as_u64().and_then(|id| relay.pending.remove(&id))
                else {
                    continue;
                };
                let frame = match outcome {
                    Ok(result) => jsonrpc::response(&backend_id, &json!({"result": result, "seq": 0})),
                    Err(error) => json!({"jsonrpc": "2.0", "id": backend_id, "error": error}).to_string(),
                };
                let _ = backend.send(Message::text(frame)).await;
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
                    let relay_id = relay.next.fetch_add(1, Ordering::Relaxed) + 1_000_000_000;
                    relay.pending.insert(relay_id, (tx.clone(), id));
                    let call = json!({"name": params["name"], "arguments": params["arguments"]});
                    let _ = device
                        .send(Message::text(jsonrpc::request(&Value::from(relay_id), "tools/call", &call)))
                        .await;
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
