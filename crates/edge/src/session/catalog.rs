//! The device's catalog: the handshake on either revision, client profiles,
//! paged `tools/list` reads offered to the seq rule, and the refresher that
//! re-reads on `list_changed`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::time::Instant;
use tracing::{debug, info, warn, Instrument};

use tether_contract::backend::ListChanged;
use tether_contract::error::{ErrorKind, WireError};
use tether_contract::jsonrpc;
use tether_contract::mcp::{self, meta, method, InitializeResult, ListToolsResult};
use tether_contract::{Caps, Leg, MCP_PROTOCOL_VERSION};
use tether_counters::fallback;
use tether_rpc::lock;

use super::calls::RequestError;
use super::{Handshake, Session};
use crate::counters::EdgeCounters;
use crate::hub::BackendEvent;
use crate::manifest::{AppliedManifest, Digest, Fingerprint, Identity, Swap};
use crate::revision::Revision;
use crate::shared::SharedIntake;

/// Least time between two catalog re-reads triggered by `list_changed`.
const LIST_CHANGED_MIN_INTERVAL: Duration = Duration::from_millis(200);

impl Session {
    /// The handshake: `initialize`, then the first catalog read. Returns the
    /// first `manifest_applied` report, which the caller sends once the session
    /// is listed: a device told its manifest applied can be called at once.
    pub(super) async fn initialize(&self) -> Result<Option<Value>, WireError> {
        let budget = self.hub.config.budgets.reread;
        let (identity, revision) = match self.announced {
            Some(Revision::V2026_07_28) => (self.discover(budget).await?, Revision::V2026_07_28),
            _ => match self.initialize_2025(budget).await {
                Ok(identity) => (identity, Revision::V2025_11_25),
                // A device that answers `initialize` with an error may be one that
                // speaks only 2026-07-28 and did not announce it: ask it that way.
                Err(RequestError::Remote(error)) => {
                    fallback!(self.counters().revision_fallbacks, info, session = %self.id, error = %error, "device refused initialize; trying server/discover (2026-07-28)");
                    (self.discover(budget).await?, Revision::V2026_07_28)
                }
                Err(e) => return Err(self.request_error(e, Leg::Reread, budget)),
            },
        };
        let server_info = identity.server_info();
        let caps = self.client_profile_caps(server_info.get("name").and_then(Value::as_str));
        let _ = self.handshake.set(Handshake { identity, revision, caps });
        self.hub.metrics.sessions_by_revision.get_or_create(&[("revision", revision.as_str())]).inc();
        let report = self.fetch_catalog(budget).await.map(|(_, report)| report)?;
        if revision.stateless() {
            self.listen_for_changes();
        }
        Ok(report)
    }

