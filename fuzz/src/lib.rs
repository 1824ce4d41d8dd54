//! Fuzz bodies for the two places tether parses what a device sends: frame
//! decoding and manifest intake. Each asserts the invariants that must hold
//! for any input, so a fuzzer reports a broken invariant as a crash.
//!
//! The same bodies replay the seed corpus in the ordinary test suite
//! (`tests/fuzz_corpus.rs`), so CI checks them without nightly.

use serde_json::Value;

use tether_contract::error::MAX_MESSAGE_BYTES;
use tether_contract::jsonrpc::{self, Frame};
use tether_contract::mcp::{CallToolResult, InitializeResult, ListToolsResult};
use tether_contract::{schema, Caps, WireError};

/// One text frame from a device: classified, answered, and round-tripped.
pub fn frame_decode(data: &[u8]) {
    // Text frames are UTF-8; tungstenite refuses anything else before us.
    let Ok(text) = std::str::from_utf8(data) else { return };
    match jsonrpc::parse(text) {
        Ok(Frame::Request { id, method, params }) => {
            let again = jsonrpc::parse(&jsonrpc::request(&id, &method, &params));
            assert_eq!(again, Ok(Frame::Request { id, method, params }), "a request re-serializes to itself");
        }
        Ok(Frame::Notification { method, params }) => {
            let again = jsonrpc::parse(&jsonrpc::notification(&method, &params));
            assert_eq!(again, Ok(Frame::Notification { method, params }));
        }
        Ok(Frame::Response { id, outcome: Ok(result) }) => {
            // What the edge does with a result: try each payload shape.
            let _ = serde_json::from_value::<CallToolResult>(result.clone());
            let _ = serde_json::from_value::<ListToolsResult>(result.clone());
            let _ = serde_json::from_value::<InitializeResult>(result.clone());
            let again = jsonrpc::parse(&jsonrpc::response(&id, &result));
            assert_eq!(again, Ok(Frame::Response { id, outcome: Ok(result) }));
        }
        Ok(Frame::Response { outcome: Err(error), .. }) => {
            let err = WireError::from_json(&error);
            assert!(err.message.len() <= MAX_MESSAGE_BYTES, "a peer's error message is capped");
        }
        Err(e) => {
            // Bad input gets a structured error the peer can read.
            let (id, err) = e.to_wire();
            let reply: Value =
                serde_json::from_str(&jsonrpc::error_response(&id, &err)).expect("reply is JSON");
            assert_eq!(reply["jsonrpc"], "2.0");
            assert_eq!(reply["error"]["code"], err.kind.code());
            assert_eq!(reply["error"]["data"]["kind"], err.kind.as_str());
        }
    }
}

/// One `tools/list` result from a device: the caps, the names and the
/// schema gates, edge and core.
pub fn manifest_intake(data: &[u8]) {
    let Ok(page) = serde_json::from_slice::<ListToolsResult>(data) else { return };
    let caps = Caps { manifest_bytes: 4_096, max_tools: 8, declaration_bytes: 1_024, ..Caps::default() };
    let declared = page.tools.len();
    let out = tether_edge::caps::intake(page.tools, &caps, &tether_edge::gate::SchemaCache::default());
    assert!(out.tools.len() <= caps.max_tools, "count cap");
    assert!(out.bytes <= caps.manifest_bytes, "byte cap");
    assert!(out.tools.len() + out.dropped.len() <= declared, "nothing invented");
    let limits = caps.schema_limits();
    for tool in &out.tools {
        assert_eq!(tether_core::check_name(&tool.name), Ok(()), "{}", tool.name);
        assert!(out.table.original(&tool.name).is_some(), "every kept tool routes back");
        assert!(schema::check(&tool.input_schema, &limits).is_ok());
        // Core's compile must refuse or accept, never panic or hang.
        if let Ok(schemas) = tether_core::ToolSchemas::compile(tool, &limits) {
            let _ = schemas.check_arguments(&tool.name, &tool.input_schema);
        }
    }
}
