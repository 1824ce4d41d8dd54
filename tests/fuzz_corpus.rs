//! Replays the fuzz targets' corpus (`fuzz/corpus/`) through the same bodies
//! cargo-fuzz runs, so every seed and every past finding stays a test on
//! stable Rust. Run the fuzzers themselves as docs/SECURITY.md describes.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)] // a panic is a failed test

#[path = "../fuzz/src/lib.rs"]
mod bodies;

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| body(&data));
        assert!(outcome.is_ok(), "{} breaks an invariant", path.display());
        count += 1;
    }
    count
}

#[test]
fn the_frame_decoding_corpus_keeps_its_invariants() {
    assert!(replay("frame_decode", bodies::frame_decode) >= 20);
}

#[test]
fn the_manifest_intake_corpus_keeps_its_invariants() {
    assert!(replay("manifest_intake", bodies::manifest_intake) >= 4);
}
