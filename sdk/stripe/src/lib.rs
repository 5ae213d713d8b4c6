//! Stripe for Interlock: refunds as a gate target, the premises a refund stands on, and Stripe's
//! signed webhooks as confirmations. The gate itself knows nothing of Stripe; everything that
//! speaks Stripe's API, its field names and its metadata lives here.
//!
//! * [`refund`]: what a refund is — its payload (a payment intent or a charge), the metadata field
//!   that carries the effect key, the `still_fits` repair.
//! * [`refunds`]: [`StripeRefunds`], the target over Stripe's HTTP API (tier 1 by its idempotency
//!   keys, tier 2 by listing refunds with their metadata).
//! * [`premises`]: [`RefundPremises`], Stripe's facts plus the shop's order eligibility.
//! * [`setup`]: [`StripeRefundsSetup`], the one way the worker and the gate server bind both.
//! * [`webhook`]: signed `refund.*` events recorded as confirmations, and confirmation by lookup.

pub mod premises;
pub mod refund;
pub mod refunds;
pub mod setup;
pub mod webhook;

pub use premises::RefundPremises;
pub use refund::{KEY_FIELD, RefundPayload, Refunded};
pub use refunds::{
    STRIPE_VERSION, StripeConfig, StripeConfigError, StripeRefundPremises, StripeRefunds,
};
pub use setup::{BadShopUrl, SetupError, StripeRefundsSetup};
