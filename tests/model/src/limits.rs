//! Limits across keys as a transition system. Several keys, one worker each, dispatch under one
//! lease that allows a number of uses or a total; every step of a worker is the gate shell's
//! (the dispatch transaction, the send, recording the answer, taking over after a crash, the
//! lookup and the recovery step), and every decision in it is the real core's: `room` and
//! `holds_use` from `core::limits`, and `plan_submit`, `plan_takeover` and
//! `core::transition::*` for each key's records. The uses table is kept exactly as the stores
//! keep it: read by the dispatch transaction, and changed by each append whose history says
//! the key now holds its use, or no longer does. Between any two steps anything else may
//! happen: another worker steps, a worker crashes, the service applies a request (answering or
//! not), loses it, or refuses it with a 4xx, the clock ticks.
//!
//! The per-key faults the single-key model explores in depth (revocations, moving premises,
//! server errors, confirmations, fences, clock jumps) are left out here: what this model adds
//! is the sharing, and the ways a use can be taken twice or given back too early.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

use interlock_core::budget::{self, Budget, Hold};
use interlock_core::decide::{plan_submit, plan_takeover};
use interlock_core::limits::{Use, UseLimit, holds_use, room};
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

/// One configuration of the shared-lease model.
#[derive(Clone, Debug)]
pub struct LimitsConfig {
    /// Name in reports.
    pub name: String,
    /// What the service does (two: it can be asked by key; three: it cannot).
    pub tier: Tier,
    /// One key per entry, one worker per key; the value is what its payload's `amount` is.
    pub amounts: Vec<i64>,
    /// The lease's limit.
    pub limit: UseLimit,
    /// A budget every key matches, if any.
    pub budget: Option<Budget>,
    /// Attempts each worker may start.
    pub attempts: u8,
    /// Crashes in all.
    pub crashes: u8,
    /// The clock stops here.
    pub horizon: i64,
    /// Shell mutant: the use is written by a transaction of its own after the dispatch's.
    pub use_written_apart: bool,
    /// Shell mutant: a resend leaves the budget's place where the first dispatch put it.
    pub place_not_stretched: bool,
    /// How each key's refund names its payment (`pi_X` or its charge `ch_X`); empty: no payment
    /// is named. The gate journals the refund target's canonical form.
    pub names: Vec<&'static str>,
    /// Shell mutant: the payload is journaled (and so scoped and counted) as the caller spelled
    /// it, not in its canonical form.
    pub raw_payloads: bool,
}

/// The properties, in report order.
pub const LIMIT_PROPERTIES: [&str; 4] = [
    "applied_within_the_grant",
    "applied_within_the_budget",
    "uses_held_within_the_grant",
    "a_use_is_held_exactly_while_its_history_says",
];

/// Where a worker's attempt is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Pc {
    /// No attempt running.
    Idle,
    /// About to read its key and act on it.
    Start,
    /// Mutant only: the dispatch is journaled, its use not yet written.
    WriteUse {
        /// The claim to send under after it.
        deadline: i64,
    },
    /// About to send under claim `token`.
    Send { token: u64, deadline: i64, via: Via },
    /// Sent: waiting for the answer.
    Await { token: u64, via: Via },
    /// Holds claim `token` after a takeover: about to look up and decide.
    Recover { token: u64, effective: Effective },
}

/// What the service answers a request with, once processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Answer {
    /// Applied, and said so.
    Done,
    /// A definite 4xx: not applied.
    Definite,
    /// No answer (applied or lost, the sender cannot tell).
    Silent,
}

/// One key's world: its worker, its journal, the service's side of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct KeyWorld {
    pc: Pc,
    attempt: u8,
    journal: Journal,
    /// The worker holds liveness lock `token` (dropped when it crashes or its attempt ends).
    lock: Option<u64>,
    /// The service holds the refund, applied at this tick.
    applied: Option<i64>,
    /// A request at the service, not yet processed: must be processed before this time.
    pending: Option<i64>,
    /// The answer waiting for the worker.
    answer: Option<Answer>,
}

