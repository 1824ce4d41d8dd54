//! `tether soak`: a fleet of faulty simulated devices and a backend load driver
//! that goes through `tether-core`, with the invariants that must hold.
//!
//! Invariants (each breaks the run's exit status):
//! - **a fleet and a load** — every simulated device got a session, and calls
//!   were started: a soak that exercised nothing proves nothing;
//! - **lost calls** — calls started minus terminal outcomes the edge delivered:
//!   0. A call that ended only because core's own per-tool budget ran out got
//!   no outcome from the edge (the edge's legs end inside that budget), so it
//!   is lost, not a timeout;
//! - **duplicate outcomes** — responses the backend link received for calls
//!   that already had their outcome: 0;
//! - **misrouted results** — a result whose echoed nonce or session is not the
//!   call's own: 0;
//! - **pending at end** — calls the edge still holds after the run: 0.

use crate::error::HarnessError;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use tether_contract::backend::{CallMeta, CallParams};
use tether_contract::mcp::ToolDeclaration;
use tether_contract::{ErrorKind, Leg, WireError};
use tether_core::BackendLink;

use crate::device::{tool, Behavior, DeviceSpec, SimDevice};
use crate::faults::{Fault, FaultMix, SplitMix64};

/// The default fault mix: mostly honest answers, every fault present.
pub const DEFAULT_FAULTS: &str =
    "answer=80,error=5,silent=1,late=2,twice=2,disconnect=1,navigate=4,malformed=2,oversize=1,flood=2";

/// How the driver paces calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// A fixed number of callers, each calling back to back.
    Concurrency(usize),
    /// A fixed rate of calls per second (at most 10,000 in flight).
    Rate(f64),
}

/// A session the driver may call, and the user credential its device runs as.
type Live = (String, Arc<str>);

/// Everything a soak run needs.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// Edge address, `ws://host:port`: the backend's edge.
    pub edge: String,
    /// Edges the devices connect to, device `i` to edge `i % len` (a cluster
    /// soak); empty means `edge`. Metrics are summed over all of them.
    pub device_edges: Vec<String>,
    /// Device tokens (`aud` tether-client), one principal per device as a real
    /// fleet has (device `i` uses token `i % len`); each also serves as the
    /// user credential of the calls to that device's session.
    pub client_tokens: Vec<String>,
    /// A backend token (`aud` tether-backend).
    pub backend_token: String,
    /// Simulated devices.
    pub devices: usize,
    /// The longest the load runs.
    pub duration: Duration,
    /// Ends the load early when cancelled: a test that drives faults on its
    /// own schedule (restarts, outages) stops the load once they have landed,
    /// instead of racing a fixed duration on a busy machine.
    pub stop: Option<CancellationToken>,
    /// Pacing.
    pub load: Load,
    /// Fault mix spec (see [`crate::faults`]).
    pub faults: String,
    /// Seed for every random choice.
    pub seed: u64,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Core's per-tool budget for each call ([`DEFAULT_CALL_BUDGET`]). The
    /// edge's legs end inside it; one shorter than the edge's 7 s leg makes the
    /// edge's late outcomes look lost, which is how the ledger is shown to fire.
    pub call_budget: Duration,
    /// How long every device may take to get a session ([`DEFAULT_FLEET_DEADLINE`]).
    pub fleet_deadline: Duration,
    /// Ride a rolling restart of the edges, as a production fleet and backend
    /// would: every call carries an idempotency key and the driver holds a
    /// link to every edge, re-dialling one whose edge went away and sending a
    /// call again on another, under the same key, when its edge refused it
    /// before delivery or its outcome is unknown; a device whose socket
    /// closes resumes its session on the next edge with its resume token.
    pub rolling: bool,
}

