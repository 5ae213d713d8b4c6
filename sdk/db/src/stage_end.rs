//! How a stage ends, in words every substrate shares: committed (now, or by an earlier stage
//! under the key), refused and rolled back with a reason the agent may read, or unknown when the
//! database did not answer cleanly — the one case a lookup of the marker settles.

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use interlock::target::{Deadline, LastLook, Looked, LookupAnswer, SendAnswer, SendRequest};
use serde_json::Value;

use crate::checks::{Policy, Spent, Verdict, judge};
use crate::diff::Diff;
use crate::plan::{Plan, Premise};
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
    /// The transaction may have ended under the stage, how is not known: roll back what may be
    /// left, and answer unknown.
    Unsure(String),
    /// Not now: roll back and answer unknown, so the gate looks (finding nothing) and tries
    /// again later.
    Again(String),
}

impl Stop {
    /// What went wrong, in words, where only a message is wanted.
    pub(crate) fn into_message(self) -> String {
        match self {
            Stop::Refuse(_, m) | Stop::Db(m) | Stop::Unsure(m) | Stop::Again(m) => m,
        }
    }
}

impl From<rusqlite::Error> for Stop {
    fn from(e: rusqlite::Error) -> Self {
        Stop::Db(e.to_string())
    }
}

impl From<postgres::Error> for Stop {
    fn from(e: postgres::Error) -> Self {
        Stop::Db(described(&e))
    }
}

/// The server's own message and SQLSTATE where there is one (the client's says only "db
/// error"), for the operator's log.
pub(crate) fn described(e: &postgres::Error) -> String {
    e.as_db_error().map_or_else(
        || e.to_string(),
        |d| format!("{} ({})", d.message(), d.code().code()),
    )
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
            (Stop::Unsure(m), _) => Ended::Unknown(m),
            (Stop::Again(m), true) => {
                Ended::Unknown(format!("{m}; the stage was rolled back, nothing applied"))
            }
            (Stop::Refuse(_, m) | Stop::Db(m) | Stop::Again(m), false) => {
                Ended::Unknown(format!("{m}; and the stage could not be rolled back"))
            }
        },
    }
}

/// What a send asks a stage to do: under which key, which plan (and its hash), judged by which
/// policy, done by when, and the gate's last look before the commit.
#[derive(Clone, Copy)]
pub(crate) struct Asked<'a> {
    pub(crate) key: &'a str,
    pub(crate) plan: &'a Plan,
    pub(crate) plan_hash: &'a str,
    pub(crate) policy: &'a Policy,
    pub(crate) until: Until<'a>,
    pub(crate) look: Option<LastLook<'a>>,
}

impl<'a> Asked<'a> {
    /// What `req` asks: `plan` (read from its payload, hashed as `plan_hash`) under its key,
    /// judged by `policy`, within its limits, with its last look.
    pub(crate) fn of(
        req: &SendRequest<'a>,
        plan: &'a Plan,
        plan_hash: &'a str,
        policy: &'a Policy,
    ) -> Self {
        Self {
            key: req.key.as_str(),
            plan,
            plan_hash,
            policy,
            until: Until::of(req),
            look: req.last_look,
        }
    }
}

/// The gate's last look, taken once the stage has been judged and before its marker and
/// `COMMIT`: a lease that died or a premise that moved since the gate's checks refuses the stage
/// (nothing lands unauthorized or on moved facts); one that could not be read rolls it back for
/// the gate to try again.
pub(crate) fn last_look(look: Option<LastLook<'_>>) -> Result<(), Stop> {
    match look.map(|l| l.look()) {
        None | Some(Looked::Holds) => Ok(()),
        Some(Looked::Lapsed { code, why }) => Err(Stop::Refuse(
            code,
            format!("{why}; the stage was rolled back just before its commit"),
        )),
        Some(Looked::Unreadable(why)) => Err(Stop::Again(format!(
            "the gate's last look before the commit failed ({why})"
        ))),
    }
}

/// The inside of a stage (`f`), bracketed by its deadline: not begun once `until` has passed,
/// and not to be committed if it passed while `f` ran.
pub(crate) fn in_time(
    until: Until<'_>,
    f: impl FnOnce() -> Result<Inside, Stop>,
) -> Result<Inside, Stop> {
    if until.passed() {
        return Err(late());
    }
    match f()? {
        Inside::Passed(_) if until.passed() => Err(late()),
        inside => Ok(inside),
    }
}

