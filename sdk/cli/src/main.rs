//! `interlock`: inspect and operate a journal — list and show effects, grant and revoke leases,
//! recover in-flight effects, export and verify receipts, serve Stripe webhooks, serve the gate
//! over gRPC, stand in front of an MCP server, and keep score.
//! Errors name the cause and the fix; `verify` exits 1 when anything fails to hold.

#![allow(clippy::print_stdout)] // a command line's output is its product

mod budget_cmd;
mod db_cmd;
mod inbox_cmd;
mod journal_cmd;
mod lease_cmd;
mod mcp_cmd;
mod metrics_cmd;
mod ops_cmd;
mod receipt_cmd;
mod recovery;
mod serve_cmd;
mod settle_cmd;
mod transfer;
mod webhook_cmd;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use interlock::SystemClock;
use interlock_postgres::{Opened, PgOptions};

/// The version, and whether this build carries test-only code (it must not, where users run it).
fn long_version() -> &'static str {
    if !interlock::TEST_ONLY_CODE {
        concat!(env!("CARGO_PKG_VERSION"), "\ntest-only code: none")
    } else {
        concat!(
            env!("CARGO_PKG_VERSION"),
            "\ntest-only code: COMPILED IN (fault points or mutants: a test build, never for real \
             effects; build it alone with `cargo build -p interlock-cli`)"
        )
    }
}

#[derive(Parser)]
#[command(
    name = "interlock",
    version,
    long_version = long_version(),
    about = "Side effects that happen once, under live authority, on facts that still hold."
)]
struct Cli {
    /// The journal: a file, or a `postgres://` URL for a journal on a PostgreSQL server.
    #[arg(
        long,
        global = true,
        env = "INTERLOCK_JOURNAL",
        default_value = "interlock-journal.db"
    )]
    journal: String,
    /// The PostgreSQL schema that holds the journal (for a `postgres://` journal).
    #[arg(
        long,
        global = true,
        env = "INTERLOCK_JOURNAL_SCHEMA",
        default_value = "interlock"
    )]
    journal_schema: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Look at the effects in the journal.
    Journal {
        #[command(subcommand)]
        what: journal_cmd::JournalCmd,
    },
    /// Resolve an in-flight effect now (the Stripe target from STRIPE_API_BASE / STRIPE_SECRET_KEY).
    Recover(journal_cmd::RecoverArgs),
    /// Re-derive every receipt column from the journal (and the target's records); exit 1 if any fails.
    Verify(receipt_cmd::VerifyArgs),
    /// Export or sign receipts.
    Receipt {
        #[command(subcommand)]
        what: receipt_cmd::ReceiptCmd,
    },
    /// Grant, revoke and list leases (approvals).
    Lease {
        #[command(subcommand)]
        what: lease_cmd::LeaseCmd,
    },
    /// Set, list, show and remove budgets: limits on every effect that matches, per window.
    Budget {
        #[command(subcommand)]
        what: budget_cmd::BudgetCmd,
    },
    /// Receive Stripe's signed refund webhooks and record confirmations.
    Webhook {
        #[command(subcommand)]
        what: webhook_cmd::WebhookCmd,
    },
    /// Ask the Stripe target (STRIPE_API_BASE, STRIPE_SECRET_KEY) for effects by key and record CONFIRMED.
    Confirm(journal_cmd::ConfirmArgs),
    /// Serve the gate over gRPC (interlock.v1.GateService), configured by a TOML file.
    Serve(serve_cmd::ServeArgs),
    /// Stand in front of an MCP server (started as a child, after `--`): the tool calls the
    /// configuration names go through the gate, everything else passes through.
    McpProxy(mcp_cmd::McpProxyArgs),
    /// Serve Prometheus metrics for the journal at /metrics: every effect by where it stands,
    /// read from the journal (docs/operations.md).
    Metrics(metrics_cmd::MetricsArgs),
    /// Database effects: install the substrate in a team's SQLite or PostgreSQL database, and
    /// verify the journal against its markers.
    Db {
        #[command(subcommand)]
        what: db_cmd::DbCmd,
    },
    /// The approvers' web inbox.
    Inbox {
        #[command(subcommand)]
        what: inbox_cmd::InboxCmd,
    },
    /// The operators' web page: effects in flight, ambiguous, applied twice and failed, recovery
    /// on request, and settling an ambiguous effect with a statement signed in the browser.
    Ops {
        #[command(subcommand)]
        what: ops_cmd::OpsCmd,
    },
    /// How the requests went — cleared with no person, sent after one, closed by repair,
    /// refused, escalated, decision times — counted from the journal alone.
    Scoreboard {
        /// Only the requests whose id starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// The TLS proxies a server's `--behind-proxy` names (none: the server stays on loopback).
pub(crate) fn behind_proxy(proxies: Option<&str>) -> anyhow::Result<Vec<std::net::IpAddr>> {
    interlock::reach::parse_proxies(proxies.unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("--behind-proxy: {e}"))
}

/// How a page is reached, behind the TLS proxies `--behind-proxy` names (none: loopback only).
pub(crate) fn page_reach(proxies: Option<&str>) -> anyhow::Result<interlock::reach::Reach> {
    Ok(interlock_inbox::page_reach(behind_proxy(proxies)?))
}

/// The approver directory at `path` (JSON), checked.
pub(crate) fn read_approvers(
    path: &std::path::Path,
) -> anyhow::Result<interlock::approval::Approvers> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading the approver directory {} (--approvers, INTERLOCK_APPROVERS)",
            path.display()
        )
    })?;
    Ok(interlock::approval::Approvers::from_json(
        &path.display().to_string(),
        &text,
    )?)
}

