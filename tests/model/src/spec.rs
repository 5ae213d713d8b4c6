//! The protocol as a transition system. Each actor runs the gate shell's steps — read, lock,
//! premise read, transaction, send, lookup, record — one atomic step at a time, and every
//! decision inside a step is made by the real core (`plan_submit`, `plan_takeover`,
//! `core::transition::*`, `fold`). Between any two steps anything else may happen: another actor
//! steps, an actor crashes (its liveness locks go with it), the lease is revoked or expires, a
//! premise moves, the lease store goes down and comes back, a caller submits another payload under
//! the key, a caller goes away between an attempt's dispatch and its send (a fence), the service
//! processes, loses or fails a request or confirms a refund it holds, the clock ticks or jumps.
//!
//! Time is in ticks. A claim's deadline is its start + send timeout + settle; a send goes out only
//! while its budget lasts (before deadline − settle) and the service processes it, if at all,
//! before the deadline, whether its sender is still waiting, gave up, or died. That is the
//! contract's assumption that settle covers the service's processing past the client's cut-off
//! and any forward step of the clock: the clock is never allowed to reach an unprocessed
//! request's deadline.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use interlock_core::decide::{plan_submit, plan_takeover};
use interlock_core::settle::{self, Finding, Settlement};
use interlock_core::state::{fold, landed_evidence};
use interlock_core::tier::Effective;
use interlock_core::transition::{self, Holding, RecoveryFacts, TierFacts};
use interlock_core::{
    Confirmed, EffectState, Event, Holder, LeaseVerdict, LookupAnswer, Premises, Proposed, Recheck,
    RecoveryPlan, SendAnswer, SubmitPlan, TakeoverPlan, TakeoverReason, Tier, Via,
};
use serde_json::json;

/// Send timeout, in ticks.
pub const SEND_TIMEOUT: i64 = 2;
/// Settle margin, in ticks.
pub const SETTLE: i64 = 1;
/// A tier-1 service keeps a key this long.
pub const WINDOW: i64 = 5;
/// A tier-1 window is trusted until `WINDOW − MARGIN` after the first dispatch (the gate's rule:
/// send timeout + settle < margin < window), so both the demotion and the key's expiry fall
/// inside a tier-1 model's horizon.
pub const MARGIN: i64 = 4;
/// Size of one forward clock jump.
pub const JUMP: i64 = 3;
/// How old a premise read may be when the dispatch standing on it is written (the gate's default:
/// the settle margin).
pub const MAX_READ_AGE: i64 = SETTLE;
/// A send leaves at most this long after the premise read it stands on (the read's age bound plus
/// the send's budget): a premise that moved longer ago than this before a send breaks the promise.
pub const FACTS_BOUND: i64 = MAX_READ_AGE + SEND_TIMEOUT;
/// The payloads an outside caller may submit under the key instead of the approved one.
pub const OTHER_PAYLOADS: [&str; 2] = ["q1", "q2"];

/// What an actor's binding claims, and how it is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The tier this actor's target binding claims (it may claim more than the service offers).
    pub tier: Tier,
    /// `interlock recover`: it never proposes, only recovers what the journal holds.
    pub recover_only: bool,
}

/// One model configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Name in reports.
    pub name: String,
    /// What the service really does.
    pub service_tier: Tier,
    /// One per actor.
    pub bindings: Vec<Binding>,
    /// Attempts each actor may start (Temporal's retries).
    pub attempts: u8,
    /// Crashes in all.
    pub crashes: u8,
    /// The lease may be revoked once.
    pub revoke: bool,
    /// A premise may move once.
    pub move_premise: bool,
    /// The service may answer 500 (applied or not) and, at tier 1, save it under the key.
    pub server_errors: bool,
    /// Requests may be lost, answers dropped, definite 4xx given, lookups fail.
    pub lossy: bool,
    /// Forward clock jumps of [`JUMP`] ticks.
    pub jumps: u8,
    /// The clock stops here (the calm check runs past it).
    pub horizon: i64,
    /// Shell mutant: the lease is read with the premises, outside the dispatch transaction.
    pub stale_lease_read: bool,
    /// Submissions of another payload under the key by an outside caller, in all.
    pub conflicts: u8,
    /// The service may confirm (a signed webhook) a refund it holds under the key, once.
    pub confirmations: bool,
    /// A person may settle an `AMBIGUOUS` effect: they look at the service and sign what they
    /// find there (`interlock journal settle`), at any moment, as often as they are refused.
    pub settles: bool,
    /// The lease store may go down once (and come back): its reads answer with an error.
    pub store_outage: bool,
    /// The lease expires at this tick.
    pub lease_expires: Option<i64>,
    /// Callers that go away between their attempt's dispatch and its send, in all.
    pub fences: u8,
    /// Fold states that differ only by a renaming of interchangeable actors into one (safety
    /// properties are checked exactly; "resolves once calm" on one state of each class, since a
    /// calm run's retries always start at the first worker).
    pub symmetric: bool,
}

impl Config {
    /// Whether the service can be asked by key.
    pub fn has_lookup(&self) -> bool {
        self.service_tier != Tier::Three
    }
}

/// The journal: real records, each with a hash of its canonical JSON (its holder's process id
/// left out) for state fingerprints, and beside them the actor each record names as holder
/// ([`NO_HOLDER`] for none), so that a fingerprint can rename the actors. Records are shared
/// between the states that hold them, so a state costs a few words a record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Journal(pub Vec<(i64, Arc<Event>, u64)>, pub Vec<u8>);

/// A record that names no holder.
pub const NO_HOLDER: u8 = u8::MAX;

impl Eq for Journal {}

impl Hash for Journal {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.hash_renamed(state, &[]);
    }
}

