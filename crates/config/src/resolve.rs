//! Configuration from a TOML file, `TETHER_*` environment variables and CLI
//! flags, with one precedence: **flags > environment > file > defaults**.
//!
//! Resolution degrades instead of refusing wherever it can: a bad `[caps]`,
//! `[budgets]` or `[limits]` section falls back to that section's defaults,
//! and a bad `[clients.NAME]` profile disables only that profile — each one
//! an [`Issue`] that is logged and counted at boot and printed by
//! `tether config check`. Only what cannot degrade is fatal: an unreadable
//! file, the listen address, and the signing key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use tether_cluster::ClusterConfig;
use tether_contract::writes::ApprovalPolicy;
use tether_contract::{Budgets, Caps};
use tether_core::Profiles;
use tether_edge::config::{BrokenProfile, ClientProfile, EdgeConfig, WritesConfig};
use tether_edge::idp::{IdpConfig, JwksSource};
use tether_telemetry::TelemetryConfig;

use crate::SettingError;

/// One problem found while resolving configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    /// `file:line key` (or `env NAME`, `flag --name`).
    pub location: String,
    /// What is wrong and what was done about it.
    pub message: String,
    /// True when the edge cannot start.
    pub fatal: bool,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Pretty,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = SettingError;
    fn from_str(s: &str) -> Result<Self, SettingError> {
        match s {
            "pretty" => Ok(LogFormat::Pretty),
            "json" => Ok(LogFormat::Json),
            other => Err(SettingError::LogFormat(other.to_owned())),
        }
    }
}

/// CLI flags that override everything else.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--log-format`.
    pub log_format: Option<LogFormat>,
    /// `--nats`: join the cluster on this NATS server.
    pub nats: Option<String>,
    /// `--public-url`: the URL agents reach the MCP endpoint at, behind a proxy.
    pub public_url: Option<String>,
}

/// The outcome of resolution.
#[derive(Debug)]
pub struct Resolved {
    /// The configuration to run with (meaningful only when no issue is fatal).
    pub config: EdgeConfig,
    /// How to log.
    pub log_format: LogFormat,
    /// Everything that was wrong, fatal or degraded.
    pub issues: Vec<Issue>,
    /// Core's caller profiles from `[callers]` (each one checked: a broken
    /// profile is an issue here, and its caller gets no client tools).
    pub callers: Profiles,
    /// The cluster this edge joins (`[cluster]`, `TETHER_NATS`, `--nats`); None: it stands alone.
    pub cluster: Option<ClusterConfig>,
    /// Where traces go (`[telemetry]`, `OTEL_EXPORTER_OTLP_ENDPOINT`); off without an endpoint.
    pub telemetry: TelemetryConfig,
    /// The URL agents reach the MCP endpoint at (`public_url`, `TETHER_PUBLIC_URL`,
    /// `--public-url`); None: built from each request's Host.
    pub public_url: Option<String>,
}

impl Resolved {
    /// Whether the edge can start.
    pub fn is_fatal(&self) -> bool {
        self.issues.iter().any(|i| i.fatal)
    }

