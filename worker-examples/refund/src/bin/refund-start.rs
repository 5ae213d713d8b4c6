//! Start a refund and wait for it: `refund-start REQUEST_ID PAYMENT_INTENT AMOUNT LEASE
//! [CURRENCY]`. Prints the workflow's result as one JSON line and exits 0 when the refund
//! happened, 1 when the gate refused it or could not tell: then the line is the gate's answer,
//! `{"failed": {"type": "InterlockRefused", "refusal": "lease", "reason": …, "changes": […],
//! "repairs": […], …}}`. The workflow id is the request id,
//! so starting the same request twice is refused by Temporal while the first runs.

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use anyhow::Context;
use refund_template::{RefundRequest, RefundWorkflow, task_queue};
use temporalio_client::errors::WorkflowGetResultError;
use temporalio_client::{WorkflowGetResultOptions, WorkflowStartOptions};

#[tokio::main]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [request_id, payment_intent, amount, lease, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: refund-start REQUEST_ID PAYMENT_INTENT AMOUNT LEASE [CURRENCY]");
    };
    let request = RefundRequest {
        request_id: request_id.clone(),
        payment_intent: payment_intent.clone(),
        amount: amount
            .parse()
            .with_context(|| format!("AMOUNT must be whole cents, got {amount:?}"))?,
        currency: rest.first().map_or("usd", String::as_str).to_owned(),
        lease: lease.clone(),
    };
    let client = interlock_temporal::connect::client("refund-start").await?;
    let queue = task_queue();
    let handle = client
        .start_workflow(
            RefundWorkflow::run,
            request,
            WorkflowStartOptions::new(queue.as_str(), request_id.as_str()).build(),
        )
        .await?;
    match handle.get_result(WorkflowGetResultOptions::default()).await {
        Ok(refunded) => {
            println!("{}", serde_json::json!({ "refunded": refunded }));
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(WorkflowGetResultError::Failed(failure)) => {
            // The gate's answer (its type, code, what moved and what could be decided instead)
            // where the workflow failed with one; the failure's message otherwise.
            let answer = match interlock_temporal::gate_answer(&failure) {
                Some(answer) => serde_json::json!(answer),
                None => serde_json::json!({ "message": failure.failure().message }),
            };
            println!("{}", serde_json::json!({ "failed": answer }));
            Ok(std::process::ExitCode::FAILURE)
        }
        Err(e) => {
            println!(
                "{}",
                serde_json::json!({ "failed": { "message": e.to_string() } })
            );
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}
