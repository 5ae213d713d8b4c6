//! The explorer: breadth-first over every reachable state of a [`Config`], keeping a 64-bit
//! fingerprint per state (and its parent, to rebuild a trace) rather than the state itself.
//! Safety properties are checked on every state and at every send; the liveness property is
//! checked from every state by running the world calm — no more faults, no environment moves,
//! retries without limit, one tick of backoff before each — and counting the attempts until the
//! effect resolves.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use serde::Serialize;

use super::spec::{Action, Breach, Config, Pc, State, actions, apply, calm_action, resolution};

/// A calm world must resolve the effect within this many attempts (one tick apart): fewer than a
/// tier-1 key lives, so "wait for the service to forget the key" does not count as resolving,
/// and as many as waiting out one claim's deadline and acting takes.
pub const CALM_ATTEMPTS: u32 = 4;

/// Exploration stops here: a model this large needs tighter bounds, not more memory.
pub const MAX_STATES: u64 = 20_000_000;

/// The properties, in report order.
pub const PROPERTIES: [&str; 10] = [
    "at_most_one_application",
    "no_send_under_a_dead_lease",
    "premises_held_at_every_send",
    "committed_only_when_applied",
    "closed_as_not_applied_only_when_not_applied",
    "never_ambiguous_over_a_confirmation",
    "one_note_per_refused_payload",
    "notes_never_block_a_takeover",
    "a_fenced_dispatch_leaves_no_window_open",
    "resolves_once_calm",
];

/// One configuration's result.
#[derive(Clone, Debug, Serialize)]
pub struct ModelReport {
    /// Configuration name.
    pub name: String,
    /// Actors.
    pub actors: usize,
    /// The service's tier.
    pub tier: u8,
    /// Distinct states reached.
    pub states: u64,
    /// Longest shortest path from the start.
    pub max_depth: u32,
    /// Every reachable state was explored (false: stopped at [`MAX_STATES`] or early).
    pub complete: bool,
    /// Property name → `holds` or `counterexample`.
    pub properties: BTreeMap<String, String>,
    /// Property name → the trace that breaks it.
    #[serde(skip)]
    pub traces: BTreeMap<String, Vec<String>>,
    /// Wall time.
    #[serde(skip)]
    pub seconds: f64,
    /// Stopped at the first counterexample (mutant runs).
    #[serde(skip)]
    pub stopped_early: bool,
}

impl ModelReport {
    /// The first property with a counterexample.
    pub fn first_broken(&self) -> Option<&str> {
        PROPERTIES
            .iter()
            .find(|p| self.properties.get(**p).map(String::as_str) == Some("counterexample"))
            .copied()
    }
}

struct Explorer<'a> {
    cfg: &'a Config,
    parents: HashMap<u64, (u64, Action)>,
    calm: HashMap<u64, Option<u32>>,
    broken: BTreeMap<String, Vec<String>>,
}

/// Explore every state of `cfg`. With `stop_early`, return at the first counterexample.
pub fn explore(cfg: &Config, stop_early: bool, progress: &mut dyn FnMut(u64, u32)) -> ModelReport {
    let started = Instant::now();
    let init = State::initial(cfg);
    let mut ex = Explorer {
        cfg,
        parents: HashMap::new(),
        calm: HashMap::new(),
        broken: BTreeMap::new(),
    };
    let init_fp = init.fingerprint();
    ex.parents.insert(init_fp, (init_fp, Action::Tick));
    let mut queue = VecDeque::from([(init, 0u32)]);
    let mut max_depth = 0;
    let mut states = 0u64;
    while let Some((s, depth)) = queue.pop_front() {
        states += 1;
        max_depth = max_depth.max(depth);
        if states.is_multiple_of(100_000) {
            progress(states, depth);
        }
        let fp = s.fingerprint();
        ex.check_state(&s, fp);
        for action in actions(cfg, &s) {
            let (next, breach) = apply(cfg, &s, action);
            let nfp = next.fingerprint();
            let fresh = !ex.parents.contains_key(&nfp);
            if fresh {
                ex.parents.insert(nfp, (fp, action));
            }
            if let Some(b) = breach {
                let name = match b {
                    Breach::SendAfterRevocation => "no_send_under_a_dead_lease",
                    Breach::SendOnFailedRecheck => "premises_held_at_every_send",
                    Breach::TakeoverBlockedByNote => "notes_never_block_a_takeover",
                    Breach::FencedWindowOpen => "a_fenced_dispatch_leaves_no_window_open",
                };
                ex.record(name, fp, Some(action), Vec::new());
            }
            if fresh {
                queue.push_back((next, depth + 1));
            }
        }
        if (stop_early && !ex.broken.is_empty()) || states >= MAX_STATES {
            break;
        }
    }
    let complete = queue.is_empty();
    let stopped_early = stop_early && !ex.broken.is_empty();
    ModelReport {
        name: cfg.name.clone(),
        actors: cfg.bindings.len(),
        tier: u8::from(cfg.service_tier),
        states,
        max_depth,
        complete,
        properties: super::walk::verdicts(&PROPERTIES, &ex.broken),
        traces: ex.broken,
        seconds: started.elapsed().as_secs_f64(),
        stopped_early,
    }
}

