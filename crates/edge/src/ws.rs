//! Socket settings and the one writer loop every link uses.
//!
//! Sockets are configured deliberately: tungstenite's message and frame limits
//! sit at the transport ceiling (so an oversized frame is refused before it is
//! buffered whole), and the read buffer is 4 KiB instead of 128 KiB, which is
//! zero-filled before every read (tungstenite-rs #547).
//!
//! Writes are batched: the writer takes every frame already queued (up to
//! [`WRITE_BATCH`]), buffers them, and flushes once — one `send` syscall
//! for a burst instead of one per frame, and nothing waits for more to come.

use futures::{Sink, SinkExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;

use tether_contract::Caps;

/// Read buffer per socket; most frames fit, larger ones grow it.
pub const READ_BUFFER: usize = 4 * 1024;
/// Bytes buffered before tungstenite writes on its own; the writer flushes sooner.
pub const WRITE_BUFFER: usize = 16 * 1024;
/// Most frames written per flush, so one busy socket's burst stays short.
pub const WRITE_BATCH: usize = 64;

/// The WebSocket configuration for every tether socket under `caps`.
pub fn ws_config(caps: &Caps) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_message_size(Some(caps.transport_ceiling))
        .max_frame_size(Some(caps.transport_ceiling))
}

/// One thing to put on a socket.
#[derive(Debug)]
pub enum Outbound {
    /// A JSON-RPC frame.
    Text(String),
    /// A liveness probe; any frame back proves the peer is there.
    Ping,
    /// A close frame; nothing is written after it.
    Close(CloseCode, &'static str),
}

/// Writes queued frames until a close is written, the queue ends, or `closed`
/// fires (then the queue is drained and `close_code()` is sent).
pub async fn write_loop<S>(
    mut sink: S,
    mut queue: mpsc::Receiver<Outbound>,
    closed: CancellationToken,
    close_code: impl Fn() -> (CloseCode, &'static str),
) -> Result<(), WsError>
where
    S: Sink<Message, Error = WsError> + Unpin,
{
    loop {
        let next = tokio::select! {
            biased;
            next = queue.recv() => next,
            _ = closed.cancelled() => {
                while let Ok(Outbound::Text(text)) = queue.try_recv() {
                    sink.feed(Message::text(text)).await?;
                }
                let (code, reason) = close_code();
                return send_close(&mut sink, code, reason).await;
            }
        };
        let mut item = next;
        for _ in 0..WRITE_BATCH {
            match item {
                Some(Outbound::Text(text)) => sink.feed(Message::text(text)).await?,
                Some(Outbound::Ping) => sink.feed(Message::Ping(Vec::new().into())).await?,
                Some(Outbound::Close(code, reason)) => return send_close(&mut sink, code, reason).await,
                None => {
                    let (code, reason) = close_code();
                    return send_close(&mut sink, code, reason).await;
                }
            }
            match queue.try_recv() {
                Ok(more) => item = Some(more),
                Err(_) => break,
            }
        }
        sink.flush().await?;
    }
}

/// Sends a close frame and closes the sink (the peer closing first is no error).
pub(crate) async fn send_close<S>(sink: &mut S, code: CloseCode, reason: &'static str) -> Result<(), WsError>
where
    S: Sink<Message, Error = WsError> + Unpin,
{
    let frame = CloseFrame { code, reason: reason.into() };
    match sink.send(Message::Close(Some(frame))).await {
        Ok(()) | Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => {}
        // The peer closed first: the WebSocket layer queued its reply (echoing
        // the peer's code, or 1002 for a forbidden one); closing flushes it.
        Err(WsError::Protocol(ProtocolError::SendAfterClosing)) => {}
        Err(e) => return Err(e),
    }
    let _ = sink.close().await;
    Ok(())
}
