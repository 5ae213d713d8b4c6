//! Database effects as a transition system: workers send one plan to a database through the
//! gate, and the database stages it, takes the gate's last look, writes the marker and commits,
//! each one step, with the database's write lock held from the stage's start to its end. Every
//! gate decision is the real core's (`plan_submit`, `plan_takeover`, `core::transition::*`);
//! the stage follows the substrate's rules, each of which can be switched off ([`Rule`]) to
//! show the checker catches the bug it prevents.
//!
//! Between any two steps anything else may happen: another worker steps, a worker crashes (its
//! open transaction is left to the server, which rolls it back, or commits it if its `COMMIT` was
//! already sent, holding the key's lock until then), a `COMMIT`'s answer is lost, the lease is
//! revoked, a premise moves, the clock ticks. Unlike the single-key model, the clock is never
//! held back for a request in flight: a stage enforces its deadline itself, so a worker may stall
//! anywhere for as long as it likes — between its dispatch and its stage, inside the stage, or
//! with its `COMMIT` outstanding.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

use interlock_core::decide::{diff, plan_submit, plan_takeover};
use interlock_core::tier::Effective;
use interlock_core::transition::{self, Holding, RecoveryFacts, TierFacts};
use interlock_core::{
    EffectState, Event, Holder, LeaseVerdict, LookupAnswer, Premises, Proposed, Recheck,
    RecoveryPlan, SendAnswer, SubmitPlan, TakeoverPlan, Tier, Via,
};
use serde::Serialize;
use serde_json::json;

use super::spec::{Journal, SEND_TIMEOUT, SETTLE};
use super::walk::{Walk, walk};

/// One rule of the substrate's stage, as the code keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Rule {
    /// A stage reads the marker holding the write lock before anything runs, and answers with
    /// the receipt it holds (`SqliteDb`'s `marker` check, `open()` on PostgreSQL).
    MarkerCheckedFirst,
    /// The marker's key is its table's primary key: a second marker under the key cannot be
    /// written, and the stage that tries fails and rolls back.
    MarkerKeyUnique,
    /// The marker is written in the stage's own transaction, before its `COMMIT`.
    MarkerInTheTransaction,
    /// A stage that took the lock after the send's deadline runs nothing (`stage_end::in_time`,
    /// first check).
    DeadlineCheckedUnderTheLock,
    /// A stage does not send its `COMMIT` once the send's deadline has passed (`in_time`,
    /// second check).
    DeadlineCheckedBeforeCommit,
    /// A lookup reads the marker holding the write lock (the key's lock on PostgreSQL): a stage
    /// under way, or a transaction its dead worker left open, makes it answer unknown.
    LookupUnderTheLock,
    /// A `COMMIT` whose answer is lost is answered unknown, never as a failure.
    LostCommitIsUnknown,
    /// The gate's last look — the lease, then the premises — after the measurement and before
    /// the marker and `COMMIT`.
    LastLookBeforeCommit,
}

impl Rule {
    /// Every rule, in report order.
    pub const ALL: [Rule; 8] = [
        Rule::MarkerCheckedFirst,
        Rule::MarkerKeyUnique,
        Rule::MarkerInTheTransaction,
        Rule::DeadlineCheckedUnderTheLock,
        Rule::DeadlineCheckedBeforeCommit,
        Rule::LookupUnderTheLock,
        Rule::LostCommitIsUnknown,
        Rule::LastLookBeforeCommit,
    ];
}

/// A bug in the stage: one or more of its rules switched off.
#[derive(Clone, Copy, Debug)]
pub struct DbMutant {
    /// Its name in reports.
    pub name: &'static str,
    /// The rules it switches off.
    pub off: &'static [Rule],
    /// `None`: the checker must catch it. `Some(why)`: another layer absorbs it, so it is
    /// expected to survive in these models, and `why` says which (a survivor that is caught
    /// after all is reported as caught).
    pub backed_by: Option<&'static str>,
}

