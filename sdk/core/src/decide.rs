//! Every decision the gate makes, as a function of what it has read. The I/O layers gather the
//! inputs (journal state, lease verdict, premises, liveness, lookup answers) and carry out the
//! answer; nothing here can observe the world, so the same inputs always give the same step.

use serde_json::Value;

use super::record::{Ambiguous, Change, LeaseVerdict, Premises, Recheck, RefusalCode, Via};
use super::state::{Claim, EffectState, Resolution};
use super::tier::Effective;

/// What to do with a submission, given the key's state.
#[derive(Clone, Debug, PartialEq)]
pub enum SubmitPlan {
    /// Nothing recorded: propose, authorize, check, dispatch.
    Fresh,
    /// Proposed earlier but never dispatched (a crash, or a non-final refusal): check and dispatch.
    Continue,
    /// The key is bound to another payload (R3): refuse this one, change nothing else.
    Conflict {
        /// Hash of the payload the key is bound to.
        recorded: String,
    },
    /// Resolved: answer from the journal without sending.
    Replay(Resolution),
    /// In flight: resolve it by the recovery table.
    Recover(Claim),
}

/// Decide what a submission of `payload_hash` does: the payload the key holds, in canonical
/// form or as its proposer spelt it, is that effect; any other is a conflict.
pub fn plan_submit(state: &EffectState, payload_hash: &str) -> SubmitPlan {
    if let Some(first) = state
        .first()
        .filter(|f| f.payload_hash != payload_hash && f.given_hash.as_deref() != Some(payload_hash))
    {
        return SubmitPlan::Conflict {
            recorded: first.payload_hash.clone(),
        };
    }
    match state {
        EffectState::Absent => SubmitPlan::Fresh,
        EffectState::Proposed { .. } => SubmitPlan::Continue,
        EffectState::InFlight { claim, .. } => SubmitPlan::Recover(claim.clone()),
        EffectState::Resolved { resolution, .. } => SubmitPlan::Replay(resolution.clone()),
    }
}

/// The premises that moved between the decision and now. A premise that can no longer be read
/// counts as moved to `null`.
pub fn diff(decided: &Premises, now: &Premises) -> Vec<Change> {
    decided
        .iter()
        .filter_map(|(field, was)| {
            let now = now.get(field).cloned().unwrap_or(Value::Null);
            (now != *was).then(|| Change {
                field: field.clone(),
                was: was.clone(),
                now,
            })
        })
        .collect()
}

/// A refusal before it is written: code, reason, changes. Repairs are added by whoever knows
/// the target (the premise reader), never invented here.
#[derive(Clone, Debug, PartialEq)]
pub struct RefusalDraft {
    /// Code.
    pub code: RefusalCode,
    /// Reason, for a person.
    pub reason: String,
    /// Premises that moved.
    pub changes: Vec<Change>,
}

/// The re-check at submit or dispatch (R4 before R5): `None` means send.
pub fn check_fresh(recheck: &Recheck) -> Option<RefusalDraft> {
    refusal_for(recheck, false)
}

