//! One device session: its socket, its pending calls, its manifest, its latch.
//!
//! A session moves one way through [`Phase`]: `Starting` (handshake and first
//! catalog read), `Ready` (listed, callable), `Detached` (its transport went
//! away; it waits the resume grace for its device to come back with its resume
//! token, keeping calls that carry an idempotency key), `Closed` (latched). The read
//! loop owns the socket's read half; a writer task owns the sink and drains a
//! bounded queue. Calls wait in a [`tether_rpc::Pending`] table whose latch
//! changes with it: once latched, every call in flight has been failed with
//! `channel_closed` and every new one is refused, at once.
//!
//! - [`calls`] — requests to the device, backend `tools/call`, progress relay, inspection.
//! - [`catalog`] — the handshake (both revisions), catalog reads, the `list_changed` refresher.
//! - [`reader`] — the read loop: frames in, answers paired, liveness, exits.
//! - [`serve`] — one device's connection: resume claim, writer, handshake, close.
//! - [`resume`] — detach on a lost socket, the resume token, the claim.
//! - [`writes`] — the write gate: fingerprinted keys, approvals bound to the call, receipts.
//! - [`tasks`] — calls that outlive the turn: the device's task, followed past its socket.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use tether_contract::backend::{Manifest, RecentCall, SessionClosed, SessionOpened, SessionResumed};
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
use crate::ws::{Outbound, Outbox};

mod calls;
mod catalog;
mod reader;
mod resume;
mod serve;
mod tasks;
mod writes;

pub use calls::ProgressRelay;
pub use reader::MAX_STRIKES;
pub use serve::serve_client;
pub use tasks::{
    cancel as cancel_task, hand_over as hand_over_tasks, TaskHandover, TaskOutcome, TaskRecord,
    MAX_KEPT_TASKS, MAX_LIVE_TASKS,
};
pub use writes::{hand_over_ledger, EdgeLedger};

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
    /// The transport went away: still listed, waiting for its device to
    /// resume; keyed calls wait for the new socket, the rest fail at once.
    Detached = 2,
    /// Latched: every call failed or refused with `channel_closed`.
    Closed = 3,
}

impl Phase {
    const fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Starting,
            1 => Phase::Ready,
            2 => Phase::Detached,
            _ => Phase::Closed,
        }
    }
}

