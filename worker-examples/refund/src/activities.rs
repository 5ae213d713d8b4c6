//! The two activities. `decide` may run as often as Temporal likes: it only reads. `refund` is
//! gated: Temporal may run it again after a crash, and the gate makes the second run answer from
//! the journal, resend under the same key, or refuse — never refund again.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::sync::Arc;

use interlock::premise::PremiseReader;
use interlock::{Bound, EffectKey};
use interlock_stripe::{RefundPayload, RefundPremises};
use interlock_temporal::{GatedEffect, gated};
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use crate::{Decision, RefundRequest, Refunded};

/// The refund activities, built once per worker.
pub struct RefundActivities {
    /// Stripe refunds bound to the gate (target, premises, journal).
    pub refunds: Bound,
    /// The same premise reader the gate re-reads with before every send.
    pub premises: RefundPremises,
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
    /// Read the premises: amount paid, currency, refunds by others.
    #[activity(name = "decide")]
    pub async fn decide(
        self: Arc<Self>,
        _ctx: ActivityContext,
        request: RefundRequest,
    ) -> Result<Decision, ActivityError> {
        let this = self.clone();
        let r = request.clone();
        // The readers block (HTTP): off the async runtime.
        let read = tokio::task::spawn_blocking(move || {
            let key = EffectKey::fixed(r.request_id.clone()).map_err(|e| e.to_string())?;
            this.premises
                .read(&key, &payload(&r))
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| ApplicationFailure::new(e.to_string()))?;
        let premises = read.map_err(ApplicationFailure::new)?;
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