impl Journal {
    /// The state folded from the first `n` records. A history the core wrote but cannot read
    /// back is a bug in the core, and stops the checker on the spot.
    #[allow(clippy::panic)]
    pub fn state_at(&self, n: usize) -> EffectState {
        fold(self.0.iter().take(n).map(|(at, e, _)| (*at, e.as_ref())))
            .unwrap_or_else(|e| panic!("the core wrote a history it cannot read: {e}"))
    }

    /// The current state.
    pub fn state(&self) -> EffectState {
        self.state_at(self.0.len())
    }

    /// How the effect stands, in a word, for traces.
    pub fn label(&self) -> String {
        match self.state() {
            EffectState::Absent => "absent".to_owned(),
            EffectState::Proposed { .. } => "proposed".to_owned(),
            EffectState::InFlight { .. } => "in flight".to_owned(),
            EffectState::Resolved { resolution, .. } => resolution.kind().to_owned(),
        }
    }

    /// `, writes A, B` for the records after the first `before`, or nothing, for traces.
    pub fn writes_since(&self, before: usize) -> String {
        let new: Vec<&str> = self.0[before..].iter().map(|(_, e, _)| e.kind()).collect();
        if new.is_empty() {
            String::new()
        } else {
            format!(", writes {}", new.join(", "))
        }
    }

    /// Append `events`, each written at `at`.
    pub fn append(&mut self, at: i64, events: Vec<Event>) {
        for e in events {
            let mut anonymous = e.clone();
            let holder = match &mut anonymous {
                Event::Dispatched(d) => Some(&mut d.holder),
                Event::Claimed(c) => Some(&mut c.holder),
                _ => None,
            };
            let actor = holder.map_or(NO_HOLDER, |h| {
                let pid = u8::try_from(h.pid).unwrap_or(NO_HOLDER);
                h.pid = 0;
                pid
            });
            let mut h = DefaultHasher::new();
            serde_json::to_string(&anonymous)
                .unwrap_or_default()
                .hash(&mut h);
            self.0.push((at, Arc::new(e), h.finish()));
            self.1.push(actor);
        }
    }

    /// Hash the records with each holder renamed by `rename` (actor `i` becomes `rename[i]`;
    /// empty: as they are).
    fn hash_renamed<H: Hasher>(&self, state: &mut H, rename: &[u8]) {
        for ((at, _, h), actor) in self.0.iter().zip(&self.1) {
            at.hash(state);
            h.hash(state);
            rename.get(usize::from(*actor)).unwrap_or(actor).hash(state);
        }
    }
}

/// A send's answer, compactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ans {
    /// Success, applied for this request.
    Done,
    /// A saved success replayed from the key (`Idempotent-Replayed: true`).
    Replayed,
    /// A definite 4xx.
    Definite,
    /// A fresh 5xx.
    ServerError,
    /// A 5xx replayed from the key (`Idempotent-Replayed: true`).
    SavedError,
    /// No answer: timeout, reset.
    Unknown,
}

/// A lookup's answer, compactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Look {
    /// Found by key, once.
    Found,
    /// Found by key, more than once.
    Several,
    /// Not found.
    NotFound,
    /// Could not ask.
    Unknown,
}

/// Where an actor's current attempt is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    /// No attempt running.
    Idle,
    /// About to read the key's state.
    Start,
    /// About to write `AUTHORIZED` for a journaled proposal (lease read in the transaction).
    Authorize,
    /// About to take liveness lock 1.
    Lock1 {
        /// A new key: proposed, authorized and dispatched in one transaction.
        fresh: bool,
    },
    /// About to read the premises for the first dispatch.
    Premises1 {
        /// A new key.
        fresh: bool,
    },
    /// About to write the first `DISPATCHED` (with `PROPOSED` and `AUTHORIZED` for a new key).
    Dispatch1 {
        /// A new key.
        fresh: bool,
        /// What the premise read found.
        premise_ok: bool,
        /// When the premises were read.
        read_at: i64,
        /// Shell mutant: the lease as read with the premises.
        early_lease: Option<bool>,
    },
    /// Read the state (first `seen` records) and found it in flight: about to check liveness.
    Observe {
        /// Records in the snapshot.
        seen: usize,
    },
    /// Decided to take over: about to take the next token's lock.
    TakeLock {
        /// Records in the snapshot.
        seen: usize,
        /// The evidence.
        reason: TakeoverReason,
        /// When the evidence was read.
        at: i64,
        /// The tier recovery acts on.
        effective: Effective,
    },
    /// Holds the lock: about to write `CLAIMED`.
    TakeTx {
        /// Records in the snapshot.
        seen: usize,
        /// The evidence.
        reason: TakeoverReason,
        /// When the evidence was read.
        at: i64,
        /// The tier recovery acts on.
        effective: Effective,
    },
    /// Holds claim `token`: about to read the premises.
    RecPremises {
        /// The claim.
        token: u64,
        /// The tier recovery acts on.
        effective: Effective,
        /// What a lookup found, once asked, and when.
        lookup: Option<(Look, i64)>,
    },
    /// About to decide the recovery step in the transaction.
    RecTx {
        /// The claim.
        token: u64,
        /// The tier recovery acts on.
        effective: Effective,
        /// What a lookup found, once asked, and when.
        lookup: Option<(Look, i64)>,
        /// What the premise read found.
        premise_ok: bool,
        /// When the premises were read.
        read_at: i64,
        /// Shell mutant: the lease as read with the premises.
        early_lease: Option<bool>,
    },
    /// About to look the effect up.
    RecLookup {
        /// The claim.
        token: u64,
        /// The tier recovery acts on.
        effective: Effective,
    },
    /// `DISPATCHED` is durable: about to send.
    Send {
        /// The claim.
        token: u64,
        /// Its deadline.
        deadline: i64,
        /// How a success would be recorded.
        via: Via,
    },
    /// Sent: waiting for the answer.
    Await {
        /// The claim.
        token: u64,
        /// How a success would be recorded.
        via: Via,
    },
    /// Answered: about to look up if the answer needs it.
    AfterSend {
        /// The claim.
        token: u64,
        /// How a success would be recorded.
        via: Via,
        /// The answer.
        answer: Ans,
    },
    /// About to record the answer.
    Record {
        /// The claim.
        token: u64,
        /// How a success would be recorded.
        via: Via,
        /// The answer.
        answer: Ans,
        /// The lookup after it, if any, and when it was asked.
        lookup: Option<(Look, i64)>,
    },
}