impl Explorer<'_> {
    fn check_state(&mut self, s: &State, fp: u64) {
        let applied = s.service.applied;
        if applied > 1 {
            self.record("at_most_one_application", fp, None, Vec::new());
        }
        match resolution(s) {
            Some("COMMITTED") if applied == 0 => {
                self.record("committed_only_when_applied", fp, None, Vec::new());
            }
            Some("APPLIED_TWICE") if applied < 2 => {
                self.record("committed_only_when_applied", fp, None, Vec::new());
            }
            Some("REFUSED" | "FAILED") if applied > 0 => {
                self.record(
                    "closed_as_not_applied_only_when_not_applied",
                    fp,
                    None,
                    Vec::new(),
                );
            }
            Some("AMBIGUOUS") if confirmed_before_ambiguous(s) => {
                self.record("never_ambiguous_over_a_confirmation", fp, None, Vec::new());
            }
            _ => {}
        }
        if !notes_bounded(s) {
            self.record("one_note_per_refused_payload", fp, None, Vec::new());
        }
        if !self.broken.contains_key("resolves_once_calm")
            && let Err(tail) = self.calm_from(s)
        {
            self.record("resolves_once_calm", fp, None, tail);
        }
    }

    /// Attempts a calm world needs from `s` to resolve the effect, or the calm run that fails.
    fn calm_from(&mut self, s: &State) -> Result<u32, Vec<String>> {
        let mut path: Vec<(u64, u32)> = Vec::new();
        let mut cur = s.clone();
        let mut attempts = 0u32;
        let mut shown = Vec::new();
        let total = loop {
            let fp = cur.fingerprint();
            if let Some(known) = self.calm.get(&fp) {
                break known.map(|k| k + attempts);
            }
            path.push((fp, attempts));
            if resolution(&cur).is_some() {
                break Some(attempts);
            }
            if attempts > CALM_ATTEMPTS || path.len() > 4_000 {
                break None;
            }
            let action = match calm_action(&cur) {
                Some(a) => a,
                None => {
                    // Every actor is idle: one tick of backoff, then a retry by the first
                    // actor that can submit.
                    attempts += 1;
                    cur.now += 1;
                    shown.push(format!("t={} (calm) a retry starts", cur.now));
                    let who = self
                        .cfg
                        .bindings
                        .iter()
                        .position(|b| !b.recover_only)
                        .unwrap_or(0);
                    Action::Begin(u8::try_from(who).unwrap_or(0))
                }
            };
            let (next, _) = apply(self.cfg, &cur, action);
            shown.push(describe(&cur, action, &next));
            cur = next;
        };
        for (fp, at) in path {
            self.calm.insert(fp, total.map(|t| t - at));
        }
        match total {
            Some(t) if t <= CALM_ATTEMPTS => Ok(t),
            _ => {
                shown.push(format!(
                    "still unresolved after {CALM_ATTEMPTS} calm attempts: {}",
                    summary(&cur)
                ));
                Err(shown)
            }
        }
    }

    fn record(&mut self, property: &str, fp: u64, last: Option<Action>, tail: Vec<String>) {
        if self.broken.contains_key(property) {
            return;
        }
        let mut trace = self.trace_to(fp);
        if let Some(a) = last {
            let s = self.replay(fp);
            let (next, _) = apply(self.cfg, &s, a);
            trace.push(describe(&s, a, &next));
        }
        trace.extend(tail);
        self.broken.insert(property.to_owned(), trace);
    }

    fn actions_to(&self, fp: u64) -> Vec<Action> {
        path_to(&self.parents, fp)
    }

    fn replay(&self, fp: u64) -> State {
        let mut s = State::initial(self.cfg);
        for a in self.actions_to(fp) {
            s = apply(self.cfg, &s, a).0;
        }
        s
    }

    fn trace_to(&self, fp: u64) -> Vec<String> {
        let mut s = State::initial(self.cfg);
        let mut out = Vec::new();
        for a in self.actions_to(fp) {
            let (next, _) = apply(self.cfg, &s, a);
            out.push(describe(&s, a, &next));
            s = next;
        }
        out
    }
}