/// Core's per-tool budget (the 12 s of the 7 + 4 + 1 chain).
pub const DEFAULT_CALL_BUDGET: Duration = Duration::from_secs(12);
/// How long the fleet may take to connect before the soak fails.
pub const DEFAULT_FLEET_DEADLINE: Duration = Duration::from_secs(30);
/// Longest wait for the edge to count late answers the devices already sent.
const LATE_SETTLE: Duration = Duration::from_secs(5);

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th.
    pub p90: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }
}

/// One second of the run, for the plot.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds since start.
    pub t: u64,
    /// Calls completed in this second.
    pub calls: u64,
    /// Latency percentiles of those calls.
    pub latency: Percentiles,
}

/// What a soak run measured.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// Devices requested.
    pub devices: usize,
    /// Seconds of load.
    pub duration_s: f64,
    /// The fault mix.
    pub faults: String,
    /// The seed.
    pub seed: u64,
    /// Calls started.
    pub calls_started: u64,
    /// Terminal outcomes the edge delivered, by kind (`ok` or an error kind).
    pub outcomes: BTreeMap<String, u64>,
    /// Started minus terminal outcomes the edge delivered (must be 0).
    pub lost_calls: u64,
    /// Of the lost calls, those that ended only at core's per-tool budget.
    pub lost_at_core_budget: u64,
    /// Simulated devices that got a session at least once (must be all of them).
    pub devices_connected: u64,
    /// Why the first device that could not connect was refused.
    pub first_connect_error: Option<String>,
    /// Second outcomes delivered to the backend (must be 0).
    pub duplicate_outcomes: u64,
    /// Results that belonged to another call or session (must be 0).
    pub misrouted_results: u64,
    /// Late answers the devices sent.
    pub late_injected: u64,
    /// Late answers the edge counted and dropped.
    pub late_counted: u64,
    /// Faults injected, by fault.
    pub injected: BTreeMap<String, u64>,
    /// Latency over all terminal outcomes.
    pub latency_ms: Percentiles,
    /// Calls completed per second.
    pub calls_per_s: f64,
    /// Edge resident memory at start, peak and end, in bytes.
    pub edge_rss_bytes: [u64; 3],
    /// Devices connected at the end of the load phase.
    pub sessions_connected: u64,
    /// Device reconnects after faults.
    pub reconnects: u64,
    /// Keyed calls sent again on another edge after theirs refused them
    /// undelivered (a rolling soak).
    pub calls_resent: u64,
    /// Whether the driver rode a rolling restart ([`SoakConfig::rolling`]).
    pub rolling: bool,
    /// Calls the edge still held after the run (must be 0).
    pub pending_at_end: u64,
    /// Core's per-tool budget per call, in milliseconds.
    pub call_budget_ms: u64,
    /// Per-second throughput and latency.
    pub timeline: Vec<Second>,
}