/// One actor: a worker process (or `interlock recover`) running attempts one after another.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Actor {
    /// Where its attempt is.
    pub pc: Pc,
    /// Attempts started so far (names the holder).
    pub attempt: u8,
}

/// A request at the service.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    /// Sender.
    pub actor: u8,
    /// The sender's attempt.
    pub attempt: u8,
    /// Processed, if at all, before this time: the claim's deadline.
    pub land_by: i64,
    /// `None` while unprocessed; the answer once processed (or lost).
    pub answer: Option<Ans>,
}

/// The payments service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Service {
    /// Refunds carrying the key (capped at 3).
    pub applied: u8,
    /// Tier 1: the key's saved answer (success or a 500) and when it was saved.
    pub saved: Option<(Ans, i64)>,
    /// Requests sent and not yet consumed.
    pub requests: Vec<Request>,
}

/// The lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lease {
    /// Live.
    Live,
    /// Revoked when the journal held this many records.
    Revoked {
        /// Journal length at the revocation.
        at_len: usize,
    },
}

/// The lease store's health over the run: one outage at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Store {
    /// Never down yet.
    Up,
    /// Down: every lease read fails.
    Down,
    /// Back after its outage.
    Restored,
}

/// The whole world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The clock.
    pub now: i64,
    /// The journal.
    pub journal: Journal,
    /// The actors.
    pub actors: Vec<Actor>,
    /// Liveness locks held: (token, actor).
    pub locks: Vec<(u64, u8)>,
    /// The service.
    pub service: Service,
    /// The lease.
    pub lease: Lease,
    /// When the premise moved, if it has.
    pub premise_moved_at: Option<i64>,
    /// The lease store's health.
    pub store: Store,
    /// Conflicting submissions left.
    pub conflicts_left: u8,
    /// Whether the service has confirmed the refund.
    pub confirmed: bool,
    /// Fences left.
    pub fences_left: u8,
    /// Crashes left.
    pub crashes_left: u8,
    /// Clock jumps left.
    pub jumps_left: u8,
    /// Every actor runs the same binding: fingerprints rename actors to one canonical order.
    pub symmetric: bool,
}

/// Every renaming of `n` actors (the permutations of `0..n`).
fn renamings(n: usize) -> Vec<Vec<u8>> {
    let ids: Vec<u8> = (0..n).filter_map(|i| u8::try_from(i).ok()).collect();
    let mut out = Vec::new();
    permute(&ids, &mut Vec::new(), &mut out);
    out
}

fn permute(left: &[u8], taken: &mut Vec<u8>, out: &mut Vec<Vec<u8>>) {
    if left.is_empty() {
        out.push(taken.clone());
        return;
    }
    for (k, x) in left.iter().enumerate() {
        let mut rest = left.to_vec();
        rest.remove(k);
        taken.push(*x);
        permute(&rest, taken, out);
        taken.pop();
    }
}

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Actor `i` starts a new attempt.
    Begin(u8),
    /// Actor `i` takes its next step.
    Step(u8),
    /// Actor `i` receives its request's answer.
    Answer(u8),
    /// Actor `i` gives up waiting (timeout, reset): unknown.
    GiveUp(u8),
    /// Actor `i` crashes.
    Crash(u8),
    /// The service processes request `i` normally.
    Process(u8),
    /// The service answers request `i` with a 500, having applied it or not.
    ServerError(u8, bool),
    /// The service refuses request `i` with a definite 4xx.
    Reject(u8),
    /// Request `i` is lost before the service sees it.
    Lose(u8),
    /// One tick passes.
    Tick,
    /// The clock jumps forward.
    Jump,
    /// The lease is revoked.
    Revoke,
    /// A premise moves.
    MovePremise,
    /// The lease store goes down, or comes back.
    StoreFlip,
    /// An outside caller submits payload `OTHER_PAYLOADS[i]` under the key.
    Conflict(u8),
    /// The service confirms the refund it holds (a signed webhook).
    Confirm,
    /// Actor `i`'s caller goes away between its dispatch and its send.
    Fence(u8),
    /// A person looks at the service now and signs what they find, to settle an `AMBIGUOUS`
    /// effect; the core records it or refuses it.
    Settle,
}

/// A safety property broken by a transition itself (checked at the instant of a send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breach {
    /// A send whose lease was revoked before its `DISPATCHED` record.
    SendAfterRevocation,
    /// A send standing on a re-check that did not hold, or on a fact that had stopped holding
    /// more than [`FACTS_BOUND`] before it.
    SendOnFailedRecheck,
    /// A takeover not written though the claim in the transaction carried the same decision as
    /// the one it was planned on (only a record that decides nothing came between).
    TakeoverBlockedByNote,
    /// A fenced attempt left its unsent dispatch's window open.
    FencedWindowOpen,
}

const KEY_PAYLOAD_HASH: &str = "p0";

fn proposal(cfg: &Config) -> Proposed {
    Proposed {
        given_hash: None,
        rules: Vec::new(),
        by: None,
        payload: json!({ "amount": 2000 }),
        payload_hash: KEY_PAYLOAD_HASH.into(),
        premises: premises(true),
        lease: "l".into(),
        target: "svc".into(),
        tier: cfg.service_tier.into(),
        window_ms: (cfg.service_tier == Tier::One).then_some(WINDOW),
        labels: Default::default(),
    }
}

