//! One way to build Stripe refunds for a gate, so the worker, the gate server and every other
//! caller bind the same target with the same premises: a premise reader that drifted from its
//! target (another account, no shop, another name) would check facts the send never stood on.

use std::sync::Arc;

use interlock::core::Tier;
use interlock::gate::{Bound, Gate, GateError};

use crate::premises::RefundPremises;
use crate::refunds::{DEFAULT_NAME, StripeConfig, StripeRefundPremises, StripeRefunds};

/// Stripe refunds as a gate binds them: the account, the tier it is trusted at, the name the
/// journal records, and the shop's order service if one decides eligibility.
#[derive(Clone, Debug)]
pub struct StripeRefundsSetup {
    /// The Stripe account (or a server that speaks its API).
    pub stripe: StripeConfig,
    /// How far recovery trusts it: 1 for Stripe itself (keys deduped for 24 h, refunds listable).
    pub tier: Tier,
    /// The target's name in the journal ([`DEFAULT_NAME`] unless set).
    pub name: String,
    /// The shop's order service (`GET {shop}/shop/orders/{id}`), never looked for at Stripe's
    /// address; `None` decides on Stripe's facts alone.
    pub shop_url: Option<String>,
}

/// A shop URL that cannot be one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the shop's order service URL must start with http:// or https://, got {0:?}; leave it out \
     to decide on Stripe's facts alone"
)]
pub struct BadShopUrl(pub String);

impl StripeRefundsSetup {
    /// Tier 1 under the default name, no shop.
    pub fn new(stripe: StripeConfig) -> Self {
        Self {
            stripe,
            tier: Tier::One,
            name: DEFAULT_NAME.to_owned(),
            shop_url: None,
        }
    }

    /// With the shop's order service at `url` (an empty one means none).
    pub fn shop(mut self, url: Option<String>) -> Result<Self, BadShopUrl> {
        self.shop_url = match url.filter(|u| !u.is_empty()) {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                Some(u.trim_end_matches('/').to_owned())
            }
            Some(u) => return Err(BadShopUrl(u)),
            None => None,
        };
        Ok(self)
    }

    /// The target.
    pub fn target(&self) -> StripeRefunds {
        StripeRefunds::new(self.stripe.clone())
            .assume_tier(self.tier)
            .named(self.name.clone())
    }

    /// The premises, read from the same account as the target sends to.
    pub fn premises(&self) -> RefundPremises {
        RefundPremises {
            stripe: StripeRefundPremises(self.target()),
            shop: self.shop_url.clone(),
        }
    }

    /// The names of the premises a decision must carry, for callers that bring their own.
    pub fn required_premises(&self) -> Vec<String> {
        let mut names = vec![
            "amount_paid".to_owned(),
            "currency".to_owned(),
            "refunded_by_others".to_owned(),
        ];
        if self.shop_url.is_some() {
            names.push("order_eligible".to_owned());
        }
        names
    }

    /// The target and its premises bound to `gate`.
    pub fn bind(&self, gate: &Gate) -> Result<Bound, GateError> {
        gate.bind(Arc::new(self.target()), Arc::new(self.premises()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shop_url_must_be_http_and_an_empty_one_means_none() {
        let cfg = StripeConfig::new("http://127.0.0.1:1", "sk_test_x").unwrap();
        let s = StripeRefundsSetup::new(cfg.clone());
        assert_eq!(s.clone().shop(Some(String::new())).unwrap().shop_url, None);
        let shop = s.clone().shop(Some("http://shop/".into())).unwrap();
        assert_eq!(shop.shop_url.as_deref(), Some("http://shop"));
        assert!(
            shop.required_premises()
                .contains(&"order_eligible".to_owned())
        );
        assert!(s.shop(Some("shop.internal".into())).is_err());
    }
}
