//! Discovery binding's meta-tool, `find_tools`: its declaration, the search
//! behind it and the result it returns.
//!
//! The search is `tether-search`'s BM25F index over the tools the turn
//! reaches, built on the turn's first `find_tools` and kept until those tools
//! change. `tether eval` measures the same index on a golden set.

use serde_json::{json, Value};

use tether_contract::mcp::{CallToolResult, ToolDeclaration};
use tether_search::Index;

use crate::registry::FIND_TOOLS;

/// Most tools one `find_tools` call returns (and binds into the turn).
pub const FIND_TOOLS_LIMIT: usize = 8;

/// The `find_tools` declaration a discovery-bound caller is offered first.
pub fn declaration() -> ToolDeclaration {
    ToolDeclaration {
        name: FIND_TOOLS.to_owned(),
        title: Some("Find tools".to_owned()),
        description: Some(
            "Finds tools you may use for a task: give a few words; the matching tools become callable."
                .to_owned(),
        ),
        input_schema: json!({
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": QUERY_MAX_CHARS}},
            "additionalProperties": false
        }),
        output_schema: None,
        annotations: Some(json!({"readOnlyHint": true})),
        execution: None,
    }
}

/// The longest query `find_tools` declares, in characters; a longer one is cut there.
pub const QUERY_MAX_CHARS: usize = 200;

/// The query words of a `find_tools` call (empty when absent), cut at
/// [`QUERY_MAX_CHARS`] (the call skips argument validation, and a search's
/// cost grows with its words), and whether it was cut.
pub fn query(arguments: &Value) -> (&str, bool) {
    let query = arguments.get("query").and_then(Value::as_str).unwrap_or("");
    match query.char_indices().nth(QUERY_MAX_CHARS) {
        Some((end, _)) => (&query[..end], true),
        None => (query, false),
    }
}

/// What `find_tools` answers: the found declarations, whole so the model can
/// call them next, and a sentence naming them.
pub fn result(found: &[ToolDeclaration]) -> CallToolResult {
    let names: Vec<&str> = found.iter().map(|t| t.name.as_str()).collect();
    let text = if names.is_empty() {
        "No tool matches; try other words.".to_owned()
    } else {
        format!("These tools are now available: {}.", names.join(", "))
    };
    CallToolResult {
        content: vec![json!({"type": "text", "text": text})],
        structured_content: Some(json!({ "tools": found })),
        ..CallToolResult::default()
    }
}

/// The search over one turn's reachable tools, rebuilt only when they change.
#[derive(Debug, Default)]
pub(crate) struct Search {
    tools: Vec<ToolDeclaration>,
    index: Option<Index>,
}

impl Search {
    /// Takes the turn's reachable tools; the index is dropped if they changed.
    pub(crate) fn update(&mut self, tools: Vec<ToolDeclaration>) {
        if tools != self.tools {
            self.tools = tools;
            self.index = None;
        }
    }

    /// The best [`FIND_TOOLS_LIMIT`] tools for `query`, best first.
    pub(crate) fn find(&mut self, query: &str) -> Vec<ToolDeclaration> {
        let tools = &self.tools;
        let index = self.index.get_or_insert_with(|| Index::build(tools));
        index.search(query, FIND_TOOLS_LIMIT).into_iter().map(|hit| tools[hit.index].clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_past_the_declared_length_is_cut_there_on_a_character_boundary() {
        let long = "é".repeat(QUERY_MAX_CHARS + 50);
        let arguments = json!({"query": long});
        let (cut, was_cut) = query(&arguments);
        assert!(was_cut);
        assert_eq!(cut.chars().count(), QUERY_MAX_CHARS);
        assert_eq!(query(&json!({"query": "warm the room"})), ("warm the room", false));
        assert_eq!(query(&json!({})), ("", false));
        assert_eq!(declaration().input_schema["properties"]["query"]["maxLength"], json!(QUERY_MAX_CHARS));
    }

    fn tool(name: &str, description: &str) -> ToolDeclaration {
        ToolDeclaration {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            execution: None,
        }
    }

    #[test]
    fn the_index_is_built_once_and_dropped_only_when_the_tools_change() {
        let tools =
            vec![tool("client__lamp_on", "Turns the lamp on."), tool("client__alarm", "Sets an alarm.")];
        let mut search = Search::default();
        search.update(tools.clone());
        assert!(search.index.is_none(), "built lazily, on the first find_tools");
        let found = search.find("switch the lamp on");
        assert_eq!(found.first().map(|t| t.name.as_str()), Some("client__lamp_on"));
        search.update(tools.clone());
        assert!(search.index.is_some(), "same tools: the index is kept");
        search.update(tools[..1].to_vec());
        assert!(search.index.is_none(), "other tools: the index is rebuilt");
    }

    #[test]
    fn the_result_carries_whole_declarations_and_names_them() {
        let found = [tool("client__alarm", "Sets an alarm.")];
        let result = result(&found);
        assert_eq!(result.first_text(), Some("These tools are now available: client__alarm."));
        let structured = result.structured_content.unwrap_or_default();
        assert_eq!(structured["tools"][0]["inputSchema"], json!({"type": "object"}));
        assert_eq!(super::result(&[]).first_text(), Some("No tool matches; try other words."));
    }
}
