//! The independent mode: the server, the devices and the load driver in
//! three processes, so the figures are the server's alone.
//!
//! The devices ([`super::fleet`]) and the driver ([`super::driver`]) are this
//! binary's hidden `bench-fleet` and `bench-driver` commands, each on one
//! thread. The parent samples the server's `/proc` counters when the driver
//! opens and closes its window: CPU (user + system), context switches (every
//! thread, voluntary and not) and read/write syscalls (`syscr + syscw` of
//! `/proc/PID/io`; `epoll_wait` is not among them).

use std::path::Path;
use std::process::Stdio;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::driver::{DriverReport, Shape};
use super::fleet::FleetSession;
use super::{BenchConfig, Server, Target, SECRET};
use crate::error::HarnessError;

/// Backend links the driver opens.
pub const LINKS: usize = 4;

/// One measurement under the independent driver.
#[derive(Debug, Clone, Serialize)]
pub struct IndependentRow {
    /// Server under test.
    pub target: Target,
    /// Connected sessions (one principal each).
    pub sessions: usize,
    /// Calls in flight across the driver's links.
    pub in_flight: usize,
    /// Whether every result moved the seq (forcing a catalog re-read).
    pub move_seq: bool,
    /// Whether the devices stamped a catalog digest beside the seq (sparing the re-read).
    pub digest: bool,
    /// What each call is: plain, keyed, approved, or a task round trip.
    pub shape: Shape,
    /// Calls answered in the window.
    pub calls: u64,
    /// Calls that failed or went unanswered.
    pub errors: u64,
    /// Calls per second.
    pub calls_per_s: f64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// Server CPU (user + system) per call, µs.
    pub cpu_us_per_call: f64,
    /// Server context switches per call (all threads).
    pub switches_per_call: f64,
    /// Server read/write syscalls per call.
    pub syscalls_per_call: f64,
    /// The device fleet's CPU per call, µs: the server's peers must not be the bottleneck.
    pub fleet_cpu_us_per_call: f64,
    /// The driver's CPU per call, µs.
    pub driver_cpu_us_per_call: f64,
}

/// The server's counters at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    cpu_s: f64,
    switches: u64,
    syscalls: u64,
    fleet_cpu_s: f64,
    driver_cpu_s: f64,
}

fn sample(server: &Server, fleet: Option<u32>, driver: Option<u32>) -> Sample {
    Sample {
        cpu_s: server.cpu_seconds(),
        switches: switches(server.pid),
        syscalls: syscalls(server.pid),
        fleet_cpu_s: fleet.map_or(0.0, super::cpu_seconds),
        driver_cpu_s: driver.map_or(0.0, super::cpu_seconds),
    }
}

