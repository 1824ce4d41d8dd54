//! Tool discovery search: what `find_tools` ranks with, and what `tether
//! eval` measures.
//!
//! Pure and offline: no I/O, no network, nothing downloaded; the one table
//! it needs is compiled in. [`Index::build`] reads tool declarations once;
//! [`Index::search`] ranks them for a few words with BM25F over name, title,
//! description, parameters and enum values, with stemming, a small general
//! thesaurus and word vectors. [`baseline::word_overlap`] keeps
//! the ranking `find_tools` used before, for comparison.
//!
//! Code map:
//!
//! - [`tokenize`] — words split the way tool names are written, stop words, stemming.
//! - [`index`] — the BM25F index and its weights.
//! - [`thesaurus`] — the concept lines that expand a query.
//! - [`semantic`] — the embedded word vectors that expand it further.
//! - [`baseline`] — the old word-overlap ranking.

pub mod baseline;
pub mod index;
pub mod semantic;
pub mod thesaurus;
pub mod tokenize;

pub use index::{Field, Hit, Index, Weights};
