//! Benchmark: effects per second through the gate (a no-op tier-1 target, a journal on disk with
//! full durability) against the ceilings the same disk and CPUs set, measured in the same run:
//! serially, and with 1, 4, 16 and 64 concurrent senders as threads of one process and as
//! separate processes, on SQLite and on PostgreSQL; then with budgets and with trace export.
//! Every throughput figure is the median of alternating rounds, with min and max. Writes
//! `results/bench_journal.json` and regenerates `docs/benchmarks.md`.
//!
//! `--quick` runs briefly and prints without writing (CI keeps it from rotting).

#![allow(clippy::print_stdout)] // a benchmark's report is its output

mod compare;
mod postgres;
mod senders;
mod sqlite;
mod strace;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use interlock_testkit::bench_report::round;
use serde_json::{Value, json};

/// Effects per second through the gate against the disk's fsync rate, serially and with
/// concurrent senders.
#[derive(clap::Parser)]
struct Args {
    /// A short run, printed and not written (CI keeps the benchmark from rotting).
    #[arg(long)]
    quick: bool,
    /// Measure the SQLite rounds with these numbers of concurrent senders only, print them as
    /// JSON, and write nothing (for profiling); `--senders 0` measures the serial path alone.
    #[arg(long)]
    senders: Vec<usize>,
    /// Send this many effects one after another on a fresh journal and nothing else (no probes),
    /// print their CPU time and commits per effect, and write nothing: the run to hand to
    /// `perf record`, `perf stat` or `strace -c`.
    #[arg(long, value_name = "EFFECTS", conflicts_with_all = ["senders", "render", "quick"])]
    serial_only: Option<usize>,
    /// `--serial-only` on a PostgreSQL journal (a throwaway server, or
    /// `INTERLOCK_DATABASE_URL`'s): the run to profile the round trips an effect costs.
    #[arg(long, value_name = "EFFECTS", conflicts_with_all = ["senders", "render", "quick", "serial_only"])]
    postgres_only: Option<u64>,
    /// This many concurrent senders (threads) for 3 s on a PostgreSQL journal, printed as JSON
    /// with the CPU time of the whole machine (the server's processes are on it too), and
    /// nothing written: the run to profile the server's share.
    #[arg(long, value_name = "SENDERS", conflicts_with_all = ["senders", "render", "quick", "serial_only", "postgres_only"])]
    postgres_senders: Option<u32>,
    /// Measure only the same effects with and without three matching budgets, print, and write
    /// nothing (for profiling).
    #[arg(long, conflicts_with_all = ["senders", "render"])]
    budgets_only: bool,
    /// Measure only the same effects with trace export on and off, print, and write nothing.
    #[arg(long, conflicts_with_all = ["senders", "render", "budgets_only"])]
    tracing_only: bool,
    /// Run as one round of the tracing comparison, export on or off, in this directory
    /// (internal).
    #[arg(long, hide = true, value_parser = ["on", "off"])]
    tracing_round: Option<String>,
    /// The round's directory (internal).
    #[arg(long, hide = true)]
    round_dir: Option<PathBuf>,
    /// The round's serial effects (internal).
    #[arg(long, hide = true, default_value_t = 100)]
    effects: usize,
    /// Measure nothing: regenerate docs/benchmarks.md from the committed results/bench_*.json.
    #[arg(long, conflicts_with_all = ["quick", "senders"])]
    render: bool,
    /// Run as one sender process of a concurrent measurement, on this journal (internal).
    #[arg(long, hide = true)]
    sender: Option<PathBuf>,
    /// The sender's name (internal).
    #[arg(long, hide = true, default_value = "p")]
    name: String,
    /// How long a sender sends, in milliseconds (internal).
    #[arg(long, hide = true, default_value_t = 1000)]
    millis: u64,
}

const SENDERS: [usize; 4] = [1, 4, 16, 64];

