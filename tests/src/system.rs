//! What every compared system must do: run one attempt of a decided refund, with faults injected
//! at the same points, and say what it answered.

use std::sync::Arc;

use interlock::Effect;
use interlock_testkit::faults::Stall;

/// A fault injected into one attempt.
#[derive(Clone, Debug)]
pub enum Fault {
    /// The process dies after recording its intent (if it records any), before sending.
    CrashBeforeSend,
    /// The process dies after the service applied the refund, before the answer is recorded.
    CrashAfterApply,
    /// The process stalls before sending until released.
    StallBeforeSend(Arc<Stall>),
    /// The process stalls right after reading the premises, until released: the gate between
    /// its premise read and the transaction that dispatches on it; a baseline, which reads no
    /// premises, just before its send.
    StallAfterPremiseRead(Arc<Stall>),
}

/// What an answer claims about the money.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Says {
    /// The refund was made.
    Done,
    /// The refund was not made.
    NotDone,
    /// It cannot say.
    Unknown,
}

/// An attempt's answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Short label, e.g. `COMMITTED/first_send`, `ERROR:amount_too_large`.
    pub label: String,
    /// Its claim.
    pub says: Says,
    /// Whether the system stops retrying on this answer.
    pub is_final: bool,
    /// Whether a repair was offered.
    pub repair_offered: bool,
    /// For a non-final answer: how long the system asks to wait before the next attempt.
    pub retry_after_ms: Option<i64>,
}

/// How one attempt ended.
#[derive(Clone, Debug)]
pub enum Attempt {
    /// An answer.
    Answered(Answer),
    /// The process died.
    Crashed,
}

/// A system under test.
pub trait System: Sync {
    /// Column name.
    fn name(&self) -> String;
    /// One attempt of `effect`, the `n`th, with `faults` injected.
    fn attempt(&self, effect: &Effect, n: u32, faults: &[Fault]) -> anyhow::Result<Attempt>;
    /// The approval is revoked. Only systems that check a lease notice.
    fn revoke_lease(&self) -> anyhow::Result<()> {
        Ok(())
    }
}
