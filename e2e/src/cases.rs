//! The kill matrix's rows: where the worker dies (or stalls), and what the world does meanwhile.

/// How the first worker is interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kill {
    /// Not at all.
    None,
    /// SIGKILL at a named point in the refund attempt.
    At(&'static str),
    /// SIGKILL while the payments API holds the response of a request it already applied.
    AtService,
    /// Pause at a point, let the world change, then let the attempt go on (no kill).
    PauseThenGo(&'static str),
    /// SIGKILL before the send; then SIGKILL the worker that recovers, during its recovery.
    DuringRecovery,
    /// Freeze the worker (SIGSTOP) before its send until the heartbeat times out and another
    /// attempt runs, then thaw it: two attempts overlap.
    Zombie,
    /// Pause at a point and freeze the process holding the attempt (SIGSTOP) while the world
    /// changes, for longer than a premise read may age before its dispatch; thaw it (SIGCONT)
    /// and let the attempt go on. No other worker runs meanwhile.
    FreezeAfter(&'static str),
    /// SIGKILL the gate server (not the worker) at a named point; restart it. Only for systems
    /// that reach the gate through the server.
    ServerAt(&'static str),
    /// SIGKILL the gate server while the payments API holds the response of a request it
    /// already applied; restart it. Only for systems that reach the gate through the server.
    ServerAtService,
}

/// What the world does while the worker is down (or paused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outage {
    /// Nothing.
    None,
    /// Support refunds by hand, no key: the same $20, or an unrelated amount.
    HandRefund(i64),
    /// The approval is revoked.
    RevokeLease,
    /// The order becomes ineligible.
    Ineligible,
    /// A day passes: the payments API forgets its idempotency keys.
    DayPasses,
}

/// Set-up before the workflow starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// Nothing special.
    Plain,
    /// The API answers 500 after applying the next refund.
    ServerErrorAfterApply,
    /// The payment is disputed: refunds are refused with a 400.
    Disputed,
    /// A second workflow for the same request starts at once.
    SecondWorkflow,
    /// After the first closes, a second workflow for the same request asks for $30.
    SecondWorkflowOtherAmount,
    /// The lease is one approval (one use); after the first closes, a workflow for another
    /// request asks for $20 under the same lease.
    SecondRequestSameLease,
    /// A budget on the payment has room left for one $20 refund, and a workflow for another
    /// request asks for $20 at the same moment: the two race for the last room.
    BudgetLastRoom,
    /// A budget allows one refund per payment intent an hour; after the first closes, a workflow
    /// for another request asks for $20 of the same payment named by its charge.
    SecondRequestByCharge,
}

/// One row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct E2eCase {
    /// Stable name.
    pub name: &'static str,
    /// Interruption.
    pub kill: Kill,
    /// The world's action.
    pub outage: Outage,
    /// Set-up.
    pub setup: Setup,
}

impl E2eCase {
    /// Refunds made by others during the cell.
    pub fn others_cents(&self) -> i64 {
        match self.outage {
            Outage::HandRefund(a) => a,
            _ => 0,
        }
    }

    /// What the approved refund itself should add.
    pub fn ours_wanted_cents(&self) -> i64 {
        match (self.outage, self.setup) {
            (Outage::HandRefund(2000) | Outage::RevokeLease | Outage::Ineligible, _) => 0,
            (_, Setup::Disputed) => 0,
            _ => 2000,
        }
    }

    /// Total the payment should show.
    pub fn wanted_cents(&self) -> i64 {
        self.others_cents() + self.ours_wanted_cents()
    }

    /// Whether the case means anything for `system`: the gate server's own kill points only
    /// for the systems that reach the gate through it.
    pub fn applies_to(&self, system: &str) -> bool {
        match self.kill {
            Kill::ServerAt(_) | Kill::ServerAtService => through_server(system),
            _ => true,
        }
    }
}

/// Whether `system` reaches the gate through the gate server (the Python worker's systems).
pub fn through_server(system: &str) -> bool {
    system.starts_with("gated_py") || crate::http_systems::is_http(system)
}

