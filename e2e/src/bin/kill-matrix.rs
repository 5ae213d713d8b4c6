//! Run the kill matrix and write `results/e2e_matrix.md` and `.json`: the claims the README makes
//! about crashes on a real Temporal dev server are this binary's output (`--help` for options).
//! `--no-shop` runs the workers the way a Stripe user would, with no shop order service; the
//! cases that move an order's eligibility cannot hold then.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use e2e_worker::StepTimings;
use interlock_e2e::cases::{ALL, QUICK, through_server};
use interlock_e2e::cell::{SYSTEMS, run_cell};
use interlock_e2e::http_systems::is_http;
use interlock_e2e::{results, stack};

/// The kill matrix on a real Temporal dev server.
#[derive(Parser)]
struct Args {
    /// Repetitions of every cell (default 3; 1 with --quick).
    #[arg(long)]
    repeat: Option<u32>,
    /// Only these cases, comma-separated.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Only these systems, comma-separated.
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// The CI subset: gated tiers 1 and 2, the Python worker's tier 1 through the Stripe target
    /// and tier 2 through the HTTP target, and the keyed baseline, on twelve cases, once.
    #[arg(long)]
    quick: bool,
    /// The HTTP target's matrix: the Python worker through the gate server with the refund as an
    /// HTTP target table at tiers 1 to 3, beside the same worker through the Stripe target at
    /// tiers 1 and 2; written to e2e_matrix_http.md and .json.
    #[arg(long, conflicts_with_all = ["quick", "systems"])]
    http: bool,
    /// Where to write e2e_matrix.md and .json (default results/, or target/e2e-quick/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The Temporal dev server's port.
    #[arg(long, default_value_t = 7244)]
    port: u16,
    /// No shop order service: workers decide on Stripe's facts alone.
    #[arg(long)]
    no_shop: bool,
    /// Where the journal lives: an SQLite file the workers share, or a PostgreSQL server that is
    /// all they share (a throwaway one, or the server INTERLOCK_DATABASE_URL names). With
    /// postgres the systems default to gated tiers 1 and 2 (the baselines use no journal) and the
    /// results go to e2e_matrix_postgres.md and .json.
    #[arg(long, value_enum, default_value_t = JournalKind::Sqlite)]
    journal: JournalKind,
    /// The refund step's heartbeat timeout, ms: how long a dead worker's attempt goes unnoticed.
    /// Other than 2000, the results' names end in `_hb<MS>` (and `_retry<MS>` for another
    /// --retry-ms). At 1500 or less the stall case's 1.5 s freeze outlasts it: the frozen
    /// attempt is then timed out and retried, and the cell is classed by that.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(500..=10_000))]
    heartbeat_ms: u64,
    /// The refund step's retry interval, ms.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(100..=10_000))]
    retry_ms: u64,
    /// Run nothing: render a run's report (.md, .svg, and the .json's summaries) again from its
    /// .json's cells, with this version's classes and tables.
    #[arg(long, value_name = "RUN.json", conflicts_with_all = ["quick", "cases", "systems", "repeat"])]
    render: Option<PathBuf>,
    /// With --render: write nothing, and fail unless the committed report and plot are what the
    /// run renders to (CI's drift check).
    #[arg(long, requires = "render")]
    check: bool,
}

