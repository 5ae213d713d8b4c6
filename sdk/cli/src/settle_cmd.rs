//! `journal settle`: a person who looked at the target ends an `AMBIGUOUS` effect with a
//! statement signed by their own key. The statement is drafted from the journal, so it names the
//! exact ambiguity it answers; the journal records it only if the core lets it end the effect.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use interlock::approval::ApproverKey;
use interlock::core::settle::Finding;
use interlock::settle::{DEFAULT_GROUP, Settlers, SignedSettlement, draft, settle};
use interlock::{Clock, JournalStore, SystemClock};

#[derive(Args)]
#[command(group(clap::ArgGroup::new("finding").required(true).args(["applied", "not_applied"])))]
pub(crate) struct SettleArgs {
    /// The effect's key (as `journal list` prints it).
    key: String,
    /// The target holds the effect: its reference there (a refund's id).
    #[arg(long, value_name = "REFERENCE")]
    applied: Option<String>,
    /// The target holds nothing of the effect.
    #[arg(long)]
    not_applied: bool,
    /// Who you are: your id in the approver directory.
    #[arg(long)]
    person: String,
    /// Your Ed25519 key: a file holding its 32-byte seed in hex.
    #[arg(long, value_name = "FILE")]
    signing_key_file: PathBuf,
    /// The approver directory (JSON) that holds your public key.
    #[arg(long, env = "INTERLOCK_APPROVERS")]
    approvers: PathBuf,
    /// The directory group whose members may settle.
    #[arg(long, default_value = DEFAULT_GROUP)]
    group: String,
    /// What you looked at, in your words (kept in the journal with the statement).
    #[arg(long, default_value = "")]
    note: String,
    /// When you looked at the target: `now`, or ms since the epoch. Say when you looked, not
    /// when you sign: a look taken before a send's window closed does not count.
    #[arg(long, value_name = "MS|now")]
    looked_at: String,
}

pub(crate) fn run(j: &dyn JournalStore, args: SettleArgs) -> anyhow::Result<()> {
    let directory = crate::read_approvers(&args.approvers)?;
    let seed = std::fs::read_to_string(&args.signing_key_file)
        .with_context(|| format!("reading the key file {}", args.signing_key_file.display()))?;
    let key = ApproverKey::from_seed_hex(&args.person, &seed)?;
    let finding = match args.applied {
        Some(reference) => Finding::Applied { reference },
        None => Finding::NotApplied,
    };
    let looked_ms = match args.looked_at.as_str() {
        "now" => SystemClock.now_ms(),
        ms => ms.parse().with_context(|| {
            format!("--looked-at {ms}: give `now` or the time in ms since the epoch")
        })?,
    };
    let statement = draft(j, &args.key, finding, &args.person, &args.note, looked_ms)?;
    let signed = SignedSettlement::sign(&key, statement)?;
    let settlers = Settlers {
        directory: &directory,
        group: &args.group,
    };
    let record = settle(j, settlers, &signed)?;
    let ended = j.state(&interlock::EffectKey::fixed(args.key.clone())?)?;
    println!(
        "{}: settled by {} → {} (record {}, hash {})",
        args.key,
        args.person,
        ended.status().map_or("?", interlock::core::Status::label),
        record.n,
        &record.hash[..16]
    );
    Ok(())
}
