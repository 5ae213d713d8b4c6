//! The outbox: calls a plan asks for once its rows have committed, and the relay that makes
//! them. A stage writes its plan's calls in its own transaction, after the verdict and beside the
//! marker, so a call exists if and only if the rows committed — a refused or rolled-back plan
//! leaves none. The relay delivers each through the gate bound to its target, under an effect
//! key derived from the plan's key and the call's id, so a delivery is journaled, leased,
//! premise-checked and recovered by its target's tier like any other effect: a relay that dies
//! mid-send and runs again submits the same key, and the gate answers from its journal or
//! recovers, never sending twice what the target's tier can tell apart. A call is marked
//! delivered only with an outcome that another attempt would not change.

use std::collections::BTreeMap;

use interlock::{Bound, Effect, EffectKey};
use serde_json::Value;

use crate::error::DbError;

/// One call in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The effect key of the plan that asked for it.
    pub plan_key: String,
    /// Its id in that plan.
    pub id: String,
    /// The target that delivers it.
    pub target: String,
    /// The lease the delivery runs under.
    pub lease: String,
    /// The payload.
    pub payload: Value,
}

impl Request {
    /// The delivery's effect key: the same for every attempt, by any relay.
    pub fn effect_key(&self) -> EffectKey {
        EffectKey::derive(&["interlock-outbox", &self.plan_key, &self.id])
    }
}

/// Where a substrate keeps its outbox.
pub trait Outbox {
    /// Calls not yet delivered, oldest first, at most `limit`.
    fn pending(&self, limit: usize) -> Result<Vec<Request>, DbError>;
    /// Record that `request` was delivered with a final `outcome` (the gate's label).
    fn mark_delivered(&self, request: &Request, outcome: &str) -> Result<(), DbError>;
}

/// What one pass of the relay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Relayed {
    /// Calls that reached a final outcome, with it (`COMMITTED/…`, `FAILED:…`, `REFUSED:…`,
    /// `AMBIGUOUS`, `APPLIED_TWICE`).
    pub delivered: Vec<(Request, String)>,
    /// Calls left for a later pass, with why (in flight elsewhere, the journal unreadable, no gate
    /// bound for the target).
    pub waiting: Vec<(Request, String)>,
}

/// One pass over the outbox: each pending call (at most `limit`) submitted through the gate bound
/// for its target (`targets`, by target name).
pub fn relay(
    outbox: &dyn Outbox,
    targets: &BTreeMap<String, &Bound>,
    limit: usize,
) -> Result<Relayed, DbError> {
    let mut done = Relayed::default();
    for request in outbox.pending(limit)? {
        let Some(bound) = targets.get(&request.target) else {
            let why = format!(
                "no gate is bound for target `{}`: give the relay one",
                request.target
            );
            tracing::warn!(key = %request.plan_key, id = %request.id, "{why}");
            done.waiting.push((request, why));
            continue;
        };
        let effect = match Effect::new(request.effect_key(), &request.payload, &request.lease) {
            Ok(e) => e,
            Err(e) => {
                // Never deliverable as written: ended, with why, for a person.
                let outcome = format!("REFUSED:bad_request ({e})");
                outbox.mark_delivered(&request, &outcome)?;
                done.delivered.push((request, outcome));
                continue;
            }
        };
        match bound.submit(&effect) {
            Ok(outcome) if outcome.is_final() => {
                let label = outcome.label();
                outbox.mark_delivered(&request, &label)?;
                tracing::info!(key = %request.plan_key, id = %request.id, outcome = %label, "outbox call delivered");
                done.delivered.push((request, label));
            }
            Ok(outcome) => done.waiting.push((request, outcome.label())),
            Err(e) => done.waiting.push((request, e.to_string())),
        }
    }
    Ok(done)
}
