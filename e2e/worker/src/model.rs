//! What the workflow and its activities exchange.

use interlock::core::{Premises, RefusalCode, Status, Via};
use interlock_stripe::refund::{RefundPayload, Refunded};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How the refund step is carried out.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// A fresh request per attempt, no idempotency key.
    Naive,
    /// Temporal's recommended idempotency key: workflow run id + activity id.
    Keyed,
    /// A careful hand-written re-check: lookup, lease, premises, then a keyed send.
    Checked,
    /// Through the gate, the payments API acting as a tier-1 target.
    GatedT1,
    /// Through the gate, tier 2 (lookup, no dedupe).
    GatedT2,
    /// Through the gate, tier 3 (neither).
    GatedT3,
    /// The Python worker (`worker-examples/python`) through the gate server, tier 1.
    GatedPyT1,
    /// The Python worker through the gate server, tier 2.
    GatedPyT2,
    /// The Python worker through the gate server, the refund an HTTP target table at tier 1.
    GatedHttpT1,
    /// The same at tier 2.
    GatedHttpT2,
    /// The same at tier 3.
    GatedHttpT3,
}

impl System {
    /// Every system, in table order.
    pub const ALL: [System; 11] = [
        System::Naive,
        System::Keyed,
        System::Checked,
        System::GatedT1,
        System::GatedT2,
        System::GatedT3,
        System::GatedPyT1,
        System::GatedPyT2,
        System::GatedHttpT1,
        System::GatedHttpT2,
        System::GatedHttpT3,
    ];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            System::Naive => "naive",
            System::Keyed => "keyed",
            System::Checked => "checked",
            System::GatedT1 => "gated_t1",
            System::GatedT2 => "gated_t2",
            System::GatedT3 => "gated_t3",
            System::GatedPyT1 => "gated_py_t1",
            System::GatedPyT2 => "gated_py_t2",
            System::GatedHttpT1 => "gated_http_t1",
            System::GatedHttpT2 => "gated_http_t2",
            System::GatedHttpT3 => "gated_http_t3",
        }
    }

    /// The tier the payments API must act as for this system.
    pub fn service_tier(self) -> u8 {
        match self {
            System::GatedT2 | System::GatedPyT2 | System::GatedHttpT2 => 2,
            System::GatedT3 | System::GatedHttpT3 => 3,
            _ => 1,
        }
    }
}

/// An approved refund request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RefundRequest {
    /// The approved request's id: the gate's (and the checked baseline's) effect key.
    pub request_id: String,
    /// What to refund: a payment intent (`pi_…`) or a charge (`ch_…`).
    pub payment: String,
    /// Cents.
    pub amount: i64,
    /// ISO currency.
    pub currency: String,
    /// The lease (approval) it runs under.
    pub lease: String,
    /// How the refund step runs.
    pub system: System,
    /// What the refund is part of, for budgets that count by it (`label.NAME` in a budget's
    /// scope): the approval workflow labels a refund the rules clear alone `cleared_by=rules`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The refund step's heartbeat timeout and retry interval, when not the defaults. They travel
    /// in the workflow's input, not in a worker's flags: a worker replaying the workflow must
    /// schedule the step with the options it was first scheduled with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepTimings>,
}

/// How fast Temporal notices a dead attempt of the refund step, and how soon it tries again.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepTimings {
    /// The step's heartbeat timeout, ms: an attempt silent this long is failed and retried.
    pub heartbeat_ms: u64,
    /// The retry policy's interval, ms (no backoff).
    pub retry_ms: u64,
}

impl Default for StepTimings {
    /// A 2 s heartbeat timeout, a retry every second.
    fn default() -> Self {
        Self {
            heartbeat_ms: 2_000,
            retry_ms: 1_000,
        }
    }
}

impl RefundRequest {
    /// What the refund names at Stripe: a charge when the id is a charge's (`ch_…`), else a
    /// payment intent.
    pub fn refunded(&self) -> Refunded {
        if self.payment.starts_with("ch_") {
            Refunded::Charge(self.payment.clone())
        } else {
            Refunded::PaymentIntent(self.payment.clone())
        }
    }