/// One key's part of a fingerprint: its world, its use, and its place (amount, first
/// dispatch, latest deadline).
type KeyPrint = (u64, Option<i64>, Option<(i64, i64, i64)>);

/// The whole world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LimitsState {
    now: i64,
    keys: Vec<KeyWorld>,
    /// The uses table: (key index, amount), sorted.
    uses: Vec<(u8, i64)>,
    /// The budget's places: (key index, amount, first dispatch, latest deadline), sorted.
    holds: Vec<(u8, i64, i64, i64)>,
    crashes_left: u8,
}

/// A move of the world.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    Step(u8),
    Crash(u8),
    Process(u8, Outcome),
    #[default]
    Tick,
}

/// How the service processes a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    ApplyAnswered,
    ApplySilent,
    Refuse4xx,
    Lose,
}

const LEASE: &str = "l";

fn key_name(k: u8) -> String {
    format!("k{k}")
}

/// The payment a refund's name stands for, as the service records it: charge `ch_X` paid
/// payment intent `pi_X`.
fn payment_of(name: &str) -> String {
    match name.strip_prefix("ch_") {
        Some(x) => format!("pi_{x}"),
        None => name.to_owned(),
    }
}

/// Key `k`'s payload as the gate journals it: the refund target's canonical form of the
/// caller's spelling (the charge resolved to the payment intent it paid), or the spelling
/// itself under the mutant.
fn payload(cfg: &LimitsConfig, k: u8) -> serde_json::Value {
    let amount = cfg.amounts[usize::from(k)];
    let Some(name) = cfg.names.get(usize::from(k)) else {
        return json!({ "amount": amount });
    };
    let field = if name.starts_with("ch_") {
        "charge"
    } else {
        "payment_intent"
    };
    let spelled = json!({ field: name, "amount": amount, "currency": "USD" });
    if cfg.raw_payloads {
        return spelled;
    }
    let canonical = interlock_stripe::refund::canonical(&spelled, |charge| {
        Ok::<_, std::convert::Infallible>(Some(payment_of(charge)))
    });
    match canonical {
        Ok(Ok(v)) => v,
        // The model's spellings all have a canonical form; one that did not would be refused
        // before it was journaled, and is no effect at all.
        Ok(Err(_)) | Err(_) => spelled,
    }
}

fn proposal(cfg: &LimitsConfig, k: u8) -> Proposed {
    let payload = payload(cfg, k);
    Proposed {
        given_hash: None,
        rules: Vec::new(),
        by: None,
        // The same for every key with the same payload: keys live in journals of their own, and
        // a key's world that does not name its index lets keys that differ only by index fold
        // into one state.
        payload_hash: format!("p{payload}"),
        payload,
        premises: Premises::new(),
        lease: LEASE.into(),
        target: "svc".into(),
        tier: cfg.tier.into(),
        window_ms: None,
        labels: Default::default(),
    }
}

fn holding(attempt: u8, now: i64) -> Holding {
    Holding {
        holder: Holder {
            caller: None,
            host: "h".into(),
            pid: 0,
            attempt: attempt.to_string(),
        },
        deadline_ms: now + SEND_TIMEOUT + SETTLE,
        now_ms: now,
        max_read_age_ms: SETTLE,
    }
}

fn recheck(lease: LeaseVerdict, now: i64) -> Recheck {
    Recheck {
        broken: Vec::new(),
        lease,
        premises_now: Premises::new(),
        changes: Vec::new(),
        premise_error: None,
        read_at_ms: Some(now),
        budgets: Vec::new(),
    }
}

fn tier_facts(cfg: &LimitsConfig) -> TierFacts {
    TierFacts {
        bound: cfg.tier,
        window_ms: None,
        margin_ms: 0,
        has_lookup: cfg.tier != Tier::Three,
    }
}

fn refund() -> serde_json::Value {
    json!({ "id": "re_1" })
}

