//! Stamps the `tether` binary with the commit it was built from, so
//! `tether --version` names both the version and the commit an operator runs.

use std::path::Path;
use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        // A source tarball has no history to name.
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=TETHER_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Only paths that exist: a missing one would re-run this script (and relink) on every build.
    for path in [".git/HEAD", ".git/refs", ".git/packed-refs"] {
        if Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