/// Whether the journal holds the service's confirmation before its `AMBIGUOUS`: recovery wrote
/// "cannot know" over the target's own word that the effect landed.
fn confirmed_before_ambiguous(s: &State) -> bool {
    use interlock_core::Event as E;
    let mut confirmed = false;
    for (_, e, _) in &s.journal.0 {
        match e.as_ref() {
            E::Confirmed(_) => confirmed = true,
            E::Ambiguous(_) if confirmed => return true,
            _ => {}
        }
    }
    false
}

/// At most one note per refused payload, and at most the core's bound in all: a caller looping
/// conflicting submissions does not grow the key's history.
fn notes_bounded(s: &State) -> bool {
    use interlock_core::Event as E;
    let mut seen: Vec<&str> = Vec::new();
    for (_, e, _) in &s.journal.0 {
        if let E::Refused(r) = e.as_ref()
            && !r.is_final
            && r.code == interlock_core::RefusalCode::ConflictingPayload
        {
            if seen.contains(&r.payload_hash.as_str()) {
                return false;
            }
            seen.push(&r.payload_hash);
        }
    }
    seen.len() <= interlock_core::transition::MAX_CONFLICT_NOTES
}

/// One line of a trace: the time, who did what, and what it wrote or changed.
pub fn describe(before: &State, action: Action, after: &State) -> String {
    let who = |i: u8| {
        let a = &after.actors[usize::from(i)];
        format!("actor {i} (attempt {})", a.attempt)
    };
    let what = match action {
        Action::Step(i) => format!("{} {}", who(i), pc_name(&before.actors[usize::from(i)].pc)),
        Action::Begin(i) => format!("{} starts an attempt", who(i)),
        Action::Answer(i) => format!("{} hears the service's answer", who(i)),
        Action::GiveUp(i) => format!("{} gives up waiting (timeout)", who(i)),
        Action::Crash(i) => format!("{} crashes", who(i)),
        Action::Process(r) => format!("service processes request {r}"),
        Action::ServerError(r, applied) => {
            format!("service answers request {r} with a 500 (applied: {applied})")
        }
        Action::Reject(r) => format!("service refuses request {r} (4xx)"),
        Action::Lose(r) => format!("request {r} is lost"),
        Action::Tick => "one tick passes".into(),
        Action::Jump => "the clock jumps forward".into(),
        Action::Revoke => "the lease is revoked".into(),
        Action::MovePremise => "a premise moves (refunded by others)".into(),
        Action::StoreFlip => match after.store {
            super::spec::Store::Down => "the lease store goes down".into(),
            _ => "the lease store comes back".into(),
        },
        Action::Conflict(p) => format!(
            "a caller submits payload {} under the key",
            super::spec::OTHER_PAYLOADS[usize::from(p) % super::spec::OTHER_PAYLOADS.len()]
        ),
        Action::Confirm => "the service confirms the refund (signed webhook)".into(),
        Action::Fence(i) => format!("{}'s caller goes away before its send (fenced)", who(i)),
        Action::Settle => format!(
            "a person looks at the service (applied: {}) and signs what they found",
            before.service.applied
        ),
    };
    let mut notes = Vec::new();
    for (_, e, _) in after.journal.0.iter().skip(before.journal.0.len()) {
        notes.push(record_name(e.as_ref()));
    }
    if after.service.applied != before.service.applied {
        notes.push(format!("service applied: {}", after.service.applied));
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!(" → {}", notes.join(", "))
    };
    format!("t={} {what}{notes}", before.now)
}

