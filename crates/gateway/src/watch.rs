//! Mid-turn changes reach the MCP client: a device's manifest swap, a device
//! that comes online or goes away becomes `notifications/tools/list_changed`.
//!
//! One pump reads the edge link's notifications and fans them out; each MCP
//! session (or 2026-07-28 subscription) runs a watcher that keeps the set of
//! its user's sessions and notifies its client when one of them moves. The
//! seq semantics stay the edge's: a watcher only says "re-list", and the
//! re-list reads the applied manifest.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use tether_core::Notification;
use tether_counters::fallback;

use crate::auth::Scope;
use crate::metrics::GatewayCounters;
use crate::Shared;

/// Fans the link's notifications out to every watcher until the link closes.
pub(crate) async fn pump(
    mut from_edge: tokio::sync::mpsc::Receiver<Notification>,
    to: broadcast::Sender<Notification>,
    edge_gone: CancellationToken,
) {
    while let Some(note) = from_edge.recv().await {
        // No watcher listening is fine: nobody needs telling.
        let _ = to.send(note);
    }
    warn!("the link to the edge closed; the MCP endpoint cannot reach any device");
    edge_gone.cancel();
}

/// Whether `note` changes what `scope` lists; keeps `mine` current.
async fn moves(shared: &Shared, scope: &Scope, mine: &mut HashSet<String>, note: &Notification) -> bool {
    match note {
        Notification::ListChanged(c) => mine.contains(&c.session),
        // Same session on a new socket: its catalog was read again.
        Notification::SessionResumed(r) => mine.contains(&r.session),
        Notification::SessionClosed(c) => mine.remove(&c.session),
        // A new device of this user joins the aggregate (never a pinned view).
        Notification::SessionOpened(o) if scope.pinned.is_none() => {
            // Only the new session is asked about: is it this user's?
            match shared.link.session_info(&o.session, &scope.token, shared.config.budgets.turn_start).await {
                Ok(list) if !list.sessions.is_empty() => mine.insert(o.session.clone()),
                Ok(_) => false,
                Err(e) => {
                    debug!(error = %e, "watcher could not ask about a new session; its client re-lists to be safe");
                    true
                }
            }
        }
        _ => false,
    }
}

/// Notifies through `notify` whenever the scope's tools move, until `stop`
/// fires or a notification cannot be delivered (the client went away).
pub(crate) async fn watch<F, Fut>(shared: Arc<Shared>, scope: Scope, stop: CancellationToken, notify: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut events = shared.events.subscribe();
    let mut mine: HashSet<String> = scope.sessions.iter().map(|s| s.session.clone()).collect();
    loop {
        let event = tokio::select! {
            event = events.recv() => event,
            () = stop.cancelled() => return,
        };
        let changed = match event {
            Ok(note) => moves(&shared, &scope, &mut mine, &note).await,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                fallback!(shared.metrics.counters.events_lagged, warn, missed, principal = %scope.principal, "MCP watcher fell behind the edge's events; telling its client to re-list");
                true
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if changed {
            if !notify().await {
                debug!(principal = %scope.principal, "MCP client gone; its watcher stops");
                return;
            }
            GatewayCounters::bump(&shared.metrics.counters.list_changed_sent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tether_contract::backend::ListChanged;

    /// A watcher that falls behind the edge's events tells its client to
    /// re-list rather than guess what it missed.
    #[tokio::test(flavor = "current_thread")]
    async fn a_watcher_that_falls_behind_tells_its_client_to_re_list() {
        let (ours, _theirs) = tokio::io::duplex(1024);
        let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            ours,
            tokio_tungstenite::tungstenite::protocol::Role::Client,
            None,
        )
        .await;
        let (events, _) = broadcast::channel(2);
        let link = tether_core::BackendLink::from_stream(ws);
        let metrics = crate::metrics::GatewayMetrics::default();
        let shared = Arc::new(Shared {
            link,
            config: crate::GatewayConfig::default(),
            events: events.clone(),
            metrics,
            owners: crate::auth::SessionOwners::default(),
        });
        let scope = Scope { token: "t".into(), principal: "mira".into(), sessions: Vec::new(), pinned: None };
        let notified = Arc::new(AtomicUsize::new(0));
        let stop = CancellationToken::new();
        let watcher = {
            let (notified, stop) = (Arc::clone(&notified), stop.clone());
            tokio::spawn(watch(Arc::clone(&shared), scope, stop, move || {
                let notified = Arc::clone(&notified);
                async move {
                    notified.fetch_add(1, Ordering::Relaxed);
                    true
                }
            }))
        };
        tokio::task::yield_now().await; // the watcher subscribes
        for seq in 1..=5 {
            // Another user's sessions: only the lag makes the watcher speak.
            let _ = events.send(Notification::ListChanged(ListChanged { session: format!("x{seq}"), seq }));
        }
        for _ in 0..100 {
            if shared.metrics.get("events_lagged") > 0 {
                break;
            }
            tokio::task::yield_now().await; // bounded: the watcher needs a few polls
        }
        stop.cancel();
        watcher.await.unwrap();
        assert_eq!(shared.metrics.get("events_lagged"), 1);
        assert_eq!(notified.load(Ordering::Relaxed), 1, "one re-list for the whole gap");
    }
}
