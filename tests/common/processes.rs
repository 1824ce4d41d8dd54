//! Real processes for cluster tests: a NATS server and `tether serve` edges,
//! each on a free loopback port and killed on drop.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc(pub Child);

impl Proc {
    /// Kills the process now, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads `child`'s `stream` until a line containing `marker`; panics past 30 s.
fn line_with(stream: impl std::io::Read + Send + 'static, marker: &'static str) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if line.contains(marker) {
                let _ = tx.send(line);
                // Keep draining so the child never blocks on a full pipe.
                continue;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("no line with {marker:?} within 30 s"))
}

/// Debian's `nats-server` on 127.0.0.1, stopped on drop. A test that needs
/// it fails (never skips) when it cannot start.
pub struct NatsServer {
    pub port: u16,
    proc: Option<Proc>,
    config: Option<PathBuf>,
}

impl NatsServer {
    /// Starts on a free port the server picks itself.
    pub fn start() -> NatsServer {
        NatsServer::on_port(None, None)
    }

    /// Starts on `port` (a port a test reserved for it).
    pub fn on(port: u16) -> NatsServer {
        NatsServer::on_port(Some(port), None)
    }

    /// Starts with a server configuration file's `text` (e.g. `max_payload: 2048`).
    pub fn with_config(text: &str) -> NatsServer {
        let path =
            std::env::temp_dir().join(format!("tether-nats-{}-{}.conf", std::process::id(), rand_suffix()));
        std::fs::write(&path, text).expect("nats config");
        NatsServer::on_port(None, Some(path))
    }

    fn on_port(port: Option<u16>, config: Option<PathBuf>) -> NatsServer {
        let port_arg = port.map_or_else(|| "-1".to_owned(), |p| p.to_string());
        let mut command = Command::new("nats-server");
        if let Some(config) = &config {
            command.arg("-c").arg(config);
        }
        let mut child = command
            .args(["-a", "127.0.0.1", "-p", &port_arg])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nats-server must be installed (Debian: apt install nats-server; .ci/run installs it)");
        let stderr = child.stderr.take().expect("piped stderr");
        let line = line_with(stderr, "Listening for client connections on");
        let port = line
            .rsplit(':')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        NatsServer { port, proc: Some(Proc(child)), config }
    }

    /// The URL edges join with.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stops the server, as an outage would.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        *self = NatsServer::on_port(Some(self.port), self.config.take());
    }
}

/// `tether serve --nats …` on 127.0.0.1 with the test secret.
pub struct ServeProc {
    /// `ws://127.0.0.1:PORT`.
    pub url: String,
    pub proc: Proc,
    nats: String,
    data: PathBuf,
}

impl ServeProc {
    /// Starts an edge named `name` in the cluster on `nats`, on a free port.
    pub fn start(nats: &str, name: &str) -> ServeProc {
        ServeProc::start_with(nats, name, "")
    }

    /// [`ServeProc::start`] with more `[cluster]` lines (e.g. `move_wait_ms = 900`).
    pub fn start_with(nats: &str, name: &str, cluster: &str) -> ServeProc {
        let unique = format!("tether-cluster-{}-{name}-{}", std::process::id(), rand_suffix());
        let data = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(&data).expect("data dir");
        let config = format!("[cluster]\nname = \"{name}\"\n{cluster}\n");
        std::fs::write(data.join("tether.toml"), config).expect("config");
        let (url, proc) = ServeProc::spawn(nats, &data, "127.0.0.1:0");
        ServeProc { url, proc, nats: nats.to_owned(), data }
    }

    /// [`ServeProc::start`] exporting its traces to `otlp` as service `edge-{name}`.
    pub fn start_traced(nats: &str, name: &str, otlp: &str) -> ServeProc {
        ServeProc::start_with(
            nats,
            name,
            &format!("\n[telemetry]\notlp_endpoint = \"{otlp}\"\nservice_name = \"edge-{name}\"\n"),
        )
    }

