//! Run the kill matrix's database-effect workflow and write `results/e2e_orders_<substrate>.md`
//! and `.json`: cancel an order and credit its customer on a real Temporal dev server, with real
//! worker processes killed with SIGKILL, judged by the shop database's own rows (`--help` for
//! options). Exits non-zero when a gated run does not hold; with `--check`, also when a run's
//! outcome is one the committed report does not show, or the committed report is not what its
//! own runs render to.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use e2e_worker::orders::OrderSystem;
use e2e_worker::orders::shop::ShopAt;
use interlock::{Clock, SystemClock};
use interlock_e2e::orders::{CASES, CommitHold, OrderCell, Payments, QUICK, Stage, check, render};
use interlock_e2e::procs::DevServer;
use interlock_e2e::stack::sibling;
use interlock_postgres::PgOptions;

/// A run's report as written: the command and its cells.
#[derive(serde::Serialize, serde::Deserialize)]
struct Committed {
    command: String,
    cells: Vec<OrderCell>,
}

/// The run a report was written from.
fn read_run(path: &std::path::Path) -> anyhow::Result<Committed> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (write it with `cargo run -p interlock-e2e --bin order-kill-matrix`)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a run's report", path.display()))
}

/// Where the shop's tables live.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Substrate {
    Sqlite,
    Postgres,
}

