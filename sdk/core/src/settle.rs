//! Settling an effect the gate could not decide. An `AMBIGUOUS` effect is one whose landing the
//! gate cannot know (a target that neither dedupes nor can be asked, cut off mid-send): only a
//! person who looks at the target can say. Their word is worth something only once nothing the
//! gate sent can still land there — "not applied", read while a request is still on its way, is
//! true when they look and false a second later. So a settlement names the one ambiguity it
//! answers (the hash of that `AMBIGUOUS` record), says when the person looked, and is refused
//! until every send's window has closed, and when the looking came before it.
//!
//! The signature is checked outside the core (it needs the person's key and the directory); the
//! core decides whether the statement may end the effect, and how it ends: applied becomes
//! `COMMITTED` (`settled_by_person`, with the reference they found), not applied becomes `FAILED`
//! (`settled_not_applied`), which gives back what the effect held of its lease and budgets.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::mutants::{self, Mutant};
use super::record::{Committed, Event, Failed, Via};
use super::state::{EffectState, HistoryError, Resolution, fold_one};
use super::status::Status;

/// How far the signer's clock may disagree with the journal's. A look must come this long after
/// the last send's window closed, by the signer's clock, and may be stamped at most this far
/// ahead of the journal's: a signer whose clock runs fast cannot pass off a look taken before the
/// window closed as one taken after.
pub const MAX_SKEW_MS: i64 = 5_000;

/// The field of a settled effect's result naming who settled it.
pub const SETTLED_BY: &str = "interlock_settled_by";

/// The failure code of an effect a person settled as not applied.
pub const NOT_APPLIED_CODE: &str = "settled_not_applied";

/// What a person found at the target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "found", rename_all = "snake_case")]
pub enum Finding {
    /// The target holds the effect, under this reference (a refund's id, say).
    Applied {
        /// The target's reference for it.
        reference: String,
    },
    /// The target holds nothing of it.
    NotApplied,
}

/// What a person signs to settle an `AMBIGUOUS` effect.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Settlement {
    /// The effect's key.
    pub effect: String,
    /// The hash of the `AMBIGUOUS` record it answers: a statement cannot be moved to another
    /// effect, or to a later ambiguity of the same one.
    pub ambiguous: String,
    /// What they found.
    pub finding: Finding,
    /// Who (their id in the directory).
    pub person: String,
    /// What they looked at, in their words.
    #[serde(default)]
    pub note: String,
    /// When they looked at the target (ms since the epoch).
    pub looked_ms: i64,
}

/// `SETTLED`: a person's signed statement of what they found at the target, ending an
/// `AMBIGUOUS` effect.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Settled {
    /// The token of the claim the ambiguity was recorded under.
    pub token: u64,
    /// What was signed.
    pub statement: Settlement,
    /// The signature's algorithm (`ed25519`).
    pub alg: String,
    /// The signature, hex.
    pub signature: String,
}

/// How a settled effect ends.
pub(crate) fn resolution_of(s: &Settled) -> Resolution {
    let by = &s.statement.person;
    match &s.statement.finding {
        Finding::Applied { reference } => Resolution::Committed(Committed {
            token: s.token,
            via: Via::SettledByPerson,
            result: json!({ "id": reference, SETTLED_BY: by }),
        }),
        Finding::NotApplied => Resolution::Failed(Failed {
            token: s.token,
            code: NOT_APPLIED_CODE.into(),
            message: format!(
                "{by} looked at the target and found nothing of it: it did not happen, and a new \
                 decision needs a new key"
            ),
        }),
    }
}

/// The effect a settlement says the target holds, in the shape a send's answer gives.
pub fn found_value(s: &Settled) -> Option<Value> {
    match &s.statement.finding {
        Finding::Applied { reference } => {
            Some(json!({ "id": reference, SETTLED_BY: s.statement.person }))
        }
        Finding::NotApplied => None,
    }
}

/// Where an `AMBIGUOUS` effect stands for settling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// The position of the `AMBIGUOUS` record in the key's chain.
    pub index: usize,
    /// The claim token it was recorded under.
    pub token: u64,
    /// No send of the effect can land at the target after this time.
    pub quiet_after_ms: i64,
}

