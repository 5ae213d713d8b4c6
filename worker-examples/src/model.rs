//! What the workflow and its activities exchange.

use interlock::core::Premises;
use serde::{Deserialize, Serialize};

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
}

impl System {
    /// Every system, in table order.
    pub const ALL: [System; 6] = [
        System::Naive,
        System::Keyed,
        System::Checked,
        System::GatedT1,
        System::GatedT2,
        System::GatedT3,
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
        }
    }

    /// The tier the payments API must act as for this system.
    pub fn service_tier(self) -> u8 {
        match self {
            System::GatedT2 => 2,
            System::GatedT3 => 3,
            _ => 1,
        }
    }
}

/// An approved refund request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RefundRequest {
    /// The approved request's id: the gate's (and the checked baseline's) effect key.
    pub request_id: String,
    /// The payment to refund.
    pub payment_intent: String,
    /// Cents.
    pub amount: i64,
    /// ISO currency.
    pub currency: String,
    /// The lease (approval) it runs under.
    pub lease: String,
    /// How the refund step runs.
    pub system: System,
}

/// The request with the premises read at decision time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Decision {
    /// The request.
    pub request: RefundRequest,
    /// Premises as decided.
    pub premises: Premises,
}

/// What the workflow answers: its account of what happened.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct RefundReport {
    /// `COMMITTED`, `REFUNDED`, `REFUSED`, `AMBIGUOUS`, `FAILED` or `ERROR`.
    pub outcome: String,
    /// A refusal code, the target's error code, or how a commit was known.
    pub code: Option<String>,
    /// The refund id the answer names, if any.
    pub refund_id: Option<String>,
    /// For a person.
    pub detail: String,
    /// Repairs offered (names only).
    pub repairs: Vec<String>,
}

impl RefundReport {
    /// `OUTCOME` or `OUTCOME:code`.
    pub fn label(&self) -> String {
        match &self.code {
            Some(c) => format!("{}:{c}", self.outcome),
            None => self.outcome.clone(),
        }
    }

    /// Whether the answer claims money moved.
    pub fn says_refunded(&self) -> Option<bool> {
        match self.outcome.as_str() {
            "COMMITTED" | "REFUNDED" => Some(true),
            "REFUSED" | "FAILED" | "ERROR" => Some(false),
            _ => None,
        }
    }
}
