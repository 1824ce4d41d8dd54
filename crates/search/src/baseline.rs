//! The word-overlap ranking `find_tools` used before BM25F, kept verbatim as
//! the baseline `tether eval` reports beside the search.
//!
//! A tool scores the number of query words that occur anywhere (as
//! substrings) in its name, underscores read as spaces, plus its description;
//! tools scoring zero are left out unless the query has no words; ties go by
//! name.

use tether_contract::mcp::ToolDeclaration;

/// Ranks `tools` for `query` the old way; returns at most `limit` indices into `tools`.
pub fn word_overlap(tools: &[ToolDeclaration], query: &str, limit: usize) -> Vec<usize> {
    let query = query.to_lowercase();
    let words: Vec<&str> = query.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    let mut scored: Vec<(usize, usize)> = tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let text = format!("{} {}", t.name.replace('_', " "), t.description.as_deref().unwrap_or(""))
                .to_lowercase();
            (words.iter().filter(|w| text.contains(**w)).count(), i)
        })
        .filter(|(score, _)| words.is_empty() || *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| tools[a.1].name.cmp(&tools[b.1].name)));
    scored.into_iter().take(limit).map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> ToolDeclaration {
        ToolDeclaration {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            execution: None,
        }
    }

    #[test]
    fn counts_substring_hits_and_breaks_ties_by_name() {
        let tools = [tool("b_light", "Turns lights on."), tool("a_light", "Lights."), tool("oven", "Bakes.")];
        assert_eq!(word_overlap(&tools, "light on", 8), [0, 1]);
        assert_eq!(word_overlap(&tools, "", 2), [1, 0]);
        assert!(word_overlap(&tools, "freezing", 8).is_empty());
    }
}
