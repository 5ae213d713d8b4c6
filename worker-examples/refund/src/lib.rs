//! A refund workflow whose refund cannot happen twice, without approval, or on facts that no
//! longer hold. Copy this crate and change what is yours (the request, the target, the tiers):
//!
//! 1. `decide` reads the premises — what the refund is decided on — in an activity of its own
//!    (`interlock_temporal::decide`), so they are recorded in the workflow's history and passed
//!    through it;
//! 2. `refund` hands the decision to `interlock_temporal::gated`, which is the whole activity:
//!    every attempt (the first, a retry after the worker died, a duplicate) passes through the
//!    journal, the lease check and a fresh read of the same premises;
//! 3. the workflow ends with the refund's receipt, or fails with the gate's typed failure
//!    (`InterlockRefused`, `InterlockAmbiguous`, …) for whoever started it to act on:
//!    `interlock_temporal::gate_answer` reads it back (code, changes, repairs), as `refund-start`
//!    prints it, and `interlock_temporal::activity_answer` reads it inside a workflow.

pub mod activities;
pub mod journal;
pub mod workflow;

use interlock::core::Via;
use serde::{Deserialize, Serialize};

pub use activities::{RULES, RefundActivities};
pub use workflow::RefundWorkflow;

/// An approved refund request: what the workflow is started with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RefundRequest {
    /// The approved request's id: the effect's key, so the same request is the same refund.
    pub request_id: String,
    /// The payment intent to refund (`pi_…`).
    pub payment_intent: String,
    /// In the currency's smallest unit (cents).
    pub amount: i64,
    /// Lower-case ISO code, checked against the payment's.
    pub currency: String,
    /// The lease (approval) it runs under, checked live before every send.
    pub lease: String,
}

/// How the workflow ends when the refund happened.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Refunded {
    /// Stripe's refund id.
    pub refund_id: Option<String>,
    /// How it is known to have happened once.
    pub via: Via,
    /// Answered from the journal: an earlier attempt already refunded.
    pub replayed: bool,
}

/// The Temporal task queue from `TASK_QUEUE` (default `refunds`), shared by worker and starter.
pub fn task_queue() -> String {
    std::env::var("TASK_QUEUE").unwrap_or_else(|_| "refunds".to_owned())
}
