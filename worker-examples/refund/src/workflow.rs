//! The workflow: decide, then refund. The refund activity heartbeats (the gate does it), so a
//! worker killed mid-refund is noticed within the heartbeat timeout and the next attempt runs on
//! another worker; the gate's failures are non-retryable, so a refusal ends the workflow at once.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::time::Duration;

use temporalio_common::RetryPolicy;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{ActivityOptions, WorkflowContext, WorkflowResult};

use crate::{RefundActivities, RefundRequest, Refunded};

/// Decide, then refund through the gate.
#[workflow]
#[derive(Default)]
pub struct RefundWorkflow;

fn retry_every_second(attempts: u32) -> RetryPolicy {
    RetryPolicy::builder()
        .initial_interval(Duration::from_secs(1))
        .backoff_coefficient(1.0)
        .maximum_attempts(attempts)
        .build()
}

#[workflow_methods]
impl RefundWorkflow {
    /// Run the refund.
    #[run(name = "RefundWorkflow")]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        request: RefundRequest,
    ) -> WorkflowResult<Refunded> {
        let decide = ActivityOptions::with_start_to_close_timeout(Duration::from_secs(30))
            .retry_policy(retry_every_second(5))
            .build();
        let decided = ctx
            .execute_activity(RefundActivities::decide, request, decide)
            .await?;
        // Longer than the gate's send timeout plus its settle margin; heartbeats every 0.5 s.
        let refund = ActivityOptions::with_start_to_close_timeout(Duration::from_secs(60))
            .heartbeat_timeout(Duration::from_secs(2))
            .retry_policy(retry_every_second(30))
            .build();
        // A failure here is the gate's answer: `interlock_temporal::activity_answer(&err)` reads
        // its type and details (a refusal's code, what moved, what could be decided instead)
        // where a workflow wants to act on it, e.g. ask for a new approval on `lease`.
        Ok(ctx
            .execute_activity(RefundActivities::refund, decided, refund)
            .await?)
    }
}
