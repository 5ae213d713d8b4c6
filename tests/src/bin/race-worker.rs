//! One worker process for the multi-process tests: opens the shared journal, binds the refunds
//! target over HTTP, and submits (or recovers) one effect until it has a final answer or its time
//! is up. Prints one JSON line. Arguments are `name=value` pairs:
//!
//! `journal`, `api`, `secret`, `tier`, `mode` (submit|recover), `key`, `amount`, `premises`
//! (JSON), `start_at_ms`, `settle_ms`, `send_timeout_ms`, `poll_ms`, `give_up_ms`, and optionally
//! `die_at` (after_dispatch|after_send): SIGKILL this process at that point.

#![allow(clippy::print_stdout)] // its one JSON line is its answer

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use interlock::core::Premises;
use interlock::faults::{Crash, FaultPoint, Faults};
use interlock::target::stripe::{StripeConfig, StripeRefundPremises, StripeRefunds};
use interlock::{
    Clock, Effect, EffectKey, Gate, GateConfig, GateError, Outcome, SqliteJournal, SystemClock,
    Tier,
};
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

fn main() -> anyhow::Result<()> {
    let args: HashMap<String, String> = std::env::args()
        .skip(1)
        .filter_map(|a| a.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    let arg = |k: &str| {
        args.get(k)
            .cloned()
            .ok_or_else(|| anyhow!("missing argument {k}=…"))
    };
    let num = |k: &str| -> anyhow::Result<u64> {
        arg(k)?
            .parse()
            .with_context(|| format!("{k} must be a number"))
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(arg("journal")?, clock.clone())?);
    let tier = Tier::try_from(u8::try_from(num("tier")?)?).map_err(|e| anyhow!(e))?;
    let target =
        StripeRefunds::new(StripeConfig::new(arg("api")?, arg("secret")?)?).assume_tier(tier);
    let mut cfg = GateConfig::beside(arg("journal")?);
    cfg.settle = Duration::from_millis(num("settle_ms")?);
    cfg.send_timeout = Duration::from_millis(num("send_timeout_ms")?);
    cfg.retry_after = Duration::from_millis(num("poll_ms")?);
    let mut gate = Gate::new(journal.clone(), journal, clock.clone(), cfg)?;
    if let Some(point) = args.get("die_at") {
        let point: FaultPoint = serde_json::from_value(json!(point))?;
        gate = gate.with_faults(Arc::new(DieAt(point)));
    }
    let bound = gate.bind(
        Arc::new(target.clone()),
        Arc::new(StripeRefundPremises(target)),
    )?;
    let key = EffectKey::fixed(arg("key")?)?;
    let payload =
        json!({ "payment_intent": "pi_race", "amount": num("amount")?, "currency": "usd" });
    let premises: Premises = serde_json::from_str(&arg("premises")?)?;
    let effect = Effect::new(key.clone(), &payload, "race-lease")?.premises(premises);
    let start_at = i64::try_from(num("start_at_ms")?)?;
    while clock.now_ms() < start_at {
        std::thread::sleep(Duration::from_millis(1));
    }
    let give_up = Instant::now() + Duration::from_millis(num("give_up_ms")?);
    let recover = arg("mode")? == "recover";
    let mut attempts = 0;
    let outcome = loop {
        attempts += 1;
        let o = if recover {
            match bound.recover(&key) {
                // Started before the sender wrote anything: keep watching.
                Err(GateError::UnknownKey(_)) if Instant::now() < give_up => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                other => other?,
            }
        } else {
            bound.submit(&effect)?
        };
        if o.is_final() || Instant::now() >= give_up {
            break o;
        }
        if let Outcome::InFlight { retry_after, .. } | Outcome::Retry { retry_after, .. } = &o {
            std::thread::sleep((*retry_after).min(Duration::from_millis(num("poll_ms")?)));
        }
    };
    println!(
        "{}",
        json!({ "pid": std::process::id(), "outcome": outcome.label(), "attempts": attempts })
    );
    Ok(())
}
