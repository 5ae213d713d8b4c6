//! Model-check the gate's protocol on the real core, then show the checker catches each known
//! bug when it is switched back in. Writes `results/model_check.md` and
//! `results/model_check.json`; `--db` runs the database-effect models instead and writes
//! `results/model_check_db.{md,json}`; `--quick` runs the small CI configurations of both and
//! writes nothing.
//! Exits 1 if any property has a counterexample on the real core or any mutant goes uncaught.

#![allow(clippy::print_stdout)] // the report is its output

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use anyhow::Context;
use interlock_core::mutants::{self, Mutant};
use interlock_model::check::{ModelReport, PROPERTIES, explore};
use interlock_model::configs::models;
use interlock_model::db::{
    DB_MUTANTS, DB_PROPERTIES, DbConfig, DbMutant, DbReport, db_models, explore_db,
};
use interlock_model::limits::{
    LIMIT_PROPERTIES, LimitsConfig, LimitsReport, explore_limits, limits_models,
};
use interlock_model::spec::Config;
use serde::Serialize;

#[derive(Serialize)]
struct MutantReport {
    name: String,
    caught: bool,
    property: Option<String>,
    #[serde(skip)]
    model: Option<String>,
    #[serde(skip)]
    trace: Vec<String>,
    /// Expected to survive: the layer that absorbs it.
    #[serde(skip_serializing_if = "Option::is_none")]
    backed_by: Option<String>,
}

/// A known bug: one of the core's switches, or the shell's old order of reads.
#[derive(Clone, Copy)]
enum Bug {
    Core(Mutant),
    LeaseReadBeforePremises,
    UseWrittenApart,
    PlaceNotStretched,
    RawPayloads,
}

impl Bug {
    fn name(self) -> &'static str {
        match self {
            Bug::Core(m) => m.name(),
            Bug::LeaseReadBeforePremises => "lease_read_outside_the_dispatch_transaction",
            Bug::UseWrittenApart => "lease_use_taken_outside_the_dispatch_transaction",
            Bug::PlaceNotStretched => "budget_place_not_moved_by_a_resend",
            Bug::RawPayloads => "budget_matches_raw_payloads",
        }
    }

    /// The CI configuration in which this bug was last seen caught: `--quick` hunts there
    /// first, then through every other model as the full run does, so a hint gone stale costs
    /// time, never a miss.
    fn caught_before_in(self) -> &'static str {
        match self {
            Bug::Core(Mutant::BindingTier) | Bug::LeaseReadBeforePremises => {
                "tier 3, worker + recover --tier 1"
            }
            Bug::Core(Mutant::TokenOnlyTakeover) => "tier 2, 2 workers, retries",
            Bug::Core(Mutant::UnknownLateCloses | Mutant::WindowJudgedAtTakeover) => {
                "tier 1, 2 workers, the window closes"
            }
            Bug::Core(Mutant::DeadHolderSettles) => "tier 2, worker + recover --tier 1",
            Bug::Core(Mutant::SavedErrorUnknown) => "tier 1, 2 workers, saved 500s",
            Bug::Core(Mutant::PremisesHaveNoAge) => "tier 3, 2 workers, premise moves",
            Bug::Core(Mutant::NotesBlockTakeover) => "tier 1, 2 workers, confirmations",
            Bug::Core(Mutant::ConfirmationIgnored) => "tier 3, 2 workers, confirmations",
            Bug::Core(Mutant::FencedDispatchKeepsWindow) => {
                "tier 2, 2 workers, fenced callers, store outage, expiry"
            }
            Bug::Core(Mutant::AmbiguousGivesUseBack) => "one_use_two_keys_t3",
            Bug::Core(Mutant::SettleWhileSendMayLand) => "tier 3, 2 workers, a person settles",
            Bug::UseWrittenApart => "one_use_two_keys_t2",
            Bug::PlaceNotStretched => "budget_one_per_3_ticks_t2",
            Bug::RawPayloads => "budget_one_per_payment_by_charge_or_intent_t2",
            // A bug added since: hunted by size, as in the full run.
            Bug::Core(_) => "",
        }
    }

    /// A bug in how uses are kept across keys: hunted in the shared-lease models first.
    fn about_limits(self) -> bool {
        matches!(
            self,
            Bug::UseWrittenApart
                | Bug::PlaceNotStretched
                | Bug::RawPayloads
                | Bug::Core(Mutant::AmbiguousGivesUseBack)
        )
    }
}

