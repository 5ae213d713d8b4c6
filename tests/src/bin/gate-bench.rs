//! Benchmark: effects per second through the gate (a no-op tier-1 target, a journal on disk with
//! full durability) against the raw fsync rate of the same disk, measured in the same run —
//! serially, and with 1, 4, 16 and 64 concurrent senders as threads of one process and as
//! separate processes. Writes `results/bench_journal.json` and regenerates `docs/benchmarks.md`.
//!
//! `--quick` runs briefly and prints without writing (CI keeps it from rotting).

#![allow(clippy::print_stdout)] // a benchmark's report is its output

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use interlock::target::{SendRequest, Target};
use interlock::{Effect, EffectKey};
use interlock_testkit::bench_report::round;
use interlock_tests::bench::{self, NoOp};
use serde_json::{Value, json};

/// Effects per second through the gate against the disk's fsync rate, serially and with
/// concurrent senders.
#[derive(clap::Parser)]
struct Args {
    /// A short run, printed and not written (CI keeps the benchmark from rotting).
    #[arg(long)]
    quick: bool,
    /// Measure only these numbers of concurrent senders, print, and write nothing (for
    /// profiling); `--senders 0` measures the serial path alone.
    #[arg(long)]
    senders: Vec<usize>,
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

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    if let Some(journal) = &args.sender {
        return sender_process(journal, &args.name, Duration::from_millis(args.millis));
    }
    if let (Some(on), Some(dir)) = (&args.tracing_round, &args.round_dir) {
        let each = Duration::from_millis(args.millis);
        return tracing_round_process(dir, on == "on", args.effects, each);
    }
    if args.render {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let journal = interlock_testkit::bench_report::read_result(&root, "bench_journal.json")
            .context("results/bench_journal.json: run the benchmark first")?;
        let e2e = interlock_testkit::bench_report::read_result(&root, "bench_e2e.json");
        let grpc = interlock_testkit::bench_report::read_result(&root, "bench_grpc.json");
        let md = interlock_testkit::bench_report::render(&journal, e2e.as_ref(), grpc.as_ref());
        std::fs::write(root.join("docs/benchmarks.md"), md)?;
        eprintln!("wrote docs/benchmarks.md from results/");
        return Ok(());
    }
    let quick = args.quick;
    let serial_effects = if quick { 300 } else { 3000 };
    let probe = Duration::from_secs(if quick { 1 } else { 5 });
    let each = Duration::from_millis(if quick { 300 } else { 3000 });
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR"))?;
    if args.budgets_only {
        let budgets = budgets(dir.path(), serial_effects, each)?;
        println!("{}", serde_json::to_string_pretty(&budgets)?);
        return Ok(());
    }
    if args.tracing_only {
        let tracing = tracing_cost(dir.path(), serial_effects, each)?;
        println!("{}", serde_json::to_string_pretty(&tracing)?);
        return Ok(());
    }

    eprintln!(
        "probing the disk's fsync rate ({} s each way)…",
        probe.as_secs()
    );
    let (fsync_per_s, fsyncs) = bench::fsync_rate(dir.path(), probe, true)?;
    let (append_per_s, _) = bench::fsync_rate(dir.path(), probe, false)?;
    let sqlite_commit_per_s = bench::sqlite_commit_rate(dir.path(), probe)?;