fn premises(held: bool) -> Premises {
    [(
        "refunded_by_others".to_owned(),
        json!(if held { 0 } else { 500 }),
    )]
    .into_iter()
    .collect()
}

fn holder(actor: u8, attempt: u8) -> Holder {
    Holder {
        caller: None,
        host: "h".into(),
        pid: u32::from(actor),
        attempt: attempt.to_string(),
    }
}

fn holding(actor: u8, attempt: u8, now: i64) -> Holding {
    Holding {
        holder: holder(actor, attempt),
        deadline_ms: now + SEND_TIMEOUT + SETTLE,
        now_ms: now,
        max_read_age_ms: SETTLE,
    }
}

fn lease_verdict(live: bool) -> LeaseVerdict {
    if live {
        LeaseVerdict::Live
    } else {
        LeaseVerdict::Dead {
            reason: "revoked".into(),
        }
    }
}

fn recheck(premise_ok: bool, lease: LeaseVerdict, read_at: i64) -> Recheck {
    let now = premises(premise_ok);
    Recheck {
        broken: Vec::new(),
        lease,
        changes: interlock_core::decide::diff(&premises(true), &now),
        premises_now: now,
        premise_error: None,
        read_at_ms: Some(read_at),
        budgets: Vec::new(),
    }
}

fn send_answer(a: Ans) -> SendAnswer {
    match a {
        Ans::Done => SendAnswer::Done(json!({ "id": "re_1" })),
        Ans::Replayed => SendAnswer::Replayed(json!({ "id": "re_1" })),
        Ans::Definite => SendAnswer::Definite {
            code: "charge_disputed".into(),
            message: "the charge is disputed".into(),
        },
        Ans::ServerError => SendAnswer::Unknown("HTTP 500".into()),
        Ans::SavedError => SendAnswer::SavedError("HTTP 500, replayed".into()),
        Ans::Unknown => SendAnswer::Unknown("timed out".into()),
    }
}

fn lookup_answer(l: Look) -> LookupAnswer {
    match l {
        Look::Found => LookupAnswer::Found(json!({ "id": "re_1" })),
        Look::Several => {
            LookupAnswer::Several(vec![json!({ "id": "re_1" }), json!({ "id": "re_2" })])
        }
        Look::NotFound => LookupAnswer::NotFound,
        Look::Unknown => LookupAnswer::Unknown("HTTP 503".into()),
    }
}

impl State {
    /// Nothing has happened yet.
    pub fn initial(cfg: &Config) -> Self {
        Self {
            now: 0,
            journal: Journal::default(),
            actors: vec![
                Actor {
                    pc: Pc::Idle,
                    attempt: 0,
                };
                cfg.bindings.len()
            ],
            locks: Vec::new(),
            service: Service::default(),
            lease: Lease::Live,
            premise_moved_at: None,
            store: Store::Up,
            conflicts_left: cfg.conflicts,
            confirmed: false,
            fences_left: cfg.fences,
            crashes_left: cfg.crashes,
            jumps_left: cfg.jumps,
            symmetric: cfg.symmetric && cfg.bindings.windows(2).all(|w| w[0] == w[1]),
        }
    }

    /// The fingerprint the explorer keeps instead of the state. Where every actor runs the same
    /// binding, states that differ only by which actor did what behave alike up to renaming
    /// the actors, so the fingerprint is the least over every renaming: one state to explore
    /// instead of up to six.
    pub fn fingerprint(&self) -> u64 {
        if !self.symmetric {
            return self.fingerprint_renamed(&[]);
        }
        let n = self.actors.len();
        let mut best = u64::MAX;
        for rename in renamings(n) {
            best = best.min(self.fingerprint_renamed(&rename));
        }
        best
    }

    /// The fingerprint with actor `i` renamed `rename[i]` everywhere it is named (empty: as is).
    fn fingerprint_renamed(&self, rename: &[u8]) -> u64 {
        let to = |a: u8| rename.get(usize::from(a)).copied().unwrap_or(a);
        let mut h = DefaultHasher::new();
        self.now.hash(&mut h);
        self.journal.hash_renamed(&mut h, rename);
        let mut actors: Vec<(u8, &Actor)> = self
            .actors
            .iter()
            .enumerate()
            .map(|(i, a)| (to(u8::try_from(i).unwrap_or(u8::MAX)), a))
            .collect();
        actors.sort_by_key(|(i, _)| *i);
        for (_, a) in actors {
            a.hash(&mut h);
        }
        let mut locks: Vec<(u64, u8)> = self.locks.iter().map(|(t, a)| (*t, to(*a))).collect();
        locks.sort_unstable();
        locks.hash(&mut h);
        self.service.applied.hash(&mut h);
        self.service.saved.hash(&mut h);
        for r in &self.service.requests {
            (to(r.actor), r.attempt, r.land_by, r.answer).hash(&mut h);
        }
        (
            self.lease,
            self.premise_moved_at,
            self.store,
            self.conflicts_left,
            self.confirmed,
            self.fences_left,
            self.crashes_left,
            self.jumps_left,
        )
            .hash(&mut h);
        h.finish()
    }

    /// Neither revoked nor expired.
    fn lease_live(&self, cfg: &Config) -> bool {
        self.lease == Lease::Live && cfg.lease_expires.is_none_or(|at| self.now < at)
    }

    /// What a lease read answers now: an error while the store is down.
    fn lease_read(&self, live: bool) -> LeaseVerdict {
        if self.store == Store::Down {
            LeaseVerdict::Error {
                message: "the lease store is unreachable".into(),
            }
        } else {
            lease_verdict(live)
        }
    }

    fn release(&mut self, actor: u8) {
        self.locks.retain(|(_, a)| *a != actor);
    }