    /// The resolved configuration as TOML, secrets redacted (`tether config check`).
    pub fn to_toml(&self) -> String {
        let c = &self.config;
        let b = &c.budgets;
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let mut clients = Table::new();
        for p in &c.client_profiles {
            let mut t = Table::new();
            t.insert("server_name".into(), Value::from(p.server_name.clone()));
            t.insert("max_tools".into(), Value::from(p.caps.max_tools as i64));
            t.insert("manifest_bytes".into(), Value::from(p.caps.manifest_bytes as i64));
            t.insert("description_chars".into(), Value::from(p.caps.description_chars as i64));
            clients.insert(p.name.clone(), Value::Table(t));
        }
        let mut view = toml::toml! {
            listen = (c.listen.to_string())
            data_dir = (c.data_dir.display().to_string())
            jwt_secret = (if c.jwt_secret.is_some() { "<set in file>" } else { "<env TETHER_JWT_SECRET or data_dir file>" })
            log_format = (if self.log_format == LogFormat::Json { "json" } else { "pretty" })
            [caps]
            transport_ceiling = (c.caps.transport_ceiling as i64)
            manifest_bytes = (c.caps.manifest_bytes as i64)
            declaration_bytes = (c.caps.declaration_bytes as i64)
            max_tools = (c.caps.max_tools as i64)
            description_chars = (c.caps.description_chars as i64)
            result_bytes = (c.caps.result_bytes as i64)
            max_list_pages = (c.caps.max_list_pages as i64)
            schema_depth = (c.caps.schema_depth as i64)
            schema_nodes = (c.caps.schema_nodes as i64)
            [budgets]
            client_answer_ms = (ms(b.client_answer) as i64)
            tool_call_ms = (ms(b.tool_call) as i64)
            reread_ms = (ms(b.reread) as i64)
            headroom_ms = (ms(b.headroom) as i64)
            per_tool_ms = (ms(b.per_tool) as i64)
            turn_start_ms = (ms(b.turn_start) as i64)
            turn_start_backoff_ms = (ms(b.turn_start_backoff) as i64)
            approval_ms = (ms(b.approval) as i64)
            task_ms = (ms(b.task) as i64)
            task_poll_ms = (ms(b.task_poll) as i64)
            task_wait_ms = (ms(b.task_wait) as i64)
            [limits]
            handshake_timeout_ms = (ms(c.handshake_timeout) as i64)
            outbound_queue = (c.outbound_queue as i64)
            drain_timeout_ms = (ms(c.drain_timeout) as i64)
            shutdown_grace_ms = (ms(c.shutdown_grace) as i64)
            resume_grace_ms = (ms(c.resume_grace) as i64)
            ping_interval_ms = (ms(c.ping_interval) as i64)
            idle_timeout_ms = (ms(c.idle_timeout) as i64)
            max_sessions_per_principal = (c.max_sessions_per_principal as i64)
            max_unauthenticated_per_ip = (c.max_unauthenticated_per_ip as i64)
        };
        if let Some(url) = &self.public_url {
            view.insert("public_url".into(), Value::from(url.clone()));
        }
        let mut out = toml::to_string(&view).unwrap_or_default();
        if let Some(idp) = &c.identity {
            let mut auth = Table::new();
            match &idp.jwks {
                JwksSource::Url(url) => auth.insert("jwks_url".into(), Value::from(url.clone())),
                JwksSource::File(path) => {
                    auth.insert("jwks_file".into(), Value::from(path.display().to_string()))
                }
            };
            if let Some(iss) = &idp.issuer {
                auth.insert("issuer".into(), Value::from(iss.clone()));
            }
            auth.insert("client_audience".into(), Value::from(idp.client_audience.clone()));
            auth.insert("backend_audience".into(), Value::from(idp.backend_audience.clone()));
            auth.insert("jwks_refresh_secs".into(), Value::from(idp.refresh.as_secs() as i64));
            let mut wrapper = Table::new();
            wrapper.insert("auth".into(), Value::Table(auth));
            out.push('\n');
            out.push_str(&toml::to_string(&wrapper).unwrap_or_default());
        }
        if let Some(cluster) = &self.cluster {
            let mut t = Table::new();
            t.insert("nats".into(), Value::from(cluster.nats.clone()));
            if let Some(name) = &cluster.name {
                t.insert("name".into(), Value::from(name.clone()));
            }
            for (key, path) in cluster_files(cluster) {
                if let Some(path) = path {
                    t.insert(key.into(), Value::from(path.display().to_string()));
                }
            }
            t.insert("heartbeat_ms".into(), Value::from(ms(cluster.heartbeat) as i64));
            t.insert("edge_timeout_ms".into(), Value::from(ms(cluster.edge_timeout) as i64));
            t.insert("hop_ms".into(), Value::from(ms(cluster.hop) as i64));
            t.insert("read_timeout_ms".into(), Value::from(ms(cluster.read_timeout) as i64));
            t.insert("move_wait_ms".into(), Value::from(ms(cluster.move_wait) as i64));
            let mut wrapper = Table::new();
            wrapper.insert("cluster".into(), Value::Table(t));
            out.push('\n');
            out.push_str(&toml::to_string(&wrapper).unwrap_or_default());
        }
        if let Some(endpoint) = &self.telemetry.otlp_endpoint {
            let mut t = Table::new();
            t.insert("otlp_endpoint".into(), Value::from(endpoint.clone()));
            t.insert("service_name".into(), Value::from(self.telemetry.service_name.clone()));
            t.insert("queue".into(), Value::from(self.telemetry.queue as i64));
            let mut wrapper = Table::new();
            wrapper.insert("telemetry".into(), Value::Table(t));
            out.push('\n');
            out.push_str(&toml::to_string(&wrapper).unwrap_or_default());
        }
        if !clients.is_empty() {
            let mut wrapper = Table::new();
            wrapper.insert("clients".into(), Value::Table(clients));
            out.push('\n');
            out.push_str(&toml::to_string(&wrapper).unwrap_or_default());
        }
        out
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapsSection {
    transport_ceiling: Option<usize>,
    manifest_bytes: Option<usize>,
    declaration_bytes: Option<usize>,
    max_tools: Option<usize>,
    description_chars: Option<usize>,
    result_bytes: Option<usize>,
    max_list_pages: Option<usize>,
    schema_depth: Option<usize>,
    schema_nodes: Option<usize>,
}

impl CapsSection {
    fn over(self, base: Caps) -> Caps {
        Caps {
            transport_ceiling: self.transport_ceiling.unwrap_or(base.transport_ceiling),
            manifest_bytes: self.manifest_bytes.unwrap_or(base.manifest_bytes),
            declaration_bytes: self.declaration_bytes.unwrap_or(base.declaration_bytes),
            max_tools: self.max_tools.unwrap_or(base.max_tools),
            description_chars: self.description_chars.unwrap_or(base.description_chars),
            result_bytes: self.result_bytes.unwrap_or(base.result_bytes),
            max_list_pages: self.max_list_pages.unwrap_or(base.max_list_pages),
            schema_depth: self.schema_depth.unwrap_or(base.schema_depth),
            schema_nodes: self.schema_nodes.unwrap_or(base.schema_nodes),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetsSection {
    client_answer_ms: Option<u64>,
    tool_call_ms: Option<u64>,
    reread_ms: Option<u64>,
    headroom_ms: Option<u64>,
    per_tool_ms: Option<u64>,
    turn_start_ms: Option<u64>,
    turn_start_backoff_ms: Option<u64>,
    approval_ms: Option<u64>,
    task_ms: Option<u64>,
    task_poll_ms: Option<u64>,
    task_wait_ms: Option<u64>,
}

impl BudgetsSection {
    fn over(self, b: Budgets) -> Budgets {
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        Budgets {
            client_answer: ms(self.client_answer_ms, b.client_answer),
            tool_call: ms(self.tool_call_ms, b.tool_call),
            reread: ms(self.reread_ms, b.reread),
            headroom: ms(self.headroom_ms, b.headroom),
            per_tool: ms(self.per_tool_ms, b.per_tool),
            turn_start: ms(self.turn_start_ms, b.turn_start),
            turn_start_backoff: ms(self.turn_start_backoff_ms, b.turn_start_backoff),
            approval: ms(self.approval_ms, b.approval),
            task: ms(self.task_ms, b.task),
            task_poll: ms(self.task_poll_ms, b.task_poll),
            task_wait: ms(self.task_wait_ms, b.task_wait),
        }
    }
}

/// `[writes]`: which client tools need an approval, and each session's ledger bounds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WritesSection {
    approval: Option<String>,
    approval_tools: Option<Vec<String>>,
    keys: Option<usize>,
    receipts: Option<usize>,
    approvals: Option<usize>,
    max_age_ms: Option<u64>,
}

impl WritesSection {
    fn over(self, base: &WritesConfig) -> Result<WritesConfig, String> {
        let mut w = base.clone();
        if let Some(name) = self.approval {
            w.approval = ApprovalPolicy::from_name(&name)
                .ok_or_else(|| format!("approval must be never, destructive or always, not {name:?}"))?;
        }
        if let Some(tools) = self.approval_tools {
            w.approval_tools = tools;
        }
        w.limits.keys = self.keys.unwrap_or(w.limits.keys);
        w.limits.receipts = self.receipts.unwrap_or(w.limits.receipts);
        w.limits.approvals = self.approvals.unwrap_or(w.limits.approvals);
        w.limits.max_age = self.max_age_ms.map_or(w.limits.max_age, Duration::from_millis);
        if w.limits.keys == 0 || w.limits.approvals == 0 || w.limits.max_age.is_zero() {
            return Err("keys, approvals and max_age_ms must be at least 1".into());
        }
        Ok(w)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSection {
    handshake_timeout_ms: Option<u64>,
    outbound_queue: Option<usize>,
    drain_timeout_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
    resume_grace_ms: Option<u64>,
    ping_interval_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    max_sessions_per_principal: Option<usize>,
    max_unauthenticated_per_ip: Option<usize>,
}

/// The files a `[cluster]` names, by their keys.
fn cluster_files(c: &ClusterConfig) -> [(&'static str, &Option<PathBuf>); 4] {
    [
        ("credentials", &c.credentials),
        ("tls_ca", &c.tls_ca),
        ("tls_cert", &c.tls_cert),
        ("tls_key", &c.tls_key),
    ]
}

/// `[cluster]`: the NATS server the edges join over, and the cluster's timings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterSection {
    nats: Option<String>,
    name: Option<String>,
    credentials: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    heartbeat_ms: Option<u64>,
    edge_timeout_ms: Option<u64>,
    hop_ms: Option<u64>,
    read_timeout_ms: Option<u64>,
    move_wait_ms: Option<u64>,
}

impl ClusterSection {
    /// The section over the defaults; the NATS address may come later (env, flag).
    fn over(self, mut c: ClusterConfig) -> ClusterConfig {
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        if let Some(nats) = self.nats {
            c.nats = nats;
        }
        c.name = self.name.or(c.name);
        c.credentials = self.credentials.or(c.credentials);
        c.tls_ca = self.tls_ca.or(c.tls_ca);
        c.tls_cert = self.tls_cert.or(c.tls_cert);
        c.tls_key = self.tls_key.or(c.tls_key);
        c.heartbeat = ms(self.heartbeat_ms, c.heartbeat);
        c.edge_timeout = ms(self.edge_timeout_ms, c.edge_timeout);
        c.hop = ms(self.hop_ms, c.hop);
        c.read_timeout = ms(self.read_timeout_ms, c.read_timeout);
        c.move_wait = ms(self.move_wait_ms, c.move_wait);
        c
    }
}

/// `[telemetry]`: where the edge exports its traces (OTLP over HTTP).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TelemetrySection {
    otlp_endpoint: Option<String>,
    service_name: Option<String>,
    queue: Option<usize>,
}

impl TelemetrySection {
    fn over(self, mut t: TelemetryConfig) -> TelemetryConfig {
        t.otlp_endpoint = self.otlp_endpoint.or(t.otlp_endpoint);
        t.service_name = self.service_name.unwrap_or(t.service_name);
        t.queue = self.queue.unwrap_or(t.queue);
        t
    }
}

/// `[auth]`: the users' identity provider, whose tokens the edge accepts
/// beside its own HS256 ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthSection {
    jwks_url: Option<String>,
    jwks_file: Option<PathBuf>,
    issuer: Option<String>,
    client_audience: Option<String>,
    backend_audience: Option<String>,
    jwks_refresh_secs: Option<u64>,
}

impl AuthSection {
    fn resolve(self) -> Result<IdpConfig, SettingError> {
        let jwks = match (self.jwks_url, self.jwks_file) {
            (Some(url), None) if url.starts_with("https://") || url.starts_with("http://") => {
                JwksSource::Url(url)
            }
            (Some(url), None) => return Err(SettingError::JwksUrl(url)),
            (None, Some(file)) => JwksSource::File(file),
            (Some(_), Some(_)) => {
                return Err(SettingError::Rule("set one of jwks_url and jwks_file, not both"))
            }
            (None, None) => return Err(SettingError::Rule("[auth] needs jwks_url or jwks_file")),
        };
        let mut idp = IdpConfig::new(jwks);
        idp.issuer = self.issuer;
        if let Some(aud) = self.client_audience {
            idp.client_audience = aud;
        }
        if let Some(aud) = self.backend_audience {
            idp.backend_audience = aud;
        }
        match self.jwks_refresh_secs {
            Some(0) => return Err(SettingError::Rule("jwks_refresh_secs must be at least 1")),
            Some(secs) => idp.refresh = Duration::from_secs(secs),
            None => {}
        }
        Ok(idp)
    }
}

const TOP_KEYS: &[&str] = &[
    "listen",
    "data_dir",
    "jwt_secret",
    "log_format",
    "allowed_origins",
    "caps",
    "budgets",
    "limits",
    "auth",
    "clients",
    "callers",
    "cluster",
    "writes",
    "telemetry",
    "public_url",
];

/// Finds `key` in the text, inside `[section]` when given, for a `file:line` location.
fn locate(file: &str, text: &str, section: Option<&str>, key: &str) -> String {
    let mut in_section = section.is_none();
    let mut header = None;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            in_section = section.is_some_and(|s| t.trim_matches(|c| c == '[' || c == ']').trim() == s);
            if in_section && header.is_none() {
                header = Some(n + 1);
            }
            continue;
        }
        if in_section && t.split('=').next().is_some_and(|k| k.trim() == key) {
            return format!("{file}:{} {}{key}", n + 1, section.map(|s| format!("{s}.")).unwrap_or_default());
        }
    }
    match (section, header) {
        (Some(s), Some(line)) => format!("{file}:{line} [{s}]"),
        (Some(s), None) => format!("{file} [{s}]"),
        (None, _) => format!("{file} {key}"),
    }
}

fn section<T: DeserializeOwned>(value: &Value) -> Result<T, SettingError> {
    value.clone().try_into().map_err(|e: toml::de::Error| SettingError::Shape(e.message().to_owned()))
}

/// Resolves configuration from an optional file (path and text), the environment and flags.
pub fn resolve(file: Option<(&Path, &str)>, env: impl Fn(&str) -> Option<String>, flags: &Flags) -> Resolved {
    let name = file.map(|(path, _)| path.display().to_string());
    let mut config = EdgeConfig::default();
    let mut issues = Vec::new();
    let mut log_format = LogFormat::default();
    let mut callers = Table::new();
    let mut cluster: Option<ClusterConfig> = None;
    let mut telemetry = TelemetryConfig::default();
    let mut public_url: Option<String> = None;
    let mut issue =
        |location: String, message: String, fatal: bool| issues.push(Issue { location, message, fatal });

    if let Some((path, text)) = file {
        let name = path.display().to_string();
        match text.parse::<Table>() {
            Err(e) => {
                let line = e.span().map(|s| text[..s.start.min(text.len())].lines().count().max(1));
                let location = line.map_or_else(|| name.clone(), |l| format!("{name}:{l}"));
                issue(location, format!("not valid TOML: {}", e.message()), true);
            }
            Ok(table) => {
                for key in table.keys() {
                    if !TOP_KEYS.contains(&key.as_str()) {
                        issue(
                            locate(&name, text, None, key),
                            format!("unknown setting {key:?}; ignored"),
                            false,
                        );
                    }
                }
                match table.get("listen").map(|v| v.as_str().map(str::parse::<SocketAddr>)) {
                    Some(Some(Ok(addr))) => config.listen = addr,
                    Some(_) => issue(
                        locate(&name, text, None, "listen"),
                        "listen must be an address like \"127.0.0.1:7878\"".into(),
                        true,
                    ),
                    None => {}
                }
                match table.get("data_dir").map(Value::as_str) {
                    Some(Some(dir)) => config.data_dir = PathBuf::from(dir),
                    Some(None) => issue(
                        locate(&name, text, None, "data_dir"),
                        "data_dir must be a path string".into(),
                        true,
                    ),
                    None => {}
                }
                match table.get("public_url").map(Value::as_str) {
                    Some(Some(url)) => public_url = Some(url.to_owned()),
                    Some(None) => issue(
                        locate(&name, text, None, "public_url"),
                        "public_url must be a URL string like \"https://agents.example.com\"".into(),
                        true,
                    ),
                    None => {}
                }
                match table.get("jwt_secret").map(Value::as_str) {
                    Some(Some(secret)) if secret.len() >= 32 => config.jwt_secret = Some(secret.to_owned()),
                    Some(_) => issue(
                        locate(&name, text, None, "jwt_secret"),
                        "jwt_secret must be a string of at least 32 bytes".into(),
                        true,
                    ),
                    None => {}
                }
                match table.get("log_format").map(|v| v.as_str().map(str::parse::<LogFormat>)) {
                    Some(Some(Ok(f))) => log_format = f,
                    Some(_) => issue(
                        locate(&name, text, None, "log_format"),
                        "log_format must be \"pretty\" or \"json\"; using pretty".into(),
                        false,
                    ),
                    None => {}
                }
                match table.get("allowed_origins").map(section::<Vec<String>>) {
                    Some(Ok(origins)) => config.allowed_origins = origins,
                    Some(Err(_)) => issue(
                        locate(&name, text, None, "allowed_origins"),
                        "allowed_origins must be a list of exact origins like \"https://app.example.com\""
                            .into(),
                        true,
                    ),
                    None => {}
                }
                if let Some(v) = table.get("caps") {
                    let caps = section::<CapsSection>(v).map(|c| c.over(Caps::default()));
                    match caps.and_then(|c| c.validate().map(|()| c).map_err(SettingError::from)) {
                        Ok(c) => config.caps = c,
                        Err(e) => issue(
                            locate(&name, text, Some("caps"), "caps"),
                            format!("{e}; using default caps"),
                            false,
                        ),
                    }
                }
                if let Some(v) = table.get("budgets") {
                    let budgets = section::<BudgetsSection>(v).map(|b| b.over(Budgets::default()));
                    match budgets.and_then(|b| b.validate().map(|()| b).map_err(SettingError::from)) {
                        Ok(b) => config.budgets = b,
                        Err(e) => issue(
                            locate(&name, text, Some("budgets"), "budgets"),
                            format!("{e}; using default budgets"),
                            false,
                        ),
                    }
                }
                if let Some(v) = table.get("limits") {
                    match section::<LimitsSection>(v) {
                        Ok(l) if l.outbound_queue == Some(0) => issue(
                            locate(&name, text, Some("limits"), "outbound_queue"),
                            "outbound_queue must be at least 1; using default limits".into(),
                            false,
                        ),
                        Ok(l) => {
                            let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
                            config.handshake_timeout = ms(l.handshake_timeout_ms, config.handshake_timeout);
                            config.drain_timeout = ms(l.drain_timeout_ms, config.drain_timeout);
                            config.shutdown_grace = ms(l.shutdown_grace_ms, config.shutdown_grace);
                            config.resume_grace = ms(l.resume_grace_ms, config.resume_grace);
                            config.ping_interval = ms(l.ping_interval_ms, config.ping_interval);
                            config.idle_timeout = ms(l.idle_timeout_ms, config.idle_timeout);
                            config.max_sessions_per_principal =
                                l.max_sessions_per_principal.unwrap_or(config.max_sessions_per_principal);
                            config.max_unauthenticated_per_ip =
                                l.max_unauthenticated_per_ip.unwrap_or(config.max_unauthenticated_per_ip);
                            config.outbound_queue = l.outbound_queue.unwrap_or(config.outbound_queue);
                        }
                        Err(e) => issue(
                            locate(&name, text, Some("limits"), "limits"),
                            format!("{e}; using default limits"),
                            false,
                        ),
                    }
                }
                if let Some(v) = table.get("auth") {
                    match section::<AuthSection>(v).and_then(AuthSection::resolve) {
                        Ok(idp) => config.identity = Some(idp),
                        // A credential setting never degrades: guessing could accept tokens it should not.
                        Err(e) => issue(locate(&name, text, Some("auth"), "auth"), e.to_string(), true),
                    }
                }
                if let Some(clients) = table.get("clients") {
                    match clients.as_table() {
                        Some(clients) => {
                            for (pname, v) in clients {
                                match resolve_client(pname, v, config.caps) {
                                    Ok(p) => config.client_profiles.push(p),
                                    Err(e) => {
                                        let server_name =
                                            v.get("server_name").and_then(Value::as_str).map(str::to_owned);
                                        config
                                            .broken_profiles
                                            .push(BrokenProfile { name: pname.clone(), server_name });
                                        let at = format!("clients.{pname}");
                                        issue(
                                            locate(&name, text, Some(&at), &at),
                                            format!(
                                                "{e}; profile disabled, its devices get the default caps"
                                            ),
                                            false,
                                        );
                                    }
                                }
                            }
                        }
                        None => issue(
                            locate(&name, text, None, "clients"),
                            "clients must be a table of profiles; ignored".into(),
                            false,
                        ),
                    }
                }
                if let Some(v) = table.get("writes") {
                    match section::<WritesSection>(v)
                        .map_err(|e| e.to_string())
                        .and_then(|w| w.over(&config.writes))
                    {
                        Ok(w) => config.writes = w,
                        // A write policy never degrades: a guess could let a write run unapproved.
                        Err(e) => issue(locate(&name, text, Some("writes"), "writes"), e, true),
                    }
                }
                if let Some(v) = table.get("cluster") {
                    match section::<ClusterSection>(v) {
                        Ok(c) => cluster = Some(c.over(ClusterConfig::new(""))),
                        // A cluster setting never degrades: an edge alone when it should be joined splits the fleet.
                        Err(e) => issue(locate(&name, text, Some("cluster"), "cluster"), e.to_string(), true),
                    }
                }
                if let Some(v) = table.get("telemetry") {
                    match section::<TelemetrySection>(v) {
                        Ok(t) => telemetry = t.over(telemetry),
                        // Traces are for watching: a broken section turns them off, never the edge.
                        Err(e) => issue(
                            locate(&name, text, Some("telemetry"), "telemetry"),
                            format!("{e}; traces are not exported"),
                            false,
                        ),
                    }
                }
                if let Some(Value::Table(t)) = table.get("callers") {
                    callers = t.clone();
                }
            }
        }
    }

    // Environment over file.
    if let Some(v) = env("TETHER_LISTEN") {
        match v.parse() {
            Ok(addr) => config.listen = addr,
            Err(_) => issue(
                "env TETHER_LISTEN".into(),
                format!("{v:?} is not an address like 127.0.0.1:7878"),
                true,
            ),
        }
    }
    if let Some(v) = env("TETHER_DATA_DIR") {
        config.data_dir = PathBuf::from(v);
    }
    if let Some(v) = env("TETHER_LOG_FORMAT") {
        match v.parse() {
            Ok(f) => log_format = f,
            Err(e) => issue("env TETHER_LOG_FORMAT".into(), format!("{e}; using {log_format:?}"), false),
        }
    }
    if let Some(v) = env("TETHER_NATS") {
        cluster.get_or_insert_with(|| ClusterConfig::new("")).nats = v;
    }
    if let Some(v) = env("TETHER_PUBLIC_URL").filter(|v| !v.is_empty()) {
        public_url = Some(v);
    }
    // OpenTelemetry's own names, as every collector's docs spell them.
    if let Some(v) = env("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.is_empty()) {
        telemetry.otlp_endpoint = Some(v);
    }
    if let Some(v) = env("OTEL_SERVICE_NAME").filter(|v| !v.is_empty()) {
        telemetry.service_name = v;
    }
    if let Some(endpoint) = telemetry.otlp_endpoint.clone() {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            issue(
                "[telemetry] otlp_endpoint".into(),
                format!("{endpoint:?} is not an http:// or https:// URL (OTLP over HTTP); traces are not exported"),
                false,
            );
            telemetry.otlp_endpoint = None;
        }
    }
    // TETHER_JWT_SECRET is read where the key is loaded (auth), above the file's jwt_secret.

    // Flags over everything.
    if let Some(addr) = flags.listen {
        config.listen = addr;
    }
    if let Some(dir) = &flags.data_dir {
        config.data_dir = dir.clone();
    }
    if let Some(f) = flags.log_format {
        log_format = f;
    }
    if let Some(nats) = &flags.nats {
        cluster.get_or_insert_with(|| ClusterConfig::new("")).nats = nats.clone();
    }
    if let Some(url) = &flags.public_url {
        public_url = Some(url.clone());
    }
    if let Some(url) = public_url.as_deref() {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            let location =
                name.as_deref().map_or_else(|| "public_url".to_owned(), |n| format!("{n} public_url"));
            issue(location, format!("public_url {url:?} must be an http:// or https:// URL"), true);
        }
    }
    // Per edge, so it comes from each edge's environment (a pod's name), over the shared file.
    if let Some(c) = cluster.as_mut() {
        if let Some(v) = env("TETHER_CLUSTER_NAME").filter(|v| !v.is_empty()) {
            c.name = Some(v);
        }
    }
    if let Some(c) = &cluster {
        let location = name.as_deref().map_or_else(|| "[cluster]".to_owned(), |n| format!("{n} [cluster]"));
        if c.nats.is_empty() {
            issue(
                location,
                "a [cluster] needs nats = \"nats://host:4222\" (or TETHER_NATS, --nats)".into(),
                true,
            );
        } else if let Err(e) = c.validate(&config.budgets) {
            issue(location, e.to_string(), true);
        } else {
            for (key, path) in cluster_files(c) {
                if let Some(path) = path.as_ref().filter(|p| !p.is_file()) {
                    issue(location.clone(), format!("{key} {}: no such file", path.display()), true);
                }
            }
        }
    }
    let callers = Profiles::from_table(callers, std::sync::Arc::default());
    for caller in callers.names() {
        if let Err(e) = callers.get(&caller) {
            let location = name
                .as_deref()
                .map_or_else(|| format!("[callers.{caller}]"), |n| format!("{n} [callers.{caller}]"));
            issue(location, format!("{}; this caller would get no client tools", e.message), false);
        }
    }
    Resolved { config, log_format, issues, callers, cluster, telemetry, public_url }
}

