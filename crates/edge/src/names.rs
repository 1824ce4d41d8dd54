//! Client names → namespaced names, and the per-session translation table.
//!
//! The model never sees a device's own names and the device never sees the
//! model's: every declared name is slugged into `client__[a-z0-9_]+`, at most
//! 64 characters, with deterministic numeric suffixes on collision. The core
//! re-checks the shape independently (`tether_core::check_name`).

use std::collections::{BTreeSet, HashMap};

use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

use tether_contract::names::{MAX_LEN, MAX_SLUG_LEN, PREFIX, RESERVED};

/// Slug used when a name has no ASCII letters or digits at all.
const FALLBACK_SLUG: &str = "tool";

/// Turns any declared name into a slug over `[a-z0-9_]`: camelCase split,
/// everything else mapped to `_`, runs collapsed, ends trimmed, length bounded.
///
/// The name is decomposed first (Unicode NFKD) and its combining marks
/// dropped, so one name gets one slug however the client's keyboard composed
/// it: `café` typed as one code point (NFC) or as `e` plus an accent (NFD)
/// both become `cafe`. (Composing instead, NFC, would also agree, but on
/// `caf`: the accented letter is not ASCII and would be lost whole.)
pub fn slug(original: &str) -> String {
    let mut out = String::with_capacity(original.len().min(MAX_SLUG_LEN));
    let mut prev: Option<char> = None;
    for c in original.nfkd().filter(|c| !is_combining_mark(*c)) {
        let boundary =
            c.is_ascii_uppercase() && prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit());
        if boundary {
            push_sep(&mut out);
        }
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else {
            push_sep(&mut out);
        }
        prev = Some(c);
    }
    bound(&mut out, MAX_SLUG_LEN);
    if out.is_empty() {
        out.push_str(FALLBACK_SLUG);
    }
    out
}

fn push_sep(out: &mut String) {
    if !out.is_empty() && !out.ends_with('_') {
        out.push('_');
    }
}

/// Cuts an ASCII slug to `max` and trims trailing separators.
fn bound(s: &mut String, max: usize) {
    s.truncate(max);
    while s.ends_with('_') {
        s.pop();
    }
}

/// Namespaced ↔ original names for one manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameTable {
    to_original: HashMap<String, String>,
    to_namespaced: HashMap<String, String>,
}

