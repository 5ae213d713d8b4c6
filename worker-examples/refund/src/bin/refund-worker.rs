//! The refund worker. Configured by the environment:
//!
//! * Temporal: `TEMPORAL_ADDRESS` (`host:port`), `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`,
//!   `TEMPORAL_TLS_*` or a profile file, as Temporal's CLI reads them; `TASK_QUEUE`.
//! * Stripe: `STRIPE_SECRET_KEY` (test mode unless `INTERLOCK_STRIPE_ALLOW_LIVE=yes`),
//!   `STRIPE_API_BASE` (default Stripe's), and for any other service that speaks its API
//!   `INTERLOCK_STRIPE_TIER` (what it promises: 1, 2 or 3).
//! * The journal: `INTERLOCK_JOURNAL`, a file shared by the workers of this host (default
//!   `interlock-journal.db`) or, built with `--features postgres`, a `postgres://` URL shared by
//!   workers on every host. The leases (`interlock lease grant`) must be granted in the same
//!   journal. `INTERLOCK_PRINCIPAL`: who the worker acts for.
//! * `INTERLOCK_SHOP_URL`: the shop's order service, if eligibility is the shop's to say.
//! * `INTERLOCK_METRICS_LISTEN` (`host:port`): serve Prometheus metrics at `/metrics` there.

use std::sync::Arc;

use interlock::metrics::Endpoint;
use interlock::{Clock, Gate, SystemClock};
use interlock_stripe::StripeRefundsSetup;
use refund_template::{RULES, RefundActivities, RefundWorkflow, journal, task_queue};
use temporalio_sdk::{Runtime, Worker, WorkerOptions};

fn activities() -> anyhow::Result<(RefundActivities, Option<Endpoint>)> {
    let name =
        std::env::var(journal::JOURNAL_VAR).unwrap_or_else(|_| journal::DEFAULT_JOURNAL.to_owned());
    let principal = std::env::var(journal::PRINCIPAL_VAR).ok();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let opened = journal::open(&name, principal.as_deref(), clock.clone())?;
    let metrics = Endpoint::from_env(opened.store.clone())?;
    let gate = Gate::new(
        opened.store.clone(),
        opened.store,
        clock,
        opened.config.build()?,
    )?;
    let stripe = StripeRefundsSetup::from_env()?;
    let activities = RefundActivities {
        refunds: stripe.bind(&gate)?.with_rules(RULES)?,
    };
    Ok((activities, metrics))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs at RUST_LOG's level (default info); traces to a collector when
    // OTEL_EXPORTER_OTLP_ENDPOINT names one. Kept to the end of main, which flushes them.
    let _telemetry = interlock_telemetry::install("refund-worker", "info")?;
    // Opening a journal blocks (SQLite's, and PostgreSQL's too).
    let (activities, _metrics) = tokio::task::spawn_blocking(activities).await??;
    let client =
        interlock_temporal::connect::client(format!("refund-worker@pid{}", std::process::id()))
            .await?;
    let queue = task_queue();
    let options = WorkerOptions::new(queue.as_str())
        .register_workflow::<RefundWorkflow>()?
        .register_activities(activities)
        .build();
    let runtime = Runtime::from_current_tokio(Default::default())?;
    tracing::info!(%queue, "polling");
    Worker::new(&runtime, client, options)?.run().await?;
    Ok(())
}
