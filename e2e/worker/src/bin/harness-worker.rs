//! The refund worker: polls a task queue on a Temporal server and runs the refund workflow and
//! its activities. Configured by flags or the environment (`--help` lists both); `RUST_LOG` sets
//! the log level.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use e2e_worker::approvals::{ApprovalActivities, ApprovalWorkflow};
use e2e_worker::{Deps, RefundActivities, RefundWorkflow, Settings};
use interlock::approval::{Approvers, Policy};
use interlock_stripe::StripeConfig;
use temporalio_sdk::{Runtime, Worker, WorkerOptions};

/// The refund worker: polls a task queue and runs the refund workflow and its activities. Every
/// setting can come from a flag or from the environment variable named beside it.
#[derive(clap::Parser)]
struct Args {
    /// The Temporal frontend.
    #[arg(
        long,
        env = "TEMPORAL_ADDRESS",
        default_value = "http://127.0.0.1:7233"
    )]
    temporal_address: String,
    /// The task queue to poll.
    #[arg(long, env = "TASK_QUEUE", default_value = "refunds")]
    task_queue: String,
    /// Stripe's API, or a server that speaks it.
    #[arg(
        long,
        env = "STRIPE_API_BASE",
        default_value = "https://api.stripe.com"
    )]
    stripe_api_base: String,
    /// The Stripe secret key (`sk_test_…` for test mode).
    #[arg(long, env = "STRIPE_SECRET_KEY", hide_env_values = true)]
    stripe_secret_key: String,
    /// The journal: a file shared by every worker on this host, or a `postgres://` URL shared by
    /// workers on every host.
    #[arg(
        long,
        env = "INTERLOCK_JOURNAL",
        default_value = "interlock-journal.db"
    )]
    journal: String,
    /// The PostgreSQL schema that holds the journal (for a `postgres://` journal).
    #[arg(long, env = "INTERLOCK_JOURNAL_SCHEMA", default_value = "interlock")]
    journal_schema: String,
    /// The shop's order service (`GET {url}/shop/orders/{id}`); without it the worker decides on
    /// Stripe's facts alone.
    #[arg(long, env = "INTERLOCK_SHOP_URL")]
    shop_url: Option<String>,
    /// The gate's settle margin, in milliseconds.
    #[arg(long, env = "INTERLOCK_SETTLE_MS", default_value_t = 1_000)]
    settle_ms: u64,
    /// The gate's send timeout, in milliseconds.
    #[arg(long, env = "INTERLOCK_SEND_TIMEOUT_MS", default_value_t = 10_000)]
    send_timeout_ms: u64,
    /// The approver directory (JSON: approvers and their public keys, groups, the escalation
    /// chain), for the approval workflow; signed approvals are checked against it at every send.
    #[arg(long, env = "INTERLOCK_APPROVERS")]
    approvers: Option<PathBuf>,
    /// The approval policy (JSON rules) that decides which requests need a person; without it
    /// every request is cleared by the rules' lease.
    #[arg(long, env = "INTERLOCK_POLICY")]
    policy: Option<PathBuf>,
}

fn read(path: &Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading the {what} {}", path.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let _telemetry = e2e_worker::init_logs("harness-worker")?;
    let addr = args.temporal_address;
    let queue = args.task_queue;
    let settings = Settings {
        stripe: StripeConfig::new(&args.stripe_api_base, &args.stripe_secret_key)?,
        journal: args.journal,
        journal_schema: args.journal_schema,
        shop_url: args.shop_url.filter(|u| !u.is_empty()),
        settle: Duration::from_millis(args.settle_ms),
        send_timeout: Duration::from_millis(args.send_timeout_ms),
        approvers: match &args.approvers {
            Some(p) => Some(Approvers::from_json(
                &p.display().to_string(),
                &read(p, "approver directory")?,
            )?),
            None => None,
        },
        approvers_file: args.approvers.clone(),
        policy: match &args.policy {
            Some(p) => serde_json::from_str::<Policy>(&read(p, "approval policy")?)
                .with_context(|| format!("the approval policy {} is not valid", p.display()))?,
            None => Policy::default(),
        },
    };
    // The journal's calls block (SQLite's, and PostgreSQL's too): opening it and binding the
    // gate run on a blocking thread, as every gated activity does.
    let deps = Arc::new(tokio::task::spawn_blocking(move || Deps::new(settings)).await??);
    // INTERLOCK_METRICS_LISTEN: this worker's counters, and the journal's effects, at /metrics.
    let _metrics = interlock::metrics::Endpoint::from_env(deps.journal().clone())?;
    let runtime = Runtime::from_current_tokio(Default::default())?;
    let identity = format!("harness-worker@pid{}", std::process::id());
    let client = e2e_worker::connect::client(&addr, identity).await?;
    let options = WorkerOptions::new(queue.as_str())
        .register_workflow::<RefundWorkflow>()?
        .register_workflow::<ApprovalWorkflow>()?
        .register_activities(RefundActivities { deps: deps.clone() })
        .register_activities(ApprovalActivities { deps })
        // No workflow cache: a killed worker's sticky queue would otherwise stall the workflow.
        .max_cached_workflows(0)
        .build();
    let mut worker = Worker::new(&runtime, client, options)?;
    tracing::info!(%addr, %queue, pid = std::process::id(), "polling");
    worker.run().await?;
    Ok(())
}
