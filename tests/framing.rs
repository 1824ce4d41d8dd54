//! A device that breaks WebSocket framing is told so with RFC 6455's codes:
//! 1002 for a protocol violation, 1007 for text that is not UTF-8. Each case
//! is a raw frame written under the WebSocket layer, and each is counted by
//! its kind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is a failed test

mod common;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

use common::DuplexEdge;

/// One client frame as bytes: `first` is FIN/RSV/opcode, masked unless `unmasked`.
fn frame(first: u8, payload: &[u8], unmasked: bool) -> Vec<u8> {
    let mut out = vec![first];
    let mask_bit = if unmasked { 0 } else { 0x80 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    if unmasked {
        out.extend_from_slice(payload);
    } else {
        let key = [0x11, 0x22, 0x33, 0x44];
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    }
    out
}

/// Writes `bytes` under a fresh device's WebSocket and returns the close code it is sent.
async fn close_code_after(bytes: &[u8]) -> (Option<u16>, DuplexEdge) {
    let edge = DuplexEdge::new();
    let mut ws = edge.raw_device().await;
    ws.get_mut().write_all(bytes).await.unwrap();
    let code = loop {
        match ws.next().await {
            Some(Ok(Message::Close(f))) => break f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            _ => break None,
        }
    };
    (code, edge)
}

#[tokio::test(start_paused = true)]
async fn every_framing_violation_gets_1002_and_bad_utf8_gets_1007_each_counted_by_kind() {
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("reserved bits set", frame(0xC1, b"{}", false), 1002, "reserved_bits"),
        ("unknown opcode", frame(0x83, b"{}", false), 1002, "unknown_opcode"),
        ("control frame over 125 bytes", frame(0x89, &[0u8; 126], false), 1002, "control_frame_too_big"),
        ("fragmented control frame", frame(0x09, b"hi", false), 1002, "fragmented_control_frame"),
        ("stray continuation", frame(0x80, b"{}", false), 1002, "stray_continuation"),
        ("unmasked frame", frame(0x81, b"{}", true), 1002, "unmasked_frame"),
        ("close frame with a 1-byte body", frame(0x88, &[3], false), 1002, "invalid_close_frame"),
        ("text that is not UTF-8", frame(0x81, &[0xff, 0xfe, 0xfd], false), 1007, "invalid_utf8"),
    ];
    for (name, bytes, want, kind) in cases {
        let (code, edge) = close_code_after(&bytes).await;
        assert_eq!(code, Some(want), "{name}");
        let exposition = edge.hub.metrics.render();
        let series = format!("tether_frames_refused_total{{kind=\"{kind}\"}} 1");
        assert!(exposition.contains(&series), "{name}: {series} in\n{exposition}");
        assert_eq!(edge.hub.counters().get("bad_frames"), 1, "{name}");
    }
}

/// A close frame with a code no endpoint may send is answered 1002 too (the
/// WebSocket layer answers it; the session ends as the device's close).
#[tokio::test(start_paused = true)]
async fn a_close_frame_with_a_forbidden_code_is_answered_1002() {
    let (code, _edge) = close_code_after(&frame(0x88, &999u16.to_be_bytes(), false)).await;
    assert_eq!(code, Some(1002));
}
