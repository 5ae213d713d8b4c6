//! The refund worker: polls a task queue on a Temporal server and runs the refund workflow and
//! its activities.
//!
//! Environment: `TEMPORAL_ADDRESS` (default `http://127.0.0.1:7233`), `TASK_QUEUE` (default
//! `refunds`), `STRIPE_API_BASE`, `STRIPE_SECRET_KEY`, `INTERLOCK_JOURNAL` (default
//! `interlock-journal.db`), optionally `INTERLOCK_SETTLE_MS`, `INTERLOCK_SEND_TIMEOUT_MS`,
//! `RUST_LOG`.

use std::sync::Arc;

use anyhow::Context;
use temporalio_client::{Client, ClientOptions, Connection, ConnectionOptions, Url};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};
use worker_examples::{Deps, RefundActivities, RefundWorkflow};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let addr = std::env::var("TEMPORAL_ADDRESS").unwrap_or_else(|_| "http://127.0.0.1:7233".into());
    let queue = std::env::var("TASK_QUEUE").unwrap_or_else(|_| "refunds".into());
    let deps = Arc::new(Deps::from_env()?);
    let runtime = Runtime::from_current_tokio(Default::default())?;
    let conn = Connection::connect(
        ConnectionOptions::new(
            Url::parse(&addr).with_context(|| format!("TEMPORAL_ADDRESS {addr:?}"))?,
        )
        .identity(format!("refund-worker@pid{}", std::process::id()))
        .build(),
    )
    .await
    .with_context(|| {
        format!("connecting to Temporal at {addr}: is `temporal server start-dev` running?")
    })?;
    let client = Client::new(conn, ClientOptions::new("default").build())?;
    let options = WorkerOptions::new(queue.as_str())
        .register_workflow::<RefundWorkflow>()?
        .register_activities(RefundActivities { deps })
        // No workflow cache: a killed worker's sticky queue would otherwise stall the workflow.
        .max_cached_workflows(0)
        .build();
    let mut worker = Worker::new(&runtime, client, options)?;
    tracing::info!(%addr, %queue, pid = std::process::id(), "polling");
    worker.run().await?;
    Ok(())
}
