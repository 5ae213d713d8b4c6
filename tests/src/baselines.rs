//! The systems Interlock is compared with, each given the best target it can use (the tier-1,
//! Stripe-like service): a naive retry with no key, an idempotency key alone, and a model of
//! durable execution that records each step's result and re-runs a step that died unrecorded.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use interlock::Effect;
use interlock_testkit::sim::{RefundPayload, SimPayments, SimResponse};

use crate::system::{Answer, Attempt, Fault, Says, System};

/// Which baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A fresh request per attempt, no key.
    Naive,
    /// The request id as idempotency key; nothing else.
    KeyOnly,
    /// Step results recorded and replayed; a step that died unrecorded is re-run with its key.
    Replay,
}

/// A baseline system.
pub struct Baseline {
    kind: Kind,
    sim: Arc<SimPayments>,
    steps: Mutex<HashMap<String, Answer>>,
}

impl Baseline {
    /// A baseline of `kind` against `sim`.
    pub fn new(kind: Kind, sim: Arc<SimPayments>) -> Self {
        Self {
            kind,
            sim,
            steps: Mutex::new(HashMap::new()),
        }
    }
}

fn answer(label: String, says: Says, is_final: bool) -> Answer {
    Answer {
        label,
        says,
        is_final,
        repair_offered: false,
        retry_after_ms: None,
    }
}

impl System for Baseline {
    fn name(&self) -> String {
        match self.kind {
            Kind::Naive => "naive retry",
            Kind::KeyOnly => "idempotency key only",
            Kind::Replay => "durable replay",
        }
        .into()
    }

    fn attempt(&self, effect: &Effect, _n: u32, faults: &[Fault]) -> anyhow::Result<Attempt> {
        let step = effect.key.to_string();
        if self.kind == Kind::Replay {
            let steps = self.steps.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            if let Some(a) = steps.get(&step) {
                return Ok(Attempt::Answered(Answer {
                    label: format!("REPLAYED({})", a.label),
                    ..a.clone()
                }));
            }
        }
        for f in faults {
            match f {
                Fault::CrashBeforeSend => return Ok(Attempt::Crashed),
                // The baselines read no premises: their point after the premise read is just
                // before the send.
                Fault::StallBeforeSend(s) | Fault::StallAfterPremiseRead(s) => s.hold(),
                Fault::CrashAfterApply => {}
            }
        }
        let p: RefundPayload = serde_json::from_value(effect.payload.clone())?;
        let key = match self.kind {
            Kind::Naive => None,
            Kind::KeyOnly | Kind::Replay => Some(step.as_str()),
        };
        let response = self
            .sim
            .create_refund_of(&p.refunded, p.amount, key, BTreeMap::new());
        if faults.iter().any(|f| matches!(f, Fault::CrashAfterApply)) {
            return Ok(Attempt::Crashed);
        }
        let a = match response {
            SimResponse::Created(_) => answer("APPLIED".into(), Says::Done, true),
            SimResponse::Replayed(_) => answer("APPLIED(replayed)".into(), Says::Done, true),
            SimResponse::KeyReused => answer("ERROR:idempotency_error".into(), Says::NotDone, true),
            SimResponse::Refused { code, .. } => {
                answer(format!("ERROR:{code}"), Says::NotDone, false)
            }
            SimResponse::KeyInUse => answer("ERROR:409".into(), Says::NotDone, false),
            SimResponse::ServerError(s) | SimResponse::ReplayedServerError(s) => {
                answer(format!("ERROR:{s}"), Says::NotDone, false)
            }
        };
        if self.kind == Kind::Replay && a.says == Says::Done {
            let mut steps = self.steps.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            steps.insert(step, a.clone());
        }
        Ok(Attempt::Answered(a))
    }
}