impl LimitsState {
    fn initial(cfg: &LimitsConfig) -> Self {
        Self {
            now: 0,
            keys: vec![
                KeyWorld {
                    pc: Pc::Idle,
                    attempt: 0,
                    journal: Journal::default(),
                    lock: None,
                    applied: None,
                    pending: None,
                    answer: None,
                };
                cfg.amounts.len()
            ],
            uses: Vec::new(),
            holds: Vec::new(),
            crashes_left: cfg.crashes,
        }
    }

    /// The fingerprint the explorer keeps instead of the state. Keys with the same amount are
    /// interchangeable, so the fingerprint is of the keys' worlds (each with its use) as a sorted
    /// list: states that differ only by which key did what are one state.
    fn fingerprint(&self) -> u64 {
        let mut worlds: Vec<KeyPrint> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let mut h = DefaultHasher::new();
                w.hash(&mut h);
                let used = self
                    .uses
                    .iter()
                    .find(|(k, _)| usize::from(*k) == i)
                    .map(|(_, a)| *a);
                let held = self
                    .holds
                    .iter()
                    .find(|(k, ..)| usize::from(*k) == i)
                    .map(|(_, a, at, until)| (*a, *at, *until));
                (h.finish(), used, held)
            })
            .collect();
        worlds.sort_unstable();
        let mut h = DefaultHasher::new();
        (self.now, self.crashes_left, worlds).hash(&mut h);
        h.finish()
    }

    /// The uses table as the stores return it.
    fn uses_read(&self) -> Vec<Use> {
        self.uses
            .iter()
            .map(|(k, amount)| Use {
                key: key_name(*k),
                amount: *amount,
            })
            .collect()
    }

    /// The verdict a transaction reaches on the lease for key `k`: live, unless its other keys
    /// hold its room, or the budget has none left.
    fn verdict(&self, cfg: &LimitsConfig, k: u8) -> LeaseVerdict {
        let first = proposal(cfg, k);
        if let Err(reason) = room(
            LEASE,
            &cfg.limit,
            &key_name(k),
            cfg.limit.amount(&first.payload),
            &self.uses_read(),
        ) {
            return LeaseVerdict::Spent { reason };
        }
        let Some(b) = &cfg.budget else {
            return LeaseVerdict::Live;
        };
        // As the stores count: only the places of effects that match the budget and fall in
        // this effect's counter (its `per` values), read from the journaled payloads.
        let labels = std::collections::BTreeMap::new();
        let counter_of = |payload: &serde_json::Value| -> Option<String> {
            let s = budget::Subject {
                payload,
                target: "svc",
                labels: &labels,
            };
            b.matches(&s).then(|| b.bucket(&s))
        };
        let Some(counter) = counter_of(&first.payload) else {
            return LeaseVerdict::Live;
        };
        let holds: Vec<Hold> = self
            .holds
            .iter()
            .filter(|(key, ..)| counter_of(&proposal(cfg, *key).payload).as_ref() == Some(&counter))
            .map(|(key, amount, at, until)| Hold {
                key: key_name(*key),
                amount: *amount,
                at_ms: *at,
                until_ms: *until,
            })
            .collect();
        match budget::room(b, &key_name(k), b.amount(&first.payload), &holds, self.now) {
            Ok(()) => LeaseVerdict::Live,
            Err(over) => LeaseVerdict::OverBudget {
                reason: over.to_string(),
            },
        }
    }

    /// Append `events` to key `k` and keep its use as the stores do in the same transaction.
    fn append(&mut self, cfg: &LimitsConfig, k: u8, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let dispatched = events.iter().any(|e| matches!(e, Event::Dispatched(_)));
        let w = &mut self.keys[usize::from(k)];
        w.journal.append(self.now, events);
        self.keep_use(cfg, k, dispatched);
    }

    /// What `store::keep_use` does: the use and the budget's place follow the key's history,
    /// the place spanning its first dispatch to its sends' latest deadline.
    fn keep_use(&mut self, cfg: &LimitsConfig, k: u8, dispatched: bool) {
        let held = self.history_holds(k);
        let had = self.uses.iter().any(|(key, _)| *key == k)
            || self.holds.iter().any(|(key, ..)| *key == k);
        if held == had && (!dispatched || cfg.place_not_stretched) {
            return;
        }
        self.uses.retain(|(key, _)| *key != k);
        self.holds.retain(|(key, ..)| *key != k);
        if !held {
            return;
        }
        let payload = proposal(cfg, k).payload;
        if cfg.limit.limits() {
            self.uses.push((k, cfg.limit.amount(&payload).unwrap_or(0)));
            self.uses.sort_unstable();
        }
        if let Some(b) = &cfg.budget {
            let j = &self.keys[usize::from(k)].journal;
            let mut sends = j.0.iter().filter_map(|(at, e, _)| match e.as_ref() {
                Event::Dispatched(d) => Some((*at, d.deadline_ms)),
                _ => None,
            });
            if let Some((at, first)) = sends.next() {
                let until = sends.fold(first, |m, (_, d)| m.max(d));
                self.holds
                    .push((k, b.amount(&payload).unwrap_or(0), at, until));
                self.holds.sort_unstable();
            }
        }
    }

    fn history_holds(&self, k: u8) -> bool {
        let j = &self.keys[usize::from(k)].journal;
        holds_use(&j.state(), j.0.iter().map(|(_, e, _)| e.as_ref()))
    }

    fn lock_held(&self, k: u8, token: u64) -> bool {
        self.keys[usize::from(k)].lock == Some(token)
    }
}

