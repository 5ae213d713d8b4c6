//! Folding a key's history into the one state the rules are decided on. A history that no honest
//! gate could have written (a commit without a dispatch, a token that skips) is a typed error, so
//! a tampered or foreign journal is refused instead of being read as something plausible.

use std::collections::BTreeMap;

use serde_json::Value;

use super::decide::absorb;
use super::record::{
    Ambiguous, AppliedTwice, Committed, Confirmed, Event, Failed, Holder, Proposed, Refused,
};

/// The live claim on an in-flight effect.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// Fencing token; increases at each takeover.
    pub token: u64,
    /// Who holds it.
    pub holder: Holder,
    /// When the holder's send is cut off and the claim may be taken regardless of liveness.
    pub deadline_ms: i64,
    /// When the first `DISPATCHED` for this key was written: the dedupe window counts from here.
    pub first_dispatch_ms: i64,
    /// Whether a `DISPATCHED` exists under this token (a send may have gone out under it).
    pub dispatched: bool,
    /// For every claim that dispatched, until when its send may still land at the target (a
    /// dispatch its holder withdrew unsent has no entry: nothing of it can land).
    pub sends_until: BTreeMap<u64, i64>,
    /// Every distinct effect a superseded send's success (or its lookup) proved landed under
    /// the key: one is proof the effect landed, two are proof it landed twice.
    pub late_done: Vec<Value>,
    /// The time of the key's latest record: the clock has read at least this much, so a
    /// clock stepped back since is not believed where trusting it would be unsafe.
    pub seen_ms: i64,
}

impl Claim {
    /// After this time, no send of a claim other than `except` can still land.
    pub fn quiet_after(&self, except: Option<u64>) -> i64 {
        self.sends_until
            .iter()
            .filter(|(t, _)| Some(**t) != except)
            .map(|(_, until)| *until)
            .max()
            .unwrap_or(i64::MIN)
    }

    /// Whether two reads of a claim carry the same decision: everything but `seen_ms`, which
    /// only bounds how far back a clock is believed. A record that decides nothing (a note
    /// refusing a conflicting payload) moves `seen_ms` and nothing else, so it must not
    /// invalidate a takeover planned on the claim, or a caller looping such notes would keep
    /// every recoverer from ever taking it.
    pub fn same_decision(&self, other: &Self) -> bool {
        let Self {
            token,
            holder,
            deadline_ms,
            first_dispatch_ms,
            dispatched,
            sends_until,
            late_done,
            seen_ms: _,
        } = self;
        *token == other.token
            && *holder == other.holder
            && *deadline_ms == other.deadline_ms
            && *first_dispatch_ms == other.first_dispatch_ms
            && *dispatched == other.dispatched
            && *sends_until == other.sends_until
            && *late_done == other.late_done
    }
}

/// How an effect ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolution {
    /// It landed once.
    Committed(Committed),
    /// A check failed; nothing was sent on the refusing path.
    Refused(Refused),
    /// The target definitively said no.
    Failed(Failed),
    /// Unknowable from here.
    Ambiguous(Ambiguous),
    /// The target holds it more than once.
    AppliedTwice(AppliedTwice),
}

impl Resolution {
    /// Record kind of the resolution (its status's label).
    pub fn kind(&self) -> &'static str {
        self.status().label()
    }
}

/// Where one key stands.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum EffectState {
    /// Nothing recorded.
    #[default]
    Absent,
    /// Proposed, not dispatched.
    Proposed {
        /// The first proposal: its payload is the only one ever sent (R3).
        first: Proposed,
    },
    /// Dispatched and not resolved: a send may be in flight.
    InFlight {
        /// The first proposal.
        first: Proposed,
        /// The current claim.
        claim: Claim,
    },
    /// Resolved.
    Resolved {
        /// The first proposal.
        first: Proposed,
        /// How it ended.
        resolution: Resolution,
    },
}

