//! `receipt export`, `receipt keygen`, `verify`.

use interlock::core::Status;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use interlock::journal::Journal;
use interlock::receipt::{Receipt, SigningKeyKind, VerifyingKeyKind, build};
use interlock::target::TargetRecords;
use interlock::verify::{Sources, Verification, strangers, verify as verify_key};
use interlock::{EffectKey, JournalStore, SqliteJournal, SystemClock};
use interlock_stripe::{RefundPayload, StripeConfig, StripeRefunds};

#[derive(Subcommand)]
pub(crate) enum ReceiptCmd {
    /// Write receipts (one JSON file per effect, named by key) into a directory.
    Export {
        /// One effect; omit with --all.
        key: Option<String>,
        /// Every effect in the journal.
        #[arg(long)]
        all: bool,
        /// Where to write.
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        sign: SignArgs,
    },
    /// Make an Ed25519 signing key (hex seed, mode 600) and print its public key.
    Keygen {
        /// Where to write the signing key.
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Args)]
pub(crate) struct SignArgs {
    /// Sign with HMAC-SHA256 using the key in this file (or INTERLOCK_HMAC_KEY).
    #[arg(long, conflicts_with = "ed25519_key_file")]
    hmac_key_file: Option<PathBuf>,
    /// Sign with the Ed25519 key (hex seed) in this file.
    #[arg(long)]
    ed25519_key_file: Option<PathBuf>,
}

#[derive(Args)]
pub(crate) struct VerifyArgs {
    /// One effect; omit with --all.
    key: Option<String>,
    /// Every effect the journal or the receipts know (and, with --ask-target, every refund at
    /// the target that carries an interlock key).
    #[arg(long)]
    all: bool,
    /// Directory of exported receipts to check the journal against. With --all, a receipt whose
    /// effect is missing from the journal fails, and so does a journal effect with no receipt.
    #[arg(long)]
    receipts: Option<PathBuf>,
    /// Let signed receipts pass without checking their signatures when no key is given (by
    /// default an unchecked signature fails: it proves nothing).
    #[arg(long)]
    accept_unchecked_signatures: bool,
    /// Another journal that sends to the same target account (repeatable): its keys are not
    /// reported as unknown by --all --ask-target.
    #[arg(long = "also-journal", value_name = "PATH")]
    also_journals: Vec<PathBuf>,
    /// Check HMAC-SHA256 signatures with the key in this file (or INTERLOCK_HMAC_KEY).
    #[arg(long, conflicts_with = "ed25519_public_key_file")]
    hmac_key_file: Option<PathBuf>,
    /// Check Ed25519 signatures with the public key (hex) in this file.
    #[arg(long)]
    ed25519_public_key_file: Option<PathBuf>,
    /// The approver directory (JSON: approvers with public keys, groups, the escalation chain),
    /// to check each person's signed approval, and each settlement of an ambiguous effect,
    /// against their public key.
    #[arg(long, value_name = "FILE")]
    approvers: Option<PathBuf>,
    /// The directory group whose members may settle an ambiguous effect.
    #[arg(long, default_value = interlock::settle::DEFAULT_GROUP)]
    settle_group: String,
    /// Ask the target for its own records: the Stripe target from the environment
    /// (STRIPE_API_BASE, STRIPE_SECRET_KEY), or, with --config, each effect's own target.
    #[arg(long)]
    ask_target: bool,
    /// The gate server's file (`interlock serve --config`): with --ask-target, each effect's
    /// records are asked of the target of the file that has the name it was journaled under
    /// (an HTTP target's `[records]`, or a Stripe account).
    #[arg(long, value_name = "FILE", requires = "ask_target")]
    config: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

fn read_key(path: &Path) -> anyhow::Result<String> {
    let s = std::fs::read_to_string(path)
        .with_context(|| format!("reading the key file {}", path.display()))?;
    Ok(s.trim().to_owned())
}

fn hmac_key(file: Option<&PathBuf>) -> anyhow::Result<Option<Vec<u8>>> {
    match (file, std::env::var("INTERLOCK_HMAC_KEY").ok()) {
        (Some(f), _) => Ok(Some(read_key(f)?.into_bytes())),
        (None, Some(k)) if !k.is_empty() => Ok(Some(k.into_bytes())),
        _ => Ok(None),
    }
}

/// A target's records, or why they cannot be asked.
type Asked = Result<Arc<dyn TargetRecords>, String>;

fn keys(j: &dyn JournalStore, key: Option<String>, all: bool) -> anyhow::Result<Vec<String>> {
    match (key, all) {
        (Some(k), false) => Ok(vec![k]),
        (None, true) => Ok(j.keys()?),
        _ => bail!("name one key, or pass --all"),
    }
}

/// One file per key, and never two keys in one file: every byte outside `[A-Za-z0-9_~-]` is
/// written as `%XX`, and a name too long for a file system becomes the key's SHA-256.
fn file_for(dir: &Path, key: &str) -> PathBuf {
    let mut name = interlock::effect::percent_encoded(key);
    if name.len() > 200 {
        name = format!("sha256-{}", interlock::effect::sha256_hex(key.as_bytes()));
    }
    dir.join(format!("{name}.json"))
}

fn read_receipt(file: &Path) -> Result<Receipt, String> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        format!(
            "no receipt at {} ({e}): export it with `interlock receipt export`",
            file.display()
        )
    })?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a receipt: {e}", file.display()))
}

