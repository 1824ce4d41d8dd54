//! One device session: its socket, its pending calls, its manifest, its latch.
//!
//! A session moves one way through [`Phase`]: `Starting` (handshake and first
//! catalog read), `Ready` (listed, callable), `Closed` (latched). The read
//! loop owns the socket's read half; a writer task owns the sink and drains a
//! bounded queue. Calls wait in a [`tether_rpc::Pending`] table whose latch
//! changes with it: once latched, every call in flight has been failed with
//! `channel_closed` and every new one is refused, at once.
//!
//! - [`calls`] — requests to the device, backend `tools/call`, progress relay, inspection.
//! - [`catalog`] — the handshake (both revisions), catalog reads, the `list_changed` refresher.
//! - [`reader`] — the read loop: frames in, answers paired, liveness, exits.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::Stream;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, Instrument};

use tether_contract::backend::{RecentCall, SessionClosed, SessionOpened};
use tether_contract::jsonrpc;
use tether_contract::mcp::method;
use tether_contract::{Caps, Leg};
use tether_counters::fallback;
use tether_rpc::Pending;

use crate::counters::EdgeCounters;
use crate::exit::Exit;
use crate::hub::{BackendEvent, Hub};
use crate::manifest::{AppliedManifest, Identity, ManifestState};
use crate::revision::Revision;
use crate::ws::Outbound;

mod calls;
mod catalog;
mod reader;

pub use calls::ProgressRelay;
pub use reader::MAX_STRIKES;

use calls::{Answer, Late};

/// How many timed-out call ids are remembered to recognise late answers.
const LATE_MEMORY: usize = 4096;

/// Where a session is in its life; it only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Handshake and first catalog read under way: not listed, not callable.
    Starting = 0,
    /// Listed on the hub: backends may call it.
    Ready = 1,
    /// Latched: every call failed or refused with `channel_closed`.
    Closed = 2,
}

impl Phase {
    const fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Starting,
            1 => Phase::Ready,
            _ => Phase::Closed,
        }
    }
}

/// What the handshake settled, fixed for the session's life.
#[derive(Debug)]
struct Handshake {
    identity: Identity,
    revision: Revision,
    /// The device's client profile's caps, or the edge's.
    caps: Caps,
}

