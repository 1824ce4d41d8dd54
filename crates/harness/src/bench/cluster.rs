//! `tether bench --cluster`: many idle sessions over several edges joined by
//! one NATS server, then calls from one backend — to sessions on its own
//! edge, to sessions on the others, and to all of them.
//!
//! Every party is a process of its own: `nats-server`, the edges (`tether
//! serve --nats`), one device fleet per edge (`tether bench-fleet`, each from
//! its own loopback source address, since one process may hold at most the
//! machine's file-descriptor limit) and the raw-frame driver. Memory per
//! session is the edges' (and NATS's) resident growth from before the fleets
//! connected to after, divided by the sessions.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::driver::DriverReport;
use super::fleet::FleetSession;
use super::independent::write_sessions;
use super::{jwt, SECRET};
use crate::error::HarnessError;

/// What the cluster bench runs.
#[derive(Debug, Clone)]
pub struct ClusterBenchConfig {
    /// The `tether` binary.
    pub exe: PathBuf,
    /// Idle sessions in all.
    pub sessions: usize,
    /// Edges (and device fleets, one per edge).
    pub edges: usize,
    /// Seconds per call measurement.
    pub seconds: u64,
}

/// One call measurement: which sessions, how many calls in flight, what it did.
#[derive(Debug, Clone, Serialize)]
pub struct CallRow {
    /// `local` (held by the backend's edge), `remote` (held by the others) or `all`.
    pub sessions: &'static str,
    /// Calls in flight.
    pub in_flight: usize,
    /// Calls per second over the window.
    pub calls_per_s: f64,
    /// What the driver saw.
    pub report: DriverReport,
}

/// What the cluster bench measured.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    /// Sessions connected.
    pub sessions: usize,
    /// Edges.
    pub edges: usize,
    /// Seconds from the fleets' start until every session was callable.
    pub connect_s: f64,
    /// The edges' resident memory, summed, before and after the fleets connected.
    pub edges_rss: [u64; 2],
    /// The NATS server's resident memory before and after.
    pub nats_rss: [u64; 2],
    /// CPU seconds spent while the fleets connected: the edges, the device
    /// processes and the NATS server (where a slow connect rate comes from).
    pub connect_cpu_s: [f64; 3],
    /// The call measurements.
    pub calls: Vec<CallRow>,
}

/// A child that is killed when dropped, and its pid.
struct Peer {
    child: Child,
    pid: u32,
}

fn spawn(mut command: Command, what: &str, stdout: bool) -> Result<Peer, HarnessError> {
    let child = command
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(if stdout { Stdio::piped() } else { Stdio::null() })
        .stderr(if stdout { Stdio::inherit() } else { Stdio::piped() })
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| HarnessError::io(format!("spawn {what}"), e))?;
    let pid = child.id().unwrap_or(0);
    Ok(Peer { child, pid })
}

