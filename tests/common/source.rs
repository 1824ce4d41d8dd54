//! Reading the project's own Rust sources for the meta-tests: which test
//! functions exist, and what their bodies assert. A small scanner that skips
//! comments, strings and char literals, so a brace or a name inside a string
//! never counts as code.

use std::path::Path;

/// One test function: its name and its body's text.
#[derive(Debug, Clone)]
pub struct TestFn {
    pub file: String,
    pub name: String,
    pub body: String,
}

/// Every `.rs` file under `dir` (recursively, skipping `target`), with its text.
pub fn rust_files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !path.ends_with("target") {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path.display().to_string(), text));
            }
        }
    }
    out
}

/// The test functions (`#[test]`, `#[tokio::test…]`, and `proptest!` cases
/// marked `#[test]`) in every file under `dirs`, relative to the repository root.
pub fn test_fns(dirs: &[&str]) -> Vec<TestFn> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in dirs {
        for (file, text) in rust_files(&root.join(dir)) {
            out.extend(tests_in(&file, &text));
        }
    }
    out
}

/// The test functions of one file.
pub fn tests_in(file: &str, text: &str) -> Vec<TestFn> {
    let code = blank_literals(text);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = next_test_attr(&code, from) {
        let Some(fn_at) = code[at..].find("fn ").map(|i| at + i) else { break };
        let name: String =
            code[fn_at + 3..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let Some(open) = code[fn_at..].find('{').map(|i| fn_at + i) else { break };
        let Some(close) = matching(&code, open, b'{', b'}') else { break };
        // The body from the original text: string contents matter to the checks.
        out.push(TestFn { file: file.to_owned(), name, body: text[open..=close].to_owned() });
        from = close;
    }
    out
}

fn next_test_attr(code: &str, from: usize) -> Option<usize> {
    ["#[test]", "#[tokio::test"].iter().filter_map(|p| code[from..].find(p).map(|i| from + i)).min()
}

/// The index of the bracket closing the one at `open`, in literal-blanked code.
fn matching(code: &str, open: usize, up: u8, down: u8) -> Option<usize> {
    let mut depth = 0usize;
    for (i, b) in code.bytes().enumerate().skip(open) {
        if b == up {
            depth += 1;
        } else if b == down {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The text with comments and the contents of string and char literals
/// replaced by spaces (same length, so indices carry over to the original).
pub fn blank_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for x in out.iter_mut().take(to).skip(from) {
            if *x != b'\n' {
                *x = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
                blank(&mut out, i, end);
                i = end;
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let start = i + 2 + hashes;
                let closing = format!("\"{}", "#".repeat(hashes));
                let end = text[start..].find(&closing).map_or(b.len(), |n| start + n);
                blank(&mut out, start, end);
                i = end + closing.len();
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j.min(b.len()));
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    text[i + 2..].find('\'').map(|n| i + 2 + n)
                } else {
                    let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + width) == Some(&b'\'')).then_some(i + 1 + width)
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i + 1, end);
                        i = end + 1;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The balanced-parenthesis argument lists of every call to one of `callees`
/// (`assert_eq!`, `wait_until`, …) in `body`.
pub fn invocations<'a>(body: &'a str, callees: &[&str]) -> Vec<(String, &'a str)> {
    let code = blank_literals(body);
    let mut out = Vec::new();
    for callee in callees {
        let pattern = format!("{callee}(");
        let mut from = 0;
        while let Some(at) = code[from..].find(&pattern).map(|i| from + i) {
            from = at + pattern.len();
            let preceded = at > 0 && {
                let p = code.as_bytes()[at - 1];
                p.is_ascii_alphanumeric() || p == b'_'
            };
            if preceded {
                continue;
            }
            let open = at + pattern.len() - 1;
            if let Some(close) = matching(&code, open, b'(', b')') {
                out.push(((*callee).to_owned(), &body[open + 1..close]));
            }
        }
    }
    out
}

/// Splits an argument list at top-level commas.
pub fn args(list: &str) -> Vec<&str> {
    let code = blank_literals(list);
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, b) in code.bytes().enumerate() {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 0 => {
                out.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !list[start..].trim().is_empty() {
        out.push(list[start..].trim());
    }
    out
}
