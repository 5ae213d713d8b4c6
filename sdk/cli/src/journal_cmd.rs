//! `journal list`, `journal show`, `recover`, `scoreboard`.

use interlock::core::Status;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use interlock::journal::Record;
use interlock::receipt::build;
use interlock::{EffectKey, Gate, JournalStore, SystemClock, Tier};
use interlock_postgres::Opened;
use interlock_stripe::{StripeConfig, StripeRefunds, StripeRefundsSetup};
use serde_json::json;

#[derive(Subcommand)]
pub(crate) enum JournalCmd {
    /// One line per effect: key, outcome, how, target, records.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Every record of one effect.
    Show {
        /// The effect's key (as `journal list` prints it).
        key: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Write every lease and every record, chains verified, to a JSON Lines file that `journal
    /// import` reads into a journal on any store.
    Export {
        /// The file to write.
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Copy an exported journal in: every record with its position, time and hash as exported,
    /// so `verify` holds here as it did there. Keys already here must hold the same records.
    Import {
        /// The file `journal export` wrote.
        #[arg(long)]
        from: std::path::PathBuf,
    },
    /// End an AMBIGUOUS effect with what you found at the target, signed with your own key:
    /// refused while a send of it may still land, and unless you are in the settling group.
    Settle(crate::settle_cmd::SettleArgs),
}

#[derive(Args)]
pub(crate) struct RecoverArgs {
    /// The effect's key.
    key: String,
    /// The most this service promises (1: Stripe; 2 or 3 for services without its guarantees).
    /// Recovery acts on the tier journaled when the effect was proposed; this can only lower it.
    #[arg(long, default_value_t = 1)]
    tier: u8,
    /// The shop's order service, if the effect's premises include order eligibility.
    #[arg(long, env = "INTERLOCK_SHOP_URL")]
    shop: Option<String>,
    /// The gate server's file (`interlock serve --config`): an effect is recovered through the
    /// target of its file that has the name the effect was journaled under (HTTP or Stripe).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// The name under which the Stripe target from the environment (`STRIPE_SECRET_KEY`,
    /// `STRIPE_API_BASE`) recovers, when no --config covers the effect's target:
    /// `stripe-refunds` for the Rust worker.
    #[arg(long, default_value = interlock_stripe::refunds::DEFAULT_NAME)]
    target_name: String,
    /// The approver directory (JSON), for effects that run under a person's signed approval:
    /// without it such an effect is left in flight, never refused.
    #[arg(long, env = "INTERLOCK_APPROVERS")]
    approvers: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub(crate) struct ConfirmArgs {
    /// One effect; omit with --all.
    key: Option<String>,
    /// Every committed effect in the journal.
    #[arg(long)]
    all: bool,
}

pub(crate) fn confirm(j: &dyn JournalStore, args: ConfirmArgs) -> anyhow::Result<()> {
    let target =
        StripeRefunds::new(StripeConfig::from_env().context("confirm asks the Stripe target")?);
    let keys = match (args.key, args.all) {
        (Some(k), false) => vec![k],
        (None, true) => j.keys()?,
        _ => anyhow::bail!("name one key, or pass --all"),
    };
    for k in keys {
        let records = j.history(&key(&k)?)?;
        if summary(&records).0 != Some(Status::Committed) {
            continue;
        }
        let d = interlock_stripe::webhook::confirm_by_lookup(j, &target, &key(&k)?)?;
        println!("{k}: {d}");
    }
    Ok(())
}

fn key(k: &str) -> anyhow::Result<EffectKey> {
    EffectKey::fixed(k).context("the key must be one `interlock journal list` prints")
}

fn summary(records: &[Record]) -> (Option<Status>, String, Vec<String>) {
    let r = build(records);
    let outcome = r.as_ref().map(|r| r.outcome);
    let landed_late = r
        .as_ref()
        .map(|r| r.landed_late.clone())
        .unwrap_or_default();
    let how = r.and_then(|r| r.how).unwrap_or_default();
    (outcome, how, landed_late)
}

pub(crate) fn run(j: &dyn JournalStore, cmd: JournalCmd) -> anyhow::Result<()> {
    match cmd {
        JournalCmd::Export { out } => crate::transfer::export(j, &out)?,
        JournalCmd::Import { from } => crate::transfer::import(j, &from)?,
        JournalCmd::Settle(args) => crate::settle_cmd::run(j, args)?,
        JournalCmd::List { json } => {
            let keys = j.keys()?;
            let mut rows = Vec::new();
            for k in &keys {
                let records = j.history(&key(k)?)?;
                let (outcome, how, landed_late) = summary(&records);
                // A refused or failed effect the target holds after all is shown as such: a
                // person must reverse or adopt it.
                let how = if landed_late.is_empty() {
                    how
                } else {
                    format!("{how}; LANDED LATE: {}", landed_late.join(","))
                };
                rows.push(json!({ "key": k, "outcome": outcome, "how": how, "landed_late": landed_late, "records": records.len(),
                                   "first_ms": records.first().map(|r| r.at_ms), "last_ms": records.last().map(|r| r.at_ms) }));
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else if rows.is_empty() {
                println!("the journal {} holds no effects yet", j.location());
            } else {
                println!(
                    "{:<66} {:<10} {:<28} {:>7}",
                    "KEY", "OUTCOME", "HOW", "RECORDS"
                );
                for r in &rows {
                    println!(
                        "{:<66} {:<10} {:<28} {:>7}",
                        r["key"].as_str().unwrap_or(""),
                        r["outcome"].as_str().unwrap_or(""),
                        r["how"].as_str().unwrap_or(""),
                        r["records"]
                    );
                }
                println!("{} effect(s)", rows.len());
            }
        }
        JournalCmd::Show { key: k, json } => {
            let records = j.history(&key(&k)?)?;
            anyhow::ensure!(
                !records.is_empty(),
                "no effect with key {k} in {}: `interlock journal list` shows the keys",
                j.location()
            );
            if json {
                println!("{}", serde_json::to_string_pretty(&records)?);
            } else {
                for r in &records {
                    let body = serde_json::to_value(&r.event)?;
                    let mut fields: Vec<String> = body
                        .as_object()
                        .map(|o| {
                            o.iter()
                                .filter(|(k, _)| *k != "kind")
                                .map(|(k, v)| format!("{k}={v}"))
                                .collect()
                        })
                        .unwrap_or_default();
                    fields.truncate(8);
                    println!(
                        "{:>3} {:<12} {} {}",
                        r.n,
                        r.event.kind(),
                        r.at_ms,
                        fields.join(" ")
                    );
                }
                let (outcome, how, landed_late) = summary(&records);
                println!(
                    "→ {} {how} (chain of {} records intact, head {})",
                    outcome.map_or("?", Status::label),
                    records.len(),
                    &records[records.len() - 1].hash[..16]
                );
                if !landed_late.is_empty() {
                    println!(
                        "  LANDED LATE: the target holds {} under this key although the effect \
                         ended {}: reverse it or adopt it",
                        landed_late.join(", "),
                        outcome.map_or("?", Status::label)
                    );
                }
            }
        }
    }
    Ok(())
}

/// Recover one effect; `true` when it is settled (committed, refused or failed: nothing more
/// will happen to it), `false` when it is still in flight or needs a person (ambiguous, applied
/// twice).
pub(crate) fn recover(opened: Opened, args: RecoverArgs) -> anyhow::Result<bool> {
    let clock = Arc::new(SystemClock);
    let journal = opened.store;
    let tier = Tier::try_from(args.tier).map_err(anyhow::Error::msg)?;
    let shop = args.shop;
    let stripe = (|| -> anyhow::Result<StripeRefundsSetup> {
        let cfg = StripeConfig::from_env().context("the Stripe target")?;
        let mut stripe = StripeRefundsSetup::new(cfg).shop(shop)?;
        stripe.tier = tier;
        Ok(stripe)
    })()
    .map_err(|e| format!("{e:#}"));
    let targets =
        crate::recovery::Recoverers::new(args.config.as_deref(), stripe, &args.target_name)?;
    let key = key(&args.key)?;
    let target = crate::recovery::journaled_target(journal.as_ref(), &key)?;
    targets
        .covers(&target)
        .map_err(|why| anyhow::anyhow!("cannot recover {key}: {why}"))?;
    let mut gate = Gate::new(journal.clone(), journal, clock, opened.config.build()?)?
        .with_attempt("cli-recover");
    if let Some(path) = &args.approvers {
        gate = gate.with_approvers(Arc::new(crate::read_approvers(path)?))?;
    }
    let bound = targets
        .bind(&gate, &target)
        .map_err(|why| anyhow::anyhow!("cannot recover {key}: {why}"))?;
    let outcome = bound.recover(&key)?;
    println!("{}", outcome.label());
    if let interlock::Outcome::InFlight {
        retry_after,
        reason,
    }
    | interlock::Outcome::Retry {
        retry_after,
        reason,
    } = &outcome
    {
        println!(
            "not settled yet: {reason}; run again in {:.1} s",
            retry_after.as_secs_f64()
        );
    }
    Ok(matches!(
        outcome,
        interlock::Outcome::Committed { .. }
            | interlock::Outcome::Refused(_)
            | interlock::Outcome::Failed(_)
    ))
}

pub(crate) fn scoreboard(j: &dyn JournalStore, prefix: &str, as_json: bool) -> anyhow::Result<()> {
    let b = interlock::approval::Scoreboard::read(j, prefix)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&b)?);
        return Ok(());
    }
    let listed = |m: &std::collections::BTreeMap<String, usize>| {
        if m.is_empty() {
            return "none".to_owned();
        }
        m.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ms = |v: Option<i64>| v.map_or("–".to_owned(), |v| format!("{:.1} s", v as f64 / 1000.0));
    let t = &b.time_to_decision_ms;
    for (name, value) in [
        ("requests", b.requests.to_string()),
        ("cleared with no person", b.cleared_no_person.to_string()),
        ("sent after a person", b.sent_after_person.to_string()),
        ("closed by repair", b.closed_by_repair.to_string()),
        ("sent to a person over a budget", b.over_budget.to_string()),
        (
            "refused",
            format!("{} ({})", b.refused, listed(&b.refused_by)),
        ),
        ("open", b.open.to_string()),
        ("needs a look (ambiguous)", b.needs_a_look.to_string()),
        ("sent twice", b.sent_twice.to_string()),
        ("escalated, by reason", listed(&b.escalated_by_reason)),
        ("SLA breaches", b.sla_breaches.to_string()),
        (
            "stale approvals caught",
            b.stale_approvals_caught.to_string(),
        ),
        (
            "time to a person's decision",
            format!(
                "median {}  p90 {}  max {}",
                ms(t.median),
                ms(t.p90),
                ms(t.max)
            ),
        ),
        ("confirmed by the target", b.confirmed_by_target.to_string()),
        (
            "refused, yet landed (look!)",
            b.landed_after_refusal.to_string(),
        ),
        ("effects by outcome", listed(&b.outcomes)),
    ] {
        println!("{name:<30}{value}");
    }
    Ok(())
}
