//! Caller profiles: which sources and tools a caller may see and call, how
//! they are bound, and how slow a source it may wait on.
//!
//! A profile selects *sources and tools*, never data scope: who the user is
//! comes only from a verified credential, so a profile has no tenant or
//! principal field (unknown keys are refused). Listing is a hint to the model;
//! dispatch is the gate — [`crate::Turn`] filters what it lists by the profile
//! and re-checks the profile on every call, so a name the model "knows" but
//! was never shown is refused before anything is sent.
//!
//! ```toml
//! [callers.support]
//! sources = ["client", "records"]  # default ["client"]; "*" for every source
//! tools = ["client__get_*", "read_record"]
//! binding = "direct"               # or "discovery": the model starts with find_tools only
//! latency = "interactive"          # or "background": also reach slow sources
//! ```
//!
//! Profiles come from the `[callers.NAME]` tables of the configuration file and
//! are resolved lazily, one at a time: a malformed profile fails only the
//! caller that asks for it (counted), never the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use toml::{Table, Value};

use tether_contract::{ErrorKind, WireError};
use tether_counters::fallback;

use tether_contract::mcp::ToolDeclaration;
use tether_contract::writes::ApprovalPolicy;

use crate::counters::CoreCounters;
use crate::source::{LatencyClass, CLIENT_SOURCE};

/// One allow-list entry: an exact name, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => self.0 == name,
        }
    }
}

/// How a caller's tools reach the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Binding {
    /// Every reachable tool is listed up front.
    #[default]
    Direct,
    /// Only the `find_tools` meta-tool is listed; a tool becomes callable once
    /// the model has found it (for callers with many tools and little context).
    Discovery,
}

/// What one caller may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerProfile {
    /// Profile name.
    pub name: String,
    /// Reachable source ids (`client`, a registered source, or `*`).
    pub sources: Vec<String>,
    /// Allowed tool names.
    pub tools: Vec<Pattern>,
    /// How the tools are offered.
    pub binding: Binding,
    /// The slowest source this caller may wait on.
    pub latency: LatencyClass,
    /// Which of its calls need the user's approval (default: destructive ones).
    pub approval: ApprovalPolicy,
    /// Tools that need an approval whatever their annotations say.
    pub approval_tools: Vec<Pattern>,
}

impl CallerProfile {
    /// A profile that allows every source and tool (the default when none is configured).
    pub fn everything() -> CallerProfile {
        CallerProfile {
            name: "default".into(),
            sources: vec!["*".into()],
            tools: vec![Pattern("*".into())],
            binding: Binding::Direct,
            latency: LatencyClass::Background,
            approval: ApprovalPolicy::Destructive,
            approval_tools: Vec::new(),
        }
    }

    /// A profile that allows nothing: what a caller with a broken profile gets.
    pub fn nothing(name: &str) -> CallerProfile {
        CallerProfile {
            name: name.into(),
            sources: Vec::new(),
            tools: Vec::new(),
            binding: Binding::Direct,
            latency: LatencyClass::Interactive,
            approval: ApprovalPolicy::Always,
            approval_tools: Vec::new(),
        }
    }

    /// Whether the profile allows the tool name `tool`.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.iter().any(|p| p.matches(tool))
    }

    /// Whether a call to `tool` needs the user's approval under this profile.
    pub fn needs_approval(&self, tool: &ToolDeclaration) -> bool {
        let listed = self.approval_tools.iter().any(|p| p.matches(&tool.name));
        self.approval.needs(tool, listed)
    }

    /// Whether the profile reaches a source with this id and latency class.
    pub fn reaches(&self, source: &str, latency: LatencyClass) -> bool {
        latency <= self.latency && self.sources.iter().any(|s| s == "*" || s == source)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileSection {
    #[serde(default = "client_only")]
    sources: Vec<String>,
    tools: Vec<String>,
    #[serde(default)]
    binding: Binding,
    #[serde(default = "interactive")]
    latency: LatencyClass,
    #[serde(default)]
    approval: ApprovalPolicy,
    #[serde(default)]
    approval_tools: Vec<String>,
}

fn client_only() -> Vec<String> {
    vec![CLIENT_SOURCE.to_owned()]
}

fn interactive() -> LatencyClass {
    LatencyClass::Interactive
}

/// Why a caller profile (or the `[callers]` table) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The text is not TOML, or a profile's fields do not have their types.
    #[error("{0}")]
    Toml(String),
    /// `callers` is not a table of profiles.
    #[error("callers must be a table of profiles")]
    NotATable,
    /// A tool pattern is not a name over `[a-z0-9_]`, optionally ending in `*`.
    #[error("tool pattern {0:?} must be a tool name over [a-z0-9_], optionally ending in *")]
    BadPattern(String),
    /// A source id is empty.
    #[error("source {0:?} must be a source id or *")]
    BadSource(String),
    /// No profile has this name.
    #[error("no caller profile named {0:?}")]
    Unknown(String),
}

fn resolve(name: &str, value: &Value) -> Result<CallerProfile, ProfileError> {
    let section: ProfileSection =
        value.clone().try_into().map_err(|e: toml::de::Error| ProfileError::Toml(e.message().to_owned()))?;
    let tools = patterns(section.tools)?;
    let approval_tools = patterns(section.approval_tools)?;
    if let Some(bad) = section.sources.iter().find(|s| s.is_empty()) {
        return Err(ProfileError::BadSource(bad.clone()));
    }
    Ok(CallerProfile {
        name: name.to_owned(),
        sources: section.sources,
        tools,
        binding: section.binding,
        latency: section.latency,
        approval: section.approval,
        approval_tools,
    })
}

