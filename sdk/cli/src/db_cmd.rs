//! `interlock db`: the database-effect substrate from the command line — install it in a team's
//! SQLite file or PostgreSQL database, and verify that the journal and the database agree: an
//! effect the journal holds committed has its marker, with the same receipt, and one it holds
//! failed or refused has none. Unmediated writes are listed, not judged. And relay the outbox's
//! calls to the one target the command line knows, Stripe's refunds.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use interlock::core::{EffectState, Resolution};
use interlock::journal::Journal;
use interlock::{EffectKey, Gate, SystemClock, Target};
use interlock_db::{Change, Outbox, PgDb, PgDbOptions, Plan, Policy, Receipt, SqliteDb};
use interlock_stripe::{StripeConfig, StripeRefundsSetup};
use serde_json::Value;

#[derive(Subcommand)]
pub(crate) enum DbCmd {
    /// Install (or re-install, after a table's columns changed) the substrate and observe the
    /// named tables.
    Install(InstallArgs),
    /// Check every database effect in the journal against the database's markers; exit 1 if
    /// any disagrees.
    Verify(VerifyArgs),
    /// Deliver the outbox's calls to the Stripe refunds target (STRIPE_API_BASE,
    /// STRIPE_SECRET_KEY) through the gate; exit 4 while any call waits.
    Relay(RelayArgs),
    /// PostgreSQL: print the substrate's stage key, as the role that installed it. Every
    /// process that stages or relays needs it (INTERLOCK_DB_STAGE_KEY); no role that stages may
    /// read it.
    StageKey(Database),
}

#[derive(Args)]
pub(crate) struct RelayArgs {
    #[command(flatten)]
    db: Database,
    /// Deliver at most this many calls in a pass.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Keep relaying, a pass every this many seconds, until stopped (default: one pass).
    #[arg(long)]
    every: Option<f64>,
}

/// Which database, and where its substrate lives.
#[derive(Args)]
pub(crate) struct Database {
    /// The team's database: an SQLite file, or a `postgres://` URL.
    #[arg(long)]
    database: String,
    /// PostgreSQL: the substrate's schema (a lower-case name with `interlock` in it).
    #[arg(long, default_value = "interlock_db")]
    schema: String,
    /// PostgreSQL: the `search_path` the observed tables are found on (default: the server's).
    #[arg(long)]
    search_path: Option<String>,
}

impl Database {
    fn is_server(&self) -> bool {
        self.database.starts_with("postgres://") || self.database.starts_with("postgresql://")
    }
}

#[derive(Args)]
pub(crate) struct InstallArgs {
    #[command(flatten)]
    db: Database,
    /// The tables to observe, comma-separated (every table a plan, or a trigger it fires, writes).
    #[arg(long, value_delimiter = ',', required = true)]
    observe: Vec<String>,
    /// PostgreSQL: a role to let stage plans (`interlock_db::postgres::allow`); repeat for more.
    #[arg(long)]
    allow: Vec<String>,
}

#[derive(Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    db: Database,
    /// The target name the workers bind the database under (default: the substrate's own,
    /// `sqlite-db` or `postgres-db`).
    #[arg(long)]
    target: Option<String>,
}

pub(crate) fn install(args: &InstallArgs) -> anyhow::Result<()> {
    let tables: Vec<&str> = args.observe.iter().map(String::as_str).collect();
    let db = &args.db;
    if db.is_server() {
        let mut client = postgres::Client::connect(&db.database, postgres::NoTls)
            .with_context(|| format!("connecting to {}", shown(&db.database)))?;
        if let Some(path) = &db.search_path {
            client
                .query_one(
                    "SELECT pg_catalog.set_config('search_path', $1, false)",
                    &[path],
                )
                .context("setting the search_path")?;
        }
        interlock_db::postgres::install(&mut client, &db.schema, &tables)?;
        for role in &args.allow {
            interlock_db::postgres::allow(&mut client, &db.schema, role)?;
        }
        println!(
            "installed in schema {} of {}, observing {}{}",
            db.schema,
            shown(&db.database),
            tables.join(", "),
            if args.allow.is_empty() {
                String::new()
            } else {
                format!("; {} may stage", args.allow.join(", "))
            }
        );
        println!(
            "every process that stages or relays needs the substrate's stage key in {}: print it \
             with `interlock db stage-key --database {} --schema {}` as this role (no role that \
             stages can read it)",
            interlock_db::postgres::STAGE_KEY_ENV,
            shown(&db.database),
            db.schema
        );
    } else {
        if !args.allow.is_empty() {
            bail!("--allow is for PostgreSQL: an SQLite file has no roles");
        }
        if !Path::new(&db.database).exists() {
            bail!(
                "no database at {}: name the team's SQLite file (the substrate is installed beside its tables)",
                db.database
            );
        }
        let mut conn = rusqlite::Connection::open(&db.database)
            .with_context(|| format!("opening {}", db.database))?;
        interlock_db::sqlite::install(&mut conn, &tables)?;
        println!(
            "installed in {}, observing {}",
            db.database,
            tables.join(", ")
        );
    }
    Ok(())
}

