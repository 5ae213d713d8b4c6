//! `gated()`: the whole body of a Temporal activity. A crate of its own so that a user of the gate
//! alone never builds the Temporal SDK; without its default `activity` feature it is only
//! [`connect`], Temporal's connection settings, for programs that start workflows but run no
//! activity (the approvers' inbox).
//! Every attempt Temporal makes — the first, a
//! retry after a worker died, an attempt that overlaps a stalled one — passes through the journal,
//! the lease check and the premise check. The blocking gate runs on tokio's blocking pool while
//! this task heartbeats, so a dead worker is noticed by the heartbeat timeout within seconds.
//!
//! Outcomes map to what a workflow can act on: a receipt for a committed effect; a non-retryable
//! `ApplicationFailure` with a stable type name and typed details for a refusal, an ambiguity or
//! a failure; a retryable failure with a next-retry delay while the effect is in flight elsewhere.

pub mod connect;

#[cfg(feature = "activity")]
mod activity;
#[cfg(feature = "activity")]
mod answer;
#[cfg(feature = "activity")]
mod decide;

#[cfg(feature = "activity")]
pub use activity::*;
#[cfg(feature = "activity")]
pub use answer::{FAILURE_TYPES, GateAnswer, activity_answer, gate_answer};
#[cfg(feature = "activity")]
pub use decide::{Decided, decide, undecided};