    /// Drains the edge as an upgrade does (SIGTERM: calls in flight finish,
    /// devices are told 1012 and resume elsewhere), waits for it to exit 0,
    /// and starts it again on the same port.
    pub fn drain_restart(&mut self) {
        let pid = self.proc.0.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
        assert!(sent.success(), "SIGTERM reached the edge");
        // 800 tries 50 ms apart: 40 s, past the drain's 12 s and the shutdown grace.
        let status = (0..800)
            .find_map(|_| match self.proc.0.try_wait() {
                Ok(Some(status)) => Some(status),
                _ => {
                    std::thread::sleep(Duration::from_millis(50));
                    None
                }
            })
            .expect("the drained edge exits within 40 s");
        assert!(status.success(), "a drained edge exits 0: {status}");
        let listen = self.url.trim_start_matches("ws://").to_owned();
        let (url, proc) = ServeProc::spawn(&self.nats, &self.data, &listen);
        (self.url, self.proc) = (url, proc);
    }

    /// Kills the edge (as a crash would) and starts it again on the same port.
    pub fn restart(&mut self) {
        self.proc.kill();
        let listen = self.url.trim_start_matches("ws://").to_owned();
        let (url, proc) = ServeProc::spawn(&self.nats, &self.data, &listen);
        (self.url, self.proc) = (url, proc);
    }

    fn spawn(nats: &str, data: &std::path::Path, listen: &str) -> (String, Proc) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["serve", "--listen", listen, "--nats", nats, "--config"])
            .arg(data.join("tether.toml"))
            .env("TETHER_JWT_SECRET", super::SECRET)
            .env("TETHER_DATA_DIR", data)
            .env("RUST_LOG", "warn")
            // A traced edge sends its spans within a fifth of a second, not the SDK's 5 s.
            .env("OTEL_BSP_SCHEDULE_DELAY", "200")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("tether serve starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let line = line_with(stdout, "listening on ws://");
        let url = line.trim().trim_start_matches("listening on ").to_owned();
        (url, Proc(child))
    }

    /// The edge's HTTP base (probes, metrics).
    pub fn http(&self) -> String {
        self.url.replacen("ws://", "http://", 1)
    }
}

impl Drop for ServeProc {
    fn drop(&mut self) {
        self.proc.kill();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The rotel OTLP collector (installed from PyPI by scripts/test-deps), with
/// tests/otlp/dump_spans.py writing every span it receives to a file; killed on drop.
pub struct OtlpReceiver {
    /// OTLP/HTTP base URL (`http://127.0.0.1:PORT`).
    pub endpoint: String,
    spans: PathBuf,
    _proc: Proc,
}

impl OtlpReceiver {
    /// Starts the collector on free loopback ports; fails (never skips) without it.
    pub fn start() -> OtlpReceiver {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let agent = std::fs::read_dir(root.join(".venv/lib"))
            .expect("the test virtualenv (scripts/test-deps)")
            .filter_map(Result::ok)
            .map(|d| d.path().join("site-packages/rotel/rotel-agent"))
            .find(|p| p.exists())
            .expect("rotel-agent in .venv (scripts/test-deps installs rotel from PyPI)");
        let free =
            || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
        let (http, grpc) = (free(), free());
        let spans =
            std::env::temp_dir().join(format!("tether-spans-{}-{}.jsonl", std::process::id(), rand_suffix()));
        let child = Command::new(agent)
            .args(["start", "--exporter", "blackhole"])
            .arg("--otlp-http-endpoint")
            .arg(http.to_string())
            .arg("--otlp-grpc-endpoint")
            .arg(grpc.to_string())
            .arg("--otlp-with-trace-processor")
            .arg(root.join("tests/otlp/dump_spans.py"))
            .env("TETHER_SPANS_FILE", &spans)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rotel-agent starts (it needs libpython3.11)");
        let proc = Proc(child);
        // 300 tries 50 ms apart: 15 s.
        for tries in 0.. {
            if std::net::TcpStream::connect(http).is_ok() {
                break;
            }
            assert!(tries < 300, "rotel did not listen on {http} within 15 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        OtlpReceiver { endpoint: format!("http://{http}"), spans, _proc: proc }
    }

    /// Every span received so far, one JSON object each.
    pub fn spans(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.spans)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.spans);
    }
}