impl SoakReport {
    /// The invariants this report breaks, as sentences; empty means all held.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if (self.devices_connected as usize) < self.devices {
            let why = self.first_connect_error.as_deref().unwrap_or("no error was reported");
            v.push(format!(
                "only {} of {} simulated devices got a session (first refusal: {why})",
                self.devices_connected, self.devices
            ));
        }
        if self.calls_started == 0 {
            v.push("no calls were started, so nothing was checked".to_owned());
        }
        if self.lost_calls > 0 {
            v.push(format!(
                "{} calls never got a terminal outcome from the edge ({} of them ended only at core's {} ms budget)",
                self.lost_calls, self.lost_at_core_budget, self.call_budget_ms
            ));
        }
        if self.duplicate_outcomes > 0 {
            v.push(format!("{} duplicate outcomes reached the backend", self.duplicate_outcomes));
        }
        if self.misrouted_results > 0 {
            v.push(format!("{} results were delivered to the wrong call or session", self.misrouted_results));
        }
        if self.pending_at_end > 0 {
            v.push(format!("{} calls were still pending at the edge after the run", self.pending_at_end));
        }
        if self.late_counted > self.late_injected {
            v.push(format!(
                "the edge counted {} late answers but only {} were sent",
                self.late_counted, self.late_injected
            ));
        }
        v
    }

    /// The report as a table for stderr.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let mut row = |k: &str, v: String| out.push_str(&format!("{k:<24} {v}\n"));
        row("devices", format!("{} asked, {} got a session", self.devices, self.devices_connected));
        row("duration", format!("{:.1} s", self.duration_s));
        row("faults", self.faults.clone());
        row("seed", self.seed.to_string());
        row("calls started", self.calls_started.to_string());
        for (k, n) in &self.outcomes {
            row(&format!("  outcome {k}"), n.to_string());
        }
        row("lost calls", format!("{} ({} at core's budget)", self.lost_calls, self.lost_at_core_budget));
        row("duplicate outcomes", self.duplicate_outcomes.to_string());
        if self.rolling || self.calls_resent > 0 {
            row("keyed calls resent", self.calls_resent.to_string());
        }
        row("misrouted results", self.misrouted_results.to_string());
        row("late answers", format!("{} counted / {} injected", self.late_counted, self.late_injected));
        let l = &self.latency_ms;
        row(
            "latency ms",
            format!(
                "p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
                l.p50, l.p90, l.p99, l.p999, l.max
            ),
        );
        row("calls/s", format!("{:.0}", self.calls_per_s));
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let [a, b, c] = self.edge_rss_bytes;
        row("edge RSS MiB", format!("start {:.1}  peak {:.1}  end {:.1}", mib(a), mib(b), mib(c)));
        row("sessions connected", self.sessions_connected.to_string());
        row("reconnects", self.reconnects.to_string());
        row("pending at end", self.pending_at_end.to_string());
        out
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[derive(Default)]
struct Tally {
    started: AtomicU64,
    /// Calls the edge gave a terminal outcome.
    completed: AtomicU64,
    /// Calls that ended only at core's own budget: the edge never answered.
    lost_at_core_budget: AtomicU64,
    /// Distinct devices that got a session, and the first refusal.
    devices_connected: AtomicU64,
    first_connect_error: Mutex<Option<String>>,
    misrouted: AtomicU64,
    reconnects: AtomicU64,
    resent: AtomicU64,
    outcomes: Mutex<BTreeMap<String, u64>>,
    latency: Mutex<Option<Histogram<u64>>>,
    second: Mutex<Option<Histogram<u64>>>,
}

fn histogram() -> Option<Histogram<u64>> {
    Histogram::new_with_bounds(1, 120_000_000, 3).ok()
}

impl Tally {
    fn record(&self, outcome: &str, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).max(1);
        *lock(&self.outcomes).entry(outcome.to_owned()).or_default() += 1;
        if let Some(h) = lock(&self.latency).as_mut() {
            let _ = h.record(us);
        }
        if let Some(h) = lock(&self.second).as_mut() {
            let _ = h.record(us);
        }
        self.completed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Metrics the soak reads from the edge's `/metrics`.
#[derive(Debug, Default, Clone, Copy)]
struct EdgeSample {
    rss: u64,
    late: u64,
    in_flight: u64,
    sessions: u64,
}

async fn scrape(edge: &str) -> Option<EdgeSample> {
    let addr = edge.trim_start_matches("ws://").trim_end_matches('/');
    let text = tokio::time::timeout(Duration::from_secs(2), http_get(addr, "/metrics")).await.ok()??;
    let get = |series: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok()))
            .map_or(0, |v| v as u64)
    };
    Some(EdgeSample {
        rss: get("tether_process_resident_bytes "),
        late: get("tether_late_answers_total "),
        in_flight: get("tether_calls_in_flight "),
        sessions: get("tether_sessions "),
    })
}

/// The metrics of several edges summed; an edge that does not answer (it is
/// restarting) counts nothing.
async fn scrape_all(edges: &[String]) -> EdgeSample {
    let mut sum = EdgeSample::default();
    for edge in edges {
        if let Some(s) = scrape(edge).await {
            sum.rss += s.rss;
            sum.late += s.late;
            sum.in_flight += s.in_flight;
            sum.sessions += s.sessions;
        }
    }
    sum
}

