//! The guard of every append. Two attempts can plan on the same snapshot, and the world moves
//! between a read and the write that acts on it; so every record the gate writes is derived here
//! from the state the journal read inside its write transaction (and, where leases live in the
//! journal's store, from the lease as read in that same transaction). A plan that no longer holds
//! there derives nothing, and nothing is written. The gate shell gathers inputs and carries out
//! what these functions return; it decides nothing itself.

use serde_json::{Value, json};

use super::decide::{
    AfterSend, LookupAnswer, RecoveryInput, RecoveryPlan, RefusalDraft, SendAnswer, TwiceDraft,
    absorb, after_send, check_fresh, landed_via, plan_recovery, several,
};
use super::mutants::{self, Mutant};
use super::record::{
    AppliedTwice, Authorized, Claimed, Committed, Confirmed, Dispatched, Event, Failed, Holder,
    LateResult, LeaseVerdict, Proposed, Recheck, RefusalCode, Refused, Repair, TakeoverReason, Via,
};
use super::state::{Claim, EffectState, Resolution};
use super::tier::{Effective, Tier};

/// Who writes a claim or a dispatch, until when its send may run, and how old a premise read it
/// may still send on.
#[derive(Clone, Debug, PartialEq)]
pub struct Holding {
    /// The writer.
    pub holder: Holder,
    /// Its send is cut off, and its claim may be taken, after this time.
    pub deadline_ms: i64,
    /// When the record is written: the clock as read inside the write transaction.
    pub now_ms: i64,
    /// A dispatch or a resend stands only on premises read at most this long before `now_ms`.
    pub max_read_age_ms: i64,
}

/// Most notes refusing a conflicting payload one key keeps: one per distinct refused payload,
/// up to this many. A caller that keeps resubmitting other payloads is still answered with the
/// refusal; the history stops growing.
pub const MAX_CONFLICT_NOTES: usize = 16;

/// Most notes one key keeps that its lease store or premise source could not answer. A Temporal
/// retry every second through an hour's outage would otherwise add thousands of records to one
/// effect; past this many, each attempt is still answered with its note, unwritten.
pub const MAX_RETRY_NOTES: usize = 16;

/// `events` with a retry note left out when `history` already holds [`MAX_RETRY_NOTES`] of them;
/// the note left out is returned beside, for the attempt's answer. A note carries no decision, so
/// leaving it out changes no state.
pub fn bounded_retry_notes<'a>(
    history: impl IntoIterator<Item = &'a Event>,
    mut events: Vec<Event>,
) -> (Vec<Event>, Option<Refused>) {
    let is_note = |e: &Event| {
        matches!(e, Event::Refused(r) if !r.is_final
            && matches!(r.code, RefusalCode::LeaseError | RefusalCode::PremiseError))
    };
    let Some(last) = events.last().filter(|e| is_note(e)) else {
        return (events, None);
    };
    if history.into_iter().filter(|e| is_note(e)).count() < MAX_RETRY_NOTES {
        return (events, None);
    }
    let held = match last {
        Event::Refused(r) => Some(r.clone()),
        _ => None,
    };
    events.pop();
    (events, held)
}

/// Whether premises read as `recheck` says are young enough to dispatch or resend on when
/// `holding` writes: read at most `max_read_age_ms` before the write. A read whose time is not
/// known is not young enough. Between a premise read and the transaction that acts on it there is
/// no claim and no deadline; a process stalled there (a pause, a page of slow reads) would
/// otherwise send on facts minutes old, while a revocation in the same window is caught.
pub fn read_is_fresh(recheck: &Recheck, holding: &Holding) -> bool {
    if mutants::on(Mutant::PremisesHaveNoAge) {
        return true;
    }
    recheck
        .read_at_ms
        .is_some_and(|at| holding.now_ms.saturating_sub(at) <= holding.max_read_age_ms)
}

