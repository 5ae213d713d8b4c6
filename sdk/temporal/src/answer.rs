//! The gate's answer read back out of a Temporal failure. `gated()` and `decide()` fail with an
//! `ApplicationFailure` of a stable type and typed details; by the time it reaches a workflow it
//! is wrapped in an activity failure, and by the time it reaches the program that started the
//! workflow, in the workflow's failure as well. A person starting a refund should read "refused:
//! the lease was revoked", not a failure's debug print with its event ids.

use serde::Serialize;
use temporalio_common::error::{ActivityExecutionError, IncomingError};

use crate::activity::{
    AMBIGUOUS, APPLIED_TWICE, FAILED, FailureDetails, IN_FLIGHT, JOURNAL, REFUSED,
};

/// Interlock's failure types, as a workflow matches them.
pub const FAILURE_TYPES: [&str; 6] = [
    REFUSED,
    AMBIGUOUS,
    APPLIED_TWICE,
    FAILED,
    IN_FLIGHT,
    JOURNAL,
];

/// An Interlock failure found in a Temporal failure's causes.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct GateAnswer {
    /// Its type: one of [`FAILURE_TYPES`] (`InterlockRefused`, …).
    #[serde(rename = "type")]
    pub type_name: String,
    /// For a person.
    pub message: String,
    /// The typed details (refusal code, changes, repairs), where the failure has them.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub details: Option<FailureDetails>,
}

/// The first Interlock failure among `err` and its causes: what a client reads from
/// `WorkflowGetResultError::Failed`, or a workflow from an activity's failure's cause. `None`
/// where none is, or where a timeout or a cancellation came first (the answer below one is an
/// earlier attempt's, not how the effect ended). The type name is the test: an activity of your
/// own that fails with one of [`FAILURE_TYPES`] reads as the gate's answer.
pub fn gate_answer(err: &IncomingError) -> Option<GateAnswer> {
    let mut next = Some(err);
    while let Some(e) = next {
        // A timeout or a cancellation ended it; an answer below it is an earlier attempt's.
        if matches!(e, IncomingError::Timeout(_) | IncomingError::Cancelled(_)) {
            return None;
        }
        if let IncomingError::Application(app) = e
            && let Some(type_name) = app.type_name().filter(|t| FAILURE_TYPES.contains(t))
        {
            return Some(GateAnswer {
                type_name: type_name.to_owned(),
                message: app.failure().map(|f| f.message.clone()).unwrap_or_default(),
                // Details that do not read as ours are left out, never guessed at.
                details: app.details::<FailureDetails>().ok().flatten(),
            });
        }
        next = e.cause();
    }
    None
}

/// The Interlock failure an activity ended with, inside a workflow: `None` for any other
/// failure (a timeout, a cancellation, another activity's own error).
pub fn activity_answer(err: &ActivityExecutionError) -> Option<GateAnswer> {
    match err {
        ActivityExecutionError::Failed(f) => f.cause().and_then(gate_answer),
        _ => None,
    }
}