fn refusal_for(recheck: &Recheck, at_recovery: bool) -> Option<RefusalDraft> {
    let (code, reason) = match (&recheck.lease, &recheck.premise_error) {
        (LeaseVerdict::Error { message }, _) => (
            pick(
                at_recovery,
                RefusalCode::LeaseError,
                RefusalCode::LeaseErrorAtRecovery,
            ),
            format!("the lease store could not answer ({message}); nothing is sent on doubt"),
        ),
        (LeaseVerdict::Dead { reason }, _) => (
            pick(
                at_recovery,
                RefusalCode::Lease,
                RefusalCode::LeaseAtRecovery,
            ),
            format!("the lease does not allow this effect: {reason}"),
        ),
        // A key that holds its use never reads its lease as spent; one that does not was
        // never dispatched, so at recovery this is the lease refusing, as any other.
        (LeaseVerdict::Spent { reason }, _) => (
            pick(
                at_recovery,
                RefusalCode::LeaseSpent,
                RefusalCode::LeaseAtRecovery,
            ),
            format!("the lease does not allow this effect: {reason}"),
        ),
        // A lease never comes to name another proposer: at recovery this is the lease refusing.
        (LeaseVerdict::NotSpender { reason }, _) => (
            pick(
                at_recovery,
                RefusalCode::LeaseCaller,
                RefusalCode::LeaseAtRecovery,
            ),
            format!("the lease does not allow this effect: {reason}"),
        ),
        (LeaseVerdict::OverBudget { reason }, _) => (
            pick(
                at_recovery,
                RefusalCode::Budget,
                RefusalCode::LeaseAtRecovery,
            ),
            format!("the effect does not fit its budget: {reason}"),
        ),
        (LeaseVerdict::Live, Some(err)) => (
            pick(
                at_recovery,
                RefusalCode::PremiseError,
                RefusalCode::PremiseErrorAtRecovery,
            ),
            format!("the premises could not be read ({err}); nothing is sent on doubt"),
        ),
        (LeaseVerdict::Live, None) if !recheck.changes.is_empty() => (
            pick(
                at_recovery,
                RefusalCode::StalePremise,
                RefusalCode::StalePremiseAtRecovery,
            ),
            format!(
                "the facts it was decided on moved: {}",
                describe(&recheck.changes)
            ),
        ),
        (LeaseVerdict::Live, None) if !recheck.broken.is_empty() => (
            RefusalCode::PremiseRule,
            format!(
                "the facts {} do not allow it: {}",
                if at_recovery {
                    "read at recovery"
                } else {
                    "as read now"
                },
                crate::rules::describe(&recheck.broken)
            ),
        ),
        (LeaseVerdict::Live, None) => return None,
    };
    Some(RefusalDraft {
        code,
        reason,
        changes: recheck.changes.clone(),
    })
}

fn pick(at_recovery: bool, fresh: RefusalCode, recovery: RefusalCode) -> RefusalCode {
    if at_recovery { recovery } else { fresh }
}