/// Where the journal is, as given on the command line or in the environment.
pub(crate) struct Named {
    name: String,
    schema: String,
}

impl Named {
    /// Open the journal for inspection (`write` false: a missing journal is an error, an SQLite
    /// file is opened read-only) or for changes, with an error naming the fix.
    pub(crate) fn open(&self, write: bool) -> anyhow::Result<Opened> {
        let clock = Arc::new(SystemClock);
        let opts = PgOptions {
            create: write,
            ..PgOptions::in_schema(self.schema.clone())
        };
        if interlock_postgres::is_server(&self.name) {
            return interlock_postgres::open_named(&self.name, clock, &opts)
                .with_context(|| format!("opening the journal at {}", self.shown()));
        }
        if !write && !std::path::Path::new(&self.name).exists() {
            anyhow::bail!(
                "no journal at {}: pass --journal PATH or set INTERLOCK_JOURNAL to the journal \
                 your workers write (a file, or a postgres:// URL)",
                self.name
            );
        }
        if write {
            return interlock_postgres::open_named(&self.name, clock, &opts)
                .with_context(|| format!("opening the journal {}", self.name));
        }
        let journal = interlock::SqliteJournal::open_read_only(&self.name, clock)
            .with_context(|| format!("opening the journal {}", self.name))?;
        Ok(Opened {
            store: Arc::new(journal),
            config: interlock::GateConfig::builder(&self.name),
        })
    }

    /// Open for changes a journal that exists already (a page over a mistyped name would
    /// otherwise show an empty journal as if nothing needed a person).
    pub(crate) fn open_existing(&self) -> anyhow::Result<Opened> {
        if interlock_postgres::is_server(&self.name) {
            let opts = PgOptions {
                create: false,
                ..PgOptions::in_schema(self.schema.clone())
            };
            return interlock_postgres::open_named(&self.name, Arc::new(SystemClock), &opts)
                .with_context(|| format!("opening the journal at {}", self.shown()));
        }
        self.open(false)?;
        self.open(true)
    }

    /// The journal's name for messages (never a password).
    pub(crate) fn shown(&self) -> String {
        interlock_postgres::shown(&self.name)
    }
}

