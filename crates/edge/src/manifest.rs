//! A session's applied manifest and the seq rule that guards swaps.
//!
//! Catalog re-reads can run concurrently and their answers can arrive in any
//! order; arrival order means nothing. [`ManifestState::offer`] applies a
//! candidate only if its seq is newer than the applied one, so the rule lives
//! inside the one type that holds the manifest and no caller can forget it.

use std::sync::{Arc, RwLock};

use serde_json::value::RawValue;
use serde_json::Value;
use tether_contract::backend::{DroppedTool, Manifest};
use tether_contract::mcp::ToolDeclaration;

use crate::caps::Intake;
use crate::gate::ArgumentGate;
use crate::names::NameTable;

/// One applied manifest: what the backend sees and how to route back.
///
/// Per session it holds only its seqs, its context and two hashes: the
/// intake (kept tools, names, gate) is shared by every session that declared
/// the same catalog, and the backend view is built when a backend reads it.
#[derive(Debug, Clone)]
pub struct AppliedManifest {
    /// Seq of this manifest (device-stamped, or edge issue-order stamp).
    pub seq: u64,
    /// The seq at which the content (tools, context) last changed: a seq
    /// that moves over the same catalog changes nothing a backend holds.
    pub content_seq: u64,
    /// The intake made from the declared catalog under the caps (shared by
    /// the sessions that declared the same one, see [`crate::shared`]).
    intake: Arc<Intake>,
    /// The device's context `{pointer, snapshot}`, when it sent one.
    context: Option<Arc<Value>>,
    /// A fingerprint of the catalog as the device declared it (and its
    /// context), to recognise a re-read that changed nothing without keeping
    /// the declared text.
    declared: Fingerprint,
    /// The device's own digest of that catalog, when it stamps one.
    digest: Option<Digest>,
}

/// A 64-bit hash of the digest a device stamps (`tether.dev/digest`): kept
/// instead of the string so a session's cost does not grow with the length
/// the device chose. A device that lies with it only stales its own catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest(u64);

impl Digest {
    /// Hashes the device's digest string.
    pub fn of(device: &str) -> Digest {
        Digest(hash64(device))
    }
}

/// A 64-bit hash of `value`, for comparisons that need no second copy of it.
fn hash64(value: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// The serialized length and a 64-bit hash of a declared catalog and context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    len: usize,
    hash: u64,
}

impl Fingerprint {
    /// Fingerprints a declared catalog (as its JSON `text`) and its context.
    pub fn of(text: &str, context: Option<&Value>) -> Fingerprint {
        let context = context.map(Value::to_string).unwrap_or_default();
        Fingerprint { len: text.len() + context.len(), hash: hash64((text, context.as_str())) }
    }
}

impl AppliedManifest {
    /// Applies `intake` at `seq`; `declared` is the fingerprint of the
    /// catalog and context it was made from.
    pub fn new(seq: u64, intake: Arc<Intake>, context: Option<Value>, declared: Fingerprint) -> Self {
        AppliedManifest {
            seq,
            content_seq: seq,
            intake,
            context: context.map(Arc::new),
            declared,
            digest: None,
        }
    }

    /// This manifest with the device's digest of the catalog it was made from.
    pub fn with_digest(mut self, digest: Option<Digest>) -> AppliedManifest {
        self.digest = digest;
        self
    }

    /// Whether the device's digest says its catalog is still the one applied:
    /// a moved seq under it needs no re-read.
    pub fn vouched_by(&self, digest: Option<Digest>) -> bool {
        self.digest.is_some() && digest == self.digest
    }

    /// Whether a catalog with this fingerprint is what this manifest was made from.
    pub fn same_content(&self, declared: Fingerprint) -> bool {
        self.declared == declared
    }

    /// This manifest under a new seq, content untouched: no intake, no schema
    /// compile, no copy, and nothing for a backend to re-read.
    pub fn reseq(&self, seq: u64, digest: Option<Digest>) -> AppliedManifest {
        AppliedManifest { seq, digest, ..self.clone() }
    }

    /// The backend view of `session` (whose handshake said `identity`) under
    /// this manifest's seq, built on read: sessions share their intake, so
    /// none holds a copy of its tools for a read that may never come.
    pub fn view(&self, session: &str, identity: &Identity) -> Manifest {
        Manifest {
            session: session.to_owned(),
            seq: self.seq,
            tools: self.intake.tools.clone(),
            instructions: identity.instructions.clone(),
            concept: identity.concept.clone(),
            context: self.context.as_deref().cloned(),
            dropped: self.intake.dropped.clone(),
        }
    }

    /// The kept tools as the backend sees them (namespaced).
    pub fn tools(&self) -> &[ToolDeclaration] {
        &self.intake.tools
    }

    /// Namespaced names of the tools available now, for `tool_unavailable`.
    pub fn available(&self) -> Vec<String> {
        self.tools().iter().map(|t| t.name.clone()).collect()
    }

    /// Tools the caps left out of this manifest.
    pub fn dropped(&self) -> &[DroppedTool] {
        &self.intake.dropped
    }

    /// Namespaced ↔ original names of the kept tools.
    pub fn table(&self) -> &NameTable {
        &self.intake.table
    }

