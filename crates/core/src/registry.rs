//! The registry: which server-side tools exist, and the gates they pass.
//!
//! A backend registers its server-side [`ToolSource`]s once, at start-up. Each
//! source's tools are checked then: a name must be a plain `[a-z0-9_]` name of
//! at most 64 characters, outside the client namespace (`client__…`), unique
//! across sources and not a core meta-tool; its schemas must compile under the
//! schema limits. A source that breaks any rule is refused whole, with the
//! reason. Which of these tools a caller reaches is scope's business
//! ([`crate::scope`]); the registry only says what exists.

use std::collections::HashMap;
use std::sync::Arc;

use tether_contract::mcp::ToolDeclaration;
use tether_contract::names::{is_slug_char, MAX_LEN, PREFIX};
use tether_contract::SchemaLimits;

use crate::enforce::ToolSchemas;
use crate::source::{ToolSource, CLIENT_SOURCE};

/// The discovery meta-tool core offers callers with discovery binding.
pub const FIND_TOOLS: &str = "find_tools";

/// Why a source was refused at registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The id is empty, `client`, or already taken.
    #[error("source id {0:?} is empty, reserved or already registered")]
    SourceId(String),
    /// A tool name is off the server-side shape or inside the client namespace.
    #[error("source {source_id}: tool name {name:?} must be 1-{MAX_LEN} characters of [a-z0-9_] outside {PREFIX}…")]
    Name {
        /// The source.
        source_id: String,
        /// The name.
        name: String,
    },
    /// Another source (or a meta-tool) already has the name.
    #[error("source {source_id}: tool {name} is already offered by {by}")]
    Duplicate {
        /// The source.
        source_id: String,
        /// The name.
        name: String,
        /// Who has it.
        by: String,
    },
    /// A schema breaks the limits or does not compile.
    #[error("source {source_id}: tool {name}: {reason}")]
    Schema {
        /// The source.
        source_id: String,
        /// The name.
        name: String,
        /// What is wrong.
        reason: crate::enforce::SchemaError,
    },
}

/// One registered server-side tool.
#[derive(Debug, Clone)]
pub(crate) struct ServerTool {
    pub(crate) source: Arc<dyn ToolSource>,
    pub(crate) declaration: ToolDeclaration,
    pub(crate) schemas: Arc<ToolSchemas>,
}

/// Every server-side source a backend offers, checked once.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    tools: Vec<ServerTool>,
    by_name: HashMap<String, usize>,
    source_ids: Vec<String>,
}

fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LEN
        && !name.starts_with(PREFIX)
        && name.chars().all(is_slug_char)
        && !name.starts_with('_')
}

impl Registry {
    /// An empty registry: turns reach only the client source.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers a source and every tool it offers now, or nothing at all.
    pub fn register(&mut self, source: Arc<dyn ToolSource>) -> Result<(), RegistryError> {
        let id = source.id().to_owned();
        if id.is_empty() || id == CLIENT_SOURCE || self.source_ids.contains(&id) {
            return Err(RegistryError::SourceId(id));
        }
        let limits = SchemaLimits::default();
        let mut staged = Vec::new();
        for declaration in source.tools() {
            let name = declaration.name.clone();
            if !valid_server_name(&name) {
                return Err(RegistryError::Name { source_id: id, name });
            }
            let taken = if name == FIND_TOOLS {
                Some("core".to_owned())
            } else if let Some(&i) = self.by_name.get(&name) {
                Some(self.tools[i].source.id().to_owned())
            } else if staged.iter().any(|t: &ServerTool| t.declaration.name == name) {
                Some(id.clone())
            } else {
                None
            };
            if let Some(by) = taken {
                return Err(RegistryError::Duplicate { source_id: id, name, by });
            }
            let schemas = ToolSchemas::compile(&declaration, &limits).map_err(|reason| {
                RegistryError::Schema { source_id: id.clone(), name: name.clone(), reason }
            })?;
            staged.push(ServerTool { source: Arc::clone(&source), declaration, schemas: Arc::new(schemas) });
        }
        for tool in staged {
            self.by_name.insert(tool.declaration.name.clone(), self.tools.len());
            self.tools.push(tool);
        }
        self.source_ids.push(id);
        Ok(())
    }

    /// Registered source ids, in registration order.
    pub fn sources(&self) -> &[String] {
        &self.source_ids
    }

    pub(crate) fn tools(&self) -> &[ServerTool] {
        &self.tools
    }

    pub(crate) fn tool(&self, name: &str) -> Option<&ServerTool> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{AuthPosture, CallContext, LatencyClass};
    use futures::future::BoxFuture;
    use serde_json::{json, Value};
    use tether_contract::mcp::CallToolResult;
    use tether_contract::WireError;

    #[derive(Debug)]
    struct Fixed(&'static str, Vec<ToolDeclaration>);

    impl ToolSource for Fixed {
        fn id(&self) -> &str {
            self.0
        }
        fn posture(&self) -> AuthPosture {
            AuthPosture::VerifiesCredential
        }
        fn latency(&self) -> LatencyClass {
            LatencyClass::Interactive
        }
        fn tools(&self) -> Vec<ToolDeclaration> {
            self.1.clone()
        }
        fn call<'a>(
            &'a self,
            _: &'a str,
            _: Value,
            _: CallContext<'a>,
        ) -> BoxFuture<'a, Result<CallToolResult, WireError>> {
            Box::pin(async { Ok(CallToolResult::default()) })
        }
    }

    fn decl(name: &str, schema: Value) -> ToolDeclaration {
        ToolDeclaration {
            name: name.into(),
            title: None,
            description: None,
            input_schema: schema,
            output_schema: None,
            annotations: None,
            execution: None,
        }
    }

    fn source(id: &'static str, names: &[&str]) -> Arc<dyn ToolSource> {
        Arc::new(Fixed(id, names.iter().map(|n| decl(n, json!({"type": "object"}))).collect()))
    }

    #[test]
    fn registration_table() {
        let mut r = Registry::new();
        assert_eq!(r.register(source("a", &["read_one", "read_two"])), Ok(()));
        let refused = [
            (source("a", &["x"]), "already registered"),
            (source("client", &["x"]), "reserved"),
            (source("b", &["client__x"]), "outside client__"),
            (source("b", &["Read"]), "[a-z0-9_]"),
            (source("b", &[""]), "[a-z0-9_]"),
            (source("b", &["read_one"]), "already offered by a"),
            (source("b", &["find_tools"]), "already offered by core"),
            (source("b", &["twice", "twice"]), "already offered by b"),
            (
                Arc::new(Fixed("b", vec![decl("remote", json!({"$ref": "http://127.0.0.1:9/s"}))])),
                "only local references",
            ),
        ];
        for (s, fragment) in refused {
            let err = r.register(s).unwrap_err().to_string();
            assert!(err.contains(fragment), "{err}");
        }
        assert_eq!(r.sources(), ["a"], "a refused source registers nothing");
        assert_eq!(r.tools().len(), 2);
    }
}
