//! Time budgets as data: named legs with durations, and the chain rule.
//!
//! The edge's call leg, its catalog re-read leg and the headroom to report an
//! inner failure must fit, in series, inside the backend's per-tool budget:
//! 7 + 4 + 1 = 12 s by default. [`Budgets::validate`] checks that when
//! configuration is resolved, so a misconfigured deployment fails at boot
//! instead of timing out in the wrong layer at 3 a.m.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One named phase of a call, so each expiry can say which one ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Leg {
    /// The device's own ceiling for answering a call (enforced by the device).
    ClientAnswer,
    /// Edge → device `tools/call`.
    ToolCall,
    /// Edge → device catalog re-read after a call moved the seq.
    Reread,
    /// The backend's whole budget for one tool call.
    PerTool,
    /// The backend's catalog read at turn start (retried once, outside the chain).
    TurnStart,
    /// How long an approval stays good: asked, decided and used within it
    /// (a person's time, outside the call's chain: the call that asks ends at once).
    Approval,
    /// How long a task (a call that outlives the turn) may run and its
    /// outcome stays readable, counted from its creation.
    Task,
}

impl Leg {
    /// The stable wire name used in `data.leg`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Leg::ClientAnswer => "client_answer",
            Leg::ToolCall => "tool_call",
            Leg::Reread => "reread",
            Leg::PerTool => "per_tool",
            Leg::TurnStart => "turn_start",
            Leg::Approval => "approval",
            Leg::Task => "task",
        }
    }

    /// Every leg, for reading a wire name back.
    pub const ALL: [Leg; 7] = [
        Leg::ClientAnswer,
        Leg::ToolCall,
        Leg::Reread,
        Leg::PerTool,
        Leg::TurnStart,
        Leg::Approval,
        Leg::Task,
    ];

    /// The leg a wire name (`data.leg`) names.
    pub fn from_name(name: &str) -> Option<Leg> {
        Leg::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

/// Every budget in the chain, with the defaults of the design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budgets {
    /// The device's own answer ceiling.
    pub client_answer: Duration,
    /// Edge → device call leg.
    pub tool_call: Duration,
    /// Edge → device re-read leg.
    pub reread: Duration,
    /// Slack left to report the inner failure upward.
    pub headroom: Duration,
    /// Backend per-tool budget.
    pub per_tool: Duration,
    /// Turn-start catalog read, per attempt.
    pub turn_start: Duration,
    /// Pause before the single turn-start retry.
    pub turn_start_backoff: Duration,
    /// How long an approval request and its grant stay good.
    pub approval: Duration,
    /// A task's time to live: how long it may run and its outcome is kept.
    pub task: Duration,
    /// How often whoever follows a task is told to look again (MCP's `pollInterval`).
    pub task_poll: Duration,
    /// How long a caller that cannot follow tasks (an MCP client without
    /// them) waits inside its call before it is handed the task's id instead.
    pub task_wait: Duration,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            client_answer: Duration::from_millis(2_000),
            tool_call: Duration::from_millis(7_000),
            reread: Duration::from_millis(4_000),
            headroom: Duration::from_millis(1_000),
            per_tool: Duration::from_millis(12_000),
            turn_start: Duration::from_millis(2_000),
            turn_start_backoff: Duration::from_millis(250),
            approval: Duration::from_millis(120_000),
            task: Duration::from_millis(600_000),
            task_poll: Duration::from_millis(1_000),
            task_wait: Duration::from_millis(10_000),
        }
    }
}

/// Why a budget set cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// A leg is zero, so every call would time out.
    #[error("budget leg {0} is zero")]
    Zero(&'static str),
    /// The device's ceiling is not shorter than the edge's call leg.
    #[error("client answer ceiling {client_ms} ms must be shorter than the tool_call leg {call_ms} ms")]
    ClientNotInsideCall {
        /// Device ceiling.
        client_ms: u128,
        /// Edge call leg.
        call_ms: u128,
    },
    /// The serial chain does not fit the per-tool budget.
    #[error("tool_call {call_ms} + reread {reread_ms} + headroom {headroom_ms} ms exceeds per_tool {per_tool_ms} ms")]
    ChainTooLong {
        /// Edge call leg.
        call_ms: u128,
        /// Edge re-read leg.
        reread_ms: u128,
        /// Headroom.
        headroom_ms: u128,
        /// Backend per-tool budget.
        per_tool_ms: u128,
    },
    /// An approval window shorter than one call, or longer than an hour.
    #[error(
        "approval window {approval_ms} ms must be at least per_tool {per_tool_ms} ms and at most 3600000 ms"
    )]
    ApprovalOutOfRange {
        /// The approval window.
        approval_ms: u128,
        /// Backend per-tool budget.
        per_tool_ms: u128,
    },
    /// A task that lives shorter than one call or longer than a day, or is
    /// polled or waited on for longer than it lives.
    #[error(
        "task ttl {task_ms} ms must be at least per_tool {per_tool_ms} ms and at most 86400000 ms, \
         with task_poll {poll_ms} ms and task_wait {wait_ms} ms no longer than it"
    )]
    TaskOutOfRange {
        /// The task's time to live.
        task_ms: u128,
        /// Backend per-tool budget.
        per_tool_ms: u128,
        /// The poll interval.
        poll_ms: u128,
        /// The blocking ceiling for callers without tasks.
        wait_ms: u128,
    },
}

