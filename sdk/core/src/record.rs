//! The journal's vocabulary, as data. These types are what a record's body holds; the hash chain
//! and storage live in `journal`, so the decision core can reason about a history without I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Named facts and their values, as decided or as read again. Sorted so they hash canonically.
pub type Premises = BTreeMap<String, Value>;

/// Who holds a claim: enough to tell, on the same host, whether the holder can still be sending.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Host name of the holder's machine.
    pub host: String,
    /// Process id of the holder.
    pub pid: u32,
    /// Free text naming the attempt (a Temporal attempt, a CLI run, a test step).
    pub attempt: String,
    /// The principal the attempt acts for, as whoever ran it verified it: the caller a gate
    /// server authenticated (a token's or a client certificate's caller), or the principal an
    /// in-process worker was configured with. Never a name the caller wrote. Absent where no
    /// principal was known, and in records written before principals were journaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
}

/// Why a recoverer was allowed to take a claim from its holder.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum TakeoverReason {
    /// The holder's liveness lock was free: it cannot be sending.
    HolderDead,
    /// The holder's send deadline has passed; its send has been cut off.
    DeadlinePassed,
    /// A tier-1 target inside its dedupe window dedupes a resend under the same key.
    Tier1InWindow,
}

/// How a committed effect came to be known as committed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Via {
    /// The first send answered with success.
    FirstSend,
    /// A resend under the same key, deduplicated by the target.
    IdempotentResend,
    /// Found at the target by a lookup on its key.
    FoundByLookup,
    /// A lookup found nothing, the checks held again, and the effect was sent again.
    ReappliedAfterLookup,
    /// The target answered with a definite failure, but a lookup found the effect.
    FailedButLanded,
    /// A superseded attempt's send answered with success after its claim was taken.
    LateAnswer,
    /// The target itself confirmed the effect (a signed webhook, or a lookup recorded as
    /// `CONFIRMED`) while it was still in flight.
    ConfirmedByTarget,
    /// The effect was left `AMBIGUOUS`, and a person who looked at the target settled it as
    /// applied, in a statement signed with their own key (`SETTLED`).
    SettledByPerson,
}

impl Via {
    /// The label, as written in the journal and shown to people (`first_send`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstSend => "first_send",
            Self::IdempotentResend => "idempotent_resend",
            Self::FoundByLookup => "found_by_lookup",
            Self::ReappliedAfterLookup => "reapplied_after_lookup",
            Self::FailedButLanded => "failed_but_landed",
            Self::LateAnswer => "late_answer",
            Self::ConfirmedByTarget => "confirmed_by_target",
            Self::SettledByPerson => "settled_by_person",
        }
    }
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One premise that moved between the decision and a re-check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Change {
    /// The premise's name.
    pub field: String,
    /// The value decided on.
    pub was: Value,
    /// The value read now (`null` when the fact is gone).
    pub now: Value,
}

/// A suggested new decision. Never applied by the gate: accepting one is a new effect.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Repair {
    /// Stable name of the repair, e.g. `still_fits`.
    pub kind: String,
    /// What a person reads.
    pub summary: String,
    /// The payload the repair proposes.
    pub payload: Value,
}

/// Stable refusal codes. A workflow may match on them.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalCode {
    /// A premise moved between the decision and the dispatch.
    StalePremise,
    /// The lease was dead or did not cover the payload at submit or dispatch.
    Lease,
    /// The lease names who may spend it, and the effect's proposer is not among them.
    LeaseCaller,
    /// The same key was already recorded with another payload.
    ConflictingPayload,
    /// The premise reader failed or answered nonsense: fail closed.
    PremiseError,
    /// The lease store failed: fail closed.
    LeaseError,
    /// A premise moved during an outage and a lookup found nothing.
    StalePremiseAtRecovery,
    /// The lease died during an outage and a lookup found nothing.
    LeaseAtRecovery,
    /// The premise reader failed at recovery and a lookup found nothing.
    PremiseErrorAtRecovery,
    /// The lease store failed at recovery and a lookup found nothing.
    LeaseErrorAtRecovery,
    /// The target refused the key as used with other parameters.
    TargetConflict,
    /// The lease's uses (or its total) were spent by other keys.
    LeaseSpent,
    /// The effect would take a budget past its limit.
    Budget,
    /// The target has no canonical form for the payload (a field it does not take, an amount
    /// that is not an integer, two names for two things): nothing was journaled.
    InvalidPayload,
    /// A rule over the premises (`amount_paid - refunded_by_others >= payload.amount`) does not
    /// hold on the facts as read: the reason names the rule and the values.
    PremiseRule,
}