/// One plain GET over hyper's client (the edge keeps connections alive, so
/// reading to EOF would wait for its idle timeout).
pub(crate) async fn http_get(addr: &str, path: &str) -> Option<String> {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    let request = http::Request::get(path)
        .header(http::header::HOST, addr)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    String::from_utf8(body.to_vec()).ok()
}

/// The driver's backend links in a rolling soak: one per edge, re-dialled
/// when its edge went away, as an agent backend behind a load balancer would.
struct Links {
    token: String,
    slots: Vec<(String, tokio::sync::Mutex<Option<Arc<BackendLink>>>)>,
    /// `late_responses` of the links already replaced.
    late_before: AtomicU64,
    next: AtomicU64,
}

/// How often one keyed call is sent before its refusal is its outcome.
const MAX_SENDS: u32 = 16;

impl Links {
    /// Links to `edges`, starting with `first`, already open to `first_edge`.
    fn new(edges: &[String], token: &str, first_edge: &str, first: Arc<BackendLink>) -> Links {
        let slots = edges
            .iter()
            .map(|e| (e.clone(), tokio::sync::Mutex::new((e == first_edge).then(|| Arc::clone(&first)))))
            .collect();
        Links { token: token.to_owned(), slots, late_before: AtomicU64::new(0), next: AtomicU64::new(0) }
    }

    /// A live link, trying the edges from `start` on; None when no edge takes one.
    async fn live(&self, start: usize) -> Option<(usize, Arc<BackendLink>)> {
        for k in 0..self.slots.len() {
            let ix = (start + k) % self.slots.len();
            let (url, slot) = &self.slots[ix];
            let mut slot = slot.lock().await;
            if let Some(link) = slot.as_ref().filter(|l| !l.is_closed()) {
                return Some((ix, Arc::clone(link)));
            }
            if let Some(gone) = slot.take() {
                self.late_before.fetch_add(gone.counters().get("late_responses"), Ordering::Relaxed);
            }
            if let Ok(link) = BackendLink::connect(url, &self.token).await {
                let link = Arc::new(link);
                *slot = Some(Arc::clone(&link));
                return Some((ix, link));
            }
        }
        None
    }

