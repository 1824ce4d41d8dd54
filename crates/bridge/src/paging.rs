//! Pages the server's catalog toward the edge so that no `tools/list` frame
//! crosses the transport ceiling.
//!
//! A frame over the ceiling makes the edge close the socket (1009), which
//! would take the whole device down for one long description; so the bridge
//! pages with `nextCursor` instead, and drops (logged, counted) only a tool
//! that could not fit a page on its own. Cursors name the catalog read they
//! belong to (`<seq>.<page>`), so a page is never mixed from two reads.

use serde_json::{Map, Value};
use tether_contract::mcp::{meta, ToolDeclaration};

/// Bytes kept free on every page for the JSON-RPC envelope, the cursor and `_meta`.
pub(crate) const ENVELOPE_RESERVE: usize = 512;

/// One catalog read, cut into pages.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Catalog {
    /// The seq the read was stamped with.
    pub(crate) seq: u64,
    pages: Vec<Vec<Value>>,
}

/// A tool that could not fit a page by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Oversized {
    pub(crate) name: String,
    pub(crate) bytes: usize,
}

impl Catalog {
    /// Cuts `tools` into pages whose frames stay below `ceiling` bytes, in declaration order.
    pub(crate) fn paginate(seq: u64, tools: &[ToolDeclaration], ceiling: usize) -> (Catalog, Vec<Oversized>) {
        let budget = ceiling.saturating_sub(ENVELOPE_RESERVE);
        let mut pages: Vec<Vec<Value>> = vec![Vec::new()];
        let mut used = 0usize;
        let mut oversized = Vec::new();
        for tool in tools {
            let Ok(value) = serde_json::to_value(tool) else { continue };
            // Serializing a Value cannot fail; its length is what goes on the wire.
            let bytes = value.to_string().len() + 1; // and a comma
            if bytes > budget {
                oversized.push(Oversized { name: tool.name.clone(), bytes });
                continue;
            }
            if used + bytes > budget {
                pages.push(Vec::new());
                used = 0;
            }
            used += bytes;
            if let Some(page) = pages.last_mut() {
                page.push(value);
            }
        }
        (Catalog { seq, pages }, oversized)
    }

    /// How many pages the read has (at least one, possibly empty).
    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    /// The `tools/list` result for page `index`, or None past the last page.
    pub(crate) fn page(&self, index: usize) -> Option<Value> {
        let tools = self.pages.get(index)?;
        let mut result = Map::new();
        result.insert("tools".into(), Value::Array(tools.clone()));
        if index + 1 < self.pages.len() {
            result.insert("nextCursor".into(), Value::from(cursor(self.seq, index + 1)));
        }
        let mut m = Map::new();
        m.insert(meta::SEQ.into(), Value::from(self.seq));
        result.insert("_meta".into(), Value::Object(m));
        Some(Value::Object(result))
    }
}

/// The cursor for page `index` of the read stamped `seq`.
pub(crate) fn cursor(seq: u64, index: usize) -> String {
    format!("{seq}.{index}")
}

/// Reads a cursor back as `(seq, page)`.
pub(crate) fn parse_cursor(cursor: &str) -> Option<(u64, usize)> {
    let (seq, page) = cursor.split_once('.')?;
    Some((seq.parse().ok()?, page.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description_len: usize) -> ToolDeclaration {
        ToolDeclaration {
            name: name.into(),
            title: None,
            description: Some("d".repeat(description_len)),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            execution: None,
        }
    }

    fn frame(catalog: &Catalog, page: usize) -> String {
        let result = catalog.page(page).unwrap_or_default();
        tether_contract::jsonrpc::response(&json!(u64::MAX), &result)
    }

    #[test]
    fn every_frame_stays_under_the_ceiling_and_every_tool_appears_once_in_order() {
        let cases: [(usize, usize); 5] = [(0, 0), (1, 10), (40, 100), (60, 1_000), (13, 5_000)];
        for (count, desc) in cases {
            let tools: Vec<_> = (0..count).map(|i| tool(&format!("t{i}"), desc)).collect();
            let (catalog, oversized) = Catalog::paginate(3, &tools, 15_360);
            assert!(oversized.is_empty());
            let mut seen = Vec::new();
            for p in 0..catalog.len() {
                let f = frame(&catalog, p);
                assert!(f.len() < 15_360, "{count}x{desc}: page {p} is {} bytes", f.len());
                let v: Value = serde_json::from_str(&f).unwrap_or_default();
                assert_eq!(v["result"]["_meta"][meta::SEQ], json!(3));
                let next = v["result"].get("nextCursor").and_then(Value::as_str).map(str::to_owned);
                assert_eq!(next, (p + 1 < catalog.len()).then(|| cursor(3, p + 1)));
                for t in v["result"]["tools"].as_array().into_iter().flatten() {
                    seen.push(t["name"].as_str().unwrap_or_default().to_owned());
                }
            }
            let want: Vec<_> = tools.iter().map(|t| t.name.clone()).collect();
            assert_eq!(seen, want, "{count}x{desc}");
        }
    }

    #[test]
    fn a_tool_too_large_for_any_page_is_reported_not_sent() {
        let tools = vec![tool("small", 10), tool("huge", 20_000), tool("after", 10)];
        let (catalog, oversized) = Catalog::paginate(1, &tools, 15_360);
        assert_eq!(oversized.len(), 1);
        assert_eq!(oversized[0].name, "huge");
        assert!(oversized[0].bytes > 20_000);
        assert_eq!(catalog.len(), 1);
        let names: Vec<_> =
            catalog.page(0).unwrap_or_default()["tools"].as_array().cloned().unwrap_or_default();
        assert_eq!(names.len(), 2);
        assert!(catalog.page(1).is_none());
    }

    #[test]
    fn cursors_round_trip_and_junk_is_refused() {
        assert_eq!(parse_cursor(&cursor(7, 2)), Some((7, 2)));
        for junk in ["", "7", "7.", ".2", "a.b", "7.2.1", "-1.2"] {
            assert_eq!(parse_cursor(junk), None, "{junk:?}");
        }
    }
}