/// The stage's bugs: each rule switched off alone; the deadline's two checks together; and the
/// marker's two guards with the deadline that keeps a late stage from reaching them.
pub const DB_MUTANTS: [DbMutant; 10] = [
    DbMutant {
        name: "stage_skips_the_marker_check",
        off: &[Rule::MarkerCheckedFirst],
        backed_by: Some(
            "in these models no stage begins once a marker is committed while stages keep \
             their deadline and lookups wait for the lock; and one that did would fail on the \
             marker's key",
        ),
    },
    DbMutant {
        name: "marker_key_not_unique",
        off: &[Rule::MarkerKeyUnique],
        backed_by: Some("the marker is checked first, under the lock"),
    },
    DbMutant {
        name: "marker_written_after_the_commit",
        off: &[Rule::MarkerInTheTransaction],
        backed_by: None,
    },
    DbMutant {
        name: "stage_begins_after_its_deadline",
        off: &[Rule::DeadlineCheckedUnderTheLock],
        backed_by: Some("the deadline is checked again before the COMMIT"),
    },
    DbMutant {
        name: "commit_sent_after_the_deadline",
        off: &[Rule::DeadlineCheckedBeforeCommit],
        backed_by: Some(
            "a stage that took the lock before its deadline holds it through its COMMIT, and \
             every lookup waits for the lock",
        ),
    },
    DbMutant {
        name: "stage_ignores_the_deadline",
        off: &[
            Rule::DeadlineCheckedUnderTheLock,
            Rule::DeadlineCheckedBeforeCommit,
        ],
        backed_by: None,
    },
    DbMutant {
        name: "lookup_reads_the_marker_without_the_lock",
        off: &[Rule::LookupUnderTheLock],
        backed_by: None,
    },
    DbMutant {
        name: "lost_commit_answer_taken_as_a_failure",
        off: &[Rule::LostCommitIsUnknown],
        backed_by: Some(
            "the gate looks the marker up before it closes an effect on a refusal, and finds it \
             (the lookup waits for the lock while the COMMIT finishes)",
        ),
    },
    DbMutant {
        name: "no_last_look_before_the_commit",
        off: &[Rule::LastLookBeforeCommit],
        backed_by: None,
    },
    DbMutant {
        name: "late_stage_without_the_marker_check_or_its_key",
        off: &[
            Rule::DeadlineCheckedUnderTheLock,
            Rule::DeadlineCheckedBeforeCommit,
            Rule::MarkerCheckedFirst,
            Rule::MarkerKeyUnique,
        ],
        backed_by: None,
    },
];

/// One configuration of the database-effect model.
#[derive(Clone, Debug)]
pub struct DbConfig {
    /// Name in reports.
    pub name: String,
    /// Workers, each running the same activity's attempts.
    pub workers: u8,
    /// Attempts each worker may start.
    pub attempts: u8,
    /// Crashes in all.
    pub crashes: u8,
    /// `COMMIT` answers lost, in all.
    pub lost_answers: u8,
    /// The lease may be revoked once.
    pub revoke: bool,
    /// The premise may move once.
    pub move_premise: bool,
    /// The clock stops here.
    pub horizon: i64,
    /// Rules switched off (a mutant); empty for the code as it is.
    pub off: Vec<Rule>,
}

impl DbConfig {
    fn keeps(&self, rule: Rule) -> bool {
        !self.off.contains(&rule)
    }
}

/// The properties, in report order.
pub const DB_PROPERTIES: [&str; 5] = [
    "at_most_one_application",
    "rows_committed_only_with_their_marker",
    "committed_in_the_journal_iff_the_marker_exists",
    "no_commit_under_a_lease_revoked_before_its_stage",
    "no_commit_on_a_premise_moved_before_its_stage",
];

/// A send's answer, compactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Ans {
    /// Committed by this stage.
    Done,
    /// The marker was there: committed before.
    Replayed,
    /// Rolled back, with this code.
    Definite(&'static str),
    /// Whether it committed is for the marker to tell.
    Unknown,
}

/// A lookup's answer, compactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Look {
    Found,
    NotFound,
    Unknown,
}

/// An open transaction of a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Txn {
    /// The marker is written in it.
    marker: bool,
    /// `COMMIT` has been sent: the server may commit it even if its worker dies.
    commit_sent: bool,
    /// The lease was live when the stage took the lock.
    lease_live_at_begin: bool,
    /// The premise held when the stage took the lock.
    premise_held_at_begin: bool,
}