/// Each key's first proposed payload (`null` where its history cannot be read), for keys not
/// yet known.
fn journaled_payloads(
    j: &dyn JournalStore,
    keys: &[String],
    known: &mut HashMap<String, serde_json::Value>,
) {
    for k in keys {
        let payload = EffectKey::fixed(k.clone())
            .ok()
            .and_then(|key| j.state(&key).ok())
            .and_then(|s| s.first().map(|f| f.payload.clone()))
            .unwrap_or(serde_json::Value::Null);
        known.entry(k.clone()).or_insert(payload);
    }
}

/// Every `*.json` in `dir`, in name order, read as a receipt.
fn receipts_in(dir: &Path) -> anyhow::Result<Vec<(String, Result<Receipt, String>)>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the receipts directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    Ok(files
        .into_iter()
        .map(|f| (f.display().to_string(), read_receipt(&f)))
        .collect())
}

pub(crate) fn run(j: &dyn JournalStore, cmd: ReceiptCmd) -> anyhow::Result<()> {
    match cmd {
        ReceiptCmd::Export {
            key,
            all,
            out,
            sign,
        } => {
            let signer = match (
                hmac_key(sign.hmac_key_file.as_ref())?,
                &sign.ed25519_key_file,
            ) {
                (Some(k), _) => Some(SigningKeyKind::Hmac(k)),
                (None, Some(f)) => Some(SigningKeyKind::ed25519_from_hex(&read_key(f)?)?),
                (None, None) => None,
            };
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let ks = keys(j, key, all)?;
            for k in &ks {
                let records = j.history(&EffectKey::fixed(k.clone())?)?;
                let Some(mut r) = build(&records) else {
                    bail!("no effect with key {k}: `interlock journal list` shows the keys")
                };
                let file = file_for(&out, k);
                if file.exists() {
                    let old = read_receipt(&file).map_err(anyhow::Error::msg)?;
                    if !r.records.starts_with(&old.records) {
                        bail!(
                            "{} anchors a history of {k} that the journal no longer extends: the \
                             journal changed since that receipt was exported; it is kept, and \
                             `interlock verify {k} --receipts {}` shows where they differ",
                            file.display(),
                            out.display()
                        );
                    }
                }
                if let Some(s) = &signer {
                    s.sign(&mut r);
                }
                std::fs::write(&file, serde_json::to_string_pretty(&r)? + "\n")?;
            }
            let how = if signer.is_some() {
                "signed"
            } else {
                "UNSIGNED (internal consistency only)"
            };
            println!("wrote {} {how} receipt(s) to {}", ks.len(), out.display());
        }
        ReceiptCmd::Keygen { out } => {
            let mut seed = [0u8; 32];
            std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut seed)?;
            let hex_seed = hex::encode(seed);
            let key = SigningKeyKind::ed25519_from_hex(&hex_seed)?;
            std::fs::write(&out, &hex_seed)?;
            #[cfg(unix)]
            std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            println!("{}", key.public_hex().unwrap_or_default());
            eprintln!(
                "wrote the signing key to {}; the line above is its public key",
                out.display()
            );
        }
    }
    Ok(())
}