/// The exit codes, for scripts: 0 only when what was asked holds.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Exit {
    /// It holds: verify passed, recover settled the effect, the command did its work.
    Holds = 0,
    /// `verify`: a column failed.
    DoesNotHold = 1,
    /// A usage error: a flag or an argument the command does not take (as clap exits), or a
    /// configuration the command cannot use. Running it again unchanged will not help, so a host
    /// that restarts on [`Exit::Error`] does not loop on it.
    Usage = 2,
    /// A runtime error: the journal, the target or a file could not be used (the message says
    /// which, and the fix).
    Error = 3,
    /// `recover`: the effect is still in flight, or needs a person (ambiguous, applied twice).
    Unsettled = 4,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The long-running commands log at `info` unless RUST_LOG says otherwise; the others only
    // when it does. Any of them exports its spans when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let long_running = matches!(
        cli.command,
        Command::Serve(_)
            | Command::McpProxy(_)
            | Command::Metrics(_)
            | Command::Inbox { .. }
            | Command::Ops { .. }
    );
    let default_log = if long_running { "info" } else { "off" };
    let telemetry = match interlock_telemetry::install("interlock", default_log) {
        Ok(t) => t,
        // A server stops at once; a one-shot command (`recover`, `journal settle` in an
        // incident) runs without export rather than not at all.
        Err(e) if long_running => {
            eprintln!("error: {e}");
            return ExitCode::from(Exit::Error as u8);
        }
        Err(e) => {
            eprintln!("warning: traces are not exported: {e}");
            match interlock_telemetry::install_logs_only(default_log) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(Exit::Error as u8);
                }
            }
        }
    };
    let named = Named {
        name: cli.journal,
        schema: cli.journal_schema,
    };
    let run = || -> anyhow::Result<Exit> {
        let read = || named.open(false).map(|o| o.store);
        let write = || named.open(true).map(|o| o.store);
        match cli.command {
            // Import is the one journal command that writes.
            Command::Journal {
                what:
                    what @ (journal_cmd::JournalCmd::Import { .. } | journal_cmd::JournalCmd::Settle(_)),
            } => journal_cmd::run(&*write()?, what).map(|()| Exit::Holds),
            Command::Journal { what } => journal_cmd::run(&*read()?, what).map(|()| Exit::Holds),
            Command::Recover(args) => {
                journal_cmd::recover(named.open(true)?, args).map(|settled| {
                    if settled {
                        Exit::Holds
                    } else {
                        Exit::Unsettled
                    }
                })
            }
            Command::Verify(args) => receipt_cmd::verify(&*read()?, args)
                .map(|held| if held { Exit::Holds } else { Exit::DoesNotHold }),
            Command::Receipt { what } => receipt_cmd::run(&*read()?, what).map(|()| Exit::Holds),
            Command::Lease { what } => lease_cmd::run(&*write()?, what).map(|()| Exit::Holds),
            Command::Budget { what } => budget_cmd::run(&*write()?, what).map(|()| Exit::Holds),
            Command::Webhook { what } => {
                webhook_cmd::run(write()?, &named.shown(), what).map(|()| Exit::Holds)
            }
            Command::Confirm(args) => journal_cmd::confirm(&*write()?, args).map(|()| Exit::Holds),
            Command::Serve(args) => serve_cmd::run(args, &named.name).map(|()| Exit::Holds),
            Command::McpProxy(args) => mcp_cmd::run(args, &named.name).map(|()| Exit::Holds),
            Command::Metrics(args) => metrics_cmd::run(read()?, args).map(|()| Exit::Holds),
            // The inbox only reads the journal: the workflows write.
            Command::Inbox { what } => inbox_cmd::run(read()?, what).map(|()| Exit::Holds),
            // The operators' page writes: recovery and settlements.
            Command::Ops { what } => {
                ops_cmd::run(named.open_existing()?, what).map(|()| Exit::Holds)
            }
            Command::Db {
                what: db_cmd::DbCmd::Install(args),
            } => db_cmd::install(&args).map(|()| Exit::Holds),
            Command::Db {
                what: db_cmd::DbCmd::Verify(args),
            } => db_cmd::verify(&*read()?, &args)
                .map(|held| if held { Exit::Holds } else { Exit::DoesNotHold }),
            Command::Db {
                what: db_cmd::DbCmd::Relay(args),
            } => db_cmd::relay(named.open(true)?, &args)
                .map(|done| if done { Exit::Holds } else { Exit::Unsettled }),
            Command::Db {
                what: db_cmd::DbCmd::StageKey(db),
            } => db_cmd::stage_key(&db).map(|()| Exit::Holds),
            Command::Scoreboard { prefix, json } => {
                journal_cmd::scoreboard(&*read()?, &prefix, json).map(|()| Exit::Holds)
            }
        }
    };
    let exit = match run() {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            let exit = if mcp_cmd::is_configuration(&e) {
                Exit::Usage
            } else {
                Exit::Error
            };
            ExitCode::from(exit as u8)
        }
    };
    // The spans still batched are sent before the process ends.
    drop(telemetry);
    exit
}
