//! How a stage ends, in words every substrate shares: committed (now, or by an earlier stage
//! under the key), refused and rolled back with a reason the agent may read, or unknown when the
//! database did not answer cleanly — the one case a lookup of the marker settles.

use std::time::{Duration, Instant};

use interlock::target::{Deadline, SendAnswer, SendRequest};

use crate::receipt::Receipt;

/// How a stage ended, before it is told to the gate.
pub(crate) enum Ended {
    /// Committed with its marker.
    Committed(Receipt),
    /// The marker was already there: committed before, by an earlier stage under this key.
    AlreadyCommitted(Receipt),
    /// The marker is there for another plan under this key.
    OtherPlan(String),
    /// Rolled back: nothing of it is in the database.
    RolledBack { code: &'static str, message: String },
    /// The database did not answer cleanly: whether it committed is for the marker to tell.
    Unknown(String),
}

impl From<Ended> for SendAnswer {
    fn from(e: Ended) -> Self {
        match e {
            Ended::Committed(r) => SendAnswer::Done(r.to_value()),
            Ended::AlreadyCommitted(r) => SendAnswer::Replayed(r.to_value()),
            Ended::OtherPlan(m) => SendAnswer::Conflict(m),
            Ended::RolledBack { code, message } => SendAnswer::Definite {
                code: code.to_owned(),
                message,
            },
            Ended::Unknown(m) => SendAnswer::Unknown(m),
        }
    }
}

/// A failure inside the transaction, before its end.
pub(crate) enum Stop {
    /// Refuse: roll back and say why.
    Refuse(&'static str, String),
    /// The database failed: roll back; if even that fails, the answer is unknown.
    Db(String),
}

impl From<rusqlite::Error> for Stop {
    fn from(e: rusqlite::Error) -> Self {
        Stop::Db(e.to_string())
    }
}

impl From<postgres::Error> for Stop {
    fn from(e: postgres::Error) -> Self {
        Stop::Db(e.to_string())
    }
}

/// What the inside of a stage came to, before its transaction ends.
pub(crate) enum Inside {
    /// The marker was already there.
    Marked(Receipt),
    /// Every check passed; the marker is written; `COMMIT` is next.
    Passed(Receipt),
}

/// End a stage's transaction by what its inside came to: commit what passed, roll back the
/// rest. `commit` and `rollback` are the substrate's; `rollback` says whether the transaction is
/// certainly over with nothing of it kept.
pub(crate) fn finish(
    key: &str,
    plan_hash: &str,
    inside: Result<Inside, Stop>,
    commit: impl FnOnce() -> Result<(), String>,
    rollback: impl FnOnce() -> bool,
) -> Ended {
    match inside {
        Ok(Inside::Marked(receipt)) => {
            rollback();
            if receipt.plan_hash == plan_hash {
                Ended::AlreadyCommitted(receipt)
            } else {
                Ended::OtherPlan(format!(
                    "key {key} already committed another plan (hash {})",
                    receipt.plan_hash
                ))
            }
        }
        Ok(Inside::Passed(receipt)) => match commit() {
            Ok(()) => Ended::Committed(receipt),
            Err(e) => Ended::Unknown(format!("COMMIT failed: {e}")),
        },
        Err(stop) => match (stop, rollback()) {
            (Stop::Refuse(code, message), true) => Ended::RolledBack { code, message },
            (Stop::Db(e), true) => {
                // The database's text may quote other people's rows: the operator's log has it.
                tracing::warn!(key, error = %e, "a stage failed in the database");
                Ended::RolledBack {
                    code: "database_error",
                    message: "the database failed the stage; nothing of the plan was applied"
                        .into(),
                }
            }
            (Stop::Refuse(_, m) | Stop::Db(m), false) => {
                Ended::Unknown(format!("{m}; and the stage could not be rolled back"))
            }
        },
    }
}

/// The stop for a stage that reached its deadline.
pub(crate) fn late() -> Stop {
    Stop::Refuse(
        "deadline",
        "the stage outlasted the send's timeout and was rolled back".into(),
    )
}

/// Until when a stage may begin or commit: the send's timeout from when the target got it, and
/// the gate's own deadline on the clock recoverers judge by, whichever comes first. The second
/// is what a process frozen before its stage cannot restart by waking up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Until<'a> {
    instant: Instant,
    wall: Option<Deadline<'a>>,
}

impl<'a> Until<'a> {
    /// The limits of `req`, from now.
    pub(crate) fn of(req: &SendRequest<'a>) -> Self {
        Self {
            instant: Instant::now() + req.timeout,
            wall: req.deadline,
        }
    }

    /// `wait` from now, with no wall-clock limit (lookups).
    pub(crate) fn after(wait: Duration) -> Self {
        Self {
            instant: Instant::now() + wait,
            wall: None,
        }
    }

    /// Whether either limit has passed.
    pub(crate) fn passed(&self) -> bool {
        Instant::now() >= self.instant || self.wall.is_some_and(|d| d.passed())
    }

    /// What is left, by the clock that can time a wait: the monotonic one, and the wall
    /// clock's remainder where it is shorter.
    pub(crate) fn left(&self) -> Duration {
        let by_instant = self.instant.saturating_duration_since(Instant::now());
        match self.wall {
            Some(d) => {
                let ms = d.at_ms.saturating_sub(d.clock.now_ms()).max(0);
                by_instant.min(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
            }
            None => by_instant,
        }
    }
}
