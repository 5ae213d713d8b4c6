//! The order workflow: decide (read the order) → cancel and credit (by the request's system) →
//! report. An order no longer paid when decided is not cancelled at all; the report then says
//! so, and the harness judges that as the refusal it is.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::time::Duration;

use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{ActivityOptions, WorkflowContext, WorkflowResult};

use super::activities::OrderActivities;
use super::{CancelOrder, OrderSystem};
use crate::model::{RefundReport, Reported};
use crate::workflow::{refund_options, report_of, retry};

/// The workflow.
#[workflow]
#[derive(Default)]
pub struct CancelOrderWorkflow;

#[workflow_methods]
impl CancelOrderWorkflow {
    /// Run the cancellation.
    #[run(name = "CancelOrderWorkflow")]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        request: CancelOrder,
    ) -> WorkflowResult<RefundReport> {
        let decide = ActivityOptions::with_start_to_close_timeout(Duration::from_secs(10))
            .activity_id("decide".to_owned())
            .retry_policy(retry(5))
            .build();
        let decision = ctx
            .execute_activity(OrderActivities::decide_order, request.clone(), decide)
            .await?;
        if decision.status.as_deref() != Some("paid") {
            return Ok(RefundReport {
                outcome: Reported::Refused,
                detail: format!(
                    "order {} is {}, not paid: nothing to cancel",
                    request.order,
                    decision.status.as_deref().unwrap_or("missing")
                ),
                ..RefundReport::default()
            });
        }
        let opts = refund_options("cancel", request.step);
        let report = match request.system {
            OrderSystem::Plain => report_of(
                ctx.execute_activity(OrderActivities::cancel_plain, decision, opts)
                    .await,
            ),
            OrderSystem::PlainKeyed => report_of(
                ctx.execute_activity(OrderActivities::cancel_keyed, decision, opts)
                    .await,
            ),
            OrderSystem::Guarded => report_of(
                ctx.execute_activity(OrderActivities::cancel_guarded, decision, opts)
                    .await,
            ),
            OrderSystem::Gated => report_of(
                ctx.execute_activity(OrderActivities::cancel_gated, decision, opts)
                    .await,
            ),
        };
        Ok(report)
    }
}