/// Who holds the database's write lock (the key's lock on PostgreSQL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum LockHolder {
    /// A worker, in its stage.
    Worker(u8),
    /// A transaction whose worker died, until the server ends it.
    Orphan,
}

/// The team's database.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Db {
    /// The plan's rows committed, counted (capped at 3).
    applied: u8,
    /// The marker row is committed.
    marker: bool,
    /// The write lock and the transaction holding it.
    lock: Option<(LockHolder, Txn)>,
}

/// Where a worker's attempt is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Pc {
    Idle,
    /// About to read the key and act on it.
    Start,
    /// Holds claim `token` after a takeover: about to decide in the journal's transaction.
    Decide {
        token: u64,
        effective: Effective,
        lookup: Option<(Look, i64)>,
    },
    /// About to look the marker up for the recovery.
    Lookup {
        token: u64,
        effective: Effective,
    },
    /// `DISPATCHED` is durable: about to hand the plan to the substrate.
    Send {
        token: u64,
        deadline: i64,
        via: Via,
    },
    /// In the send: waiting for the write lock.
    Begin {
        token: u64,
        until: i64,
        via: Via,
    },
    /// Rows staged and measured: about to judge them and take the last look.
    Judge {
        token: u64,
        until: i64,
        via: Via,
    },
    /// Judged, marker written: about to check the deadline and send `COMMIT`.
    Commit {
        token: u64,
        until: i64,
        via: Via,
    },
    /// `COMMIT` sent: the database commits it.
    Committing {
        token: u64,
        via: Via,
    },
    /// Mutant only: the rows committed, the marker next in a transaction of its own.
    MarkApart {
        token: u64,
        via: Via,
    },
    /// Answered: about to look up if the answer needs it.
    AfterSend {
        token: u64,
        via: Via,
        answer: Ans,
    },
    /// About to record the answer.
    Record {
        token: u64,
        via: Via,
        answer: Ans,
        lookup: Option<(Look, i64)>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Worker {
    pc: Pc,
    attempt: u8,
    /// The liveness lock it holds (dropped when it crashes or its attempt ends).
    lock: Option<u64>,
}

/// The whole world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DbState {
    now: i64,
    journal: Journal,
    workers: Vec<Worker>,
    db: Db,
    revoked: bool,
    premise_moved: bool,
    crashes_left: u8,
    lost_left: u8,
    revokes_left: u8,
    moves_left: u8,
}

/// A move of the world.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    Step(u8),
    /// The database commits worker `i`'s transaction, and the answer is lost.
    CommitUnanswered(u8),
    Crash(u8),
    /// The server ends a dead worker's transaction: commits it (if its `COMMIT` was sent) or
    /// rolls it back.
    EndOrphan(bool),
    Revoke,
    MovePremise,
    #[default]
    Tick,
}

const PAYLOAD_HASH: &str = "p0";

fn proposal() -> Proposed {
    Proposed {
        given_hash: None,
        rules: Vec::new(),
        by: None,
        payload: json!({ "plan": "cancel o1, credit c1" }),
        payload_hash: PAYLOAD_HASH.into(),
        premises: premises(true),
        lease: "l".into(),
        target: "db".into(),
        tier: Tier::Two.into(),
        window_ms: None,
        labels: BTreeMap::default(),
    }
}

fn premises(held: bool) -> Premises {
    [(
        "order_status".to_owned(),
        json!(if held { "open" } else { "cancelled" }),
    )]
    .into_iter()
    .collect()
}

fn holding(worker: u8, attempt: u8, now: i64) -> Holding {
    Holding {
        holder: Holder {
            caller: None,
            host: "h".into(),
            pid: u32::from(worker),
            attempt: attempt.to_string(),
        },
        deadline_ms: now + SEND_TIMEOUT + SETTLE,
        now_ms: now,
        max_read_age_ms: SETTLE,
    }
}

