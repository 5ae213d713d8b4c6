//! The simulated fault matrix: every case against every system, judged from the payments
//! service's own records. Deterministic (a manual clock, scripted faults), so its tables are
//! committed and CI fails when they drift from the code.

use std::time::Duration;

use interlock::Tier;
use interlock_testkit::faults::Stall;
use serde::Serialize;

use crate::baselines::{Baseline, Kind};
use crate::cases::Case;
use crate::gated::{Gated, SEND_TIMEOUT, SETTLE};
use crate::system::{Answer, Attempt, Fault, Says, System};
use crate::world::{AMOUNT, PAYMENT, REDECIDED, UNRELATED, World};

/// Attempts a system gets per request (Temporal-style retries).
pub const MAX_ATTEMPTS: u32 = 12;
/// The retry interval, on the manual clock.
const RETRY_MS: i64 = 1_000;

/// The columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// A baseline.
    Baseline(Kind),
    /// The gate at a tier.
    Gate(Tier),
}

impl Column {
    /// Every column, in table order.
    pub const ALL: [Column; 6] = [
        Column::Baseline(Kind::Naive),
        Column::Baseline(Kind::KeyOnly),
        Column::Baseline(Kind::Replay),
        Column::Gate(Tier::One),
        Column::Gate(Tier::Two),
        Column::Gate(Tier::Three),
    ];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Column::Baseline(Kind::Naive) => "naive",
            Column::Baseline(Kind::KeyOnly) => "key_only",
            Column::Baseline(Kind::Replay) => "replay",
            Column::Gate(Tier::One) => "gate_t1",
            Column::Gate(Tier::Two) => "gate_t2",
            Column::Gate(Tier::Three) => "gate_t3",
        }
    }
}

/// One judged cell.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Cell {
    /// Column name.
    pub system: String,
    /// Row name.
    pub case: String,
    /// The answers given, in order (the approved request's, then any re-decision's).
    pub outcome: String,
    /// Total refunded on the payment, from the service's records.
    pub refunded_cents: i64,
    /// What the payment should show.
    pub wanted_cents: i64,
    /// What the approved request's answer claims.
    pub says: Says,
    /// Whether that claim matches the records.
    pub answer_agrees: bool,
    /// Money right (or none of ours moved, honestly reported as ambiguous or refused with a
    /// repair), and the answer agrees with the records.
    pub held: bool,
    /// Held, but the refund that should have happened did not (availability, not safety).
    pub short: bool,
    /// Attempts the approved request took.
    pub attempts: u32,
}

/// Run every case against every column.
pub fn run_all() -> anyhow::Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for case in Case::ALL {
        for col in Column::ALL {
            cells.push(run_cell(case, col)?);
        }
    }
    Ok(cells)
}

/// Run one cell in a fresh world.
pub fn run_cell(case: Case, col: Column) -> anyhow::Result<Cell> {
    let world = match col {
        Column::Baseline(_) => World::new(Tier::One),
        Column::Gate(t) => World::new(t),
    };
    let sys: Box<dyn System> = match col {
        Column::Baseline(k) => Box::new(Baseline::new(k, world.sim.clone())),
        Column::Gate(t) => Box::new(Gated::new(t, &world)?),
    };
    let (answers, attempts) = script(case, sys.as_ref(), &world)?;
    Ok(judge(case, col, &world, &answers, attempts))
}

struct Driver<'a> {
    sys: &'a dyn System,
    world: &'a World,
}

