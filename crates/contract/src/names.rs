//! The shape of a namespaced tool name, shared by the edge that makes them and
//! the core that re-checks them.
//!
//! The edge turns every client-declared name into `client__` + a slug over
//! `[a-z0-9_]`; the core independently refuses any name off that shape. The
//! constants live here so the two checks cannot drift; the transform and the
//! check live in different crates on purpose.

/// Prefix of every client tool name the model sees.
pub const PREFIX: &str = "client__";
/// Longest whole name; every major LLM API accepts 64.
pub const MAX_LEN: usize = 64;
/// Longest slug after the prefix.
pub const MAX_SLUG_LEN: usize = MAX_LEN - PREFIX.len();
/// Meta-tools the core offers the model inside the client namespace; a client
/// tool must never shadow them.
pub const RESERVED: &[&str] = &["client__context", "client__refresh_tools"];

/// Whether `c` may appear in a slug.
pub const fn is_slug_char(c: char) -> bool {
    matches!(c, 'a'..='z' | '0'..='9' | '_')
}