    /// The 2025-11-25 handshake: `initialize`, then `notifications/initialized`.
    async fn initialize_2025(&self, budget: Duration) -> Result<Identity, RequestError> {
        let params = json!({
            "protocolVersion": MCP_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "tether-edge", "version": env!("CARGO_PKG_VERSION")},
            "_meta": self.identity_meta(Map::new()),
        });
        let (raw, _) = self.request(method::INITIALIZE, params, budget, method::INITIALIZE, false).await?;
        let init: InitializeResult = serde_json::from_str(raw.get()).map_err(|e| {
            RequestError::Malformed(format!("device sent a malformed initialize result: {e}"))
        })?;
        self.claimed_session(init.meta.as_ref());
        let concept = init.meta.as_ref().and_then(|m| m.get(meta::CONCEPT)).cloned();
        self.send_notification(method::INITIALIZED, &json!({}));
        Ok(Identity::new(&init.server_info, init.instructions, concept).with_approvals(init.meta.as_ref()))
    }

    /// The 2026-07-28 start: `server/discover` with the envelope; no handshake follows.
    async fn discover(&self, budget: Duration) -> Result<Identity, WireError> {
        let meta = self.identity_meta(crate::revision::envelope());
        let discover = crate::revision::method::SERVER_DISCOVER;
        let (raw, _) = self
            .request(discover, json!({ "_meta": meta }), budget, discover, false)
            .await
            .map_err(|e| self.request_error(e, Leg::Reread, budget))?;
        let refused = |e: &dyn std::fmt::Display| {
            WireError::new(ErrorKind::ClientError, format!("device's server/discover: {e}"))
        };
        let value: Value = serde_json::from_str(raw.get()).map_err(|e| refused(&e))?;
        let found = crate::revision::read_discover(&value).map_err(|e| refused(&e))?;
        self.claimed_session(value.get("_meta").and_then(Value::as_object));
        let meta = value.get("_meta").and_then(Value::as_object);
        let mut identity =
            Identity::new(&found.server_info, found.instructions, found.concept).with_approvals(meta);
        identity.tasks = found.tasks;
        Ok(identity)
    }

    /// `meta` plus the session id the edge minted and, when resume is on,
    /// the token that resumes this session after a brief disconnect.
    fn identity_meta(&self, mut meta: Map<String, Value>) -> Map<String, Value> {
        meta.insert(meta::SESSION.into(), Value::from(self.id.as_str()));
        if let Some(token) = self.resume_token() {
            meta.insert(meta::RESUME.into(), Value::from(token));
        }
        meta
    }

    /// Session identity is the edge's to mint, never a device's to claim.
    fn claimed_session(&self, meta: Option<&Map<String, Value>>) {
        if let Some(claimed) = meta.and_then(|m| m.get(meta::SESSION)) {
            if claimed.as_str() != Some(self.id.as_str()) {
                let mut shown = claimed.to_string();
                tether_contract::error::truncate_utf8(&mut shown, 80);
                fallback!(self.counters().session_claims_ignored, warn, session = %self.id, claimed = %shown, "device claimed another session id; ignored");
            }
        }
    }

    /// The caps of the client profile matching the device's `serverInfo.name`,
    /// or the edge's (a broken profile falls back to them, counted).
    fn client_profile_caps(&self, server_name: Option<&str>) -> Caps {
        let config = &self.hub.config;
        let Some(server_name) = server_name else { return config.caps };
        if let Some(profile) = config.client_profiles.iter().find(|p| p.server_name == server_name) {
            debug!(session = %self.id, profile = %profile.name, "client profile applied");
            return profile.caps;
        }
        if let Some(broken) =
            config.broken_profiles.iter().find(|p| p.server_name.as_deref() == Some(server_name))
        {
            fallback!(self.counters().client_profile_fallbacks, warn, session = %self.id, profile = %broken.name, "client profile is invalid; this device gets the default caps");
        }
        config.caps
    }

    /// Opens the 2026-07-28 `subscriptions/listen` stream for `list_changed`.
    /// The request stays open for the session's life, so it has no pending
    /// entry and no leg; its id is remembered to recognise its end.
    fn listen_for_changes(&self) {
        let id = self.calls.fresh_id();
        self.listen_id.store(id, Ordering::Relaxed);
        let params = json!({
            "notifications": {"toolsListChanged": true},
            "_meta": crate::revision::envelope(),
        });
        let frame =
            jsonrpc::request(&Value::from(id), crate::revision::method::SUBSCRIPTIONS_LISTEN, &params);
        if !self.send(frame, crate::revision::method::SUBSCRIPTIONS_LISTEN) {
            warn!(session = %self.id, "could not open the list_changed subscription: outbound queue full");
        }
    }

    /// Request params' `_meta` for this session's revision: the envelope on 2026-07-28.
    pub(super) fn request_meta(&self) -> Map<String, Value> {
        if self.revision().stateless() {
            crate::revision::envelope()
        } else {
            Map::new()
        }
    }

    /// Reads the device catalog (following `nextCursor`) within `budget`,
    /// offers it to the manifest state, and reports an applied swap to the device.
    pub async fn read_catalog(&self, budget: Duration) -> Result<Swap, WireError> {
        let (swap, report) = self.fetch_catalog(budget).await?;
        if let Some(report) = report {
            self.send_notification(method::MANIFEST_APPLIED, &report);
        }
        Ok(swap)
    }

    /// [`Self::read_catalog`] without telling the device: returns the
    /// `manifest_applied` report of an accepted swap for the caller to send.
    async fn fetch_catalog(&self, budget: Duration) -> Result<(Swap, Option<Value>), WireError> {
        let caps = self.caps();
        let stamp = self.read_stamp.fetch_add(1, Ordering::Relaxed) + 1;
        let read_started = Instant::now();
        let deadline = read_started + budget;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seq = None;
        let mut context = None;
        let mut digest = None;
        let mut pages = 0;
        let mut paged_out = false;
        loop {
            pages += 1;
            let mut params = Map::new();
            if let Some(c) = &cursor {
                params.insert("cursor".into(), Value::from(c.as_str()));
            }
            let envelope = self.request_meta();
            if !envelope.is_empty() {
                params.insert("_meta".into(), Value::Object(envelope));
            }
            let params = Value::Object(params);
            let left = deadline.saturating_duration_since(Instant::now());
            let (raw, _) = self
                .request(method::TOOLS_LIST, params, left, method::TOOLS_LIST, false)
                .await
                .map_err(|e| self.request_error(e, Leg::Reread, budget))?;
            let page: ListToolsResult = serde_json::from_str(raw.get()).map_err(|e| {
                WireError::new(
                    ErrorKind::ClientError,
                    format!("device sent a malformed tools/list result: {e}"),
                )
            })?;
            seq = seq.or(mcp::seq_of(page.meta.as_ref()));
            digest = digest.or_else(|| mcp::digest_of(page.meta.as_ref()).map(Digest::of));
            if context.is_none() {
                context = page.meta.as_ref().and_then(|m| m.get(meta::CONTEXT)).cloned();
            }
            tools.extend(page.tools);
            match page.next_cursor {
                Some(next) if pages < caps.max_list_pages && tools.len() <= caps.max_tools * 4 => {
                    cursor = Some(next)
                }
                Some(_) => {
                    paged_out = true;
                    break;
                }
                None => break,
            }
        }
        self.observe_leg(Leg::Reread, read_started);
        let seq = seq.unwrap_or(stamp);
        // A seq that moved over the same catalog: the applied manifest, re-stamped.
        // The catalog's text keys the shared intake; its hash (with the context's) spots a re-read that changed nothing.
        let text = serde_json::to_string(&tools).unwrap_or_default();
        let declared = Fingerprint::of(&text, context.as_ref());
        if let Some(current) = self.manifest.current().filter(|c| !paged_out && c.same_content(declared)) {
            let swap = self.manifest.offer(current.reseq(seq, digest));
            let report = match swap {
                Swap::Accepted { from, to } => {
                    EdgeCounters::bump(&self.counters().swaps_accepted);
                    debug!(session = %self.id, from = ?from, to, "seq moved over the same catalog; manifest re-stamped");
                    Some(json!({"seq": seq, "kept": current.tools().len(), "dropped": current.dropped()}))
                }
                Swap::Rejected { applied, offered } => {
                    fallback!(self.counters().swaps_rejected, info, session = %self.id, applied, offered, "stale manifest swap rejected");
                    None
                }
            };
            return Ok((swap, report));
        }
        // Sessions that declared this catalog under these caps share one intake.
        let SharedIntake { intake, shared } =
            self.hub.catalogs.intake(tools, &text, paged_out, &caps, &self.hub.schemas);
        if shared {
            EdgeCounters::bump(&self.counters().catalogs_shared);
        } else if intake.schemas_shared > 0 {
            let shared = u64::try_from(intake.schemas_shared).unwrap_or(u64::MAX);
            self.counters().schemas_shared.inc_by(shared);
        }
        for drop in &intake.dropped {
            self.hub.metrics.drops.get_or_create(&[("reason", drop.reason.as_str())]).inc();
            fallback!(self.counters().tools_dropped, warn, session = %self.id, seq, tool = %drop.name, bytes = drop.bytes, reason = drop.reason.as_str(), detail = drop.detail.as_deref().unwrap_or(""), "tool dropped from manifest");
        }
        if intake.descriptions_truncated > 0 {
            let cut = u64::try_from(intake.descriptions_truncated).unwrap_or(u64::MAX);
            fallback!(self.counters().descriptions_truncated; cut, warn, session = %self.id, seq, count = intake.descriptions_truncated, limit = caps.description_chars, "tool descriptions cut to the description cap");
        }
        let report = json!({"seq": seq, "kept": intake.tools.len(), "dropped": intake.dropped});
        let candidate = AppliedManifest::new(seq, intake, context, declared).with_digest(digest);
        let swap = self.manifest.offer(candidate);
        let mut applied = None;
        match swap {
            Swap::Accepted { from, to } => {
                EdgeCounters::bump(&self.counters().swaps_accepted);
                info!(session = %self.id, from = ?from, to, "manifest swap accepted");
                applied = Some(report);
                if from.is_some() {
                    self.hub.publish(BackendEvent::ListChanged(ListChanged {
                        session: self.id.clone(),
                        seq: to,
                    }));
                }
            }
            Swap::Rejected { applied, offered } => {
                fallback!(self.counters().swaps_rejected, info, session = %self.id, applied, offered, "stale manifest swap rejected");
            }
        }
        Ok((swap, applied))
    }

    /// Applies a moved `seq` that the device's `digest` vouches for: the
    /// applied manifest re-stamped, no catalog read, nothing sent (the device
    /// said nothing changed, so a `manifest_applied` would report nothing).
    /// False when the digest is absent or not the applied one: read instead.
    pub(super) fn restamp(&self, seq: u64, digest: Option<Digest>) -> bool {
        let Some(current) = self.manifest.current().filter(|c| c.vouched_by(digest)) else {
            return false;
        };
        // Rejected means a concurrent read applied a newer seq: nothing to do either.
        if let Swap::Accepted { from, to } = self.manifest.offer(current.reseq(seq, digest)) {
            EdgeCounters::bump(&self.counters().swaps_accepted);
            EdgeCounters::bump(&self.counters().rereads_skipped);
            debug!(session = %self.id, from = ?from, to, "seq moved under the applied digest; manifest re-stamped without a read");
        }
        true
    }

    /// Notes that the device's catalog changed and starts the refresher;
    /// `vouched` is the announcement's seq and digest, if it carried both.
    pub(super) fn catalog_changed(self: &Arc<Self>, vouched: Option<(u64, Digest)>) {
        *lock(&self.refresh.announced) = vouched;
        self.refresh.mark();
        self.start_refresher();
    }

    /// Starts the refresher if a change is pending, the session is listed,
    /// and no refresher runs (a change noted before the session opened is
    /// read once it opens).
    pub(super) fn start_refresher(self: &Arc<Self>) {
        if self.phase() == super::Phase::Ready && self.refresh.claim() {
            let span = tracing::info_span!("session", session = %self.id, principal = %self.principal);
            tokio::spawn(Arc::clone(self).refresher().instrument(span));
        }
    }

    /// Re-reads the catalog while the device says it changed, one read at a
    /// time, then ends: an idle session keeps no task for this. An
    /// announcement whose digest is the applied one is re-stamped instead.
    ///
    /// Rate-limited: at most one `list_changed` re-read (or re-stamp) per
    /// `LIST_CHANGED_MIN_INTERVAL`; notifications that arrive meanwhile
    /// coalesce into the next one (counted).
    async fn refresher(self: Arc<Self>) {
        let budget = self.hub.config.budgets.reread;
        while self.refresh.take() {
            let last = *lock(&self.refresh.last);
            if let Some(earliest) = last.map(|t| t + LIST_CHANGED_MIN_INTERVAL) {
                if Instant::now() < earliest {
                    fallback!(self.counters().list_changed_rate_limited, debug, session = %self.id, "list_changed re-read held back by the rate limit");
                    tokio::select! {
                        _ = tokio::time::sleep_until(earliest) => {}
                        _ = self.closed.cancelled() => return,
                    }
                }
            }
            if self.is_closed() {
                return;
            }
            *lock(&self.refresh.last) = Some(Instant::now());
            let vouched = lock(&self.refresh.announced).take();
            if vouched.is_some_and(|(seq, digest)| self.restamp(seq, Some(digest))) {
                continue;
            }
            if let Err(e) = Box::pin(self.read_catalog(budget)).await {
                fallback!(self.counters().reread_failures, warn, session = %self.id, error = %e, "catalog re-read after list_changed failed; keeping the applied manifest");
            }
        }
    }
}