fn actions(cfg: &LimitsConfig, s: &LimitsState) -> Vec<Action> {
    let mut out = Vec::new();
    for (i, w) in s.keys.iter().enumerate() {
        let k = u8::try_from(i).unwrap_or(u8::MAX);
        let may_step = match &w.pc {
            Pc::Idle => w.attempt < cfg.attempts,
            Pc::Await { .. } => w.answer.is_some(),
            _ => true,
        };
        if may_step {
            out.push(Action::Step(k));
        }
        if s.crashes_left > 0 && w.pc != Pc::Idle {
            out.push(Action::Crash(k));
        }
        if w.pending.is_some() {
            for o in [
                Outcome::ApplyAnswered,
                Outcome::ApplySilent,
                Outcome::Refuse4xx,
                Outcome::Lose,
            ] {
                out.push(Action::Process(k, o));
            }
        }
    }
    // The clock never reaches an unprocessed request's deadline: the contract's settle margin.
    let blocked = s
        .keys
        .iter()
        .any(|w| w.pending.is_some_and(|by| s.now + 1 >= by));
    if s.now < cfg.horizon && !blocked {
        out.push(Action::Tick);
    }
    out
}

fn apply(cfg: &LimitsConfig, s: &LimitsState, action: Action) -> LimitsState {
    let mut n = s.clone();
    match action {
        Action::Tick => n.now += 1,
        Action::Crash(k) => {
            n.crashes_left -= 1;
            let w = &mut n.keys[usize::from(k)];
            w.pc = Pc::Idle;
            w.lock = None;
            w.answer = None;
        }
        Action::Process(k, o) => {
            let now = n.now;
            let w = &mut n.keys[usize::from(k)];
            w.pending = None;
            let awaiting = matches!(w.pc, Pc::Await { .. });
            let answer = match o {
                Outcome::ApplyAnswered => {
                    w.applied = Some(now);
                    Answer::Done
                }
                Outcome::ApplySilent => {
                    w.applied = Some(now);
                    Answer::Silent
                }
                Outcome::Refuse4xx => Answer::Definite,
                Outcome::Lose => Answer::Silent,
            };
            // A request from a worker that crashed since has no one to answer.
            if awaiting {
                w.answer = Some(answer);
            }
        }
        Action::Step(k) => step(cfg, &mut n, k),
    }
    n
}

