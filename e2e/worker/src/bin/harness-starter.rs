//! Start a refund workflow and wait for it to close; print one JSON line with its report and the
//! time it closed, which the kill matrix reads as the workflow's answer (`--help` for the
//! arguments). Environment: `TEMPORAL_ADDRESS`, `TASK_QUEUE`.

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::anyhow;
use e2e_worker::{RefundRequest, RefundWorkflow, System};
use serde_json::json;
use temporalio_client::{WorkflowGetResultOptions, WorkflowStartOptions};

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Start a refund workflow, wait for it to close, and print its report as one JSON line.
#[derive(clap::Parser)]
struct Args {
    /// The workflow id.
    workflow_id: String,
    /// What to refund: a payment intent (`pi_…`) or a charge (`ch_…`).
    payment: String,
    /// Cents.
    amount: i64,
    /// The lease that approves it.
    lease: String,
    /// The approved request's id (the effect's key).
    request_id: String,
    /// How to refund: naive, keyed, checked, gated_t1, gated_t2, gated_t3 (the Rust worker), or
    /// gated_py_t1, gated_py_t2 (the Python worker through the gate server).
    system: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let workflow_id = &args.workflow_id;
    let system: System = serde_json::from_value(json!(args.system)).map_err(|_| {
        anyhow!(
            "system must be one of naive, keyed, checked, gated_t1, gated_t2, gated_t3, \
             gated_py_t1, gated_py_t2"
        )
    })?;
    let request = RefundRequest {
        request_id: args.request_id.clone(),
        payment: args.payment.clone(),
        amount: args.amount,
        currency: "usd".into(),
        lease: args.lease.clone(),
        system,
        labels: Default::default(),
    };
    let addr = std::env::var("TEMPORAL_ADDRESS").unwrap_or_else(|_| "http://127.0.0.1:7233".into());
    let queue = std::env::var("TASK_QUEUE").unwrap_or_else(|_| "refunds".into());
    let client = e2e_worker::connect::client(&addr, "harness-starter".into()).await?;
    let handle = client
        .start_workflow(
            RefundWorkflow::run,
            request,
            WorkflowStartOptions::new(queue.as_str(), workflow_id.as_str()).build(),
        )
        .await?;
    let result = handle.get_result(WorkflowGetResultOptions::default()).await;
    let closed_at_ms = now_ms();
    let line = match result {
        Ok(report) => {
            json!({ "workflow_id": workflow_id, "report": report, "closed_at_ms": closed_at_ms })
        }
        Err(e) => {
            json!({ "workflow_id": workflow_id, "error": e.to_string(), "closed_at_ms": closed_at_ms })
        }
    };
    println!("{line}");
    Ok(())
}