fn recheck(s: &DbState) -> Recheck {
    let now = premises(!s.premise_moved);
    Recheck {
        broken: Vec::new(),
        lease: if s.revoked {
            LeaseVerdict::Dead {
                reason: "revoked".into(),
            }
        } else {
            LeaseVerdict::Live
        },
        changes: diff(&premises(true), &now),
        premises_now: now,
        premise_error: None,
        read_at_ms: Some(s.now),
        budgets: Vec::new(),
    }
}

const TIER: TierFacts = TierFacts {
    bound: Tier::Two,
    window_ms: None,
    margin_ms: 0,
    has_lookup: true,
};

fn receipt() -> serde_json::Value {
    json!({ "plan_hash": "h", "diff_hash": "d" })
}

fn send_answer(a: Ans) -> SendAnswer {
    match a {
        Ans::Done => SendAnswer::Done(receipt()),
        Ans::Replayed => SendAnswer::Replayed(receipt()),
        Ans::Definite(code) => SendAnswer::Definite {
            code: code.into(),
            message: code.into(),
        },
        Ans::Unknown => SendAnswer::Unknown("the COMMIT's answer was lost".into()),
    }
}

fn lookup_answer(l: Look) -> LookupAnswer {
    match l {
        Look::Found => LookupAnswer::Found(receipt()),
        Look::NotFound => LookupAnswer::NotFound,
        Look::Unknown => LookupAnswer::Unknown("a stage holds the key's lock".into()),
    }
}

impl DbState {
    fn initial(cfg: &DbConfig) -> Self {
        Self {
            now: 0,
            journal: Journal::default(),
            workers: vec![
                Worker {
                    pc: Pc::Idle,
                    attempt: 0,
                    lock: None,
                };
                usize::from(cfg.workers)
            ],
            db: Db::default(),
            revoked: false,
            premise_moved: false,
            crashes_left: cfg.crashes,
            lost_left: cfg.lost_answers,
            revokes_left: u8::from(cfg.revoke),
            moves_left: u8::from(cfg.move_premise),
        }
    }

    fn fingerprint(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }

    fn lock_free(&self, token: u64) -> bool {
        !self.workers.iter().any(|w| w.lock == Some(token))
    }

    /// What a lookup by worker `i` finds now.
    fn look(&self, cfg: &DbConfig, i: u8) -> Look {
        let busy = self
            .db
            .lock
            .is_some_and(|(h, _)| h != LockHolder::Worker(i));
        if busy && cfg.keeps(Rule::LookupUnderTheLock) {
            Look::Unknown
        } else if self.db.marker {
            Look::Found
        } else {
            Look::NotFound
        }
    }

    /// Commit the open transaction; the breach it makes, if any.
    fn commit(&mut self) -> Option<&'static str> {
        let (_, txn) = self.db.lock.take()?;
        self.db.applied = (self.db.applied + 1).min(3);
        self.db.marker |= txn.marker;
        if !txn.lease_live_at_begin {
            Some(DB_PROPERTIES[3])
        } else if !txn.premise_held_at_begin {
            Some(DB_PROPERTIES[4])
        } else {
            None
        }
    }

    fn resolution(&self) -> Option<&'static str> {
        match self.journal.state() {
            EffectState::Resolved { resolution, .. } => Some(resolution.kind()),
            _ => None,
        }
    }
}

fn actions(cfg: &DbConfig, s: &DbState) -> Vec<Action> {
    let mut out = Vec::new();
    for (i, w) in s.workers.iter().enumerate() {
        let i = u8::try_from(i).unwrap_or(u8::MAX);
        let may_step = match &w.pc {
            Pc::Idle => w.attempt < cfg.attempts,
            // Waiting for the lock: it moves when the lock is free, or gives up at its deadline.
            Pc::Begin { until, .. } => s.db.lock.is_none() || s.now >= *until,
            _ => true,
        };
        if may_step {
            out.push(Action::Step(i));
        }
        if matches!(w.pc, Pc::Committing { .. }) && s.lost_left > 0 {
            out.push(Action::CommitUnanswered(i));
        }
        if s.crashes_left > 0 && w.pc != Pc::Idle {
            out.push(Action::Crash(i));
        }
    }
    if let Some((LockHolder::Orphan, txn)) = s.db.lock {
        out.push(Action::EndOrphan(false));
        if txn.commit_sent {
            out.push(Action::EndOrphan(true));
        }
    }
    if s.revokes_left > 0 {
        out.push(Action::Revoke);
    }
    if s.moves_left > 0 {
        out.push(Action::MovePremise);
    }
    if s.now < cfg.horizon {
        out.push(Action::Tick);
    }
    out
}