fn step(cfg: &LimitsConfig, n: &mut LimitsState, k: u8) {
    let idx = usize::from(k);
    let now = n.now;
    let attempt = n.keys[idx].attempt;
    let hold = holding(attempt, now);
    let me = hold.holder.clone();
    let has_lookup = cfg.tier != Tier::Three;
    let pc = n.keys[idx].pc.clone();
    let next = match pc {
        Pc::Idle => {
            n.keys[idx].attempt += 1;
            Pc::Start
        }
        Pc::Start => start(cfg, n, k),
        Pc::WriteUse { deadline } => {
            n.keep_use(cfg, k, true);
            Pc::Send {
                token: 1,
                deadline,
                via: Via::FirstSend,
            }
        }
        Pc::Send {
            token,
            deadline,
            via,
        } => {
            let state = n.keys[idx].journal.state();
            if transition::may_send(&state, token, &me) && now < deadline - SETTLE {
                n.keys[idx].pending = Some(deadline);
                Pc::Await { token, via }
            } else {
                let events = transition::withdraw(&state, token, &me, "not sent");
                n.append(cfg, k, events);
                Pc::Idle
            }
        }
        Pc::Await { token, via } => {
            let answer = n.keys[idx].answer.take().unwrap_or(Answer::Silent);
            let sent = match answer {
                Answer::Done => SendAnswer::Done(refund()),
                Answer::Definite => SendAnswer::Definite {
                    code: "charge_disputed".into(),
                    message: "the charge is disputed".into(),
                },
                Answer::Silent => SendAnswer::Unknown("timed out".into()),
            };
            let lookup =
                transition::wants_lookup(&sent, via, has_lookup).then(|| (look(n, k), now));
            let state = n.keys[idx].journal.state();
            let events = transition::record_answer(
                &state,
                token,
                &sent,
                via,
                has_lookup,
                now,
                lookup.as_ref().map(|(l, at)| (l, *at)),
            );
            n.append(cfg, k, events);
            Pc::Idle
        }
        Pc::Recover { token, effective } => {
            let lookup = has_lookup.then(|| (look(n, k), now));
            let lease = n.verdict(cfg, k);
            let facts = RecoveryFacts {
                tier: tier_facts(cfg),
                effective_at_takeover: effective,
                recheck: recheck(lease, now),
                transient: false,
                has_lookup,
                now_ms: now,
            };
            let state = n.keys[idx].journal.state();
            let (events, plan) = transition::recover(
                &state,
                token,
                &facts,
                lookup.as_ref().map(|(l, at)| (l, *at)),
                &[],
                &hold,
            );
            n.append(cfg, k, events);
            match plan {
                Some(RecoveryPlan::Resend(via)) => Pc::Send {
                    token,
                    deadline: hold.deadline_ms,
                    via,
                },
                _ => Pc::Idle,
            }
        }
    };
    let w = &mut n.keys[idx];
    if next == Pc::Idle {
        w.lock = None;
    }
    w.pc = next;
}

/// A read of key `k` and what it leads to: a first dispatch, a takeover, or nothing.
fn start(cfg: &LimitsConfig, n: &mut LimitsState, k: u8) -> Pc {
    let idx = usize::from(k);
    let now = n.now;
    let hold = holding(n.keys[idx].attempt, now);
    let first = proposal(cfg, k);
    let state = n.keys[idx].journal.state();
    match plan_submit(&state, &first.payload_hash) {
        SubmitPlan::Fresh => {
            n.keys[idx].lock = Some(1);
            // The dispatch transaction: the uses read, the room judged, the records and the
            // use written, all at once (unless the mutant writes the use apart).
            let lease = n.verdict(cfg, k);
            let events = transition::propose_and_dispatch(
                &state,
                &first,
                &recheck(lease, now),
                json!({}),
                None,
                &[],
                &hold,
            );
            let dispatched = matches!(events.last(), Some(Event::Dispatched(_)));
            if cfg.use_written_apart {
                n.keys[idx].journal.append(now, events);
            } else {
                n.append(cfg, k, events);
            }
            match (dispatched, cfg.use_written_apart) {
                (false, _) => Pc::Idle,
                (true, true) => Pc::WriteUse {
                    deadline: hold.deadline_ms,
                },
                (true, false) => Pc::Send {
                    token: 1,
                    deadline: hold.deadline_ms,
                    via: Via::FirstSend,
                },
            }
        }
        SubmitPlan::Recover(claim) => {
            let lock_free = !n.lock_held(k, claim.token);
            let effective = match &state {
                EffectState::InFlight { first, claim } => {
                    tier_facts(cfg).effective(first, claim, now)
                }
                _ => return Pc::Idle,
            };
            match plan_takeover(&claim, now, lock_free, effective) {
                TakeoverPlan::Wait { .. } => Pc::Idle,
                TakeoverPlan::Take(reason) => {
                    let events = transition::takeover(&state, &claim, reason, now, SETTLE, &hold);
                    if events.is_empty() {
                        return Pc::Idle;
                    }
                    n.keys[idx].lock = Some(claim.token + 1);
                    n.append(cfg, k, events);
                    Pc::Recover {
                        token: claim.token + 1,
                        effective,
                    }
                }
            }
        }
        SubmitPlan::Continue | SubmitPlan::Replay(_) | SubmitPlan::Conflict { .. } => Pc::Idle,
    }
}

