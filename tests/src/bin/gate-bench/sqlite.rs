//! The gate on a SQLite journal against the ceilings the same disk sets, in rounds: each round
//! measures the disk's sync rate and SQLite's smallest commit beside the gate's serial and
//! concurrent runs on a fresh journal, probes first in one round and last in the next, so a disk
//! that speeds up or slows down during the run weighs on both sides alike. Every ratio is taken
//! within its round, and every figure is reported as the median of the rounds with min and max.

use std::path::Path;
use std::time::{Duration, Instant};

use interlock::target::{SendRequest, Target};
use interlock::{Effect, EffectKey};
use interlock_testkit::bench_report::round;
use interlock_tests::bench::{self, NoOp};
use serde_json::{Value, json};

use crate::senders::processes;
use crate::{ms, spread};

/// What one run of rounds measures.
pub(crate) struct Plan {
    pub(crate) rounds: usize,
    pub(crate) serial_effects: usize,
    pub(crate) probe: Duration,
    pub(crate) each: Duration,
    pub(crate) senders: Vec<usize>,
}

/// One measured run of senders: threads of one process, or processes.
#[derive(Default, Clone, Copy)]
struct Run {
    effects: u64,
    effects_per_s: f64,
    commits_per_effect: f64,
    cpu_ms_per_effect: f64,
    /// CPU time used ÷ wall time: how many of the machine's cores the run kept busy.
    cores_busy: f64,
}

impl Run {
    fn of(effects: u64, took: Duration, commits: u64, cpu: Duration) -> Self {
        let n = effects.max(1) as f64;
        Self {
            effects,
            effects_per_s: effects as f64 / took.as_secs_f64().max(1e-9),
            commits_per_effect: commits as f64 / n,
            cpu_ms_per_effect: ms(cpu) / n,
            cores_busy: cpu.as_secs_f64() / took.as_secs_f64().max(1e-9),
        }
    }
}

struct Serial {
    effects_per_s: f64,
    user_ms: f64,
    system_ms: f64,
    commits_per_effect: f64,
}

struct Round {
    fsync_per_s: f64,
    commit_per_s: f64,
    /// CPU per smallest durable commit, ms.
    commit_cpu_ms: f64,
    serial: Serial,
    /// Per number of senders: (threads, processes).
    concurrent: Vec<(Run, Run)>,
}