/// Reads `peer`'s stdout (or stderr) until a line containing `marker`, then
/// keeps draining it in the background so the peer never blocks on a full pipe.
async fn line_with(
    peer: &mut Peer,
    marker: &str,
    within: Duration,
    what: &str,
) -> Result<String, HarnessError> {
    let mut lines: Box<dyn tokio::io::AsyncBufRead + Unpin + Send> =
        match (peer.child.stdout.take(), peer.child.stderr.take()) {
            (Some(out), _) => Box::new(BufReader::new(out)),
            (None, Some(err)) => Box::new(BufReader::new(err)),
            (None, None) => return Err(HarnessError::Peer(format!("{what} has no output"))),
        };
    let found = tokio::time::timeout(within, async {
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) if line.contains(marker) => return Some(line.trim().to_owned()),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .flatten()
    .ok_or_else(|| HarnessError::Startup {
        server: what.to_owned(),
        line: format!("no line with {marker:?}"),
    })?;
    tokio::spawn(async move {
        let mut sink = String::new();
        while lines.read_line(&mut sink).await.is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    Ok(found)
}

/// Runs the cluster bench.
pub async fn run(cfg: ClusterBenchConfig) -> Result<ClusterReport, HarnessError> {
    let edges = cfg.edges.max(2);
    let dir = std::env::temp_dir().join(format!("tether-bench-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| HarnessError::io(dir.display().to_string(), e))?;

    let mut nats_cmd = Command::new("nats-server");
    nats_cmd.args(["-a", "127.0.0.1", "-p", "-1"]);
    let mut nats = spawn(nats_cmd, "nats-server", false)?;
    let listening =
        line_with(&mut nats, "Listening for client connections on", Duration::from_secs(10), "nats-server")
            .await?;
    let port = listening.rsplit(':').next().unwrap_or_default().trim().to_owned();
    let nats_url = format!("nats://127.0.0.1:{port}");
    eprintln!("bench (cluster): NATS on {nats_url}");

    let mut servers = Vec::with_capacity(edges);
    let mut urls = Vec::with_capacity(edges);
    for i in 0..edges {
        let edge_dir = dir.join(format!("edge-{i}"));
        std::fs::create_dir_all(&edge_dir)
            .map_err(|e| HarnessError::io(edge_dir.display().to_string(), e))?;
        let config = edge_dir.join("tether.toml");
        std::fs::write(&config, format!("[cluster]\nname = \"edge-{i}\"\n"))
            .map_err(|e| HarnessError::io(config.display().to_string(), e))?;
        let mut cmd = Command::new(&cfg.exe);
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--nats", &nats_url, "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&edge_dir)
            .env("TETHER_JWT_SECRET", SECRET);
        let mut edge = spawn(cmd, "tether serve", true)?;
        let line =
            line_with(&mut edge, "listening on ws://", Duration::from_secs(30), "tether serve").await?;
        urls.push(line.trim_start_matches("listening on ").to_owned());
        servers.push(edge);
    }
    for url in &urls {
        let addr = url.trim_start_matches("ws://").to_owned();
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::soak::http_get(&addr, "/readyz").await.as_deref() != Some("ready\n") {
            if Instant::now() > deadline {
                return Err(HarnessError::Peer(format!("edge {url} did not join the cluster")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let edges_before: u64 = servers.iter().map(|s| super::rss_bytes(s.pid)).sum();
    let nats_before = super::rss_bytes(nats.pid);

    eprintln!("bench (cluster): {} sessions over {edges} edges", cfg.sessions);
    let edges_cpu = |servers: &[Peer]| servers.iter().map(|s| super::cpu_seconds(s.pid)).sum::<f64>();
    let (edges_cpu_before, nats_cpu_before) = (edges_cpu(&servers), super::cpu_seconds(nats.pid));
    let started = Instant::now();
    let mut fleets = Vec::with_capacity(edges);
    for (i, url) in urls.iter().enumerate() {
        let devices = cfg.sessions / edges + usize::from(i < cfg.sessions % edges);
        let mut cmd = Command::new(&cfg.exe);
        cmd.args(["bench-fleet", "--url", url, "--devices", &devices.to_string()])
            .args(["--source", &format!("127.0.0.{}", i + 2)])
            .env("TETHER_BENCH_SECRET", SECRET);
        fleets.push((spawn(cmd, "bench-fleet", true)?, devices));
    }
    let mut per_edge: Vec<Vec<FleetSession>> = Vec::with_capacity(edges);
    for (fleet, devices) in &mut fleets {
        let line = line_with(fleet, "[", Duration::from_secs(330), "bench-fleet").await?;
        let list: Vec<FleetSession> = serde_json::from_str(&line)
            .map_err(|e| HarnessError::Peer(format!("bench-fleet's sessions: {e}")))?;
        if list.len() < *devices {
            return Err(HarnessError::Peer(format!(
                "only {} of {devices} devices got a session",
                list.len()
            )));
        }
        per_edge.push(list);
    }
    let connect_s = started.elapsed().as_secs_f64();
    let connect_cpu_s = [
        edges_cpu(&servers) - edges_cpu_before,
        fleets.iter().map(|(f, _)| super::cpu_seconds(f.pid)).sum(),
        super::cpu_seconds(nats.pid) - nats_cpu_before,
    ];
    // Let allocators settle and the last subscriptions land before reading memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let edges_after: u64 = servers.iter().map(|s| super::rss_bytes(s.pid)).sum();
    let nats_after = super::rss_bytes(nats.pid);

    let local: Vec<FleetSession> = per_edge[0].clone();
    let remote: Vec<FleetSession> = per_edge[1..].iter().flatten().cloned().collect();
    let all: Vec<FleetSession> = per_edge.iter().flatten().cloned().collect();
    let backend = jwt::Signer::new(SECRET.as_bytes()).issue("bench-driver", "tether-backend")?;
    let mut calls = Vec::new();
    for (name, list, in_flight) in [
        ("local", &local, 1),
        ("remote", &remote, 1),
        ("local", &local, 64),
        ("remote", &remote, 64),
        ("all", &all, 64),
    ] {
        eprintln!("bench (cluster): calls to {name} sessions, {in_flight} in flight");
        let file = dir.join(format!("sessions-{name}.json"));
        write_sessions(&file, list)?;
        let mut cmd = Command::new(&cfg.exe);
        cmd.args(["bench-driver", "--url", &urls[0], "--tool", "client__op"])
            .arg("--sessions")
            .arg(&file)
            .args(["--links", "4", "--in-flight", &in_flight.to_string()])
            .args(["--seconds", &cfg.seconds.to_string()])
            .env("TETHER_BENCH_BACKEND_TOKEN", &backend);
        let mut driver = spawn(cmd, "bench-driver", true)?;
        let line = line_with(&mut driver, "\"calls\"", Duration::from_secs(cfg.seconds + 60), "bench-driver")
            .await?;
        let report: DriverReport = serde_json::from_str(&line)
            .map_err(|e| HarnessError::Peer(format!("bench-driver's report: {e}")))?;
        let _ = driver.child.wait().await;
        calls.push(CallRow {
            sessions: name,
            in_flight,
            calls_per_s: report.calls as f64 / cfg.seconds as f64,
            report,
        });
    }
    drop(fleets);
    drop(servers);
    drop(nats);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ClusterReport {
        sessions: cfg.sessions,
        edges,
        connect_s,
        edges_rss: [edges_before, edges_after],
        nats_rss: [nats_before, nats_after],
        connect_cpu_s,
        calls,
    })
}

impl ClusterReport {
    /// The report as tables.
    pub fn table(&self) -> String {
        let per = |[a, b]: [u64; 2]| b.saturating_sub(a) as f64 / self.sessions.max(1) as f64 / 1024.0;
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let mut out = format!(
            "| sessions | edges | connect s | sessions/s | edges RSS MiB (before → after) | KiB/session (edges) | NATS RSS MiB | KiB/session (NATS) |\n|---|---|---|---|---|---|---|---|\n| {} | {} | {:.1} | {:.0} | {:.0} → {:.0} | {:.1} | {:.0} → {:.0} | {:.2} |\n\n",
            self.sessions,
            self.edges,
            self.connect_s,
            self.sessions as f64 / self.connect_s.max(0.001),
            mib(self.edges_rss[0]),
            mib(self.edges_rss[1]),
            per(self.edges_rss),
            mib(self.nats_rss[0]),
            mib(self.nats_rss[1]),
            per(self.nats_rss),
        );
        out.push_str(
            "| calls to | in flight | calls/s | p50 µs | p99 µs | errors |\n|---|---|---|---|---|---|\n",
        );
        for r in &self.calls {
            out.push_str(&format!(
                "| {} sessions | {} | {:.0} | {} | {} | {} |\n",
                r.sessions, r.in_flight, r.calls_per_s, r.report.p50_us, r.report.p99_us, r.report.errors
            ));
        }
        out
    }
}
