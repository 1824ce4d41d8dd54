//! A 2026-07-28 server's tool changes, followed on its `subscriptions/listen`
//! stream into the seq clock (a legacy server's arrive as a bare
//! notification, through the client handler).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::RoleClient;
use rmcp::Peer;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use tether_counters::fallback;

use super::SeqClock;
use crate::counters::BridgeCounters;

/// How many times a 2026-07-28 server's `subscriptions/listen` is reopened
/// after it ends while the server lives.
const MAX_LISTENS: u32 = 5;

/// Follows a 2026-07-28 server's tool changes on a `subscriptions/listen`
/// stream, moving the seq on each; reopens a stream that ends while the
/// server lives, a bounded number of times; cancels it on `unlisten`.
pub(super) async fn listen_for_changes(
    peer: Peer<RoleClient>,
    seq: Arc<SeqClock>,
    counters: Arc<BridgeCounters>,
    name: Arc<str>,
    unlisten: CancellationToken,
) {
    for attempt in 0..MAX_LISTENS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if peer.is_transport_closed() {
            return;
        }
        let listen = peer.listen(SubscriptionFilter::builder().tools_list_changed().build());
        let opened = tokio::select! {
            opened = listen => opened,
            _ = unlisten.cancelled() => return,
        };
        let mut subscription = match opened {
            Ok(s) => s,
            Err(e) => {
                fallback!(counters.subscription_failures, warn, server = %name, error = %e, "subscriptions/listen failed; tool changes reach the edge only when it reconnects");
                continue;
            }
        };
        if subscription.acknowledged().tools_list_changed != Some(true) {
            fallback!(counters.subscription_failures, warn, server = %name, "server did not accept a toolsListChanged subscription; tool changes reach the edge only when it reconnects");
            return;
        }
        debug!(server = %name, "listening for tool changes");
        loop {
            let next = tokio::select! {
                next = subscription.next() => next,
                _ = unlisten.cancelled() => {
                    if let Err(e) = subscription.cancel_with_reason(Some("tether bridge stopping".into())).await {
                        debug!(server = %name, error = %e, "could not end the tool-change subscription");
                    }
                    return;
                }
            };
            match next {
                Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                    let now = seq.bump();
                    info!(server = %name, seq = now, "server announced tools/list_changed");
                }
                Ok(Some(other)) => {
                    debug!(server = %name, notification = ?other, "subscription notification ignored")
                }
                Ok(None) => {
                    if !peer.is_transport_closed() {
                        fallback!(counters.subscriptions_ended, warn, server = %name, end = ?subscription.end(), "server ended the tool-change subscription; reopening");
                    }
                    break;
                }
                Err(e) => {
                    fallback!(counters.subscriptions_ended, warn, server = %name, error = %e, "tool-change subscription failed; reopening");
                    break;
                }
            }
        }
    }
}
