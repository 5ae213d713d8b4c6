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
        } => {
            let mut g = Grant::new(&id, approver, now);
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
                println!("{}", serde_json::to_string_pretty(&leases)?);
                return Ok(());
            }
            println!(
                "{:<28} {:<20} {:<9} {:<36} CAP",
                "ID", "APPROVER", "STATE", "SCOPE"
            );
            for g in &leases {
                let state = match (g.revoked_ms, g.expires_ms) {
                    (Some(_), _) => "revoked",
                    (None, Some(e)) if e <= now => "expired",
                    _ => "live",
                };
                let scope = serde_json::to_string(&g.scope)?;
                let cap = g
                    .cap
                    .as_ref()
                    .map_or(String::new(), |(f, m)| format!("{f} ≤ {m}"));
                println!(
                    "{:<28} {:<20} {:<9} {:<36} {cap}",
                    g.id, g.approver, state, scope
                );
            }
        }
    }
    Ok(())
}