    fn lock_free(&self, token: u64) -> bool {
        !self.locks.iter().any(|(t, _)| *t == token)
    }

    fn take_lock(&mut self, token: u64, actor: u8) -> bool {
        if self.lock_free(token) {
            self.locks.push((token, actor));
            self.locks.sort_unstable();
            true
        } else {
            false
        }
    }

    fn look(&self) -> Look {
        if self.service.applied > 1 {
            Look::Several
        } else if self.service.applied > 0 {
            Look::Found
        } else {
            Look::NotFound
        }
    }

    /// The earliest time by which a request the service has not processed must have been.
    fn pending_land_by(&self) -> Option<i64> {
        self.service
            .requests
            .iter()
            .filter(|r| r.answer.is_none())
            .map(|r| r.land_by)
            .min()
    }

    fn end_attempt(&mut self, i: u8) {
        self.actors[usize::from(i)].pc = Pc::Idle;
        self.release(i);
    }
}

/// Every step enabled in `s`.
pub fn actions(cfg: &Config, s: &State) -> Vec<Action> {
    let mut out = Vec::new();
    for (i, a) in s.actors.iter().enumerate() {
        let i = u8::try_from(i).unwrap_or(u8::MAX);
        match &a.pc {
            Pc::Idle => {
                if a.attempt < cfg.attempts {
                    out.push(Action::Begin(i));
                }
            }
            Pc::Await { .. } => {
                let req = s
                    .service
                    .requests
                    .iter()
                    .find(|r| r.actor == i && r.attempt == a.attempt);
                match req.and_then(|r| r.answer) {
                    Some(_) => {
                        out.push(Action::Answer(i));
                        if cfg.lossy {
                            out.push(Action::GiveUp(i));
                        }
                    }
                    None => out.push(Action::GiveUp(i)),
                }
            }
            _ => out.push(Action::Step(i)),
        }
        if a.pc != Pc::Idle && s.crashes_left > 0 {
            out.push(Action::Crash(i));
        }
    }
    for (n, r) in s.service.requests.iter().enumerate() {
        let n = u8::try_from(n).unwrap_or(u8::MAX);
        if r.answer.is_some() {
            continue;
        }
        out.push(Action::Process(n));
        let replays = cfg.service_tier == Tier::One
            && s.service.saved.is_some_and(|(_, at)| s.now < at + WINDOW);
        if !replays {
            if cfg.server_errors {
                out.push(Action::ServerError(n, false));
                out.push(Action::ServerError(n, true));
            }
            if cfg.lossy {
                out.push(Action::Reject(n));
                out.push(Action::Lose(n));
            }
        }
    }
    let clock_ok = |to: i64| to <= cfg.horizon && s.pending_land_by().is_none_or(|d| to < d);
    if clock_ok(s.now + 1) {
        out.push(Action::Tick);
    }
    if s.jumps_left > 0 && clock_ok(s.now + JUMP) {
        out.push(Action::Jump);
    }
    if cfg.revoke && s.lease == Lease::Live {
        out.push(Action::Revoke);
    }
    if cfg.move_premise && s.premise_moved_at.is_none() {
        out.push(Action::MovePremise);
    }
    if cfg.store_outage && s.store != Store::Restored {
        out.push(Action::StoreFlip);
    }
    if s.conflicts_left > 0 && !s.journal.0.is_empty() {
        for p in 0..OTHER_PAYLOADS.len() {
            out.push(Action::Conflict(u8::try_from(p).unwrap_or(0)));
        }
    }
    if cfg.confirmations && !s.confirmed && s.service.applied > 0 {
        out.push(Action::Confirm);
    }
    if cfg.settles && resolution(s) == Some("AMBIGUOUS") {
        out.push(Action::Settle);
    }
    if s.fences_left > 0 {
        for (i, a) in s.actors.iter().enumerate() {
            if matches!(a.pc, Pc::Send { .. }) {
                out.push(Action::Fence(u8::try_from(i).unwrap_or(u8::MAX)));
            }
        }
    }
    out
}

/// The step a calm world takes: the lease store comes back, the service processes every
/// request, answers arrive, actors step. `None` when every actor is idle: the caller lets time pass and starts a retry.
pub fn calm_action(s: &State) -> Option<Action> {
    // A calm world's lease store answers.
    if s.store == Store::Down {
        return Some(Action::StoreFlip);
    }
    if let Some(n) = s.service.requests.iter().position(|r| r.answer.is_none()) {
        return u8::try_from(n).ok().map(Action::Process);
    }
    for (i, a) in s.actors.iter().enumerate() {
        let i = u8::try_from(i).ok()?;
        match &a.pc {
            Pc::Idle => {}
            Pc::Await { .. } => {
                let answered = s
                    .service
                    .requests
                    .iter()
                    .any(|r| r.actor == i && r.attempt == a.attempt && r.answer.is_some());
                return Some(if answered {
                    Action::Answer(i)
                } else {
                    Action::GiveUp(i)
                });
            }
            _ => return Some(Action::Step(i)),
        }
    }
    None
}