fn apply(cfg: &DbConfig, s: &DbState, action: Action) -> (DbState, Option<&'static str>) {
    let mut n = s.clone();
    let mut breach = None;
    match action {
        Action::Tick => n.now += 1,
        Action::Revoke => {
            n.revokes_left -= 1;
            n.revoked = true;
        }
        Action::MovePremise => {
            n.moves_left -= 1;
            n.premise_moved = true;
        }
        Action::Crash(i) => {
            n.crashes_left -= 1;
            let w = &mut n.workers[usize::from(i)];
            w.pc = Pc::Idle;
            w.lock = None;
            // Its transaction stays open on the server until the server ends it.
            if let Some((h, _)) = &mut n.db.lock
                && *h == LockHolder::Worker(i)
            {
                *h = LockHolder::Orphan;
            }
        }
        Action::EndOrphan(commit) => {
            if commit {
                breach = n.commit();
            } else {
                n.db.lock = None;
            }
        }
        Action::CommitUnanswered(i) => {
            let Pc::Committing { token, via } = n.workers[usize::from(i)].pc else {
                return (n, None);
            };
            n.lost_left -= 1;
            breach = n.commit();
            let answer = if cfg.keeps(Rule::LostCommitIsUnknown) {
                Ans::Unknown
            } else {
                Ans::Definite("database_error")
            };
            n.workers[usize::from(i)].pc = Pc::AfterSend { token, via, answer };
        }
        Action::Step(i) => breach = step(cfg, &mut n, i),
    }
    (n, breach)
}

/// The stage's transaction ends without committing: its worker is answered `answer`.
fn roll_back(n: &mut DbState, token: u64, via: Via, answer: Ans) -> Pc {
    n.db.lock = None;
    Pc::AfterSend { token, via, answer }
}

