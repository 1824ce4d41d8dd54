//! The independent bench's load driver: its own process, raw pre-built
//! frames, several backend links, closed-loop.
//!
//! Each in-flight slot sends one `tools/call` (the slot number is its
//! JSON-RPC id, so no id is ever in flight twice on a link), waits for its
//! answer and sends the next, round-robin over the sessions with each
//! session's own user credential. Nothing goes through tether-core: parsing
//! a response is reading its id and whether it is an error.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::fleet::FleetSession;
use crate::error::HarnessError;

/// What the driver process runs.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// `ws://host:port` of the server under test.
    pub url: String,
    /// The backend link's service token.
    pub backend_token: String,
    /// The sessions to call, each with its user's credential.
    pub sessions: Vec<FleetSession>,
    /// The tool name to call (`client__op` on tether, `op` on the relay).
    pub tool: String,
    /// Backend links (sockets).
    pub links: usize,
    /// Calls in flight across all links.
    pub in_flight: usize,
    /// Unmeasured warm-up before the window.
    pub warmup: Duration,
    /// The measured window.
    pub window: Duration,
}

/// What the driver saw in the measured window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DriverReport {
    /// Calls answered with a result.
    pub calls: u64,
    /// Calls answered with an error (or never answered).
    pub errors: u64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
}

#[derive(Deserialize)]
struct Answer<'a> {
    id: Option<u64>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// One session's call frame around its id: `{prefix}{id}{suffix}`.
struct Frame {
    prefix: &'static str,
    suffix: String,
}

fn frames(cfg: &DriverConfig) -> Vec<Frame> {
    cfg.sessions
        .iter()
        .map(|s| Frame {
            prefix: r#"{"jsonrpc":"2.0","id":"#,
            suffix: format!(
                r#","method":"tools/call","params":{{"session":{},"name":{},"arguments":{{"n":1}},"_meta":{{"credential":{},"budget_ms":12000}}}}}}"#,
                serde_json::Value::from(s.session.as_str()),
                serde_json::Value::from(cfg.tool.as_str()),
                serde_json::Value::from(s.credential.as_str()),
            ),
        })
        .collect()
}

/// Drives load; `marks` is told `"measuring"` when the window opens and
/// `"done"` when it closes (the parent samples the server's counters then).
pub async fn run(cfg: DriverConfig, marks: impl Fn(&str)) -> Result<DriverReport, HarnessError> {
    if cfg.sessions.is_empty() {
        return Err(HarnessError::Peer("the driver was given no sessions".into()));
    }
    let frames = std::sync::Arc::new(frames(&cfg));
    let links = cfg.links.max(1).min(cfg.in_flight.max(1));
    let start = Instant::now();
    let open = start + cfg.warmup;
    let close = open + cfg.window;
    let mut tasks = tokio::task::JoinSet::new();
    for l in 0..links {
        let slots = cfg.in_flight / links + usize::from(l < cfg.in_flight % links);
        let (url, token, frames) =
            (cfg.url.clone(), cfg.backend_token.clone(), std::sync::Arc::clone(&frames));
        let first = l * 7919;
        tasks.spawn(link(url, token, frames, slots, first, open, close));
    }
    tokio::time::sleep_until(open).await;
    marks("measuring");
    tokio::time::sleep_until(close).await;
    marks("done");
    let mut report = DriverReport::default();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    while let Some(done) = tasks.join_next().await {
        let (calls, errors, h) = done.map_err(|e| HarnessError::Peer(format!("driver link task: {e}")))??;
        report.calls += calls;
        report.errors += errors;
        all.add(h).map_err(|e| HarnessError::Peer(format!("histogram: {e}")))?;
    }
    report.p50_us = all.value_at_quantile(0.5);
    report.p99_us = all.value_at_quantile(0.99);
    Ok(report)
}

/// One backend link with `slots` calls in flight; counts what lands in [open, close).
async fn link(
    url: String,
    token: String,
    frames: std::sync::Arc<Vec<Frame>>,
    slots: usize,
    first: usize,
    open: Instant,
    close: Instant,
) -> Result<(u64, u64, Histogram<u64>), HarnessError> {
    let mut request = format!("{url}/v1/backend")
        .into_client_request()
        .map_err(|e| HarnessError::Peer(format!("driver url: {e}")))?;
    let bearer = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|e| HarnessError::Peer(format!("driver token: {e}")))?;
    request.headers_mut().insert("authorization", bearer);
    let config = WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
        .await
        .map_err(|e| HarnessError::Peer(format!("driver could not connect: {e}")))?;
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut calls, mut errors) = (0u64, 0u64);
    let mut sent = vec![Instant::now(); slots];
    let mut next = first;
    let n = frames.len();
    let frame = |slot: usize, next: &mut usize| {
        *next = (*next + 7919) % n;
        let f = &frames[*next];
        format!("{}{slot}{}", f.prefix, f.suffix)
    };
    for (slot, at) in sent.iter_mut().enumerate() {
        *at = Instant::now();
        ws.feed(Message::text(frame(slot, &mut next)))
            .await
            .map_err(|e| HarnessError::Peer(e.to_string()))?;
    }
    ws.flush().await.map_err(|e| HarnessError::Peer(e.to_string()))?;
    let mut outstanding = slots;
    // Answers still owed after the window get this long; past it they count as errors.
    let drain_until = close + Duration::from_secs(15);
    while outstanding > 0 {
        let message = tokio::select! {
            m = ws.next() => m,
            () = tokio::time::sleep_until(drain_until) => break,
        };
        let Some(Ok(Message::Text(text))) = message else {
            if matches!(message, Some(Ok(_))) {
                continue;
            }
            break;
        };
        let Ok(answer) = serde_json::from_str::<Answer<'_>>(text.as_str()) else { continue };
        let Some(slot) = answer.id.and_then(|id| usize::try_from(id).ok()).filter(|s| *s < slots) else {
            continue; // a notification (session events) or a stray
        };
        let now = Instant::now();
        if sent[slot] >= open && now < close {
            if answer.error.is_some() {
                errors += 1;
            } else {
                calls += 1;
                let us = u64::try_from(now.duration_since(sent[slot]).as_micros()).unwrap_or(u64::MAX);
                let _ = h.record(us.max(1));
            }
        }
        if now >= close {
            outstanding -= 1;
            continue;
        }
        sent[slot] = now;
        if ws.send(Message::text(frame(slot, &mut next))).await.is_err() {
            break;
        }
    }
    errors += u64::try_from(outstanding).unwrap_or(0);
    let _ = ws.close(None).await;
    Ok((calls, errors, h))
}