/// `PROPOSED` (when the key is new) and R4 at submit: `AUTHORIZED`, a final `lease` refusal, or
/// (store unreachable) a note that asks for a retry. `proposal` is either a new proposal for a key
/// that must still be absent, or the journaled first proposal of a key that must still be only
/// proposed: an attempt that lost the race to propose writes nothing and continues from the
/// journal's proposal (its lease, its premises, its target), never from its own.
pub fn authorize(
    state: &EffectState,
    proposal: &Proposed,
    lease: &LeaseVerdict,
    grant: Value,
) -> Vec<Event> {
    let mut events = match state {
        EffectState::Absent => vec![Event::Proposed(proposal.clone())],
        EffectState::Proposed { first } if first == proposal => Vec::new(),
        _ => return Vec::new(),
    };
    let hash = &proposal.payload_hash;
    events.push(match lease {
        LeaseVerdict::Live => Event::Authorized(Authorized {
            lease: proposal.lease.clone(),
            grant,
        }),
        LeaseVerdict::Error { message } => {
            Event::Refused(retry_note(RefusalCode::LeaseError, message, hash))
        }
        LeaseVerdict::Dead { .. }
        | LeaseVerdict::Spent { .. }
        | LeaseVerdict::NotSpender { .. }
        | LeaseVerdict::OverBudget { .. } => {
            let recheck = Recheck {
                broken: Vec::new(),
                lease: lease.clone(),
                premises_now: Default::default(),
                changes: Vec::new(),
                premise_error: None,
                read_at_ms: None,
                budgets: Vec::new(),
            };
            match check_fresh(&recheck) {
                Some(d) => Event::Refused(final_refusal(&d, Vec::new(), hash)),
                None => return Vec::new(),
            }
        }
    });
    events
}

/// The first dispatch (R1, R4, R5): `DISPATCHED` under token 1 when the lease read in this
/// transaction is live and the premises read just before still match; otherwise a final refusal,
/// or a retry note when the lease store or the premise source could not answer.
pub fn dispatch_first(
    state: &EffectState,
    payload_hash: &str,
    recheck: &Recheck,
    premise_unavailable: Option<&str>,
    repairs: &[Repair],
    holding: &Holding,
) -> Vec<Event> {
    match state {
        EffectState::Proposed { first } if first.payload_hash == payload_hash => {}
        _ => return Vec::new(),
    }
    // Decided only on a read young enough to send on; the caller reads again.
    if !read_is_fresh(recheck, holding) {
        return Vec::new();
    }
    if let LeaseVerdict::Error { message } = &recheck.lease {
        return vec![Event::Refused(retry_note(
            RefusalCode::LeaseError,
            message,
            payload_hash,
        ))];
    }
    if let (LeaseVerdict::Live, Some(message)) = (&recheck.lease, premise_unavailable) {
        return vec![Event::Refused(retry_note(
            RefusalCode::PremiseError,
            message,
            payload_hash,
        ))];
    }
    match check_fresh(recheck) {
        Some(d) => vec![Event::Refused(final_refusal(
            &d,
            repairs_for(recheck, repairs),
            payload_hash,
        ))],
        None => vec![Event::Dispatched(Dispatched {
            token: 1,
            holder: holding.holder.clone(),
            deadline_ms: holding.deadline_ms,
            payload_hash: payload_hash.to_owned(),
            recheck: recheck.clone(),
            resend: false,
        })],
    }
}

/// A new key's whole way to its first send, in one transaction: `PROPOSED`, R4 at submit and, once
/// authorized, the first dispatch on the same lease verdict and the premises read just before —
/// so a first send costs one durable write before it and one after. The records are exactly those
/// [`authorize`] and [`dispatch_first`] would write one after the other with nothing between them;
/// nothing is derived unless the key is still absent.
pub fn propose_and_dispatch(
    state: &EffectState,
    proposal: &Proposed,
    recheck: &Recheck,
    grant: Value,
    premise_unavailable: Option<&str>,
    repairs: &[Repair],
    holding: &Holding,
) -> Vec<Event> {
    if *state != EffectState::Absent || !read_is_fresh(recheck, holding) {
        return Vec::new();
    }
    let mut events = authorize(state, proposal, &recheck.lease, grant);
    if let Some(Event::Authorized(_)) = events.last() {
        let proposed = EffectState::Proposed {
            first: proposal.clone(),
        };
        events.extend(dispatch_first(
            &proposed,
            &proposal.payload_hash,
            recheck,
            premise_unavailable,
            repairs,
            holding,
        ));
    }
    events
}

/// Until when the previous holder's send may still land: its deadline, whatever the evidence for
/// the takeover. A holder seen dead (or one that gave up waiting and let its lock go) may have
/// left a request the service is still processing; the contract bounds that processing by the
/// claim's deadline, not by the moment the holder was seen gone.
pub fn prior_until(claim: &Claim, reason: TakeoverReason, now_ms: i64, settle_ms: i64) -> i64 {
    if mutants::on(Mutant::DeadHolderSettles) && reason == TakeoverReason::HolderDead {
        return claim.deadline_ms.min(now_ms.saturating_add(settle_ms));
    }
    claim.deadline_ms
}