impl Driver<'_> {
    /// Run attempts from `first` until a final answer; `faults[i]` goes into the attempt
    /// numbered `first + i`; `outage` runs once after the first crash.
    fn drive(
        &self,
        effect: &interlock::Effect,
        first: u32,
        faults: &[Vec<Fault>],
        mut outage: impl FnMut(),
    ) -> anyhow::Result<(Answer, u32)> {
        let mut last: Option<Answer> = None;
        let mut crashed = false;
        for n in first..first + MAX_ATTEMPTS {
            let f = faults
                .get((n - first) as usize)
                .cloned()
                .unwrap_or_default();
            let mut asked = 0;
            match self.sys.attempt(effect, n, &f)? {
                Attempt::Answered(a) if a.is_final => return Ok((a, n)),
                Attempt::Answered(a) => {
                    asked = a.retry_after_ms.unwrap_or(0);
                    last = Some(a);
                }
                Attempt::Crashed if !crashed => {
                    crashed = true;
                    outage();
                }
                Attempt::Crashed => {}
            }
            // Temporal's retry interval, or the next-retry delay the attempt asked for.
            self.world.clock.advance(RETRY_MS.max(asked));
        }
        let gave_up = last.unwrap_or(Answer {
            label: "GAVE_UP".into(),
            says: Says::Unknown,
            is_final: true,
            repair_offered: false,
            retry_after_ms: None,
        });
        Ok((gave_up, first + MAX_ATTEMPTS - 1))
    }
}

fn script(case: Case, sys: &dyn System, w: &World) -> anyhow::Result<(Vec<Answer>, u32)> {
    let d = Driver { sys, world: w };
    let e20 = w.decide(AMOUNT)?;
    let nothing = || {};
    let crash_before = vec![vec![Fault::CrashBeforeSend]];
    let crash_after = vec![vec![Fault::CrashAfterApply]];
    let one = |r: (Answer, u32)| (vec![r.0], r.1);
    Ok(match case {
        Case::HappyPath => one(d.drive(&e20, 1, &[], nothing)?),
        Case::CrashBeforeSend => one(d.drive(&e20, 1, &crash_before, nothing)?),
        Case::CrashBeforeAck => one(d.drive(&e20, 1, &crash_after, nothing)?),
        Case::DuplicateSubmit => {
            // The answer that counts is the duplicate's: it must not move money again.
            let (a1, _) = d.drive(&e20, 1, &[], nothing)?;
            let (a2, n) = d.drive(&e20, 1, &[], nothing)?;
            (vec![a1, a2], n)
        }
        Case::ModelRedecides | Case::SameRequestDifferentAmount => {
            let faults = if case == Case::ModelRedecides {
                crash_after
            } else {
                Vec::new()
            };
            let (a20, n) = d.drive(&e20, 1, &faults, nothing)?;
            let e30 = w.decide(REDECIDED)?;
            let (a30, _) = d.drive(&e30, 1, &[], nothing)?;
            (vec![a20, a30], n)
        }
        Case::LeaseRevokedBeforeSend => {
            sys.revoke_lease()?;
            one(d.drive(&e20, 1, &[], nothing)?)
        }
        Case::OrderIneligible => {
            w.sim.set_eligible(PAYMENT, false);
            one(d.drive(&e20, 1, &[], nothing)?)
        }
        Case::HandRefundDuringOutage => one(d.drive(&e20, 1, &crash_before, || {
            w.sim.hand_refund(PAYMENT, AMOUNT)
        })?),
        Case::LeaseRevokedDuringOutage => {
            let mut err = None;
            let r = d.drive(&e20, 1, &crash_before, || err = sys.revoke_lease().err())?;
            if let Some(e) = err {
                return Err(e);
            }
            one(r)
        }
        Case::UnrelatedRefundDuringOutage => one(d.drive(&e20, 1, &crash_before, || {
            w.sim.hand_refund(PAYMENT, UNRELATED)
        })?),
        Case::RecoveryAfterWindow => {
            one(d.drive(&e20, 1, &crash_after, || w.clock.advance(25 * 3_600_000))?)
        }
        Case::ZombieAttempt => {
            // Attempt 1's request is held inside the service; attempt 2 starts meanwhile (a
            // heartbeat timeout). Attempt 1's own answer is ignored, as Temporal ignores a
            // timed-out attempt's completion.
            let stall = Stall::new();
            w.sim.hold_next(stall.clone());
            overlap(&d, &e20, Vec::new(), &stall, 0)?
        }
        Case::SlowSenderPastDeadline => {
            // Attempt 1 stalls before sending, alive, until after its deadline; the retry runs;
            // then attempt 1 wakes up and tries to send.
            let stall = Stall::new();
            let past = i64::try_from((SEND_TIMEOUT + SETTLE + Duration::from_secs(1)).as_millis())?;
            overlap(
                &d,
                &e20,
                vec![Fault::StallBeforeSend(stall.clone())],
                &stall,
                past,
            )?
        }
        Case::StallAfterPremiseReadHandRefund => {
            // Attempt 1 reads the premises (they hold) and stalls before the transaction that
            // dispatches on them; support refunds the $20 by hand, and the clock moves past the
            // age a premise read may have at the dispatch (GateConfig::premise_max_age, by
            // default the settle margin); then attempt 1 goes on. No other attempt runs.
            let stall = Stall::new();
            let past = i64::try_from((SETTLE + Duration::from_secs(1)).as_millis())?;
            stalled(
                &d,
                &e20,
                vec![Fault::StallAfterPremiseRead(stall.clone())],
                &stall,
                past,
                || w.sim.hand_refund(PAYMENT, AMOUNT),
            )?
        }
        Case::RecoveryKilledMidResend => {
            // Attempt 1 dies before sending; the first recovery attempt that sends dies after the
            // service applied its resend; then recovery runs again.
            let mut n = 1;
            let mut faults = vec![Fault::CrashBeforeSend];
            loop {
                let asked = match sys.attempt(&e20, n, &faults)? {
                    Attempt::Answered(a) if a.is_final => return Ok((vec![a], n)),
                    Attempt::Crashed if n > 1 => break,
                    _ if n >= MAX_ATTEMPTS => break,
                    Attempt::Answered(a) => a.retry_after_ms.unwrap_or(0),
                    Attempt::Crashed => 0,
                };
                faults = vec![Fault::CrashAfterApply];
                n += 1;
                w.clock.advance(RETRY_MS.max(asked));
            }
            w.clock.advance(RETRY_MS);
            one(d.drive(&e20, n + 1, &[], nothing)?)
        }
        Case::ServerErrorAfterApply => {
            w.sim.error_after_apply(1);
            one(d.drive(&e20, 1, &[], nothing)?)
        }
        Case::Definite4xx => {
            w.sim.set_disputed(PAYMENT, true);
            one(d.drive(&e20, 1, &[], nothing)?)
        }
    })
}