impl RefusalCode {
    /// The code as it is written in the journal and shown to people.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StalePremise => "stale_premise",
            Self::Lease => "lease",
            Self::LeaseCaller => "lease_caller",
            Self::ConflictingPayload => "conflicting_payload",
            Self::PremiseError => "premise_error",
            Self::LeaseError => "lease_error",
            Self::StalePremiseAtRecovery => "stale_premise_at_recovery",
            Self::LeaseAtRecovery => "lease_at_recovery",
            Self::PremiseErrorAtRecovery => "premise_error_at_recovery",
            Self::LeaseErrorAtRecovery => "lease_error_at_recovery",
            Self::TargetConflict => "target_conflict",
            Self::LeaseSpent => "lease_spent",
            Self::Budget => "budget",
            Self::InvalidPayload => "invalid_payload",
            Self::PremiseRule => "premise_rule",
        }
    }
}

impl std::fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the lease store said at a check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum LeaseVerdict {
    /// Live, and it covers this payload.
    Live,
    /// Revoked, expired, unknown, or not covering this payload.
    Dead {
        /// Why, in words.
        reason: String,
    },
    /// The store could not answer: fail closed.
    Error {
        /// The store's error.
        message: String,
    },
    /// Live and covering, but its uses or its total are spent by other keys
    /// ([`crate::limits::room`]).
    Spent {
        /// Why, naming the keys that spent it.
        reason: String,
    },
    /// Live and covering, but the effect would take a budget past its limit
    /// ([`crate::budget::room`]).
    OverBudget {
        /// Why: the budget, what is used and left, and when room frees.
        reason: String,
    },
    /// Live and covering, but the lease names who may spend it, and whoever proposed the
    /// effect is not among them: an id seen elsewhere is not authority.
    NotSpender {
        /// Why: the lease, and the proposer it does not name.
        reason: String,
    },
}

/// What the re-check before a dispatch or a resend saw.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Recheck {
    /// The lease check.
    pub lease: LeaseVerdict,
    /// Premises as read now (empty when the read failed).
    pub premises_now: Premises,
    /// Premises that moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// The premise reader's error, if it failed (fail closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub premise_error: Option<String>,
    /// When the premises were read (milliseconds since the epoch, taken before the read
    /// began): a dispatch or a resend is written only while this read is younger than the
    /// gate's bound on a premise's age. Absent in records written before reads were timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at_ms: Option<i64>,
    /// Every budget the effect matched, as counted in the dispatch's transaction. Empty where
    /// none matched, and in records written before the checks were recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<crate::budget::BudgetCheck>,
    /// The rules over the premises ([`crate::rules`]) that did not hold on `premises_now`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broken: Vec<crate::rules::Broken>,
}

impl Recheck {
    /// True when nothing stands in the way of a send.
    pub fn holds(&self) -> bool {
        self.lease == LeaseVerdict::Live
            && self.changes.is_empty()
            && self.premise_error.is_none()
            && self.broken.is_empty()
    }
}

/// `PROPOSED`: the first payload recorded for a key is the only one ever sent under it (R3).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Proposed {
    /// The effect's arguments.
    pub payload: Value,
    /// SHA-256 of the payload's canonical JSON.
    pub payload_hash: String,
    /// Premises as decided.
    pub premises: Premises,
    /// The lease the effect runs under.
    pub lease: String,
    /// The target's name.
    pub target: String,
    /// The target's tier when proposed.
    pub tier: u8,
    /// A tier-1 target's dedupe window when proposed (ms): recovery trusts no longer a window,
    /// whatever a later binding claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<i64>,
    /// What the caller said the effect is part of (the workflow type, the acting agent), for
    /// budgets to match ([`crate::budget::Budget::scope`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The verified principal that proposed it ([`Holder::caller`]): whose effect it is, and
    /// who a lease that names its spenders is judged for. Absent where none was known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The rules over the premises the binding that proposed it states ([`crate::rules`]):
    /// judged at every dispatch and at recovery beside the recovering binding's own, so a
    /// recoverer that states none still judges them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
    /// The hash of the payload as its proposer spelt it, where that was not the target's
    /// canonical form (`payload`): a resubmission spelt the same way is this effect, known
    /// without putting it in canonical form again (which may read the target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given_hash: Option<String>,
}

/// `AUTHORIZED`: the lease was live and covered the payload at submit.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Authorized {
    /// The lease.
    pub lease: String,
    /// The grant as the store described it.
    pub grant: Value,
}

/// `DISPATCHED`: durable before any send (R1); carries the claim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Dispatched {
    /// Fencing token of the claim under which this send goes out.
    pub token: u64,
    /// The claim's holder.
    pub holder: Holder,
    /// Milliseconds since the epoch after which the send is cut off and the claim may be taken.
    pub deadline_ms: i64,
    /// The payload hash sent (always the first one proposed).
    pub payload_hash: String,
    /// The re-check this dispatch stood on.
    pub recheck: Recheck,
    /// True for a resend after a crash.
    pub resend: bool,
}