/// Print the PostgreSQL substrate's stage key.
pub(crate) fn stage_key(db: &Database) -> anyhow::Result<()> {
    if !db.is_server() {
        bail!("an SQLite substrate has no stage key: its file's permissions guard it");
    }
    let mut client = postgres::Client::connect(&db.database, postgres::NoTls)
        .with_context(|| format!("connecting to {}", shown(&db.database)))?;
    let key = interlock_db::postgres::stage_key(&mut client, &db.schema).with_context(|| {
        format!(
            "reading the stage key of schema {}: connect as the role that installed it",
            db.schema
        )
    })?;
    println!("{key}");
    Ok(())
}

/// The substrate, opened to read markers (it stages nothing).
enum Opened {
    Sqlite(Box<SqliteDb>),
    Pg(Box<PgDb>),
}

impl Opened {
    fn open(db: &Database) -> anyhow::Result<Self> {
        Ok(if db.is_server() {
            let options = PgDbOptions {
                schema: db.schema.clone(),
                search_path: db.search_path.clone(),
                // This handle stages nothing: it only reads markers, so the role it connects as
                // (often the installer's) need not be confined.
                plans_are_trusted: true,
                // From INTERLOCK_DB_STAGE_KEY.
                stage_key: None,
            };
            Self::Pg(Box::new(PgDb::open(
                &db.database,
                options,
                Policy::default(),
            )?))
        } else {
            Self::Sqlite(Box::new(SqliteDb::open(&db.database, Policy::default())?))
        })
    }

    fn target_name(&self) -> &str {
        match self {
            Self::Sqlite(d) => d.name(),
            Self::Pg(d) => d.name(),
        }
    }

    fn receipt(&self, key: &EffectKey) -> anyhow::Result<Option<Receipt>> {
        Ok(match self {
            Self::Sqlite(d) => d.receipt(key)?,
            Self::Pg(d) => d.receipt(key)?,
        })
    }

    fn outbox(&self) -> &dyn Outbox {
        match self {
            Self::Sqlite(d) => &**d,
            Self::Pg(d) => &**d,
        }
    }

    fn marker_keys(&self) -> anyhow::Result<Vec<String>> {
        Ok(match self {
            Self::Sqlite(d) => d.marker_keys()?,
            Self::Pg(d) => d.marker_keys()?,
        })
    }

    fn unmediated(&self) -> anyhow::Result<Vec<Change>> {
        Ok(match self {
            Self::Sqlite(d) => d.unmediated()?,
            Self::Pg(d) => d.unmediated()?,
        })
    }
}

/// One pass (or, with `--every`, a pass every so often until stopped) of the outbox's calls
/// through the gate bound to the Stripe refunds target; whether nothing is left waiting.
pub(crate) fn relay(opened: interlock_postgres::Opened, args: &RelayArgs) -> anyhow::Result<bool> {
    let db = Opened::open(&args.db)?;
    let journal = opened.store;
    let cfg = StripeConfig::from_env().context("the relay delivers to the Stripe target")?;
    let stripe = StripeRefundsSetup::new(cfg);
    let gate = Gate::new(
        journal.clone(),
        journal,
        Arc::new(SystemClock),
        opened.config.build()?,
    )?
    .with_attempt("cli-relay");
    let bound = stripe.bind(&gate)?;
    let targets = BTreeMap::from([(stripe.name.clone(), &bound)]);
    loop {
        let relayed = interlock_db::relay(db.outbox(), &targets, args.limit)?;
        for (r, label) in &relayed.delivered {
            println!("delivered {}/{}  {label}", r.plan_key, r.id);
        }
        for (r, why) in &relayed.waiting {
            println!("waiting   {}/{}  {why}", r.plan_key, r.id);
        }
        if relayed.delivered.is_empty() && relayed.waiting.is_empty() {
            println!("nothing waits in the outbox");
        }
        let Some(every) = args.every else {
            return Ok(relayed.waiting.is_empty());
        };
        std::thread::sleep(std::time::Duration::from_secs_f64(every.max(0.1)));
    }
}

