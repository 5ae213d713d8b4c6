//! The outbox: calls a plan asks for once its rows have committed, and the relay that makes
//! them. A stage writes its plan's calls in its own transaction, after the verdict and beside the
//! marker, so a call exists if and only if the rows committed — a refused or rolled-back plan
//! leaves none. The relay delivers each through the gate bound to its target, under an effect
//! key derived from the outbox's name, the plan's key and the call's id, so a delivery is
//! journaled, leased and recovered by its target's tier like any other effect (it carries no
//! premises of its own: the facts were judged when the plan committed): a relay that dies
//! mid-send and runs again submits the same key, and the gate answers from its journal or
//! recovers, never sending twice what the target's tier can tell apart. A call is marked
//! delivered only with an outcome that another attempt would not change.
//!
//! The outbox's rows live in the team's database, where a plain connection can rewrite them.
//! So a row is delivered only as the plan asked for it: its target, lease and payload must be
//! those of the call with its id in the plan the journal holds under the plan's key (the journal
//! the delivery is journaled in). A row that differs, or that no journaled plan asked for, is
//! not sent; it waits, named in the relay's report, for a person.
//!
//! A call belongs to the journal whose relay first claims it, in the database: a relay on
//! another journal never delivers it, so two journals over one database send it once.

use std::collections::BTreeMap;

use interlock::core::{EffectState, Resolution};
use interlock::{Bound, Effect, EffectKey, Journal, Outcome};
use serde_json::Value;

use crate::error::DbError;

/// One call in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The outbox it is in (the substrate's target name).
    pub source: String,
    /// Its place in that outbox: calls are read in the order their plans committed.
    pub seq: i64,
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
    /// The delivery's effect key: the same for every attempt, by any relay; another outbox's
    /// call under the same plan key and id has another.
    pub fn effect_key(&self) -> EffectKey {
        EffectKey::derive(&["interlock-outbox", &self.source, &self.plan_key, &self.id])
    }
}

/// Where a substrate keeps its outbox.
pub trait Outbox {
    /// The outbox's name in delivery keys (the substrate's target name).
    fn source(&self) -> &str;
    /// Calls not yet delivered whose place is after `after`, in order, at most `limit`.
    fn pending(&self, after: i64, limit: usize) -> Result<Vec<Request>, DbError>;
    /// Record that `request` was delivered with a final `outcome` (the gate's label).
    fn mark_delivered(&self, request: &Request, outcome: &str) -> Result<(), DbError>;
    /// Claim `request` for the relay whose journal is `relay` ([`Journal::instance`]), in the
    /// database:
    /// the first claim stands for good, since the call's delivery is journaled (and recovered)
    /// in that journal alone. `None`: the call is this relay's; `Some(other)`: another
    /// journal's relay holds it.
    fn claim(&self, request: &Request, relay: &str) -> Result<Option<String>, DbError>;
}

/// What one pass of the relay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Relayed {
    /// Calls that reached a final outcome, with it (`COMMITTED/…`, `FAILED:…`, `REFUSED:…`,
    /// `AMBIGUOUS`, `APPLIED_TWICE`).
    pub delivered: Vec<(Request, String)>,
    /// Calls left for a later pass, with why (in flight elsewhere, a refusal that is not final,
    /// the journal unreadable, no gate bound for the target, an outcome not yet marked).
    pub waiting: Vec<(Request, String)>,
}

/// One pass over the outbox: every waiting call, in order, submitted through the gate bound for
/// its target (`targets`, by target name), until `limit` have been delivered. A call that must
/// wait does not hold up those after it.
pub fn relay(
    outbox: &dyn Outbox,
    targets: &BTreeMap<String, &Bound>,
    limit: usize,
) -> Result<Relayed, DbError> {
    let mut done = Relayed::default();
    let mut after = 0;
    while done.delivered.len() < limit {
        let page = outbox.pending(after, limit)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for request in page {
            if done.delivered.len() >= limit {
                break;
            }
            match deliver(outbox, targets, &request) {
                Ok(label) => done.delivered.push((request, label)),
                Err(why) => done.waiting.push((request, why)),
            }
        }
    }
    Ok(done)
}