/// A connected device session.
#[derive(Debug)]
pub struct Session {
    /// Edge-assigned id, sent to the device in `initialize`.
    pub id: String,
    /// Verified principal of the device credential.
    pub principal: String,
    hub: Arc<Hub>,
    phase: AtomicU8,
    /// What the device announced at the upgrade, if anything.
    announced: Option<Revision>,
    handshake: OnceLock<Handshake>,
    outbound: mpsc::Sender<Outbound>,
    calls: Pending<Answer, Late>,
    /// Calls whose backend asked for progress, by the token the device was given.
    progress: Mutex<HashMap<u64, ProgressRelay>>,
    manifest: ManifestState,
    /// Issue-order stamp for catalogs that carry no seq of their own.
    read_stamp: AtomicU64,
    /// Wakes the refresher: the device said its catalog changed.
    refresh: Notify,
    /// Id of the open `subscriptions/listen` request (0: none).
    listen_id: AtomicU64,
    recent: Mutex<VecDeque<RecentCall>>,
    /// Why the session ended; the first exit wins and owns the close frame.
    exit: OnceLock<Exit>,
    closed: CancellationToken,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Session {
    fn new(
        hub: Arc<Hub>,
        principal: String,
        announced: Option<Revision>,
        outbound: mpsc::Sender<Outbound>,
    ) -> Session {
        Session {
            id: uuid::Uuid::new_v4().to_string(),
            principal,
            hub,
            phase: AtomicU8::new(Phase::Starting as u8),
            announced,
            handshake: OnceLock::new(),
            outbound,
            calls: Pending::new(LATE_MEMORY),
            progress: Mutex::default(),
            manifest: ManifestState::default(),
            read_stamp: AtomicU64::new(0),
            refresh: Notify::new(),
            listen_id: AtomicU64::new(0),
            recent: Mutex::default(),
            exit: OnceLock::new(),
            closed: CancellationToken::new(),
        }
    }

    /// Where the session is in its life.
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// Moves the phase forward to `to`; never back.
    fn advance(&self, to: Phase) {
        self.phase.fetch_max(to as u8, Ordering::AcqRel);
    }

    fn counters(&self) -> &EdgeCounters {
        self.hub.counters()
    }

    fn observe_leg(&self, leg: Leg, started: Instant) {
        self.hub
            .metrics
            .leg_seconds
            .get_or_create(&[("leg", leg.as_str())])
            .observe(started.elapsed().as_secs_f64());
    }

    /// The caps this session runs under (its client profile's, or the edge's).
    pub fn caps(&self) -> Caps {
        self.handshake.get().map_or(self.hub.config.caps, |h| h.caps)
    }

    /// The revision this session speaks (2025-11-25 until the handshake says otherwise).
    pub fn revision(&self) -> Revision {
        self.handshake.get().map_or(Revision::V2025_11_25, |h| h.revision)
    }

    /// The device's `serverInfo` (null before the handshake).
    pub fn server_info(&self) -> Value {
        self.handshake.get().map(|h| h.identity.server_info.clone()).unwrap_or_default()
    }

    /// The applied manifest, once the first catalog read has landed.
    pub fn manifest(&self) -> Option<Arc<AppliedManifest>> {
        self.manifest.current()
    }

    /// Whether the session has latched closed.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Frames queued for the device's socket right now (bounded by the outbound queue).
    pub fn queued_frames(&self) -> usize {
        self.outbound.max_capacity() - self.outbound.capacity()
    }

    /// Calls waiting for the device right now.
    pub fn pending_calls(&self) -> usize {
        self.calls.waiting()
    }

    /// Queues a frame for the device; a full queue drops it, counted.
    fn send(&self, frame: String, what: &str) -> bool {
        if self.outbound.try_send(Outbound::Text(frame)).is_err() {
            fallback!(self.counters().outbound_full, debug, session = %self.id, what, "frame for the device dropped: outbound queue full or closed");
            return false;
        }
        true
    }

    fn send_notification(&self, method: &str, params: &Value) {
        self.send(jsonrpc::notification(method, params), method);
    }

    /// Ends the session for `exit`: fails everything in flight, refuses the
    /// rest, closes the socket with the exit's code, and tells the backends.
    ///
    /// The first exit wins: a session already ended keeps its reason and close code.
    pub fn end(&self, exit: Exit) {
        let reason = exit.as_str();
        let Some(in_flight) = self.calls.latch(reason) else { return };
        let _ = self.exit.set(exit);
        self.advance(Phase::Closed);
        self.closed.cancel();
        self.hub.remove_closed(&self.id, reason);
        EdgeCounters::bump(&self.counters().sessions_latched);
        info!(session = %self.id, principal = %self.principal, reason, in_flight, "session latched closed");
        self.hub.publish(BackendEvent::SessionClosed(SessionClosed {
            session: self.id.clone(),
            reason: reason.to_owned(),
        }));
    }

    /// The close frame the writer sends once the session has ended.
    fn close_frame(&self) -> (CloseCode, &'static str) {
        self.exit.get().and_then(|e| e.close()).unwrap_or((CloseCode::Normal, "session closed"))
    }

    /// Lists a session whose handshake succeeded, then tells backends and the device.
    fn open(self: &Arc<Self>, report: Option<Value>) {
        EdgeCounters::bump(&self.counters().sessions_opened);
        let seq = self.manifest.seq().unwrap_or(0);
        info!(session = %self.id, principal = %self.principal, seq, "device session ready");
        if !self.is_closed() {
            self.hub.insert(Arc::clone(self));
            self.advance(Phase::Ready);
            // An exit can race the insert; make sure a closed session never stays listed.
            if self.is_closed() {
                self.hub.remove(&self.id);
            } else {
                self.hub
                    .publish(BackendEvent::SessionOpened(SessionOpened { session: self.id.clone(), seq }));
            }
        }
        // Listed first, then told: the device's "ready" means callable.
        if let Some(report) = report {
            self.send_notification(method::MANIFEST_APPLIED, &report);
        }
    }
}

/// Serves one device over an upgraded WebSocket until it closes, the edge
/// shuts down, or the device breaks the protocol.
pub async fn serve_client<S, W>(
    hub: Arc<Hub>,
    sink: W,
    stream: S,
    principal: String,
    expires_in: Option<Duration>,
    announced: Option<Revision>,
    shutdown: CancellationToken,
) where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
    W: futures::Sink<Message, Error = WsError> + Unpin + Send + 'static,
{
    let expires_at = expires_in.map(|d| Instant::now() + d);
    let (tx, rx) = mpsc::channel(hub.config.outbound_queue);
    let session = Arc::new(Session::new(Arc::clone(&hub), principal, announced, tx));
    let writer_session = Arc::clone(&session);
    let writer = tokio::spawn(async move {
        let closed = writer_session.closed.clone();
        let close_frame = {
            let s = Arc::clone(&writer_session);
            move || s.close_frame()
        };
        if let Err(e) = crate::ws::write_loop(sink, rx, closed, close_frame).await {
            debug!(session = %writer_session.id, error = %e, "device socket write failed");
            writer_session.end(Exit::WriteFailed);
        }
    });
    let lifecycle_session = Arc::clone(&session);
    let lifecycle_span =
        tracing::info_span!("session", session = %session.id, principal = %session.principal);
    let lifecycle = tokio::spawn(
        async move {
            let s = lifecycle_session;
            // Boxed so the idle task keeps only the refresher's small state.
            match Box::pin(s.initialize()).await {
                Ok(report) => {
                    s.open(report);
                    s.refresher().await;
                }
                Err(_) if s.is_closed() => {}
                Err(e) => {
                    fallback!(s.counters().sessions_failed_init, warn, session = %s.id, error = %e, "device handshake failed");
                    s.end(Exit::HandshakeFailed);
                }
            }
        }
        .instrument(lifecycle_span),
    );

    let span = tracing::info_span!("session", session = %session.id, principal = %session.principal);
    let exit = reader::read_loop(&session, stream, &shutdown, expires_at).instrument(span).await;
    session.end(exit);
    let _ = lifecycle.await;
    let _ = writer.await;
}

/// Tells the device to stop a request; `reason` is what its log will show.
fn cancel_on_device(session: &Session, id: u64, reason: &str) {
    EdgeCounters::bump(&session.counters().cancels_sent);
    session.send_notification(method::CANCELLED, &json!({"requestId": id, "reason": reason}));
}
