//! Start a refund workflow and wait for it to close; print one JSON line with its report, the
//! time it closed and the refund step's course in the server's history, which the kill matrix
//! reads as the workflow's answer (`--help` for the arguments). Environment: `TEMPORAL_ADDRESS`,
//! `TASK_QUEUE`.

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::anyhow;
use e2e_worker::timeline::step_timeline;
use e2e_worker::{RefundRequest, RefundWorkflow, StepTimings, System};
use serde_json::json;
use temporalio_client::{
    WorkflowFetchHistoryOptions, WorkflowGetResultOptions, WorkflowStartOptions,
};

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
    /// gated_py_t1, gated_py_t2 (the Python worker through the gate server), gated_http_t1,
    /// gated_http_t2, gated_http_t3 (the same with an HTTP target table).
    system: String,
    /// The refund step's heartbeat timeout, ms (the workflow's default: 2000).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// The refund step's retry interval, ms (the workflow's default: 1000).
    #[arg(long)]
    retry_ms: Option<u64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let workflow_id = &args.workflow_id;
    let system: System = serde_json::from_value(json!(args.system)).map_err(|_| {
        let names: Vec<&str> = System::ALL.iter().map(|s| s.name()).collect();
        anyhow!("system must be one of {}", names.join(", "))
    })?;
    let request = RefundRequest {
        request_id: args.request_id.clone(),
        payment: args.payment.clone(),
        amount: args.amount,
        currency: "usd".into(),
        lease: args.lease.clone(),
        system,
        labels: Default::default(),
        step: (args.heartbeat_ms.is_some() || args.retry_ms.is_some()).then(|| {
            let default = StepTimings::default();
            StepTimings {
                heartbeat_ms: args.heartbeat_ms.unwrap_or(default.heartbeat_ms),
                retry_ms: args.retry_ms.unwrap_or(default.retry_ms),
            }
        }),
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
    // Where the seconds went, by the server's own account; a history that cannot be read leaves
    // the answer as it is and says why.
    let (timeline, history_error) = match handle
        .fetch_history(WorkflowFetchHistoryOptions::default())
        .into_events()
        .await
    {
        Ok(events) => (Some(step_timeline(&events, "refund")), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let mut line = match result {
        Ok(report) => json!({ "workflow_id": workflow_id, "report": report }),
        Err(e) => json!({ "workflow_id": workflow_id, "error": e.to_string() }),
    };
    line["closed_at_ms"] = json!(closed_at_ms);
    line["timeline"] = json!(timeline);
    if let Some(e) = history_error {
        line["history_error"] = json!(e);
    }
    println!("{line}");
    Ok(())
}
