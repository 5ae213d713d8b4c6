//! The database-effect workflow of the kill matrix: cancel an order and credit its customer in
//! the shop's own database (two tables, and a trigger nobody on the workflow's side wrote that
//! audits the order's change). The gated system stages the writes as a plan through the gate
//! (`interlock-db`); the baselines are what a team writes without it — a plain transaction in a
//! retried activity, with and without an idempotency table, and one guarded by hand.

pub mod activities;
pub mod paused;
pub mod shop;
pub mod workflow;

use serde::{Deserialize, Serialize};

use crate::model::StepTimings;

/// How the cancellation is written.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum OrderSystem {
    /// One transaction with both writes, retried by Temporal as it is.
    Plain,
    /// The same, skipped when its key (workflow run id + activity id) is already in an
    /// idempotency table the transaction writes too.
    PlainKeyed,
    /// The same transaction, guarded by hand: it cancels only if the order is still paid, and
    /// credits only if it cancelled.
    Guarded,
    /// A plan staged, measured, judged and committed once through the gate.
    Gated,
}

impl OrderSystem {
    /// Every system, in table order.
    pub const ALL: [OrderSystem; 4] = [Self::Plain, Self::PlainKeyed, Self::Guarded, Self::Gated];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::PlainKeyed => "plain_keyed",
            Self::Guarded => "guarded",
            Self::Gated => "gated",
        }
    }
}

/// An approved cancellation: cancel `order` and credit `customer` with `amount`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CancelOrder {
    /// The approved request's id: the gate's effect key.
    pub request_id: String,
    /// The order.
    pub order: i64,
    /// The customer credited.
    pub customer: i64,
    /// The credit.
    pub amount: i64,
    /// The lease (approval) it runs under.
    pub lease: String,
    /// A payment intent to refund `amount` of once the cancellation commits, asked for in the
    /// same transaction (the gate's outbox, or the baselines' own); none: no refund.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund: Option<String>,
    /// How the writes are made.
    pub system: OrderSystem,
    /// The write step's heartbeat timeout and retry interval, when not the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepTimings>,
}

/// The request with the order's status as it was decided on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct OrderDecision {
    /// The request.
    pub request: CancelOrder,
    /// The order's status when it was decided (`None`: no such order).
    pub status: Option<String>,
}