#[allow(clippy::too_many_lines)] // one arm per step of the shell, in the order they run
fn step(cfg: &DbConfig, n: &mut DbState, i: u8) -> Option<&'static str> {
    let idx = usize::from(i);
    let now = n.now;
    let attempt = n.workers[idx].attempt;
    let hold = holding(i, attempt, now);
    let me = hold.holder.clone();
    let mut breach = None;
    let pc = n.workers[idx].pc.clone();
    let next = match pc {
        Pc::Idle => {
            n.workers[idx].attempt += 1;
            Pc::Start
        }
        Pc::Start => start(n, i),
        Pc::Lookup { token, effective } => Pc::Decide {
            token,
            effective,
            lookup: Some((n.look(cfg, i), now)),
        },
        Pc::Decide {
            token,
            effective,
            lookup,
        } => {
            let facts = RecoveryFacts {
                tier: TIER,
                effective_at_takeover: effective,
                recheck: recheck(n),
                transient: false,
                has_lookup: true,
                now_ms: now,
            };
            let found = lookup.map(|(l, at)| (lookup_answer(l), at));
            let state = n.journal.state();
            let (events, plan) = transition::recover(
                &state,
                token,
                &facts,
                found.as_ref().map(|(l, at)| (l, *at)),
                &[],
                &hold,
            );
            n.journal.append(now, events);
            match plan {
                Some(RecoveryPlan::Lookup) if lookup.is_none() => Pc::Lookup { token, effective },
                Some(RecoveryPlan::Resend(via)) => Pc::Send {
                    token,
                    deadline: hold.deadline_ms,
                    via,
                },
                Some(RecoveryPlan::Reread { .. }) => Pc::Decide {
                    token,
                    effective,
                    lookup,
                },
                _ => Pc::Idle,
            }
        }
        Pc::Send {
            token,
            deadline,
            via,
        } => {
            let state = n.journal.state();
            if transition::may_send(&state, token, &me) && now < deadline - SETTLE {
                Pc::Begin {
                    token,
                    until: deadline - SETTLE,
                    via,
                }
            } else {
                n.journal
                    .append(now, transition::withdraw(&state, token, &me, "not sent"));
                Pc::Idle
            }
        }
        Pc::Begin { token, until, via } => {
            if n.db.lock.is_some() {
                // The lock wait ran out at the deadline: the stage never began.
                Pc::AfterSend {
                    token,
                    via,
                    answer: Ans::Unknown,
                }
            } else {
                n.db.lock = Some((
                    LockHolder::Worker(i),
                    Txn {
                        marker: false,
                        commit_sent: false,
                        lease_live_at_begin: !n.revoked,
                        premise_held_at_begin: !n.premise_moved,
                    },
                ));
                if cfg.keeps(Rule::DeadlineCheckedUnderTheLock) && now >= until {
                    roll_back(n, token, via, Ans::Definite("deadline"))
                } else if cfg.keeps(Rule::MarkerCheckedFirst) && n.db.marker {
                    roll_back(n, token, via, Ans::Replayed)
                } else {
                    Pc::Judge { token, until, via }
                }
            }
        }
        Pc::Judge { token, until, via } => {
            if cfg.keeps(Rule::LastLookBeforeCommit) && n.revoked {
                roll_back(n, token, via, Ans::Definite("lease_dead"))
            } else if cfg.keeps(Rule::LastLookBeforeCommit) && n.premise_moved {
                roll_back(n, token, via, Ans::Definite("premise_moved"))
            } else if cfg.keeps(Rule::MarkerKeyUnique)
                && cfg.keeps(Rule::MarkerInTheTransaction)
                && n.db.marker
            {
                // The marker's key is the table's primary key: the insert fails, the database
                // fails the stage, and it is rolled back.
                roll_back(n, token, via, Ans::Definite("database_error"))
            } else {
                if let Some((_, txn)) = &mut n.db.lock {
                    txn.marker = cfg.keeps(Rule::MarkerInTheTransaction);
                }
                Pc::Commit { token, until, via }
            }
        }
        Pc::Commit { token, until, via } => {
            if cfg.keeps(Rule::DeadlineCheckedBeforeCommit) && now >= until {
                roll_back(n, token, via, Ans::Definite("deadline"))
            } else {
                if let Some((_, txn)) = &mut n.db.lock {
                    txn.commit_sent = true;
                }
                Pc::Committing { token, via }
            }
        }
        Pc::Committing { token, via } => {
            breach = n.commit();
            if cfg.keeps(Rule::MarkerInTheTransaction) {
                Pc::AfterSend {
                    token,
                    via,
                    answer: Ans::Done,
                }
            } else {
                Pc::MarkApart { token, via }
            }
        }
        Pc::MarkApart { token, via } => {
            n.db.marker = true;
            Pc::AfterSend {
                token,
                via,
                answer: Ans::Done,
            }
        }
        Pc::AfterSend { token, via, answer } => {
            let lookup = transition::wants_lookup(&send_answer(answer), via, true)
                .then(|| (n.look(cfg, i), now));
            Pc::Record {
                token,
                via,
                answer,
                lookup,
            }
        }
        Pc::Record {
            token,
            via,
            answer,
            lookup,
        } => {
            let state = n.journal.state();
            let found = lookup.map(|(l, at)| (lookup_answer(l), at));
            let events = transition::record_answer(
                &state,
                token,
                &send_answer(answer),
                via,
                true,
                now,
                found.as_ref().map(|(l, at)| (l, *at)),
            );
            n.journal.append(now, events);
            Pc::Idle
        }
    };
    let w = &mut n.workers[idx];
    if next == Pc::Idle {
        w.lock = None;
    }
    w.pc = next;
    breach
}