/// Why a statement may not settle the effect (yet).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettleRefusal {
    /// The journal holds nothing under the key.
    #[error("the journal holds no effect under this key")]
    NoSuchEffect,
    /// Recovery has not decided the effect yet.
    #[error(
        "the effect is in flight: a send may still be on its way and recovery has not decided \
         it; run `interlock recover` on it (or let the worker's retry run) first"
    )]
    InFlight,
    /// Nothing was ever dispatched.
    #[error(
        "the effect was proposed but never dispatched: nothing was sent, so there is nothing to \
         settle; `interlock recover` continues or refuses it"
    )]
    NeverSent,
    /// A person settled it already.
    #[error("the effect was settled already, by {by}")]
    AlreadySettled {
        /// Who settled it.
        by: String,
    },
    /// The effect is decided (or was settled already).
    #[error("the effect is {status}, not AMBIGUOUS: only an ambiguous effect is settled")]
    NotAmbiguous {
        /// Where it stands.
        status: Status,
    },
    /// A send may still land.
    #[error(
        "a send of the effect may still land at the target until {until_ms} (ms since the \
         epoch): look at the target after then, and sign what you find"
    )]
    SendMayLand {
        /// When the last window closes.
        until_ms: i64,
    },
    /// The person looked before every send's window closed (with the clocks' margin).
    #[error(
        "the statement says the target was looked at at {looked_ms}, but a send could still \
         land until {until_ms} (and a look counts only {margin_ms} ms after that, for the \
         clocks' disagreement): look again after then and sign what you find"
    )]
    LookedTooEarly {
        /// When they looked.
        looked_ms: i64,
        /// When the last window closed.
        until_ms: i64,
        /// How long after it a look counts.
        margin_ms: i64,
    },
    /// The statement's time of looking is ahead of the journal's clock.
    #[error(
        "the statement says the target was looked at at {looked_ms}, after the journal's clock \
         ({now_ms}): check the signer's clock"
    )]
    LookedInFuture {
        /// When they say they looked.
        looked_ms: i64,
        /// The journal's clock.
        now_ms: i64,
    },
    /// The statement is about another effect.
    #[error("the statement settles effect {named}, not this one")]
    OtherEffect {
        /// The effect it names.
        named: String,
    },
    /// The statement answers another `AMBIGUOUS` record than the one in the journal.
    #[error(
        "the statement answers AMBIGUOUS record {named}, but this effect's is {recorded}: draft \
         the statement again from the journal"
    )]
    OtherAmbiguity {
        /// The hash it names.
        named: String,
        /// The hash of the journal's record.
        recorded: String,
    },
    /// An applied finding with no usable reference.
    #[error(
        "an applied finding must name the target's reference for the effect (its id), with no \
         spaces or control characters"
    )]
    NoReference,
    /// The journal holds proof the effect landed, and the statement says otherwise.
    #[error(
        "the journal holds the target's word that the effect landed as {found} (a confirmation \
         or a late answer recorded since it was left ambiguous); the statement says {said}: look \
         again"
    )]
    ContradictsEvidence {
        /// What the journal shows landed.
        found: String,
        /// What the statement says.
        said: String,
    },
    /// The key's history breaks the journal's grammar.
    #[error(transparent)]
    History(#[from] HistoryError),
}

/// Where the key's history (oldest first, each record with its time) stands for settling: the
/// window of its `AMBIGUOUS` record, or why it cannot be settled.
pub fn window<'a>(
    history: impl IntoIterator<Item = (i64, &'a Event)>,
) -> Result<Window, SettleRefusal> {
    let mut state = EffectState::Absent;
    let mut found = None;
    let mut settled = None;
    for (index, (at_ms, event)) in history.into_iter().enumerate() {
        if let Event::Settled(s) = event {
            settled = Some(s.statement.person.clone());
        }
        if let (Event::Ambiguous(_), EffectState::InFlight { claim, .. }) = (event, &state) {
            found = Some(Window {
                index,
                token: claim.token,
                quiet_after_ms: claim.quiet_after(None),
            });
        }
        state = fold_one(state, index, at_ms, event)?;
    }
    if let Some(by) = settled {
        return Err(SettleRefusal::AlreadySettled { by });
    }
    match (state.status(), found) {
        (None, _) => Err(SettleRefusal::NoSuchEffect),
        (Some(Status::Proposed), _) => Err(SettleRefusal::NeverSent),
        (Some(Status::InFlight), _) => Err(SettleRefusal::InFlight),
        (Some(Status::Ambiguous), Some(w)) => Ok(w),
        (Some(status), _) => Err(SettleRefusal::NotAmbiguous { status }),
    }
}

