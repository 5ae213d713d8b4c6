//! The same gate on a PostgreSQL journal (a throwaway server, or `INTERLOCK_DATABASE_URL`'s),
//! against the server's own single-row commit rate, in rounds that put the probe first and last
//! in turn; every figure is the median of the rounds with min and max, every ratio within its
//! round.

use std::time::{Duration, Instant};

use interlock_tests::bench;
use serde_json::{Value, json};

use crate::spread;

/// One round: the server's commits/s, serial effects/s, effects/s per number of senders, and the
/// server's log syncs per serial effect (`None` where it does not count them).
type Round = (f64, f64, Vec<f64>, Option<f64>);

/// The numbers of concurrent senders measured.
const SENDERS: [u32; 3] = [1, 16, 64];

/// `rounds` rounds: the server's commit rate, `serial_effects` effects one after another, then
/// each number of senders for `each`, all on fresh schemas.
pub(crate) fn measure(
    rounds: usize,
    serial_effects: u64,
    probe: Duration,
    each: Duration,
) -> anyhow::Result<Value> {
    let cluster = interlock_testkit::pg::Cluster::start()?;
    let mut measured: Vec<Round> = Vec::new();
    for r in 0..rounds {
        eprintln!(
            "PostgreSQL round {} of {}: the server's commit rate, {serial_effects} effects one \
             after another, then {SENDERS:?} senders…",
            r + 1,
            rounds
        );
        let probe_first = r % 2 == 0;
        let mut commit_per_s = if probe_first {
            bench::pg_commit_rate(cluster.url(), probe)?
        } else {
            0.0
        };
        let (bound, _) = bench::pg_bound(cluster.url(), &cluster.fresh_schema("serial"), 1)?;
        // Settled first, so that no count a process adds late (the probe's, as it ends) falls
        // in the serial run's.
        let synced = bench::pg_wal_syncs_settled(cluster.url())?;
        let t = Instant::now();
        for i in 0..serial_effects {
            bench::one_effect(&bound, &format!("pg-serial-{r}"), i)?;
        }
        let serial = serial_effects as f64 / t.elapsed().as_secs_f64().max(1e-9);
        // A server process adds its syncs to the shared count now and then, and as it ends:
        // the journal's connections are closed first. Nothing else runs on the server meanwhile
        // but its own log writer, which syncs what was committed without waiting for the disk a
        // few times a second.
        drop(bound);
        let syncs = (bench::pg_wal_syncs_settled(cluster.url())? - synced) as f64;
        let syncs = (syncs > 0.0).then(|| syncs / serial_effects.max(1) as f64);
        let mut concurrent = Vec::new();
        for senders in SENDERS {
            let (bound, _) =
                bench::pg_bound(cluster.url(), &cluster.fresh_schema("concurrent"), senders)?;
            let (done, took) =
                bench::threads(&bound, senders as usize, &format!("pg{r}-{senders}"), each)?;
            concurrent.push(done as f64 / took.as_secs_f64().max(1e-9));
        }
        if !probe_first {
            commit_per_s = bench::pg_commit_rate(cluster.url(), probe)?;
        }
        measured.push((commit_per_s, serial, concurrent, syncs));
    }
    let of = |f: &dyn Fn(&Round) -> f64, digits| spread(measured.iter().map(f).collect(), digits);
    let concurrent: Vec<Value> = SENDERS
        .iter()
        .enumerate()
        .map(|(i, senders)| {
            json!({
                "senders": senders,
                "effects_per_s": of(&|m| m.2[i], 1),
                "effects_per_commit": of(&|m| m.2[i] / m.0, 3),
            })
        })
        .collect();
    let requests = requests_per_effect(cluster.url(), if serial_effects < 500 { 50 } else { 500 });
    let syncs: Option<Vec<f64>> = measured.iter().map(|m| m.3).collect();
    let syncs = syncs.map_or_else(
        || json!({ "not_counted": "the server syncs its log by open flags, not by call" }),
        |each| spread(each, 2),
    );
    Ok(json!({
        "requests_per_effect": requests,
        "serial_wal_syncs_per_effect": syncs,
        "rounds": rounds,
        "server_commit_per_s": of(&|m| m.0, 0),
        "serial_effects_per_round": serial_effects,
        "serial_effects_per_s": of(&|m| m.1, 1),
        "serial_effects_per_commit": of(&|m| m.1 / m.0, 3),
        "seconds_per_concurrent_run": each.as_secs_f64(),
        "concurrent": concurrent,
    }))
}

/// The requests one serial effect sends the server, counted by `strace` as the `sendto` calls of
/// two runs of [`serial_only`] on the server at `url` (`effects` effects, and none, so opening the
/// journal is not counted). Statements sent together go out in one call, so this is the effect's
/// round trips, on the journal's connection and the liveness lock's session together. `None`
/// (with the reason) where `strace` is missing or cannot trace here.
fn requests_per_effect(url: &str, effects: u64) -> Value {
    let requests = crate::strace::per_effect(&["sendto"], effects, |n, command| {
        command
            .args(["--postgres-only", &n.to_string()])
            .env("INTERLOCK_DATABASE_URL", url);
        Ok(())
    });
    match requests {
        Ok(per) => json!({
            "effects": effects,
            "requests_per_effect": interlock_testkit::bench_report::round(per, 2),
            "how": "sendto calls counted by strace -f -c in a serial run, less those of a run of no effects",
        }),
        Err(e) => json!({ "not_counted": format!("strace: {e}") }),
    }
}

/// `effects` effects one after another on a fresh schema and nothing else, printed as JSON.
pub(crate) fn serial_only(effects: u64) -> anyhow::Result<()> {
    let cluster = interlock_testkit::pg::Cluster::start()?;
    let (bound, _) = bench::pg_bound(cluster.url(), &cluster.fresh_schema("serial"), 1)?;
    let t = Instant::now();
    for i in 0..effects {
        bench::one_effect(&bound, "pg-serial", i)?;
    }
    let took = t.elapsed();
    crate::print_json(&json!({
        "effects": effects,
        "effects_per_s": interlock_testkit::bench_report::round(
            effects as f64 / took.as_secs_f64().max(1e-9),
            1
        ),
    }))
}

/// `senders` threads sending for `each` on a fresh schema and nothing else, printed as JSON with
/// the cores the whole machine kept busy meanwhile.
pub(crate) fn senders_only(senders: u32, each: Duration) -> anyhow::Result<()> {
    let cluster = interlock_testkit::pg::Cluster::start()?;
    let (bound, _) = bench::pg_bound(cluster.url(), &cluster.fresh_schema("concurrent"), senders)?;
    let before = bench::machine_busy()?;
    let (done, took) = bench::threads(&bound, senders as usize, "pg-senders", each)?;
    let busy = bench::machine_busy()? - before;
    let secs = took.as_secs_f64().max(1e-9);
    crate::print_json(&json!({
        "senders": senders,
        "effects": done,
        "effects_per_s": interlock_testkit::bench_report::round(done as f64 / secs, 1),
        "machine_cores_busy": interlock_testkit::bench_report::round(busy / secs, 2),
        "machine_cpu_ms_per_effect": interlock_testkit::bench_report::round(
            busy * 1000.0 / (done as f64).max(1.0),
            3
        ),
    }))
}