/// `CLAIMED`, only if the claim is exactly the one the takeover was planned on: a resend, a late
/// answer or another takeover committed since then changes what the evidence proves.
pub fn takeover(
    state: &EffectState,
    seen: &Claim,
    reason: TakeoverReason,
    now_ms: i64,
    settle_ms: i64,
    holding: &Holding,
) -> Vec<Event> {
    let holds = |claim: &Claim| {
        if mutants::on(Mutant::NotesBlockTakeover) {
            return claim == seen;
        }
        claim.same_decision(seen)
            || (mutants::on(Mutant::TokenOnlyTakeover) && claim.token == seen.token)
    };
    match state {
        EffectState::InFlight { claim, .. } if holds(claim) => vec![Event::Claimed(Claimed {
            token: seen.token + 1,
            holder: holding.holder.clone(),
            deadline_ms: holding.deadline_ms,
            reason,
            prior_until_ms: prior_until(seen, reason, now_ms, settle_ms),
        })],
        _ => Vec::new(),
    }
}

/// The tier recovery acts on: the one journaled at the first proposal, which a binding may only
/// lower. A recoverer that claims more than the service promised when the effect was sent would
/// resend where the service cannot dedupe.
pub fn recovery_tier(journaled: u8, bound: Tier) -> Tier {
    if mutants::on(Mutant::BindingTier) {
        return bound;
    }
    Tier::try_from(journaled).unwrap_or(Tier::Three).max(bound)
}

/// The tier a recoverer acts on, and what demotes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TierFacts {
    /// The tier of the recovering binding ([`recovery_tier`] combines it with the journaled one).
    pub bound: Tier,
    /// A tier-1 service's dedupe window.
    pub window_ms: Option<i64>,
    /// A tier-1 window is trusted until `window − margin` after the first dispatch.
    pub margin_ms: i64,
    /// Whether the service can be asked by key.
    pub has_lookup: bool,
}

impl TierFacts {
    /// The tier recovery acts on at `now_ms` for an effect proposed as `first` and in flight
    /// under `claim`. The window is judged no earlier than the key's latest record: a clock
    /// stepped back since then does not reopen a window it had already closed.
    pub fn effective(&self, first: &Proposed, claim: &Claim, now_ms: i64) -> Effective {
        let tier = recovery_tier(first.tier, self.bound);
        // The shorter of the window journaled at the proposal and the one this binding claims:
        // a binding that claims a longer window than the service had cannot stretch it.
        let window = match (tier, self.window_ms, first.window_ms) {
            (Tier::One, Some(bound), Some(journaled)) => Some(bound.min(journaled)),
            (Tier::One, bound, None) => bound,
            _ => None,
        };
        super::tier::effective(
            tier,
            window,
            self.margin_ms,
            claim.first_dispatch_ms,
            now_ms.max(claim.seen_ms),
            self.has_lookup,
        )
    }
}

/// The facts a recoverer gathered for one step, besides the state itself.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveryFacts {
    /// The tier, judged again in the transaction: a tier-1 window that closed while the
    /// recoverer took over or read the premises is closed for its resend.
    pub tier: TierFacts,
    /// The tier as judged when the takeover was decided (only a mutant acts on it).
    pub effective_at_takeover: Effective,
    /// R4 (as read in the write transaction where leases live in the journal) and R5.
    pub recheck: Recheck,
    /// Whether the lease store or premise source failed in a way that may pass.
    pub transient: bool,
    /// Whether the target can be asked by key.
    pub has_lookup: bool,
    /// Now.
    pub now_ms: i64,
}