/// Where the journal lives.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum JournalKind {
    Sqlite,
    Postgres,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(run) = &args.render {
        results::render_again(run, args.check)?;
        eprintln!(
            "{} {}",
            if args.check {
                "up to date with its run:"
            } else {
                "rendered again from"
            },
            run.display()
        );
        return Ok(());
    }
    let quick = args.quick;
    let repeat = args.repeat.unwrap_or(if quick { 1 } else { 3 });
    let cases: Vec<_> = if !args.cases.is_empty() {
        args.cases
            .iter()
            .map(|n| {
                ALL.iter()
                    .find(|c| c.name == n)
                    .copied()
                    .with_context(|| format!("unknown case {n}"))
            })
            .collect::<Result<_, _>>()?
    } else if quick {
        ALL.iter()
            .filter(|c| QUICK.contains(&c.name))
            .copied()
            .collect()
    } else {
        ALL.to_vec()
    };
    let systems: Vec<_> = if !args.systems.is_empty() {
        args.systems
            .iter()
            .map(|n| {
                SYSTEMS
                    .iter()
                    .find(|s| s.0 == n)
                    .copied()
                    .with_context(|| format!("unknown system {n}"))
            })
            .collect::<Result<_, _>>()?
    } else if args.journal == JournalKind::Postgres {
        SYSTEMS
            .iter()
            .filter(|s| ["gated_t1", "gated_t2"].contains(&s.0))
            .copied()
            .collect()
    } else if quick {
        SYSTEMS
            .iter()
            .filter(|s| {
                [
                    "keyed",
                    "gated_t1",
                    "gated_t2",
                    "gated_py_t1",
                    "gated_http_t2",
                ]
                .contains(&s.0)
            })
            .copied()
            .collect()
    } else if args.http {
        SYSTEMS
            .iter()
            .filter(|s| s.0.starts_with("gated_py") || is_http(s.0))
            .copied()
            .collect()
    } else {
        // The HTTP target's systems have a matrix of their own (--http).
        SYSTEMS.iter().filter(|s| !is_http(s.0)).copied().collect()
    };
    if args.no_shop && systems.iter().any(|s| is_http(s.0)) {
        bail!(
            "the HTTP target's systems read the refunds by others from the shop's order service: \
             run them without --no-shop"
        );
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out_dir = args.out.clone().unwrap_or_else(|| {
        if quick {
            root.join("target/e2e-quick")
        } else {
            root.join("results")
        }
    });
    let scratch = tempfile::tempdir()?;
    let work = match std::env::var_os("KILL_MATRIX_KEEP") {
        Some(dir) => PathBuf::from(dir),
        None => scratch.path().to_owned(),
    };
    std::fs::create_dir_all(&work)?;
    // Kept until the end: dropping it stops a throwaway server.
    let cluster = match args.journal {
        JournalKind::Sqlite => None,
        JournalKind::Postgres => {
            eprintln!("starting PostgreSQL for the journal …");
            Some(interlock_testkit::pg::Cluster::start()?)
        }
    };
    let database = cluster
        .as_ref()
        .map(|c| (c.url().to_owned(), c.fresh_schema("matrix")));
    let step = StepTimings {
        heartbeat_ms: args.heartbeat_ms,
        retry_ms: args.retry_ms,
    };
    let (mut env, services) = stack::start(&stack::Options {
        work: &work,
        port: args.port,
        no_shop: args.no_shop,
        webhooks: true,
        database,
    })?;
    env.step = step;
    if systems.iter().any(|(s, _)| through_server(s)) {
        stack::check_python()?;
    }
    let total = cases
        .iter()
        .map(|c| systems.iter().filter(|(s, _)| c.applies_to(s)).count())
        .sum::<usize>()
        * repeat as usize;
    let mut cells = Vec::new();
    let mut n = 0;
    for rep in 1..=repeat {
        for case in &cases {
            for (system, tier) in systems.iter().filter(|(s, _)| case.applies_to(s)) {
                n += 1;
                let bar = "#".repeat(n * 30 / total.max(1));
                eprint!(
                    "\r[{bar:<30}] {n:>3}/{total} {:<34} {:<9} rep {rep} … ",
                    case.name, system
                );
                let cell = run_cell(&env, case, system, *tier, rep)?;
                eprintln!(
                    "{} {} ${:.2} · attempts {} · crash-to-close {} ({:.1} s)",
                    if cell.held { "held" } else { "FAILED" },
                    cell.outcome,
                    cell.refunded_cents as f64 / 100.0,
                    cell.attempts.map_or("?".into(), |a| a.to_string()),
                    cell.crash_to_close_s
                        .map_or("–".into(), |c| format!("{c:.1} s")),
                    cell.wall_s
                );
                cells.push(cell);
            }
        }
    }
    let (mut flag, mut stem) = match args.journal {
        JournalKind::Sqlite => (String::new(), "e2e_matrix".to_owned()),
        JournalKind::Postgres => (
            " --journal postgres".to_owned(),
            "e2e_matrix_postgres".to_owned(),
        ),
    };
    if args.http {
        flag.push_str(" --http");
        stem.push_str("_http");
    }
    if step != StepTimings::default() {
        flag.push_str(&format!(
            " --heartbeat-ms {} --retry-ms {}",
            step.heartbeat_ms, step.retry_ms
        ));
        stem.push_str(&format!("_hb{}", step.heartbeat_ms));
        if step.retry_ms != StepTimings::default().retry_ms {
            stem.push_str(&format!("_retry{}", step.retry_ms));
        }
    }
    if !args.systems.is_empty() && !quick {
        flag.push_str(&format!(" --systems {}", args.systems.join(",")));
    }
    if !args.cases.is_empty() && !quick {
        flag.push_str(&format!(" --cases {}", args.cases.join(",")));
    }
    let command = if quick {
        format!("scripts/main-job --quick{flag}")
    } else {
        format!("scripts/main-job{flag} (kill-matrix --repeat {repeat})")
    };
    let md = results::write(&out_dir, &stem, &command, step, &cells)?;
    eprintln!(
        "\n{md}\nwrote {}",
        out_dir.join(format!("{stem}.md")).display()
    );
    // What an operator's alerts would read, against the journal's own listing (after the
    // results are written, so a disagreement loses none of them).
    let agreement = interlock_e2e::metrics::check(&env);
    if let Ok(a) = &agreement {
        eprintln!(
            "metrics agree with `interlock journal list` on {} effects: {}",
            a.listed.values().sum::<u64>(),
            a.listed
                .iter()
                .map(|(s, n)| format!("{s} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let failed_gated = cells
        .iter()
        .filter(|c| c.system.starts_with("gated") && !c.held)
        .count();
    drop(services);
    drop(env);
    drop(cluster);
    if failed_gated > 0 {
        bail!("{failed_gated} gated cell(s) did not hold");
    }
    agreement?;
    Ok(())
}