/// What a lookup by key `k` finds at the service now.
fn look(n: &LimitsState, k: u8) -> LookupAnswer {
    if n.keys[usize::from(k)].applied.is_some() {
        LookupAnswer::Found(refund())
    } else {
        LookupAnswer::NotFound
    }
}

/// The properties broken in `s`.
fn broken(cfg: &LimitsConfig, s: &LimitsState) -> Vec<&'static str> {
    let mut out = Vec::new();
    let within = |keys: &[u8]| {
        let count_ok = cfg
            .limit
            .uses
            .is_none_or(|u| keys.len() <= usize::try_from(u).unwrap_or(usize::MAX));
        let sum: i64 = keys.iter().map(|k| cfg.amounts[usize::from(*k)]).sum();
        let total_ok = cfg.limit.total.as_ref().is_none_or(|(_, max)| sum <= *max);
        count_ok && total_ok
    };
    let applied: Vec<u8> = (0..s.keys.len())
        .filter(|i| s.keys[*i].applied.is_some())
        .filter_map(|i| u8::try_from(i).ok())
        .collect();
    if !within(&applied) {
        out.push(LIMIT_PROPERTIES[0]);
    }
    // The effects the service applied in the window that ends now, for each payment the
    // service knows them by (one, where no payment is named): a budget counted per payment
    // must hold for each, however the callers named it.
    if let Some(b) = &cfg.budget {
        let since = b.window.since(s.now);
        let mut landed: std::collections::BTreeMap<String, i64> = Default::default();
        for (i, w) in s.keys.iter().enumerate() {
            if w.applied.is_some_and(|at| at >= since) {
                let payment = cfg.names.get(i).map(|n| payment_of(n)).unwrap_or_default();
                *landed.entry(payment).or_default() +=
                    b.amount(&json!({ "amount": cfg.amounts[i] })).unwrap_or(0);
            }
        }
        if landed.values().any(|sum| *sum > b.max()) {
            out.push(LIMIT_PROPERTIES[1]);
        }
    }
    let held: Vec<u8> = s.uses.iter().map(|(k, _)| *k).collect();
    if !within(&held) {
        out.push(LIMIT_PROPERTIES[2]);
    }
    // Checked where no worker is between a dispatch and a use written apart (the mutant's own
    // window, which the other two properties judge).
    let settled = s.keys.iter().all(|w| !matches!(w.pc, Pc::WriteUse { .. }));
    let exact = (0..s.keys.len())
        .filter_map(|i| u8::try_from(i).ok())
        .all(|k| {
            let held = s.history_holds(k);
            (!cfg.limit.limits() || held == s.uses.iter().any(|(key, _)| *key == k))
                && (cfg.budget.is_none() || held == s.holds.iter().any(|(key, ..)| *key == k))
        });
    if settled && !exact {
        out.push(LIMIT_PROPERTIES[3]);
    }
    out
}