impl EffectState {
    /// The first proposal, if any.
    pub fn first(&self) -> Option<&Proposed> {
        match self {
            Self::Absent => None,
            Self::Proposed { first }
            | Self::InFlight { first, .. }
            | Self::Resolved { first, .. } => Some(first),
        }
    }
}

/// A history that breaks the journal's own grammar.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("record {index} ({kind}) cannot follow the records before it: {why}")]
pub struct HistoryError {
    /// 0-based position of the offending record in the key's chain.
    pub index: usize,
    /// Its kind.
    pub kind: &'static str,
    /// What is wrong.
    pub why: String,
}

/// Fold a key's records, oldest first, each with the time it was appended.
pub fn fold<'a>(
    history: impl IntoIterator<Item = (i64, &'a Event)>,
) -> Result<EffectState, HistoryError> {
    let mut state = EffectState::Absent;
    for (index, (at_ms, event)) in history.into_iter().enumerate() {
        state = fold_one(state, index, at_ms, event)?;
    }
    Ok(state)
}

/// `state` after record `index` of its key, appended at `at_ms`.
pub(crate) fn fold_one(
    state: EffectState,
    index: usize,
    at_ms: i64,
    event: &Event,
) -> Result<EffectState, HistoryError> {
    let mut state = step(state, at_ms, event).map_err(|why| HistoryError {
        index,
        kind: event.kind(),
        why,
    })?;
    if let EffectState::InFlight { claim, .. } = &mut state {
        claim.seen_ms = claim.seen_ms.max(at_ms);
    }
    Ok(state)
}