/// Attempt 1 runs in its own thread with `faults` and stalls at `stall`; meanwhile the clock
/// moves by `advance_ms` and attempts 2… run until a final answer; then attempt 1 is released.
fn overlap(
    d: &Driver<'_>,
    effect: &interlock::Effect,
    faults: Vec<Fault>,
    stall: &std::sync::Arc<Stall>,
    advance_ms: i64,
) -> anyhow::Result<(Vec<Answer>, u32)> {
    std::thread::scope(|s| {
        let zombie = s.spawn(|| d.sys.attempt(effect, 1, &faults));
        stall.wait_reached();
        d.world.clock.advance(advance_ms);
        // Attempt 2 runs while attempt 1 is still stalled; whatever it answers, attempt 1 is
        // then released, and any retries follow.
        let a2 = d.sys.attempt(effect, 2, &[]);
        stall.release();
        let a1 = zombie
            .join()
            .map_err(|_| anyhow::anyhow!("attempt 1 panicked"))??;
        let _ = a1;
        match a2? {
            Attempt::Answered(a) if a.is_final => Ok((vec![a], 2)),
            _ => {
                d.world.clock.advance(RETRY_MS);
                let (a, n) = d.drive(effect, 3, &[], || {})?;
                Ok((vec![a], n))
            }
        }
    })
}

/// Attempt 1 runs in its own thread with `faults` and stalls at `stall`; meanwhile `during`
/// changes the world and the clock moves by `advance_ms`; then attempt 1 goes on, and retries
/// follow until a final answer.
fn stalled(
    d: &Driver<'_>,
    effect: &interlock::Effect,
    faults: Vec<Fault>,
    stall: &std::sync::Arc<Stall>,
    advance_ms: i64,
    during: impl FnOnce(),
) -> anyhow::Result<(Vec<Answer>, u32)> {
    let a1 = std::thread::scope(|s| {
        let first = s.spawn(|| d.sys.attempt(effect, 1, &faults));
        stall.wait_reached();
        during();
        d.world.clock.advance(advance_ms);
        stall.release();
        first
            .join()
            .map_err(|_| anyhow::anyhow!("attempt 1 panicked"))?
    })?;
    match a1 {
        Attempt::Answered(a) if a.is_final => Ok((vec![a], 1)),
        _ => {
            d.world.clock.advance(RETRY_MS);
            let (a, n) = d.drive(effect, 2, &[], || {})?;
            Ok((vec![a], n))
        }
    }
}

