//! Benchmark: what the gate costs end to end. On one Temporal dev server and one payments API, the
//! same refund workflows run for `naive`, `keyed` and `gated_t1`, one system after another in one
//! run, a fixed number at a time, each system with one worker process of its own; every workflow
//! is timed from its start to its close. Writes `results/bench_e2e.json` and regenerates
//! `docs/benchmarks.md` (`--help` for options; `--quick` runs a few and writes nothing).
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
use interlock_testkit::bench_report::{read_result, round};
use serde_json::{Value, json};

/// The end-to-end overhead benchmark on a real Temporal dev server.
#[derive(Parser)]
struct Args {
    /// Measured workflows per system.
    #[arg(long, default_value_t = 200)]
    workflows: usize,
    /// Workflows running at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Systems, comma-separated, in the order they run.
    #[arg(long, value_delimiter = ',', default_value = "naive,keyed,gated_t1")]
    systems: Vec<String>,
    /// A short run (20 workflows, 4 at a time), printed and not written.
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
    let (workflows, concurrency) = if args.quick {
        (20, 4)
    } else {
        (args.workflows, args.concurrency)
    };
    anyhow::ensure!(
        workflows > 0 && concurrency > 0,
        "--workflows and --concurrency must be at least 1"
    );
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
        .map(|system| SystemRun::start(&env, &load_bin, system, workflows, rounds))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for r in 0..rounds {
        for k in 0..runs.len() {
            let idx = (k + r) % runs.len();
            let n = workflows / rounds + usize::from(r < workflows % rounds);
            eprintln!(
                "round {}/{rounds}: {} runs {n} workflows, {concurrency} at a time …",
                r + 1,
                runs[idx].system
            );
            runs[idx].round(&env, r, n, concurrency)?;
        }
    }
    let rows = runs.iter().map(SystemRun::summary).collect::<Vec<_>>();
    for row in &rows {
        eprintln!(
            "{}: {} workflows/s, p50 {} ms, p99 {} ms",
            row["system"], row["throughput_per_s"], row["p50_ms"], row["p99_ms"]
        );
    }
    drop(services);
    let p50 = |name: &str| {
        rows.iter()
            .find(|r| r["system"] == name)
            .and_then(|r| r["p50_ms"].as_f64())
    };
    let ratio = p50("gated_t1")
        .zip(p50("keyed"))
        .map(|(g, k)| round(g / k, 3));
    let report = json!({
        "generated_by": "cargo run -p interlock-e2e --bin e2e-bench",
        "workflows": workflows,
        "concurrency": concurrency,
        "warm_up": WARM_UP,
        "rounds": rounds,
        "systems": rows,
        "gated_t1_p50_over_keyed": ratio,
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
    let journal = read_result(&root, "bench_journal.json").unwrap_or(Value::Null);
    let grpc = read_result(&root, "bench_grpc.json");
    std::fs::write(
        root.join("docs/benchmarks.md"),
        interlock_testkit::bench_report::render(&journal, Some(&report), grpc.as_ref()),
    )?;
    eprintln!("wrote results/bench_e2e.json and docs/benchmarks.md");
    Ok(())
}

/// One system's worker, its payments and what its rounds measured.
struct SystemRun {
    system: String,
    load_bin: PathBuf,
    stamp: i64,
    dir: PathBuf,
    vars: [(String, String); 2],
    _worker: WorkerProc,
    latencies: Vec<f64>,
    busy_s: f64,
    done: usize,
    labels: BTreeMap<String, u64>,
}

impl SystemRun {
    /// Payments and leases for every round, a worker of its own, and the warm-up.
    fn start(
        env: &Env,
        load_bin: &Path,
        system: &str,
        workflows: usize,
        rounds: usize,
    ) -> anyhow::Result<Self> {
        let stamp = now_ms() % 1_000_000;
        let per_round = workflows.div_ceil(rounds);
        let mut prefixes = vec![(format!("warm-{system}-{stamp}"), WARM_UP)];
        prefixes.extend((0..rounds).map(|r| (format!("{system}-{stamp}-r{r}"), per_round)));
        for (prefix, n) in &prefixes {
            for i in 0..*n {
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
        }
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
            latencies: Vec::new(),
            busy_s: 0.0,
            done: 0,
            labels: BTreeMap::new(),
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
        let prefix = format!("{}-{}-r{r}", self.system, self.stamp);
        let out = self.load(&prefix, n, c)?;
        self.latencies.extend(
            out["latencies_ms"]
                .as_array()
                .context("refund-load gave no latencies")?
                .iter()
                .filter_map(Value::as_f64),
        );
        self.busy_s += out["wall_ms"].as_f64().unwrap_or(0.0) / 1000.0;
        for (label, count) in out["labels"].as_object().into_iter().flatten() {
            *self.labels.entry(label.clone()).or_default() += count.as_u64().unwrap_or(0);
        }
        let once = (0..n)
            .filter(|i| {
                let refunds = env.sim.refunds(&format!("pi_{prefix}_{i}"));
                refunds.len() == 1 && refunds[0].amount == 2000
            })
            .count();
        if once != n {
            bail!(
                "{}: only {once} of {n} payments were refunded exactly once in round {} \
                 (workflows ended {}); see {}",
                self.system,
                r + 1,
                out["labels"],
                self.dir.display()
            );
        }
        self.done += n;
        Ok(())
    }

    fn summary(&self) -> Value {
        let mut sorted = self.latencies.clone();
        sorted.sort_by(f64::total_cmp);
        json!({
            "system": self.system,
            "workflows": self.done,
            "throughput_per_s": round(self.done as f64 / self.busy_s.max(1e-9), 2),
            "p50_ms": round(percentile(&sorted, 0.50), 1),
            "p99_ms": round(percentile(&sorted, 0.99), 1),
            "max_ms": round(sorted.last().copied().unwrap_or(0.0), 1),
            "busy_s": round(self.busy_s, 2),
            "refunded_once": self.done,
            "outcomes": self.labels,
        })
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0.0)
}