/// A reference as the target would name it: no surrounding or inner whitespace, no control
/// characters (a pasted trailing space would otherwise name another effect than the target's).
fn usable_reference(reference: &str) -> bool {
    !reference.is_empty()
        && !reference
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
}

/// Whether what the statement found agrees with the effects the journal shows landed: a
/// statement that the effect did not land, or landed as another reference, is refused.
fn agrees_with_evidence(statement: &Settlement, landed: &[Value]) -> Result<(), SettleRefusal> {
    let ids: Vec<String> = landed
        .iter()
        .map(|v| {
            v.get("id")
                .and_then(Value::as_str)
                .map_or_else(|| v.to_string(), str::to_owned)
        })
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let found = ids.join(", ");
    match &statement.finding {
        Finding::NotApplied => Err(SettleRefusal::ContradictsEvidence {
            found,
            said: "it was not applied".into(),
        }),
        Finding::Applied { reference } if !ids.iter().any(|i| i == reference) => {
            Err(SettleRefusal::ContradictsEvidence {
                found,
                said: format!("it was applied as {reference}"),
            })
        }
        Finding::Applied { .. } => Ok(()),
    }
}

/// Whether `statement` may settle the effect `key`, whose `AMBIGUOUS` record (hash
/// `ambiguous_hash`) stands in `window`, at `now_ms`, when the key's records show `landed`
/// landed ([`crate::state::landed_evidence`]) and the signer's clock may disagree with the
/// journal's by `max_skew_ms` ([`MAX_SKEW_MS`] where they are different machines).
pub fn check(
    key: &str,
    window: &Window,
    ambiguous_hash: &str,
    statement: &Settlement,
    landed: &[Value],
    (now_ms, max_skew_ms): (i64, i64),
) -> Result<(), SettleRefusal> {
    if statement.effect != key {
        return Err(SettleRefusal::OtherEffect {
            named: statement.effect.clone(),
        });
    }
    if statement.ambiguous != ambiguous_hash {
        return Err(SettleRefusal::OtherAmbiguity {
            named: statement.ambiguous.clone(),
            recorded: ambiguous_hash.to_owned(),
        });
    }
    if matches!(&statement.finding, Finding::Applied { reference } if !usable_reference(reference))
    {
        return Err(SettleRefusal::NoReference);
    }
    agrees_with_evidence(statement, landed)?;
    if statement.looked_ms > now_ms.saturating_add(max_skew_ms) {
        return Err(SettleRefusal::LookedInFuture {
            looked_ms: statement.looked_ms,
            now_ms,
        });
    }
    if mutants::on(Mutant::SettleWhileSendMayLand) {
        return Ok(());
    }
    let until_ms = window.quiet_after_ms;
    if now_ms <= until_ms {
        return Err(SettleRefusal::SendMayLand { until_ms });
    }
    if statement.looked_ms <= until_ms.saturating_add(max_skew_ms) {
        return Err(SettleRefusal::LookedTooEarly {
            looked_ms: statement.looked_ms,
            until_ms,
            margin_ms: max_skew_ms,
        });
    }
    Ok(())
}

/// The `SETTLED` record for a checked statement.
pub fn settled(window: &Window, statement: Settlement, alg: &str, signature: &str) -> Event {
    Event::Settled(Settled {
        token: window.token,
        statement,
        alg: alg.to_owned(),
        signature: signature.to_owned(),
    })
}

#[cfg(test)]
#[path = "settle_tests.rs"]
mod tests;
