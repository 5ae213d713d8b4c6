//! The reads the rules stand on — lease, premises, repairs, lookup — each fenced against errors
//! and panics: a source that fails never lets a send through.

use std::panic::{AssertUnwindSafe, catch_unwind};

use serde_json::{Value, json};

use crate::core::decide::diff;
use crate::core::{LeaseVerdict, LookupAnswer, Premises, Proposed, Recheck, RefusalCode};
use crate::effect::EffectKey;
use crate::lease::LeaseError;
use crate::premise::PremiseError;

use super::Bound;

impl Bound {
    pub(super) fn lease_verdict(&self, first: &Proposed) -> LeaseVerdict {
        let now = self.now();
        let leases = &self.gate.leases;
        match catch_unwind(AssertUnwindSafe(|| {
            leases.check(&first.lease, &first.payload, now)
        })) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => LeaseVerdict::Error {
                message: e.to_string(),
            },
            Err(_) => LeaseVerdict::Error {
                message: "the lease store panicked".into(),
            },
        }
    }

    pub(super) fn describe_lease(&self, id: &str) -> Value {
        match self.gate.leases.describe(id) {
            Ok(Some(g)) => serde_json::to_value(g).unwrap_or(Value::Null),
            Ok(None) => Value::Null,
            Err(LeaseError::Store(e) | LeaseError::Invalid(e)) => json!({ "error": e }),
        }
    }

    /// R4 and R5 as of now. The second value is set when a failure may pass (the store or the
    /// premise source was unreachable) rather than a verdict.
    pub(super) fn recheck(
        &self,
        key: &EffectKey,
        first: &Proposed,
    ) -> (Recheck, Option<(RefusalCode, String)>) {
        let lease = self.lease_verdict(first);
        let premises = &self.premises;
        let read = catch_unwind(AssertUnwindSafe(|| premises.read(key, &first.payload)));
        let mut transient = match &lease {
            LeaseVerdict::Error { message } => Some((RefusalCode::LeaseError, message.clone())),
            _ => None,
        };
        let (premises_now, premise_error) = match read {
            Ok(Ok(p)) => (p, None),
            Ok(Err(e)) => {
                if matches!(e, PremiseError::Unavailable(_)) && transient.is_none() {
                    transient = Some((RefusalCode::PremiseError, e.to_string()));
                }
                (Premises::new(), Some(e.to_string()))
            }
            Err(_) => (
                Premises::new(),
                Some("the premise reader panicked".to_owned()),
            ),
        };
        let changes = if premise_error.is_none() {
            diff(&first.premises, &premises_now)
        } else {
            Vec::new()
        };
        (
            Recheck {
                lease,
                premises_now,
                changes,
                premise_error,
            },
            transient,
        )
    }

    pub(super) fn repairs_for(
        &self,
        first: &Proposed,
        recheck: &Recheck,
        refusing: bool,
    ) -> Vec<crate::core::Repair> {
        if !refusing || recheck.changes.is_empty() || recheck.lease != LeaseVerdict::Live {
            return Vec::new();
        }
        let premises = &self.premises;
        catch_unwind(AssertUnwindSafe(|| {
            premises.repairs(&first.payload, &recheck.premises_now)
        }))
        .unwrap_or_default()
    }

    pub(super) fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        let target = &self.target;
        catch_unwind(AssertUnwindSafe(|| target.lookup(key, payload)))
            .unwrap_or_else(|_| LookupAnswer::Unknown("the target panicked in lookup".into()))
    }
}