/// One recovery step under claim `token`, held by `holding.holder`: the recovery table decided on
/// the state inside the transaction. `lookup` is what a lookup answered and when it was asked:
/// "not found" speaks only for the moment it was asked, so it is that moment, not the time of
/// the decision, that must come after every earlier send's window. Returns the records to write (none when the claim has moved,
/// a lookup is needed first, or the step is to wait) and the plan they carry out (`None` when
/// the claim is no longer this recoverer's to act on).
pub fn recover(
    state: &EffectState,
    token: u64,
    facts: &RecoveryFacts,
    lookup: Option<(&LookupAnswer, i64)>,
    repairs: &[Repair],
    holding: &Holding,
) -> (Vec<Event>, Option<RecoveryPlan>) {
    let (first, claim) = match state {
        EffectState::InFlight { first, claim }
            if claim.token == token && claim.holder == holding.holder && !claim.dispatched =>
        {
            (first, claim)
        }
        _ => return (Vec::new(), None),
    };
    let effective = if mutants::on(Mutant::WindowJudgedAtTakeover) {
        facts.effective_at_takeover
    } else {
        facts.tier.effective(first, claim, facts.now_ms)
    };
    let input = RecoveryInput {
        effective,
        recheck: facts.recheck.clone(),
        has_lookup: facts.has_lookup,
        now_ms: lookup.map_or(facts.now_ms, |(_, asked_at)| asked_at),
        quiet_after_ms: claim.quiet_after(None),
        late_done: claim.late_done.clone(),
        transient: facts.transient,
        nothing_sent: claim.sends_until.is_empty(),
    };
    let mut plan = plan_recovery(&input, lookup.map(|(answer, _)| answer));
    if matches!(plan, RecoveryPlan::Resend(_)) && !read_is_fresh(&facts.recheck, holding) {
        plan = RecoveryPlan::Reread {
            reason: format!(
                "the premises were read more than {} ms before the resend would be written",
                holding.max_read_age_ms
            ),
        };
    }
    let hash = &first.payload_hash;
    let events = match &plan {
        RecoveryPlan::Resend(_) => vec![Event::Dispatched(Dispatched {
            token,
            holder: holding.holder.clone(),
            deadline_ms: holding.deadline_ms,
            payload_hash: hash.clone(),
            recheck: facts.recheck.clone(),
            resend: true,
        })],
        RecoveryPlan::CommitFound(via, result) => vec![Event::Committed(Committed {
            token,
            via: *via,
            result: result.clone(),
        })],
        RecoveryPlan::Refuse(d) => vec![Event::Refused(final_refusal(
            d,
            repairs_for(&facts.recheck, repairs),
            hash,
        ))],
        RecoveryPlan::Ambiguous(a) => vec![Event::Ambiguous(a.clone())],
        RecoveryPlan::AppliedTwice(d) => vec![applied_twice(token, d)],
        RecoveryPlan::Lookup | RecoveryPlan::Wait { .. } | RecoveryPlan::Reread { .. } => {
            Vec::new()
        }
    };
    (events, Some(plan))
}

/// Whether `holder` holds claim `token`, dispatched under it.
pub fn holds_claim(state: &EffectState, token: u64, holder: &Holder) -> bool {
    matches!(state, EffectState::InFlight { claim, .. }
        if claim.token == token && claim.dispatched && claim.holder == *holder)
}

/// Whether the holder of claim `token` may still send: the fencing re-read just before the send.
/// A zombie whose claim was taken while it stalled finds out here and sends nothing; so does a
/// holder whose effect the target confirmed (or a superseded send proved landed) meanwhile: it
/// withdraws, and the effect is committed on that evidence.
pub fn may_send(state: &EffectState, token: u64, holder: &Holder) -> bool {
    holds_claim(state, token, holder)
        && (mutants::on(Mutant::ConfirmationIgnored)
            || matches!(state, EffectState::InFlight { claim, .. } if claim.late_done.is_empty()))
}

/// What the holder of claim `token` records when it was fenced between its dispatch and its send
/// and withdraws the dispatch unsent: its own word that no request left under that token, which
/// ends that send's window at once. Without it the next attempt must wait out the claim's whole
/// deadline before a lookup's "not found" proves anything, and a caller whose every attempt is
/// fenced would push that wait out again at each try. Nothing is written once the claim moved.
pub fn withdraw(state: &EffectState, token: u64, holder: &Holder, why: &str) -> Vec<Event> {
    if mutants::on(Mutant::FencedDispatchKeepsWindow) || !holds_claim(state, token, holder) {
        return Vec::new();
    }
    vec![Event::LateResult(LateResult {
        token,
        answer: json!({ super::state::WITHDRAWN: why }),
    })]
}