/// `field: was X, now Y` for each change, joined.
pub fn describe(changes: &[Change]) -> String {
    changes
        .iter()
        .map(|c| format!("{}: was {}, now {}", c.field, c.was, c.now))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether a recoverer may take an in-flight claim now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakeoverPlan {
    /// Take it, for this reason.
    Take(super::record::TakeoverReason),
    /// The holder may still be sending: wait until this time at the latest.
    Wait {
        /// Milliseconds since the epoch.
        until_ms: i64,
    },
}

/// Claims are released by evidence that the holder cannot be sending, not by the clock alone:
/// a free liveness lock, or a passed deadline (the holder's send is cut off there), or a tier-1
/// target inside its window, where a resend under the same key is deduplicated anyway.
pub fn plan_takeover(
    claim: &Claim,
    now_ms: i64,
    holder_lock_free: bool,
    effective: Effective,
) -> TakeoverPlan {
    use super::record::TakeoverReason as R;
    if holder_lock_free {
        TakeoverPlan::Take(R::HolderDead)
    } else if now_ms >= claim.deadline_ms {
        TakeoverPlan::Take(R::DeadlinePassed)
    } else if effective == Effective::DedupeInWindow {
        TakeoverPlan::Take(R::Tier1InWindow)
    } else {
        TakeoverPlan::Wait {
            until_ms: claim.deadline_ms,
        }
    }
}

/// What a lookup by key answered.
#[derive(Clone, Debug, PartialEq)]
pub enum LookupAnswer {
    /// The effect is at the target, once; the value is what was found.
    Found(Value),
    /// The target holds more than one effect under the key: each, as found.
    Several(Vec<Value>),
    /// The target has no effect with this key.
    NotFound,
    /// The target could not be asked.
    Unknown(String),
}

/// One step of recovery for an in-flight effect whose claim this recoverer now holds.
#[derive(Clone, Debug, PartialEq)]
pub enum RecoveryPlan {
    /// Ask the target by key first.
    Lookup,
    /// Send again under the same key (after a durable `DISPATCHED`), recorded with this via.
    Resend(Via),
    /// It landed: commit with what was found (by a lookup, or a superseded send's late answer).
    CommitFound(Via, Value),
    /// It did not land and must not be sent: refuse, closing the effect.
    Refuse(RefusalDraft),
    /// Unknowable: surface to a person.
    Ambiguous(Ambiguous),
    /// The target holds it more than once: close it, naming each.
    AppliedTwice(TwiceDraft),
    /// The re-check would allow a resend, but its premises were read too long before the write:
    /// read them again and decide again.
    Reread {
        /// Why.
        reason: String,
    },
    /// Cannot decide now: leave it in flight and try again (not before `until_ms`, if given).
    Wait {
        /// Why.
        reason: String,
        /// When deciding may become possible.
        until_ms: Option<i64>,
    },
}

/// An `APPLIED_TWICE` before it is written.
#[derive(Clone, Debug, PartialEq)]
pub struct TwiceDraft {
    /// Each effect the target holds under the key.
    pub found: Vec<Value>,
    /// How it was found.
    pub reason: String,
}

pub(super) fn several(found: &[Value], when: &str) -> TwiceDraft {
    TwiceDraft {
        found: found.to_vec(),
        reason: format!(
            "{when}: {} effects carry this key at the target, so it applied the effect more than \
             once; reverse all but one by hand",
            found.len()
        ),
    }
}

/// Whether two answers may name the same effect. Only two different `id`s tell effects apart:
/// the same effect read twice can differ in every other field (a status that moved, metadata
/// one answer carries and the other does not), and an answer without an `id` proves nothing, so
/// it never raises `APPLIED_TWICE` on its own.
pub fn same_effect(a: &Value, b: &Value) -> bool {
    match (a.get("id"), b.get("id")) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// Add `v` to a list of distinct effects. Effects are told apart by `id` alone, whatever order
/// they come in: an answer without an `id` stands for an effect only while nothing named one,
/// and gives way to the first that does.
pub fn absorb(list: &mut Vec<Value>, v: &Value) {
    match v.get("id") {
        Some(id) if list.iter().any(|l| l.get("id") == Some(id)) => {}
        Some(_) => {
            list.retain(|l| l.get("id").is_some());
            list.push(v.clone());
        }
        None if list.is_empty() => list.push(v.clone()),
        None => {}
    }
}

/// What recovery decides on.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveryInput {
    /// The tier after demotion by the clock.
    pub effective: Effective,
    /// R4 and R5 as of now.
    pub recheck: Recheck,
    /// Whether the target can be asked by key.
    pub has_lookup: bool,
    /// When the lookup was asked (now, if there is none yet).
    pub now_ms: i64,
    /// No earlier send can still land after this time ([`Claim::quiet_after`]).
    pub quiet_after_ms: i64,
    /// The distinct effects superseded sends' answers, or the target's confirmations, proved
    /// landed.
    pub late_done: Vec<Value>,
    /// The lease store or premise source failed in a way that may pass: such a failure never
    /// closes the effect; recovery waits for an answer instead.
    pub transient: bool,
    /// Every dispatch under the key was withdrawn unsent by its own holder: no request ever
    /// left, at any tier.
    pub nothing_sent: bool,
}

/// The recovery table (`docs/contract.md`, "Recovery table"). Call with `lookup: None` first; if the answer is
/// [`RecoveryPlan::Lookup`], ask the target and call again with its answer.
///
/// "Not found" only proves the effect did not land if it was asked once no earlier send can
/// still land (`now_ms` is when the lookup was asked): before every earlier claim's deadline —
/// its holder live or dead — a lookup that finds nothing leads to waiting, never to a refusal or
/// a second send on a tier that cannot dedupe.
pub fn plan_recovery(input: &RecoveryInput, lookup: Option<&LookupAnswer>) -> RecoveryPlan {
    let recheck = &input.recheck;
    match input.late_done.as_slice() {
        [] => {}
        [v] => return RecoveryPlan::CommitFound(landed_via(v), v.clone()),
        all => {
            return RecoveryPlan::AppliedTwice(several(all, "superseded sends' answers"));
        }
    }
    let holds = recheck.holds();
    let blind = || {
        RecoveryPlan::Ambiguous(Ambiguous {
            reason: blind_reason(recheck),
            changes: recheck.changes.clone(),
        })
    };
    // Nothing ever left: no tier's doubt applies. Send if the checks hold, refuse if they do not,
    // wait while a source cannot answer.
    if input.nothing_sent && !super::mutants::on(super::mutants::Mutant::FencedDispatchKeepsWindow)
    {
        return match refusal_for(recheck, true) {
            None => RecoveryPlan::Resend(Via::FirstSend),
            Some(draft) if input.transient => RecoveryPlan::Wait {
                reason: format!("nothing was sent, and {}; trying again", draft.reason),
                until_ms: None,
            },
            Some(draft) => RecoveryPlan::Refuse(draft),
        };
    }
    match input.effective {
        Effective::Blind => blind(),
        Effective::DedupeInWindow if holds => RecoveryPlan::Resend(Via::IdempotentResend),
        Effective::DedupeInWindow if !input.has_lookup => blind(),
        Effective::DedupeInWindow | Effective::LookupOnly => match lookup {
            None => RecoveryPlan::Lookup,
            Some(LookupAnswer::Found(v)) => {
                RecoveryPlan::CommitFound(Via::FoundByLookup, v.clone())
            }
            Some(LookupAnswer::Several(all)) => {
                RecoveryPlan::AppliedTwice(several(all, "a lookup at recovery"))
            }
            Some(LookupAnswer::Unknown(why)) => RecoveryPlan::Wait {
                reason: format!("the target could not be asked whether it landed: {why}"),
                until_ms: None,
            },
            Some(LookupAnswer::NotFound) if input.now_ms < input.quiet_after_ms => {
                RecoveryPlan::Wait {
                    reason: "not found yet, but an earlier send may still land; looking again \
                             once it cannot"
                        .into(),
                    until_ms: Some(input.quiet_after_ms),
                }
            }
            Some(LookupAnswer::NotFound) => match refusal_for(recheck, true) {
                None => RecoveryPlan::Resend(Via::ReappliedAfterLookup),
                Some(draft) if input.transient => RecoveryPlan::Wait {
                    reason: format!("not found, and {}; trying again", draft.reason),
                    until_ms: None,
                },
                Some(draft) => RecoveryPlan::Refuse(draft),
            },
        },
    }
}

/// How an effect proven landed by `v` (one of [`super::state::Claim::late_done`]) came to be
/// known: the target's confirmation, or a superseded send's late success.
pub fn landed_via(v: &Value) -> Via {
    if v.get(super::state::CONFIRMED_VIA).is_some() {
        Via::ConfirmedByTarget
    } else {
        Via::LateAnswer
    }
}

fn blind_reason(recheck: &Recheck) -> String {
    let base = "a send may have gone out and the target can neither dedupe nor be asked: \
                'sent, answer lost' and 'never sent' look the same from here";
    match refusal_for(recheck, true) {
        Some(r) => format!("{base}; also {}", r.reason),
        None => base.to_owned(),
    }
}

/// What a send answered.
#[derive(Clone, Debug, PartialEq)]
pub enum SendAnswer {
    /// Success, with the target's result, computed for this request.
    Done(Value),
    /// Success replayed from what the service saved under the key (Stripe marks it
    /// `Idempotent-Replayed: true`): an earlier request under the key applied, and this one did
    /// not apply again.
    Replayed(Value),
    /// Definitely not done (e.g. HTTP 4xx).
    Definite {
        /// The target's error code.
        code: String,
        /// The target's message.
        message: String,
    },
    /// The key was used before with other parameters.
    Conflict(String),
    /// Unknown: timeout, 5xx, connection lost, same key still in use.
    Unknown(String),
    /// The service replayed an error it saved for this key (a 5xx marked as replayed): the
    /// first request under the key failed there, and every resend under the key will only
    /// replay it. Whether that first request applied is for a lookup to tell.
    SavedError(String),
}

/// What to record after a send under the current claim.
#[derive(Clone, Debug, PartialEq)]
pub enum AfterSend {
    /// Commit with this via and result.
    Commit(Via, Value),
    /// Ask the target before deciding.
    Lookup,
    /// The target said no: `FAILED`.
    Fail {
        /// Code.
        code: String,
        /// Message.
        message: String,
    },
    /// Refuse: the target holds this key for other parameters.
    Refuse(RefusalDraft),
    /// Unknowable: the service replays a saved error and cannot be asked.
    Ambiguous(Ambiguous),
    /// The target holds the effect more than once.
    AppliedTwice(TwiceDraft),
    /// Leave it in flight for recovery.
    StayInFlight(String),
}

/// Map a send's answer (and, after [`AfterSend::Lookup`], the lookup's) to what is recorded.
/// A definite failure is looked up first where possible, since "failed" can still have landed;
/// it is recorded as `FAILED` only once no earlier send can still land (`earlier_quiet`). An
/// unknown answer is looked up once under the claim, and stays in flight when not found.
///
/// A tier-1 resend is trusted, but checked: its success is expected to be a replay of the first
/// request's (or the first request never reached the service). A success computed anew is
/// followed by a lookup, and more than one effect under the key is recorded as applied twice.
pub fn after_send(
    answer: &SendAnswer,
    via: Via,
    has_lookup: bool,
    earlier_quiet: bool,
    lookup: Option<&LookupAnswer>,
) -> AfterSend {
    let unknown;
    let answer = match answer {
        SendAnswer::SavedError(why)
            if super::mutants::on(super::mutants::Mutant::SavedErrorUnknown) =>
        {
            unknown = SendAnswer::Unknown(why.clone());
            &unknown
        }
        other => other,
    };
    match (answer, lookup) {
        (_, Some(LookupAnswer::Several(all))) => {
            AfterSend::AppliedTwice(several(all, "a lookup after a send"))
        }
        (SendAnswer::Replayed(v), _) => AfterSend::Commit(via, v.clone()),
        (SendAnswer::Done(_), None) if via == Via::IdempotentResend && has_lookup => {
            AfterSend::Lookup
        }
        (SendAnswer::Done(v), Some(LookupAnswer::Found(other))) if !same_effect(v, other) => {
            AfterSend::AppliedTwice(several(
                &[other.clone(), v.clone()],
                "a resend was answered as new rather than replayed, and a lookup found an \
                 earlier effect",
            ))
        }
        (SendAnswer::Done(v), _) => AfterSend::Commit(via, v.clone()),
        // The key is held for other parameters. Our own refund may still be there under it (an
        // earlier send of ours): look first, and refuse only once nothing earlier can land.
        (SendAnswer::Conflict(_), None) if has_lookup => AfterSend::Lookup,
        (SendAnswer::Conflict(_), Some(LookupAnswer::Found(v))) => {
            AfterSend::Commit(Via::FoundByLookup, v.clone())
        }
        (SendAnswer::Conflict(msg), None | Some(LookupAnswer::NotFound)) if earlier_quiet => {
            AfterSend::Refuse(RefusalDraft {
                code: RefusalCode::TargetConflict,
                reason: format!("the target holds this key for other parameters: {msg}"),
                changes: Vec::new(),
            })
        }
        (SendAnswer::Conflict(msg), _) => AfterSend::StayInFlight(format!(
            "the target holds this key for other parameters ({msg}), and an earlier send may \
             still land or the target could not be asked"
        )),
        (
            SendAnswer::Definite { .. } | SendAnswer::Unknown(_) | SendAnswer::SavedError(_),
            None,
        ) if has_lookup => AfterSend::Lookup,
        (SendAnswer::SavedError(_), Some(LookupAnswer::Found(v))) => {
            AfterSend::Commit(Via::FoundByLookup, v.clone())
        }
        // The saved error settles the key: it did not land (the lookup, asked once no earlier
        // send could still land, proves it), and resending under the key cannot change that.
        (SendAnswer::SavedError(why), Some(LookupAnswer::NotFound)) if earlier_quiet => {
            AfterSend::Fail {
                code: "saved_server_error".into(),
                message: format!(
                    "the service saved a server error for this key and replays it ({why}); a \
                     lookup found no refund: it did not happen, and a new decision needs a new key"
                ),
            }
        }
        (SendAnswer::SavedError(why), None) => AfterSend::Ambiguous(Ambiguous {
            reason: format!(
                "the service replays a saved server error for this key ({why}) and cannot be \
                 asked whether the first request applied"
            ),
            changes: Vec::new(),
        }),
        (SendAnswer::SavedError(why), Some(_)) => AfterSend::StayInFlight(format!(
            "the service replays a saved server error ({why}); not found yet, but an earlier \
             send may still land"
        )),
        (SendAnswer::Definite { .. }, Some(LookupAnswer::Found(v))) => {
            AfterSend::Commit(Via::FailedButLanded, v.clone())
        }
        (SendAnswer::Unknown(_), Some(LookupAnswer::Found(v))) => {
            AfterSend::Commit(Via::FoundByLookup, v.clone())
        }
        (SendAnswer::Definite { code, message }, _) if !earlier_quiet => {
            AfterSend::StayInFlight(format!(
                "the target refused this send ({code}: {message}), but an earlier send may \
                 still land"
            ))
        }
        (SendAnswer::Definite { code, message }, None | Some(LookupAnswer::NotFound)) => {
            AfterSend::Fail {
                code: code.clone(),
                message: message.clone(),
            }
        }
        (SendAnswer::Definite { code, message }, Some(LookupAnswer::Unknown(why))) => {
            AfterSend::StayInFlight(format!(
                "the target refused ({code}: {message}) but could not be asked whether it \
                 landed: {why}"
            ))
        }
        (SendAnswer::Unknown(why), _) => AfterSend::StayInFlight(why.clone()),
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
pub(crate) mod tests;
