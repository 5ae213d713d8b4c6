//! Start many refund workflows, a fixed number at a time, and time each from its start to its
//! close; print one JSON line with every latency and how each workflow ended (`--help` for the
//! arguments). Workflow `i` refunds `pi_{prefix}_{i}` under lease `lease-{prefix}-{i}` with
//! request id `req-{prefix}-{i}`: the caller creates those payments and leases first.
//! Environment: `TEMPORAL_ADDRESS`, `TASK_QUEUE`.

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;
use e2e_worker::{RefundRequest, RefundWorkflow, System};
use serde_json::json;
use temporalio_client::{WorkflowGetResultOptions, WorkflowStartOptions};
use tokio::sync::Semaphore;

/// Run refund workflows with bounded concurrency and report their latencies.
#[derive(clap::Parser)]
struct Args {
    /// How to refund: naive, keyed, checked, gated_t1, gated_t2 or gated_t3.
    #[arg(long)]
    system: String,
    /// Names the payments, leases, requests and workflows.
    #[arg(long)]
    prefix: String,
    /// Workflows to run.
    #[arg(long, default_value_t = 200)]
    workflows: usize,
    /// At most this many running at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Cents per refund.
    #[arg(long, default_value_t = 2000)]
    amount: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let system: System = serde_json::from_value(json!(args.system)).map_err(|_| {
        anyhow!("system must be one of naive, keyed, checked, gated_t1, gated_t2, gated_t3")
    })?;
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    let addr = std::env::var("TEMPORAL_ADDRESS").unwrap_or_else(|_| "http://127.0.0.1:7233".into());
    let queue = std::env::var("TASK_QUEUE").unwrap_or_else(|_| "refunds".into());
    let client = Arc::new(e2e_worker::connect::client(&addr, "refund-load".into()).await?);
    let gate = Arc::new(Semaphore::new(args.concurrency));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.workflows);
    for i in 0..args.workflows {
        let permit = gate.clone().acquire_owned().await?;
        let (client, queue, prefix) = (client.clone(), queue.clone(), args.prefix.clone());
        let request = RefundRequest {
            request_id: format!("req-{prefix}-{i}"),
            payment: format!("pi_{prefix}_{i}"),
            amount: args.amount,
            currency: "usd".into(),
            lease: format!("lease-{prefix}-{i}"),
            system,
            labels: Default::default(),
            step: None,
        };
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let workflow_id = format!("wf-{prefix}-{i}");
            let handle = client
                .start_workflow(
                    RefundWorkflow::run,
                    request,
                    WorkflowStartOptions::new(queue.as_str(), workflow_id.as_str()).build(),
                )
                .await;
            let label = match handle {
                Ok(h) => match h.get_result(WorkflowGetResultOptions::default()).await {
                    Ok(report) => report.label(),
                    Err(e) => format!("WORKFLOW_ERROR: {e}"),
                },
                Err(e) => format!("START_ERROR: {e}"),
            };
            drop(permit);
            (t.elapsed().as_secs_f64() * 1000.0, label)
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    let mut labels: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks {
        let (ms, label) = t.await?;
        latencies.push(ms);
        *labels.entry(label).or_default() += 1;
    }
    let line = json!({
        "system": args.system,
        "workflows": args.workflows,
        "concurrency": args.concurrency,
        "wall_ms": started.elapsed().as_secs_f64() * 1000.0,
        "latencies_ms": latencies,
        "labels": labels,
    });
    println!("{line}");
    Ok(())
}
