//! Independent re-validation of namespaced tool names.
//!
//! The edge builds names; core does not trust it. A name off the shape
//! `client__[a-z0-9]+(_[a-z0-9]+)*` (≤ 64 characters), or one that would shadow
//! a reserved meta-tool, is refused loudly: logged and counted.

use tether_contract::names::{is_slug_char, MAX_LEN, PREFIX, RESERVED};

/// Why a name was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameViolation {
    /// Does not start with `client__`.
    #[error("does not start with {PREFIX}")]
    MissingPrefix,
    /// Nothing after the prefix.
    #[error("is empty after the prefix")]
    Empty,
    /// Longer than 64 characters.
    #[error("is longer than {MAX_LEN} characters")]
    TooLong,
    /// A character outside `[a-z0-9_]`, or a doubled / edge underscore.
    #[error("has characters outside [a-z0-9_] or stray underscores")]
    BadCharacters,
    /// Equal to a reserved meta-tool name.
    #[error("shadows a reserved meta-tool")]
    Reserved,
}

/// Checks one namespaced name.
pub fn check(name: &str) -> Result<(), NameViolation> {
    let Some(rest) = name.strip_prefix(PREFIX) else { return Err(NameViolation::MissingPrefix) };
    if rest.is_empty() {
        return Err(NameViolation::Empty);
    }
    if name.len() > MAX_LEN {
        return Err(NameViolation::TooLong);
    }
    if !rest.chars().all(is_slug_char) || rest.starts_with('_') || rest.ends_with('_') || rest.contains("__")
    {
        return Err(NameViolation::BadCharacters);
    }
    if RESERVED.contains(&name) {
        return Err(NameViolation::Reserved);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_table() {
        let long = format!("{PREFIX}{}", "a".repeat(57));
        let cases: &[(&str, Result<(), NameViolation>)] = &[
            ("client__read_value", Ok(())),
            ("client__a1", Ok(())),
            ("client__x_2", Ok(())),
            ("read_value", Err(NameViolation::MissingPrefix)),
            ("Client__x", Err(NameViolation::MissingPrefix)),
            ("client__", Err(NameViolation::Empty)),
            (&long, Err(NameViolation::TooLong)),
            ("client__Scan", Err(NameViolation::BadCharacters)),
            ("client__a-b", Err(NameViolation::BadCharacters)),
            ("client__a__b", Err(NameViolation::BadCharacters)),
            ("client___a", Err(NameViolation::BadCharacters)),
            ("client__a_", Err(NameViolation::BadCharacters)),
            ("client__ñ", Err(NameViolation::BadCharacters)),
            ("client__context", Err(NameViolation::Reserved)),
            ("client__refresh_tools", Err(NameViolation::Reserved)),
        ];
        for (name, want) in cases {
            assert_eq!(check(name), *want, "{name}");
        }
    }
}