/// Every round of `plan` in `dir`, reported as JSON. Latencies (per effect, serially) are pooled
/// over the rounds, beside a direct call of the same no-op target.
pub(crate) fn measure(dir: &Path, plan: &Plan) -> anyhow::Result<Value> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let (mut gated, mut direct) = (Vec::new(), Vec::new());
    let mut rounds = Vec::new();
    let mut fsyncs = 0;
    for r in 0..plan.rounds {
        let probes_first = r % 2 == 0;
        eprintln!(
            "round {} of {}: probes {}, {} effects one after another, then {:?} senders…",
            r + 1,
            plan.rounds,
            if probes_first { "first" } else { "last" },
            plan.serial_effects,
            plan.senders,
        );
        let probe = |fsyncs: &mut u64| -> anyhow::Result<(f64, bench::CommitProbe)> {
            let (rate, n) = bench::fsync_rate(dir, plan.probe, true)?;
            *fsyncs += n;
            Ok((rate, bench::sqlite_commit_probe(dir, plan.probe)?))
        };
        let mut probed = if probes_first {
            Some(probe(&mut fsyncs)?)
        } else {
            None
        };
        let path = dir.join(format!("round-{r}.db"));
        let serial = serial(&path, plan.serial_effects, &mut gated, &mut direct)?;
        let mut concurrent = Vec::new();
        for &n in &plan.senders {
            concurrent.push(senders(&path, n, plan.each, r)?);
        }
        if probed.is_none() {
            probed = Some(probe(&mut fsyncs)?);
        }
        let (fsync_per_s, commit) = probed.unwrap_or_default();
        rounds.push(Round {
            fsync_per_s,
            commit_per_s: commit.per_s,
            commit_cpu_ms: commit.cpu_ms,
            serial,
            concurrent,
        });
    }
    gated.sort();
    direct.sort();
    let added = |p| ms(bench::percentile(&gated, p).saturating_sub(bench::percentile(&direct, p)));
    let of = |f: &dyn Fn(&Round) -> f64, digits| spread(rounds.iter().map(f).collect(), digits);
    let serial_cpu = |r: &Round| r.serial.user_ms + r.serial.system_ms;
    let concurrent: Vec<Value> = plan
        .senders
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let threads = |f: fn(&Run) -> f64, d| of(&|r: &Round| f(&r.concurrent[i].0), d);
            let processes = |f: fn(&Run) -> f64, d| of(&|r: &Round| f(&r.concurrent[i].1), d);
            json!({
                "senders": n,
                "threads": {
                    "effects": rounds.iter().map(|r| r.concurrent[i].0.effects).sum::<u64>(),
                    "effects_per_s": threads(|x| x.effects_per_s, 1),
                    "commits_per_effect": threads(|x| x.commits_per_effect, 3),
                    "cpu_ms_per_effect": threads(|x| x.cpu_ms_per_effect, 3),
                    "cores_busy": threads(|x| x.cores_busy, 2),
                    // Effects/s ÷ what the cores allow at the serial run's CPU per effect.
                    "over_cpu_bound": of(&|r: &Round| r.concurrent[i].0.effects_per_s
                        / (cpus as f64 * 1000.0 / serial_cpu(r).max(1e-6)), 3),
                },
                "processes": {
                    "effects": rounds.iter().map(|r| r.concurrent[i].1.effects).sum::<u64>(),
                    "effects_per_s": processes(|x| x.effects_per_s, 1),
                    "commits_per_effect": processes(|x| x.commits_per_effect, 3),
                    "cpu_ms_per_effect": processes(|x| x.cpu_ms_per_effect, 3),
                    "cores_busy": processes(|x| x.cores_busy, 2),
                    // Processes do not share commits: two of SQLite's smallest per effect at best.
                    "over_two_commit_ceiling": of(&|r: &Round| r.concurrent[i].1.effects_per_s
                        / (r.commit_per_s / 2.0), 3),
                },
            })
        })
        .collect();
    Ok(json!({
        "rounds": plan.rounds,
        "cpus": cpus,
        "fsync_probe": format!(
            "4 KiB rewritten in place + fdatasync, {} s per round, {fsyncs} syncs in all in the \
             journal's directory",
            plan.probe.as_secs_f64()
        ),
        "fsync_per_s": of(&|r: &Round| r.fsync_per_s, 0),
        "sqlite_commit_per_s": of(&|r: &Round| r.commit_per_s, 0),
        "sqlite_commit_cpu_ms": of(&|r: &Round| r.commit_cpu_ms, 4),
        "serial": {
            "effects_per_round": plan.serial_effects,
            "effects_per_s": of(&|r: &Round| r.serial.effects_per_s, 1),
            "cpu_ms_per_effect": {
                "user": of(&|r: &Round| r.serial.user_ms, 3),
                "system": of(&|r: &Round| r.serial.system_ms, 3),
                "total": of(&serial_cpu, 3),
                // What the gate spends beyond the two smallest commits an effect cannot do
                // without.
                "beyond_two_commits": of(&|r: &Round| serial_cpu(r) - 2.0 * r.commit_cpu_ms, 3),
            },
            "commits_per_effect": of(&|r: &Round| r.serial.commits_per_effect, 3),
            "over_two_commit_ceiling":
                of(&|r: &Round| r.serial.effects_per_s / (r.commit_per_s / 2.0), 3),
            "over_fsync_rate": of(&|r: &Round| r.serial.effects_per_s / r.fsync_per_s, 3),
            "latency_ms": {
                "effects": gated.len(),
                "p50": round(ms(bench::percentile(&gated, 0.5)), 3),
                "p99": round(ms(bench::percentile(&gated, 0.99)), 3),
                "added_p50": round(added(0.5), 3),
                "added_p99": round(added(0.99), 3),
            },
        },
        "seconds_per_concurrent_run": plan.each.as_secs_f64(),
        "concurrent": concurrent,
    }))
}

