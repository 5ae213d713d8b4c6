//! Benchmark: what the gate costs end to end. On one Temporal dev server and one payments API, the
//! same refund workflows run for `naive`, `keyed` and `gated_t1`, one system after another in one
//! run, a fixed number at a time (one at a time, then sixteen, by default), each system with one
//! worker process of its own; every workflow is timed from its start to its close. `naive` and
//! `keyed` do the same work (one refund call; keyed adds a header), so their ratio is the run's
//! noise floor, printed beside the gate's ratio. Writes `results/bench_e2e.json` and regenerates
//! `docs/benchmarks.md` (`--help` for options; `--quick` runs a few and writes nothing). Run it
//! as `scripts/e2e-bench`, which builds every process it starts in release first.
//!
//! Every workflow must have refunded its payment exactly once, by the payments API's own records,
//! or the run fails: a fast system that did not do the work measures nothing.

#![allow(clippy::print_stdout)] // `--quick` prints its report

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use interlock::Grant;
use interlock_e2e::cell::Env;
use interlock_e2e::procs::{StarterProc, WorkerProc, now_ms};
use interlock_e2e::stack;
use interlock_testkit::bench_report::round;
use serde_json::{Value, json};

/// The end-to-end overhead benchmark on a real Temporal dev server.
#[derive(Parser)]
struct Args {
    /// Measured workflows per system.
    #[arg(long, default_value_t = 200)]
    workflows: usize,
    /// Workflows running at once: each level is measured in turn, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    concurrency: Vec<usize>,
    /// Systems, comma-separated, in the order they run.
    #[arg(long, value_delimiter = ',', default_value = "naive,keyed,gated_t1")]
    systems: Vec<String>,
    /// A short run (12 workflows, 1 and then 4 at a time), printed and not written.
    #[arg(long)]
    quick: bool,
    /// The Temporal dev server's port.
    #[arg(long, default_value_t = 7264)]
    port: u16,
}

