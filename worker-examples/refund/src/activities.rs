//! The two activities. `decide` may run as often as Temporal likes: it only reads. `refund` is
//! gated: Temporal may run it again after a crash, and the gate makes the second run answer from
//! the journal, resend under the same key, or refuse — never refund again.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::sync::Arc;

use interlock::gate::DecideError;
use interlock::premise::PremiseError;
use interlock::target::CanonicalError;
use interlock::{Bound, EffectKey};
use interlock_stripe::RefundPayload;
use interlock_temporal::{GatedEffect, gated};
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use crate::{Decision, RefundRequest, Refunded};

/// The rule every refund's facts must satisfy, at decide and again before every send: what is
/// left to refund covers the amount. A fact that stayed put can still forbid the refund; the
/// gate judges it instead of only noticing that it moved.
pub const RULES: [&str; 1] = ["amount_paid - refunded_by_others >= payload.amount"];

/// The refund activities, built once per worker.
pub struct RefundActivities {
    /// Stripe refunds bound to the gate (target, premises, journal) with [`RULES`].
    pub refunds: Bound,
}

/// A decision that cannot be made: one that no retry can change (a payload with no canonical
/// form, facts the rules forbid, a payment that does not exist) is refused for good, the rest
/// (a service that did not answer) are tried again.
fn undecided(e: &DecideError) -> ActivityError {
    let for_good = matches!(
        e,
        DecideError::Effect(_)
            | DecideError::Rules { .. }
            | DecideError::Canonical(CanonicalError::Invalid(_))
            | DecideError::Premises(PremiseError::Invalid(_))
    );
    ApplicationFailure::builder(e.to_string())
        .type_name(interlock_temporal::REFUSED.to_owned())
        .non_retryable(for_good)
        .build()
        .into()
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
    /// them.
    #[activity(name = "decide")]
    pub async fn decide(
        self: Arc<Self>,
        _ctx: ActivityContext,
        request: RefundRequest,
    ) -> Result<Decision, ActivityError> {
        let this = self.clone();
        let r = request.clone();
        // The readers block (HTTP): off the async runtime.
        let decided = tokio::task::spawn_blocking(move || {
            let key = EffectKey::fixed(r.request_id.clone()).map_err(DecideError::from)?;
            this.refunds.decide(key, &payload(&r), r.lease.clone())
        })
        .await
        .map_err(|e| ApplicationFailure::new(e.to_string()))?;
        let premises = decided.map_err(|e| undecided(&e))?.decided;
        Ok(Decision { request, premises })
    }

    /// The refund, through the gate.
    #[activity(name = "refund")]
    pub async fn refund(
        self: Arc<Self>,
        ctx: ActivityContext,
        d: Decision,
    ) -> Result<Refunded, ActivityError> {
        let effect = GatedEffect {
            key: Some(d.request.request_id.clone()),
            payload: payload(&d.request),
            decided: d.premises,
            lease: d.request.lease,
            // For budgets that count by label; gated() adds workflow_type, activity_type and
            // task_queue itself.
            labels: Default::default(),
        };
        let receipt = gated(&ctx, &self.refunds, effect).await?;
        Ok(Refunded {
            refund_id: receipt.result["id"].as_str().map(str::to_owned),
            via: receipt.via,
            replayed: receipt.replayed,
        })
    }
}