/// The stop for a stage that reached its deadline.
fn late() -> Stop {
    Stop::Refuse(
        "deadline",
        "the stage outlasted the send's timeout and was rolled back".into(),
    )
}

/// The longest wait taken as given (longer ones are this): a time the monotonic clock can add.
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

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
            instant: Instant::now() + req.timeout.min(LONGEST),
            wall: req.deadline,
        }
    }

    /// `wait` from now, with no wall-clock limit (lookups).
    pub(crate) fn after(wait: Duration) -> Self {
        Self {
            instant: Instant::now() + wait.min(LONGEST),
            wall: None,
        }
    }

    /// Now in milliseconds since the Unix epoch, by the gate's clock where the send named one
    /// (the clock its claims are judged by), else by the system's.
    pub(crate) fn now_ms(&self) -> i64 {
        match self.wall {
            Some(d) => d.clock.now_ms(),
            None => interlock::Clock::now_ms(&interlock::SystemClock),
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

/// The plan a send carries, or the answer that refuses it before any database sees it.
pub(crate) fn plan_of(req: &SendRequest<'_>) -> Result<Plan, SendAnswer> {
    Plan::from_payload(req.payload).map_err(|e| SendAnswer::Definite {
        code: "bad_plan".into(),
        message: e.to_string(),
    })
}

/// The plan hash a lookup for `payload` looks for in the marker: the marker under a key is
/// this effect's only if it was sealed for this very plan.
pub(crate) fn looked_for(payload: &Value) -> Result<String, LookupAnswer> {
    Plan::from_payload(payload)
        .map(|plan| crate::receipt::plan_hash(&plan))
        .map_err(|e| LookupAnswer::Unknown(format!("the payload is not a plan: {e}")))
}

/// A lookup's answer from a locked read of the marker, for the plan whose hash is `plan_hash`.
/// Another plan's marker under the key is not this effect: this plan never ran (and its stage
/// will find the key taken), so it is not found — never `Found`, which would tell its caller
/// that a plan it never saw committed.
pub(crate) fn lookup_answer(
    read: Result<Option<Receipt>, String>,
    plan_hash: &str,
) -> LookupAnswer {
    match read {
        Ok(Some(receipt)) if receipt.plan_hash == plan_hash => {
            LookupAnswer::Found(receipt.to_value())
        }
        Ok(Some(receipt)) => {
            tracing::warn!(
                key = %receipt.key,
                "the key's marker was sealed for another plan: this plan is not there"
            );
            LookupAnswer::NotFound
        }
        Ok(None) => LookupAnswer::NotFound,
        Err(e) => LookupAnswer::Unknown(format!("could not read the marker: {e}")),
    }
}

/// The checks' verdict on the measured `diff`, or the refusal: the operator's version to the
/// log, the agent's as the answer.
pub(crate) fn judged(
    key: &str,
    plan: &Plan,
    diff: &Diff,
    policy: &Policy,
    spent: &Spent,
) -> Result<Verdict, Stop> {
    let verdict = judge(plan, diff, policy, spent);
    if verdict.passed() {
        Ok(verdict)
    } else {
        tracing::warn!(key, refusal = %verdict.for_operator(), "database plan refused");
        Err(Stop::Refuse("refused", verdict.for_agent()))
    }
}

/// Whether premise `p` still answers as when the plan was decided (`got`, read in the stage).
pub(crate) fn premise_holds(p: &Premise, got: &[BTreeMap<String, Value>]) -> Result<(), Stop> {
    if got == p.expect.as_slice() {
        return Ok(());
    }
    // The answer may hold other people's rows: only the premise's name goes back.
    let shown = interlock::shown::allowed();
    tracing::warn!(
        premise = %p.name,
        expected = shown.premise(&p.name, &p.expect),
        found = shown.premise(&p.name, &got),
        "premise moved"
    );
    Err(Stop::Refuse(
        "premise_moved",
        format!(
            "premise `{}` no longer holds: its answer changed since the plan was decided",
            p.name
        ),
    ))
}

/// A plan's statement the database failed. Its message may quote other people's rows (a
/// unique key's value): the operator's log has it, the answer names the statement only.
pub(crate) fn statement_failed(name: &str, error: &dyn std::fmt::Display) -> Stop {
    tracing::warn!(statement = %name, error = %error, "a plan's statement failed");
    Stop::Refuse(
        "statement_failed",
        format!("statement `{name}` failed in the database; nothing of the plan was applied"),
    )
}