/// A read of the key and what it leads to: a first dispatch, a takeover, or nothing.
fn start(n: &mut DbState, i: u8) -> Pc {
    let idx = usize::from(i);
    let now = n.now;
    let hold = holding(i, n.workers[idx].attempt, now);
    let state = n.journal.state();
    match plan_submit(&state, PAYLOAD_HASH) {
        SubmitPlan::Fresh => {
            let events = transition::propose_and_dispatch(
                &state,
                &proposal(),
                &recheck(n),
                json!({}),
                None,
                &[],
                &hold,
            );
            let dispatched = matches!(events.last(), Some(Event::Dispatched(_)));
            n.journal.append(now, events);
            if dispatched {
                n.workers[idx].lock = Some(1);
                Pc::Send {
                    token: 1,
                    deadline: hold.deadline_ms,
                    via: Via::FirstSend,
                }
            } else {
                Pc::Idle
            }
        }
        SubmitPlan::Recover(claim) => {
            let EffectState::InFlight { first, .. } = &state else {
                return Pc::Idle;
            };
            let effective = TIER.effective(first, &claim, now);
            match plan_takeover(&claim, now, n.lock_free(claim.token), effective) {
                TakeoverPlan::Wait { .. } => Pc::Idle,
                TakeoverPlan::Take(reason) => {
                    let events = transition::takeover(&state, &claim, reason, now, SETTLE, &hold);
                    if events.is_empty() {
                        return Pc::Idle;
                    }
                    n.workers[idx].lock = Some(claim.token + 1);
                    n.journal.append(now, events);
                    Pc::Decide {
                        token: claim.token + 1,
                        effective,
                        lookup: None,
                    }
                }
            }
        }
        SubmitPlan::Continue | SubmitPlan::Replay(_) | SubmitPlan::Conflict { .. } => Pc::Idle,
    }
}

/// The state properties broken in `s`.
fn broken(s: &DbState) -> Vec<&'static str> {
    let mut out = Vec::new();
    if s.db.applied > 1 {
        out.push(DB_PROPERTIES[0]);
    }
    // Checked where no worker is between its rows' commit and a marker written apart (the
    // mutant's own window, which a crash there makes permanent).
    let apart = s
        .workers
        .iter()
        .any(|w| matches!(w.pc, Pc::MarkApart { .. }));
    if !apart && (s.db.applied > 0) != s.db.marker {
        out.push(DB_PROPERTIES[1]);
    }
    let agrees = match s.resolution() {
        Some("COMMITTED") => s.db.marker,
        Some("FAILED" | "REFUSED") => !s.db.marker && s.db.applied == 0,
        _ => true,
    };
    if !agrees {
        out.push(DB_PROPERTIES[2]);
    }
    out
}

/// One configuration's result.
#[derive(Clone, Debug, Serialize)]
pub struct DbReport {
    /// Configuration name.
    pub name: String,
    /// Workers.
    pub workers: u8,
    /// The rules switched off.
    pub off: Vec<Rule>,
    /// Distinct states reached.
    pub states: u64,
    /// Longest shortest path from the start.
    pub max_depth: u32,
    /// Every reachable state was explored.
    pub complete: bool,
    /// How the effect stood in the states where every worker had stopped: resolution → states.
    pub endings: BTreeMap<String, u64>,
    /// Property name → `holds` or `counterexample`.
    pub properties: BTreeMap<String, String>,
    /// Property name → the trace that breaks it.
    #[serde(skip)]
    pub traces: BTreeMap<String, Vec<String>>,
    /// Wall time.
    #[serde(skip)]
    pub seconds: f64,
}

impl DbReport {
    /// The first property with a counterexample.
    pub fn first_broken(&self) -> Option<&str> {
        DB_PROPERTIES
            .iter()
            .find(|p| self.properties.get(**p).map(String::as_str) == Some("counterexample"))
            .copied()
    }
}

impl Walk for DbConfig {
    type State = DbState;
    type Action = Action;

    fn start(&self) -> DbState {
        DbState::initial(self)
    }

    fn fingerprint(&self, s: &DbState) -> u64 {
        s.fingerprint()
    }

    fn moves(&self, s: &DbState) -> Vec<Action> {
        actions(self, s)
    }

    fn step(&self, s: &DbState, a: Action) -> (DbState, Option<&'static str>) {
        apply(self, s, a)
    }