/// Model-check the gate's protocol on the real core and hunt each known bug switched back in.
#[derive(clap::Parser)]
struct Args {
    /// The small CI configurations; nothing is written.
    #[arg(long)]
    quick: bool,
    /// Only the models whose name contains this.
    #[arg(long)]
    only: Option<String>,
    /// Change one bound of every model run (`field=value`, repeatable): attempts, crashes,
    /// jumps, horizon, revoke, move_premise, server_errors, lossy, conflicts, confirmations, settles,
    /// store_outage, fences, lease_expires (a tick; 0 for none).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    set: Vec<String>,
    /// Skip the mutant hunts.
    #[arg(long)]
    no_mutants: bool,
    /// The database-effect models and the stage's mutants only; the full run writes
    /// `results/model_check_db.{md,json}` (`--quick` runs them beside the rest).
    #[arg(long)]
    db: bool,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let quick = args.quick;
    let (gate_models, db_models_too) = (!args.db, args.db || quick);
    let picked = |name: &str| args.only.as_ref().is_none_or(|o| name.contains(o.as_str()));
    let configs: Vec<Config> = models(quick)
        .into_iter()
        .filter(|_| gate_models)
        .filter(|c| picked(&c.name))
        .map(|c| tweak(c, &args.set))
        .collect::<anyhow::Result<_>>()?;
    let reports = on_every_core(&configs, |cfg| {
        eprintln!("model {}: exploring…", cfg.name);
        let r = explore(cfg, false, &mut |n, d| {
            if !quick {
                eprintln!("  model {}: {n} states, depth {d}", cfg.name);
            }
        });
        explored(&r.name, r.states, r.max_depth, r.seconds, r.first_broken());
        r
    });
    let limit_configs: Vec<LimitsConfig> = limits_models(quick)
        .into_iter()
        .filter(|_| gate_models)
        .filter(|c| picked(&c.name))
        .collect();
    let limit_reports = on_every_core(&limit_configs, |cfg| {
        let r = explore_limits(cfg, false);
        explored(&r.name, r.states, r.max_depth, r.seconds, r.first_broken());
        r
    });
    let db_configs: Vec<DbConfig> = db_models(quick)
        .into_iter()
        .filter(|_| db_models_too)
        .filter(|c| picked(&c.name))
        .collect();
    let db_reports = on_every_core(&db_configs, |cfg| {
        let r = explore_db(cfg, false);
        explored(&r.name, r.states, r.max_depth, r.seconds, r.first_broken());
        r
    });
    let bugs: Vec<Bug> = Mutant::ALL
        .iter()
        .map(|m| Bug::Core(*m))
        .chain([
            Bug::LeaseReadBeforePremises,
            Bug::UseWrittenApart,
            Bug::PlaceNotStretched,
            Bug::RawPayloads,
        ])
        .filter(|_| gate_models)
        .collect();
    // Hunt in the smallest models first: a mutant is usually caught in seconds there. In CI, in
    // the model that caught it last first (a stable sort keeps the rest by size).
    let mut by_size: Vec<Config> = configs.clone();
    by_size.sort_by_key(|c| {
        reports
            .iter()
            .find(|r| r.name == c.name)
            .map_or(u64::MAX, |r| r.states)
    });
    let mutant_reports = if args.no_mutants {
        Vec::new()
    } else {
        // Each hunt switches its mutant in on its own thread only.
        on_every_core(&bugs, |bug| {
            if quick {
                // `false` sorts first: the hinted model, then the rest in their order.
                let hint = bug.caught_before_in();
                let elsewhere = |name: &str| name != hint;
                let mut singles = by_size.clone();
                singles.sort_by_key(|c| elsewhere(&c.name));
                let mut limits = limit_configs.clone();
                limits.sort_by_key(|c| elsewhere(&c.name));
                hunt(*bug, &singles, &limits)
            } else {
                hunt(*bug, &by_size, &limit_configs)
            }
        })
    };
    let db_mutant_reports = if args.no_mutants || !db_models_too {
        Vec::new()
    } else {
        // The database stage's bugs, in the database models.
        on_every_core(&DB_MUTANTS, |m| hunt_db(m, &db_configs))
    };