/// The order workflow's kill matrix on a real Temporal dev server.
#[derive(Parser)]
struct Args {
    /// The shop's database: a SQLite file, or PostgreSQL (a throwaway server of its own: the
    /// mid-COMMIT case changes the server's settings).
    #[arg(long, value_enum, default_value_t = Substrate::Sqlite)]
    substrate: Substrate,
    /// Only these cases, comma-separated.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Only these systems, comma-separated (plain, plain_keyed, guarded, gated).
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Runs of every cell (default 3; 1 with --quick or --check).
    #[arg(long)]
    repeat: Option<u32>,
    /// CI's check: write nothing; fail unless every run's outcome (held, times applied, the
    /// workflow's answer) is one the committed `results/e2e_orders_<substrate>.json` shows for
    /// its cell, and the committed .md is what that .json renders to.
    #[arg(long, conflicts_with = "out")]
    check: bool,
    /// Run nothing: write the committed `results/e2e_orders_<substrate>.md` again from its .json
    /// (after the report's wording changed).
    #[arg(long, conflicts_with_all = ["check", "quick", "cases", "systems", "repeat"])]
    render: bool,
    /// The CI subset: a kill inside the transaction, one inside COMMIT (PostgreSQL), one after
    /// it, and the late revocation, every system.
    #[arg(long)]
    quick: bool,
    /// Where to write the report (default results/ for a whole run, else target/e2e-partial/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Keep the cells' logs, the journal and the dev server's database in this directory
    /// instead of a temporary one.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// The Temporal dev server's port (it also takes the next three).
    #[arg(long, default_value_t = 7264)]
    port: u16,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let known: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    for c in &args.cases {
        if !known.contains(&c.as_str()) {
            bail!("no case {c:?}: the cases are {}", known.join(", "));
        }
    }
    let mut systems = Vec::new();
    for s in &args.systems {
        match OrderSystem::ALL.iter().find(|o| o.name() == s) {
            Some(o) => systems.push(*o),
            None => bail!("no system {s:?}: the systems are plain, plain_keyed, guarded, gated"),
        }
    }
    if systems.is_empty() {
        systems = OrderSystem::ALL.to_vec();
    }
    let pg = matches!(args.substrate, Substrate::Postgres);
    let substrate = if pg { "postgres" } else { "sqlite" };
    let cases: Vec<_> = CASES
        .iter()
        .filter(|c| args.cases.is_empty() || args.cases.iter().any(|n| n == c.name))
        .filter(|c| !args.quick || QUICK.contains(&c.name))
        .copied()
        .collect();
    let name = format!("e2e_orders_{substrate}");
    let committed = PathBuf::from("results").join(format!("{name}.json"));
    if args.render {
        let run = read_run(&committed)?;
        let md = committed.with_extension("md");
        std::fs::write(&md, render(&run.cells, substrate, &run.command))?;
        eprintln!("wrote {}", md.display());
        return Ok(());
    }
    let scratch = tempfile::tempdir()?;
    let work = args
        .keep
        .clone()
        .unwrap_or_else(|| scratch.path().to_owned());
    std::fs::create_dir_all(&work)?;
    let worker_bin = sibling("order-worker")?;
    let cluster = if pg {
        eprintln!("starting PostgreSQL for the shop …");
        Some(interlock_testkit::pg::Cluster::throwaway()?)
    } else {
        None
    };
    let shop = match &cluster {
        Some(c) => {
            let tables = c.fresh_schema("shop");
            let role = format!("{tables}_service");
            ShopAt::create_pg(
                c.url(),
                &tables,
                &format!("interlock_{tables}"),
                (&role, &c.url_as(&role, "shop")),
            )?
        }
        None => ShopAt::create_sqlite(&work)?,
    };
    let journal_path = work.join("journal.db");
    let journal = interlock_postgres::open_named(
        &journal_path.display().to_string(),
        Arc::new(SystemClock) as Arc<dyn Clock>,
        &PgOptions::in_schema("interlock"),
    )?
    .store;
    eprintln!(
        "starting the Temporal dev server on 127.0.0.1:{} …",
        args.port
    );
    let server = DevServer::start(&work, args.port)?;
    let rt = tokio::runtime::Runtime::new()?;
    let client = rt.block_on(e2e_worker::connect::client(
        &format!("http://{}", server.address),
        "order-kill-matrix".into(),
    ))?;
    let payments = Payments::start(&journal, &journal_path)?;
    let mut stage = Stage {
        server,
        conn: shop.connect()?,
        commits: cluster
            .as_ref()
            .map(|c| CommitHold::connect(c.url()))
            .transpose()?,
        admin: cluster.as_ref().map(|c| c.url().to_owned()),
        payments,
        shop,
        journal,
        journal_path,
        worker_bin,
        work,
        client,
        rt,
    };
    let planned: Vec<_> = cases
        .iter()
        .flat_map(|c| systems.iter().map(move |s| (c, *s)))
        .filter(|(c, s)| c.applies(*s, pg))
        .collect();
    let repeat = args
        .repeat
        .unwrap_or(if args.quick || args.check { 1 } else { 3 });
    let total = planned.len() * usize::try_from(repeat)?;
    let mut cells: Vec<OrderCell> = Vec::new();
    for rep in 0..repeat {
        for (case, system) in &planned {
            let n = i64::try_from(cells.len())? + 1;
            let cell = stage.run(case, *system, n).with_context(|| {
                format!("cell {} / {} (run {})", case.name, system.name(), rep + 1)
            })?;
            eprintln!(
                "[{n}/{total}] {:<28} {:<12} {} applied {}× (wanted {}) {} in {:.1} s",
                cell.case,
                cell.system,
                if cell.held { "held " } else { "FAILS" },
                cell.applied,
                cell.wanted,
                cell.outcome,
                cell.wall_s
            );
            cells.push(cell);
        }
    }
    let mut command =
        format!("cargo run -p interlock-e2e --bin order-kill-matrix -- --substrate {substrate}");
    let whole =
        !args.quick && args.cases.is_empty() && args.systems.is_empty() && args.repeat.is_none();
    if args.quick {
        command.push_str(" --quick");
    }
    for (flag, list) in [("--cases", &args.cases), ("--systems", &args.systems)] {
        if !list.is_empty() {
            command.push_str(&format!(" {flag} {}", list.join(",")));
        }
    }
    if let Some(r) = args.repeat {
        command.push_str(&format!(" --repeat {r}"));
    }
    if args.check {
        let run = read_run(&committed)?;
        let md = committed.with_extension("md");
        if std::fs::read_to_string(&md).ok() != Some(render(&run.cells, substrate, &run.command)) {
            bail!(
                "{} is not what {} renders to: run `{}` again",
                md.display(),
                committed.display(),
                run.command
            );
        }
        let drift = check(&cells, &run.cells);
        if !drift.is_empty() {
            bail!(
                "this run differs from {}:\n  {}",
                committed.display(),
                drift.join("\n  ")
            );
        }
        eprintln!("every run matches {}", committed.display());
    } else {
        let out = args.out.unwrap_or_else(|| {
            PathBuf::from(if whole {
                "results"
            } else {
                "target/e2e-partial"
            })
        });
        std::fs::create_dir_all(&out)?;
        std::fs::write(
            out.join(format!("{name}.md")),
            render(&cells, substrate, &command),
        )?;
        std::fs::write(
            out.join(format!("{name}.json")),
            serde_json::to_string_pretty(&Committed {
                command,
                cells: cells.clone(),
            })?,
        )?;
        eprintln!("wrote {}", out.join(format!("{name}.md")).display());
    }
    let failed: Vec<String> = cells
        .iter()
        .filter(|c| c.system == "gated" && !c.held)
        .map(|c| c.case.clone())
        .collect();
    if !failed.is_empty() {
        bail!("gated runs did not hold: {}", failed.join(", "));
    }
    Ok(())
}
