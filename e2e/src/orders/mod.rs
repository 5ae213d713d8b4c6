//! The kill matrix's database-effect workflow: cancel an order and credit its customer in the
//! shop's own database, with the worker killed at every point of the write — before the stage,
//! mid-stage, after the verdict, mid-`COMMIT` (PostgreSQL), after `COMMIT` before the journal's
//! record, during recovery — or the world moving while it is paused; and a refund the committed
//! cancellation asked for, rewritten where it waits before it is relayed. Judged by the shop's
//! own rows (the customer's credit, the order's status, the audit rows a trigger wrote) and the
//! payments API's own records.

mod cell;
mod relay;
mod report;

pub use cell::{CommitHold, OrderCell, Stage};
pub use relay::{Payments, Refunds};
pub use report::{check, render};

use e2e_worker::orders::OrderSystem;
/// What the world does while the worker is paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum World {
    /// The order ships: cancelling it is no longer right.
    Ships,
    /// The approval is revoked.
    Revoke,
}

/// How the first worker is interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// Not at all.
    None,
    /// SIGKILL at a named point of the write.
    At(&'static str),
    /// SIGKILL after `COMMIT`, then SIGKILL the worker that recovers, during its recovery.
    DuringRecovery,
    /// SIGKILL while the server holds the write's `COMMIT` (PostgreSQL: see `CommitHold`).
    MidCommit,
    /// Pause at a point, let the world change, then let the attempt go on.
    Pause(&'static str, World),
    /// No kill: the cancellation also asks for a refund, which is rewritten where it waits
    /// (another payment, a hundred times the amount) after the workflow closed, then relayed.
    RewriteOutbox,
}

/// One row of the matrix.
#[derive(Clone, Copy, Debug)]
pub struct OrderCase {
    /// Stable name.
    pub name: &'static str,
    /// The interruption.
    pub interrupt: Interrupt,
    /// What it means, for the report.
    pub what: &'static str,
}

impl OrderCase {
    /// Whether the write should land: not where the order shipped or the approval was revoked.
    pub fn wanted(&self) -> i64 {
        match self.interrupt {
            Interrupt::Pause(_, _) => 0,
            _ => 1,
        }
    }

    /// Whether the rows were committed when the worker was interrupted (`None`: no
    /// interruption to check).
    pub fn committed_at_interrupt(&self) -> Option<bool> {
        match self.interrupt {
            Interrupt::None | Interrupt::RewriteOutbox => None,
            Interrupt::At(p) => Some(p == "after_response"),
            Interrupt::DuringRecovery | Interrupt::MidCommit => Some(true),
            Interrupt::Pause(_, _) => Some(false),
        }
    }

    /// The order's status the shop should show at the end.
    pub fn status_after(&self) -> &'static str {
        match self.interrupt {
            Interrupt::Pause(_, World::Ships) => "shipped",
            Interrupt::Pause(_, World::Revoke) => "paid",
            _ => "cancelled",
        }
    }

    /// The cause a gated refusal must name.
    pub fn refusal(&self) -> Option<&'static str> {
        match self.interrupt {
            Interrupt::Pause(_, World::Ships) => Some("premise_moved"),
            Interrupt::Pause(_, World::Revoke) => Some("lease_dead"),
            _ => None,
        }
    }

    /// Whether the case means anything for `system` on this substrate: only PostgreSQL can hold
    /// a `COMMIT` in the server, and only the gate recovers.
    pub fn applies(&self, system: OrderSystem, pg: bool) -> bool {
        match self.interrupt {
            Interrupt::MidCommit => pg,
            Interrupt::DuringRecovery => system == OrderSystem::Gated,
            _ => true,
        }
    }
}

/// Every row, in table order.
pub const CASES: [OrderCase; 10] = [
    OrderCase {
        name: "clean",
        interrupt: Interrupt::None,
        what: "no interruption",
    },
    OrderCase {
        name: "kill_before_stage",
        interrupt: Interrupt::At("before_dispatch"),
        what: "SIGKILL before the transaction begins",
    },
    OrderCase {
        name: "kill_mid_stage",
        interrupt: Interrupt::At("mid_stage"),
        what: "SIGKILL with the rows written and measured, the transaction open",
    },
    OrderCase {
        name: "kill_after_verdict",
        interrupt: Interrupt::At("after_verdict"),
        what: "SIGKILL after the checks and the last look passed, before COMMIT",
    },
    OrderCase {
        name: "kill_mid_commit",
        interrupt: Interrupt::MidCommit,
        what: "SIGKILL while the server holds the COMMIT (PostgreSQL)",
    },
    OrderCase {
        name: "kill_after_commit",
        interrupt: Interrupt::At("after_response"),
        what: "SIGKILL after COMMIT, before the journal records it",
    },
    OrderCase {
        name: "kill_during_recovery",
        interrupt: Interrupt::DuringRecovery,
        what: "SIGKILL after COMMIT, then SIGKILL the recoverer mid-recovery",
    },
    OrderCase {
        name: "order_ships_before_stage",
        interrupt: Interrupt::Pause("before_dispatch", World::Ships),
        what: "the order ships after the decision, before the write",
    },
    OrderCase {
        name: "approval_revoked_mid_stage",
        interrupt: Interrupt::Pause("mid_stage", World::Revoke),
        what: "the approval is revoked with the rows written, before COMMIT",
    },
    OrderCase {
        name: "outbox_row_rewritten_before_relay",
        interrupt: Interrupt::RewriteOutbox,
        what: "the refund the cancellation asked for is rewritten where it waits (another \
               payment, 100× the amount), then relayed",
    },
];

/// The CI subset: one kill inside the transaction, one inside `COMMIT` (PostgreSQL), one after
/// it, the late revocation and the rewritten refund.
pub const QUICK: [&str; 5] = [
    "kill_after_verdict",
    "kill_mid_commit",
    "kill_after_commit",
    "approval_revoked_mid_stage",
    "outbox_row_rewritten_before_relay",
];