    let failed_models: Vec<&str> = reports
        .iter()
        .filter(|r| r.first_broken().is_some())
        .map(|r| r.name.as_str())
        .chain(
            limit_reports
                .iter()
                .filter(|r| r.first_broken().is_some())
                .map(|r| r.name.as_str()),
        )
        .chain(
            db_reports
                .iter()
                .filter(|r| r.first_broken().is_some())
                .map(|r| r.name.as_str()),
        )
        .collect();
    let missed: Vec<_> = mutant_reports
        .iter()
        .chain(&db_mutant_reports)
        .filter(|m| !m.caught && m.backed_by.is_none())
        .collect();
    let mut md = String::new();
    if gate_models {
        md = markdown(&reports, &limit_reports, &mutant_reports);
    }
    if db_models_too {
        md.push_str(&db_markdown(&db_reports, &db_mutant_reports, gate_models));
    }
    print!("{md}");
    if !quick {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../results");
        std::fs::create_dir_all(&dir)?;
        let (stem, json) = if args.db {
            let json = serde_json::json!({
                "db_models": db_reports,
                "mutants": db_mutant_reports,
            });
            ("model_check_db", json)
        } else {
            let json = serde_json::json!({
                "models": reports,
                "limit_models": limit_reports,
                "mutants": mutant_reports,
            });
            ("model_check", json)
        };
        let json = serde_json::to_string_pretty(&json)? + "\n";
        for (name, text) in [(format!("{stem}.md"), &md), (format!("{stem}.json"), &json)] {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    if !failed_models.is_empty() || !missed.is_empty() {
        for r in failed_models {
            eprintln!("counterexample on the real core in model {r}");
        }
        for m in missed {
            eprintln!("mutant {} was not caught", m.name);
        }
        std::process::exit(1);
    }
    Ok(())
}

/// One model's exploration, in a line on stderr.
fn explored(name: &str, states: u64, depth: u32, seconds: f64, broken: Option<&str>) {
    eprintln!(
        "model {name}: {states} states, depth {depth}, {seconds:.1} s: {}",
        broken.map_or("every property holds".into(), |p| format!("{p} BROKEN"))
    );
}

/// `f` over `items` on a thread per core, the results in the items' order. Models are explored
/// independently (and a mutant is switched in per thread), so the run takes about a core's share
/// of the time it took on one.
fn on_every_core<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else { break };
            let r = f(item);
            *out[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
        }
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(items.len());
    std::thread::scope(|s| {
        // This thread is one of them.
        for _ in 1..threads {
            // Deep explorations recurse: as much stack as the main thread has.
            let started = std::thread::Builder::new()
                .stack_size(8 << 20)
                .spawn_scoped(s, work);
            if let Err(e) = started {
                eprintln!("could not start a worker thread ({e}): fewer cores are used");
            }
        }
        work();
    });
    out.into_iter()
        .filter_map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
        .collect()
}

/// `--set field=value` (repeatable) changes one bound of every model run, to explore by hand.
fn tweak(mut c: Config, pairs: &[String]) -> anyhow::Result<Config> {
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--set {pair}: expected field=value"))?;
        let n: i64 = v
            .parse()
            .with_context(|| format!("--set {pair}: not a number"))?;
        let flag = n != 0;
        let small = u8::try_from(n).with_context(|| format!("--set {pair}: out of range"))?;
        match k {
            "attempts" => c.attempts = small,
            "crashes" => c.crashes = small,
            "jumps" => c.jumps = small,
            "horizon" => c.horizon = n,
            "revoke" => c.revoke = flag,
            "move_premise" => c.move_premise = flag,
            "server_errors" => c.server_errors = flag,
            "lossy" => c.lossy = flag,
            "conflicts" => c.conflicts = small,
            "confirmations" => c.confirmations = flag,
            "settles" => c.settles = flag,
            "store_outage" => c.store_outage = flag,
            "fences" => c.fences = small,
            "lease_expires" => c.lease_expires = flag.then_some(n),
            other => anyhow::bail!("--set {other}: no such bound"),
        }
    }
    Ok(c)
}

