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

/// The variable that says what a service other than Stripe promises (1, 2 or 3).
pub const TIER_ENV: &str = "INTERLOCK_STRIPE_TIER";
/// Stripe's own API: the one base whose tier is known without being told.
pub const STRIPE_API: &str = "https://api.stripe.com";

/// Why the environment does not make a setup.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetupError {
    /// The key or the base.
    #[error(transparent)]
    Config(#[from] crate::refunds::StripeConfigError),
    /// The shop's URL.
    #[error(transparent)]
    Shop(#[from] BadShopUrl),
    /// A base other than Stripe's without its tier: tier 1 trusts the service to dedupe keys,
    /// and a service that does not would be sent a refund twice.
    #[error(
        "STRIPE_API_BASE is {0}, not Stripe's: say what it promises with {TIER_ENV}=1 (it dedupes \
         Idempotency-Key for 24 h, as Stripe does), 2 (refunds can be listed, no dedupe) or 3 \
         (neither)"
    )]
    TierUnstated(String),
    /// Not 1, 2 or 3.
    #[error("{TIER_ENV} must be 1, 2 or 3, got {0:?}")]
    BadTier(String),
}

/// The tier stated for `base`, or Stripe's own when `base` is Stripe's and none is stated.
fn tier_for(base: &str, stated: Option<&str>) -> Result<Tier, SetupError> {
    match stated.filter(|t| !t.is_empty()) {
        Some(t) => t
            .parse::<u8>()
            .ok()
            .and_then(|n| Tier::try_from(n).ok())
            .ok_or_else(|| SetupError::BadTier(t.to_owned())),
        None if base == STRIPE_API => Ok(Tier::One),
        None => Err(SetupError::TierUnstated(base.to_owned())),
    }
}

/// A shop URL that cannot be one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the shop's order service URL must start with http:// or https://, got {0:?}; leave it out \
     to decide on Stripe's facts alone"
)]
pub struct BadShopUrl(pub String);

impl StripeRefundsSetup {
    /// From the environment, as the worker and the command line read it: `STRIPE_API_BASE` and
    /// `STRIPE_SECRET_KEY` ([`StripeConfig::from_env`]), `INTERLOCK_STRIPE_TIER` (required for a
    /// base other than Stripe's; Stripe's is tier 1) and `INTERLOCK_SHOP_URL`.
    pub fn from_env() -> Result<Self, SetupError> {
        let stripe = StripeConfig::from_env()?;
        let stated = std::env::var(TIER_ENV).ok();
        let tier = tier_for(&stripe.base_url, stated.as_deref())?;
        let mut setup = Self::new(stripe).shop(std::env::var("INTERLOCK_SHOP_URL").ok())?;
        setup.tier = tier;
        Ok(setup)
    }

    /// Tier 1 under the default name, no shop: for Stripe itself.
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

    /// The names of the premises a decision must carry, for callers that bring their own. The
    /// currency is not among them: every read refuses a refund in another currency than the
    /// payment's whatever the decision carries, and an effect decided before the currency was
    /// read must still be recoverable.
    pub fn required_premises(&self) -> Vec<String> {
        let mut names = vec!["amount_paid".to_owned(), "refunded_by_others".to_owned()];
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
    fn only_stripe_itself_is_trusted_at_tier_1_without_being_told() {
        assert_eq!(tier_for(STRIPE_API, None), Ok(Tier::One));
        assert_eq!(tier_for(STRIPE_API, Some("2")), Ok(Tier::Two));
        let err = tier_for("http://127.0.0.1:8787", None).unwrap_err();
        assert!(err.to_string().contains(TIER_ENV), "{err}");
        assert_eq!(tier_for("http://127.0.0.1:8787", Some("1")), Ok(Tier::One));
        assert!(matches!(
            tier_for("http://x", Some("4")),
            Err(SetupError::BadTier(_))
        ));
    }

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