/// One configuration's result.
#[derive(Clone, Debug, Serialize)]
pub struct LimitsReport {
    /// Configuration name.
    pub name: String,
    /// Keys (one worker each).
    pub keys: usize,
    /// The service's tier.
    pub tier: u8,
    /// The lease's limit, in words.
    pub limit: String,
    /// Distinct states reached.
    pub states: u64,
    /// Longest shortest path from the start.
    pub max_depth: u32,
    /// Every reachable state was explored.
    pub complete: bool,
    /// Property name → `holds` or `counterexample`.
    pub properties: BTreeMap<String, String>,
    /// Property name → the trace that breaks it.
    #[serde(skip)]
    pub traces: BTreeMap<String, Vec<String>>,
    /// Wall time.
    #[serde(skip)]
    pub seconds: f64,
}

impl LimitsReport {
    /// The first property with a counterexample.
    pub fn first_broken(&self) -> Option<&str> {
        LIMIT_PROPERTIES
            .iter()
            .find(|p| self.properties.get(**p).map(String::as_str) == Some("counterexample"))
            .copied()
    }
}

impl Walk for LimitsConfig {
    type State = LimitsState;
    type Action = Action;

    fn start(&self) -> LimitsState {
        LimitsState::initial(self)
    }

    fn fingerprint(&self, s: &LimitsState) -> u64 {
        s.fingerprint()
    }

    fn moves(&self, s: &LimitsState) -> Vec<Action> {
        actions(self, s)
    }

    fn step(&self, s: &LimitsState, a: Action) -> (LimitsState, Option<&'static str>) {
        (apply(self, s, a), None)
    }

    fn broken(&self, s: &LimitsState) -> Vec<&'static str> {
        broken(self, s)
    }

    fn tell(&self, path: &[Action]) -> Vec<String> {
        let mut s = LimitsState::initial(self);
        let mut lines = Vec::with_capacity(path.len() + 1);
        for action in path {
            let next = apply(self, &s, *action);
            lines.push(describe(&s, *action, &next));
            s = next;
        }
        lines.push(format!("now: {}", summary(&s)));
        lines
    }
}

/// Explore every reachable state of `cfg` breadth-first, checking the properties on each; with
/// `stop_early`, stop at the first counterexample.
pub fn explore_limits(cfg: &LimitsConfig, stop_early: bool) -> LimitsReport {
    let started = Instant::now();
    let walked = walk(cfg, stop_early, |_| {});
    LimitsReport {
        name: cfg.name.clone(),
        keys: cfg.amounts.len(),
        tier: u8::from(cfg.tier),
        limit: describe_limits(cfg),
        states: walked.states,
        max_depth: walked.max_depth,
        complete: walked.complete,
        properties: walked.verdicts(&LIMIT_PROPERTIES),
        traces: walked.traces,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// The lease's limit and the budget, in words, for reports.
fn describe_limits(cfg: &LimitsConfig) -> String {
    let lease = describe_limit(&cfg.limit);
    let budget = cfg.budget.as_ref().map(|b| {
        let window = match b.window {
            budget::Window::Rolling { ms } => format!("in any {ms} ticks"),
            budget::Window::Calendar { .. } => b.window.describe(),
        };
        let per = if b.per.is_empty() {
            String::new()
        } else {
            format!(" for each {}", b.per.join(", "))
        };
        format!("budget: at most {} effect(s) {window}{per}", b.max())
    });
    [Some(lease).filter(|l| !l.is_empty()), budget]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
}

/// The limit in words, for reports.
pub fn describe_limit(l: &UseLimit) -> String {
    let mut parts = Vec::new();
    if let Some(u) = l.uses {
        parts.push(format!("{u} use(s)"));
    }
    if let Some((f, max)) = &l.total {
        parts.push(format!("{f} ≤ {max} in total"));
    }
    parts.join(", ")
}

fn describe(before: &LimitsState, action: Action, after: &LimitsState) -> String {
    let what = match action {
        Action::Tick => "the clock ticks".to_owned(),
        Action::Crash(k) => format!("worker of k{k} crashes"),
        Action::Process(k, o) => format!("the service processes k{k}'s request: {o:?}"),
        Action::Step(k) => {
            let i = usize::from(k);
            format!(
                "worker of k{k} steps ({:?}){}",
                before.keys[i].pc,
                after.keys[i]
                    .journal
                    .writes_since(before.keys[i].journal.0.len())
            )
        }
    };
    format!("t={} {what}", before.now)
}

fn summary(s: &LimitsState) -> String {
    let keys: Vec<String> = s
        .keys
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let label = w.journal.label();
            format!(
                "k{i} {label}{}",
                if w.applied.is_some() {
                    " (applied at the service)"
                } else {
                    ""
                }
            )
        })
        .collect();
    let uses: Vec<String> = s.uses.iter().map(|(k, _)| format!("k{k}")).collect();
    format!("{}; uses held by [{}]", keys.join(", "), uses.join(", "))
}