/// Run the configurations with `bug` switched in until one breaks a property: the shared-lease
/// models first for a bug in how uses are kept, last for any other.
fn hunt(bug: Bug, configs: &[Config], limit_configs: &[LimitsConfig]) -> MutantReport {
    let found = if bug.about_limits() {
        hunt_limits(bug, limit_configs).or_else(|| hunt_single(bug, configs))
    } else {
        hunt_single(bug, configs).or_else(|| hunt_limits(bug, limit_configs))
    };
    if let Some(r) = found {
        return r;
    }
    mutants::activate(None);
    eprintln!("mutant {}: NOT caught", bug.name());
    MutantReport {
        name: bug.name().into(),
        caught: false,
        property: None,
        model: None,
        trace: Vec::new(),
        backed_by: None,
    }
}

/// The shared-lease models with `bug` switched in, until one breaks a property.
fn hunt_limits(bug: Bug, configs: &[LimitsConfig]) -> Option<MutantReport> {
    for cfg in configs {
        let mut cfg = cfg.clone();
        match bug {
            Bug::Core(m) => mutants::activate(Some(m)),
            Bug::UseWrittenApart => {
                mutants::activate(None);
                cfg.use_written_apart = true;
            }
            Bug::PlaceNotStretched => {
                mutants::activate(None);
                cfg.place_not_stretched = true;
            }
            Bug::RawPayloads => {
                mutants::activate(None);
                cfg.raw_payloads = true;
            }
            Bug::LeaseReadBeforePremises => return None,
        }
        let r = explore_limits(&cfg, true);
        if let Some(p) = r.first_broken() {
            return Some(caught(bug, p, &cfg.name, &r.traces));
        }
    }
    mutants::activate(None);
    None
}

/// `bug`, caught by `property` in `model`: reported, and switched off again.
fn caught(
    bug: Bug,
    property: &str,
    model: &str,
    traces: &std::collections::BTreeMap<String, Vec<String>>,
) -> MutantReport {
    eprintln!(
        "mutant {}: caught by {property} in model {model}",
        bug.name()
    );
    mutants::activate(None);
    MutantReport {
        name: bug.name().into(),
        caught: true,
        property: Some(property.into()),
        model: Some(model.into()),
        trace: traces.get(property).cloned().unwrap_or_default(),
        backed_by: None,
    }
}

/// The single-key models with `bug` switched in, until one breaks a property.
fn hunt_single(bug: Bug, configs: &[Config]) -> Option<MutantReport> {
    for cfg in configs {
        let mut cfg = cfg.clone();
        match bug {
            Bug::Core(m) => mutants::activate(Some(m)),
            Bug::LeaseReadBeforePremises => {
                mutants::activate(None);
                cfg.stale_lease_read = true;
            }
            Bug::UseWrittenApart | Bug::PlaceNotStretched | Bug::RawPayloads => return None,
        }
        let r = explore(&cfg, true, &mut |_, _| {});
        if let Some(p) = r.first_broken() {
            return Some(caught(bug, p, &cfg.name, &r.traces));
        }
    }
    mutants::activate(None);
    None
}