/// `[clients.NAME]` is `server_name` plus any `[caps]` keys, inline.
fn resolve_client(name: &str, value: &Value, base: Caps) -> Result<ClientProfile, SettingError> {
    let mut table =
        value.as_table().cloned().ok_or(SettingError::Rule("a client profile must be a table"))?;
    let server_name = match table.remove("server_name") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(SettingError::Rule("server_name must be a string")),
        None => {
            return Err(SettingError::Rule("missing server_name (the device's serverInfo.name to match)"))
        }
    };
    let caps = section::<CapsSection>(&Value::Table(table))?.over(base);
    caps.validate()?;
    if caps.transport_ceiling > base.transport_ceiling {
        return Err(SettingError::CeilingRaised(base.transport_ceiling));
    }
    Ok(ClientProfile { name: name.to_owned(), server_name, caps })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn run(text: &str) -> Resolved {
        resolve(Some((Path::new("tether.toml"), text)), no_env, &Flags::default())
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        let r = run("");
        assert!(r.issues.is_empty());
        assert_eq!(r.config.caps, Caps::default());
        assert_eq!(r.config.budgets, Budgets::default());
    }

    #[test]
    fn telemetry_comes_from_its_section_and_otels_own_variable_wins() {
        let file = "[telemetry]\notlp_endpoint = \"http://collector:4318\"\nservice_name = \"edge-a\"\n";
        let r = run(file);
        assert!(r.issues.is_empty(), "{:?}", r.issues);
        assert_eq!(r.telemetry.otlp_endpoint.as_deref(), Some("http://collector:4318"));
        assert_eq!(r.telemetry.service_name, "edge-a");
        let env = |k: &str| (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://127.0.0.1:4318".to_owned());
        let r = resolve(Some((Path::new("tether.toml"), file)), env, &Flags::default());
        assert_eq!(r.telemetry.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        assert_eq!(run("").telemetry.otlp_endpoint, None, "off by default");
        let r = run("[telemetry]\notlp_endpoint = \"collector:4317\"\n");
        assert_eq!(r.telemetry.otlp_endpoint, None, "a gRPC-style address turns traces off");
        assert!(!r.is_fatal() && r.issues[0].message.contains("not an http://"), "{:?}", r.issues);
    }

    #[test]
    fn a_full_file_resolves() {
        let r = run(r#"
listen = "127.0.0.1:9000"
log_format = "json"
[caps]
max_tools = 16
[budgets]
tool_call_ms = 6000
[limits]
outbound_queue = 64
[clients.kiosk]
server_name = "kiosk-app"
max_tools = 8
[callers.support]
tools = ["client__*"]
"#);
        assert!(r.issues.is_empty(), "{:?}", r.issues);
        assert_eq!(r.config.listen.port(), 9000);
        assert_eq!(r.log_format, LogFormat::Json);
        assert_eq!(r.config.caps.max_tools, 16);
        assert_eq!(r.config.budgets.tool_call, Duration::from_secs(6));
        assert_eq!(r.config.outbound_queue, 64);
        assert_eq!(r.config.client_profiles[0].caps.max_tools, 8);
        assert_eq!(r.config.client_profiles[0].caps.description_chars, 512, "inherits the edge caps");
        assert_eq!(r.callers.names(), vec!["support".to_owned()]);
    }

    #[test]
    fn bad_sections_degrade_and_say_where() {
        let r = run(r#"listen = "127.0.0.1:9000"
[caps]
manifest_bytes = 20000
[budgets]
reread_ms = 9000
[clients.good]
server_name = "a"
[clients.bad]
server_name = "b"
max_tools = "lots"
[clients.typo]
server_name = "c"
max_tool = 3
"#);
        assert!(!r.is_fatal(), "{:?}", r.issues);
        assert_eq!(r.config.caps, Caps::default());
        assert_eq!(r.config.budgets, Budgets::default());
        assert_eq!(r.config.client_profiles.len(), 1);
        assert_eq!(
            r.config.broken_profiles,
            [
                BrokenProfile { name: "bad".into(), server_name: Some("b".into()) },
                BrokenProfile { name: "typo".into(), server_name: Some("c".into()) }
            ]
        );
        let locations: Vec<_> = r.issues.iter().map(|i| i.location.as_str()).collect();
        assert_eq!(
            locations,
            [
                "tether.toml:2 [caps]",
                "tether.toml:4 [budgets]",
                "tether.toml:8 [clients.bad]",
                "tether.toml:11 [clients.typo]"
            ]
        );
        assert!(r.issues[3].message.contains("max_tool"), "{}", r.issues[3].message);
        assert!(
            r.issues[0].message.contains("manifest_bytes") && r.issues[0].message.contains("default caps")
        );
    }

    #[test]
    fn an_identity_provider_section_resolves_with_its_defaults() {
        let r =
            run("[auth]\njwks_url = \"https://idp.example/jwks.json\"\nissuer = \"https://idp.example/\"\n");
        assert!(!r.is_fatal(), "{:?}", r.issues);
        let idp = r.config.identity.as_ref().unwrap();
        assert_eq!(idp.jwks, JwksSource::Url("https://idp.example/jwks.json".into()));
        assert_eq!(idp.issuer.as_deref(), Some("https://idp.example/"));
        assert_eq!(
            (idp.client_audience.as_str(), idp.backend_audience.as_str()),
            ("tether-client", "tether-backend")
        );
        assert!(r.to_toml().contains("[auth]"), "config check shows it");
    }

    #[test]
    fn the_write_policy_and_ledger_bounds_resolve() {
        let r = run("[writes]\napproval = \"always\"\napproval_tools = [\"sendPayment\"]\nreceipts = 16\nmax_age_ms = 60000\n");
        assert!(r.issues.is_empty(), "{:?}", r.issues);
        let w = &r.config.writes;
        assert_eq!(
            (w.approval, w.approval_tools.as_slice()),
            (ApprovalPolicy::Always, &["sendPayment".to_owned()][..])
        );
        assert_eq!((w.limits.receipts, w.limits.max_age), (16, Duration::from_secs(60)));
        assert_eq!(
            run("").config.writes.approval,
            ApprovalPolicy::Destructive,
            "writes need an approval by default"
        );
    }

    #[test]
    fn only_what_cannot_degrade_is_fatal() {
        let fatal = [
            "listen = \"nowhere\"",
            "jwt_secret = \"short\"",
            "this is not toml",
            "[auth]\nissuer = \"https://idp.example\"",
            "[auth]\njwks_url = \"ftp://idp.example/jwks\"",
            "[auth]\njwks_url = \"https://a\"\njwks_file = \"b\"",
            "[auth]\njwks_file = \"k.json\"\naudience = \"typo\"",
            "[writes]\napproval = \"sometimes\"",
            "[writes]\nkeys = 0",
        ];
        for text in fatal {
            assert!(run(text).is_fatal(), "{text}");
        }
        let r = run("listen = \"nowhere\"\n");
        assert_eq!(r.issues[0].location, "tether.toml:1 listen");
        let r = run("colour = \"blue\"\nlog_format = \"xml\"\n");
        assert!(!r.is_fatal());
        assert_eq!(r.issues.len(), 2);
        assert_eq!(r.issues[0].location, "tether.toml:1 colour");
    }

    #[test]
    fn public_url_comes_from_the_file_the_environment_or_the_flag() {
        let file = Some((Path::new("t.toml"), "public_url = \"https://file.example\"\n"));
        assert_eq!(
            resolve(file, no_env, &Flags::default()).public_url.as_deref(),
            Some("https://file.example")
        );
        let env = |k: &str| (k == "TETHER_PUBLIC_URL").then(|| "https://env.example".to_owned());
        assert_eq!(resolve(file, env, &Flags::default()).public_url.as_deref(), Some("https://env.example"));
        let flags = Flags { public_url: Some("https://flag.example".into()), ..Flags::default() };
        assert_eq!(resolve(file, env, &flags).public_url.as_deref(), Some("https://flag.example"));
        assert!(run("").public_url.is_none(), "by default each request's Host says");
        let r = run("public_url = \"agents.example.com\"\n");
        assert!(r.is_fatal() && r.issues[0].message.contains("http:// or https://"), "{:?}", r.issues);
        assert!(run("public_url = \"https://a.example\"\n")
            .to_toml()
            .contains("public_url = \"https://a.example\""));
    }

    #[test]
    fn a_cluster_takes_its_name_from_the_edges_environment_and_checks_its_files() {
        let env = |k: &str| match k {
            "TETHER_NATS" => Some("nats://127.0.0.1:4222".to_owned()),
            "TETHER_CLUSTER_NAME" => Some("edge-7".to_owned()),
            _ => None,
        };
        let file = "[cluster]\nname = \"from-file\"\n";
        let r = resolve(Some((Path::new("t.toml"), file)), env, &Flags::default());
        assert_eq!(r.cluster.as_ref().and_then(|c| c.name.as_deref()), Some("edge-7"));
        let lone = |k: &str| (k == "TETHER_CLUSTER_NAME").then(|| "edge-7".to_owned());
        assert!(resolve(None, lone, &Flags::default()).cluster.is_none(), "a name alone joins no cluster");

        let dir = std::env::temp_dir().join(format!("tether-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "not checked here: async-nats reads it").unwrap();
        let good =
            format!("[cluster]\nnats = \"tls://nats:4222\"\ntls_ca = {:?}\n", ca.display().to_string());
        let r = run(&good);
        assert!(r.issues.is_empty(), "{:?}", r.issues);
        assert_eq!(r.cluster.as_ref().and_then(|c| c.tls_ca.clone()), Some(ca.clone()));
        assert!(r.to_toml().contains("tls_ca"));
        let missing = "[cluster]\nnats = \"nats://n:4222\"\ncredentials = \"/nonexistent/edge.creds\"\n";
        let r = run(missing);
        assert!(
            r.is_fatal() && r.issues[0].message.contains("credentials /nonexistent/edge.creds: no such file")
        );
        let half =
            format!("[cluster]\nnats = \"nats://n:4222\"\ntls_cert = {:?}\n", ca.display().to_string());
        let r = run(&half);
        assert!(
            r.is_fatal() && r.issues[0].message.contains("tls_cert and tls_key go together"),
            "{:?}",
            r.issues
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn precedence_is_flags_then_env_then_file() {
        let text = "listen = \"127.0.0.1:1000\"\nlog_format = \"pretty\"\n";
        let env = |k: &str| match k {
            "TETHER_LISTEN" => Some("127.0.0.1:2000".to_owned()),
            "TETHER_LOG_FORMAT" => Some("json".to_owned()),
            _ => None,
        };
        let file = Some((Path::new("t.toml"), text));
        let r = resolve(file, env, &Flags::default());
        assert_eq!(r.config.listen.port(), 2000);
        assert_eq!(r.log_format, LogFormat::Json);
        let flags = Flags { listen: Some("127.0.0.1:3000".parse().unwrap()), ..Flags::default() };
        let r = resolve(file, env, &flags);
        assert_eq!(r.config.listen.port(), 3000);
        let r = resolve(file, no_env, &Flags::default());
        assert_eq!(r.config.listen.port(), 1000);
    }
}