/// Apply `action` to `s`. Returns the next state and any breach the transition itself commits.
pub fn apply(cfg: &Config, s: &State, action: Action) -> (State, Option<Breach>) {
    let mut n = s.clone();
    let mut breach = None;
    match action {
        Action::Begin(i) => {
            let a = &mut n.actors[usize::from(i)];
            a.attempt = a.attempt.saturating_add(1);
            a.pc = Pc::Start;
        }
        Action::Crash(i) => {
            n.crashes_left -= 1;
            n.end_attempt(i);
        }
        Action::Step(i) => breach = step(cfg, &mut n, i),
        Action::Answer(i) | Action::GiveUp(i) => {
            let a = n.actors[usize::from(i)].clone();
            let pos = n
                .service
                .requests
                .iter()
                .position(|r| r.actor == i && r.attempt == a.attempt);
            let got = pos.and_then(|p| n.service.requests[p].answer);
            let answer = match (action, got) {
                (Action::Answer(_), Some(ans)) => ans,
                _ => Ans::Unknown,
            };
            // A processed request's answer is consumed; an unprocessed one stays at the service.
            if let Some(p) = pos.filter(|p| n.service.requests[*p].answer.is_some()) {
                n.service.requests.remove(p);
            }
            if let Pc::Await { token, via } = a.pc {
                n.actors[usize::from(i)].pc = Pc::AfterSend { token, via, answer };
            }
        }
        Action::Process(r) => process(cfg, &mut n, usize::from(r), None),
        Action::ServerError(r, applied) => process(cfg, &mut n, usize::from(r), Some(applied)),
        Action::Reject(r) => answer_request(&mut n, usize::from(r), Ans::Definite),
        Action::Lose(r) => answer_request(&mut n, usize::from(r), Ans::Unknown),
        Action::Tick => {
            n.now += 1;
            age_out(&mut n);
        }
        Action::Jump => {
            n.now += JUMP;
            n.jumps_left -= 1;
            age_out(&mut n);
        }
        Action::Revoke => {
            n.lease = Lease::Revoked {
                at_len: n.journal.0.len(),
            };
        }
        Action::MovePremise => n.premise_moved_at = Some(n.now),
        Action::StoreFlip => {
            n.store = match n.store {
                Store::Up => Store::Down,
                Store::Down | Store::Restored => Store::Restored,
            };
        }
        Action::Conflict(p) => {
            n.conflicts_left -= 1;
            let other = OTHER_PAYLOADS[usize::from(p) % OTHER_PAYLOADS.len()];
            let events = transition::conflict(
                n.journal.0.iter().map(|(_, e, _)| e.as_ref()),
                other,
                KEY_PAYLOAD_HASH,
            );
            let now = n.now;
            n.journal.append(now, events);
        }
        Action::Confirm => {
            n.confirmed = true;
            let events = transition::confirm(&n.journal.state(), &confirmation());
            let now = n.now;
            n.journal.append(now, events);
        }
        Action::Fence(i) => breach = fence(&mut n, i),
        Action::Settle => settle(&mut n),
    }
    // Answers nobody will read are dropped, so they do not split states.
    let actors = n.actors.clone();
    n.service.requests.retain(|r| {
        r.answer.is_none()
            || matches!(actors.get(usize::from(r.actor)), Some(a) if a.attempt == r.attempt && matches!(a.pc, Pc::Await { .. }))
    });
    (n, breach)
}

/// Times older than anything decided on them still tells apart are moved up to the oldest that
/// does: a premise read past the age bound is stale however old, and a premise that moved more
/// than [`FACTS_BOUND`] ago is too old to send on however long ago. States that differ only there
/// behave alike, and are one state to the explorer.
fn age_out(n: &mut State) {
    let now = n.now;
    let oldest_read = now - MAX_READ_AGE - 1;
    for a in &mut n.actors {
        if let Pc::Dispatch1 { read_at, .. } | Pc::RecTx { read_at, .. } = &mut a.pc {
            *read_at = (*read_at).max(oldest_read);
        }
    }
    if let Some(m) = &mut n.premise_moved_at {
        *m = (*m).max(now - FACTS_BOUND);
    }
}

fn answer_request(n: &mut State, r: usize, ans: Ans) {
    if let Some(req) = n.service.requests.get_mut(r) {
        req.answer = Some(ans);
    }
}

/// The service processes request `r`: normally, or with a 500 (`Some(applied)`).
fn process(cfg: &Config, n: &mut State, r: usize, server_error: Option<bool>) {
    let replay = match (cfg.service_tier, n.service.saved) {
        (Tier::One, Some((ans, at))) if n.now < at + WINDOW => Some(ans),
        _ => None,
    };
    let ans = match (replay, server_error) {
        (Some(Ans::ServerError | Ans::SavedError), _) => Ans::SavedError,
        (Some(Ans::Done | Ans::Replayed), _) => Ans::Replayed,
        (Some(saved), _) => saved,
        (None, None) => {
            n.service.applied = (n.service.applied + 1).min(3);
            Ans::Done
        }
        (None, Some(applied)) => {
            if applied {
                n.service.applied = (n.service.applied + 1).min(3);
            }
            Ans::ServerError
        }
    };
    if cfg.service_tier == Tier::One && replay.is_none() {
        n.service.saved = Some((ans, n.now));
    }
    answer_request(n, r, ans);
}

