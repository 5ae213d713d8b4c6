//! `lease grant`, `lease revoke`, `lease list`.

use anyhow::{Context, bail};
use clap::Subcommand;
use interlock::{Clock, Grant, JournalStore, SystemClock};
use serde_json::Value;

#[derive(Subcommand)]
pub(crate) enum LeaseCmd {
    /// Grant a lease (an approval) effects can run under.
    Grant {
        /// Its id; effects name it.
        id: String,
        /// Who approves.
        #[arg(long)]
        approver: String,
        /// A payload field the lease is limited to, as field=value (repeatable).
        #[arg(long = "scope", value_name = "FIELD=VALUE")]
        scope: Vec<String>,
        /// A numeric payload field the lease caps, as field=max.
        #[arg(long, value_name = "FIELD=MAX")]
        cap: Option<String>,
        /// Lapse after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        expires_in: Option<u64>,
        /// How many effect keys may be dispatched under it (default 1: the first key to
        /// dispatch spends it, and any other key is refused with `lease_spent`).
        #[arg(
            long,
            value_name = "N",
            conflicts_with = "unlimited",
            value_parser = clap::value_parser!(u32).range(1..)
        )]
        uses: Option<u32>,
        /// Let any number of effect keys be dispatched under it (a standing rule); with
        /// `--total`, only the total limits it.
        #[arg(long)]
        unlimited: bool,
        /// A numeric payload field whose values, over every key dispatched under it, add up to
        /// at most MAX, as field=max.
        #[arg(long, value_name = "FIELD=MAX")]
        total: Option<String>,
        /// A caller who may spend it (repeatable): an effect proposed by any other caller is
        /// refused with `lease_caller`, whoever learned the id. The name is the gate server's
        /// caller (`[[auth.callers]] name`) or an in-process worker's principal.
        #[arg(long = "spender", value_name = "CALLER")]
        spenders: Vec<String>,
        /// A target it may be spent on (repeatable): an effect proposed for any other target is
        /// refused with `lease`.
        #[arg(long = "on-target", value_name = "TARGET")]
        targets: Vec<String>,
    },
    /// Revoke a lease now: no effect under it is sent from now on, resends included.
    Revoke {
        /// Its id.
        id: String,
    },
    /// Every lease.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// What a lease's keys have used of it: `1/1 by k-a`, `2500/6000 amount by k-a, k-b`, or
/// `unlimited` for a lease that does not count.
fn used(j: &dyn JournalStore, g: &Grant) -> anyhow::Result<String> {
    let limit = g.limit();
    if !limit.limits() {
        return Ok(if g.approval.is_some() || g.request().is_some() {
            "one request".into()
        } else {
            "unlimited".into()
        });
    }
    let uses = j.lease_uses(&g.id)?;
    let mut parts = Vec::new();
    if let Some(n) = limit.uses {
        parts.push(format!("{}/{n} uses", uses.len()));
    }
    if let Some((field, max)) = &limit.total {
        let sum = uses.iter().fold(0_i64, |a, u| a.saturating_add(u.amount));
        parts.push(format!("{sum}/{max} {field}"));
    }
    let keys: Vec<&str> = uses.iter().map(|u| u.key.as_str()).collect();
    if !keys.is_empty() {
        parts.push(format!("by {}", keys.join(", ")));
    }
    Ok(parts.join(" "))
}

fn pair(s: &str, what: &str) -> anyhow::Result<(String, String)> {
    s.split_once('=')
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .with_context(|| format!("{what} must look like field=value, got {s:?}"))
}

pub(crate) fn run(j: &dyn JournalStore, cmd: LeaseCmd) -> anyhow::Result<()> {
    let now = SystemClock.now_ms();
    match cmd {
        LeaseCmd::Grant {
            id,
            approver,
            scope,
            cap,
            expires_in,
            uses,
            unlimited,
            total,
            spenders,
            targets,
        } => {
            let mut g = Grant::new(&id, approver, now);
            for p in spenders {
                g = g.spender(p);
            }
            for t in targets {
                g = g.on_target(t);
            }
            match (uses, unlimited) {
                (Some(n), _) => g = g.uses(n),
                (None, true) => g = g.unlimited(),
                (None, false) => {}
            }
            if let Some(t) = total {
                let (f, max) = pair(&t, "--total")?;
                g = g.total(
                    f,
                    max.parse()
                        .with_context(|| format!("--total {t}: the maximum must be an integer"))?,
                );
            }
            for s in &scope {
                let (f, v) = pair(s, "--scope")?;
                // Numbers and booleans scope as themselves; anything else as text.
                let v = serde_json::from_str::<Value>(&v)
                    .ok()
                    .filter(|v| !v.is_string())
                    .unwrap_or(Value::String(v));
                g = g.scope(f, v);
            }
            if let Some(c) = cap {
                let (f, max) = pair(&c, "--cap")?;
                g = g.cap(
                    f,
                    max.parse()
                        .with_context(|| format!("--cap {c}: the maximum must be an integer"))?,
                );
            }
            if let Some(secs) = expires_in {
                g = g.expires(now + i64::try_from(secs)? * 1000);
            }
            j.grant_lease(&g)?;
            println!("granted {id}");
        }
        LeaseCmd::Revoke { id } => {
            if !j.revoke_lease(&id)? {
                bail!("no live lease {id}: `interlock lease list` shows the leases");
            }
            println!("revoked {id}");
        }
        LeaseCmd::List { json } => {
            let leases = j.leases()?;
            if json {
                let mut out = Vec::with_capacity(leases.len());
                for g in &leases {
                    let mut v = serde_json::to_value(g)?;
                    if let (Some(obj), true) = (v.as_object_mut(), g.limit().limits()) {
                        let used: Vec<Value> = j
                            .lease_uses(&g.id)?
                            .into_iter()
                            .map(|u| serde_json::json!({"key": u.key, "amount": u.amount}))
                            .collect();
                        obj.insert("used".into(), Value::Array(used));
                    }
                    out.push(v);
                }
                println!("{}", serde_json::to_string_pretty(&out)?);
                return Ok(());
            }
            println!(
                "{:<28} {:<20} {:<9} {:<36} {:<16} USED",
                "ID", "APPROVER", "STATE", "SCOPE", "CAP"
            );
            for g in &leases {
                let state = match (g.revoked_ms, g.expires_ms) {
                    (Some(_), _) => "revoked",
                    (None, Some(e)) if e <= now => "expired",
                    _ => "live",
                };
                let mut scope = serde_json::to_string(&g.scope)?;
                if !g.spenders.is_empty() {
                    scope = format!("{scope} for {}", g.spenders.join(", "));
                }
                if !g.targets.is_empty() {
                    scope = format!("{scope} on {}", g.targets.join(", "));
                }
                let cap = g
                    .cap
                    .as_ref()
                    .map_or(String::new(), |(f, m)| format!("{f} ≤ {m}"));
                println!(
                    "{:<28} {:<20} {:<9} {:<36} {cap:<16} {}",
                    g.id,
                    g.approver,
                    state,
                    scope,
                    used(j, g)?
                );
            }
        }
    }
    Ok(())
}