    eprintln!("{serial_effects} effects one after another…");
    let path = dir.path().join("bench.db");
    let (bound, journal) = bench::bound(&path, true)?;
    let commits_before = journal.commits();
    let mut gated = Vec::with_capacity(serial_effects);
    let mut direct = Vec::with_capacity(serial_effects);
    for i in 0..serial_effects as u64 {
        let t = Instant::now();
        bench::one_effect(&bound, "serial", i)?;
        gated.push(t.elapsed());
        let key = EffectKey::derive(&["direct".to_owned(), i.to_string()]);
        let effect = Effect::new(key.clone(), &json!({"amount": i}), bench::LEASE)?;
        let t = Instant::now();
        let _ = NoOp.send(&SendRequest {
            key: &key,
            payload: &effect.payload,
            timeout: Duration::from_secs(1),
        });
        direct.push(t.elapsed());
    }
    let serial_commits = (journal.commits() - commits_before) as f64 / serial_effects as f64;
    let serial_effects_per_s = serial_effects as f64 / gated.iter().sum::<Duration>().as_secs_f64();
    gated.sort();
    direct.sort();
    let added = |p| ms(bench::percentile(&gated, p).saturating_sub(bench::percentile(&direct, p)));

    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut concurrent = Vec::new();
    let partial = !args.senders.is_empty();
    let senders_measured = if partial {
        args.senders.iter().copied().filter(|&n| n > 0).collect()
    } else {
        SENDERS.to_vec()
    };
    for senders in senders_measured {
        eprintln!("{senders} concurrent senders, threads then processes…");
        let before = journal.commits();
        let cpu = bench::cpu_time();
        let (done, took) = bench::threads(&bound, senders, &format!("c{senders}"), each)?;
        let cpu = bench::cpu_time().saturating_sub(cpu);
        let commits = journal.commits() - before;
        let per_s = done as f64 / took.as_secs_f64();
        let (p_done, p_took, p_commits, p_cpu) = processes(&path, senders, each)?;
        let p_per_s = p_done as f64 / p_took.as_secs_f64();
        let cpu_ms_per_effect = ms(cpu) / done.max(1) as f64;
        concurrent.push(json!({
            "workers": senders,
            "effects": done,
            "effects_per_s": round(per_s, 1),
            "effects_per_fsync": round(per_s / fsync_per_s, 3),
            "commits_per_effect": round(commits as f64 / done.max(1) as f64, 3),
            "cpu_ms_per_effect": round(cpu_ms_per_effect, 3),
            // What the machine's CPUs allow at this CPU cost per effect, in effects per fsync.
            "cpu_ceiling_effects_per_fsync": round(
                cpus as f64 * 1000.0 / cpu_ms_per_effect.max(1e-6) / fsync_per_s,
                3,
            ),
            "processes": {
                "effects": p_done,
                "effects_per_s": round(p_per_s, 1),
                "effects_per_fsync": round(p_per_s / fsync_per_s, 3),
                "commits_per_effect": round(p_commits as f64 / p_done.max(1) as f64, 3),
                "cpu_ms_per_effect": round(ms(p_cpu) / p_done.max(1) as f64, 3),
            },
        }));
    }

    eprintln!("the same effects with and without three matching budgets…");
    let budgets = budgets(dir.path(), serial_effects, each)?;
    eprintln!("the same effects with trace export on and off…");
    let tracing = tracing_cost(dir.path(), serial_effects, each)?;

    let report = json!({
        "generated_by": "cargo run --release -p interlock-tests --bin gate-bench",
        "cpus": cpus,
        "fsync_per_s": round(fsync_per_s, 0),
        "fsync_probe": format!("4 KiB rewritten in place + fdatasync, {fsyncs} syncs in the journal's directory"),
        "fsync_append_per_s": round(append_per_s, 0),
        "sqlite_commit_per_s": round(sqlite_commit_per_s, 0),
        "serial_effects_per_sqlite_commit": round(serial_effects_per_s / sqlite_commit_per_s, 3),
        // Two of SQLite's smallest durable commits per effect, and nothing else, would reach
        // this serial ratio on this disk.
        "serial_ratio_ceiling_by_sqlite": round(sqlite_commit_per_s / 2.0 / fsync_per_s, 3),
        "serial_effects": serial_effects,
        "serial_effects_per_s": round(serial_effects_per_s, 1),
        "serial_ratio": round(serial_effects_per_s / fsync_per_s, 3),
        "serial_commits_per_effect": round(serial_commits, 3),
        "serial_latency_ms": {
            "p50": round(ms(bench::percentile(&gated, 0.5)), 3),
            "p99": round(ms(bench::percentile(&gated, 0.99)), 3),
            "added_p50": round(added(0.5), 3),
            "added_p99": round(added(0.99), 3),
        },
        "seconds_per_concurrent_run": each.as_secs_f64(),
        "concurrent": concurrent,
        "budgets": budgets,
        "tracing": tracing,
        "postgres": postgres(quick, probe, each)?,
    });
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let e2e = interlock_testkit::bench_report::read_result(&root, "bench_e2e.json");
    let grpc = interlock_testkit::bench_report::read_result(&root, "bench_grpc.json");
    let md = interlock_testkit::bench_report::render(&report, e2e.as_ref(), grpc.as_ref());
    print!("{md}");
    if !quick && !partial {
        std::fs::write(
            root.join("results/bench_journal.json"),
            serde_json::to_string_pretty(&report)? + "\n",
        )?;
        std::fs::write(root.join("docs/benchmarks.md"), md)?;
        eprintln!("wrote results/bench_journal.json and docs/benchmarks.md");
    }
    Ok(())
}