/// What a confirmation by the target records: `CONFIRMED`; and, when the effect was committed
/// as another effect than the one confirmed, `APPLIED_TWICE` after it, as a late success would.
/// The caller checks first that the confirmation is about this effect (its payment, its amount)
/// and not already recorded.
pub fn confirm(state: &EffectState, confirmed: &Confirmed) -> Vec<Event> {
    let mut events = vec![Event::Confirmed(confirmed.clone())];
    if let EffectState::Resolved {
        resolution: Resolution::Committed(c),
        ..
    } = state
    {
        let all = distinct([&c.result, &super::state::confirmed_value(confirmed)]);
        if all.len() > 1 {
            events.push(applied_twice(
                c.token,
                &several(
                    &all,
                    "after the commit, the target confirmed another effect",
                ),
            ));
        }
    }
    events
}

/// What a submission of payload `hash` under a key bound to `recorded` records (R3): a note, once
/// per distinct refused payload and at most [`MAX_CONFLICT_NOTES`] per key (`history` is the
/// key's records as read in the write transaction). The caller is refused either way; a note
/// carries no decision, so a caller looping conflicting submissions grows nothing without bound.
pub fn conflict<'a>(
    history: impl IntoIterator<Item = &'a Event>,
    hash: &str,
    recorded: &str,
) -> Vec<Event> {
    let mut notes = 0;
    for e in history {
        if let Event::Refused(r) = e
            && !r.is_final
            && r.code == RefusalCode::ConflictingPayload
        {
            if r.payload_hash == hash && !mutants::on(Mutant::NotesBlockTakeover) {
                return Vec::new();
            }
            notes += 1;
        }
    }
    if notes >= MAX_CONFLICT_NOTES && !mutants::on(Mutant::NotesBlockTakeover) {
        return Vec::new();
    }
    vec![Event::Refused(conflict_note(hash, recorded))]
}

/// Whether a send's answer, recorded with `via` on success, needs a lookup first.
pub fn wants_lookup(answer: &SendAnswer, via: Via, has_lookup: bool) -> bool {
    after_send(answer, via, has_lookup, false, None) == AfterSend::Lookup
}

fn applied_twice(token: u64, d: &TwiceDraft) -> Event {
    Event::AppliedTwice(AppliedTwice {
        token,
        found: d.found.clone(),
        reason: d.reason.clone(),
    })
}

/// What a send under claim `token` records: its resolution while the claim is still its own (none
/// while the answer leaves it in flight), or `LATE_RESULT` once the claim was taken or the effect
/// resolved. Whether earlier sends are quiet is read from the claim in the transaction, as of the
/// moment the lookup (if any) was asked.
pub fn record_answer(
    state: &EffectState,
    token: u64,
    answer: &SendAnswer,
    via: Via,
    has_lookup: bool,
    now_ms: i64,
    lookup: Option<(&LookupAnswer, i64)>,
) -> Vec<Event> {
    let (first, claim) = match state {
        EffectState::InFlight { first, claim } if claim.token == token => (first, claim),
        _ => return late(state, token, answer, lookup.map(|(l, _)| l)),
    };
    // A superseded send's success and this one's, naming two different effects: both landed.
    if let SendAnswer::Done(mine) | SendAnswer::Replayed(mine) = answer {
        let all = distinct(claim.late_done.iter().chain([mine]));
        if all.len() > 1 {
            return vec![applied_twice(
                token,
                &several(
                    &all,
                    "an earlier send's late success and this send's success",
                ),
            )];
        }
    } else if !mutants::on(Mutant::ConfirmationIgnored) {
        // Whatever this send heard, the target's confirmation (or a superseded send's success)
        // already proves the effect landed: it is not failed, refused or unknowable.
        match claim.late_done.as_slice() {
            [] => {}
            [v] => {
                return vec![Event::Committed(Committed {
                    token,
                    via: landed_via(v),
                    result: v.clone(),
                })];
            }
            all => {
                return vec![applied_twice(
                    token,
                    &several(
                        all,
                        "superseded sends' answers or the target's confirmations",
                    ),
                )];
            }
        }
    }
    let as_of = lookup.map_or(now_ms, |(_, asked_at)| asked_at);
    let earlier_quiet = as_of >= claim.quiet_after(Some(token));
    match after_send(
        answer,
        via,
        has_lookup,
        earlier_quiet,
        lookup.map(|(l, _)| l),
    ) {
        AfterSend::Commit(via, result) => vec![Event::Committed(Committed { token, via, result })],
        AfterSend::Fail { code, message } => vec![Event::Failed(Failed {
            token,
            code,
            message,
        })],
        AfterSend::Refuse(d) => vec![Event::Refused(final_refusal(
            &d,
            Vec::new(),
            &first.payload_hash,
        ))],
        AfterSend::Ambiguous(a) => vec![Event::Ambiguous(a)],
        AfterSend::AppliedTwice(d) => vec![applied_twice(token, &d)],
        AfterSend::StayInFlight(_) | AfterSend::Lookup => Vec::new(),
    }
}

