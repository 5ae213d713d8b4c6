//! The refund workflow: decide → refund (by the request's system) → report. It always closes with
//! a report of what it believes happened, so the harness can compare that belief with the
//! payments API's own records.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::time::Duration;

use interlock_temporal::FailureDetails;
use temporalio_common::RetryPolicy;
use temporalio_common::error::IncomingError;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{ActivityExecutionError, ActivityOptions, WorkflowContext, WorkflowResult};

use crate::activities::RefundActivities;
use crate::model::{RefundReport, RefundRequest, Reported, StepTimings, System};

/// The workflow.
#[workflow]
#[derive(Default)]
pub struct RefundWorkflow;

pub(crate) fn retry(max_attempts: u32) -> RetryPolicy {
    retry_every(Duration::from_secs(1), max_attempts)
}

fn retry_every(interval: Duration, max_attempts: u32) -> RetryPolicy {
    RetryPolicy::builder()
        .initial_interval(interval)
        .backoff_coefficient(1.0)
        .maximum_attempts(max_attempts)
        .build()
}

/// The gate's failure details an activity error carries, if it carries them.
pub(crate) fn failure_details(err: &ActivityExecutionError) -> Option<FailureDetails> {
    match err {
        ActivityExecutionError::Failed(f) => match f.cause() {
            Some(IncomingError::Application(app)) => app.details::<FailureDetails>().ok().flatten(),
            _ => None,
        },
        _ => None,
    }
}

/// The refund step's report, from its answer or its failure.
pub(crate) fn report_of(res: Result<RefundReport, ActivityExecutionError>) -> RefundReport {
    let err = match res {
        Ok(r) => return r,
        Err(e) => e,
    };
    let (kind, message, details) = match &err {
        ActivityExecutionError::Failed(f) => match f.cause() {
            Some(IncomingError::Application(app)) => (
                app.type_name().unwrap_or_default().to_owned(),
                app.to_string(),
                app.details::<FailureDetails>().ok().flatten(),
            ),
            Some(other) => (String::new(), other.to_string(), None),
            None => (String::new(), f.to_string(), None),
        },
        other => (String::new(), other.to_string(), None),
    };
    match details {
        Some(d) => RefundReport {
            outcome: d.outcome.into(),
            refusal: d.refusal,
            code: d.target_code,
            refund_id: None,
            detail: d.reason,
            repairs: d.repairs.into_iter().map(|r| r.kind).collect(),
            ..RefundReport::default()
        },
        None => RefundReport {
            outcome: Reported::Error,
            code: (!kind.is_empty()).then_some(kind),
            refund_id: None,
            detail: message,
            ..RefundReport::default()
        },
    }
}

/// The refund step's options, the same for every system: by default a 2 s heartbeat timeout and
/// a retry every second, up to 40 attempts.
pub(crate) fn refund_options(activity_id: &str, step: Option<StepTimings>) -> ActivityOptions {
    let step = step.unwrap_or_default();
    ActivityOptions::with_start_to_close_timeout(Duration::from_secs(60))
        .activity_id(activity_id.to_owned())
        .heartbeat_timeout(Duration::from_millis(step.heartbeat_ms))
        .retry_policy(retry_every(Duration::from_millis(step.retry_ms), 40))
        .build()
}

#[workflow_methods]
impl RefundWorkflow {
    /// Run the refund.
    #[run(name = "RefundWorkflow")]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        request: RefundRequest,
    ) -> WorkflowResult<RefundReport> {
        let decide = ActivityOptions::with_start_to_close_timeout(Duration::from_secs(10))
            .activity_id("decide".to_owned())
            .retry_policy(retry(5))
            .build();
        let decision = ctx
            .execute_activity(RefundActivities::decide, request.clone(), decide)
            .await?;
        let opts = refund_options("refund", request.step);
        let report = match request.system {
            System::Naive => report_of(
                ctx.execute_activity(RefundActivities::refund_naive, decision, opts)
                    .await,
            ),
            System::Keyed => report_of(
                ctx.execute_activity(RefundActivities::refund_keyed, decision, opts)
                    .await,
            ),
            System::Checked => report_of(
                ctx.execute_activity(RefundActivities::refund_checked, decision, opts)
                    .await,
            ),
            // The Python worker's systems run the same gated activity when a Rust worker gets them.
            System::GatedT1
            | System::GatedT2
            | System::GatedT3
            | System::GatedPyT1
            | System::GatedPyT2
            | System::GatedHttpT1
            | System::GatedHttpT2
            | System::GatedHttpT3 => report_of(
                ctx.execute_activity(RefundActivities::refund_gated, decision, opts)
                    .await,
            ),
        };
        Ok(report)
    }
}
