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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{Sink, SinkExt, StreamExt};
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

/// A device socket's bounded outbound queue (sending half).
///
/// Not tokio's `mpsc`: that one allocates a 32-slot block (about 1.5 KiB) per
/// channel up front, which an idle session — most sessions — never uses.
/// This one holds its small shared state and one node per queued frame, and
/// enforces its bound with a counter.
#[derive(Debug)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Outbound>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
}

/// The receiving half of an [`Outbox`], owned by the socket's writer.
#[derive(Debug)]
pub struct OutboxReader {
    rx: mpsc::UnboundedReceiver<Outbound>,
    queued: Arc<AtomicUsize>,
}

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueError {
    /// The queue holds `capacity` frames the writer has not taken yet.
    Full,
    /// The writer is gone (the socket ended).
    Closed,
}

/// A bounded outbound queue of `capacity` frames (at least one).
pub fn outbox(capacity: usize) -> (Outbox, OutboxReader) {
    let (tx, rx) = mpsc::unbounded();
    let queued = Arc::new(AtomicUsize::new(0));
    (Outbox { tx, queued: Arc::clone(&queued), capacity: capacity.max(1) }, OutboxReader { rx, queued })
}

impl Outbox {
    /// Queues `item` unless the queue is full or its writer is gone.
    pub fn try_send(&self, item: Outbound) -> Result<(), QueueError> {
        // A gone writer is Closed even when it left frames untaken.
        if self.tx.is_closed() {
            return Err(QueueError::Closed);
        }
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(QueueError::Full);
        }
        self.tx.unbounded_send(item).map_err(|_| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            QueueError::Closed
        })
    }

    /// Frames queued and not yet taken by the writer.
    pub fn len(&self) -> usize {
        self.queued.load(Ordering::Acquire).min(self.capacity)
    }

    /// Whether nothing waits to be written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl OutboxReader {
    /// The next frame; None once every sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Outbound> {
        let item = self.rx.next().await;
        self.took(item.is_some());
        item
    }

    /// The next frame if one is queued now.
    pub fn try_recv(&mut self) -> Option<Outbound> {
        let item = self.rx.try_recv().ok();
        self.took(item.is_some());
        item
    }

    fn took(&self, some: bool) {
        if some {
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Writes queued frames until a close is written, the queue ends, or `closed`
/// fires (then the queue is drained and `close_code()` is sent).
pub async fn write_loop<S>(
    mut sink: S,
    mut queue: OutboxReader,
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
                while let Some(Outbound::Text(text)) = queue.try_recv() {
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
                Some(more) => item = Some(more),
                None => break,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Outbound {
        Outbound::Text(n.to_string())
    }

    #[tokio::test]
    async fn the_outbox_holds_its_bound_and_frees_a_slot_per_frame_taken() {
        let (out, mut reader) = outbox(2);
        assert!(out.is_empty());
        assert_eq!(out.try_send(text(1)), Ok(()));
        assert_eq!(out.try_send(text(2)), Ok(()));
        assert_eq!(out.try_send(text(3)), Err(QueueError::Full), "two frames fill a queue of two");
        assert_eq!(out.len(), 2);
        assert!(matches!(reader.recv().await, Some(Outbound::Text(t)) if t == "1"));
        assert_eq!(out.len(), 1);
        assert_eq!(out.try_send(text(4)), Ok(()), "a frame taken frees its slot");
        assert!(matches!(reader.try_recv(), Some(Outbound::Text(t)) if t == "2"));
        assert!(matches!(reader.try_recv(), Some(Outbound::Text(t)) if t == "4"));
        assert!(reader.try_recv().is_none());
        assert!(out.is_empty());
        drop(reader);
        assert_eq!(out.try_send(text(5)), Err(QueueError::Closed), "nobody writes any more");
        assert!(out.is_empty(), "a refused frame holds no slot");
    }

    #[tokio::test]
    async fn a_full_queue_whose_writer_is_gone_is_closed_not_full() {
        let (out, reader) = outbox(1);
        out.try_send(text(1)).unwrap();
        drop(reader);
        assert_eq!(out.try_send(text(2)), Err(QueueError::Closed));
    }

    #[tokio::test]
    async fn the_reader_ends_when_the_sender_is_gone() {
        let (out, mut reader) = outbox(4);
        out.try_send(text(1)).unwrap();
        drop(out);
        assert!(reader.recv().await.is_some(), "what was queued is still written");
        assert!(reader.recv().await.is_none());
    }
}
