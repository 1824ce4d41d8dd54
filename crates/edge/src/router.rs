//! The router seam: where a backend's read or call for a session goes.
//!
//! A backend link verifies who is asking, then hands the request to the
//! hub's [`Router`] by session id. [`Local`] answers for the sessions this
//! process holds; a cluster router answers the same five questions for
//! sessions held by other edges and falls back to `Local` for its own. The
//! ownership check runs where the session lives, so a remote edge never has
//! to ship a session's principal back first.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tether_contract::backend::{
    CallParams, CallResponse, Manifest, ReaderInfo, SessionInfo, SessionInspect, TurnBegun,
};
use tether_contract::error::{ErrorKind, WireError};
use tether_contract::mcp::RawCallResult;
use tether_contract::tasks::{TaskParams, TaskState};
use tether_contract::writes::{DecideParams, Decided};
use tether_counters::fallback;
use tether_ledger::LedgerSnapshot;
use tracing::info;

use crate::hub::{BackendEvent, Hub};
use crate::session::{ProgressRelay, Session, TaskHandover, TaskRecord};

/// What a router answers with: boxed, so routers are objects the hub holds.
pub type Routed<'a, T> = Pin<Box<dyn Future<Output = Result<T, WireError>> + Send + 'a>>;

/// Who is reading, verified by the backend link: a user sees their own
/// sessions, an operator every one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "role", content = "principal", rename_all = "snake_case")]
pub enum Reader {
    /// A `tether-client` credential's principal.
    User(String),
    /// A `tether-operator` credential's principal (each read is logged).
    Operator(String),
}

impl Reader {
    /// Whether this reader may see a session of `principal`.
    pub fn sees(&self, principal: &str) -> bool {
        match self {
            Reader::User(sub) => sub == principal,
            Reader::Operator(_) => true,
        }
    }

    /// How `sessions/list` names the reader.
    pub fn info(&self) -> ReaderInfo {
        match self {
            Reader::User(principal) => {
                ReaderInfo { principal: principal.clone(), operator: false, expires_at: None }
            }
            Reader::Operator(principal) => {
                ReaderInfo { principal: principal.clone(), operator: true, expires_at: None }
            }
        }
    }
}

/// What a backend asks of a task, where the task is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TaskOp {
    /// `tasks/get`.
    Get,
    /// `tasks/cancel`.
    Cancel,
    /// `tasks/result`, waiting at most `wait_ms` for the task to end: a
    /// request across edges stays short, and the asker asks again.
    Outcome {
        /// Longest wait for this ask.
        wait_ms: u64,
    },
}

/// The answer to a [`TaskOp`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum TaskAnswer {
    /// The task's state (after a cancel, its final one).
    State(TaskState),
    /// Its outcome once final; None while it still runs.
    Outcome(Option<Box<CallResponse<RawCallResult>>>),
}

/// What a device resuming its session takes from the edge that held it.
///
/// On the wire it is the bare seq when there are no tasks, as before tasks
/// moved: an edge of the previous release still reads it.
#[derive(Debug, Default)]
pub struct Claimed {
    /// The session's applied seq.
    pub seq: u64,
    /// The tasks the edge followed for the session, now the new holder's to follow.
    pub tasks: Vec<TaskHandover>,
    /// The session's write ledger (grants, keys, receipts), when it had one.
    pub ledger: Option<LedgerSnapshot<CallResponse<RawCallResult>>>,
}

// Read through a JSON tree, not an untagged enum: serde's buffering of an
// untagged enum cannot carry the raw results a ledger or a task holds.
impl<'de> serde::Deserialize<'de> for Claimed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Claimed, D::Error> {
        #[derive(serde::Deserialize)]
        struct Full {
            seq: u64,
            #[serde(default)]
            tasks: Vec<TaskHandover>,
            #[serde(default)]
            ledger: Option<LedgerSnapshot<CallResponse<RawCallResult>>>,
        }
        let value = serde_json::Value::deserialize(deserializer)?;
        if let Some(seq) = value.as_u64() {
            return Ok(Claimed { seq, ..Claimed::default() });
        }
        let Full { seq, tasks, ledger } = serde_json::from_value(value).map_err(serde::de::Error::custom)?;
        Ok(Claimed { seq, tasks, ledger })
    }
}

impl serde::Serialize for Claimed {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.tasks.is_empty() && self.ledger.is_none() {
            return serializer.serialize_u64(self.seq);
        }
        #[derive(serde::Serialize)]
        struct Full<'a> {
            seq: u64,
            tasks: &'a [TaskHandover],
            ledger: &'a Option<LedgerSnapshot<CallResponse<RawCallResult>>>,
        }
        Full { seq: self.seq, tasks: &self.tasks, ledger: &self.ledger }.serialize(serializer)
    }
}

/// A session list and whether it is whole.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The sessions, sorted by id.
    pub sessions: Vec<SessionInfo>,
    /// Some edges could not be asked (NATS unreachable, an edge silent, the
    /// cluster's members not all heard yet): only the sessions reached.
    pub partial: bool,
}

