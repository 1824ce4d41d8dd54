//! One device's connection, from the upgrade to the close: a resume claim,
//! the writer, the handshake beside the read loop, and the close frame.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use tether_counters::fallback;

use super::resume::claim;
use super::{ms, reader, writes, DeviceUpgrade, Session};
use crate::exit::Exit;
use crate::hub::Hub;
use crate::router::Claimed;

/// How long the writer may take to send the close frame once the session's
/// socket has ended, before the connection is dropped without it.
const CLOSE_WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// Serves one device over an upgraded WebSocket until it closes, the edge
/// shuts down, or the device breaks the protocol. A device presenting a resume
/// token takes over its session (on this edge or another) before the handshake.
pub async fn serve_client<S, W>(
    hub: Arc<Hub>,
    sink: W,
    stream: S,
    device: DeviceUpgrade,
    shutdown: CancellationToken,
) where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
    W: futures::Sink<Message, Error = WsError> + Unpin + Send + 'static,
{
    let expires_at = device.expires_in.map(|d| Instant::now() + d);
    let claimed = match device.resume.as_deref() {
        Some(token) => claim(&hub, token, &device.principal).await,
        None => None,
    };
    let (resumed, claimed) = match claimed {
        Some((id, claimed)) => (Some((id, claimed.seq)), claimed),
        None => (None, Claimed::default()),
    };
    let (tx, rx) = crate::ws::outbox(hub.config.outbound_queue);
    let session = Arc::new(Session::new(Arc::clone(&hub), &device, tx, shutdown.clone(), resumed));
    // Filed before the session is reachable, so every edge that asks finds them here.
    if let Some(ledger) = claimed.ledger {
        writes::adopt_ledger(&hub, &session.id, ledger);
    }
    session.adopt(claimed.tasks);
    let writer_session = Arc::clone(&session);
    let writer = tokio::spawn(async move {
        let closed = writer_session.socket_done.clone();
        let close_frame = {
            let s = Arc::clone(&writer_session);
            move || s.close_frame()
        };
        if let Err(e) = crate::ws::write_loop(sink, rx, closed, close_frame).await {
            debug!(session = %writer_session.id, error = %e, "device socket write failed");
            writer_session.leave(Exit::WriteFailed);
        }
    });
    // The handshake runs beside the read loop in this task, boxed so that its
    // state is freed once it is done rather than held for the session's life.
    let lifecycle_session = Arc::clone(&session);
    let lifecycle_span =
        tracing::info_span!("session", session = %session.id, principal = %session.principal);
    let handshake = async move {
        let s = lifecycle_session;
        match Box::pin(s.initialize()).await {
            Ok(report) => {
                // Reachable from every edge before anyone is told it is ready.
                if let Err(e) = s.hub.router().hold(&s.hub, &s).await {
                    warn!(session = %s.id, error = %e, "session listed here only: the router could not hold it");
                }
                s.open(report);
                // A change announced during the handshake is read now.
                s.start_refresher();
            }
            Err(_) if s.is_closed() => {}
            Err(e) => {
                fallback!(s.counters().sessions_failed_init, warn, session = %s.id, error = %e, "device handshake failed");
                s.end(Exit::HandshakeFailed);
            }
        }
        // Listed, the device is asked for their outcomes; not, they end as lost.
        s.follow_adopted();
    }
    .instrument(lifecycle_span);
    // A panic in the handshake (a device's catalog tripping a bug) ends this
    // session only, as it did when the handshake had a task of its own.
    let panicked = Arc::clone(&session);
    let lifecycle = Box::pin(async move {
        if futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(handshake)).await.is_err() {
            fallback!(panicked.counters().sessions_failed_init, error, session = %panicked.id, "device handshake panicked; session closed");
            panicked.end(Exit::HandshakeFailed);
        }
    });

    let span = tracing::info_span!("session", session = %session.id, principal = %session.principal);
    let reading = async {
        let exit = reader::read_loop(&session, stream, &shutdown, expires_at).instrument(span).await;
        session.leave(exit);
        // The writer sends the close frame; a device that stopped reading could
        // hold it in a full socket for ever (and this connection's slot with it).
        let mut writer = writer;
        if tokio::time::timeout(CLOSE_WRITE_DEADLINE, &mut writer).await.is_err() {
            writer.abort();
            fallback!(hub.counters().close_writes_abandoned, info, session = %session.id, deadline_ms = ms(CLOSE_WRITE_DEADLINE), "device stopped reading: its close frame was not written in time; connection dropped");
        }
    };
    // Once the socket's part ends, a handshake still waiting on the device
    // fails on the latch, as it did with a task of its own; a detached
    // session's finished long before, in `open`.
    tokio::join!(reading, lifecycle);
}
