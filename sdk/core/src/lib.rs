//! The decision core: pure functions from what was read to what to do. No I/O, no clock, no
//! randomness — the journal, the targets, the Temporal activity, the CLI and the tests all wrap
//! these, so the rules are decided in exactly one place and can be tested exhaustively. It is a
//! crate of its own so that purity is a fact of its dependencies (serde and thiserror, nothing
//! that reads a disk, a socket or a clock), not a convention; `interlock` re-exports it as
//! `interlock::core`.

pub mod budget;
pub mod decide;
pub mod limits;
pub mod mutants;
pub mod record;
pub mod rules;
pub mod settle;
pub mod state;
pub mod status;
pub mod tier;
pub mod transition;

pub use decide::{
    AfterSend, LookupAnswer, RecoveryInput, RecoveryPlan, RefusalDraft, SendAnswer, SubmitPlan,
    TakeoverPlan,
};
pub use record::{
    Ambiguous, AppliedTwice, Authorized, Change, Claimed, Committed, Confirmed, Dispatched, Event,
    Failed, Holder, LateResult, LeaseVerdict, Premises, Proposed, Recheck, RefusalCode, Refused,
    Repair, TakeoverReason, Via,
};
pub use settle::{Finding, SettleRefusal, Settled, Settlement};
pub use state::{Claim, EffectState, HistoryError, Resolution};
pub use status::Status;
pub use tier::{Effective, MarginError, Tier};
