//! Tool sources: where a tool runs, and how it decides whose data a call may touch.
//!
//! Every tool a turn can reach comes from a [`ToolSource`]: the client source
//! (the session's device, over the backend link; see [`crate::Turn`]) or a
//! server-side source the backend registers in a [`crate::Registry`]. A
//! source's [`AuthPosture`] is part of its contract: the client source is
//! session-bound (the edge checks that the turn's user owns the session); a
//! server-side source gets the turn's credential forwarded and verifies it
//! itself. Core never decides data scope for a source.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;
use tracing::debug;

use tether_contract::mcp::{CallToolResult, ToolDeclaration};
use tether_contract::{ErrorKind, Leg, WireError};

/// Id of the client source: the turn's session, reached over the backend link.
pub(crate) const CLIENT_SOURCE: &str = "client";

/// How a source authorizes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthPosture {
    /// Bound to one client session: the edge runs a call only when the turn's
    /// user credential verifies and its principal owns the session.
    SessionBound,
    /// Gets the turn's user credential with every call and verifies it itself;
    /// a call without one must be refused by the source.
    VerifiesCredential,
}

/// How long a source's calls may take, so a caller profile can keep slow
/// sources out of an interactive turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyClass {
    /// Answers while a user waits (the client source: within the 12 s chain).
    Interactive,
    /// May take longer than a user should wait; background callers only.
    Background,
}

/// What a source gets with each call.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    /// The turn's user credential, forwarded as given (a source with
    /// [`AuthPosture::VerifiesCredential`] verifies it).
    pub credential: Option<&'a str>,
    /// When the caller stops waiting: the per-tool budget as an absolute deadline.
    pub deadline: Instant,
    /// The caller's idempotency key, when it gave one.
    pub idempotency_key: Option<&'a str>,
    /// Where the caller wants progress, when it asked (a source may report none).
    pub progress: Option<&'a crate::link::ProgressSender>,
    /// The approval the call presents, when it has one.
    pub approval: Option<&'a str>,
    /// The caller's profile needs an approval for this call.
    pub approval_required: bool,
    /// The caller can follow a task: a long-running tool may answer one.
    pub task: Option<tether_contract::tasks::TaskMetadata>,
    /// The W3C trace context to hand on (`traceparent`): the dispatch span's
    /// when traces are exported, else the caller's as it came.
    pub traceparent: Option<&'a str>,
    /// W3C `tracestate`, beside `traceparent`.
    pub tracestate: Option<&'a str>,
}

impl CallContext<'_> {
    /// Time left before the deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// Somewhere tools run. Object-safe, so a registry holds many kinds.
pub trait ToolSource: Send + Sync + std::fmt::Debug {
    /// Stable id that caller profiles name in `sources` (`client` is the client source).
    fn id(&self) -> &str;

    /// How this source authorizes calls.
    fn posture(&self) -> AuthPosture;

    /// How long its calls may take.
    fn latency(&self) -> LatencyClass;

    /// The tools it offers now.
    fn tools(&self) -> Vec<ToolDeclaration>;

    /// What a call would act on, as it is now (a record's status or
    /// version), bound into the call's approval: a grant asked while it was
    /// one thing does not run the call once it is another. The default, None,
    /// binds the arguments alone. Read before an approval is asked and again
    /// before it is used.
    fn approval_state<'a>(
        &'a self,
        _name: &'a str,
        _arguments: &'a Value,
        _ctx: CallContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Value>, WireError>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Runs one call. The dispatcher has already checked scope, the name and
    /// the arguments; it also enforces the deadline, so a source that ignores
    /// it is cut off, never waited on.
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: Value,
        ctx: CallContext<'a>,
    ) -> BoxFuture<'a, Result<CallToolResult, WireError>>;
}

/// Most retries of an idempotent read after its first attempt.
pub(crate) const MAX_READ_RETRIES: u32 = 2;