/// What one effect's journal says and its database holds, and whether they agree.
fn judge(first_payload: &Value, state: &EffectState, marker: Option<&Receipt>) -> (String, bool) {
    let plan_hash = Plan::from_payload(first_payload)
        .map(|p| interlock_db::receipt::plan_hash(&p))
        .ok();
    match (state, marker) {
        (EffectState::Resolved { resolution, .. }, Some(r)) => match resolution {
            Resolution::Committed(c) => {
                let same = c.result == r.to_value();
                let plan = plan_hash.as_deref() == Some(r.plan_hash.as_str());
                match (same, plan, r.diff_matches()) {
                    (true, true, true) => ("committed; marker holds its receipt".into(), true),
                    (false, _, _) => (
                        "committed, but the marker holds another receipt than the journal".into(),
                        false,
                    ),
                    (_, false, _) => (
                        "committed, but the marker names another plan than the journal's".into(),
                        false,
                    ),
                    (_, _, false) => (
                        "committed, but the marker's diff does not match its hash".into(),
                        false,
                    ),
                }
            }
            other => (
                format!(
                    "{} in the journal, yet the database holds its marker",
                    other.kind()
                ),
                false,
            ),
        },
        (EffectState::Resolved { resolution, .. }, None) => match resolution {
            Resolution::Committed(_) => (
                "committed in the journal, but the database holds no marker".into(),
                false,
            ),
            other => (format!("{}; no marker", other.kind()), true),
        },
        (_, Some(_)) => ("in flight; the marker is there (it committed)".into(), true),
        (_, None) => ("in flight; no marker yet".into(), true),
    }
}

pub(crate) fn verify(journal: &dyn Journal, args: &VerifyArgs) -> anyhow::Result<bool> {
    let db = Opened::open(&args.db)?;
    let target = args
        .target
        .clone()
        .unwrap_or_else(|| db.target_name().to_owned());
    let mut held = true;
    let mut seen = 0;
    let mut journaled = std::collections::BTreeSet::new();
    for key in journal.keys()? {
        let key = EffectKey::fixed(key.clone())
            .with_context(|| format!("the journal holds a key that is not one: {key}"))?;
        let state = journal.state(&key)?;
        let first = match &state {
            EffectState::Resolved { first, .. }
            | EffectState::InFlight { first, .. }
            | EffectState::Proposed { first } => first,
            _ => continue,
        };
        if first.target != target {
            continue;
        }
        seen += 1;
        journaled.insert(key.as_str().to_owned());
        let marker = db.receipt(&key)?;
        let (what, ok) = judge(&first.payload, &state, marker.as_ref());
        held &= ok;
        println!("{} {key}  {what}", if ok { "ok  " } else { "FAIL" });
    }
    // The other way round: a marker is a commit the journal must know of.
    for key in db.marker_keys()? {
        if !journaled.contains(&key) {
            held = false;
            println!(
                "FAIL {key}  the database holds its marker, but the journal has no database effect under it (a write the gate did not make, or another journal's)"
            );
        }
    }
    // Every call waiting in the outbox must be the one its journaled plan asked for: a row
    // rewritten after its stage (another payee, amount, target or lease) would be relayed.
    let mut after = 0;
    let mut calls = 0;
    loop {
        let page = db.outbox().pending(after, 500)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for r in &page {
            calls += 1;
            if let Err(why) = interlock_db::as_planned(journal, r) {
                held = false;
                println!("FAIL {}/{}  {why}", r.plan_key, r.id);
            }
        }
    }
    let unmediated = db.unmediated()?;
    println!("{calls} outbox call(s) waiting checked against their journaled plans");
    println!(
        "{seen} database effect(s) of target `{target}` checked; {} write(s) to observed tables outside any stage",
        unmediated.len()
    );
    if seen == 0 {
        println!(
            "(no effect in the journal names target `{target}`: pass --target with the name your workers bind the database under)"
        );
    }
    Ok(held)
}

/// A URL without its password.
fn shown(url: &str) -> String {
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, rest)), Some((_, host))) if rest.contains('@') => {
            let user = rest.split(['@', ':']).next().unwrap_or("");
            format!("{scheme}://{user}@{host}")
        }
        _ => url.to_owned(),
    }
}