/// The database models with `m` switched in, until one breaks a property.
fn hunt_db(m: &DbMutant, configs: &[DbConfig]) -> MutantReport {
    for cfg in configs {
        let cfg = DbConfig {
            off: m.off.to_vec(),
            ..cfg.clone()
        };
        let r = explore_db(&cfg, true);
        if let Some(p) = r.first_broken() {
            eprintln!("mutant {}: caught by {p} in model {}", m.name, cfg.name);
            return MutantReport {
                name: m.name.into(),
                caught: true,
                property: Some(p.into()),
                model: Some(cfg.name),
                trace: r.traces.get(p).cloned().unwrap_or_default(),
                backed_by: None,
            };
        }
    }
    eprintln!(
        "mutant {}: not caught{}",
        m.name,
        m.backed_by
            .map_or(String::new(), |b| format!(" (backed: {b})"))
    );
    MutantReport {
        name: m.name.into(),
        caught: false,
        property: None,
        model: None,
        trace: Vec::new(),
        backed_by: m.backed_by.map(str::to_owned),
    }
}

/// A table's header row and its separator: `columns`, then one column per property.
fn table_head(md: &mut String, columns: &[&str], properties: &[&str]) {
    md.push('|');
    for c in columns.iter().chain(properties) {
        let _ = write!(md, " {c} |");
    }
    md.push_str("\n|");
    for _ in columns.iter().chain(properties) {
        md.push_str("---|");
    }
    md.push('\n');
}

/// The rest of a row: each property's verdict, then the row's end.
fn verdicts(
    md: &mut String,
    properties: &[&str],
    found: &std::collections::BTreeMap<String, String>,
) {
    for p in properties {
        let _ = write!(md, " {} |", found.get(*p).map_or("?", String::as_str));
    }
    md.push('\n');
}

fn markdown(
    models: &[ModelReport],
    limit_models: &[LimitsReport],
    mutant_reports: &[MutantReport],
) -> String {
    let mut md = String::from(
        "# Model check\n\nRegenerate with `cargo run --release -p interlock-model --bin model-check`. \
         Every interleaving of the actors' steps, crashes, revocations and expiries, premise \
         moves, lease-store outages, conflicting submissions, confirmations by the service, settlements by a person, \
         fenced callers, service faults and clock steps, up to each model's bounds, explored on \
         the real decision core (see `docs/model-check.md`).\n\n",
    );
    table_head(
        &mut md,
        &["model", "actors", "tier", "states", "explored", "max depth"],
        &PROPERTIES,
    );
    for r in models {
        let explored = if r.complete {
            "all"
        } else {
            "bounded by MAX_STATES"
        };
        let _ = write!(
            md,
            "| {} | {} | {} | {} | {explored} | {} |",
            r.name, r.actors, r.tier, r.states, r.max_depth
        );
        verdicts(&mut md, &PROPERTIES, &r.properties);
    }
    if models.iter().any(|r| !r.complete) {
        md.push_str(
            "\nA model marked \"bounded by MAX_STATES\" was explored up to the cap and no further: \
             every state reached holds every property, but not every state was reached. The \
             three-worker tier-1 model is one. Its workers are interchangeable, and the explorer \
             folds states that differ only by which worker did what into one (the holders named \
             in the journal's records, the liveness locks and the requests are renamed to a \
             canonical order before each fingerprint); even so, three workers that can each take \
             over, resend and be superseded inside a tier-1 window reach more states than the \
             cap. The two-worker tier-1 models, each explored in full, cover the races between \
             any two of the three.\n",
        );
    }
    if !limit_models.is_empty() {
        md.push_str(
            "\n## One lease across keys\n\nSeveral keys, one worker each, dispatching under one \
             lease that allows a number of uses or a total: every interleaving of their \
             dispatch transactions, sends, answers, crashes, takeovers and recoveries, with the \
             service applying, losing or refusing each request (see `docs/model-check.md`).\n\n",
        );
        table_head(
            &mut md,
            &[
                "model",
                "keys",
                "tier",
                "limit",
                "states",
                "explored",
                "max depth",
            ],
            &LIMIT_PROPERTIES,
        );
        for r in limit_models {
            let _ = write!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.name,
                r.keys,
                r.tier,
                r.limit,
                r.states,
                if r.complete {
                    "all"
                } else {
                    "bounded by MAX_STATES"
                },
                r.max_depth
            );
            verdicts(&mut md, &LIMIT_PROPERTIES, &r.properties);
        }
    }
    md.push_str("\n## Mutants\n\nEach known bug switched back in, one at a time; the checker must find a counterexample. The database stage's mutants are in `results/model_check_db.md`.\n\n| mutant | caught | property | model |\n|---|---|---|---|\n");
    mutant_rows(&mut md, mutant_reports);
    let traces = models
        .iter()
        .map(|r| (&r.name, &r.traces))
        .chain(limit_models.iter().map(|r| (&r.name, &r.traces)));
    for (name, traces) in traces {
        for (p, trace) in traces {
            let _ = writeln!(md, "\n### {p} in model {name}: counterexample\n");
            for line in trace {
                let _ = writeln!(md, "1. {line}");
            }
        }
    }
    md
}