    fn broken(&self, s: &DbState) -> Vec<&'static str> {
        broken(s)
    }

    fn tell(&self, path: &[Action]) -> Vec<String> {
        let mut s = DbState::initial(self);
        let mut lines = Vec::with_capacity(path.len() + 1);
        for action in path {
            let (next, _) = apply(self, &s, *action);
            lines.push(describe(&s, *action, &next));
            s = next;
        }
        lines.push(format!("now: {}", summary(&s)));
        lines
    }
}

/// Explore every reachable state of `cfg` breadth-first, checking the properties on each state
/// and at each commit; with `stop_early`, stop at the first counterexample.
pub fn explore_db(cfg: &DbConfig, stop_early: bool) -> DbReport {
    let started = Instant::now();
    let mut endings: BTreeMap<String, u64> = BTreeMap::new();
    let walked = walk(cfg, stop_early, |s| {
        if s.workers.iter().all(|w| w.pc == Pc::Idle) && s.db.lock.is_none() {
            *endings
                .entry(s.resolution().unwrap_or("in flight").to_owned())
                .or_default() += 1;
        }
    });
    DbReport {
        name: cfg.name.clone(),
        workers: cfg.workers,
        off: cfg.off.clone(),
        states: walked.states,
        max_depth: walked.max_depth,
        complete: walked.complete,
        endings,
        properties: walked.verdicts(&DB_PROPERTIES),
        traces: walked.traces,
        seconds: started.elapsed().as_secs_f64(),
    }
}

fn describe(before: &DbState, action: Action, after: &DbState) -> String {
    let what = match action {
        Action::Tick => "the clock ticks".to_owned(),
        Action::Revoke => "the lease is revoked".to_owned(),
        Action::MovePremise => "the premise moves".to_owned(),
        Action::Crash(i) => format!("worker {i} crashes"),
        Action::EndOrphan(true) => "the server commits the dead worker's transaction".to_owned(),
        Action::EndOrphan(false) => {
            "the server rolls the dead worker's transaction back".to_owned()
        }
        Action::CommitUnanswered(i) => {
            format!("the database commits worker {i}'s transaction; the answer is lost")
        }
        Action::Step(i) => {
            format!(
                "worker {i} steps ({:?}){}",
                before.workers[usize::from(i)].pc,
                after.journal.writes_since(before.journal.0.len())
            )
        }
    };
    format!("t={} {what}", before.now)
}

fn summary(s: &DbState) -> String {
    format!(
        "journal: {}; database: applied {} time(s), marker {}",
        s.journal.label(),
        s.db.applied,
        if s.db.marker { "present" } else { "absent" }
    )
}

/// The configurations: two workers retrying one plan, with a crash (its transaction left to the
/// server) and one kind of fault besides: a lost `COMMIT` answer, a revocation, a premise that
/// moves, a second crash.
pub fn db_models(quick: bool) -> Vec<DbConfig> {
    let base = |name: &str| DbConfig {
        name: name.into(),
        workers: 2,
        attempts: 2,
        crashes: 1,
        lost_answers: 0,
        revoke: false,
        move_premise: false,
        horizon: if quick { 4 } else { 6 },
        off: Vec::new(),
    };
    let mut all = vec![
        DbConfig {
            lost_answers: 1,
            ..base("db, 2 workers, a crash, a lost COMMIT answer")
        },
        DbConfig {
            revoke: true,
            ..base("db, 2 workers, a crash, a revocation")
        },
        DbConfig {
            move_premise: true,
            ..base("db, 2 workers, a crash, a premise moves")
        },
        DbConfig {
            crashes: 2,
            ..base("db, 2 workers, two crashes")
        },
    ];
    if quick {
        // In CI, the two that catch every bug: the premise model mirrors the revocation model
        // (the last look refuses both alike), and the second crash adds no kind of fault.
        all.truncate(2);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::{DB_MUTANTS, Rule};

    #[test]
    fn every_rule_of_the_stage_has_a_mutant_that_switches_it_off_alone() {
        for rule in Rule::ALL {
            assert!(
                DB_MUTANTS.iter().any(|m| m.off == [rule]),
                "no mutant switches off {rule:?} alone"
            );
        }
    }
}