const fn case(name: &'static str, kill: Kill, outage: Outage, setup: Setup) -> E2eCase {
    E2eCase {
        name,
        kill,
        outage,
        setup,
    }
}

/// Every row.
pub const ALL: [E2eCase; 24] = [
    case("happy_path", Kill::None, Outage::None, Setup::Plain),
    case(
        "crash_before_journal",
        Kill::At("before_journal"),
        Outage::None,
        Setup::Plain,
    ),
    case(
        "crash_before_send",
        Kill::At("after_dispatch"),
        Outage::None,
        Setup::Plain,
    ),
    case(
        "crash_in_flight",
        Kill::AtService,
        Outage::None,
        Setup::Plain,
    ),
    case(
        "crash_after_response",
        Kill::At("after_response"),
        Outage::None,
        Setup::Plain,
    ),
    case(
        "crash_after_journal",
        Kill::At("after_journal"),
        Outage::None,
        Setup::Plain,
    ),
    case(
        "kill_during_recovery",
        Kill::DuringRecovery,
        Outage::None,
        Setup::Plain,
    ),
    case(
        "two_workflows_same_request",
        Kill::None,
        Outage::None,
        Setup::SecondWorkflow,
    ),
    case(
        "same_request_other_amount",
        Kill::None,
        Outage::None,
        Setup::SecondWorkflowOtherAmount,
    ),
    case(
        "second_request_same_approval",
        Kill::None,
        Outage::None,
        Setup::SecondRequestSameLease,
    ),
    case(
        "same_payment_by_charge_killed_mid_send",
        Kill::At("after_dispatch"),
        Outage::None,
        Setup::SecondRequestByCharge,
    ),
    case(
        "budget_last_room_killed_mid_send",
        Kill::At("after_dispatch"),
        Outage::None,
        Setup::BudgetLastRoom,
    ),
    case(
        "lease_revoked_before_send",
        Kill::PauseThenGo("before_journal"),
        Outage::RevokeLease,
        Setup::Plain,
    ),
    case(
        "order_ineligible_before_send",
        Kill::PauseThenGo("before_journal"),
        Outage::Ineligible,
        Setup::Plain,
    ),
    case(
        "hand_refund_during_outage",
        Kill::At("after_dispatch"),
        Outage::HandRefund(2000),
        Setup::Plain,
    ),
    case(
        "unrelated_5_refund_during_outage",
        Kill::At("after_dispatch"),
        Outage::HandRefund(500),
        Setup::Plain,
    ),
    case(
        "lease_revoked_during_outage",
        Kill::At("after_dispatch"),
        Outage::RevokeLease,
        Setup::Plain,
    ),
    case(
        "expired_key",
        Kill::At("after_response"),
        Outage::DayPasses,
        Setup::Plain,
    ),
    case("zombie_attempt", Kill::Zombie, Outage::None, Setup::Plain),
    case(
        "stall_after_premise_read",
        Kill::FreezeAfter("after_premise_read"),
        Outage::HandRefund(2000),
        Setup::Plain,
    ),
    case(
        "5xx_after_apply",
        Kill::None,
        Outage::None,
        Setup::ServerErrorAfterApply,
    ),
    case("definite_4xx", Kill::None, Outage::None, Setup::Disputed),
    case(
        "server_killed_before_send",
        Kill::ServerAt("after_dispatch"),
        Outage::None,
        Setup::Plain,
    ),
    case(
        "server_killed_in_flight",
        Kill::ServerAtService,
        Outage::None,
        Setup::Plain,
    ),
];

/// The CI subset.
pub const QUICK: [&str; 12] = [
    "crash_before_send",
    "crash_in_flight",
    "hand_refund_during_outage",
    "lease_revoked_during_outage",
    "expired_key",
    "zombie_attempt",
    "stall_after_premise_read",
    "server_killed_before_send",
    "server_killed_in_flight",
    "second_request_same_approval",
    "budget_last_room_killed_mid_send",
    "same_payment_by_charge_killed_mid_send",
];
