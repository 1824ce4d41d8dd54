//! Every frame in `proto-fixtures/` is a valid JSON-RPC 2.0 message of the kind its name says.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: a panic is a failed test

use tether_contract::jsonrpc::{parse, Frame};
use tether_contract::mcp::{CallToolResult, InitializeResult, ListToolsResult};

fn frames(dir: &str) -> Vec<(String, String)> {
    let full = format!("{}/../../proto-fixtures/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<_> = std::fs::read_dir(&full)
        .unwrap_or_else(|e| panic!("{full}: {e}"))
        .map(|e| e.unwrap().path())
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn frames_classify_by_their_names() {
    let mut seen = 0;
    for dir in ["frames/client", "frames/backend", "errors"] {
        for (name, text) in frames(dir) {
            let frame = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let ok = match &frame {
                Frame::Request { .. } => name.contains(".request."),
                Frame::Notification { .. } => name.contains(".notification."),
                Frame::Response { outcome: Ok(_), .. } => name.contains(".response."),
                Frame::Response { outcome: Err(_), .. } => dir == "errors" || name.contains("error"),
            };
            assert!(ok, "{dir}/{name} classified as {frame:?}");
            seen += 1;
        }
    }
    assert!(seen >= 40, "only {seen} fixtures found");
}

#[test]
fn client_payloads_decode() {
    let get = |name: &str| -> serde_json::Value {
        let text = frames("frames/client").into_iter().find(|(n, _)| n == name).map(|(_, t)| t).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let init: InitializeResult =
        serde_json::from_value(get("initialize.response.json")["result"].clone()).unwrap();
    assert!(init.meta.unwrap().contains_key("tether.dev/concept"));
    let list: ListToolsResult =
        serde_json::from_value(get("tools_list.response.json")["result"].clone()).unwrap();
    assert_eq!(list.next_cursor.as_deref(), Some("page-3"));
    let res: CallToolResult =
        serde_json::from_value(get("tools_call.is_error.response.json")["result"].clone()).unwrap();
    assert!(res.is_error);
}