/// Deliver one call: its final outcome, marked; or why it waits.
fn deliver(
    outbox: &dyn Outbox,
    targets: &BTreeMap<String, &Bound>,
    request: &Request,
) -> Result<String, String> {
    let Some(bound) = targets.get(&request.target) else {
        let why = format!(
            "no gate is bound for target `{}`: give the relay one",
            request.target
        );
        tracing::warn!(key = %request.plan_key, id = %request.id, "{why}");
        return Err(why);
    };
    if let Err(why) = as_planned(bound.journal().as_ref(), request) {
        tracing::error!(key = %request.plan_key, id = %request.id, "outbox call not sent: {why}");
        return Err(why);
    }
    // Two journals can each hold the plan as committed (one by its own stage, the other by a
    // lookup of the marker), and each would deliver the call under the same key, which a target
    // without dedupe takes twice: the database gives the call to one journal's relays only.
    let journal = bound
        .journal()
        .instance()
        .map_err(|e| format!("the journal's name could not be read: {e}"))?;
    match outbox.claim(request, &journal) {
        Ok(None) => {}
        Ok(Some(other)) => {
            let why = format!(
                "claimed by the relay of journal {other}: only that journal's relays deliver \
                 and recover it"
            );
            tracing::warn!(key = %request.plan_key, id = %request.id, "{why}");
            return Err(why);
        }
        Err(e) => return Err(format!("could not be claimed: {e}")),
    }
    let effect = Effect::new(request.effect_key(), &request.payload, &request.lease)
        .map_err(|e| format!("not a payload: {e}"))?;
    let outcome = bound.submit(&effect).map_err(|e| e.to_string())?;
    let label = outcome.label();
    // A refusal that does not end the effect (another payload under its key) is not an answer.
    let final_ = outcome.is_final() && !matches!(&outcome, Outcome::Refused(r) if !r.is_final);
    if !final_ {
        return Err(label);
    }
    outbox.mark_delivered(request, &label).map_err(|e| {
        format!("{label}, but not marked delivered ({e}); the next pass replays it")
    })?;
    tracing::info!(key = %request.plan_key, id = %request.id, outcome = %label, "outbox call delivered");
    Ok(label)
}

/// Whether `request` is the call its plan asked for: `journal` holds the effect under the
/// request's plan key as committed, with the commit's receipt naming that very plan, and the
/// plan has a call with the request's id and the same target, lease and payload. Else why not,
/// for a person.
pub fn as_planned(journal: &dyn Journal, request: &Request) -> Result<(), String> {
    let key = EffectKey::fixed(request.plan_key.clone())
        .map_err(|e| format!("the row names no plan key: {e}"))?;
    let state = journal
        .state(&key)
        .map_err(|e| format!("the journal could not be read: {e}"))?;
    // Only a plan the journal holds as committed asked for anything: a refused plan's calls, or
    // a plan still in flight here (its call waits for its recovery), are not sent.
    let (first, committed) = match &state {
        EffectState::Resolved {
            first,
            resolution: Resolution::Committed(c),
        } => (first, c),
        EffectState::Absent => {
            return Err(format!(
                "no plan under key {key} is in this journal: a row no journaled plan asked for \
                 (written outside a stage, or another journal's)"
            ));
        }
        EffectState::Resolved { resolution, .. } => {
            return Err(format!(
                "the plan under {key} ended {}: it committed nothing, and its calls are not sent \
                 (the row was written outside its stage)",
                resolution.kind()
            ));
        }
        _ => {
            return Err(format!(
                "the plan under {key} is not committed in this journal yet: the call waits for \
                 the plan's recovery"
            ));
        }
    };
    let plan = crate::Plan::from_payload(&first.payload)
        .map_err(|e| format!("the journaled payload under {key} is not a plan: {e}"))?;
    // The commit's receipt names the plan its marker was sealed for: this one.
    let sealed = committed.result.get("plan_hash").and_then(Value::as_str);
    if sealed != Some(crate::receipt::plan_hash(&plan).as_str()) {
        return Err(format!(
            "the commit journaled under {key} is not its plan's: not sent"
        ));
    }
    let Some(call) = plan.outbox.iter().find(|c| c.id == request.id) else {
        return Err(format!(
            "the plan under {key} asked for no call `{}`: the row was written outside its stage",
            request.id
        ));
    };
    let mut differs = Vec::new();
    if call.target != request.target {
        differs.push("target");
    }
    if call.lease != request.lease {
        differs.push("lease");
    }
    if call.payload != request.payload {
        differs.push("payload");
    }
    if differs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the row's {} {} from the call `{}` the plan under {key} asked for: the row was \
             rewritten after its stage; not sent",
            differs.join(", "),
            if differs.len() == 1 {
                "differs"
            } else {
                "differ"
            },
            request.id
        ))
    }
}