/// One refund per payment in any 3 ticks, counted per `payment_intent`.
fn one_per_payment_per_3_ticks() -> Budget {
    Budget {
        per: vec!["payment_intent".into()],
        ..one_per_3_ticks()
    }
}

/// A budget every key matches: one effect in any 3 ticks.
fn one_per_3_ticks() -> Budget {
    Budget {
        id: "b".into(),
        scope: std::collections::BTreeMap::new(),
        per: Vec::new(),
        window: budget::Window::Rolling { ms: 3 },
        limit: budget::Limit::Count { max: 1 },
    }
}

/// The configurations: one use at tiers 2 and 3 and a total over two keys, with a crash and a
/// retry each; and two uses and a total shared by three keys, one attempt each (three keys with
/// retries and crashes reach more states than the explorer keeps).
pub fn limits_models(quick: bool) -> Vec<LimitsConfig> {
    let uses = |n: u32| UseLimit {
        uses: Some(n),
        total: None,
    };
    let total = |max: i64| UseLimit {
        uses: None,
        total: Some(("amount".into(), max)),
    };
    let two_keys = |name: &str, tier: Tier, amounts: Vec<i64>, limit: UseLimit| LimitsConfig {
        name: name.into(),
        tier,
        amounts,
        limit,
        budget: None,
        attempts: 2,
        crashes: 1,
        horizon: if quick { 5 } else { 6 },
        use_written_apart: false,
        place_not_stretched: false,
        names: Vec::new(),
        raw_payloads: false,
    };
    let three_keys = |name: &str, tier: Tier, amounts: Vec<i64>, limit: UseLimit| LimitsConfig {
        attempts: 1,
        crashes: 0,
        horizon: 4,
        ..two_keys(name, tier, amounts, limit)
    };
    vec![
        two_keys("one_use_two_keys_t2", Tier::Two, vec![5, 5], uses(1)),
        two_keys("one_use_two_keys_t3", Tier::Three, vec![5, 5], uses(1)),
        two_keys("total_8_two_keys_t2", Tier::Two, vec![5, 4], total(8)),
        three_keys(
            "two_uses_three_keys_t3",
            Tier::Three,
            vec![5, 5, 5],
            uses(2),
        ),
        three_keys("total_8_three_keys_t2", Tier::Two, vec![3, 4, 5], total(8)),
        LimitsConfig {
            budget: Some(one_per_3_ticks()),
            // Six ticks in the CI run too: a resend two windows after its first dispatch needs them.
            horizon: 6,
            ..two_keys(
                "budget_one_per_3_ticks_t2",
                Tier::Two,
                vec![5, 5],
                UseLimit::default(),
            )
        },
        // Two refunds of one payment, one named by its payment intent and one by its charge.
        LimitsConfig {
            budget: Some(one_per_payment_per_3_ticks()),
            names: vec!["pi_a", "ch_a"],
            horizon: 6,
            ..two_keys(
                "budget_one_per_payment_by_charge_or_intent_t2",
                Tier::Two,
                vec![5, 5],
                UseLimit::default(),
            )
        },
        LimitsConfig {
            budget: Some(one_per_3_ticks()),
            // Six ticks in the CI run too: a resend two windows after its first dispatch needs them.
            horizon: 6,
            ..two_keys(
                "budget_one_per_3_ticks_t3",
                Tier::Three,
                vec![5, 5],
                UseLimit::default(),
            )
        },
    ]
}