fn step(state: EffectState, at_ms: i64, event: &Event) -> Result<EffectState, String> {
    use EffectState as S;
    Ok(match (state, event) {
        (S::Absent, Event::Proposed(p)) => {
            super::tier::Tier::try_from(p.tier)?;
            S::Proposed { first: p.clone() }
        }
        (S::Absent, _) => return Err("the first record of a key must be PROPOSED".into()),
        // A late answer that proves its request was processed ends that send's window (an
        // unknown one proves nothing), and a late success proves the effect landed.
        (S::InFlight { first, mut claim }, Event::LateResult(l)) => {
            // A dispatch its own holder withdrew unsent can land nothing: it has no window.
            if is_withdrawal(&l.answer)
                && !super::mutants::on(super::mutants::Mutant::FencedDispatchKeepsWindow)
            {
                claim.sends_until.remove(&l.token);
            }
            if let Some(until) = claim
                .sends_until
                .get_mut(&l.token)
                .filter(|_| super::transition::answer_settles(&l.answer))
            {
                *until = (*until).min(at_ms);
            }
            for landed in landed_in(&l.answer) {
                absorb(&mut claim.late_done, landed);
            }
            S::InFlight { first, claim }
        }
        // The target's own word that the effect landed, while it is in flight: recovery commits
        // on it, as on a superseded send's late success, and never resends or guesses past it.
        (S::InFlight { first, mut claim }, Event::Confirmed(c))
            if !super::mutants::on(super::mutants::Mutant::ConfirmationIgnored) =>
        {
            absorb(&mut claim.late_done, &confirmed_value(c));
            S::InFlight { first, claim }
        }
        // Later proposals, authorizations, notes, late answers and confirmations of a proposal
        // or a resolved effect (evidence, which `verify` weighs) leave the state as it is.
        (
            s,
            Event::Proposed(_) | Event::Authorized(_) | Event::LateResult(_) | Event::Confirmed(_),
        ) => s,
        (s, Event::Refused(r)) if !r.is_final => s,
        (S::Proposed { first }, Event::Dispatched(d)) => {
            if d.token != 1 {
                return Err(format!(
                    "first dispatch must carry token 1, not {}",
                    d.token
                ));
            }
            check_payload(&first, &d.payload_hash)?;
            S::InFlight {
                claim: Claim {
                    token: 1,
                    holder: d.holder.clone(),
                    deadline_ms: d.deadline_ms,
                    first_dispatch_ms: at_ms,
                    dispatched: true,
                    sends_until: [(1, d.deadline_ms)].into_iter().collect(),
                    late_done: Vec::new(),
                    seen_ms: at_ms,
                },
                first,
            }
        }
        (S::InFlight { first, mut claim }, Event::Dispatched(d)) => {
            if d.token != claim.token || d.holder != claim.holder {
                return Err(format!(
                    "a resend must go out under the current claim (token {}), not token {}",
                    claim.token, d.token
                ));
            }
            check_payload(&first, &d.payload_hash)?;
            claim.dispatched = true;
            claim.deadline_ms = d.deadline_ms;
            claim.sends_until.insert(d.token, d.deadline_ms);
            S::InFlight { first, claim }
        }
        (S::InFlight { first, mut claim }, Event::Claimed(c)) => {
            if c.token != claim.token + 1 {
                return Err(format!(
                    "a takeover must carry token {}, not {}",
                    claim.token + 1,
                    c.token
                ));
            }
            if let Some(until) = claim.sends_until.get_mut(&claim.token) {
                *until = (*until).min(c.prior_until_ms);
            }
            S::InFlight {
                first,
                claim: Claim {
                    token: c.token,
                    holder: c.holder.clone(),
                    deadline_ms: c.deadline_ms,
                    first_dispatch_ms: claim.first_dispatch_ms,
                    dispatched: false,
                    sends_until: claim.sends_until,
                    late_done: claim.late_done,
                    seen_ms: claim.seen_ms,
                },
            }
        }
        (S::InFlight { first, claim }, Event::Committed(c)) => {
            check_token(&claim, c.token)?;
            S::Resolved {
                first,
                resolution: Resolution::Committed(c.clone()),
            }
        }
        (S::InFlight { first, claim }, Event::Failed(f)) => {
            check_token(&claim, f.token)?;
            S::Resolved {
                first,
                resolution: Resolution::Failed(f.clone()),
            }
        }
        (S::InFlight { first, claim }, Event::AppliedTwice(a)) => {
            check_token(&claim, a.token)?;
            S::Resolved {
                first,
                resolution: Resolution::AppliedTwice(a.clone()),
            }
        }
        (S::InFlight { first, .. }, Event::Ambiguous(a)) => S::Resolved {
            first,
            resolution: Resolution::Ambiguous(a.clone()),
        },
        (S::Proposed { first } | S::InFlight { first, .. }, Event::Refused(r)) => S::Resolved {
            first,
            resolution: Resolution::Refused(r.clone()),
        },
        // Evidence, after the commit, that the committed effect was applied more than once.
        (
            S::Resolved {
                first,
                resolution: Resolution::Committed(_),
            },
            Event::AppliedTwice(a),
        ) => S::Resolved {
            first,
            resolution: Resolution::AppliedTwice(a.clone()),
        },
        // A person's signed word on an effect nobody could decide: it ends as they found it.
        (
            S::Resolved {
                first,
                resolution: Resolution::Ambiguous(_),
            },
            Event::Settled(s),
        ) => S::Resolved {
            first,
            resolution: super::settle::resolution_of(s),
        },
        (S::Resolved { .. }, _) => return Err("the effect was already resolved".into()),
        (S::InFlight { .. }, Event::Settled(_)) => {
            return Err("only an AMBIGUOUS effect is settled, and this one is in flight".into());
        }
        (S::Proposed { .. }, _) => return Err("nothing was dispatched yet".into()),
    })
}

/// The field of a `LATE_RESULT` answer by which a holder withdraws its own dispatch unsent.
pub const WITHDRAWN: &str = "withdrawn";

/// Whether a `LATE_RESULT` answer is a holder's withdrawal of its own unsent dispatch, not an
/// answer from the target.
pub fn is_withdrawal(answer: &Value) -> bool {
    answer.get(WITHDRAWN).is_some()
}

