//! Core's reading of the shared backend frames and error fixtures.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: a panic is a failed test

use serde_json::Value;
use tether_contract::backend::{
    CallParams, CallResponse, ListChanged, ListParams, Manifest, SessionClosed, SessionOpened, SessionParams,
    SessionsList, TurnBegun,
};
use tether_contract::{ErrorKind, WireError};
use tether_core::{check_name, for_model};

fn fixture(path: &str) -> Value {
    let full = format!("{}/../../proto-fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{full}: {e}"))
}

#[test]
fn backend_frames_decode_into_the_contract_types() {
    let list: SessionsList =
        serde_json::from_value(fixture("frames/backend/sessions_list.response.json")["result"].clone())
            .unwrap();
    assert_eq!(list.sessions[0].principal, "mira");
    let _: TurnBegun =
        serde_json::from_value(fixture("frames/backend/turn_begin.response.json")["result"].clone()).unwrap();
    let manifest: Manifest =
        serde_json::from_value(fixture("frames/backend/tools_list.response.json")["result"].clone()).unwrap();
    for tool in &manifest.tools {
        assert_eq!(check_name(&tool.name), Ok(()), "{}", tool.name);
    }
    // Every read names its reader: the service token that opened the link reads nothing.
    let list: ListParams =
        serde_json::from_value(fixture("frames/backend/sessions_list.request.json")["params"].clone())
            .unwrap();
    assert!(list.meta.credential.is_some());
    for read in ["turn_begin", "tools_list"] {
        let p: SessionParams =
            serde_json::from_value(fixture(&format!("frames/backend/{read}.request.json"))["params"].clone())
                .unwrap();
        assert!(p.meta.credential.is_some(), "{read}");
    }
    let call: CallParams =
        serde_json::from_value(fixture("frames/backend/tools_call.request.json")["params"].clone()).unwrap();
    assert_eq!(call.meta.bound_seq, Some(4));
    assert!(call.meta.credential.is_some());
    let resp: CallResponse =
        serde_json::from_value(fixture("frames/backend/tools_call.response.json")["result"].clone()).unwrap();
    assert_eq!(resp.result.seq(), Some(5));
    assert_eq!(resp.manifest.map(|m| m.seq), Some(5));
    let opened: SessionOpened =
        serde_json::from_value(fixture("frames/backend/session_opened.notification.json")["params"].clone())
            .unwrap();
    assert_eq!(opened.seq, 1);
    let _: ListChanged =
        serde_json::from_value(fixture("frames/backend/list_changed.notification.json")["params"].clone())
            .unwrap();
    let _: SessionClosed =
        serde_json::from_value(fixture("frames/backend/session_closed.notification.json")["params"].clone())
            .unwrap();
}

#[test]
fn every_error_kind_has_a_fixture_and_a_sentence() {
    for kind in ErrorKind::ALL {
        let frame = fixture(&format!("errors/{}.json", kind.as_str()));
        let err = WireError::from_json(&frame["error"]);
        assert_eq!(err.kind, *kind);
        assert_eq!(frame["error"]["code"], Value::from(kind.code()), "{kind}: fixture code drifted");
        let sentence = for_model(&err);
        assert!(!sentence.is_empty() && sentence.ends_with('.'), "{kind}: {sentence}");
    }
}