fn record_name(e: &interlock_core::Event) -> String {
    use interlock_core::Event as E;
    match e {
        E::Dispatched(d) => format!(
            "DISPATCHED(token {}, deadline {}{})",
            d.token,
            d.deadline_ms,
            if d.resend { ", resend" } else { "" }
        ),
        E::Claimed(c) => format!(
            "CLAIMED(token {}, {:?}, earlier sends land by {})",
            c.token, c.reason, c.prior_until_ms
        ),
        E::Committed(c) => format!("COMMITTED({:?})", c.via),
        E::Refused(r) => format!(
            "REFUSED({}{})",
            r.code,
            if r.is_final { "" } else { ", note" }
        ),
        E::LateResult(l) => format!("LATE_RESULT(token {}, {})", l.token, l.answer),
        E::Failed(f) => format!("FAILED({})", f.code),
        E::Settled(s) => format!("SETTLED({:?})", s.statement.finding),
        other => other.kind().to_owned(),
    }
}

fn pc_name(pc: &Pc) -> String {
    match pc {
        Pc::Start => "reads the journal".into(),
        Pc::Authorize => "authorizes its journaled proposal (lease read in the transaction)".into(),
        Pc::Lock1 { .. } => "takes liveness lock 1".into(),
        Pc::Premises1 { .. } => "reads the premises".into(),
        Pc::Dispatch1 { fresh: true, .. } => {
            "proposes, authorizes and dispatches (lease read in the transaction)".into()
        }
        Pc::Dispatch1 { .. } => "writes the first dispatch (lease read in the transaction)".into(),
        Pc::Observe { seen } => {
            format!("checks the holder's liveness on its snapshot of {seen} records")
        }
        Pc::TakeLock { reason, .. } => format!("takes the next lock to take over ({reason:?})"),
        Pc::TakeTx { .. } => "writes its takeover".into(),
        Pc::RecPremises { .. } => "re-reads the premises".into(),
        Pc::RecTx { lookup, .. } => {
            format!("decides recovery in the transaction (lookup: {lookup:?})")
        }
        Pc::RecLookup { .. } => "looks the effect up".into(),
        Pc::Send { token, .. } => format!("sends under claim {token}"),
        Pc::AfterSend { answer, .. } => format!("reads answer {answer:?} and looks up if needed"),
        Pc::Record { answer, lookup, .. } => {
            format!("records answer {answer:?} (lookup {lookup:?})")
        }
        Pc::Idle | Pc::Await { .. } => "waits".into(),
    }
}

/// A one-line summary of a state.
pub fn summary(s: &State) -> String {
    format!(
        "t={} journal [{}], service applied {}, {} request(s) at the service",
        s.now,
        s.journal
            .0
            .iter()
            .map(|(_, e, _)| record_name(e.as_ref()))
            .collect::<Vec<_>>()
            .join(", "),
        s.service.applied,
        s.service.requests.len()
    )
}

/// The steps from the start to the state `fp`, read back from each state's parent and the step
/// that reached it (the start is its own parent).
pub fn path_to<A: Copy>(parents: &HashMap<u64, (u64, A)>, fp: u64) -> Vec<A> {
    let mut out = Vec::new();
    let mut cur = fp;
    while let Some((parent, action)) = parents.get(&cur) {
        if *parent == cur {
            break;
        }
        out.push(*action);
        cur = *parent;
    }
    out.reverse();
    out
}