/// What an answer under a claim that has moved records: `LATE_RESULT`, carrying what its lookup
/// found beyond one effect; and, when the effect was committed as another effect than this
/// answer (or its lookup) shows landed, `APPLIED_TWICE` after it.
fn late(
    state: &EffectState,
    token: u64,
    answer: &SendAnswer,
    lookup: Option<&LookupAnswer>,
) -> Vec<Event> {
    let mut body = answer_json(answer);
    if let (Some(LookupAnswer::Several(all)), Some(obj)) = (lookup, body.as_object_mut()) {
        obj.insert("several".into(), Value::Array(all.clone()));
    }
    let twice = match state {
        EffectState::Resolved {
            resolution: Resolution::Committed(c),
            ..
        } => Some(distinct(
            [&c.result]
                .into_iter()
                .chain(super::state::landed_in(&body)),
        ))
        .filter(|all| all.len() > 1),
        _ => None,
    };
    let mut events = vec![Event::LateResult(LateResult {
        token,
        answer: body,
    })];
    if let Some(all) = twice {
        events.push(applied_twice(
            token,
            &several(&all, "after the commit, a superseded send's answer"),
        ));
    }
    events
}

/// One of each effect, by [`absorb`].
fn distinct<'a>(values: impl IntoIterator<Item = &'a Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for v in values {
        absorb(&mut out, v);
    }
    out
}

fn repairs_for(recheck: &Recheck, repairs: &[Repair]) -> Vec<Repair> {
    if recheck.lease == LeaseVerdict::Live && !recheck.changes.is_empty() {
        repairs.to_vec()
    } else {
        Vec::new()
    }
}

/// A non-final note: the lease store or premise source could not answer; nothing was sent.
pub fn retry_note(code: RefusalCode, message: &str, payload_hash: &str) -> Refused {
    Refused {
        code,
        reason: format!("{message}; nothing was sent, try again later"),
        changes: Vec::new(),
        repairs: Vec::new(),
        is_final: false,
        payload_hash: payload_hash.to_owned(),
    }
}

/// A non-final note: a resubmission with another payload under a key already bound (R3).
pub fn conflict_note(hash: &str, recorded: &str) -> Refused {
    Refused {
        code: RefusalCode::ConflictingPayload,
        reason: format!(
            "this key is bound to payload {recorded}; payload {hash} is refused (a new decision \
             needs a new key)"
        ),
        changes: Vec::new(),
        repairs: Vec::new(),
        is_final: false,
        payload_hash: hash.to_owned(),
    }
}

/// A refusal that resolves the effect.
pub fn final_refusal(d: &RefusalDraft, repairs: Vec<Repair>, hash: &str) -> Refused {
    Refused {
        code: d.code,
        reason: d.reason.clone(),
        changes: d.changes.clone(),
        repairs,
        is_final: true,
        payload_hash: hash.to_owned(),
    }
}

/// A send's answer as a `LATE_RESULT` body.
pub fn answer_json(a: &SendAnswer) -> Value {
    match a {
        SendAnswer::Done(v) => json!({ "done": v }),
        SendAnswer::Replayed(v) => json!({ "done": v, "replayed": true }),
        SendAnswer::Definite { code, message } => {
            json!({ "failed": { "code": code, "message": message } })
        }
        SendAnswer::Conflict(m) => json!({ "conflict": m }),
        SendAnswer::Unknown(m) => json!({ "unknown": m }),
        SendAnswer::SavedError(m) => json!({ "saved_error": m }),
    }
}

/// Whether a late answer proves its request was processed, so no more can land from it. An
/// unknown answer (a timeout, a 5xx, a reset, a key still in use) proves nothing: the service may
/// still be working on that request.
pub fn answer_settles(answer: &Value) -> bool {
    if mutants::on(Mutant::UnknownLateCloses) {
        return true;
    }
    [
        "done",
        "failed",
        "conflict",
        "saved_error",
        super::state::WITHDRAWN,
    ]
    .iter()
    .any(|k| answer.get(k).is_some())
}

#[cfg(test)]
#[path = "transition_tests.rs"]
mod tests;