/// Answers backend requests by session id, wherever the session is held.
pub trait Router: std::fmt::Debug + Send + Sync {
    /// [`Router::list`], saying whether it reached every edge: a list
    /// gathered without the whole cluster is `partial`, and nobody keeps it.
    fn listing<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        reader: &'a Reader,
        only: Option<&'a str>,
    ) -> Routed<'a, Listing> {
        let listed = self.list(hub, reader, only);
        Box::pin(async move { Ok(Listing { sessions: listed.await?, partial: false }) })
    }

    /// The sessions `reader` may see (only `only`, when given), sorted by id.
    fn list<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        reader: &'a Reader,
        only: Option<&'a str>,
    ) -> Routed<'a, Vec<SessionInfo>>;

    /// Starts a turn on a session `reader` may see.
    fn begin_turn<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, TurnBegun>;

    /// The operator's view of a session `reader` may see.
    fn inspect<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, SessionInspect>;

    /// The applied manifest of a session `reader` may see.
    fn manifest<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, Arc<Manifest>>;

    /// The user's answer to an approval of a session they own (or, without
    /// an answer, where it stands), where the session lives.
    fn decide<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        params: &'a DecideParams,
        reader: &'a Reader,
    ) -> Routed<'a, Decided> {
        Box::pin(std::future::ready(Local::decide(hub, params, reader)))
    }

    /// Runs a call on a session `owner` (the turn's verified user) owns;
    /// progress, when asked for, goes to `progress`.
    fn call<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        params: CallParams,
        owner: &'a str,
        progress: Option<ProgressRelay>,
    ) -> Routed<'a, CallResponse<RawCallResult>>;

    /// Hands the session `session` over to a device reconnecting with its
    /// resume token (`secret`, checked with `principal`, once only), wherever
    /// it is held; returns its applied seq, and the tasks another edge followed for it.
    fn claim<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        secret: &'a str,
        principal: &'a str,
    ) -> Routed<'a, Claimed>;

    /// Reads or stops a task of a session `owner` owns, where the task is followed.
    fn task<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        params: &'a TaskParams,
        op: TaskOp,
        owner: &'a str,
    ) -> Routed<'a, TaskAnswer> {
        Box::pin(Local::task(hub, params, op, owner))
    }

    /// Makes `session`, about to be listed here, reachable from wherever the
    /// router reaches: a cluster router subscribes it and waits until NATS has
    /// the interest, so a backend that hears of it anywhere can call it.
    fn hold<'a>(&'a self, _hub: &'a Arc<Hub>, _session: &'a Arc<Session>) -> Routed<'a, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// This edge published `event` to its backends; a cluster router tells
    /// the other edges, and starts or stops answering for the session.
    fn published(&self, _event: &BackendEvent) {}

    /// Why this edge reaches only part of the sessions it should, if it does
    /// (`/readyz` says it; the edge still serves its own sessions).
    fn degraded(&self) -> Option<String> {
        None
    }
}

/// The in-process router: the sessions this edge holds.
#[derive(Debug, Default)]
pub struct Local;

impl Local {
    /// A connected session, or why not: recently closed (`channel_closed` with
    /// its reason) or unknown (`session_not_found`).
    pub fn session(hub: &Hub, id: &str) -> Result<Arc<Session>, WireError> {
        if let Some(s) = hub.session(id) {
            return Ok(s);
        }
        Err(match hub.closed_reason(id) {
            Some(reason) => {
                fallback!(
                    hub.counters().calls_channel_closed,
                    debug,
                    session = id,
                    reason,
                    "request for a recently closed session"
                );
                WireError::channel_closed(&reason).with("session", id)
            }
            None => WireError::new(ErrorKind::SessionNotFound, format!("no connected session {id}"))
                .with("session", id),
        })
    }

    /// Decides an approval of a session this edge holds: only its own user
    /// decides (an operator reads sessions, never approves their calls).
    pub fn decide(hub: &Hub, params: &DecideParams, reader: &Reader) -> Result<Decided, WireError> {
        let Reader::User(principal) = reader else {
            return Err(WireError::new(
                ErrorKind::Forbidden,
                "an operator credential cannot decide an approval",
            )
            .with("session", params.session.as_str()));
        };
        Local::readable(hub, &params.session, reader)?.decide(params, principal)
    }

    /// Reads or stops a task this edge follows.
    pub async fn task(
        hub: &Hub,
        params: &TaskParams,
        op: TaskOp,
        owner: &str,
    ) -> Result<TaskAnswer, WireError> {
        let record = Local::owned_task(hub, params, owner)?;
        Ok(match op {
            TaskOp::Get => TaskAnswer::State(record.state()),
            TaskOp::Cancel => TaskAnswer::State(crate::session::cancel_task(hub, &record)?),
            TaskOp::Outcome { wait_ms } => {
                let wait = std::time::Duration::from_millis(wait_ms);
                match tokio::time::timeout(wait, record.outcome()).await {
                    Ok(outcome) => TaskAnswer::Outcome(Some(Box::new(outcome?))),
                    Err(_) => TaskAnswer::Outcome(None),
                }
            }
        })
    }

