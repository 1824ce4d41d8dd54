//! A sentence for the model for every error kind.
//!
//! A null, a generic failure or silence is never an answer: whatever goes
//! wrong, the model gets one short sentence that says what happened and what
//! it can do next. The match is exhaustive, so a new kind cannot ship without
//! its sentence.

use serde_json::Value;
use tether_contract::{ErrorKind, WireError};

fn detail_str<'a>(err: &'a WireError, key: &str) -> Option<&'a str> {
    err.detail(key).and_then(Value::as_str)
}

fn detail_u64(err: &WireError, key: &str) -> Option<u64> {
    err.detail(key).and_then(Value::as_u64)
}

/// Renders `err` as one sentence written for the model.
pub fn for_model(err: &WireError) -> String {
    match err.kind {
        ErrorKind::Internal if detail_str(err, "reason") == Some("result_shape") => {
            "The tool ran, but its result did not match the shape it declares, so it was withheld; do not \
             retry it this turn, and tell the user the result could not be read."
                .to_owned()
        }
        ErrorKind::ParseError | ErrorKind::InvalidRequest | ErrorKind::MethodNotFound | ErrorKind::Internal => {
            "The tool could not be run because of an internal error in the tool broker; do not retry it \
             this turn, and tell the user the tool is temporarily unavailable."
                .to_owned()
        }
        ErrorKind::InvalidParams | ErrorKind::InvalidArguments => format!(
            "The tool rejected the arguments ({}); fix them to match the tool's input schema and call it again.",
            err.message
        ),
        ErrorKind::ChannelClosed => format!(
            "The user's device disconnected ({}), so its tools cannot run now; continue without them or ask \
             the user to reopen the app.",
            err.closed_reason().unwrap_or("closed")
        ),
        ErrorKind::Timeout => format!(
            "The tool did not answer within {} ms ({} leg), so whether the action happened is unknown; \
             check its state before you try again.",
            detail_u64(err, "budget_ms").map_or_else(|| "the allowed time".to_owned(), |ms| ms.to_string()),
            err.timed_out_leg().map_or("tool_call", tether_contract::Leg::as_str)
        ),
        ErrorKind::ToolUnavailable => {
            let available: Vec<&str> = err
                .detail("available")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if available.is_empty() {
                "That tool is not available on the device right now and no device tools are available; \
                 continue without them."
                    .to_owned()
            } else {
                format!(
                    "That tool is not available on the device right now; the tools available now are: {}.",
                    available.join(", ")
                )
            }
        }
        ErrorKind::InvalidName => {
            "That tool name is not a valid device tool name; use only the tool names you were given.".to_owned()
        }
        ErrorKind::SessionNotFound => {
            "The user's device is not connected, so its tools cannot run; continue without them.".to_owned()
        }
        ErrorKind::PayloadTooLarge => format!(
            "The {} was larger than the {} byte limit, so nothing was delivered; ask for less data, for \
             example a narrower query.",
            if detail_str(err, "direction") == Some("request") { "request" } else { "tool's result" },
            detail_u64(err, "limit").map_or_else(|| "allowed".to_owned(), |l| l.to_string())
        ),
        ErrorKind::Unauthenticated => {
            "The tool call was refused because the session's credentials are missing or expired; ask the \
             user to sign in again."
                .to_owned()
        }
        ErrorKind::Forbidden => {
            "This user is not allowed to do that with this tool; do not retry, and continue without it."
                .to_owned()
        }
        ErrorKind::ClientError => {
            let code = detail_str(err, "code");
            let retryable = err.detail("retryable").and_then(Value::as_bool).unwrap_or(false);
            let mut s = format!("The tool reported a failure: {}", err.message.trim_end_matches('.'));
            if let Some(code) = code {
                s.push_str(&format!(" (code {code})"));
            }
            match (retryable, detail_u64(err, "retry_after_ms")) {
                (true, Some(ms)) => s.push_str(&format!("; you may retry after {ms} ms.")),
                (true, None) => s.push_str("; you may retry once."),
                (false, _) => s.push_str("; do not retry, tell the user what happened."),
            }
            s
        }
        ErrorKind::RateLimited => format!(
            "Too many tool calls right now; wait {} ms before calling again.",
            detail_u64(err, "retry_after_ms").unwrap_or(1000)
        ),
        ErrorKind::Overloaded => {
            "The tool broker is overloaded right now; try the call once more later, or continue without it."
                .to_owned()
        }
        ErrorKind::ApprovalRequired => {
            let id = detail_str(err, "approval").unwrap_or("(none)");
            if detail_str(err, "asked") == Some("device") {
                format!(
                    "This action needs the user's approval and nothing was done yet; they were asked on their \
                     device. Wait for their answer, then call the tool again with the same arguments and \
                     approval {id}."
                )
            } else {
                format!(
                    "This action needs the user's approval and nothing was done yet; ask the user whether to \
                     go ahead, saying exactly what it will do, and only if they agree call the tool again with \
                     the same arguments and approval {id}."
                )
            }
        }
        ErrorKind::ApprovalDeclined => {
            "The user declined this action, so it was not done; do not retry it, and ask the user what they \
             want instead."
                .to_owned()
        }
        ErrorKind::ApprovalExpired => {
            "The approval for this action has expired or was already used, so nothing was done; call the tool \
             again without it to ask the user for a new approval."
                .to_owned()
        }
        ErrorKind::ApprovalMismatch => {
            let differs: Vec<&str> = err
                .detail("differs")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            format!(
                "The approval given was for a different action ({} differ), so nothing was done; an approval \
                 covers only the exact call the user agreed to, so call the tool again without it to ask for \
                 this one.",
                if differs.is_empty() { "its details".to_owned() } else { differs.join(", ") }
            )
        }
        ErrorKind::IdempotencyConflict => {
            "That idempotency key was already used for a different action, so nothing was done; use a new \
             key for a new action, or the same arguments to get the first one's outcome."
                .to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_contract::Leg;

    #[test]
    fn every_kind_has_an_actionable_sentence() {
        for kind in ErrorKind::ALL {
            let s = for_model(&WireError::new(*kind, "x"));
            assert!(s.len() > 40 && s.ends_with('.'), "{kind}: {s}");
        }
    }

    #[test]
    fn sentences_carry_the_details() {
        let t = for_model(&WireError::timeout(Leg::ToolCall, 7000));
        assert!(t.contains("7000 ms") && t.contains("unknown"), "{t}");
        let u = for_model(
            &WireError::new(ErrorKind::ToolUnavailable, "gone")
                .with("available", vec!["client__a", "client__b"]),
        );
        assert!(u.contains("client__a, client__b"), "{u}");
        let c = for_model(
            &WireError::new(ErrorKind::ClientError, "user declined")
                .with("code", "user_declined")
                .with("retryable", false),
        );
        assert!(c.contains("user declined") && c.contains("do not retry"), "{c}");
        let a = for_model(
            &WireError::new(ErrorKind::ApprovalRequired, "x")
                .with("approval", "ap-1")
                .with("asked", "device"),
        );
        assert!(a.contains("ap-1") && a.contains("device") && a.contains("nothing was done"), "{a}");
        let m =
            for_model(&WireError::new(ErrorKind::ApprovalMismatch, "x").with("differs", vec!["arguments"]));
        assert!(m.contains("(arguments differ)"), "{m}");
    }
}