pub(crate) fn verify(j: &dyn JournalStore, args: VerifyArgs) -> anyhow::Result<bool> {
    let verifier = match (
        hmac_key(args.hmac_key_file.as_ref())?,
        &args.ed25519_public_key_file,
    ) {
        (Some(k), _) => Some(VerifyingKeyKind::Hmac(k)),
        (None, Some(f)) => Some(VerifyingKeyKind::ed25519_from_hex(&read_key(f)?)?),
        (None, None) => None,
    };
    // The targets asked: every target of the file (by the name an effect was journaled under),
    // or the Stripe target from the environment for every effect.
    let by_name: Option<BTreeMap<String, Asked>> = match &args.config {
        Some(path) => Some(
            interlock_server::ServerConfig::load(path)?
                .targets
                .iter()
                .map(|(name, cfg)| {
                    (
                        name.clone(),
                        interlock_server::targets::records_of(name, cfg),
                    )
                })
                .collect(),
        ),
        None => None,
    };
    let target: Option<Arc<dyn TargetRecords>> = if args.ask_target && by_name.is_none() {
        Some(Arc::new(StripeRefunds::new(
            StripeConfig::from_env().context(
                "--ask-target reads the Stripe target from the environment (or pass --config)",
            )?,
        )))
    } else {
        None
    };
    let records_for_key = |key: &EffectKey| -> Result<Option<Arc<dyn TargetRecords>>, String> {
        let Some(by_name) = &by_name else {
            // The Stripe target from the environment answers for refunds only: an effect of
            // another kind (an MCP tool's, an HTTP target's) is not asked (--config asks each
            // effect's own target).
            let is_refund = j
                .state(key)
                .ok()
                .and_then(|s| {
                    s.first()
                        .map(|p| RefundPayload::from_value(&p.payload).is_ok())
                })
                .unwrap_or(false);
            return Ok(target.clone().filter(|_| is_refund));
        };
        let name = crate::recovery::journaled_target(j, key).map_err(|e| format!("{e:#}"))?;
        match by_name.get(&name) {
            Some(Ok(r)) => Ok(Some(r.clone())),
            Some(Err(why)) => Err(format!("the target's records could not be asked: {why}")),
            None => Err(format!(
                "the effect was journaled under target {name:?}, which --config does not \
                 configure: add [targets.{name}] to it"
            )),
        }
    };
    let budgets = j
        .budget_changes()
        .context("reading the journal's budget changes")?;
    let mut out = Vec::new();
    // Every receipt in the directory, by the key it names. A file that is not a receipt, one
    // filed under another key's name, and two files naming one key all fail: an old receipt
    // slipped in beside the current one must not stand in for it.
    let mut receipts: BTreeMap<String, Receipt> = BTreeMap::new();
    let mut doubtful: BTreeMap<String, String> = BTreeMap::new();
    if let (Some(dir), true) = (&args.receipts, args.all) {
        let mut filed: BTreeMap<String, String> = BTreeMap::new();
        for (file, parsed) in receipts_in(dir)? {
            let r = match parsed {
                Ok(r) => r,
                Err(why) => {
                    out.push(Verification::failed(file, why));
                    continue;
                }
            };
            let expected = file_for(dir, &r.key).display().to_string();
            if let Some(other) = filed.insert(r.key.clone(), file.clone()) {
                doubtful.insert(
                    r.key.clone(),
                    format!("two receipts name this key: {other} and {file}; keep only the latest"),
                );
            } else if file != expected {
                doubtful.insert(
                    r.key.clone(),
                    format!("its receipt is filed as {file}, not {expected}"),
                );
            }
            receipts.insert(r.key.clone(), r);
        }
    }
    let approvers = match &args.approvers {
        Some(path) => Some(crate::read_approvers(path)?),
        None => None,
    };
    let mut ks = keys(j, args.key, args.all)?;
    let in_journal: std::collections::HashSet<&String> = ks.iter().collect();
    let only_in_receipts: Vec<String> = receipts
        .keys()
        .filter(|k| !in_journal.contains(k))
        .cloned()
        .collect();
    ks.extend(only_in_receipts.iter().cloned());
    for k in &ks {
        if let Some(why) = doubtful.remove(k) {
            out.push(Verification::failed(k.clone(), why));
            continue;
        }
        let receipt = match (&args.receipts, receipts.remove(k)) {
            (_, Some(r)) => Some(r),
            (None, None) => None,
            (Some(dir), None) => match read_receipt(&file_for(dir, k)) {
                Ok(r) => Some(r),
                Err(why) => {
                    out.push(Verification::failed(k.clone(), why));
                    continue;
                }
            },
        };
        let key = match EffectKey::fixed(k.clone()) {
            Ok(key) => key,
            Err(e) => {
                out.push(Verification::failed(k.clone(), e.to_string()));
                continue;
            }
        };
        let asked = match records_for_key(&key) {
            Ok(asked) => asked,
            // Only in a receipt: verify says what the journal lost.
            Err(_) if only_in_receipts.contains(k) => None,
            Err(why) => {
                out.push(Verification::failed(k.clone(), why));
                continue;
            }
        };
        out.push(verify_key(
            j,
            &key,
            &Sources {
                leases: Some(j),
                records: asked.as_deref(),
                receipt: receipt.as_ref(),
                key: verifier.as_ref(),
                accept_unchecked_signatures: args.accept_unchecked_signatures,
                approvers: approvers.as_ref(),
                budgets: Some(&budgets),
                settlers: Some(&args.settle_group),
            },
        ));
    }
    let asked_all: Vec<(String, Asked)> = match (&by_name, &target) {
        (Some(by_name), _) => by_name
            .iter()
            .map(|(n, r)| (n.clone(), r.clone()))
            .collect(),
        (None, Some(t)) => vec![("the target".to_owned(), Ok(t.clone()))],
        (None, None) => Vec::new(),
    };
    if args.all && !asked_all.is_empty() {
        let mut known = HashMap::new();
        journaled_payloads(j, &ks, &mut known);
        for path in &args.also_journals {
            let other = SqliteJournal::open_read_only(path, Arc::new(SystemClock))
                .with_context(|| format!("opening --also-journal {}", path.display()))?;
            journaled_payloads(&other, &other.keys()?, &mut known);
        }
        for (name, records) in &asked_all {
            let listed = records
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|r| strangers(r.as_ref(), &known));
            match listed {
                Ok(found) => out.extend(found),
                Err(e) => out.push(Verification::failed(
                    format!("({name}'s records)"),
                    format!(
                        "the target's records could not be listed, so unknown keys were not \
                         looked for: {e}"
                    ),
                )),
            }
        }
    }
    let all_hold = out.iter().all(Verification::holds);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for v in &out {
            println!(
                "{} {} — {}",
                if v.holds() { "HOLDS" } else { "FAILS" },
                v.key,
                v.outcome.map_or("UNKNOWN", Status::label)
            );
            for c in &v.columns {
                let mark = match c.holds {
                    Some(true) => "ok  ",
                    Some(false) => "FAIL",
                    None => " –  ",
                };
                println!("  {mark} {:<22} {}", c.name, c.detail);
            }
        }
        println!(
            "{} of {} effect(s) hold",
            out.iter().filter(|v| v.holds()).count(),
            out.len()
        );
    }
    Ok(all_hold)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_gets_its_own_receipt_file_of_a_usable_length() {
        let dir = Path::new("/r");
        let names: Vec<PathBuf> = ["a/b", "a_b", "a%2Fb", "a\\b", "case-4471-refund"]
            .iter()
            .map(|k| file_for(dir, k))
            .collect();
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(names[4], dir.join("case-4471-refund.json"));
        let long = file_for(dir, &"k/".repeat(120));
        let name = long.file_name().unwrap().to_str().unwrap();
        assert!(name.len() < 100 && name.starts_with("sha256-"), "{name}");
    }
}