/// The same gate on a PostgreSQL journal (a throwaway server, or INTERLOCK_DATABASE_URL's),
/// against the server's own single-row commit rate measured in the same run.
fn postgres(quick: bool, probe: Duration, each: Duration) -> anyhow::Result<Value> {
    eprintln!("PostgreSQL: the server's commit rate, then the gate on it…");
    let cluster = interlock_testkit::pg::Cluster::start()?;
    let commit_per_s = bench::pg_commit_rate(cluster.url(), probe)?;
    let serial_effects = if quick { 100 } else { 1000 };
    let (bound, _) = bench::pg_bound(cluster.url(), &cluster.fresh_schema("serial"), 1)?;
    let t = Instant::now();
    for i in 0..serial_effects {
        bench::one_effect(&bound, "pg-serial", i)?;
    }
    let serial_per_s = serial_effects as f64 / t.elapsed().as_secs_f64();
    let mut concurrent = Vec::new();
    for senders in [1u32, 16, 64] {
        eprintln!("PostgreSQL: {senders} concurrent senders…");
        let (bound, _) =
            bench::pg_bound(cluster.url(), &cluster.fresh_schema("concurrent"), senders)?;
        let (done, took) = bench::threads(&bound, senders as usize, &format!("pg{senders}"), each)?;
        let per_s = done as f64 / took.as_secs_f64();
        concurrent.push(json!({
            "workers": senders,
            "effects": done,
            "effects_per_s": round(per_s, 1),
            "effects_per_commit": round(per_s / commit_per_s, 3),
        }));
    }
    Ok(json!({
        "server_commit_per_s": round(commit_per_s, 0),
        "serial_effects": serial_effects,
        "serial_effects_per_s": round(serial_per_s, 1),
        "serial_effects_per_commit": round(serial_per_s / commit_per_s, 3),
        "concurrent": concurrent,
    }))
}

/// Serial and 16-sender throughput on a journal whose effects each match three budgets, beside
/// a journal without them: [`BUDGET_ROUNDS`] rounds, each measuring both on fresh journals in
/// turn (without then with, or with then without, alternating), so that a disk that speeds up or
/// slows down weighs on both alike. Each figure is the median of the rounds, with its min and
/// max; the ratio's median is of the rounds' own ratios.
fn budgets(dir: &Path, serial_effects: usize, each: Duration) -> anyhow::Result<Value> {
    // (effects/s without, effects/s with) per round.
    let mut serial = Vec::new();
    let mut sixteen = Vec::new();
    // Twice the serial run's effects and sending time in all, each side.
    let per_round = (2 * serial_effects / BUDGET_ROUNDS).max(50);
    let each = 2 * each / BUDGET_ROUNDS as u32;
    for round in 0..BUDGET_ROUNDS {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut s = [0.0; 2];
        let mut c = [0.0; 2];
        for with in order {
            let path = dir.join(format!("budgets-{round}-{with}.db"));
            let (bound, _journal) = bench::bound_with_budgets(&path, with)?;
            let run = format!("b{round}{with}");
            let t = Instant::now();
            for i in 0..per_round as u64 {
                bench::one_effect(&bound, &run, i)?;
            }
            s[usize::from(with)] = per_round as f64 / t.elapsed().as_secs_f64().max(1e-9);
            let (done, took) = bench::threads(&bound, 16, &format!("{run}-16"), each)?;
            c[usize::from(with)] = done as f64 / took.as_secs_f64().max(1e-9);
        }
        eprintln!(
            "  round {round}: serial {:.2}, 16 senders {:.2} (with / without)",
            s[1] / s[0],
            c[1] / c[0]
        );
        serial.push(s);
        sixteen.push(c);
    }
    Ok(json!({
        "budgets_per_effect": bench::three_budgets().len(),
        "rounds": BUDGET_ROUNDS,
        "serial_effects_per_round": per_round,
        "senders_16_ms_per_round": each.as_millis() as u64,
        "serial": side(&serial),
        "senders_16": side(&sixteen),
    }))
}

