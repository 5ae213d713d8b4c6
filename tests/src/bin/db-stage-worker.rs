//! One worker process for the database-effect kill tests: opens the shared journal and the shop
//! database (a SQLite file, or a `postgres://` URL with the substrate's schema) and submits a
//! plan through the gate — the cancel-and-credit plan, or the payload given — printing the
//! outcome as one JSON line. The tests kill it with SIGKILL while its stage is under way.

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use std::path::PathBuf;
use std::sync::Arc;

use interlock::premise::NoPremises;
use interlock::target::Target;
use interlock::{Effect, EffectKey, Gate, GateConfig, SqliteJournal, SystemClock};
use interlock_db::{PgDb, PgDbOptions, Plan, Policy, SqliteDb};
use interlock_tests::db_shop;

/// Submit the shop's plan once through the gate.
#[derive(clap::Parser)]
struct Args {
    /// The shared SQLite journal (its lease granted by the test).
    #[arg(long)]
    journal: PathBuf,
    /// The shop database, the substrate installed: a SQLite file, or a `postgres://` URL.
    #[arg(long)]
    shop: String,
    /// On PostgreSQL: the substrate's schema.
    #[arg(long, default_value = "interlock_db")]
    pg_schema: String,
    /// On PostgreSQL: the search path the plan's tables are found on.
    #[arg(long)]
    pg_search_path: Option<String>,
    /// The plan's payload (JSON) instead of the cancel-and-credit plan.
    #[arg(long)]
    plan: Option<String>,
    /// The effect key's one part.
    #[arg(long)]
    key: String,
    /// The lease.
    #[arg(long)]
    lease: String,
    /// How far the credit statement counts before it writes (keeps the stage under way).
    #[arg(long, default_value_t = 0)]
    spin: u64,
    /// The gate's send timeout: how long a killed worker's claim holds.
    #[arg(long, default_value_t = 30_000)]
    send_timeout_ms: u64,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&args.journal, clock.clone())?);
    let mut cfg = GateConfig::beside(&args.journal);
    cfg.send_timeout = std::time::Duration::from_millis(args.send_timeout_ms);
    let gate = Gate::new(journal.clone(), journal, clock, cfg)?;
    let db: Arc<dyn Target> = if args.shop.starts_with("postgres://") {
        let options = PgDbOptions {
            schema: args.pg_schema,
            search_path: args.pg_search_path,
            plans_are_trusted: false,
            // From INTERLOCK_DB_STAGE_KEY, as the test that starts it sets.
            stage_key: None,
        };
        Arc::new(PgDb::open(&args.shop, options, Policy::default())?)
    } else {
        Arc::new(SqliteDb::open(
            PathBuf::from(&args.shop),
            Policy::default(),
        )?)
    };
    let bound = gate.bind(db, Arc::new(NoPremises))?;
    let plan = match &args.plan {
        Some(json) => Plan::from_payload(&serde_json::from_str(json)?)?,
        None => db_shop::cancel_and_credit(args.spin)?,
    };
    let effect = Effect::new(
        EffectKey::derive(&[&args.key]),
        &plan.to_payload(),
        args.lease,
    )?;
    let outcome = bound.submit(&effect)?;
    println!(
        "{}",
        serde_json::json!({ "outcome": format!("{outcome:?}") })
    );
    Ok(())
}