/// Longest a task may live: past a day, it is a job queue's work, not a call's.
pub const MAX_TASK: Duration = Duration::from_secs(86_400);

/// Longest an approval may stay good: a grant is for *this* call, now, not a standing permission.
pub const MAX_APPROVAL: Duration = Duration::from_secs(3600);

impl Budgets {
    /// The serial sum the edge can spend on one call before answering.
    pub fn edge_chain(&self) -> Duration {
        self.tool_call + self.reread
    }

    /// What the whole chain would cost if the turn-start read and its retry ran mid-turn.
    pub fn chain_with_turn_start_retry(&self) -> Duration {
        self.edge_chain() + self.headroom + self.turn_start * 2 + self.turn_start_backoff
    }

    /// Checks the ordering and the chain rule; run it whenever configuration resolves.
    pub fn validate(&self) -> Result<(), BudgetError> {
        let legs = [
            ("client_answer", self.client_answer),
            ("tool_call", self.tool_call),
            ("reread", self.reread),
            ("per_tool", self.per_tool),
            ("turn_start", self.turn_start),
            ("approval", self.approval),
            ("task", self.task),
            ("task_poll", self.task_poll),
            ("task_wait", self.task_wait),
        ];
        if let Some((name, _)) = legs.iter().find(|(_, d)| d.is_zero()) {
            return Err(BudgetError::Zero(name));
        }
        if self.client_answer >= self.tool_call {
            return Err(BudgetError::ClientNotInsideCall {
                client_ms: self.client_answer.as_millis(),
                call_ms: self.tool_call.as_millis(),
            });
        }
        if self.edge_chain() + self.headroom > self.per_tool {
            return Err(BudgetError::ChainTooLong {
                call_ms: self.tool_call.as_millis(),
                reread_ms: self.reread.as_millis(),
                headroom_ms: self.headroom.as_millis(),
                per_tool_ms: self.per_tool.as_millis(),
            });
        }
        // A grant that expires before the call it allows could be made is useless;
        // one that lasts past an hour is a standing permission, not an approval.
        if self.approval < self.per_tool || self.approval > MAX_APPROVAL {
            return Err(BudgetError::ApprovalOutOfRange {
                approval_ms: self.approval.as_millis(),
                per_tool_ms: self.per_tool.as_millis(),
            });
        }
        // The call that creates a task keeps the 12 s chain; the task itself
        // must outlast that call, and be looked at more often than it lives.
        if self.task < self.per_tool
            || self.task > MAX_TASK
            || self.task_poll > self.task
            || self.task_wait > self.task
        {
            return Err(BudgetError::TaskOutOfRange {
                task_ms: self.task.as_millis(),
                per_tool_ms: self.per_tool.as_millis(),
                poll_ms: self.task_poll.as_millis(),
                wait_ms: self.task_wait.as_millis(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_seven_four_one_twelve() {
        let b = Budgets::default();
        assert_eq!(b.validate(), Ok(()));
        assert_eq!(b.edge_chain() + b.headroom, b.per_tool);
    }

    #[test]
    fn table_of_bad_budgets() {
        let ms = Duration::from_millis;
        type Check = fn(&BudgetError) -> bool;
        let cases: Vec<(&str, Budgets, Check)> = vec![
            ("long call", Budgets { tool_call: ms(8_000), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::ChainTooLong { .. })
            }),
            ("no headroom", Budgets { headroom: ms(1_001), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::ChainTooLong { .. })
            }),
            ("client over call", Budgets { client_answer: ms(7_000), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::ClientNotInsideCall { .. })
            }),
            ("zero reread", Budgets { reread: ms(0), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::Zero("reread"))
            }),
            ("approval shorter than a call", Budgets { approval: ms(11_999), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::ApprovalOutOfRange { .. })
            }),
            ("approval over an hour", Budgets { approval: ms(3_600_001), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::ApprovalOutOfRange { .. })
            }),
            ("task shorter than a call", Budgets { task: ms(11_999), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::TaskOutOfRange { .. })
            }),
            ("task over a day", Budgets { task: ms(86_400_001), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::TaskOutOfRange { .. })
            }),
            (
                "poll slower than the task lives",
                Budgets { task_poll: ms(600_001), ..Budgets::default() },
                |e| matches!(e, BudgetError::TaskOutOfRange { .. }),
            ),
            (
                "wait longer than the task lives",
                Budgets { task_wait: ms(600_001), ..Budgets::default() },
                |e| matches!(e, BudgetError::TaskOutOfRange { .. }),
            ),
            ("zero poll", Budgets { task_poll: ms(0), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::Zero("task_poll"))
            }),
            ("zero approval", Budgets { approval: ms(0), ..Budgets::default() }, |e| {
                matches!(e, BudgetError::Zero("approval"))
            }),
        ];
        for (name, budgets, check) in cases {
            let err = budgets.validate().err();
            assert!(err.as_ref().is_some_and(check), "{name}: got {err:?}");
        }
    }

    #[test]
    fn leg_names_are_snake_case_on_the_wire() {
        for leg in Leg::ALL {
            assert_eq!(serde_json::to_value(leg).ok(), Some(serde_json::Value::from(leg.as_str())));
        }
    }
}