/// How many rounds the budgets' comparison takes (an odd number, for a plain median).
const BUDGET_ROUNDS: usize = 7;

/// The median, min and max of `v`, rounded to `digits`.
fn spread(mut v: Vec<f64>, digits: i32) -> Value {
    v.sort_by(f64::total_cmp);
    json!({
        "median": round(v[v.len() / 2], digits),
        "min": round(v[0], digits),
        "max": round(v[v.len() - 1], digits),
    })
}

/// Rounds of (effects/s without, effects/s with): each side's spread and their ratio's.
fn side(rounds: &[[f64; 2]]) -> Value {
    json!({
        "without_effects_per_s": spread(rounds.iter().map(|r| r[0]).collect(), 1),
        "with_effects_per_s": spread(rounds.iter().map(|r| r[1]).collect(), 1),
        "with_over_without": spread(rounds.iter().map(|r| r[1] / r[0]).collect(), 3),
    })
}

/// Serial and 16-sender throughput with the gate's spans exported over OTLP/gRPC to a collector
/// (one in this process, receiving for real) beside the same without export: each round runs
/// both, in turn and alternating which goes first, each in a process of its own set up exactly
/// as a worker is (`interlock_telemetry::install`, the variables a team sets). The spans the
/// collector received are counted, so an exporter that kept up by dropping spans would show.
fn tracing_cost(dir: &Path, serial_effects: usize, each: Duration) -> anyhow::Result<Value> {
    let receiver = interlock_testkit::otlp::Receiver::start()?;
    // Four times the serial run's effects and sending time in all, each side: a 16-sender run
    // of under a second swings with whatever else the machine does.
    let per_round = (4 * serial_effects / BUDGET_ROUNDS).max(50);
    let each = 4 * each / BUDGET_ROUNDS as u32;
    let (mut serial, mut sixteen) = (Vec::new(), Vec::new());
    let mut effects_exported = 0;
    for round in 0..BUDGET_ROUNDS {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let (mut s, mut c) = ([0.0; 2], [0.0; 2]);
        for on in order {
            let round_dir = dir.join(format!("tracing-{round}-{on}"));
            std::fs::create_dir_all(&round_dir)?;
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args(["--tracing-round", if on { "on" } else { "off" }])
                .arg("--round-dir")
                .arg(&round_dir)
                .args(["--effects", &per_round.to_string()])
                .args(["--millis", &each.as_millis().to_string()])
                .stderr(Stdio::inherit());
            for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")) {
                cmd.env_remove(k);
            }
            if on {
                cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
                    .env("OTEL_SERVICE_NAME", "gate-bench")
                    // Sent often, in batches large enough that nothing is dropped at this rate.
                    .env("OTEL_BSP_SCHEDULE_DELAY", "200")
                    .env("OTEL_BSP_MAX_QUEUE_SIZE", "262144")
                    .env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8192");
            }
            let out = cmd.output().context("running a tracing round")?;
            anyhow::ensure!(out.status.success(), "a tracing round failed");
            let v: Value =
                serde_json::from_slice(&out.stdout).context("a tracing round's report")?;
            s[usize::from(on)] = v["serial_effects_per_s"].as_f64().unwrap_or(0.0);
            c[usize::from(on)] = v["senders_16_effects_per_s"].as_f64().unwrap_or(0.0);
            if on {
                effects_exported += v["effects"].as_u64().unwrap_or(0);
            }
        }
        eprintln!(
            "  round {round}: serial {:.2}, 16 senders {:.2} (export on / off)",
            s[1] / s[0],
            c[1] / c[0]
        );
        serial.push(s);
        sixteen.push(c);
    }
    let spans = receiver.spans();
    let attempts = spans
        .iter()
        .filter(|s| s.name == "interlock.attempt")
        .count();
    Ok(json!({
        "rounds": BUDGET_ROUNDS,
        "serial_effects_per_round": per_round,
        "senders_16_ms_per_round": each.as_millis() as u64,
        "exporter": "batches every 200 ms, to a collector in the benchmark's own process",
        "effects_exported": effects_exported,
        "spans_received": spans.len(),
        "attempt_spans_received": attempts,
        "spans_per_effect": round(spans.len() as f64 / effects_exported.max(1) as f64, 2),
        "serial": side(&serial),
        "senders_16": side(&sixteen),
    }))
}

