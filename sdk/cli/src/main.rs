//! `interlock`: inspect and operate a journal — list and show effects, grant and revoke leases,
//! recover in-flight effects, export and verify receipts, serve Stripe webhooks, and keep score.
//! Errors name the cause and the fix; `verify` exits 1 when anything fails to hold.

#![allow(clippy::print_stdout)] // a command line's output is its product

mod journal_cmd;
mod lease_cmd;
mod receipt_cmd;
mod webhook_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use interlock::{SqliteJournal, SystemClock};

#[derive(Parser)]
#[command(
    name = "interlock",
    version,
    about = "Side effects that happen once, under live authority, on facts that still hold."
)]
struct Cli {
    /// The journal file.
    #[arg(
        long,
        global = true,
        env = "INTERLOCK_JOURNAL",
        default_value = "interlock-journal.db"
    )]
    journal: PathBuf,
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
    /// Receive Stripe's signed refund webhooks and record confirmations.
    Webhook {
        #[command(subcommand)]
        what: webhook_cmd::WebhookCmd,
    },
    /// Ask the Stripe target (STRIPE_API_BASE, STRIPE_SECRET_KEY) for effects by key and record CONFIRMED.
    Confirm(journal_cmd::ConfirmArgs),
    /// Counts and decision times, from the journal alone.
    Scoreboard {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// Open the journal read-only (inspection) or read-write (changes), with an error naming the fix.
fn open(path: &PathBuf, write: bool) -> anyhow::Result<SqliteJournal> {
    let clock = std::sync::Arc::new(SystemClock);
    if !write && !path.exists() {
        anyhow::bail!(
            "no journal at {}: pass --journal PATH or set INTERLOCK_JOURNAL to the file your workers write",
            path.display()
        );
    }
    let j = if write {
        SqliteJournal::open(path, clock)
    } else {
        SqliteJournal::open_read_only(path, clock)
    };
    j.with_context(|| format!("opening the journal {}", path.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = || -> anyhow::Result<bool> {
        match cli.command {
            Command::Journal { what } => {
                journal_cmd::run(&open(&cli.journal, false)?, what).map(|()| true)
            }
            Command::Recover(args) => journal_cmd::recover(&cli.journal, args).map(|()| true),
            Command::Verify(args) => receipt_cmd::verify(&open(&cli.journal, false)?, args),
            Command::Receipt { what } => {
                receipt_cmd::run(&open(&cli.journal, false)?, what).map(|()| true)
            }
            Command::Lease { what } => {
                lease_cmd::run(&open(&cli.journal, true)?, what).map(|()| true)
            }
            Command::Webhook { what } => webhook_cmd::run(&cli.journal, what).map(|()| true),
            Command::Confirm(args) => {
                journal_cmd::confirm(&open(&cli.journal, true)?, args).map(|()| true)
            }
            Command::Scoreboard { json } => {
                journal_cmd::scoreboard(&open(&cli.journal, false)?, json).map(|()| true)
            }
        }
    };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