/// Workflows run first for each system and not counted: the worker's connections and caches.
const WARM_UP: usize = 8;
/// The measured workflows of each system run in this many turns, interleaved with the others'.
const ROUNDS: usize = 4;
const LOAD_WAIT: Duration = Duration::from_secs(900);

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (workflows, levels) = if args.quick {
        (12, vec![1, 4])
    } else {
        (args.workflows, args.concurrency.clone())
    };
    anyhow::ensure!(
        workflows > 0 && !levels.is_empty() && levels.iter().all(|c| *c > 0),
        "--workflows and every --concurrency must be at least 1"
    );
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    if profile == "debug" && !args.quick {
        eprintln!(
            "warning: a debug build measures the gate unoptimised; scripts/e2e-bench builds in \
             release"
        );
    }
    for s in &args.systems {
        if !["naive", "keyed", "checked", "gated_t1"].contains(&s.as_str()) {
            bail!(
                "system {s}: choose from naive, keyed, checked, gated_t1 (the service acts as tier 1)"
            );
        }
    }
    let load_bin = stack::sibling("refund-load")?;
    let scratch = tempfile::tempdir()?;
    let (env, services) = stack::start(&stack::Options {
        work: scratch.path(),
        port: args.port,
        no_shop: false,
        webhooks: false,
        database: None,
    })?;
    // Systems take turns in rounds, each round in a different order, so whatever drifts during
    // the run (the dev server's database growing, the machine's other load) falls on all alike.
    let rounds = ROUNDS.min(workflows);
    let mut runs = args
        .systems
        .iter()
        .map(|system| SystemRun::start(&env, &load_bin, system))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut measured = Vec::new();
    for &concurrency in &levels {
        for r in 0..rounds {
            for k in 0..runs.len() {
                let idx = (k + r) % runs.len();
                let n = workflows / rounds + usize::from(r < workflows % rounds);
                eprintln!(
                    "{concurrency} at a time, round {}/{rounds}: {} runs {n} workflows …",
                    r + 1,
                    runs[idx].system
                );
                runs[idx].round(&env, r, n, concurrency)?;
            }
        }
        let rows = runs
            .iter_mut()
            .map(SystemRun::take_summary)
            .collect::<Vec<_>>();
        for row in &rows {
            eprintln!(
                "{concurrency} at a time: {}: {} workflows/s, p50 {} ms, p99 {} ms",
                row["system"], row["throughput_per_s"], row["p50_ms"], row["p99_ms"]
            );
        }
        measured.push(level(concurrency, rows));
    }
    drop(services);
    let report = json!({
        "generated_by": "scripts/e2e-bench",
        "profile": profile,
        "workflows": workflows,
        "warm_up": WARM_UP,
        "rounds": rounds,
        "levels": measured,
    });
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    if args.quick {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    std::fs::write(
        root.join("results/bench_e2e.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    // The page holds every benchmark; the others' parts come from their own last runs.
    std::fs::write(
        root.join("docs/benchmarks.md"),
        interlock_testkit::bench_report::render_all(&root),
    )?;
    eprintln!("wrote results/bench_e2e.json and docs/benchmarks.md");
    Ok(())
}

/// One level's rows, with the gate's p50 ratio to keyed and the noise floor (naive ÷ keyed: the
/// same work), each over all the level's workflows and round by round (median, min–max).
fn level(concurrency: usize, rows: Vec<Value>) -> Value {
    let of = |name: &str| rows.iter().find(|r| r["system"] == name);
    let ratio = |a: &str, field: &str| {
        of(a)
            .and_then(|r| r[field].as_f64())
            .zip(of("keyed").and_then(|r| r[field].as_f64()))
            .filter(|(_, k)| *k > 0.0)
            .map(|(a, k)| round(a / k, 3))
    };
    let rounds = |name: &str| -> Vec<f64> {
        of(name)
            .and_then(|r| r["round_p50_ms"].as_array())
            .map(|v| v.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let per_round = |a: &str| {
        let ratios: Vec<f64> = rounds(a)
            .iter()
            .zip(rounds("keyed"))
            .filter(|(_, k)| *k > 0.0)
            .map(|(a, k)| a / k)
            .collect();
        spread(&ratios)
    };
    json!({
        "concurrency": concurrency,
        "systems": rows,
        "gated_t1_p50_over_keyed": ratio("gated_t1", "p50_ms"),
        "gated_t1_p99_over_keyed": ratio("gated_t1", "p99_ms"),
        "naive_p50_over_keyed": ratio("naive", "p50_ms"),
        "naive_p99_over_keyed": ratio("naive", "p99_ms"),
        "gated_t1_p50_over_keyed_by_round": per_round("gated_t1"),
        "naive_p50_over_keyed_by_round": per_round("naive"),
    })
}

/// `{median, min, max}` of `xs`, rounded; null when empty.
fn spread(xs: &[f64]) -> Value {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    match (sorted.first(), sorted.last()) {
        (Some(min), Some(max)) => json!({
            "median": round(median(&sorted), 3),
            "min": round(*min, 3),
            "max": round(*max, 3),
        }),
        _ => Value::Null,
    }
}

/// The median of sorted values (the mean of the middle two for an even count).
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Payments and leases for `n` workflows named by `prefix`.
fn prepare(env: &Env, prefix: &str, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let pi = format!("pi_{prefix}_{i}");
        env.sim.add_payment(&pi, 10_000);
        env.journal
            .grant_lease(
                &Grant::new(format!("lease-{prefix}-{i}"), "ana@support", now_ms())
                    .scope("payment_intent", pi.as_str())
                    .cap("amount", 2000),
            )
            .context("granting a benchmark lease")?;
    }
    Ok(())
}

/// What one system's rounds at one level measured.
#[derive(Default)]
struct Stats {
    latencies: Vec<f64>,
    /// Each round's p50, in round order.
    round_p50: Vec<f64>,
    busy_s: f64,
    done: usize,
    labels: BTreeMap<String, u64>,
}

/// One system's worker, its payments and what its rounds measured.
struct SystemRun {
    system: String,
    load_bin: PathBuf,
    stamp: i64,
    dir: PathBuf,
    vars: [(String, String); 2],
    _worker: WorkerProc,
    stats: Stats,
    /// Rounds run so far, over every level: each names its payments.
    rounds: usize,
}

impl SystemRun {
    /// A worker of its own, and the warm-up.
    fn start(env: &Env, load_bin: &Path, system: &str) -> anyhow::Result<Self> {
        let stamp = now_ms() % 1_000_000;
        prepare(env, &format!("warm-{system}-{stamp}"), WARM_UP)?;
        let queue = format!("bench-{system}-{stamp}");
        let dir = env.work.join(&queue);
        std::fs::create_dir_all(&dir)?;
        let worker = WorkerProc::spawn(
            &env.worker_bin,
            &[],
            &env.worker_vars(&queue),
            None,
            &dir,
            &dir.join("worker.log"),
        )?;
        let run = Self {
            system: system.to_owned(),
            load_bin: load_bin.to_owned(),
            stamp,
            dir,
            vars: [
                (
                    "TEMPORAL_ADDRESS".to_owned(),
                    format!("http://{}", env.server.address),
                ),
                ("TASK_QUEUE".to_owned(), queue),
            ],
            _worker: worker,
            stats: Stats::default(),
            rounds: 0,
        };
        eprintln!("{system}: {WARM_UP} warm-up workflows …");
        run.load(&format!("warm-{system}-{stamp}"), WARM_UP, WARM_UP)?;
        Ok(run)
    }

    fn load(&self, prefix: &str, n: usize, c: usize) -> anyhow::Result<Value> {
        let args = [
            "--system",
            &self.system,
            "--prefix",
            prefix,
            "--workflows",
            &n.to_string(),
            "--concurrency",
            &c.to_string(),
        ]
        .map(str::to_owned);
        StarterProc::spawn(&self.load_bin, &args, &self.vars)?.wait(LOAD_WAIT)
    }

    /// Round `r`: `n` workflows, `c` at a time; each payment must then hold one refund.
    fn round(&mut self, env: &Env, r: usize, n: usize, c: usize) -> anyhow::Result<()> {
        let prefix = format!("{}-{}-r{}", self.system, self.stamp, self.rounds);
        self.rounds += 1;
        prepare(env, &prefix, n)?;
        let out = self.load(&prefix, n, c)?;
        let stats = &mut self.stats;
        let mut latencies: Vec<f64> = out["latencies_ms"]
            .as_array()
            .context("refund-load gave no latencies")?
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        latencies.sort_by(f64::total_cmp);
        stats.round_p50.push(percentile(&latencies, 0.50));
        stats.latencies.extend(latencies);
        stats.busy_s += out["wall_ms"].as_f64().unwrap_or(0.0) / 1000.0;
        for (label, count) in out["labels"].as_object().into_iter().flatten() {
            *stats.labels.entry(label.clone()).or_default() += count.as_u64().unwrap_or(0);
        }
        let once = (0..n)
            .filter(|i| {
                let refunds = env.sim.refunds(&format!("pi_{prefix}_{i}"));
                refunds.len() == 1 && refunds[0].amount == 2000
            })
            .count();
        if once != n {
            bail!(
                "{}: only {once} of {n} payments were refunded exactly once in round {}, {c} \
                 at a time (workflows ended {}); see {}",
                self.system,
                r + 1,
                out["labels"],
                self.dir.display()
            );
        }
        self.stats.done += n;
        Ok(())
    }

    /// What this level measured, its counters reset for the next level.
    fn take_summary(&mut self) -> Value {
        let s = std::mem::take(&mut self.stats);
        let mut sorted = s.latencies;
        sorted.sort_by(f64::total_cmp);
        json!({
            "system": self.system,
            "workflows": s.done,
            "throughput_per_s": round(s.done as f64 / s.busy_s.max(1e-9), 2),
            "p50_ms": round(percentile(&sorted, 0.50), 1),
            "p99_ms": round(percentile(&sorted, 0.99), 1),
            "max_ms": round(sorted.last().copied().unwrap_or(0.0), 1),
            "round_p50_ms": s.round_p50.iter().map(|p| round(*p, 1)).collect::<Vec<_>>(),
            "busy_s": round(s.busy_s, 2),
            "refunded_once": s.done,
            "outcomes": s.labels,
        })
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0.0)
}