    /// The refund effect's payload, as Stripe's create-refund call names its fields.
    pub fn payload(&self) -> Value {
        let payload = match self.refunded() {
            Refunded::PaymentIntent(pi) => {
                RefundPayload::of_payment_intent(pi, self.amount, &self.currency)
            }
            Refunded::Charge(ch) => RefundPayload::of_charge(ch, self.amount, &self.currency),
        };
        serde_json::to_value(payload).unwrap_or(Value::Null)
    }
}

/// The request with the premises read at decision time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Decision {
    /// The request.
    pub request: RefundRequest,
    /// Premises as decided.
    pub premises: Premises,
}

/// How a refund step ended, as its workflow reports it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Reported {
    /// The gate: the refund landed once.
    Committed,
    /// The gate: a check failed and nothing was sent on the refusing path.
    Refused,
    /// The gate: the payments API definitively said no.
    Failed,
    /// The gate: unknowable from here.
    Ambiguous,
    /// The gate: the payments API holds the refund more than once.
    AppliedTwice,
    /// A baseline: the payments API answered with a refund.
    Refunded,
    /// A baseline: its transaction committed the shop's rows (or found its key already there).
    Applied,
    /// The step failed in a way its system does not classify.
    #[default]
    Error,
}

impl Reported {
    /// The label (`COMMITTED`, `REFUNDED`, …).
    pub fn label(self) -> &'static str {
        match self {
            Self::Committed => "COMMITTED",
            Self::Refused => "REFUSED",
            Self::Failed => "FAILED",
            Self::Ambiguous => "AMBIGUOUS",
            Self::AppliedTwice => "APPLIED_TWICE",
            Self::Refunded => "REFUNDED",
            Self::Applied => "APPLIED",
            Self::Error => "ERROR",
        }
    }
}

impl From<Status> for Reported {
    fn from(s: Status) -> Self {
        match s {
            Status::Committed => Self::Committed,
            Status::Refused => Self::Refused,
            Status::Failed => Self::Failed,
            Status::Ambiguous => Self::Ambiguous,
            Status::AppliedTwice => Self::AppliedTwice,
            _ => Self::Error,
        }
    }
}

/// What the workflow answers: its account of what happened.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct RefundReport {
    /// How the step ended.
    pub outcome: Reported,
    /// How a commit is known to have landed.
    pub via: Option<Via>,
    /// Why it was refused.
    pub refusal: Option<RefusalCode>,
    /// The payments API's error code, or the failure type of an unclassified error.
    pub code: Option<String>,
    /// The refund id the answer names, if any.
    pub refund_id: Option<String>,
    /// For a person.
    pub detail: String,
    /// Repairs offered (names only).
    pub repairs: Vec<String>,
}

impl RefundReport {
    /// `OUTCOME` or `OUTCOME:how` (the via, the refusal code or the error code).
    pub fn label(&self) -> String {
        let how = self
            .via
            .map(|v| v.as_str().to_owned())
            .or(self.refusal.map(|r| r.as_str().to_owned()))
            .or(self.code.clone());
        match how {
            Some(c) => format!("{}:{c}", self.outcome.label()),
            None => self.outcome.label().to_owned(),
        }
    }

    /// Whether the answer claims money moved.
    pub fn says_refunded(&self) -> Option<bool> {
        match self.outcome {
            Reported::Committed | Reported::Refunded | Reported::Applied => Some(true),
            Reported::Refused | Reported::Failed | Reported::Error => Some(false),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(step: Option<StepTimings>) -> RefundRequest {
        RefundRequest {
            request_id: "req-1".into(),
            payment: "pi_1".into(),
            amount: 2000,
            currency: "usd".into(),
            lease: "lease-1".into(),
            system: System::GatedT1,
            labels: Default::default(),
            step,
        }
    }

    #[test]
    fn a_request_with_the_default_step_is_encoded_as_before_and_reads_back() {
        let plain = serde_json::to_value(request(None)).unwrap();
        assert!(
            plain.get("step").is_none(),
            "workflows started before the option replay with the same input"
        );
        assert_eq!(
            serde_json::from_value::<RefundRequest>(plain).unwrap(),
            request(None)
        );
        let fast = request(Some(StepTimings {
            heartbeat_ms: 1_000,
            retry_ms: 500,
        }));
        let encoded = serde_json::to_value(&fast).unwrap();
        assert_eq!(encoded["step"]["heartbeat_ms"], 1_000);
        assert_eq!(
            serde_json::from_value::<RefundRequest>(encoded).unwrap(),
            fast
        );
    }
}