/// `CLAIMED`: a recoverer took the claim of an in-flight effect.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Claimed {
    /// The new fencing token (always the previous one plus one).
    pub token: u64,
    /// The new holder.
    pub holder: Holder,
    /// Deadline of the new claim.
    pub deadline_ms: i64,
    /// The evidence that allowed the takeover.
    pub reason: TakeoverReason,
    /// After this time no send of the previous claim can still land: its deadline, or, for a
    /// holder proven dead, the takeover time plus the settle margin, whichever is earlier.
    pub prior_until_ms: i64,
}

/// `COMMITTED`: the effect landed, exactly once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Committed {
    /// Token of the claim that resolved it.
    pub token: u64,
    /// How it was known.
    pub via: Via,
    /// The target's answer (or what the lookup found): replayed without sending.
    pub result: Value,
}

/// `REFUSED`: a check failed; nothing was sent on this path.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Refused {
    /// Stable code.
    pub code: RefusalCode,
    /// Human reason.
    pub reason: String,
    /// Premises that moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Suggested new decisions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<Repair>,
    /// A final refusal resolves the effect; a note (e.g. a conflicting resubmission) does not.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Hash of the payload that was refused.
    pub payload_hash: String,
}

/// `AMBIGUOUS`: whether it happened cannot be known from here; a person must look.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Ambiguous {
    /// Why.
    pub reason: String,
    /// Premises that moved, if the re-check failed too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
}

/// `FAILED`: the target definitively said no.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Failed {
    /// Token of the claim that got the answer.
    pub token: u64,
    /// The target's error code.
    pub code: String,
    /// The target's message.
    pub message: String,
}

/// `APPLIED_TWICE`: the target holds more than one effect under this key — it broke its promise
/// to dedupe (or a send outlived the contract's bounds). Every one it holds is named, so a person
/// can reverse the extra ones; the effect is closed, and nothing more is sent under the key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct AppliedTwice {
    /// Token of the claim that found it.
    pub token: u64,
    /// Each effect the target holds under the key, as it reported them.
    pub found: Vec<Value>,
    /// How it was found, for a person.
    pub reason: String,
}

/// `LATE_RESULT`: an answer that arrived after the effect was resolved or its claim taken; or
/// the word of a holder that withdrew its own dispatch unsent (`{"withdrawn": why}`: it was
/// fenced between the dispatch and the send), which proves no request left under that token.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LateResult {
    /// The token the late sender held.
    pub token: u64,
    /// What it heard.
    pub answer: Value,
}

/// `CONFIRMED`: the target itself confirmed the effect (a signed webhook, or a lookup). It is the
/// target's word that the effect landed: it counts wherever a late success counts (recovery
/// commits on it instead of resending or marking the effect ambiguous, and `verify` counts it in
/// "happened once"), and it never lets anything more be sent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Confirmed {
    /// `webhook` or `lookup`.
    pub via: String,
    /// The target's event id (webhooks), for idempotence on redelivery.
    pub event: Option<String>,
    /// The target's reference (e.g. refund id).
    pub refund: Option<String>,
    /// The target's status for it.
    pub status: Option<String>,
    /// Amount, as the target reports it.
    pub amount: Option<i64>,
    /// The payment it belongs to.
    pub payment_intent: Option<String>,
    /// The charge it belongs to, where the target names one (absent in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charge: Option<String>,
    /// When the target created it (its clock, seconds).
    pub created: Option<i64>,
}

/// One journal record's body.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "kind", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Event {
    /// See [`Proposed`].
    Proposed(Proposed),
    /// See [`Authorized`].
    Authorized(Authorized),
    /// See [`Dispatched`].
    Dispatched(Dispatched),
    /// See [`Claimed`].
    Claimed(Claimed),
    /// See [`Committed`].
    Committed(Committed),
    /// See [`Refused`].
    Refused(Refused),
    /// See [`Ambiguous`].
    Ambiguous(Ambiguous),
    /// See [`Failed`].
    Failed(Failed),
    /// See [`AppliedTwice`].
    AppliedTwice(AppliedTwice),
    /// See [`LateResult`].
    LateResult(LateResult),
    /// See [`Confirmed`].
    Confirmed(Confirmed),
    /// See [`crate::settle::Settled`].
    Settled(crate::settle::Settled),
}

impl Event {
    /// The record kind as stored.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Proposed(_) => "PROPOSED",
            Self::Authorized(_) => "AUTHORIZED",
            Self::Dispatched(_) => "DISPATCHED",
            Self::Claimed(_) => "CLAIMED",
            Self::Committed(_) => "COMMITTED",
            Self::Refused(_) => "REFUSED",
            Self::Ambiguous(_) => "AMBIGUOUS",
            Self::Failed(_) => "FAILED",
            Self::AppliedTwice(_) => "APPLIED_TWICE",
            Self::LateResult(_) => "LATE_RESULT",
            Self::Confirmed(_) => "CONFIRMED",
            Self::Settled(_) => "SETTLED",
        }
    }
}
