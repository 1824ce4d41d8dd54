//! A user's devices as one MCP server: which device each tool name reaches.
//!
//! One device in scope: its tools keep the names the edge gave them
//! (`client__scan_barcode`). Several: every name carries its device's label
//! in front (`fieldkit_mobile__client__scan_barcode`), so none collides and
//! the model can see where a tool runs. The label is the device's
//! `serverInfo.name`, slugged; when two devices share it, both get the first
//! eight characters of their session id added. A label is stable for as long
//! as its device stays connected.

use serde_json::Value;

use tether_contract::backend::SessionInfo;
use tether_contract::names::PREFIX;

/// Longest device label, in bytes (names stay far below MCP's 128).
const MAX_LABEL: usize = 24;

/// One device in a user's scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Edge session id.
    pub session: String,
    /// The name prefix this device's tools carry when several are in scope.
    pub label: String,
    /// What the device calls itself (`serverInfo.name`), for descriptions.
    pub name: String,
}

/// Where a tool name goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This device, under this (edge-namespaced) name.
    Device {
        /// Session id.
        session: String,
        /// The name core's dispatcher knows (`client__…`).
        namespaced: String,
    },
    /// A bare name while several devices are in scope: whichever offers it.
    Bare(String),
    /// Nothing in scope could carry this name.
    Unknown,
}

fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    out.truncate(MAX_LABEL);
    let out = out.trim_end_matches('_').to_owned();
    match out.as_str() {
        // A label must never read as the start of a bare name.
        "" | "client" => "device".to_owned(),
        _ => out,
    }
}

/// The devices in scope with their labels, in session order.
pub fn devices(sessions: &[SessionInfo]) -> Vec<Device> {
    let named: Vec<(String, String)> = sessions
        .iter()
        .map(|s| {
            let name = s.server_info.get("name").and_then(Value::as_str).unwrap_or("device").to_owned();
            (s.session.clone(), name)
        })
        .collect();
    named
        .iter()
        .map(|(session, name)| {
            let base = slug(name);
            let shared = named.iter().filter(|(_, other)| slug(other) == base).count() > 1;
            let label = if shared {
                let short: String = session.chars().filter(char::is_ascii_alphanumeric).take(8).collect();
                format!("{base}_{}", short.to_ascii_lowercase())
            } else {
                base
            };
            Device { session: session.clone(), label, name: name.clone() }
        })
        .collect()
}

/// The name a tool is listed under: as is for one device, labelled for several.
pub fn listed_name(device: &Device, namespaced: &str, several: bool) -> String {
    if several {
        format!("{}__{namespaced}", device.label)
    } else {
        namespaced.to_owned()
    }
}

/// Where a called name goes among `devices`.
pub fn resolve(name: &str, devices: &[Device]) -> Target {
    if devices.len() == 1 {
        return Target::Device { session: devices[0].session.clone(), namespaced: name.to_owned() };
    }
    if name.starts_with(PREFIX) {
        return Target::Bare(name.to_owned());
    }
    if let Some((label, rest)) = name.split_once("__") {
        if rest.starts_with(PREFIX) {
            if let Some(device) = devices.iter().find(|d| d.label == label) {
                return Target::Device { session: device.session.clone(), namespaced: rest.to_owned() };
            }
        }
    }
    Target::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(session: &str, name: &str) -> SessionInfo {
        SessionInfo {
            session: session.into(),
            principal: "mira".into(),
            server_info: json!({"name": name}),
            protocol_version: String::new(),
            seq: 1,
            tools: 1,
        }
    }

    #[test]
    fn labels_are_slugs_and_shared_names_get_the_session_added() {
        let sessions = [
            info("0a1b2c3d-aaaa", "Fieldkit Mobile"),
            info("9f8e7d6c-bbbb", "Fieldkit Mobile"),
            info("55555555-cccc", "kiosk"),
            info("66666666-dddd", "client"),
        ];
        let labels: Vec<_> = devices(&sessions).into_iter().map(|d| d.label).collect();
        assert_eq!(labels, ["fieldkit_mobile_0a1b2c3d", "fieldkit_mobile_9f8e7d6c", "kiosk", "device"]);
    }

    #[test]
    fn names_resolve_to_their_device_and_bare_names_are_told_apart() {
        let one = devices(&[info("s1", "kiosk")]);
        let want = Target::Device { session: "s1".into(), namespaced: "client__scan".into() };
        assert_eq!(resolve("client__scan", &one), want);

        let two = devices(&[info("s1", "kiosk"), info("s2", "phone")]);
        assert_eq!(listed_name(&two[1], "client__scan", true), "phone__client__scan");
        let want = Target::Device { session: "s2".into(), namespaced: "client__scan".into() };
        assert_eq!(resolve("phone__client__scan", &two), want);
        assert_eq!(resolve("client__scan", &two), Target::Bare("client__scan".into()));
        assert_eq!(resolve("tablet__client__scan", &two), Target::Unknown);
        assert_eq!(resolve("phone__scan", &two), Target::Unknown);
    }
}