/// Whether a failed read may be tried again: transport trouble and load
/// shedding may pass; an authorization refusal or a bad request never will.
pub(crate) fn read_is_retryable(err: &WireError) -> bool {
    matches!(
        err.kind,
        ErrorKind::ChannelClosed | ErrorKind::Timeout | ErrorKind::Overloaded | ErrorKind::RateLimited
    )
}

/// Runs an idempotent read with at most [`MAX_READ_RETRIES`] retries, each
/// attempt bounded by what is left of `deadline`, never after a refusal
/// (`unauthenticated`, `forbidden`) and never past the deadline. When time
/// runs out the read is a `timeout` whose outcome is unknown.
pub async fn read_with_retries<T, F, Fut>(
    deadline: Instant,
    backoff: Duration,
    mut attempt: F,
) -> Result<T, WireError>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, WireError>>,
{
    let started = Instant::now();
    let budget_ms = |now: Instant| u64::try_from((now - started).as_millis()).unwrap_or(u64::MAX);
    let mut tries = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WireError::timeout(Leg::PerTool, budget_ms(Instant::now())));
        }
        let outcome = match tokio::time::timeout(left, attempt(tries)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(WireError::timeout(Leg::PerTool, budget_ms(Instant::now()))),
        };
        match outcome {
            Ok(value) => return Ok(value),
            Err(err) if tries < MAX_READ_RETRIES && read_is_retryable(&err) => {
                tries += 1;
                debug!(attempt = tries, error = %err, "read failed; retrying");
                if Instant::now() + backoff >= deadline {
                    return Err(err);
                }
                tokio::time::sleep(backoff).await;
            }
            Err(err) => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    async fn run(failures: Vec<ErrorKind>, deadline_ms: u64) -> (Result<u32, WireError>, u32) {
        let calls = AtomicU32::new(0);
        let deadline = Instant::now() + Duration::from_millis(deadline_ms);
        let out = read_with_retries(deadline, Duration::from_millis(100), |n| {
            calls.fetch_add(1, Ordering::SeqCst);
            let failure = failures.get(n as usize).copied();
            async move {
                match failure {
                    Some(kind) => Err(WireError::new(kind, "fail")),
                    None => Ok(n),
                }
            }
        })
        .await;
        (out, calls.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn retry_table() {
        use ErrorKind::*;
        let cases: Vec<(Vec<ErrorKind>, Result<u32, ErrorKind>, u32)> = vec![
            (vec![], Ok(0), 1),
            (vec![Overloaded], Ok(1), 2),
            (vec![ChannelClosed, Overloaded], Ok(2), 3),
            (vec![Overloaded, Overloaded, Overloaded], Err(Overloaded), 3),
            (vec![Unauthenticated], Err(Unauthenticated), 1),
            (vec![Forbidden], Err(Forbidden), 1),
            (vec![Overloaded, Forbidden], Err(Forbidden), 2),
            (vec![InvalidArguments], Err(InvalidArguments), 1),
        ];
        for (failures, want, calls) in cases {
            let (got, n) = run(failures.clone(), 5_000).await;
            assert_eq!(got.map_err(|e| e.kind), want, "{failures:?}");
            assert_eq!(n, calls, "{failures:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_deadline_and_a_hang_is_outcome_unknown() {
        let (got, n) = run(vec![ErrorKind::Overloaded; 3], 150).await;
        assert_eq!(
            (got.map_err(|e| e.kind), n),
            (Err(ErrorKind::Overloaded), 2),
            "no retry past the deadline"
        );

        let calls = AtomicU32::new(0);
        let deadline = Instant::now() + Duration::from_secs(3);
        let out: Result<(), _> = read_with_retries(deadline, Duration::from_millis(100), |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            futures::future::pending()
        })
        .await;
        let err = out.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert_eq!(err.detail("outcome"), Some(&Value::from("unknown")));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a hang uses the whole deadline; nothing is retried after it"
        );
    }
}