/// One round of [`tracing_cost`]: logs and traces set up as a worker sets them (export on when
/// the variables name a collector), then `effects` effects one after another and 16 senders for
/// `each`, on a fresh journal; prints the two rates and the effects sent, after the last spans
/// are flushed.
fn tracing_round_process(
    dir: &Path,
    on: bool,
    effects: usize,
    each: Duration,
) -> anyhow::Result<()> {
    let telemetry = interlock_telemetry::install("gate-bench", "off")?;
    anyhow::ensure!(telemetry.exporting() == on, "export should be {on}");
    let (bound, _journal) = bench::bound(&dir.join("journal.db"), true)?;
    let t = Instant::now();
    for i in 0..effects as u64 {
        bench::one_effect(&bound, "serial", i)?;
    }
    let serial = effects as f64 / t.elapsed().as_secs_f64().max(1e-9);
    let (done, took) = bench::threads(&bound, 16, "c16", each)?;
    let sixteen = done as f64 / took.as_secs_f64().max(1e-9);
    telemetry.shutdown()?;
    println!(
        "{}",
        json!({
            "serial_effects_per_s": serial,
            "senders_16_effects_per_s": sixteen,
            "effects": effects as u64 + done,
        })
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `n` sender processes, each with its own journal handle on the same file, started together.
/// Returns the effects they committed, the wall time, the commits they made and the CPU time
/// they used while sending.
fn processes(
    journal: &Path,
    n: usize,
    each: Duration,
) -> anyhow::Result<(u64, Duration, u64, Duration)> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for i in 0..n {
        let mut child = Command::new(&exe)
            .arg("--sender")
            .arg(journal)
            .args(["--name", &format!("p{n}-{i}")])
            .args(["--millis", &each.as_millis().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a sender process")?;
        let mut out = BufReader::new(child.stdout.take().context("sender stdout")?);
        let mut ready = String::new();
        out.read_line(&mut ready)?;
        anyhow::ensure!(ready.trim() == "ready", "sender {i} said {ready:?}");
        children.push((child, out));
    }
    let start = Instant::now();
    for (child, _) in &mut children {
        writeln!(child.stdin.as_mut().context("sender stdin")?, "go")?;
    }
    let (mut effects, mut commits, mut cpu_ms) = (0, 0, 0);
    for (mut child, mut out) in children {
        let mut line = String::new();
        out.read_line(&mut line)?;
        let v: Value =
            serde_json::from_str(&line).with_context(|| format!("sender said {line:?}"))?;
        effects += v["effects"].as_u64().unwrap_or(0);
        commits += v["commits"].as_u64().unwrap_or(0);
        cpu_ms += v["cpu_ms"].as_u64().unwrap_or(0);
        anyhow::ensure!(child.wait()?.success(), "a sender process failed");
    }
    Ok((
        effects,
        start.elapsed(),
        commits,
        Duration::from_millis(cpu_ms),
    ))
}

/// One sender process: open the journal, say ready, wait for "go", send for `each`, report.
fn sender_process(journal: &Path, name: &str, each: Duration) -> anyhow::Result<()> {
    let (bound, handle) = bench::bound(journal, false)?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    let cpu = bench::cpu_time();
    let (effects, _) = bench::threads(&bound, 1, name, each)?;
    let cpu_ms = bench::cpu_time().saturating_sub(cpu).as_millis() as u64;
    writeln!(
        stdout,
        "{}",
        json!({"effects": effects, "commits": handle.commits(), "cpu_ms": cpu_ms})
    )?;
    Ok(())
}