/// The mutants' table rows, then each caught one's counterexample.
fn mutant_rows(md: &mut String, mutants: &[MutantReport]) {
    for m in mutants {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            m.name,
            match (m.caught, &m.backed_by) {
                (true, _) => "yes".to_owned(),
                (false, Some(b)) => format!("no, as expected: {b}"),
                (false, None) => "NO".to_owned(),
            },
            m.property.as_deref().unwrap_or("—"),
            m.model.as_deref().unwrap_or("—")
        );
    }
    for m in mutants.iter().filter(|m| m.caught) {
        let _ = writeln!(md, "\n### {}: counterexample\n", m.name);
        for line in &m.trace {
            let _ = writeln!(md, "1. {line}");
        }
    }
}

/// The database models' report: its own page in a full `--db` run, a section after the rest
/// (`section`) in a `--quick` run.
fn db_markdown(db_models: &[DbReport], mutants: &[MutantReport], section: bool) -> String {
    let mut md = if section {
        String::from("\n## Database effects\n\n")
    } else {
        String::from(
            "# Model check: database effects\n\nRegenerate with `cargo run --release -p \
             interlock-model --bin model-check -- --db`. ",
        )
    };
    md.push_str(
        "Workers sending one plan to a database: every \
         interleaving of their gate steps and the stage's (the write lock, the marker check, \
         the measurement, the last look, the marker, `COMMIT`), with crashes whose open \
         transaction the server commits or rolls back later, lost `COMMIT` answers, a \
         revocation, a moving premise, and a clock that never waits for a stage (see \
         `docs/model-check.md`). The last column counts the states where every worker had \
         stopped, by how the journal closed the effect.\n\n",
    );
    let mut last_columns = DB_PROPERTIES.to_vec();
    last_columns.push("endings");
    table_head(
        &mut md,
        &["model", "workers", "states", "explored", "max depth"],
        &last_columns,
    );
    for r in db_models {
        let _ = write!(
            md,
            "| {} | {} | {} | {} | {} |",
            r.name,
            r.workers,
            r.states,
            if r.complete {
                "all"
            } else {
                "bounded by MAX_STATES"
            },
            r.max_depth
        );
        for p in DB_PROPERTIES {
            let _ = write!(md, " {} |", r.properties.get(p).map_or("?", String::as_str));
        }
        let endings: Vec<String> = r.endings.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(md, " {} |", endings.join(", "));
    }

    let _ = write!(md, "\n{} Mutants\n\n", if section { "###" } else { "##" });
    md.push_str("Each of the stage's rules switched off, one at a time; then the deadline's two checks together; then those with the marker's two guards. A rule another layer backs survives alone, as expected, and the table says which layer (see `docs/model-check.md`).\n\n| mutant | caught | property | model |\n|---|---|---|---|\n");
    mutant_rows(&mut md, mutants);
    for r in db_models {
        for (p, trace) in &r.traces {
            let _ = writeln!(md, "\n#### {p} in model {}: counterexample\n", r.name);
            for line in trace {
                let _ = writeln!(md, "1. {line}");
            }
        }
    }
    md
}