    /// The kept tools' compiled input schemas: every call's arguments pass it.
    pub fn gate(&self) -> &ArgumentGate {
        &self.intake.gate
    }
}

/// What a device said about itself at `initialize`.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// `serverInfo` as JSON text: parsed, even `{"name", "version"}` is a
    /// 600-byte B-tree node per session, for a field read once at the
    /// handshake (the client profile) and then only by inspection.
    server_info: Option<Box<RawValue>>,
    /// Free-text concept model.
    pub instructions: Option<String>,
    /// Structured concept (`tether.dev/concept`).
    pub concept: Option<Value>,
    /// The device asks its user to approve calls (`tether.dev/approvals: true`).
    pub approvals: bool,
    /// The device speaks the 2026-07-28 tasks extension: any call that
    /// declares it may become a task, which the edge follows by polling.
    pub tasks: bool,
}

impl Identity {
    /// What the handshake said: `serverInfo`, instructions, concept.
    pub fn new(server_info: &Value, instructions: Option<String>, concept: Option<Value>) -> Identity {
        let server_info =
            (!server_info.is_null()).then(|| serde_json::value::to_raw_value(server_info).ok()).flatten();
        Identity { server_info, instructions, concept, approvals: false, tasks: false }
    }

    /// The same identity, saying whether the device asks its user to approve
    /// calls: `_meta["tether.dev/approvals"]` of its handshake answer is `true`.
    pub fn with_approvals(mut self, meta: Option<&serde_json::Map<String, Value>>) -> Identity {
        self.approvals = meta
            .and_then(|m| m.get(tether_contract::writes::meta::APPROVALS))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        self
    }

    /// The device's `serverInfo` (null when it sent none).
    pub fn server_info(&self) -> Value {
        self.server_info.as_deref().and_then(|raw| serde_json::from_str(raw.get()).ok()).unwrap_or_default()
    }
}

/// The outcome of offering a candidate manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swap {
    /// Applied; `from` is the previous seq (None for the first manifest).
    Accepted {
        /// Seq replaced.
        from: Option<u64>,
        /// Seq applied.
        to: u64,
    },
    /// Refused because it was not newer.
    Rejected {
        /// Seq that stays applied.
        applied: u64,
        /// Seq that was offered.
        offered: u64,
    },
}

/// The applied manifest of one session, guarded by the seq rule.
#[derive(Debug, Default)]
pub struct ManifestState {
    applied: RwLock<Option<Arc<AppliedManifest>>>,
}

impl ManifestState {
    /// The applied manifest, if any has been applied yet.
    pub fn current(&self) -> Option<Arc<AppliedManifest>> {
        match self.applied.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Seq of the applied manifest (None before the first).
    pub fn seq(&self) -> Option<u64> {
        self.current().map(|m| m.seq)
    }

    /// Applies `candidate` only if its seq is newer than the applied one.
    pub fn offer(&self, candidate: AppliedManifest) -> Swap {
        let mut guard = match self.applied.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let from = guard.as_ref().map(|m| m.seq);
        match from {
            Some(applied) if candidate.seq <= applied => Swap::Rejected { applied, offered: candidate.seq },
            _ => {
                let to = candidate.seq;
                *guard = Some(Arc::new(candidate));
                Swap::Accepted { from, to }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_contract::Caps;

    fn candidate(seq: u64, tool: &str) -> AppliedManifest {
        let decl = tether_contract::mcp::ToolDeclaration {
            name: tool.into(),
            title: None,
            description: None,
            input_schema: serde_json::json!({"type":"object"}),
            output_schema: None,
            annotations: None,
            execution: None,
        };
        let text = serde_json::to_string(std::slice::from_ref(&decl)).unwrap_or_default();
        let intake = crate::caps::intake(vec![decl], &Caps::default(), &crate::gate::SchemaCache::default());
        AppliedManifest::new(seq, Arc::new(intake), None, Fingerprint::of(&text, None))
    }

    #[test]
    fn seq_rule_table() {
        // (offers in arrival order, expected applied seq after each)
        let cases: &[(&[u64], &[Option<u64>])] = &[
            (&[1, 2, 3], &[Some(1), Some(2), Some(3)]),
            (&[3, 2], &[Some(3), Some(3)]),
            (&[0], &[Some(0)]),
            (&[5, 5], &[Some(5), Some(5)]),
            (&[2, 7, 4, 8], &[Some(2), Some(7), Some(7), Some(8)]),
        ];
        for (offers, want) in cases {
            let state = ManifestState::default();
            for (seq, want) in offers.iter().zip(want.iter()) {
                state.offer(candidate(*seq, "t"));
                assert_eq!(state.seq(), *want, "offers {offers:?}");
            }
        }
    }

    #[test]
    fn out_of_order_arrival_keeps_the_newer_manifest() {
        let state = ManifestState::default();
        assert_eq!(state.offer(candidate(1, "old")), Swap::Accepted { from: None, to: 1 });
        assert_eq!(state.offer(candidate(3, "newest")), Swap::Accepted { from: Some(1), to: 3 });
        assert_eq!(state.offer(candidate(2, "stale")), Swap::Rejected { applied: 3, offered: 2 });
        let current = state.current().map(|m| m.available());
        assert_eq!(current, Some(vec!["client__newest".to_owned()]));
    }
}
