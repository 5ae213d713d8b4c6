//! The two activities. `decide` may run as often as Temporal likes: it only reads. `refund` is
//! gated: Temporal may run it again after a crash, and the gate makes the second run answer from
//! the journal, resend under the same key, or refuse — never refund again.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::sync::Arc;

use interlock::Bound;
use interlock_stripe::RefundPayload;
use interlock_temporal::{Decided, gated};
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use crate::{RefundRequest, Refunded};

/// The rule every refund's facts must satisfy, at decide and again before every send: what is
/// left to refund covers the amount. A fact that stayed put can still forbid the refund; the
/// gate judges it instead of only noticing that it moved.
pub const RULES: [&str; 1] = ["amount_paid - refunded_by_others >= payload.amount"];

/// The refund activities, built once per worker.
pub struct RefundActivities {
    /// Stripe refunds bound to the gate (target, premises, journal) with [`RULES`].
    pub refunds: Bound,
}

fn payload(r: &RefundRequest) -> serde_json::Value {
    serde_json::json!(RefundPayload::of_payment_intent(
        &r.payment_intent,
        r.amount,
        &r.currency
    ))
}

#[activities]
impl RefundActivities {
    /// Read the premises (amount paid, currency, refunds by others) and judge the rules on
    /// them. A request no retry can change (a payment that does not exist, facts the rules
    /// forbid) fails at once as `InterlockRefused`; a service that did not answer is retried.
    #[activity(name = "decide")]
    pub async fn decide(
        self: Arc<Self>,
        _ctx: ActivityContext,
        request: RefundRequest,
    ) -> Result<Decided, ActivityError> {
        interlock_temporal::decide(
            &self.refunds,
            &request.request_id,
            payload(&request),
            &request.lease,
        )
        .await
    }

    /// The refund, through the gate.
    #[activity(name = "refund")]
    pub async fn refund(
        self: Arc<Self>,
        ctx: ActivityContext,
        decided: Decided,
    ) -> Result<Refunded, ActivityError> {
        // For budgets that count by label, add them here (`.with_label(name, value)`); gated()
        // adds workflow_type, activity_type and task_queue itself.
        let receipt = gated(&ctx, &self.refunds, decided.effect()).await?;
        Ok(Refunded {
            refund_id: receipt.result["id"].as_str().map(str::to_owned),
            via: receipt.via,
            replayed: receipt.replayed,
        })
    }
}
