//! The rows of the simulated fault matrix, and what each one wants.

use crate::world::{AMOUNT, UNRELATED};

/// One fault scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Case {
    /// No fault.
    HappyPath,
    /// `DISPATCHED` durable, the process dies before the request is sent.
    CrashBeforeSend,
    /// The service applies the refund, the process dies before the answer is journaled.
    CrashBeforeAck,
    /// The same approved request is delivered twice.
    DuplicateSubmit,
    /// Crash before ack; the re-run model then decides $30 under the same request.
    ModelRedecides,
    /// $20 lands, then $30 arrives under the same request.
    SameRequestDifferentAmount,
    /// The approval is revoked between the decision and the send.
    LeaseRevokedBeforeSend,
    /// The order becomes ineligible between the decision and the send.
    OrderIneligible,
    /// Crash before send; support refunds the same $20 by hand during the outage.
    HandRefundDuringOutage,
    /// Crash before send; the approval is revoked during the outage.
    LeaseRevokedDuringOutage,
    /// Crash before send; an unrelated $5 refund lands during the outage.
    UnrelatedRefundDuringOutage,
    /// Crash before ack; recovery runs 25 h later, after the service forgot the key.
    RecoveryAfterWindow,
    /// The first attempt's request is held at the service while a retry starts.
    ZombieAttempt,
    /// A live sender stalls past its send deadline before sending.
    SlowSenderPastDeadline,
    /// The attempt stalls between its premise read and its dispatch, longer than a premise read
    /// may age; support refunds the same $20 by hand meanwhile.
    StallAfterPremiseReadHandRefund,
    /// Crash before send; the recovery that resends is killed after the service applied it.
    RecoveryKilledMidResend,
    /// The service applies the refund and answers 500.
    ServerErrorAfterApply,
    /// The service refuses with a 400 (the charge is disputed).
    Definite4xx,
}

impl Case {
    /// Every row, in table order.
    pub const ALL: [Case; 18] = [
        Case::HappyPath,
        Case::CrashBeforeSend,
        Case::CrashBeforeAck,
        Case::DuplicateSubmit,
        Case::ModelRedecides,
        Case::SameRequestDifferentAmount,
        Case::LeaseRevokedBeforeSend,
        Case::OrderIneligible,
        Case::HandRefundDuringOutage,
        Case::LeaseRevokedDuringOutage,
        Case::UnrelatedRefundDuringOutage,
        Case::RecoveryAfterWindow,
        Case::ZombieAttempt,
        Case::SlowSenderPastDeadline,
        Case::StallAfterPremiseReadHandRefund,
        Case::RecoveryKilledMidResend,
        Case::ServerErrorAfterApply,
        Case::Definite4xx,
    ];

    /// The original project's ten fault rows (its happy path excluded).
    pub const ORIGINAL_TEN: [Case; 10] = [
        Case::CrashBeforeSend,
        Case::CrashBeforeAck,
        Case::DuplicateSubmit,
        Case::ModelRedecides,
        Case::SameRequestDifferentAmount,
        Case::LeaseRevokedBeforeSend,
        Case::OrderIneligible,
        Case::HandRefundDuringOutage,
        Case::LeaseRevokedDuringOutage,
        Case::RecoveryAfterWindow,
    ];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Case::HappyPath => "happy_path",
            Case::CrashBeforeSend => "crash_before_send",
            Case::CrashBeforeAck => "crash_before_ack",
            Case::DuplicateSubmit => "duplicate_submit",
            Case::ModelRedecides => "model_redecides_30",
            Case::SameRequestDifferentAmount => "same_request_different_amount",
            Case::LeaseRevokedBeforeSend => "lease_revoked_before_send",
            Case::OrderIneligible => "order_ineligible",
            Case::HandRefundDuringOutage => "hand_refund_during_outage",
            Case::LeaseRevokedDuringOutage => "lease_revoked_during_outage",
            Case::UnrelatedRefundDuringOutage => "unrelated_5_refund_during_outage",
            Case::RecoveryAfterWindow => "recovery_after_dedupe_window",
            Case::ZombieAttempt => "zombie_attempt",
            Case::SlowSenderPastDeadline => "slow_sender_past_deadline",
            Case::StallAfterPremiseReadHandRefund => "stall_after_premise_read_hand_refund",
            Case::RecoveryKilledMidResend => "recovery_killed_mid_resend",
            Case::ServerErrorAfterApply => "5xx_after_apply",
            Case::Definite4xx => "definite_4xx",
        }
    }

    /// Refunds made during the cell by others (support, another flow), in cents.
    pub fn others_cents(self) -> i64 {
        match self {
            Case::HandRefundDuringOutage | Case::StallAfterPremiseReadHandRefund => AMOUNT,
            Case::UnrelatedRefundDuringOutage => UNRELATED,
            _ => 0,
        }
    }

    /// What the approved refund itself should add: $20, or $0 where it must not happen (the
    /// lease died, the order became ineligible, the same refund was made by hand, the service
    /// refused it).
    pub fn ours_wanted_cents(self) -> i64 {
        match self {
            Case::LeaseRevokedBeforeSend
            | Case::OrderIneligible
            | Case::HandRefundDuringOutage
            | Case::StallAfterPremiseReadHandRefund
            | Case::LeaseRevokedDuringOutage
            | Case::Definite4xx => 0,
            _ => AMOUNT,
        }
    }

    /// Total the payment should show at the end.
    pub fn wanted_cents(self) -> i64 {
        self.others_cents() + self.ours_wanted_cents()
    }
}