impl NameTable {
    /// Assigns namespaced names to distinct originals.
    ///
    /// Deterministic whatever the declaration order: originals are visited in
    /// byte order, natural slugs are granted first, then colliding names get
    /// `_2`, `_3`, … in the same order. Reserved meta-tool names count as taken.
    pub fn assign<'a>(originals: impl IntoIterator<Item = &'a str>) -> NameTable {
        let sorted: BTreeSet<&str> = originals.into_iter().collect();
        let mut taken: BTreeSet<String> = RESERVED.iter().map(|s| (*s).to_owned()).collect();
        let mut table = NameTable::default();
        let mut collided = Vec::new();
        for original in &sorted {
            let name = format!("{PREFIX}{}", slug(original));
            if taken.insert(name.clone()) {
                table.insert(original, name);
            } else {
                collided.push(*original);
            }
        }
        for original in collided {
            let base = slug(original);
            let name = (2u64..)
                .map(|n| {
                    let suffix = format!("_{n}");
                    let mut stem = base.clone();
                    bound(&mut stem, MAX_SLUG_LEN - suffix.len());
                    format!("{PREFIX}{stem}{suffix}")
                })
                .find(|candidate| !taken.contains(candidate))
                .unwrap_or_else(|| format!("{PREFIX}{FALLBACK_SLUG}"));
            taken.insert(name.clone());
            table.insert(original, name);
        }
        table
    }

    fn insert(&mut self, original: &str, namespaced: String) {
        debug_assert!(namespaced.len() <= MAX_LEN);
        self.to_original.insert(namespaced.clone(), original.to_owned());
        self.to_namespaced.insert(original.to_owned(), namespaced);
    }

    /// The device's name for a namespaced name.
    pub fn original(&self, namespaced: &str) -> Option<&str> {
        self.to_original.get(namespaced).map(String::as_str)
    }

    /// The namespaced name for a device's name.
    pub fn namespaced(&self, original: &str) -> Option<&str> {
        self.to_namespaced.get(original).map(String::as_str)
    }

    /// Keeps only the entries whose namespaced name passes `keep`.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.to_original.retain(|namespaced, _| keep(namespaced));
        self.to_namespaced.retain(|_, namespaced| keep(namespaced));
    }

    /// Every (namespaced, original) pair, sorted by namespaced name.
    pub fn pairs(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<_> = self.to_original.iter().map(|(n, o)| (n.as_str(), o.as_str())).collect();
        out.sort_unstable();
        out
    }

    /// How many names the table holds.
    pub fn len(&self) -> usize {
        self.to_original.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.to_original.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        let Some(rest) = name.strip_prefix(PREFIX) else { return false };
        name.len() <= MAX_LEN
            && !rest.is_empty()
            && rest.chars().all(tether_contract::names::is_slug_char)
            && !rest.starts_with('_')
            && !rest.ends_with('_')
            && !rest.contains("__")
    }

    #[test]
    fn slug_table() {
        let long = "a".repeat(300);
        let cases: &[(&str, &str)] = &[
            ("get_visible_screen", "get_visible_screen"),
            ("getVisibleScreen", "get_visible_screen"),
            ("Scan Barcode!", "scan_barcode"),
            ("print-label.v2", "print_label_v2"),
            ("ñandú.lookup", "nandu_lookup"),
            ("caf\u{e9}", "cafe"),
            ("cafe\u{301}", "cafe"),
            ("ｆｕｌｌｗｉｄｔｈ", "fullwidth"),
            ("日本語", "tool"),
            ("📷 capture 📷", "capture"),
            ("", "tool"),
            ("___", "tool"),
            ("client__foo", "client_foo"),
            ("HTTPServer", "httpserver"),
            ("v2Api", "v2_api"),
            (&long, &long[..MAX_SLUG_LEN]),
        ];
        for (input, want) in cases {
            assert_eq!(slug(input), *want, "slug({input:?})");
            assert!(valid(&format!("{PREFIX}{}", slug(input))), "{input:?}");
        }
    }

    #[test]
    fn case_and_punctuation_twins_get_deterministic_suffixes() {
        let a = NameTable::assign(["Open-Door", "open_door", "OPEN DOOR", "open.door"]);
        let b = NameTable::assign(["open.door", "OPEN DOOR", "open_door", "Open-Door"]);
        assert_eq!(a, b, "declaration order must not matter");
        assert_eq!(a.len(), 4);
        let mut names: Vec<&str> = ["Open-Door", "open_door", "OPEN DOOR", "open.door"]
            .iter()
            .map(|o| a.namespaced(o).unwrap_or_default())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["client__open_door", "client__open_door_2", "client__open_door_3", "client__open_door_4"]
        );
        // Byte order: "OPEN DOOR" < "Open-Door" < "open.door" < "open_door".
        assert_eq!(a.namespaced("OPEN DOOR"), Some("client__open_door"));
        assert_eq!(a.original("client__open_door_4"), Some("open_door"));
    }

    #[test]
    fn reserved_meta_tools_are_never_shadowed() {
        let t = NameTable::assign(["context", "refresh tools", "client__context"]);
        for original in ["context", "refresh tools", "client__context"] {
            let name = t.namespaced(original).unwrap_or_default();
            assert!(!RESERVED.contains(&name), "{original} took reserved {name}");
            assert!(valid(name), "{name}");
        }
        assert_eq!(t.namespaced("context"), Some("client__context_2"));
        assert_eq!(t.namespaced("client__context"), Some("client__client_context"));
    }

    #[test]
    fn long_colliding_names_stay_within_64() {
        let base = "x".repeat(300);
        let twin = format!("{base}!");
        let t = NameTable::assign([base.as_str(), twin.as_str()]);
        for o in [&base, &twin] {
            let n = t.namespaced(o).unwrap_or_default();
            assert!(n.len() <= MAX_LEN && valid(n), "{n}");
        }
        assert_ne!(t.namespaced(&base), t.namespaced(&twin));
    }

    #[test]
    fn a_natural_name_that_looks_like_a_suffix_is_respected() {
        let t = NameTable::assign(["a b", "a_b", "a_b_2"]);
        let mut all: Vec<&str> = ["a b", "a_b", "a_b_2"].iter().filter_map(|o| t.namespaced(o)).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!(t.namespaced("a_b_2"), Some("client__a_b_2"));
    }
}
