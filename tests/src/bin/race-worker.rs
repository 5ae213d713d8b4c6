//! One worker process for the multi-process tests: opens the shared journal, binds the refunds
//! target over HTTP, and submits (or recovers) one effect — or, with `--effects`, several in
//! turn — until each has a final answer or its time is up. Prints one JSON line per effect, as
//! each ends, so a worker killed midway has said what it saw (`--help` for the arguments).

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use interlock::core::{Holder, Premises};
use interlock::faults::{Crash, FaultPoint, Faults};
use interlock::{
    Clock, Effect, EffectKey, Gate, GateConfig, GateError, Journal, LeaseStore, Outcome,
    SqliteJournal, SystemClock, Tier,
};
use interlock_postgres::{PgJournal, PgOptions};
use interlock_stripe::{StripeConfig, StripeRefundPremises, StripeRefunds};
use serde_json::json;

struct DieAt(FaultPoint);

impl Faults for DieAt {
    fn at(&self, point: FaultPoint, _key: &str) -> Result<(), Crash> {
        if point == self.0 {
            // A real SIGKILL, delivered by another process, as a crash would be.
            let _ = std::process::Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(60));
        }
        Ok(())
    }
}

/// One racing worker: submit or recover one effect until it has a final answer or time is up.
#[derive(clap::Parser)]
struct Args {
    /// The shared SQLite journal.
    #[arg(
        long,
        required_unless_present = "database_url",
        conflicts_with = "database_url"
    )]
    journal: Option<std::path::PathBuf>,
    /// The shared PostgreSQL server (instead of `--journal`).
    #[arg(long)]
    database_url: Option<String>,
    /// The journal's PostgreSQL schema.
    #[arg(long, default_value = "interlock")]
    schema: String,
    /// The host name this worker claims under (default: this machine's).
    #[arg(long)]
    host: Option<String>,
    /// The payments API's base URL.
    #[arg(long)]
    api: String,
    /// Its secret key.
    #[arg(long)]
    secret: String,
    /// The tier the target is bound as (1, 2 or 3).
    #[arg(long)]
    tier: u8,
    /// submit or recover.
    #[arg(long, value_parser = ["submit", "recover"])]
    mode: String,
    /// The effect's key.
    #[arg(long, required_unless_present = "effects")]
    key: Option<String>,
    /// Cents.
    #[arg(long, required_unless_present = "effects")]
    amount: Option<i64>,
    /// Several effects, submitted one after another: `key:cents,key:cents,…` (instead of `--key`
    /// and `--amount`).
    #[arg(long, conflicts_with_all = ["key", "amount"])]
    effects: Option<String>,
    /// The decided premises, as JSON (not read with `--no-premises`).
    #[arg(long, default_value = "{}")]
    premises: String,
    /// Start at this wall-clock time (ms since the epoch), so racers start together.
    #[arg(long)]
    start_at_ms: i64,
    /// The gate's settle margin.
    #[arg(long)]
    settle_ms: u64,
    /// The gate's send timeout.
    #[arg(long)]
    send_timeout_ms: u64,
    /// Longest wait between attempts.
    #[arg(long)]
    poll_ms: u64,
    /// Stop trying after this long.
    #[arg(long)]
    give_up_ms: u64,
    /// SIGKILL this process at this point (after_dispatch, after_send, …).
    #[arg(long)]
    die_at: Option<String>,
    /// The lease the effect runs under.
    #[arg(long, default_value = "race-lease")]
    lease: String,
    /// Decide on no premises (many keys refunding one payment, where each refund moves the
    /// others' "refunded by others").
    #[arg(long)]
    no_premises: bool,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let tier = Tier::try_from(args.tier).map_err(|e| anyhow!(e))?;
    let target = StripeRefunds::new(StripeConfig::new(&args.api, &args.secret)?).assume_tier(tier);
    let (journal, leases, builder): (Arc<dyn Journal>, Arc<dyn LeaseStore>, _) =
        match (&args.journal, &args.database_url) {
            (Some(path), _) => {
                let j = Arc::new(SqliteJournal::open(path, clock.clone())?);
                (j.clone(), j, GateConfig::builder(path))
            }
            (None, Some(url)) => {
                let opts = PgOptions::in_schema(args.schema.clone());
                let j = Arc::new(PgJournal::open(url, clock.clone(), &opts)?);
                (j.clone(), j, GateConfig::shared_builder())
            }
            (None, None) => anyhow::bail!("give --journal or --database-url"),
        };
    let mut builder = builder
        .settle(Duration::from_millis(args.settle_ms))
        .send_timeout(Duration::from_millis(args.send_timeout_ms))
        .retry_after(Duration::from_millis(args.poll_ms));
    if let Some(host) = &args.host {
        builder = builder.holder(Holder {
            caller: None,
            host: host.clone(),
            pid: std::process::id(),
            attempt: "1".into(),
        });
    }
    let mut gate = Gate::new(journal, leases, clock.clone(), builder.build()?)?;
    if let Some(point) = &args.die_at {
        let point: FaultPoint = serde_json::from_value(json!(point))?;
        gate = gate.with_faults(Arc::new(DieAt(point)));
    }
    let reader: Arc<dyn interlock::premise::PremiseReader> = if args.no_premises {
        Arc::new(interlock::premise::NoPremises)
    } else {
        Arc::new(StripeRefundPremises(target.clone()))
    };
    let bound = gate.bind(Arc::new(target), reader)?;
    let premises: Premises = if args.no_premises {
        Premises::new()
    } else {
        serde_json::from_str(&args.premises).context("--premises")?
    };
    let effects: Vec<(String, i64)> = match (&args.effects, &args.key, args.amount) {
        (Some(list), _, _) => list
            .split(',')
            .map(|pair| {
                let (k, a) = pair
                    .split_once(':')
                    .with_context(|| format!("--effects: {pair:?} is not key:cents"))?;
                Ok((k.to_owned(), a.parse().context("--effects: cents")?))
            })
            .collect::<anyhow::Result<_>>()?,
        (None, Some(key), Some(amount)) => vec![(key.clone(), amount)],
        _ => anyhow::bail!("give --key and --amount, or --effects"),
    };
    while clock.now_ms() < args.start_at_ms {
        std::thread::sleep(Duration::from_millis(1));
    }
    for (key, amount) in effects {
        let key = EffectKey::fixed(key)?;
        let payload = json!({ "payment_intent": "pi_race", "amount": amount, "currency": "usd" });
        let effect = Effect::new(key.clone(), &payload, &args.lease)?.premises(premises.clone());
        let (outcome, attempts) = run(&bound, &effect, &args)?;
        println!(
            "{}",
            json!({
                "pid": std::process::id(),
                "key": key.as_str(),
                "amount": amount,
                "outcome": outcome.label(),
                "attempts": attempts,
            })
        );
    }
    Ok(())
}

/// Submit (or recover) one effect until it has a final answer or time is up.
fn run(bound: &interlock::Bound, effect: &Effect, args: &Args) -> anyhow::Result<(Outcome, u32)> {
    let give_up = Instant::now() + Duration::from_millis(args.give_up_ms);
    let recover = args.mode == "recover";
    let mut attempts = 0;
    loop {
        attempts += 1;
        let o = if recover {
            match bound.recover(&effect.key) {
                // Started before the sender wrote anything: keep watching.
                Err(GateError::UnknownKey(_)) if Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                other => other?,
            }
        } else {
            match bound.submit(effect) {
                // A journal that cannot be reached now (a cut connection, a busy file): try again,
                // as an activity's retry would.
                Err(GateError::Journal(e)) if e.is_transient() && Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(args.poll_ms));
                    continue;
                }
                other => other?,
            }
        };
        if o.is_final() || Instant::now() >= give_up {
            return Ok((o, attempts));
        }
        if let Outcome::InFlight { retry_after, .. } | Outcome::Retry { retry_after, .. } = &o {
            std::thread::sleep((*retry_after).min(Duration::from_millis(args.poll_ms)));
        }
    }
}