/// Voluntary and involuntary context switches of every thread of `pid`.
fn switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .map(|status| {
            status
                .lines()
                .filter(|l| {
                    l.starts_with("voluntary_ctxt_switches") || l.starts_with("nonvoluntary_ctxt_switches")
                })
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// Read-like plus write-like syscalls of `pid` (0 where `/proc/PID/io` is not readable).
fn syscalls(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .filter(|l| l.starts_with("syscr:") || l.starts_with("syscw:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// Runs one row: a fresh server, a fleet of `sessions`, the driver at `in_flight`.
pub(super) async fn measure(
    cfg: &BenchConfig,
    target: Target,
    sessions: usize,
    in_flight: usize,
    move_seq: bool,
    digest: bool,
    shape: Shape,
) -> Result<IndependentRow, HarnessError> {
    let server = Server::start(cfg.exe_for(target), target)?;
    let relay = !target.is_tether();
    let mut fleet = Command::new(&cfg.exe);
    fleet.args(["bench-fleet", "--url", &server.url, "--devices", &sessions.to_string()]);
    if relay {
        fleet.arg("--relay");
    }
    if move_seq {
        fleet.arg("--move-seq");
    }
    if digest {
        fleet.arg("--digest");
    }
    if shape == Shape::Task {
        fleet.arg("--tasks");
    }
    fleet.env("TETHER_BENCH_SECRET", SECRET);
    let (fleet, mut lines) = spawn(fleet, "bench-fleet")?;
    let first = lines.next_line().await.map_err(|e| HarnessError::io("read bench-fleet", e))?;
    let list: Vec<FleetSession> =
        first.as_deref().and_then(|l| serde_json::from_str(l).ok()).ok_or_else(|| HarnessError::Startup {
            server: "bench-fleet".into(),
            line: first.unwrap_or_default(),
        })?;
    if list.len() < sessions {
        return Err(HarnessError::Peer(format!(
            "only {} of {sessions} bench devices got a session",
            list.len()
        )));
    }
    let dir = std::env::temp_dir().join(format!("tether-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| HarnessError::io(dir.display().to_string(), e))?;
    let file = dir.join("sessions.json");
    write_sessions(&file, &list)?;
    let backend = super::jwt::Signer::new(SECRET.as_bytes()).issue("bench-driver", "tether-backend")?;
    let tool = if relay { "op" } else { "client__op" };
    let mut driver = Command::new(&cfg.exe);
    driver
        .args(["bench-driver", "--url", &server.url, "--tool", tool])
        .arg("--sessions")
        .arg(&file)
        .args(["--links", &LINKS.to_string(), "--in-flight", &in_flight.to_string()])
        .args(["--seconds", &cfg.seconds.to_string(), "--shape", shape.name()])
        .env("TETHER_BENCH_BACKEND_TOKEN", backend);
    let (mut driver, mut lines) = spawn(driver, "bench-driver")?;
    let (mut before, mut after) = (None, None);
    let mut report = None;
    while let Some(line) = lines.next_line().await.map_err(|e| HarnessError::io("read bench-driver", e))? {
        match line.as_str() {
            "measuring" => before = Some(sample(&server, fleet.id(), driver.id())),
            "done" => after = Some(sample(&server, fleet.id(), driver.id())),
            other => report = serde_json::from_str::<DriverReport>(other).ok(),
        }
    }
    let _ = driver.wait().await;
    let (Some(before), Some(after), Some(report)) = (before, after, report) else {
        return Err(HarnessError::Peer("bench-driver ended without its report".into()));
    };
    drop(fleet);
    let per_call = |x: f64| if report.calls > 0 { x / report.calls as f64 } else { 0.0 };
    Ok(IndependentRow {
        target,
        sessions,
        in_flight,
        move_seq,
        digest,
        shape,
        calls: report.calls,
        errors: report.errors,
        calls_per_s: report.calls as f64 / cfg.seconds as f64,
        p50_us: report.p50_us,
        p99_us: report.p99_us,
        cpu_us_per_call: per_call((after.cpu_s - before.cpu_s) * 1e6),
        switches_per_call: per_call(after.switches.saturating_sub(before.switches) as f64),
        syscalls_per_call: per_call(after.syscalls.saturating_sub(before.syscalls) as f64),
        fleet_cpu_us_per_call: per_call((after.fleet_cpu_s - before.fleet_cpu_s) * 1e6),
        driver_cpu_us_per_call: per_call((after.driver_cpu_s - before.driver_cpu_s) * 1e6),
    })
}

/// Starts a bench peer (quiet log, stdout piped, killed when dropped) and reads its stdout by line.
fn spawn(mut command: Command, what: &str) -> Result<(Child, Lines<BufReader<ChildStdout>>), HarnessError> {
    let mut child = command
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| HarnessError::io(format!("spawn {what}"), e))?;
    let Some(out) = child.stdout.take() else {
        return Err(HarnessError::Peer(format!("{what} has no stdout")));
    };
    Ok((child, BufReader::new(out).lines()))
}

pub(super) fn write_sessions(path: &Path, list: &[FleetSession]) -> Result<(), HarnessError> {
    let text = serde_json::to_string(list).map_err(|e| HarnessError::Peer(e.to_string()))?;
    std::fs::write(path, text).map_err(|e| HarnessError::io(path.display().to_string(), e))
}

/// `/mcp` against the native link at 100 sessions / 64 in flight, both plain
/// calls in the same run: what the MCP door costs; and, when the bare relay's
/// HTTP door ran too, how much of that any HTTP door to a device costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct McpSummary {
    /// `/mcp` calls/s over the native link's.
    pub mcp_over_native_calls_per_s: f64,
    /// `/mcp` server CPU per call over the native link's.
    pub mcp_over_native_cpu_per_call: f64,
    /// The bare relay's HTTP door: its server CPU per call over tether's native link's (the floor of the ratio above).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bare_http_over_native_cpu_per_call: Option<f64>,
    /// `/mcp` server CPU per call over the bare relay's HTTP door's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_over_bare_http_cpu_per_call: Option<f64>,
}

impl McpSummary {
    /// The ratios, when the run measured both rows (and the native one did work).
    pub fn of(rows: &[IndependentRow]) -> Option<McpSummary> {
        let row = |target: Target, shape: Shape| {
            rows.iter().find(|r| {
                r.target == target
                    && (r.sessions, r.in_flight) == (100, 64)
                    && !r.move_seq
                    && r.shape == shape
            })
        };
        let (native, mcp) = (row(Target::Tether, Shape::Plain)?, row(Target::Tether, Shape::Mcp)?);
        let floor = row(Target::Bare, Shape::Mcp).filter(|f| f.cpu_us_per_call > 0.0);
        (native.calls_per_s > 0.0 && native.cpu_us_per_call > 0.0).then(|| McpSummary {
            mcp_over_native_calls_per_s: mcp.calls_per_s / native.calls_per_s,
            mcp_over_native_cpu_per_call: mcp.cpu_us_per_call / native.cpu_us_per_call,
            bare_http_over_native_cpu_per_call: floor.map(|f| f.cpu_us_per_call / native.cpu_us_per_call),
            mcp_over_bare_http_cpu_per_call: floor.map(|f| mcp.cpu_us_per_call / f.cpu_us_per_call),
        })
    }
}

/// The MCP door's rows: the native link and `/mcp` (raw HTTP, both
/// revisions: 2026-07-28 stateless and a 2025-11-25 session per device) side
/// by side at one call in flight (added latency) and at 64 (throughput, CPU),
/// at 100 sessions and, unless quick, 1,000; each beside the bare relay's
/// WebSocket and HTTP doors at the same load (what the stack alone costs).
async fn mcp_rows(cfg: &BenchConfig, rows: &mut Vec<IndependentRow>) -> Result<(), HarnessError> {
    let sessions: &[usize] = if cfg.quick { &[100] } else { &[100, 1000] };
    for &sessions in sessions {
        for in_flight in [1, 64] {
            let targets = [
                (Target::Bare, Shape::Plain),
                (Target::Tether, Shape::Plain),
                (Target::Bare, Shape::Mcp),
                (Target::Tether, Shape::Mcp),
                (Target::Tether, Shape::McpSession),
            ];
            for (target, shape) in targets {
                let measured = rows.iter().any(|r| {
                    r.target == target
                        && (r.sessions, r.in_flight, r.shape) == (sessions, in_flight, shape)
                        && !r.move_seq
                });
                if measured {
                    continue;
                }
                eprintln!(
                    "bench (independent): {}, {} sessions={sessions} in_flight={in_flight}",
                    target.name(),
                    shape.name()
                );
                rows.push(measure(cfg, target, sessions, in_flight, false, false, shape).await?);
            }
        }
    }
    Ok(())
}

/// The independent rows of one run: both loads for the relay and tether, then
/// tether with a seq that moves on every call, without and with a digest,
/// the write contract's shapes and the MCP door. `mcp_only`: the door alone.
pub(super) async fn run(cfg: &BenchConfig) -> Result<Vec<IndependentRow>, HarnessError> {
    if cfg.mcp_only {
        let mut rows = Vec::new();
        mcp_rows(cfg, &mut rows).await?;
        return Ok(rows);
    }
    let loads: &[(usize, usize)] = if cfg.quick { &[(100, 64)] } else { &[(100, 64), (1000, 256)] };
    let mut rows = Vec::new();
    for &(sessions, in_flight) in loads {
        for target in [Target::Bare, Target::Tether] {
            eprintln!("bench (independent): {} sessions={sessions} in_flight={in_flight}", target.name());
            rows.push(measure(cfg, target, sessions, in_flight, false, false, Shape::Plain).await?);
        }
    }
    eprintln!("bench (independent): tether, seq moves on every call");
    rows.push(measure(cfg, Target::Tether, 100, 64, true, false, Shape::Plain).await?);
    eprintln!("bench (independent): tether, seq moves on every call under a fixed digest");
    rows.push(measure(cfg, Target::Tether, 100, 64, true, true, Shape::Plain).await?);
    // The write contract's costs, beside the plain call above at the same load.
    for shape in [Shape::Keyed, Shape::Approved, Shape::Task] {
        eprintln!("bench (independent): tether, {} calls", shape.name());
        rows.push(measure(cfg, Target::Tether, 100, 64, false, false, shape).await?);
    }
    mcp_rows(cfg, &mut rows).await?;
    Ok(rows)
}

/// The independent table, with ratios against the relay at the same load.
pub(super) fn table(rows: &[IndependentRow]) -> String {
    let mut out = String::from(
        "| target | sessions | in flight | seq moves | call | calls/s | × relay | p50 µs | p99 µs | CPU µs/call | × relay | switches/call | × relay | r/w syscalls/call | errors | fleet / driver CPU µs/call |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        // An HTTP row is held against the relay's HTTP door, a link's against its WebSocket.
        let base = rows.iter().find(|b| {
            b.target == Target::Bare
                && b.sessions == r.sessions
                && b.in_flight == r.in_flight
                && !b.move_seq
                && b.shape.is_mcp() == r.shape.is_mcp()
        });
        let ratio =
            |x: f64, y: Option<f64>| y.filter(|y| *y > 0.0).map_or("—".into(), |y| format!("{:.2}", x / y));
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {:.1} | {} | {:.2} | {} | {:.2} | {} | {:.1} / {:.1} |\n",
            r.target.name(),
            r.sessions,
            r.in_flight,
            match (r.move_seq, r.digest) {
                (false, _) => "never",
                (true, false) => "every call",
                (true, true) => "every call, digest",
            },
            r.shape.name(),
            r.calls_per_s,
            ratio(r.calls_per_s, base.map(|b| b.calls_per_s)),
            r.p50_us,
            r.p99_us,
            r.cpu_us_per_call,
            ratio(r.cpu_us_per_call, base.map(|b| b.cpu_us_per_call)),
            r.switches_per_call,
            ratio(r.switches_per_call, base.map(|b| b.switches_per_call)),
            r.syscalls_per_call,
            r.errors,
            r.fleet_cpu_us_per_call,
            r.driver_cpu_us_per_call,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(shape: Shape, in_flight: usize, calls_per_s: f64, cpu_us_per_call: f64) -> IndependentRow {
        IndependentRow {
            target: Target::Tether,
            sessions: 100,
            in_flight,
            move_seq: false,
            digest: false,
            shape,
            calls: 1,
            errors: 0,
            calls_per_s,
            p50_us: 1,
            p99_us: 1,
            cpu_us_per_call,
            switches_per_call: 0.0,
            syscalls_per_call: 0.0,
            fleet_cpu_us_per_call: 0.0,
            driver_cpu_us_per_call: 0.0,
        }
    }

    #[test]
    fn the_summary_compares_mcp_with_the_native_link_at_64_in_flight_only() {
        let rows = [
            row(Shape::Plain, 1, 5_000.0, 40.0),
            row(Shape::Mcp, 1, 1_000.0, 250.0),
            row(Shape::Plain, 64, 40_000.0, 12.0),
            row(Shape::Mcp, 64, 4_000.0, 60.0),
        ];
        let s = McpSummary::of(&rows).unwrap_or_else(|| panic!("both rows are there"));
        assert!((s.mcp_over_native_calls_per_s - 0.1).abs() < 1e-9, "{s:?}");
        assert!((s.mcp_over_native_cpu_per_call - 5.0).abs() < 1e-9, "{s:?}");
        let json = serde_json::to_value(s).unwrap_or_default();
        assert!(
            json.get("mcp_over_native_calls_per_s").is_some()
                && json.get("mcp_over_native_cpu_per_call").is_some()
        );
        assert_eq!(McpSummary::of(&rows[..3]), None, "no /mcp row at 64 in flight");
        assert_eq!(s.bare_http_over_native_cpu_per_call, None, "no bare HTTP row");
        let floor = IndependentRow { target: Target::Bare, ..row(Shape::Mcp, 64, 30_000.0, 24.0) };
        let with_floor = [&rows[..], &[floor]].concat();
        let s = McpSummary::of(&with_floor).unwrap_or_else(|| panic!("both rows are there"));
        assert_eq!(s.bare_http_over_native_cpu_per_call, Some(2.0), "{s:?}");
        assert_eq!(s.mcp_over_bare_http_cpu_per_call, Some(2.5), "{s:?}");
        assert!((s.mcp_over_native_cpu_per_call - 5.0).abs() < 1e-9, "the floor is not the /mcp row: {s:?}");
    }
}
