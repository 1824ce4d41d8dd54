//! Resume: a device that lost its socket comes back with its resume token
//! within the grace. Its listed session detaches from the dead socket
//! (keyed calls wait, the rest fail now), and the new socket claims it, here
//! or through the router on the edge that holds it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::info;

use tether_contract::error::{ErrorKind, WireError};
use tether_counters::fallback;
use tether_rpc::lock;

use super::{ms, Phase, Session};
use crate::counters::EdgeCounters;
use crate::exit::Exit;
use crate::hub::Hub;
use crate::router::Claimed;

/// A fresh random secret for a resume token (128 bits, hex); None when the
/// system has no randomness to give (then the session cannot be resumed).
pub(super) fn resume_secret() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A resume token's two halves: `<session>.<secret>`.
fn split_resume_token(token: &str) -> Option<(&str, &str)> {
    token.split_once('.').filter(|(id, secret)| !id.is_empty() && !secret.is_empty())
}

impl Session {
    /// The token the device presents to resume this session (`<id>.<secret>`),
    /// while it is unused; None when resume is off.
    pub fn resume_token(&self) -> Option<String> {
        lock(&self.resume_secret).as_ref().map(|secret| format!("{}.{secret}", self.id))
    }

    /// Hands this session over to a new socket presenting its resume token:
    /// checks the token (once only) and the principal, detaches the old
    /// socket if it still looked alive, and returns the applied seq.
    pub fn claim(self: &Arc<Self>, secret: &str, principal: &str) -> Result<u64, WireError> {
        let refused = |why: &str| {
            WireError::new(ErrorKind::Forbidden, format!("resume token refused: {why}"))
                .with("session", self.id.as_str())
        };
        if principal != self.principal {
            return Err(refused("it belongs to another principal"));
        }
        {
            let mut stored = lock(&self.resume_secret);
            let matches = stored
                .as_deref()
                .is_some_and(|s| bool::from(subtle::ConstantTimeEq::ct_eq(s.as_bytes(), secret.as_bytes())));
            if !matches {
                return Err(refused("unknown or already used"));
            }
            *stored = None;
        }
        match self.phase() {
            // The device is back before its old socket was found dead: that socket is done.
            Phase::Ready => self.detach(Exit::ConnectionLost),
            Phase::Detached => {}
            Phase::Starting | Phase::Closed => {
                return Err(WireError::channel_closed(self.calls.closed().as_deref().unwrap_or("closed"))
                    .with("session", self.id.as_str()))
            }
        }
        self.claimed.store(true, Ordering::Release);
        Ok(self.manifest.seq().unwrap_or(0))
    }

    /// Ends the socket's part: a transport loss on a listed session waits the
    /// resume grace for its device (detached); anything else ends the session.
    pub fn leave(self: &Arc<Self>, exit: Exit) {
        let resumable = exit.resumable()
            && !self.hub.config.resume_grace.is_zero()
            && !self.shutdown.is_cancelled()
            && lock(&self.resume_secret).is_some();
        match self.phase() {
            Phase::Ready if resumable => self.detach(exit),
            Phase::Detached => {}
            _ => self.end(exit),
        }
    }

    /// Detaches a listed session from its dead socket: calls without an
    /// idempotency key fail now with `channel_closed`; keyed ones wait for the
    /// device to resume (then they are delivered again on its new socket), or
    /// fail when the grace runs out.
    fn detach(self: &Arc<Self>, exit: Exit) {
        if self.detached.set(exit).is_err() || self.phase() != Phase::Ready {
            return;
        }
        self.advance(Phase::Detached);
        // The socket's part ends now (a half-open one still gets its close frame).
        self.socket_done.cancel();
        let reason = exit.as_str();
        let failed = self.calls.fail_where(|late| !late.keyed, reason);
        EdgeCounters::bump(&self.counters().sessions_detached);
        let grace = self.hub.config.resume_grace;
        info!(session = %self.id, principal = %self.principal, reason, failed, grace_ms = ms(grace), "device transport lost; waiting for it to resume");
        let s = Arc::clone(self);
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(grace) => {
                    if s.phase() == Phase::Detached && s.claimed.load(Ordering::Acquire) {
                        // Claimed: the new socket is still in its handshake. Give it
                        // the handshake's budget, then step aside quietly: the new
                        // socket reports the session (resumed, or closed if it failed).
                        tokio::time::sleep(s.hub.config.budgets.reread).await;
                        s.step_aside();
                    } else if s.phase() == Phase::Detached {
                        fallback!(s.counters().resume_grace_expired, info, session = %s.id, grace_ms = ms(grace), "device did not resume within the grace; session closed");
                        s.end(exit);
                    }
                }
                // Claimed (a drain's handover): it lives on where it was claimed,
                // and the end that follows is a no-op; unclaimed, it ends here.
                () = s.shutdown.cancelled() => {
                    s.step_aside();
                    s.end(Exit::Shutdown);
                }
                () = s.closed.cancelled() => {}
            }
        });
    }

    /// Whether nothing more is owed here: the session closed, or a new socket claimed it.
    pub(crate) fn handed_over(&self) -> bool {
        self.phase() == Phase::Closed || self.claimed.load(Ordering::Acquire)
    }

    /// Ends a claimed session here now, as the grace's end would: keyed calls
    /// parked on it follow it to the edge that claimed it.
    pub(crate) fn step_aside(self: &Arc<Self>) {
        if self.phase() == Phase::Detached && self.claimed.load(Ordering::Acquire) {
            self.end(Exit::Resumed);
        }
    }

    /// Why the transport went away, for calls refused while detached.
    pub(super) fn detach_reason(&self) -> &'static str {
        self.detached.get().map_or("disconnected", |e| e.as_str())
    }
}

/// Claims the session a resume token names, wherever it is held; None (a
/// new session, counted and logged) when the token is refused.
pub(super) async fn claim(hub: &Arc<Hub>, token: &str, principal: &str) -> Option<(String, Claimed)> {
    let Some((id, secret)) = split_resume_token(token) else {
        fallback!(
            hub.counters().resumes_refused,
            info,
            "resume token malformed; the device gets a new session"
        );
        return None;
    };
    match hub.router().claim(hub, id, secret, principal).await {
        Ok(claimed) => {
            info!(
                session = id,
                seq = claimed.seq,
                tasks = claimed.tasks.len(),
                "device resuming its session"
            );
            Some((id.to_owned(), claimed))
        }
        Err(e) => {
            fallback!(hub.counters().resumes_refused, info, session = id, error = %e, "resume refused; the device gets a new session");
            None
        }
    }
}
