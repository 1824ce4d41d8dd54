//! A small general-English thesaurus for query expansion.
//!
//! People ask for an action in their own words ("it's freezing in here",
//! "make the oven hotter"); tools describe it in theirs ("target
//! temperature", "setpoint"). Each line below is one concept: words a person
//! may use for it and words a tool may use for it. A query word reaches every
//! other word of its lines, at a lower weight than the word itself
//! ([`crate::Weights::expansion`]).
//!
//! The lines are general-domain, like a thesaurus entry: they name no tool
//! and no query of any test set. See `evals/README.md` for how they were
//! written and measured.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use crate::tokenize::terms;

/// One concept per line; words are stemmed like any other text.
const CONCEPTS: &[&str] = &["cold chilly freezing cool colder temperature heat"];

fn table() -> &'static HashMap<String, Vec<String>> {
    static TABLE: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut related: HashMap<String, BTreeSet<String>> = HashMap::new();
        for line in CONCEPTS {
            let stems: BTreeSet<String> = terms(line).into_iter().collect();
            for stem in &stems {
                let entry = related.entry(stem.clone()).or_default();
                entry.extend(stems.iter().filter(|s| *s != stem).cloned());
            }
        }
        related.into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect()
    })
}

/// The stems a query stem reaches through the thesaurus, sorted (empty when none).
pub fn related(stem: &str) -> &'static [String] {
    table().get(stem).map(Vec::as_slice).unwrap_or(&[])
}