fn patterns(names: Vec<String>) -> Result<Vec<Pattern>, ProfileError> {
    let mut out = Vec::with_capacity(names.len());
    for t in names {
        let stem = t.strip_suffix('*').unwrap_or(&t);
        let valid = t == "*" || (!stem.is_empty() && stem.chars().all(tether_contract::names::is_slug_char));
        if !valid {
            return Err(ProfileError::BadPattern(t));
        }
        out.push(Pattern(t));
    }
    Ok(out)
}

/// Every configured caller profile, resolved on first use.
#[derive(Debug, Default)]
pub struct Profiles {
    raw: Table,
    resolved: Mutex<HashMap<String, Result<Arc<CallerProfile>, ProfileError>>>,
    counters: Arc<CoreCounters>,
}

impl Profiles {
    /// Profiles from the `[callers]` table of a configuration file.
    pub fn from_table(raw: Table, counters: Arc<CoreCounters>) -> Profiles {
        Profiles { raw, resolved: Mutex::default(), counters }
    }

    /// Profiles from a whole configuration file's text (only `[callers]` is read).
    pub fn from_toml(text: &str, counters: Arc<CoreCounters>) -> Result<Profiles, ProfileError> {
        let table: Table =
            text.parse().map_err(|e: toml::de::Error| ProfileError::Toml(e.message().to_owned()))?;
        let raw = match table.get("callers") {
            Some(Value::Table(t)) => t.clone(),
            Some(_) => return Err(ProfileError::NotATable),
            None => Table::new(),
        };
        Ok(Profiles::from_table(raw, counters))
    }

    /// Configured profile names.
    pub fn names(&self) -> Vec<String> {
        self.raw.keys().cloned().collect()
    }

    /// The profile `name`, resolving it now if needed.
    ///
    /// A malformed or unknown profile is a `forbidden` error for this caller
    /// only; the first failure is logged and counted.
    pub fn get(&self, name: &str) -> Result<Arc<CallerProfile>, WireError> {
        let mut cache = tether_rpc::lock(&self.resolved);
        let entry = cache.entry(name.to_owned()).or_insert_with(|| {
            let outcome = match self.raw.get(name) {
                Some(v) => resolve(name, v).map(Arc::new),
                None => Err(ProfileError::Unknown(name.to_owned())),
            };
            if let Err(e) = &outcome {
                fallback!(self.counters.profile_errors, warn, profile = name, error = %e, "caller profile unusable; this caller gets no client tools");
            }
            outcome
        });
        entry.clone().map_err(|e| {
            WireError::new(ErrorKind::Forbidden, format!("caller profile {name}: {e}")).with("profile", name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles(text: &str) -> Profiles {
        Profiles::from_toml(text, Arc::default()).unwrap()
    }

    #[test]
    fn patterns_allow_exact_names_and_prefixes() {
        let p = profiles("[callers.support]\ntools = [\"client__get_*\", \"client__read_value\"]\n");
        let support = p.get("support").unwrap();
        assert!(support.allows("client__get_status"));
        assert!(support.allows("client__read_value"));
        assert!(!support.allows("client__read_value_2"));
        assert!(!support.allows("client__write_value"));
        assert!(CallerProfile::everything().allows("client__anything"));
        assert!(!CallerProfile::nothing("x").allows("client__anything"));
    }

    #[test]
    fn sources_binding_and_latency() {
        let p = profiles(concat!(
            "[callers.chat]\ntools = [\"*\"]\n",
            "[callers.batch]\nsources = [\"client\", \"reports\"]\ntools = [\"*\"]\n",
            "binding = \"discovery\"\nlatency = \"background\"\n",
            "[callers.tenant]\ntools = [\"*\"]\nprincipal = \"leo\"\n",
        ));
        let chat = p.get("chat").unwrap();
        assert_eq!((chat.binding, chat.latency), (Binding::Direct, LatencyClass::Interactive));
        assert!(chat.reaches("client", LatencyClass::Interactive));
        assert!(!chat.reaches("reports", LatencyClass::Interactive), "sources default to the client only");
        let batch = p.get("batch").unwrap();
        assert_eq!(batch.binding, Binding::Discovery);
        assert!(batch.reaches("reports", LatencyClass::Background));
        assert!(!batch.reaches("other", LatencyClass::Interactive));
        let everything = CallerProfile::everything();
        assert!(everything.reaches("anything", LatencyClass::Background));
        let tenant = p.get("tenant").unwrap_err();
        assert!(
            tenant.message.contains("principal"),
            "a profile never carries data scope: {}",
            tenant.message
        );
    }

    #[test]
    fn a_broken_profile_fails_only_its_caller_and_is_counted_once() {
        let counters = Arc::new(CoreCounters::default());
        let text = "[callers.good]\ntools = [\"client__*\"]\n[callers.bad]\ntools = \"all\"\n[callers.worse]\ntools = [\"*x*\"]\n";
        let p = Profiles::from_toml(text, counters.clone()).unwrap();
        assert!(p.get("good").is_ok());
        for name in ["bad", "bad", "worse", "missing"] {
            assert_eq!(p.get(name).unwrap_err().kind, ErrorKind::Forbidden, "{name}");
        }
        assert_eq!(counters.get("profile_errors"), 3, "each broken profile counted once");
        assert!(p.get("good").is_ok(), "the good profile still resolves");
    }
}