fn judge(case: Case, col: Column, w: &World, answers: &[Answer], attempts: u32) -> Cell {
    let refunded = w.refunded();
    let wanted = case.wanted_cents();
    let ours = refunded - case.others_cents();
    // The approved request's answer: the duplicate's in a duplicate delivery, otherwise the
    // first (a re-decision that follows is judged by the money alone: no $30 may land).
    let main = if case == Case::DuplicateSubmit {
        &answers[answers.len() - 1]
    } else {
        &answers[0]
    };
    let answer_agrees = match main.says {
        Says::Done => ours > 0,
        Says::NotDone => ours == 0,
        Says::Unknown => true,
    };
    let honest_short = main.label == "AMBIGUOUS" || main.repair_offered;
    let short = refunded != wanted && ours == 0 && honest_short;
    let money_ok = refunded == wanted || short;
    Cell {
        system: col.name().into(),
        case: case.name().into(),
        outcome: answers
            .iter()
            .map(|a| a.label.as_str())
            .collect::<Vec<_>>()
            .join(" + "),
        refunded_cents: refunded,
        wanted_cents: wanted,
        says: main.says,
        answer_agrees,
        held: money_ok && answer_agrees,
        short,
        attempts,
    }
}

/// The matrix as a Markdown table (one row per case, one column per system).
pub fn render_markdown(cells: &[Cell]) -> String {
    let mut out = String::from(
        "# Simulated fault matrix\n\nRegenerated by `cargo run -p interlock-tests --bin fault-matrix`; \
         CI fails if this file drifts from the code.\n\nWorld: $100 paid on `pi_881`, one $20 refund \
         approved under lease `case-4471`. Each cell: the answer(s) given · total refunded per the \
         payments service's own records · ✅ held, ⚠️ held but the refund did not happen (honestly \
         reported), ❌ violated. Baselines get the tier-1 (Stripe-like) service; the gate columns get \
         the service at their tier.\n\n",
    );
    out.push_str("| case | wanted |");
    for c in Column::ALL {
        out.push_str(&format!(" {} |", c.name()));
    }
    out.push_str("\n|---|---|");
    for _ in Column::ALL {
        out.push_str("---|");
    }
    out.push('\n');
    for case in Case::ALL {
        out.push_str(&format!(
            "| {} | ${} |",
            case.name(),
            dollars(case.wanted_cents())
        ));
        for col in Column::ALL {
            let cell = cells
                .iter()
                .find(|c| c.case == case.name() && c.system == col.name());
            match cell {
                Some(c) => {
                    let mark = if !c.held {
                        "❌"
                    } else if c.short {
                        "⚠️"
                    } else {
                        "✅"
                    };
                    let disagree = if c.answer_agrees {
                        ""
                    } else {
                        " (answer contradicts records)"
                    };
                    out.push_str(&format!(
                        " {} ${} {mark}{disagree} |",
                        c.outcome,
                        dollars(c.refunded_cents)
                    ));
                }
                None => out.push_str(" – |"),
            }
        }
        out.push('\n');
    }
    out.push_str("\n| system | held | of |\n|---|---|---|\n");
    for col in Column::ALL {
        let mine: Vec<_> = cells.iter().filter(|c| c.system == col.name()).collect();
        let held = mine.iter().filter(|c| c.held).count();
        out.push_str(&format!("| {} | {held} | {} |\n", col.name(), mine.len()));
    }
    out
}

fn dollars(cents: i64) -> String {
    if cents % 100 == 0 {
        format!("{}", cents / 100)
    } else {
        format!("{}.{:02}", cents / 100, cents % 100)
    }
}
