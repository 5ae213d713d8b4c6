//! `decide()`: the body of the activity that decides an effect before `gated()` runs it. Every
//! team wrote the same dozen lines (the blocking read off the async runtime, each error turned
//! into a string) and made every error retryable, so a request no retry can change was tried
//! again and again where `gated()` refuses the same input at once. Here an error that no retry
//! changes is a non-retryable `InterlockRefused` with typed details, and the rest are retried.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use temporalio_sdk::activities::ActivityError;

use interlock::core::{Premises, RefusalCode, Status};
use interlock::effect::EffectKey;
use interlock::gate::{Bound, DecideError};
use interlock::premise::PremiseError;
use interlock::target::CanonicalError;

use crate::activity::{Failure, FailureDetails, GatedEffect, IN_FLIGHT, REFUSED};

/// What a decision fixed: the effect's key, its payload in the target's canonical form, the
/// premises as read and the lease. [`Decided::effect`] is what the gated activity runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Decided {
    /// The effect's key (a caller-fixed one: the decision and the send must agree on it).
    pub key: String,
    /// The payload, as the target names things.
    pub payload: Value,
    /// The premises the decision was made on.
    pub premises: Premises,
    /// The lease it runs under.
    pub lease: String,
}

impl Decided {
    /// The effect to hand `gated()`.
    pub fn effect(self) -> GatedEffect {
        GatedEffect::new(self.key, self.payload, self.lease).with_decided(self.premises)
    }
}

/// Decide the effect `payload` under `key` and `lease` through `bound`: put the payload in the
/// target's canonical form, read the premises and judge the binding's rules, off the async
/// runtime. An effect no retry can change (an unusable key or payload, facts the rules forbid,
/// a premise source that says the request is invalid) fails with a non-retryable
/// [`REFUSED`] carrying [`FailureDetails`]; a source that could not answer is retried
/// ([`IN_FLIGHT`]).
pub async fn decide(
    bound: &Bound,
    key: &str,
    payload: Value,
    lease: &str,
) -> Result<Decided, ActivityError> {
    let (bound, key, lease) = (bound.clone(), key.to_owned(), lease.to_owned());
    let shown_key = key.clone();
    let decided = tokio::task::spawn_blocking(move || {
        let effect = bound.decide(EffectKey::fixed(key)?, &payload, lease)?;
        Ok::<_, DecideError>(Decided {
            key: effect.key.as_str().to_owned(),
            payload: effect.payload,
            premises: effect.decided,
            lease: effect.lease,
        })
    })
    .await;
    match decided {
        Ok(decided) => decided.map_err(|e| undecided(&shown_key, &e).into()),
        // A panic in a target's or a reader's code recurs on every retry: refused for good, as
        // the gate refuses a payload its target panics on.
        Err(e) => Err(Failure {
            type_name: REFUSED,
            message: format!(
                "deciding {shown_key} failed inside the target's or reader's code: {e}"
            ),
            retryable: false,
            next_retry_delay: None,
            details: None,
        }
        .into()),
    }
}

/// How a decision that could not be made reaches the workflow. Pure, so the mapping is tested
/// without a Temporal server.
pub fn undecided(key: &str, e: &DecideError) -> Failure {
    let refusal = match e {
        DecideError::Effect(_) | DecideError::Canonical(CanonicalError::Invalid(_)) => {
            Some(RefusalCode::InvalidPayload)
        }
        // The source answered that the request cannot be (no such payment, another currency).
        DecideError::Premises(PremiseError::Invalid(_)) => Some(RefusalCode::PremiseError),
        DecideError::Rules { .. } => Some(RefusalCode::PremiseRule),
        // A source that did not answer, or a cause this crate does not know yet: deciding again
        // sends nothing, so it is tried again (as often as the activity's retry policy allows:
        // give the decision activity a maximum of attempts).
        _ => None,
    };
    match refusal {
        Some(code) => Failure {
            type_name: REFUSED,
            message: e.to_string(),
            retryable: false,
            next_retry_delay: None,
            details: Some(Box::new(FailureDetails {
                key: key.to_owned(),
                outcome: Status::Refused,
                refusal: Some(code),
                target_code: None,
                reason: e.to_string(),
                changes: Vec::new(),
                repairs: Vec::new(),
            })),
        },
        None => Failure {
            type_name: IN_FLIGHT,
            message: format!("could not decide yet: {e}"),
            retryable: true,
            next_retry_delay: None,
            details: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_no_retry_can_change_is_refused_for_good_and_an_outage_is_retried() {
        let broken = undecided("req-1", &DecideError::Rules { broken: Vec::new() });
        assert_eq!((broken.type_name, broken.retryable), (REFUSED, false));
        let details = broken.details.expect("typed details");
        assert_eq!(details.refusal, Some(RefusalCode::PremiseRule));
        assert_eq!(details.key, "req-1");
        let no_such = undecided(
            "req-1",
            &DecideError::Premises(PremiseError::Invalid("no such payment".into())),
        );
        assert_eq!((no_such.type_name, no_such.retryable), (REFUSED, false));
        assert_eq!(
            no_such.details.and_then(|d| d.refusal),
            Some(RefusalCode::PremiseError)
        );
        let invalid = undecided(
            "req-1",
            &DecideError::Canonical(CanonicalError::Invalid("amount is not an integer".into())),
        );
        assert_eq!((invalid.type_name, invalid.retryable), (REFUSED, false));
        assert_eq!(
            invalid.details.and_then(|d| d.refusal),
            Some(RefusalCode::InvalidPayload)
        );
        let down = undecided(
            "req-1",
            &DecideError::Premises(PremiseError::Unavailable("connection refused".into())),
        );
        assert_eq!((down.type_name, down.retryable), (IN_FLIGHT, true));
    }
}
