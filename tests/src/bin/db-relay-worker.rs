//! One relay process for the outbox kill test: opens the shared journal and the shop database
//! and delivers the outbox once through a gate bound to the refunds API over HTTP, printing what
//! it delivered as one JSON line. The test kills it with SIGKILL while its refund is in flight.

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use interlock::premise::NoPremises;
use interlock::{Gate, GateConfig, SqliteJournal, SystemClock};
use interlock_db::{Policy, SqliteDb, relay};
use interlock_stripe::{StripeConfig, StripeRefunds};

/// Deliver the shop's outbox once.
#[derive(clap::Parser)]
struct Args {
    /// The shared SQLite journal (its lease granted by the test).
    #[arg(long)]
    journal: PathBuf,
    /// The shop database, the substrate installed.
    #[arg(long)]
    shop: PathBuf,
    /// The refunds API's base URL.
    #[arg(long)]
    api: String,
    /// Its test-mode secret key.
    #[arg(long)]
    secret: String,
    /// The gate's send timeout: how long a killed relay's claim holds.
    #[arg(long, default_value_t = 30_000)]
    send_timeout_ms: u64,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&args.journal, clock.clone())?);
    let mut cfg = GateConfig::beside(&args.journal);
    cfg.send_timeout = Duration::from_millis(args.send_timeout_ms);
    let gate = Gate::new(journal.clone(), journal, clock, cfg)?;
    let refunds = StripeRefunds::new(StripeConfig::new(&args.api, &args.secret)?);
    let bound = gate.bind(Arc::new(refunds), Arc::new(NoPremises))?;
    let outbox = SqliteDb::open(&args.shop, Policy::default())?;
    let targets = BTreeMap::from([(interlock_stripe::refunds::DEFAULT_NAME.to_owned(), &bound)]);
    let relayed = relay(&outbox, &targets, 10)?;
    let labels: Vec<&String> = relayed.delivered.iter().map(|(_, l)| l).collect();
    println!("{}", serde_json::json!({ "delivered": labels }));
    Ok(())
}