/// The effects the target holds although the effect ended refused or failed (a late success
/// or the target's confirmation came after the refusal); none for any other state.
pub fn landed_late<'a>(
    state: &EffectState,
    events: impl IntoIterator<Item = &'a Event>,
) -> Vec<Value> {
    match state {
        EffectState::Resolved {
            resolution: Resolution::Refused(_) | Resolution::Failed(_),
            ..
        } => landed_evidence(events),
        _ => Vec::new(),
    }
}

/// The field that marks an effect as known from the target's confirmation, naming how it came.
pub const CONFIRMED_VIA: &str = "interlock_confirmed_via";

/// A confirmation as the effect it names, in the shape a send's answer or a lookup gives
/// (`id`, `status`, `amount`, the payment), marked with how the target confirmed it.
pub fn confirmed_value(c: &Confirmed) -> Value {
    let mut v = serde_json::Map::new();
    let mut put = |k: &str, x: Option<Value>| {
        if let Some(x) = x {
            v.insert(k.to_owned(), x);
        }
    };
    put("id", c.refund.clone().map(Value::from));
    put("status", c.status.clone().map(Value::from));
    put("amount", c.amount.map(Value::from));
    put("payment_intent", c.payment_intent.clone().map(Value::from));
    put("charge", c.charge.clone().map(Value::from));
    put(CONFIRMED_VIA, Some(Value::from(c.via.clone())));
    Value::Object(v)
}

/// Every distinct effect a key's history shows landed at the target: the commit's result, late
/// successes (and what their lookups found), the target's confirmations, and whatever an
/// `APPLIED_TWICE` names. More than one is proof of a second application; any one under a
/// refused or failed effect is proof it landed after all.
pub fn landed_evidence<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<Value> {
    let mut seen: Vec<Value> = Vec::new();
    for e in events {
        match e {
            Event::Committed(c) => absorb(&mut seen, &c.result),
            Event::LateResult(l) => landed_in(&l.answer).for_each(|v| absorb(&mut seen, v)),
            Event::AppliedTwice(t) => t.found.iter().for_each(|v| absorb(&mut seen, v)),
            Event::Settled(s) => {
                if let Some(v) = super::settle::found_value(s) {
                    absorb(&mut seen, &v);
                }
            }
            Event::Confirmed(c)
                if !super::mutants::on(super::mutants::Mutant::ConfirmationIgnored) =>
            {
                absorb(&mut seen, &confirmed_value(c))
            }
            _ => {}
        }
    }
    seen
}

/// The effects a late answer proves landed: its success, and whatever its lookup found.
pub fn landed_in(answer: &Value) -> impl Iterator<Item = &Value> {
    answer.get("done").into_iter().chain(
        answer
            .get("several")
            .and_then(Value::as_array)
            .into_iter()
            .flatten(),
    )
}

fn check_payload(first: &Proposed, hash: &str) -> Result<(), String> {
    if first.payload_hash == hash {
        Ok(())
    } else {
        Err(format!(
            "dispatched payload {hash} differs from the first proposal's {}",
            first.payload_hash
        ))
    }
}