/// One step of actor `i`'s attempt, deciding with the real core.
fn step(cfg: &Config, n: &mut State, i: u8) -> Option<Breach> {
    let idx = usize::from(i);
    let binding = cfg.bindings[idx];
    let attempt = n.actors[idx].attempt;
    let me = holder(i, attempt);
    let now = n.now;
    let has_lookup = cfg.has_lookup();
    let pc = n.actors[idx].pc.clone();
    let mut next = Pc::Idle;
    match pc {
        Pc::Idle | Pc::Await { .. } => return None,
        Pc::Start => {
            let state = n.journal.state();
            next = match (plan_submit(&state, KEY_PAYLOAD_HASH), binding.recover_only) {
                (SubmitPlan::Fresh, true) | (SubmitPlan::Replay(_), _) => Pc::Idle,
                (SubmitPlan::Fresh, false) => Pc::Lock1 { fresh: true },
                (SubmitPlan::Continue, _) => Pc::Authorize,
                (SubmitPlan::Recover(_), _) => Pc::Observe {
                    seen: n.journal.0.len(),
                },
                (SubmitPlan::Conflict { .. }, _) => Pc::Idle,
            };
        }
        Pc::Authorize => {
            let state = n.journal.state();
            let first = state.first().cloned().unwrap_or_else(|| proposal(cfg));
            let lease = n.lease_read(n.lease_live(cfg));
            let events = transition::authorize(&state, &first, &lease, json!({}));
            next = match events.last() {
                Some(Event::Authorized(_)) => Pc::Lock1 { fresh: false },
                Some(_) => Pc::Idle,
                None => Pc::Start,
            };
            n.journal.append(now, events);
        }
        Pc::Lock1 { fresh } => {
            if n.take_lock(1, i) {
                next = Pc::Premises1 { fresh };
            }
        }
        Pc::Premises1 { fresh } => {
            next = Pc::Dispatch1 {
                fresh,
                premise_ok: n.premise_moved_at.is_none(),
                read_at: now,
                early_lease: cfg.stale_lease_read.then(|| n.lease_live(cfg)),
            };
        }
        Pc::Dispatch1 {
            fresh,
            premise_ok,
            read_at,
            early_lease,
        } => {
            let state = n.journal.state();
            let lease = n.lease_read(early_lease.unwrap_or(n.lease_live(cfg)));
            let hold = holding(i, attempt, now);
            let recheck = recheck(premise_ok, lease, read_at);
            let events = if fresh {
                transition::propose_and_dispatch(
                    &state,
                    &proposal(cfg),
                    &recheck,
                    json!({}),
                    None,
                    &[],
                    &hold,
                )
            } else {
                transition::dispatch_first(&state, KEY_PAYLOAD_HASH, &recheck, None, &[], &hold)
            };
            next = match events.last() {
                Some(Event::Dispatched(_)) => Pc::Send {
                    token: 1,
                    deadline: hold.deadline_ms,
                    via: Via::FirstSend,
                },
                Some(_) => Pc::Idle,
                None => Pc::Start,
            };
            n.journal.append(now, events);
        }
        Pc::Observe { seen } => {
            let EffectState::InFlight { first, claim } = n.journal.state_at(seen) else {
                return end(n, i, Pc::Start);
            };
            let lock_free = n.lock_free(claim.token);
            let effective = tier_facts(cfg, &binding).effective(&first, &claim, now);
            next = match plan_takeover(&claim, now, lock_free, effective) {
                TakeoverPlan::Wait { .. } => Pc::Idle,
                TakeoverPlan::Take(reason) => Pc::TakeLock {
                    seen,
                    reason,
                    at: now,
                    effective,
                },
            };
        }
        Pc::TakeLock {
            seen,
            reason,
            at,
            effective,
        } => {
            let EffectState::InFlight { claim, .. } = n.journal.state_at(seen) else {
                return end(n, i, Pc::Idle);
            };
            if n.take_lock(claim.token + 1, i) {
                next = Pc::TakeTx {
                    seen,
                    reason,
                    at,
                    effective,
                };
            }
        }
        Pc::TakeTx {
            seen,
            reason,
            at,
            effective,
        } => {
            let EffectState::InFlight {
                claim: seen_claim, ..
            } = n.journal.state_at(seen)
            else {
                return end(n, i, Pc::Idle);
            };
            let state = n.journal.state();
            let events = transition::takeover(
                &state,
                &seen_claim,
                reason,
                at,
                SETTLE,
                &holding(i, attempt, now),
            );
            let blocked = events.is_empty()
                && matches!(&state, EffectState::InFlight { claim, .. } if claim.same_decision(&seen_claim));
            if blocked {
                end(n, i, Pc::Start);
                return Some(Breach::TakeoverBlockedByNote);
            }
            next = if events.is_empty() {
                Pc::Start
            } else {
                Pc::RecPremises {
                    token: seen_claim.token + 1,
                    effective,
                    lookup: None,
                }
            };
            n.journal.append(now, events);
        }
        Pc::RecPremises {
            token,
            effective,
            lookup,
        } => {
            next = Pc::RecTx {
                token,
                effective,
                lookup,
                premise_ok: n.premise_moved_at.is_none(),
                read_at: now,
                early_lease: cfg.stale_lease_read.then(|| n.lease_live(cfg)),
            };
        }
        Pc::RecTx {
            token,
            effective,
            lookup,
            premise_ok,
            read_at,
            early_lease,
        } => {
            let state = n.journal.state();
            let lease = n.lease_read(early_lease.unwrap_or(n.lease_live(cfg)));
            let transient = matches!(lease, LeaseVerdict::Error { .. });
            let facts = RecoveryFacts {
                tier: tier_facts(cfg, &binding),
                effective_at_takeover: effective,
                recheck: recheck(premise_ok, lease, read_at),
                transient,
                has_lookup,
                now_ms: now,
            };
            let hold = holding(i, attempt, now);
            let found = lookup.map(|(l, at)| (lookup_answer(l), at));
            let (events, plan) = transition::recover(
                &state,
                token,
                &facts,
                found.as_ref().map(|(l, at)| (l, *at)),
                &[],
                &hold,
            );
            next = match plan {
                None => Pc::Start,
                Some(RecoveryPlan::Lookup) if lookup.is_none() => {
                    Pc::RecLookup { token, effective }
                }
                Some(RecoveryPlan::Resend(via)) => Pc::Send {
                    token,
                    deadline: hold.deadline_ms,
                    via,
                },
                // Read too long before the write: the shell reads again under the same claim.
                Some(RecoveryPlan::Reread { .. }) => Pc::RecPremises {
                    token,
                    effective,
                    lookup,
                },
                Some(_) => Pc::Idle,
            };
            n.journal.append(now, events);
        }
        Pc::RecLookup { token, effective } => {
            next = Pc::RecPremises {
                token,
                effective,
                lookup: Some((n.look(), now)),
            };
        }
        Pc::Send {
            token,
            deadline,
            via,
        } => {
            let state = n.journal.state();
            if transition::may_send(&state, token, &me) && now < deadline - SETTLE {
                let breach = send_breach(cfg, n, token);
                n.service.requests.push(Request {
                    actor: i,
                    attempt,
                    land_by: deadline,
                    answer: None,
                });
                n.actors[idx].pc = Pc::Await { token, via };
                return breach;
            }
            // Not sent: a holder that still holds the claim withdraws its dispatch (its budget
            // ran out, or the service's confirmation came first, and then it plans again).
            let landed = transition::holds_claim(&state, token, &me)
                && !transition::may_send(&state, token, &me);
            n.journal
                .append(now, transition::withdraw(&state, token, &me, "not sent"));
            if landed {
                next = Pc::Start;
            }
        }
        Pc::AfterSend { token, via, answer } => {
            let lookup = transition::wants_lookup(&send_answer(answer), via, has_lookup)
                .then(|| (n.look(), now));
            next = Pc::Record {
                token,
                via,
                answer,
                lookup,
            };
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
                has_lookup,
                now,
                found.as_ref().map(|(l, at)| (l, *at)),
            );
            n.journal.append(now, events);
        }
    }
    end(n, i, next)
}

