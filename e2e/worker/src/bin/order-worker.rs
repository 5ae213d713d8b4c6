//! The order worker: polls a task queue on a Temporal server and runs the order workflow and its
//! activities against the shop's database (a SQLite file, or a PostgreSQL schema). Configured by
//! flags or the environment (`--help` lists both); `RUST_LOG` sets the log level.

use std::sync::Arc;
use std::time::Duration;

use e2e_worker::orders::activities::{OrderActivities, OrderDeps, OrderSettings};
use e2e_worker::orders::shop::ShopAt;
use e2e_worker::orders::workflow::CancelOrderWorkflow;
use temporalio_sdk::{Runtime, Worker, WorkerOptions};

/// The order worker: polls a task queue and runs the order workflow and its activities.
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
    #[arg(long, env = "TASK_QUEUE", default_value = "orders")]
    task_queue: String,
    /// The journal: a file shared by every worker on this host, or a `postgres://` URL.
    #[arg(
        long,
        env = "INTERLOCK_JOURNAL",
        default_value = "interlock-journal.db"
    )]
    journal: String,
    /// The journal's PostgreSQL schema (for a `postgres://` journal).
    #[arg(long, env = "INTERLOCK_JOURNAL_SCHEMA", default_value = "interlock")]
    journal_schema: String,
    /// The shop's database, the substrate installed: a SQLite file, or a `postgres://` URL.
    #[arg(long, env = "SHOP_DATABASE")]
    shop: String,
    /// On PostgreSQL: the substrate's schema.
    #[arg(long, env = "SHOP_SUBSTRATE_SCHEMA", default_value = "interlock_db")]
    shop_substrate: String,
    /// On PostgreSQL: the schema of the shop's tables.
    #[arg(long, env = "SHOP_TABLES_SCHEMA", default_value = "public")]
    shop_tables: String,
    /// On PostgreSQL: the substrate's stage key (hex).
    #[arg(
        long,
        env = "INTERLOCK_DB_STAGE_KEY",
        default_value = "",
        hide_env_values = true
    )]
    shop_stage_key: String,
    /// The gate's settle margin, ms.
    #[arg(long, env = "INTERLOCK_SETTLE_MS", default_value_t = 500)]
    settle_ms: u64,
    /// The gate's send timeout, ms: how long a stage may take, and a dead one's claim holds.
    #[arg(long, env = "INTERLOCK_SEND_TIMEOUT_MS", default_value_t = 10_000)]
    send_timeout_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let _telemetry = e2e_worker::init_logs("order-worker")?;
    let addr = args.temporal_address;
    let queue = args.task_queue;
    let settings = OrderSettings {
        journal: args.journal,
        journal_schema: args.journal_schema,
        shop: ShopAt {
            url: args.shop,
            substrate: args.shop_substrate,
            tables: args.shop_tables,
            stage_key: args.shop_stage_key,
        },
        settle: Duration::from_millis(args.settle_ms),
        send_timeout: Duration::from_millis(args.send_timeout_ms),
    };
    // Opening the journal and the shop blocks: it runs on a blocking thread.
    let deps = Arc::new(tokio::task::spawn_blocking(move || OrderDeps::new(settings)).await??);
    let runtime = Runtime::from_current_tokio(Default::default())?;
    let identity = format!("order-worker@pid{}", std::process::id());
    let client = e2e_worker::connect::client(&addr, identity).await?;
    let options = WorkerOptions::new(queue.as_str())
        .register_workflow::<CancelOrderWorkflow>()?
        .register_activities(OrderActivities { deps })
        // No workflow cache: a killed worker's sticky queue would otherwise stall the workflow.
        .max_cached_workflows(0)
        .build();
    let mut worker = Worker::new(&runtime, client, options)?;
    tracing::info!(%addr, %queue, pid = std::process::id(), "polling");
    worker.run().await?;
    Ok(())
}