/// The `list_changed` refresher's state: one atomic, so a change announced
/// while a refresher is about to end is never lost between them.
#[derive(Debug, Default)]
pub(super) struct Refresh {
    /// [`DIRTY`]: a change is announced and not yet taken; [`RUNNING`]: a refresher task runs.
    state: AtomicU8,
    /// The newest announcement's seq and digest, for a re-stamp without a read.
    announced: Mutex<Option<(u64, Digest)>>,
    /// When the last re-read (or re-stamp) started, for the rate limit.
    last: Mutex<Option<Instant>>,
}

const DIRTY: u8 = 1;
const RUNNING: u8 = 2;

impl Refresh {
    /// A change was announced.
    fn mark(&self) {
        self.state.fetch_or(DIRTY, Ordering::AcqRel);
    }

    /// True (and now running) when a change is pending and no refresher runs.
    fn claim(&self) -> bool {
        self.state.compare_exchange(DIRTY, DIRTY | RUNNING, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The running refresher takes the pending change: true to act on it,
    /// false when none is pending (and the refresher is no longer running).
    fn take(&self) -> bool {
        let step = |state: u8| Some(if state & DIRTY != 0 { RUNNING } else { 0 });
        // Both arms carry the state before; `step` never refuses, so it is Ok.
        let (Ok(before) | Err(before)) = self.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, step);
        before & DIRTY != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_marked_while_the_refresher_runs_is_taken_before_it_ends() {
        let refresh = Refresh::default();
        assert!(!refresh.claim(), "nothing pending, nothing to run");
        refresh.mark();
        assert!(refresh.claim());
        assert!(!refresh.claim(), "one refresher at a time");
        assert!(refresh.take(), "the change that started it");
        refresh.mark(); // announced while it reads
        assert!(!refresh.claim(), "the running refresher will take it");
        assert!(refresh.take(), "taken before ending");
        assert!(!refresh.take(), "nothing left: it ends");
        refresh.mark();
        assert!(refresh.claim(), "after it ended, the next change starts another");
    }
}
