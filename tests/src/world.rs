//! One cell's world: $100 paid on one payment, one $20 refund approved under one lease, a
//! simulated payments service, a manual clock and (for gated systems) a journal on disk.

use std::sync::Arc;
use std::time::Duration;

use interlock::core::Premises;
use interlock::{Effect, EffectKey, Grant, ManualClock, PremiseReader, Tier};
use interlock_testkit::sim::{RefundPayload, SimPayments, SimRefundPremises};
use serde_json::json;

/// The payment refunded in every cell.
pub const PAYMENT: &str = "pi_881";
/// $100.
pub const PAID: i64 = 10_000;
/// The approved refund: $20.
pub const AMOUNT: i64 = 2_000;
/// What the model re-decides after a crash: $30.
pub const REDECIDED: i64 = 3_000;
/// An unrelated refund during the outage: $5.
pub const UNRELATED: i64 = 500;
/// The lease that approves the refund.
pub const LEASE: &str = "case-4471";
/// Stripe forgets idempotency keys after 24 h.
pub const WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Start of time in every cell.
pub const T0: i64 = 1_790_000_000_000;

/// The simulated world.
pub struct World {
    /// Shared clock.
    pub clock: ManualClock,
    /// The payments service.
    pub sim: Arc<SimPayments>,
}

impl World {
    /// A world whose payments service acts as a target of `tier`.
    pub fn new(tier: Tier) -> Self {
        let clock = ManualClock::at(T0);
        let sim = SimPayments::new(tier, WINDOW, Arc::new(clock.clone()));
        sim.add_payment(PAYMENT, PAID);
        Self { clock, sim }
    }

    /// The key every system uses for the approved request (a stable request id).
    pub fn key() -> EffectKey {
        EffectKey::derive(&["case-4471", "refund"])
    }

    /// The refund payload for `amount`.
    pub fn payload(amount: i64) -> RefundPayload {
        RefundPayload::of_payment_intent(PAYMENT, amount, "usd")
    }

    /// The decision: the payload plus premises read by code at decision time.
    pub fn decide(&self, amount: i64) -> anyhow::Result<Effect> {
        let key = Self::key();
        let effect = Effect::new(key.clone(), &Self::payload(amount), LEASE)?;
        let premises: Premises = SimRefundPremises(self.sim.clone()).read(&key, &effect.payload)?;
        Ok(effect.premises(premises))
    }

    /// The lease as granted by support.
    pub fn grant() -> Grant {
        Grant {
            targets: Vec::new(),
            spenders: Vec::new(),
            id: LEASE.into(),
            approver: "ana@support".into(),
            scope: json!({ "payment_intent": PAYMENT })
                .as_object()
                .cloned()
                .unwrap_or_default(),
            cap: Some(("amount".into(), AMOUNT)),
            granted_ms: T0,
            expires_ms: None,
            revoked_ms: None,
            approval: None,
            // Scenarios run many keys under it, as a standing rule.
            uses: None,
            total: None,
        }
    }

    /// Total refunded on the payment, from the service's own records.
    pub fn refunded(&self) -> i64 {
        self.sim.refunded(PAYMENT)
    }
}