/// Rounds of every throughput measurement in a full run (odd, for a plain median).
const ROUNDS: usize = 5;

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    if let Some(journal) = &args.sender {
        return senders::sender_process(journal, &args.name, Duration::from_millis(args.millis));
    }
    if let (Some(on), Some(dir)) = (&args.tracing_round, &args.round_dir) {
        let each = Duration::from_millis(args.millis);
        return compare::tracing_round_process(dir, on == "on", args.effects, each);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if args.render {
        interlock_testkit::bench_report::read_result(&root, "bench_journal.json")
            .context("results/bench_journal.json: run the benchmark first")?;
        let md = interlock_testkit::bench_report::render_all(&root);
        std::fs::write(root.join("docs/benchmarks.md"), md)?;
        eprintln!("wrote docs/benchmarks.md from results/");
        return Ok(());
    }
    let quick = args.quick;
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR"))?;
    if let Some(effects) = args.serial_only {
        return sqlite::serial_only(args.round_dir.as_deref().unwrap_or(dir.path()), effects);
    }
    if let Some(effects) = args.postgres_only {
        return postgres::serial_only(effects);
    }
    if let Some(senders) = args.postgres_senders {
        return postgres::senders_only(senders, Duration::from_secs(3));
    }
    let serial_effects = if quick { 100 } else { 2000 };
    let each = Duration::from_millis(if quick { 200 } else { 1500 });
    // The side-by-side comparisons: longer, as each of their rounds is a fraction of this.
    let (compared_effects, compared_each) = if quick {
        (serial_effects, each)
    } else {
        (3000, Duration::from_secs(3))
    };
    if args.budgets_only {
        return print_json(&compare::budgets(
            dir.path(),
            compared_effects,
            compared_each,
        )?);
    }
    if args.tracing_only {
        return print_json(&compare::tracing_cost(
            dir.path(),
            compared_effects,
            compared_each,
        )?);
    }

    let partial = !args.senders.is_empty();
    let plan = sqlite::Plan {
        rounds: if quick { 2 } else { ROUNDS },
        serial_effects,
        probe: Duration::from_millis(if quick { 200 } else { 1000 }),
        each,
        senders: if partial {
            args.senders.iter().copied().filter(|&n| n > 0).collect()
        } else {
            SENDERS.to_vec()
        },
    };
    let sqlite = sqlite::measure(dir.path(), &plan)?;
    if partial {
        // What was asked for, and nothing else: no budgets, tracing or PostgreSQL runs.
        return print_json(&sqlite);
    }
    eprintln!("counting the syncs a serial effect costs (strace)…");
    let syncs = sqlite::syncs_per_effect(dir.path(), if quick { 50 } else { 1000 });
    let (append_per_s, _) = interlock_tests::bench::fsync_rate(dir.path(), plan.probe, false)?;
    eprintln!("the same effects with and without three matching budgets…");
    let budgets = compare::budgets(dir.path(), compared_effects, compared_each)?;
    eprintln!("the same effects with trace export on and off…");
    let tracing = compare::tracing_cost(dir.path(), compared_effects, compared_each)?;
    let postgres = postgres::measure(plan.rounds, if quick { 50 } else { 500 }, plan.probe, each)?;

    let report = json!({
        "generated_by": "cargo run --release -p interlock-tests --bin gate-bench",
        "goals": goals(&sqlite, &postgres),
        "sqlite": sqlite,
        "syncs": syncs,
        "fsync_append_per_s": round(append_per_s, 0),
        "budgets": budgets,
        "tracing": tracing,
        "postgres": postgres,
    });
    let e2e = interlock_testkit::bench_report::read_result(&root, "bench_e2e.json");
    let grpc = interlock_testkit::bench_report::read_result(&root, "bench_grpc.json");
    let db = interlock_testkit::bench_report::read_result(&root, "bench_db.json");
    let md =
        interlock_testkit::bench_report::render(&report, e2e.as_ref(), grpc.as_ref(), db.as_ref());
    print!("{md}");
    if !quick {
        std::fs::write(
            root.join("results/bench_journal.json"),
            serde_json::to_string_pretty(&report)? + "\n",
        )?;
        std::fs::write(root.join("docs/benchmarks.md"), md)?;
        eprintln!("wrote results/bench_journal.json and docs/benchmarks.md");
    }
    Ok(())
}

/// The journal's performance goals, each judged on the median of the run's rounds. The two
/// absolute ones are multiples of what the gate did on this machine when they were set (16
/// processes: 1,710 effects/s; PostgreSQL with 16 senders: 958 effects/s).
fn goals(sqlite: &Value, pg: &Value) -> Value {
    let sixteen_of = |run: &Value| {
        run["concurrent"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["senders"] == 16))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let (sixteen, pg16) = (sixteen_of(sqlite), sixteen_of(pg));
    let cpus = sqlite["cpus"].as_f64().unwrap_or(1.0);
    let row = |measure: &str, v: &Value, at_most: bool, goal: f64| {
        let m = v["median"].as_f64();
        json!({
            "measure": measure,
            "value": v,
            "goal": format!("{} {goal}", if at_most { "≤" } else { "≥" }),
            "met": m.is_some_and(|m| if at_most { m <= goal } else { m >= goal }),
        })
    };
    json!([
        row(
            "serial CPU per effect, ms (no-op target, SQLite)",
            &sqlite["serial"]["cpu_ms_per_effect"]["total"],
            true,
            0.15
        ),
        row(
            "serial effects/s ÷ the two-smallest-commits ceiling",
            &sqlite["serial"]["over_two_commit_ceiling"],
            false,
            0.8
        ),
        row(
            "16 senders in one process: cores busy",
            &sixteen["threads"]["cores_busy"],
            false,
            round(0.85 * cpus, 2)
        ),
        row(
            "16 senders: effects/s ÷ (cores ÷ serial CPU per effect)",
            &sixteen["threads"]["over_cpu_bound"],
            false,
            0.8
        ),
        row(
            "16 processes on one SQLite file: effects/s (2 × 1,710)",
            &sixteen["processes"]["effects_per_s"],
            false,
            3420.0
        ),
        row(
            "PostgreSQL serial: effects per server commit",
            &pg["serial_effects_per_commit"],
            false,
            0.3
        ),
        row(
            "PostgreSQL, 16 senders in one process: effects/s (3 × 958)",
            &pg16["effects_per_s"],
            false,
            2874.0
        ),
    ])
}

/// The median, min and max of `v`, rounded to `digits`.
pub(crate) fn spread(mut v: Vec<f64>, digits: i32) -> Value {
    v.sort_by(f64::total_cmp);
    let (Some(min), Some(max)) = (v.first(), v.last()) else {
        return Value::Null;
    };
    json!({
        "median": round(v[v.len() / 2], digits),
        "min": round(*min, digits),
        "max": round(*max, digits),
    })
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(crate) fn print_json(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
