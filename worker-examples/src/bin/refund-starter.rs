//! Start a refund workflow and wait for it to close; print one JSON line with its report and the
//! time it closed.
//!
//! Usage: `refund-starter <workflow-id> <payment_intent> <amount> <lease> <request-id> <system>`
//! (`system`: naive, keyed, checked, gated_t1, gated_t2, gated_t3). Environment:
//! `TEMPORAL_ADDRESS`, `TASK_QUEUE`.

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow};
use serde_json::json;
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, Url, WorkflowGetResultOptions,
    WorkflowStartOptions,
};
use worker_examples::{RefundRequest, RefundWorkflow, System};

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [workflow_id, pi, amount, lease, request_id, system] = args.as_slice() else {
        return Err(anyhow!(
            "usage: refund-starter <workflow-id> <payment_intent> <amount> <lease> <request-id> <system>"
        ));
    };
    let system: System = serde_json::from_value(json!(system)).map_err(|_| {
        anyhow!("system must be one of naive, keyed, checked, gated_t1, gated_t2, gated_t3")
    })?;
    let request = RefundRequest {
        request_id: request_id.clone(),
        payment_intent: pi.clone(),
        amount: amount
            .parse()
            .context("amount must be an integer number of cents")?,
        currency: "usd".into(),
        lease: lease.clone(),
        system,
    };
    let addr = std::env::var("TEMPORAL_ADDRESS").unwrap_or_else(|_| "http://127.0.0.1:7233".into());
    let queue = std::env::var("TASK_QUEUE").unwrap_or_else(|_| "refunds".into());
    let conn = Connection::connect(
        ConnectionOptions::new(Url::parse(&addr)?)
            .identity("refund-starter".to_owned())
            .build(),
    )
    .await
    .with_context(|| format!("connecting to Temporal at {addr}"))?;
    let client = Client::new(conn, ClientOptions::new("default").build())?;
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