/// How a device connection arrived: who it is, for how long, what it
/// announced, and the resume token it presented.
#[derive(Debug, Clone)]
pub struct DeviceUpgrade {
    /// Verified principal of the device credential.
    pub principal: String,
    /// The credential's remaining life.
    pub expires_in: Option<Duration>,
    /// The MCP revision announced at the upgrade.
    pub announced: Option<Revision>,
    /// The resume token presented at the upgrade (`?resume=`).
    pub resume: Option<String>,
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
    outbound: Outbox,
    calls: Pending<Answer, Late>,
    /// Calls whose backend asked for progress, by the token the device was given.
    progress: Mutex<HashMap<u64, ProgressRelay>>,
    manifest: ManifestState,
    /// Issue-order stamp for catalogs that carry no seq of their own.
    read_stamp: AtomicU64,
    /// What the device's `list_changed` asked of the refresher.
    refresh: catalog::Refresh,
    /// Id of the open `subscriptions/listen` request (0: none).
    listen_id: AtomicU64,
    recent: Mutex<VecDeque<RecentCall>>,
    /// Why the session ended; the first exit wins and owns the close frame.
    exit: OnceLock<Exit>,
    closed: CancellationToken,
    /// Cancelled when this socket's part ends (detached or closed): the
    /// writer sends its close frame, the reader stops.
    socket_done: CancellationToken,
    /// The edge's shutdown: a detached session ends with it.
    shutdown: CancellationToken,
    /// The secret half of this session's resume token, until it is used.
    resume_secret: Mutex<Option<String>>,
    /// Why the transport went away, once detached.
    detached: OnceLock<Exit>,
    /// This session resumed one that had this seq (None: a new session).
    resumed: Option<u64>,
    /// A device presented this session's token: a new socket is taking it
    /// over, so it never reports itself closed (the new socket speaks for it).
    claimed: AtomicBool,
    /// Task statuses that arrived before the task they speak of was filed.
    early_statuses: Mutex<tasks::EarlyStatuses>,
    /// Tasks another edge followed for this session, until its handshake ends.
    adopted: Mutex<Vec<Arc<TaskRecord>>>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Session {
    fn new(
        hub: Arc<Hub>,
        device: &DeviceUpgrade,
        outbound: Outbox,
        shutdown: CancellationToken,
        resumed: Option<(String, u64)>,
    ) -> Session {
        let secret = if hub.config.resume_grace.is_zero() { None } else { resume::resume_secret() };
        let (id, resumed_seq) = match resumed {
            Some((id, seq)) => (id, Some(seq)),
            None => (uuid::Uuid::new_v4().to_string(), None),
        };
        Session {
            id,
            principal: device.principal.clone(),
            hub,
            phase: AtomicU8::new(Phase::Starting as u8),
            announced: device.announced,
            handshake: OnceLock::new(),
            outbound,
            calls: Pending::new(LATE_MEMORY),
            progress: Mutex::default(),
            manifest: ManifestState::default(),
            // A resumed session's unstamped catalogs go on from its old seq, never back.
            read_stamp: AtomicU64::new(resumed_seq.unwrap_or(0)),
            refresh: catalog::Refresh::default(),
            listen_id: AtomicU64::new(0),
            recent: Mutex::default(),
            exit: OnceLock::new(),
            closed: CancellationToken::new(),
            socket_done: CancellationToken::new(),
            shutdown,
            resume_secret: Mutex::new(secret),
            detached: OnceLock::new(),
            resumed: resumed_seq,
            claimed: AtomicBool::new(false),
            early_statuses: Mutex::default(),
            adopted: Mutex::default(),
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
        self.handshake.get().map(|h| h.identity.server_info()).unwrap_or_default()
    }

    /// The backend view of `applied`, a manifest of this session.
    pub fn view(&self, applied: &AppliedManifest) -> Manifest {
        let empty = Identity::default();
        applied.view(&self.id, self.handshake.get().map_or(&empty, |h| &h.identity))
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
        self.outbound.len()
    }

    /// Calls waiting for the device right now.
    pub fn pending_calls(&self) -> usize {
        self.calls.waiting()
    }

    /// Queues a frame for the device; a full queue drops it, counted.
    fn send(&self, frame: String, what: &str) -> bool {
        if self.phase() == Phase::Detached {
            debug!(session = %self.id, what, "frame for a detached device not sent: its socket is gone");
            return false;
        }
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
        if exit == Exit::Resumed {
            // Unlisted before the latch wakes its keyed calls: they follow the
            // session through the router, which must not find this socket again.
            self.hub.remove(self);
        }
        let Some(in_flight) = self.calls.latch(reason) else { return };
        let _ = self.exit.set(exit);
        self.advance(Phase::Closed);
        self.closed.cancel();
        self.socket_done.cancel();
        if exit == Exit::Resumed {
            if self.hub.session(&self.id).is_none() {
                // Resumed on another edge: this edge's ledger goes with its last socket.
                self.hub.forget_ledger(&self.id);
            }
            // The session lives on, on its new socket: no tombstone, no `session_closed`.
            info!(session = %self.id, in_flight, "session resumed on a new socket; keyed calls in flight follow it");
            return;
        }
        self.hub.remove_closed(self, reason);
        EdgeCounters::bump(&self.counters().sessions_latched);
        info!(session = %self.id, principal = %self.principal, reason, in_flight, "session latched closed");
        self.hub.publish(BackendEvent::SessionClosed(SessionClosed {
            session: self.id.clone(),
            reason: reason.to_owned(),
        }));
    }

    /// The close frame the writer sends once the socket's part has ended
    /// (the session ended, or detached to wait for its device).
    fn close_frame(&self) -> (CloseCode, &'static str) {
        self.exit
            .get()
            .or(self.detached.get())
            .and_then(|e| e.close())
            .unwrap_or((CloseCode::Normal, "session closed"))
    }

    /// Lists a session whose handshake succeeded, then tells backends and the device.
    fn open(self: &Arc<Self>, report: Option<Value>) {
        EdgeCounters::bump(&self.counters().sessions_opened);
        let seq = self.manifest.seq().unwrap_or(0);
        info!(session = %self.id, principal = %self.principal, seq, "device session ready");
        if !self.is_closed() {
            let replaced = self.hub.insert(Arc::clone(self));
            self.advance(Phase::Ready);
            // An exit can race the insert; make sure a closed session never stays listed.
            if self.is_closed() {
                self.hub.remove(self);
            } else {
                // A resumed session on the edge that held it: the old socket's part ends here.
                if let Some(old) = replaced.filter(|old| !Arc::ptr_eq(old, self)) {
                    old.end(Exit::Resumed);
                }
                let session = self.id.clone();
                if self.resumed.is_some() {
                    EdgeCounters::bump(&self.counters().sessions_resumed);
                    self.hub.publish(BackendEvent::SessionResumed(SessionResumed { session, seq }));
                } else {
                    self.hub.publish(BackendEvent::SessionOpened(SessionOpened { session, seq }));
                }
            }
        }
        // The handshake's requests are answered: an idle session holds no table for them.
        self.calls.shrink_if_idle();
        // Listed first, then told: the device's "ready" means callable.
        if let Some(report) = report {
            self.send_notification(method::MANIFEST_APPLIED, &report);
        }
    }
}

/// Tells the device to stop a request; `reason` is what its log will show.
fn cancel_on_device(session: &Session, id: u64, reason: &str) {
    EdgeCounters::bump(&session.counters().cancels_sent);
    session.send_notification(method::CANCELLED, &json!({"requestId": id, "reason": reason}));
}