/// Move actor `i` on. An attempt that ends, or starts its round again, holds no lock: the shell
/// drops every lock it took when a step returns.
fn end(n: &mut State, i: u8, next: Pc) -> Option<Breach> {
    match next {
        Pc::Idle => n.end_attempt(i),
        Pc::Start => {
            n.release(i);
            n.actors[usize::from(i)].pc = Pc::Start;
        }
        other => n.actors[usize::from(i)].pc = other,
    }
    None
}

fn tier_facts(cfg: &Config, binding: &Binding) -> TierFacts {
    TierFacts {
        bound: binding.tier,
        window_ms: Some(WINDOW),
        margin_ms: MARGIN,
        has_lookup: cfg.has_lookup(),
    }
}

/// At the instant of a send under `token`: was the lease revoked before its `DISPATCHED` (or
/// expired when it was written), did that record's re-check hold, and did the facts, as the
/// world's history has them, still hold within [`FACTS_BOUND`] of now?
fn send_breach(cfg: &Config, n: &State, token: u64) -> Option<Breach> {
    let (pos, written, recheck) =
        n.journal
            .0
            .iter()
            .enumerate()
            .rev()
            .find_map(|(p, (at, e, _))| match e.as_ref() {
                Event::Dispatched(d) if d.token == token => Some((p, *at, d.recheck.clone())),
                _ => None,
            })?;
    if let Lease::Revoked { at_len } = n.lease
        && pos >= at_len
    {
        return Some(Breach::SendAfterRevocation);
    }
    if cfg.lease_expires.is_some_and(|at| written >= at) {
        return Some(Breach::SendAfterRevocation);
    }
    let stale_fact = n.premise_moved_at.is_some_and(|m| n.now - m >= FACTS_BOUND);
    (!recheck.holds() || stale_fact).then_some(Breach::SendOnFailedRecheck)
}

/// Actor `i`'s caller goes away while its attempt is between its dispatch and its send: the
/// shell's fence, at every tier. The attempt withdraws its dispatch and ends; its send's window
/// must be closed at once.
fn fence(n: &mut State, i: u8) -> Option<Breach> {
    n.fences_left -= 1;
    let idx = usize::from(i);
    let Pc::Send { token, .. } = n.actors[idx].pc else {
        return None;
    };
    let me = holder(i, n.actors[idx].attempt);
    let state = n.journal.state();
    let now = n.now;
    let fenced = transition::may_send(&state, token, &me);
    n.journal
        .append(now, transition::withdraw(&state, token, &me, "fenced"));
    n.end_attempt(i);
    match n.journal.state() {
        EffectState::InFlight { claim, .. }
            if fenced && claim.sends_until.get(&token).is_some_and(|u| *u > now) =>
        {
            Some(Breach::FencedWindowOpen)
        }
        _ => None,
    }
}

/// An honest person looks at the service now and signs what they find; the core decides, on the
/// journal as it stands, whether that may end the effect (a refusal writes nothing). The record
/// hash a statement names is stood in for by the `AMBIGUOUS` record's position: the model has
/// one key and one ambiguity, and the check that the two agree is the core's.
fn settle(n: &mut State) {
    let history = || n.journal.0.iter().map(|(at, e, _)| (*at, e.as_ref()));
    let Ok(window) = settle::window(history()) else {
        return;
    };
    let finding = if n.service.applied > 0 {
        Finding::Applied {
            reference: "re_1".into(),
        }
    } else {
        Finding::NotApplied
    };
    let statement = Settlement {
        effect: "k".into(),
        ambiguous: window.index.to_string(),
        finding,
        person: "olga".into(),
        note: String::new(),
        looked_ms: n.now,
    };
    let ambiguous = window.index.to_string();
    let landed = landed_evidence(n.journal.0.iter().map(|(_, e, _)| e.as_ref()));
    // The person reads the model's one clock: no skew between signer and journal.
    if settle::check("k", &window, &ambiguous, &statement, &landed, (n.now, 0)).is_ok() {
        let now = n.now;
        let event = settle::settled(&window, statement, "ed25519", "");
        n.journal.append(now, vec![event]);
    }
}

/// The service's signed confirmation of the refund it holds under the key.
fn confirmation() -> Confirmed {
    Confirmed {
        via: "webhook".into(),
        event: Some("evt_1".into()),
        refund: Some("re_1".into()),
        status: Some("succeeded".into()),
        amount: Some(2000),
        payment_intent: None,
        charge: None,
        created: None,
    }
}

/// How the effect stands, for the state properties.
pub fn resolution(s: &State) -> Option<&'static str> {
    match s.journal.state() {
        EffectState::Resolved { resolution, .. } => Some(resolution.kind()),
        _ => None,
    }
}
