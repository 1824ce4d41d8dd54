//! Size caps, sized from the transport ceiling.
//!
//! Every application cap must sit below the per-frame transport ceiling, or a
//! frame the caps allow would be refused by the socket. [`Caps::validate`]
//! checks that when configuration resolves.

use serde::{Deserialize, Serialize};

use crate::schema::SchemaLimits;

/// Byte and count caps applied by the edge, with the design's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Caps {
    /// Largest WebSocket frame / message accepted or sent, in bytes.
    pub transport_ceiling: usize,
    /// Largest serialized manifest (the kept tool declarations), in bytes.
    pub manifest_bytes: usize,
    /// Largest single serialized tool declaration, in bytes.
    pub declaration_bytes: usize,
    /// Most tools kept in one manifest.
    pub max_tools: usize,
    /// Longest tool description, in characters.
    pub description_chars: usize,
    /// Largest serialized tool result, in bytes.
    pub result_bytes: usize,
    /// Most `tools/list` pages the edge follows through `nextCursor`.
    pub max_list_pages: usize,
    /// Deepest JSON nesting of a declared input or output schema.
    pub schema_depth: usize,
    /// Most objects (subschemas) in a declared input or output schema.
    pub schema_nodes: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            transport_ceiling: 15_360,
            manifest_bytes: 12_288,
            declaration_bytes: 2_048,
            max_tools: 32,
            description_chars: 512,
            result_bytes: 12_288,
            max_list_pages: 8,
            schema_depth: SchemaLimits::default().max_depth,
            schema_nodes: SchemaLimits::default().max_nodes,
        }
    }
}

/// Why a cap set cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    /// A cap is zero.
    #[error("cap {0} is zero")]
    Zero(&'static str),
    /// A byte cap does not fit below the transport ceiling.
    #[error("cap {name} = {value} bytes must be below the transport ceiling of {ceiling} bytes")]
    AboveCeiling {
        /// Which cap.
        name: &'static str,
        /// Its value.
        value: usize,
        /// The ceiling.
        ceiling: usize,
    },
    /// A declaration cap larger than the manifest cap can never be met.
    #[error("declaration cap {declaration} exceeds manifest cap {manifest}")]
    DeclarationOverManifest {
        /// Declaration cap.
        declaration: usize,
        /// Manifest cap.
        manifest: usize,
    },
}

impl Caps {
    /// The schema limits these caps set, for [`crate::schema::check`].
    pub fn schema_limits(&self) -> SchemaLimits {
        SchemaLimits { max_depth: self.schema_depth, max_nodes: self.schema_nodes }
    }

    /// Checks every cap against the ceiling and each other.
    pub fn validate(&self) -> Result<(), CapError> {
        let counts = [
            ("transport_ceiling", self.transport_ceiling),
            ("manifest_bytes", self.manifest_bytes),
            ("declaration_bytes", self.declaration_bytes),
            ("max_tools", self.max_tools),
            ("description_chars", self.description_chars),
            ("result_bytes", self.result_bytes),
            ("max_list_pages", self.max_list_pages),
            ("schema_depth", self.schema_depth),
            ("schema_nodes", self.schema_nodes),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(CapError::Zero(name));
        }
        for (name, value) in [
            ("manifest_bytes", self.manifest_bytes),
            ("declaration_bytes", self.declaration_bytes),
            ("result_bytes", self.result_bytes),
        ] {
            if value >= self.transport_ceiling {
                return Err(CapError::AboveCeiling { name, value, ceiling: self.transport_ceiling });
            }
        }
        if self.declaration_bytes > self.manifest_bytes {
            return Err(CapError::DeclarationOverManifest {
                declaration: self.declaration_bytes,
                manifest: self.manifest_bytes,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fit_the_ceiling() {
        assert_eq!(Caps::default().validate(), Ok(()));
    }

    #[test]
    fn a_cap_at_the_ceiling_is_refused() {
        let caps = Caps { result_bytes: 15_360, ..Caps::default() };
        assert!(matches!(caps.validate(), Err(CapError::AboveCeiling { name: "result_bytes", .. })));
        let caps = Caps { transport_ceiling: 10_000, ..Caps::default() };
        assert!(matches!(caps.validate(), Err(CapError::AboveCeiling { name: "manifest_bytes", .. })));
        let caps = Caps { max_tools: 0, ..Caps::default() };
        assert_eq!(caps.validate(), Err(CapError::Zero("max_tools")));
    }
}
