//! Two ways of running the same effects compared side by side (with and without three matching
//! budgets; with trace export on and off), in rounds that alternate which way goes first, so a
//! disk that speeds up or slows down weighs on both alike.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use interlock_testkit::bench_report::round;
use interlock_tests::bench;
use serde_json::{Value, json};

use crate::spread;

/// Serial and 16-sender throughput on a journal whose effects each match three budgets, beside
/// a journal without them: [`BUDGET_ROUNDS`] rounds, each measuring both on fresh journals in
/// turn (without then with, or with then without, alternating), so that a disk that speeds up or
/// slows down weighs on both alike. Each figure is the median of the rounds, with its min and
/// max; the ratio's median is of the rounds' own ratios.
pub(crate) fn budgets(dir: &Path, serial_effects: usize, each: Duration) -> anyhow::Result<Value> {
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
pub(crate) fn tracing_cost(
    dir: &Path,
    serial_effects: usize,
    each: Duration,
) -> anyhow::Result<Value> {
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
pub(crate) fn tracing_round_process(
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
