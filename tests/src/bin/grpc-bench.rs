//! Benchmark: what the gate server adds to a `Submit`. The same journal, the same no-op tier-1
//! target and the same gate serve both ways in one run: `Bound::submit` called in this process,
//! and `Submit` over gRPC to the real server (`interlock_server::Server` on a loopback socket,
//! with its health and reflection services, token check and size limits as `interlock serve`
//! runs it), with 1 and 16 concurrent clients, in rounds that alternate the two ways. Writes
//! `results/bench_grpc.json` and regenerates `docs/benchmarks.md`.
//!
//! `--quick` runs briefly and prints without writing (CI keeps it from rotting).

#![allow(clippy::print_stdout)] // a benchmark's report is its output

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use interlock::{Bound, Clock, Effect, EffectKey, SystemClock};
use interlock_server::pb;
use interlock_server::{GateApi, Listen, Listener, Server, TargetEntry, Targets};
use interlock_testkit::bench_report::{render_all, round};
use interlock_tests::bench::{self, LEASE};
use interlock_tests::grpc::Client;
use serde_json::{Value, json};

/// What the gate server adds to a `Submit`, against the gate in process.
#[derive(clap::Parser)]
struct Args {
    /// A short run, printed and not written.
    #[arg(long)]
    quick: bool,
}

const CLIENTS: [usize; 2] = [1, 16];
const TOKEN: &str = "bench-token";

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let (rounds, per_round) = if args.quick { (2, 100) } else { (6, 1000) };
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR"))?;
    let path = dir.path().join("journal.db");
    let (bound, journal) = bench::bound(&path, true)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut targets = Targets::new();
    targets.insert(
        "noop",
        TargetEntry {
            bound: bound.clone(),
            records: None,
            check_payload: None,
            required_premises: Vec::new(),
        },
    );
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let server = Server::new(GateApi::new(journal, targets, clock)).token(TOKEN);
    let listener = runtime.block_on(Listener::bind(
        &Listen::parse("127.0.0.1:0").map_err(anyhow::Error::msg)?,
    ))?;
    let address = listener.address();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = runtime.spawn(server.run(listener, async move {
        let _ = stopped.await;
    }));

    let mut rows = Vec::new();
    for clients in CLIENTS {
        let mut local = Vec::new();
        let mut remote = Vec::new();
        let (mut local_wall, mut remote_wall) = (Duration::ZERO, Duration::ZERO);
        for round in 0..rounds {
            eprintln!("{clients} client(s), round {}/{rounds}…", round + 1);
            let run = format!("c{clients}-r{round}");
            let (lat, wall) = in_process(&bound, clients, per_round, &run)?;
            local.extend(lat);
            local_wall += wall;
            let (lat, wall) =
                runtime.block_on(through_server(&address, clients, per_round, &run))?;
            remote.extend(lat);
            remote_wall += wall;
        }
        rows.push(row(
            clients,
            &mut local,
            local_wall,
            &mut remote,
            remote_wall,
        ));
    }
    let _ = stop.send(());
    runtime.block_on(served)??;

    let report = json!({
        "transport": "TCP on loopback, bearer token, no TLS",
        "rounds": rounds,
        "effects_per_round": per_round,
        "clients": rows,
        "goal_added_p50_ms": 0.5,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    if !args.quick {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        std::fs::write(
            root.join("results/bench_grpc.json"),
            serde_json::to_string_pretty(&report)? + "\n",
        )?;
        std::fs::write(root.join("docs/benchmarks.md"), render_all(&root))?;
        eprintln!("wrote results/bench_grpc.json and docs/benchmarks.md");
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One table row: both ways' latencies and throughput, and what the server adds.
fn row(
    clients: usize,
    local: &mut [Duration],
    local_wall: Duration,
    remote: &mut [Duration],
    remote_wall: Duration,
) -> Value {
    local.sort_unstable();
    remote.sort_unstable();
    let side = |lat: &[Duration], wall: Duration| {
        json!({
            "effects": lat.len(),
            "effects_per_s": round(lat.len() as f64 / wall.as_secs_f64(), 1),
            "p50_ms": round(ms(bench::percentile(lat, 0.5)), 3),
            "p99_ms": round(ms(bench::percentile(lat, 0.99)), 3),
        })
    };
    let added = |p| ms(bench::percentile(remote, p)) - ms(bench::percentile(local, p));
    json!({
        "clients": clients,
        "in_process": side(local, local_wall),
        "server": side(remote, remote_wall),
        "added_p50_ms": round(added(0.5), 3),
        "added_p99_ms": round(added(0.99), 3),
    })
}

fn effect(run: &str, client: usize, i: usize) -> anyhow::Result<Effect> {
    let key = EffectKey::derive(&[run.to_owned(), client.to_string(), i.to_string()]);
    Ok(Effect::new(
        key,
        &json!({"amount": i, "currency": "usd"}),
        LEASE,
    )?)
}

/// `clients` threads calling the gate in this process, `per_round` effects in all.
fn in_process(
    bound: &Bound,
    clients: usize,
    per_round: usize,
    run: &str,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let each = per_round / clients;
    let start = Instant::now();
    let lat = std::thread::scope(|s| -> anyhow::Result<Vec<Duration>> {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || -> anyhow::Result<Vec<Duration>> {
                    let mut lat = Vec::with_capacity(each);
                    for i in 0..each {
                        let e = effect(&format!("{run}-local"), c, i)?;
                        let t = Instant::now();
                        let out = bound.submit(&e)?;
                        lat.push(t.elapsed());
                        anyhow::ensure!(out.label() == "COMMITTED/first_send", "{out:?}");
                    }
                    Ok(lat)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(
                h.join()
                    .map_err(|_| anyhow::anyhow!("a client panicked"))??,
            );
        }
        Ok(all)
    })?;
    Ok((lat, start.elapsed()))
}

/// `clients` tasks, each on its own connection, calling `Submit`, `per_round` effects in all.
async fn through_server(
    address: &str,
    clients: usize,
    per_round: usize,
    run: &str,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let each = per_round / clients;
    let mut connected: Vec<Client> = Vec::new();
    for _ in 0..clients {
        connected.push(interlock_tests::grpc::client(address, Some(TOKEN)).await?);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (c, mut client) in connected.into_iter().enumerate() {
        let run = format!("{run}-server");
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(each);
            for i in 0..each {
                let e = effect(&run, c, i)?;
                let request = pb::SubmitRequest {
                    target: "noop".into(),
                    effect: Some(interlock_server::convert::effect_to(&e)),
                    attempt: String::new(),
                };
                let t = Instant::now();
                let out = client.submit(request).await?.into_inner();
                lat.push(t.elapsed());
                match out.outcome.and_then(|o| o.kind) {
                    Some(pb::outcome::Kind::Committed(c)) if !c.replayed => {}
                    other => anyhow::bail!("Submit answered {other:?}"),
                }
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.context("a client task died")??);
    }
    Ok((all, start.elapsed()))
}