    /// A call under an idempotency key of its own, sent again on another
    /// edge while its outcome is a refusal before delivery or unknown, within `budget`.
    async fn call_keyed(
        &self,
        mut params: CallParams,
        nonce: u64,
        budget: Duration,
        tally: &Tally,
    ) -> Result<tether_contract::backend::CallResponse, WireError> {
        params.meta.idempotency_key = Some(format!("soak-{nonce}"));
        let deadline = Instant::now() + budget;
        let chain = tether_contract::Budgets::default();
        let slack = chain.reread + chain.headroom;
        let mut start = self.next.fetch_add(1, Ordering::Relaxed) as usize;
        let mut sends = 0;
        loop {
            let Some((ix, link)) = self.live(start).await else {
                return Err(WireError::new(ErrorKind::ChannelClosed, "no edge took a backend link"));
            };
            sends += 1;
            // The edge is told what is left, less what its own legs may add
            // after the call (a catalog re-read, the headroom): its answer
            // then always lands inside core's wait, never after it.
            let left = deadline.saturating_duration_since(Instant::now());
            let edge_leg = left.saturating_sub(slack);
            params.meta.budget_ms = Some(u64::try_from(edge_leg.as_millis()).unwrap_or(u64::MAX).max(1));
            let outcome = link.call(params.clone(), left).await;
            // Refused before delivery (draining, a session mid-move or not yet
            // listing its tools), or cut off with its outcome unknown: the
            // key makes sending it again safe, which is what keys are for.
            let again = outcome.as_ref().err().is_some_and(|e| {
                matches!(
                    e.kind,
                    ErrorKind::Overloaded
                        | ErrorKind::SessionNotFound
                        | ErrorKind::ToolUnavailable
                        | ErrorKind::ChannelClosed
                )
            });
            let room = deadline.saturating_duration_since(Instant::now()) > slack + Duration::from_secs(1);
            if !again || sends >= MAX_SENDS || !room {
                return outcome;
            }
            tally.resent.fetch_add(1, Ordering::Relaxed);
            start = ix + 1;
            // Backing off past a restart's window: 50 ms doubling to 1 s, inside the budget.
            let pause = Duration::from_millis(50 << sends.min(5)).min(Duration::from_secs(1));
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// Second outcomes over every link the soak held.
    async fn late_responses(&self) -> u64 {
        let mut late = self.late_before.load(Ordering::Relaxed);
        for (_, slot) in &self.slots {
            if let Some(link) = slot.lock().await.as_ref() {
                late += link.counters().get("late_responses");
            }
        }
        late
    }
}

fn over_cap_tools() -> Vec<ToolDeclaration> {
    (0..40)
        .map(|i| {
            let mut t = tool(&format!("bulk_{i:02}"));
            t.description = Some("d".repeat(300 + i * 7));
            t
        })
        .collect()
}

/// Runs a soak and returns its report (the caller decides what a violation does).
pub async fn run(cfg: SoakConfig) -> Result<SoakReport, HarnessError> {
    let mix = Arc::new(FaultMix::parse(&cfg.faults, cfg.seed)?);
    let link = Arc::new(
        BackendLink::connect(&cfg.edge, &cfg.backend_token)
            .await
            .map_err(|source| HarnessError::Link { url: cfg.edge.clone(), source })?,
    );
    let device_edges =
        if cfg.device_edges.is_empty() { vec![cfg.edge.clone()] } else { cfg.device_edges.clone() };
    let mut edges = device_edges.clone();
    if !edges.contains(&cfg.edge) {
        edges.push(cfg.edge.clone());
    }
    let links =
        cfg.rolling.then(|| Arc::new(Links::new(&edges, &cfg.backend_token, &cfg.edge, Arc::clone(&link))));
    let start_sample = scrape_all(&edges).await;
    let live: Arc<Mutex<Vec<Live>>> = Arc::default();
    let tally = Arc::new(Tally {
        latency: Mutex::new(histogram()),
        second: Mutex::new(histogram()),
        ..Tally::default()
    });
    let started_at = Instant::now();
    let load_end = started_at + cfg.duration;
    // Devices keep reconnecting until the driver is done plus a grace period.
    let fleet_end = load_end + Duration::from_secs(15);

    let mut device_tasks = Vec::with_capacity(cfg.devices);
    for i in 0..cfg.devices {
        let (edge, token, mix, live, tally) = (
            device_edges[i % device_edges.len()].clone(),
            Arc::<str>::from(
                cfg.client_tokens.get(i % cfg.client_tokens.len().max(1)).map_or("", String::as_str),
            ),
            Arc::clone(&mix),
            Arc::clone(&live),
            Arc::clone(&tally),
        );
        let (all_edges, rolling) = (device_edges.clone(), cfg.rolling);
        device_tasks.push(tokio::spawn(async move {
            let tools = if i % 25 == 24 { over_cap_tools() } else { vec![tool("op")] };
            let mut spec = DeviceSpec::minimal(tools);
            // An over-cap catalog does not fit one frame: page it, as a real device must.
            spec.page_size = Some(8);
            spec.record_calls = false;
            spec.default_behavior = Behavior::Mixed(Arc::clone(&mix));
            let mut first = true;
            let mut connected_once = false;
            // A rolling soak's device resumes on the next edge, as one told 1012 does.
            let (mut at, mut resume) = (i % all_edges.len(), None::<String>);
            while Instant::now() < fleet_end {
                let edge = if rolling { all_edges[at].as_str() } else { edge.as_str() };
                // A clone shares the spec's answers by key: a resumed device remembers them.
                let mut dev = match SimDevice::resume(edge, &token, spec.clone(), resume.as_deref()).await {
                    Ok(dev) => dev,
                    Err(e) => {
                        lock(&tally.first_connect_error).get_or_insert_with(|| e.to_string());
                        if rolling {
                            at = (at + 1) % all_edges.len();
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if !first {
                    tally.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                first = false;
                // Ready means listed: the edge lists a session before it reports the manifest applied.
                let Some(session) = dev.ready().await else {
                    let why = "the edge closed the connection before the first manifest applied";
                    lock(&tally.first_connect_error).get_or_insert_with(|| why.to_owned());
                    continue;
                };
                if !connected_once {
                    connected_once = true;
                    tally.devices_connected.fetch_add(1, Ordering::Relaxed);
                }
                lock(&live).push((session.clone(), Arc::clone(&token)));
                tokio::select! {
                    _ = dev.closed() => {}
                    _ = tokio::time::sleep_until(fleet_end) => dev.disconnect().await,
                }
                lock(&live).retain(|(s, _)| *s != session);
                if rolling {
                    resume = dev.resume_token();
                    at = (at + 1) % all_edges.len();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }
    // Every device must get a session (bounded): a fleet that cannot connect
    // ends the soak here, failed, rather than driving load at nothing.
    let up_deadline = Instant::now() + cfg.fleet_deadline;
    while (tally.devices_connected.load(Ordering::Relaxed) as usize) < cfg.devices
        && Instant::now() < up_deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fleet_up = tally.devices_connected.load(Ordering::Relaxed) as usize >= cfg.devices;
    let load_end = if fleet_up { load_end } else { Instant::now() };
    let stop = cfg.stop.clone().unwrap_or_default();

    let bar = if cfg.progress {
        let bar = indicatif::ProgressBar::new(cfg.duration.as_secs().max(1));
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len}s {msg}")
        {
            bar.set_style(style);
        }
        Some(bar)
    } else {
        None
    };

    let call_budget = cfg.call_budget;
    let call_one = {
        let (link, links, live, tally) =
            (Arc::clone(&link), links.clone(), Arc::clone(&live), Arc::clone(&tally));
        move |nonce: u64, rng: &mut SplitMix64| {
            let target = {
                let live = lock(&live);
                if live.is_empty() {
                    None
                } else {
                    Some(live[rng.below(live.len() as u64) as usize].clone())
                }
            };
            let (link, links, tally) = (Arc::clone(&link), links.clone(), Arc::clone(&tally));
            async move {
                // Each device runs as its own principal: its token is the call's user credential.
                let Some((session, credential)) = target else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    return;
                };
                tally.started.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                let params = CallParams {
                    session: session.clone(),
                    name: "client__op".into(),
                    arguments: json!({ "nonce": nonce }),
                    meta: CallMeta {
                        // The edge is told the chain's budget; `call_budget` is only how long core waits.
                        budget_ms: Some(u64::try_from(DEFAULT_CALL_BUDGET.as_millis()).unwrap_or(u64::MAX)),
                        credential: Some(credential.to_string()),
                        ..CallMeta::default()
                    },
                };
                let outcome = match &links {
                    Some(links) => links.call_keyed(params, nonce, call_budget, &tally).await,
                    None => link.call(params, call_budget).await,
                };
                if outcome.as_ref().is_err_and(|e| e.timed_out_leg() == Some(Leg::PerTool)) {
                    // Core gave up; the edge never delivered an outcome.
                    tally.lost_at_core_budget.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let kind = match &outcome {
                    Ok(resp) => {
                        let sc = resp.result.structured_content.as_ref();
                        if resp.result.is_error {
                            "client_error (isError)".to_owned()
                        } else {
                            let echoed_nonce = sc.and_then(|s| s["arguments"]["nonce"].as_u64());
                            let echoed_session = sc.and_then(|s| s["session"].as_str());
                            if echoed_nonce != Some(nonce) || echoed_session != Some(session.as_str()) {
                                tally.misrouted.fetch_add(1, Ordering::Relaxed);
                            }
                            "ok".to_owned()
                        }
                    }
                    Err(e) => e.kind.as_str().to_owned(),
                };
                tally.record(&kind, t0.elapsed());
            }
        }
    };

    let mut timeline = Vec::new();
    let mut peak_rss = start_sample.rss;
    let mut nonce = 0u64;
    let sampler_tally = Arc::clone(&tally);
    let mut last_completed = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut workers = tokio::task::JoinSet::new();
    match cfg.load {
        Load::Concurrency(c) => {
            for w in 0..c {
                let (call_one, stop) = (call_one.clone(), stop.clone());
                let seed = cfg.seed ^ (w as u64).wrapping_mul(0x9E37_79B9);
                workers.spawn(async move {
                    let mut rng = SplitMix64::new(seed);
                    let mut n = 0u64;
                    while Instant::now() < load_end && !stop.is_cancelled() {
                        n += 1;
                        call_one((w as u64) << 40 | n, &mut rng).await;
                    }
                });
            }
        }
        Load::Rate(_) => {}
    }
    let mut rng = SplitMix64::new(cfg.seed);
    let mut second = 0u64;
    let rate_interval = match cfg.load {
        Load::Rate(r) if r > 0.0 => Some(Duration::from_secs_f64(1.0 / r)),
        _ => None,
    };
    let mut pace = rate_interval.map(tokio::time::interval);
    loop {
        let now = Instant::now();
        if now >= load_end {
            break;
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {
                second += 1;
                let completed = sampler_tally.completed.load(Ordering::Relaxed);
                let h = std::mem::replace(&mut *lock(&sampler_tally.second), histogram());
                timeline.push(Second {
                    t: second,
                    calls: completed - last_completed,
                    latency: h.as_ref().map(Percentiles::of).unwrap_or_default(),
                });
                last_completed = completed;
                peak_rss = peak_rss.max(scrape_all(&edges).await.rss);
                if let Some(bar) = &bar {
                    bar.set_position(second);
                    let outcomes = lock(&sampler_tally.outcomes).get("ok").copied().unwrap_or(0);
                    bar.set_message(format!("{} calls/s, {} ok, {} live", timeline.last().map_or(0, |s| s.calls), outcomes, lock(&live).len()));
                }
            }
            _ = async { if let Some(p) = pace.as_mut() { p.tick().await; } else { std::future::pending::<()>().await } } => {
                if workers.len() < 10_000 {
                    nonce += 1;
                    workers.spawn(call_one(u64::MAX / 2 + nonce, &mut rng));
                }
            }
        }
    }
    // Every started call must come back: the per-tool budget bounds the wait.
    while workers.join_next().await.is_some() {}
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let elapsed = started_at.elapsed();
    let sessions_connected = scrape_all(&edges).await.sessions;
    let end = settle_late_answers(&edges, &mix, start_sample.late).await;
    peak_rss = peak_rss.max(end.rss);
    for d in device_tasks {
        d.abort();
    }

    let started = tally.started.load(Ordering::Relaxed);
    let completed = tally.completed.load(Ordering::Relaxed);
    let first_connect_error = lock(&tally.first_connect_error).clone();
    let latency = lock(&tally.latency).as_ref().map(Percentiles::of).unwrap_or_default();
    let injected = Fault::ALL.iter().map(|f| (f.name().to_owned(), mix.injected(*f))).collect();
    let outcomes = lock(&tally.outcomes).clone();
    Ok(SoakReport {
        devices: cfg.devices,
        duration_s: elapsed.as_secs_f64(),
        faults: cfg.faults.clone(),
        seed: cfg.seed,
        calls_started: started,
        outcomes,
        lost_calls: started.saturating_sub(completed),
        lost_at_core_budget: tally.lost_at_core_budget.load(Ordering::Relaxed),
        devices_connected: tally.devices_connected.load(Ordering::Relaxed),
        first_connect_error,
        call_budget_ms: u64::try_from(cfg.call_budget.as_millis()).unwrap_or(u64::MAX),
        duplicate_outcomes: match &links {
            Some(links) => links.late_responses().await,
            None => link.counters().get("late_responses"),
        },
        calls_resent: tally.resent.load(Ordering::Relaxed),
        rolling: cfg.rolling,
        misrouted_results: tally.misrouted.load(Ordering::Relaxed),
        late_injected: mix.injected(Fault::Late),
        late_counted: end.late.saturating_sub(start_sample.late),
        injected,
        latency_ms: latency,
        calls_per_s: completed as f64 / elapsed.as_secs_f64().max(0.001),
        edge_rss_bytes: [start_sample.rss, peak_rss, end.rss],
        sessions_connected,
        reconnects: tally.reconnects.load(Ordering::Relaxed),
        pending_at_end: end.in_flight,
        timeline,
    })
}

/// Waits until every late answer the devices scheduled has been sent (or
/// found its socket gone), then until the edge has counted the sent ones; the
/// second wait is bounded by [`LATE_SETTLE`] because an answer can still be
/// lost with a socket that closes as it is written. Returns the edge's metrics.
async fn settle_late_answers(edges: &[String], mix: &FaultMix, late_at_start: u64) -> EdgeSample {
    // Each is due `late_after` after its call reached the device, and every call has joined.
    let due = Instant::now() + mix.late_after + LATE_SETTLE;
    while mix.late_settled() < mix.injected(Fault::Late) && Instant::now() < due {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = Instant::now() + LATE_SETTLE;
    loop {
        let sample = scrape_all(edges).await;
        if sample.late.saturating_sub(late_at_start) >= mix.late_sent() || Instant::now() >= deadline {
            return sample;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes an SVG with throughput and latency percentiles over time.
pub fn plot(report: &SoakReport, path: &std::path::Path) -> Result<(), HarnessError> {
    let failed = |e: &dyn std::fmt::Display| HarnessError::Plot {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let (top, bottom) = root.split_vertically(300);
    let secs = report.timeline.len().max(1) as u64;
    let max_calls = report.timeline.iter().map(|s| s.calls).max().unwrap_or(1).max(1);
    let mut chart = ChartBuilder::on(&top)
        .caption("calls completed per second", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0u64..secs, 0u64..max_calls + max_calls / 10)
        .map_err(|e| failed(&e))?;
    chart.configure_mesh().x_desc("seconds").draw().map_err(|e| failed(&e))?;
    chart
        .draw_series(LineSeries::new(report.timeline.iter().map(|s| (s.t, s.calls)), &BLUE))
        .map_err(|e| failed(&e))?;
    let max_ms = report.timeline.iter().map(|s| s.latency.p99).fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&bottom)
        .caption("latency per second (ms): p50 green, p90 orange, p99 red", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0u64..secs, 0f64..max_ms * 1.1)
        .map_err(|e| failed(&e))?;
    chart.configure_mesh().x_desc("seconds").draw().map_err(|e| failed(&e))?;
    type Pick = fn(&Percentiles) -> f64;
    let series: [(Pick, RGBColor); 3] =
        [(|p| p.p50, GREEN), (|p| p.p90, RGBColor(255, 140, 0)), (|p| p.p99, RED)];
    for (pick, color) in series {
        chart
            .draw_series(LineSeries::new(report.timeline.iter().map(|s| (s.t, pick(&s.latency))), &color))
            .map_err(|e| failed(&e))?;
    }
    root.present().map_err(|e| failed(&e))
}

/// The JSON form of a report.
pub fn to_json(report: &SoakReport) -> Value {
    serde_json::to_value(report).unwrap_or(Value::Null)
}