    /// The task `p` names, when it is `owner`'s on that session; anything else
    /// reads as unknown, so nobody learns of another user's tasks.
    fn owned_task(hub: &Hub, p: &TaskParams, owner: &str) -> Result<Arc<TaskRecord>, WireError> {
        hub.task(&p.task).filter(|t| t.session == p.session && t.owner == owner).ok_or_else(|| {
            WireError::new(
                ErrorKind::InvalidParams,
                format!(
                    "no task {} of this user on session {}: it ended more than its ttl ago, or was never made here",
                    p.task, p.session
                ),
            )
            .with("task", p.task.as_str())
        })
    }

    /// The session a read names, if the reader may see it: another user's
    /// session is `forbidden` and reveals nothing but that.
    fn readable(hub: &Hub, session: &str, reader: &Reader) -> Result<Arc<Session>, WireError> {
        let s = Local::session(hub, session)?;
        if reader.sees(&s.principal) {
            if let Reader::Operator(operator) = reader {
                info!(%operator, session = %s.id, "operator read a session");
            }
            return Ok(s);
        }
        fallback!(hub.counters().reads_refused, debug, session = %s.id, "session read refused: another user's session");
        Err(WireError::new(ErrorKind::Forbidden, "the credential's user does not own this session")
            .with("session", s.id.as_str()))
    }
}

fn info(s: &Session) -> SessionInfo {
    let manifest = s.manifest();
    SessionInfo {
        session: s.id.clone(),
        principal: s.principal.clone(),
        server_info: s.server_info(),
        protocol_version: s.revision().as_str().to_owned(),
        seq: manifest.as_ref().map_or(0, |m| m.seq),
        tools: manifest.as_ref().map_or(0, |m| m.tools().len()),
    }
}

impl Router for Local {
    fn claim<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        secret: &'a str,
        principal: &'a str,
    ) -> Routed<'a, Claimed> {
        let claimed = Local::session(hub, session)
            .and_then(|s| s.claim(secret, principal))
            .map(|seq| Claimed { seq, ..Claimed::default() });
        Box::pin(std::future::ready(claimed))
    }

    fn list<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        reader: &'a Reader,
        only: Option<&'a str>,
    ) -> Routed<'a, Vec<SessionInfo>> {
        let candidates = match only {
            Some(id) => hub.session(id).into_iter().collect(),
            None => hub.sessions(),
        };
        let seen = candidates.iter().filter(|s| reader.sees(&s.principal)).map(|s| info(s)).collect();
        Box::pin(std::future::ready(Ok(seen)))
    }

    fn begin_turn<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, TurnBegun> {
        let begun = Local::readable(hub, session, reader).map(|s| TurnBegun {
            turn: uuid::Uuid::new_v4().to_string(),
            session: s.id.clone(),
            seq: s.manifest().map_or(0, |m| m.seq),
            principal: match reader {
                Reader::User(principal) => Some(principal.clone()),
                Reader::Operator(_) => None,
            },
        });
        Box::pin(std::future::ready(begun))
    }

    fn inspect<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, SessionInspect> {
        Box::pin(std::future::ready(Local::readable(hub, session, reader).map(|s| s.inspect())))
    }

    fn manifest<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        session: &'a str,
        reader: &'a Reader,
    ) -> Routed<'a, Arc<Manifest>> {
        let manifest = Local::readable(hub, session, reader).and_then(|s| match s.manifest() {
            Some(m) => Ok(Arc::new(s.view(&m))),
            None => Err(WireError::new(ErrorKind::SessionNotFound, "session is still initializing")),
        });
        Box::pin(std::future::ready(manifest))
    }

    fn call<'a>(
        &'a self,
        hub: &'a Arc<Hub>,
        params: CallParams,
        owner: &'a str,
        progress: Option<ProgressRelay>,
    ) -> Routed<'a, CallResponse<RawCallResult>> {
        let s = match Local::session(hub, &params.session) {
            Ok(s) => s,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        if s.principal != owner {
            fallback!(hub.counters().calls_forbidden, debug, session = %s.id, "call refused: the turn's user does not own this session");
            let refused = WireError::new(ErrorKind::Forbidden, "the turn's user does not own this session")
                .with("session", s.id.as_str());
            return Box::pin(std::future::ready(Err(refused)));
        }
        // The call's own future, boxed as it is: no wrapper holding a second copy of the params.
        Box::pin(s.call_tool(params, progress))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::Claimed;
    use serde_json::json;

    #[test]
    fn a_claim_without_tasks_is_the_bare_seq_on_the_wire_as_before() {
        let bare = serde_json::to_value(Claimed { seq: 7, ..Claimed::default() }).unwrap();
        assert_eq!(bare, json!(7), "an edge of the previous release reads it");
        let read: Claimed = serde_json::from_value(json!(7)).unwrap();
        assert_eq!((read.seq, read.tasks.len()), (7, 0));
        let full: Claimed = serde_json::from_value(json!({"seq": 3, "tasks": []})).unwrap();
        assert_eq!(full.seq, 3);
    }
}