/// `effects` effects one after another on a fresh journal at `path`, each timed beside a direct
/// call of the target (pushed onto `gated` and `direct`).
fn serial(
    path: &Path,
    effects: usize,
    gated: &mut Vec<Duration>,
    direct: &mut Vec<Duration>,
) -> anyhow::Result<Serial> {
    let (bound, journal) = bench::bound(path, true)?;
    let commits = journal.commits();
    let (user, system) = bench::user_and_system_time();
    let mut took = Duration::ZERO;
    for i in 0..effects as u64 {
        let t = Instant::now();
        bench::one_effect(&bound, "serial", i)?;
        let d = t.elapsed();
        took += d;
        gated.push(d);
        let key = EffectKey::derive(&["direct".to_owned(), i.to_string()]);
        let effect = Effect::new(key.clone(), &json!({"amount": i}), bench::LEASE)?;
        let t = Instant::now();
        let _ = NoOp.send(&SendRequest {
            key: &key,
            payload: &effect.payload,
            timeout: Duration::from_secs(1),
            deadline: None,
            last_look: None,
        });
        direct.push(t.elapsed());
    }
    let (user_after, system_after) = bench::user_and_system_time();
    let n = effects.max(1) as f64;
    Ok(Serial {
        effects_per_s: effects as f64 / took.as_secs_f64().max(1e-9),
        // The direct calls' CPU is counted too; a no-op's is too small to show in clock ticks.
        user_ms: ms(user_after.saturating_sub(user)) / n,
        system_ms: ms(system_after.saturating_sub(system)) / n,
        commits_per_effect: (journal.commits() - commits) as f64 / n,
    })
}

/// `n` senders for `each` on the journal at `path`: as threads sharing one handle, then as
/// processes with one handle each.
fn senders(path: &Path, n: usize, each: Duration, r: usize) -> anyhow::Result<(Run, Run)> {
    let (bound, journal) = bench::bound(path, false)?;
    let before = journal.commits();
    let cpu = bench::cpu_time();
    let (done, took) = bench::threads(&bound, n, &format!("r{r}c{n}"), each)?;
    let cpu = bench::cpu_time().saturating_sub(cpu);
    let threads = Run::of(done, took, journal.commits() - before, cpu);
    let (p_done, p_took, p_commits, p_cpu) = processes(path, n, each, r)?;
    Ok((threads, Run::of(p_done, p_took, p_commits, p_cpu)))
}

/// `effects` effects one after another on a fresh journal and nothing else: CPU time split into
/// user and system, and commits per effect, printed as JSON.
pub(crate) fn serial_only(dir: &Path, effects: usize) -> anyhow::Result<()> {
    let (bound, journal) = bench::bound(&dir.join("serial.db"), true)?;
    let commits = journal.commits();
    let (user, system) = bench::user_and_system_time();
    let t = Instant::now();
    for i in 0..effects as u64 {
        bench::one_effect(&bound, "serial", i)?;
    }
    let took = t.elapsed();
    let (user_after, system_after) = bench::user_and_system_time();
    let per = |d: Duration| round(ms(d) / effects.max(1) as f64, 3);
    let out = json!({
        "effects": effects,
        "effects_per_s": round(effects as f64 / took.as_secs_f64().max(1e-9), 1),
        "user_cpu_ms_per_effect": per(user_after.saturating_sub(user)),
        "system_cpu_ms_per_effect": per(system_after.saturating_sub(system)),
        "commits_per_effect": round((journal.commits() - commits) as f64 / effects.max(1) as f64, 3),
    });
    crate::print_json(&out)
}

/// The `fsync` and `fdatasync` calls one effect costs serially, counted by `strace` around two
/// runs of [`serial_only`] (`effects` effects, and none, so opening the journal is not counted):
/// what "two durable commits per effect" comes to in syncs. `None` (with the reason) where
/// `strace` is missing or cannot trace here.
pub(crate) fn syncs_per_effect(dir: &Path, effects: usize) -> Value {
    let syncs = crate::strace::per_effect(&["fsync", "fdatasync"], effects as u64, |n, command| {
        let run_dir = dir.join(format!("strace-run-{n}"));
        std::fs::create_dir_all(&run_dir)?;
        command
            .args(["--serial-only", &n.to_string(), "--round-dir"])
            .arg(&run_dir);
        Ok(())
    });
    match syncs {
        Ok(per) => json!({
            "effects": effects,
            "syncs_per_effect": round(per, 3),
            "how": "fsync and fdatasync calls counted by strace -f -c in a serial run, less those of a run of no effects",
        }),
        Err(e) => json!({ "not_counted": format!("strace: {e}") }),
    }
}
