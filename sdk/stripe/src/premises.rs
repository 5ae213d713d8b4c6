//! A refund's premises: what Stripe says (amount paid, refunds by others) and, where the shop
//! runs an order service, what it says (is the order still eligible). Read by code at decision
//! time and again before every send.

use std::time::Duration;

use crate::refund::{refund_repairs, refunded};
use crate::refunds::StripeRefundPremises;
use interlock::core::{Premises, Repair};
use interlock::effect::EffectKey;
use interlock::premise::{PremiseError, PremiseReader};
use serde_json::{Value, json};

/// Stripe's facts plus, if a shop is given, its eligibility flag and, where the shop keeps one,
/// whether the customer is flagged (`GET {shop}/shop/orders/{id}` answering
/// `{"eligible": bool, "customer_flagged": bool}`, where `id` is the payment intent or the
/// charge the refund names).
#[derive(Debug, Clone)]
pub struct RefundPremises {
    /// Stripe's side.
    pub stripe: StripeRefundPremises,
    /// Base URL of the shop's order service, if there is one.
    pub shop: Option<String>,
}

impl RefundPremises {
    fn order(&self, shop: &str, order: &str) -> Result<(bool, Option<bool>), PremiseError> {
        let url = format!("{shop}/shop/orders/{}", crate::refunds::path_segment(order));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .http_status_as_error(false)
            .build()
            .into();
        let resp = agent
            .get(&url)
            .call()
            .map_err(|e| PremiseError::Unavailable(format!("{url}: {e}")))?;
        let status = resp.status().as_u16();
        let text = resp
            .into_body()
            .read_to_string()
            .map_err(|e| PremiseError::Unavailable(format!("{url}: {e}")))?;
        // A server error's body is often a proxy's HTML page: an outage, never an answer.
        if status >= 500 {
            return Err(PremiseError::Unavailable(format!("{url}: HTTP {status}")));
        }
        let body: Value = serde_json::from_str(&text)
            .map_err(|e| PremiseError::Invalid(format!("{url}: {e}")))?;
        let flagged = body.get("customer_flagged").and_then(Value::as_bool);
        match (status, body.get("eligible").and_then(Value::as_bool)) {
            (200, Some(e)) => Ok((e, flagged)),
            (404, _) => Err(PremiseError::Invalid(format!(
                "the shop has no order for {order}"
            ))),
            (s, _) => Err(PremiseError::Invalid(format!(
                "{url}: HTTP {s} without an eligibility flag"
            ))),
        }
    }
}

impl PremiseReader for RefundPremises {
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError> {
        let mut p = self.stripe.read(key, payload)?;
        if let Some(shop) = &self.shop {
            let of = refunded(payload).map_err(PremiseError::Invalid)?;
            let (eligible, flagged) = self.order(shop, of.id())?;
            p.insert("order_eligible".into(), json!(eligible));
            if let Some(flagged) = flagged {
                p.insert("customer_flagged".into(), json!(flagged));
            }
        }
        Ok(p)
    }

    fn repairs(&self, payload: &Value, now: &Premises) -> Vec<Repair> {
        refund_repairs(payload, now)
    }
}