fn check_token(claim: &Claim, token: u64) -> Result<(), String> {
    if claim.token == token {
        Ok(())
    } else {
        Err(format!(
            "resolved under token {token}, but the claim is token {}",
            claim.token
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::record::{
        Claimed, Dispatched, LateResult, LeaseVerdict, Premises, Recheck, TakeoverReason, Via,
    };

    fn holder(a: &str) -> Holder {
        Holder {
            caller: None,
            host: "h".into(),
            pid: 1,
            attempt: a.into(),
        }
    }

    fn proposed() -> Event {
        Event::Proposed(Proposed {
            given_hash: None,
            rules: Vec::new(),
            by: None,
            payload: json!({}),
            payload_hash: "p".into(),
            premises: Premises::new(),
            lease: "l".into(),
            target: "t".into(),
            tier: 2,
            window_ms: None,
            labels: Default::default(),
        })
    }

    fn dispatched(token: u64, a: &str, deadline_ms: i64) -> Event {
        Event::Dispatched(Dispatched {
            token,
            holder: holder(a),
            deadline_ms,
            payload_hash: "p".into(),
            recheck: Recheck {
                broken: Vec::new(),
                lease: LeaseVerdict::Live,
                premises_now: Premises::new(),
                changes: vec![],
                premise_error: None,
                read_at_ms: Some(0),
                budgets: Vec::new(),
            },
            resend: token > 1,
        })
    }

    fn claimed(token: u64, a: &str, prior_until_ms: i64) -> Event {
        Event::Claimed(Claimed {
            token,
            holder: holder(a),
            deadline_ms: 10_000,
            reason: TakeoverReason::HolderDead,
            prior_until_ms,
        })
    }

    fn committed(token: u64) -> Event {
        Event::Committed(Committed {
            token,
            via: Via::FirstSend,
            result: json!({}),
        })
    }

    #[test]
    fn a_takeover_narrows_the_dead_holders_window_and_a_late_answer_closes_it() {
        let h = [
            proposed(),
            dispatched(1, "a", 5_000),
            claimed(2, "b", 1_200),
        ];
        let Ok(EffectState::InFlight { claim, .. }) =
            fold(h.iter().enumerate().map(|(i, e)| (i as i64 * 100, e)))
        else {
            panic!()
        };
        assert_eq!(claim.token, 2);
        assert!(!claim.dispatched);
        assert_eq!(claim.quiet_after(None), 1_200);
        let late = Event::LateResult(LateResult {
            token: 1,
            answer: json!({"done": {"id": "re_1"}}),
        });
        let h = [
            proposed(),
            dispatched(1, "a", 5_000),
            claimed(2, "b", 5_000),
            late,
        ];
        let Ok(EffectState::InFlight { claim, .. }) = fold(h.iter().map(|e| (700, e))) else {
            panic!()
        };
        assert_eq!(claim.quiet_after(None), 700);
        assert_eq!(claim.late_done, vec![json!({"id": "re_1"})]);
    }

    #[test]
    fn an_unknown_late_answer_keeps_its_send_s_window_open() {
        for unknown in [
            json!({"unknown": "timed out after 30 s"}),
            json!({"unknown": "HTTP 503"}),
            json!({"unknown": "409: a request with this key is still in progress"}),
        ] {
            let h = [
                proposed(),
                dispatched(1, "a", 5_000),
                claimed(2, "b", 5_000),
                Event::LateResult(LateResult {
                    token: 1,
                    answer: unknown.clone(),
                }),
            ];
            let Ok(EffectState::InFlight { claim, .. }) = fold(h.iter().map(|e| (700, e))) else {
                panic!()
            };
            assert_eq!(
                claim.quiet_after(None),
                5_000,
                "{unknown}: the service may still be processing that request"
            );
        }
    }

    #[test]
    fn histories_no_honest_gate_writes_are_rejected_with_their_position() {
        let bad: [&[Event]; 5] = [
            &[committed(1)],
            &[proposed(), committed(1)],
            &[proposed(), dispatched(2, "a", 0)],
            &[proposed(), dispatched(1, "a", 0), claimed(3, "b", 0)],
            &[
                proposed(),
                dispatched(1, "a", 0),
                committed(1),
                committed(1),
            ],
        ];
        for h in bad {
            let err = fold(h.iter().map(|e| (0, e))).unwrap_err();
            assert_eq!(err.index, h.len() - 1, "{err}");
        }
    }

    #[test]
    fn a_resend_must_go_out_under_the_current_claim_by_its_holder() {
        let h = [
            proposed(),
            dispatched(1, "a", 0),
            claimed(2, "b", 0),
            dispatched(2, "a", 0),
        ];
        assert!(fold(h.iter().map(|e| (0, e))).is_err());
        let h = [
            proposed(),
            dispatched(1, "a", 0),
            claimed(2, "b", 0),
            dispatched(2, "b", 9),
            committed(2),
        ];
        assert!(matches!(
            fold(h.iter().map(|e| (0, e))),
            Ok(EffectState::Resolved { .. })
        ));
    }
}
