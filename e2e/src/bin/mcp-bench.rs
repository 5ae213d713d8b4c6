//! Benchmark: what `interlock mcp-proxy` adds to a tool call over stdio. The same MCP client
//! (rmcp's), the same example server and the same payments API, in one run, in rounds that
//! alternate the ways: `create_refund` straight to the server (with an idempotency key, as a
//! careful client would send it) against the same call gated through the proxy — as the example
//! configures it (the facts read again with `get_order` before the send) and with no premises
//! (the gate alone: journal, lease, routing) — and `get_order`, which the proxy passes through,
//! straight and through the proxy. Each refund is on a payment of its own, after the agent read
//! it (untimed), as an agent decides. Writes `results/bench_mcp.json`; `--quick` prints a short
//! run.
//!
//! Run the proxy built for release: `cargo build --release -p interlock-cli`, then
//! `cargo run -p interlock-e2e --bin mcp-bench -- --interlock target/release/interlock`. The
//! harness's own build adds the same to every way, so only the differences are read from it.

#![allow(clippy::print_stdout)] // a benchmark's report is its output

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use interlock::{SystemClock, Tier};
use interlock_e2e::mcp::{self, client::Client};
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use serde_json::json;

/// What the MCP proxy adds to a tool call.
#[derive(Parser)]
struct Args {
    /// A short run, printed and not written.
    #[arg(long)]
    quick: bool,
    /// The `interlock` binary the proxy runs as (default: beside this one).
    #[arg(long)]
    interlock: Option<PathBuf>,
    /// Where the result goes.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

/// The goal: what the proxy may add to the median gated call.
const GOAL_ADDED_P50_MS: f64 = 1.0;

/// One way to make a call.
struct Way {
    name: &'static str,
    tool: &'static str,
    client: Client,
    id_argument: bool,
    ms: Vec<f64>,
    round_p50s: Vec<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (rounds, per_round) = if args.quick { (2, 10) } else { (7, 100) };
    let interlock = match args.interlock {
        Some(p) => p,
        None => interlock_e2e::mcp::interlock()?,
    };
    if !interlock.exists() {
        bail!("no interlock binary at {}", interlock.display());
    }
    // On the disk the project lives on (a temporary directory may be in memory, which would
    // flatter the journal's commits).
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR"))?;
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(86_400),
        Arc::new(SystemClock),
    );
    let api = PaymentsApi::start(sim, "sk_test_local")?;
    let journal = dir.path().join("journal.db");
    let grant = std::process::Command::new(&interlock)
        .arg("--journal")
        .arg(&journal)
        .args([
            "lease",
            "grant",
            "bench",
            "--approver",
            "ops@example.com",
            "--unlimited",
        ])
        .output()?;
    if !grant.status.success() {
        bail!("granting the bench's lease: {grant:?}");
    }
    let shipped = mcp::example_config(&journal)?;
    let with_premises = dir.path().join("with-premises.toml");
    std::fs::write(&with_premises, &shipped)?;
    let without = dir.path().join("without-premises.toml");
    let cut = shipped
        .find("[tools.create_refund.premises]")
        .context("the example configuration has no premises section")?;
    std::fs::write(&without, &shipped[..cut])?;
    let server = mcp::example("payments_server.py").display().to_string();
    let env = [
        ("STRIPE_API_BASE".to_owned(), api.base_url.clone()),
        ("STRIPE_SECRET_KEY".to_owned(), "sk_test_local".to_owned()),
    ];
    let log = dir.path().join("processes.log");
    let straight_args = [server.clone()];
    let proxy_args = |config: &Path| {
        [
            "mcp-proxy".to_owned(),
            "--config".to_owned(),
            config.display().to_string(),
            "--".to_owned(),
            "python3".to_owned(),
            server.clone(),
        ]
    };
    let (with_args, without_args) = (proxy_args(&with_premises), proxy_args(&without));
    let python = Path::new("python3");
    let mut ways = Vec::new();
    for (name, tool, id_argument, client) in [
        (
            "straight",
            "create_refund",
            true,
            Client::connect(python, &straight_args, &env, &log).await?,
        ),
        (
            "gated",
            "create_refund",
            false,
            Client::connect(&interlock, &with_args, &env, &log).await?,
        ),
        (
            "gated_without_premises",
            "create_refund",
            false,
            Client::connect(&interlock, &without_args, &env, &log).await?,
        ),
        (
            "read_straight",
            "get_order",
            false,
            Client::connect(python, &straight_args, &env, &log).await?,
        ),
        (
            "read_through_proxy",
            "get_order",
            false,
            Client::connect(&interlock, &without_args, &env, &log).await?,
        ),
    ] {
        ways.push(Way {
            name,
            tool,
            client,
            id_argument,
            ms: Vec::new(),
            round_p50s: Vec::new(),
        });
    }
    let mut n = 0u64;
    for round in 0..rounds {
        // Each round starts with a different way, so none always runs first.
        let count = ways.len();
        for i in 0..count {
            let way = &mut ways[(i + round) % count];
            let mut mine = Vec::with_capacity(per_round);
            for _ in 0..per_round {
                n += 1;
                // A payment of its own for every call, so a read costs the same in every round
                // (one payment's refunds would grow with the run, and its reads with them).
                let payment = format!("pi_bench_{n}");
                api.sim.add_payment(&payment, 1_000_000);
                let args = if way.tool == "get_order" {
                    json!({"payment_intent": payment})
                } else {
                    let request = format!("bench-{n}");
                    let mut a = json!({"payment_intent": payment, "amount": 1, "request_id": request,
                        "approval": "bench"});
                    if way.id_argument {
                        a["idempotency_key"] = json!(request);
                    }
                    a
                };
                if way.tool == "create_refund" {
                    // The agent reads the order first, as it would to decide (not timed): the
                    // gated call is then decided on what it read, and the gate reads it once
                    // more before the send.
                    way.client
                        .call("get_order", &json!({"payment_intent": payment}))
                        .await?;
                }
                let t0 = Instant::now();
                let answer = way.client.call(way.tool, &args).await?;
                let ms = t0.elapsed().as_secs_f64() * 1000.0;
                if answer.is_error == Some(true) {
                    bail!("{} {} failed: {answer:?}", way.name, way.tool);
                }
                mine.push(ms);
            }
            way.round_p50s.push(percentile(&sorted(&mine), 0.5));
            way.ms.extend(mine);
        }
        eprintln!("[mcp-bench] round {}/{rounds} done", round + 1);
    }
    let mut systems = serde_json::Map::new();
    let mut p50 = std::collections::BTreeMap::new();
    for w in &ways {
        let all = sorted(&w.ms);
        let rounds_sorted = sorted(&w.round_p50s);
        p50.insert(w.name, percentile(&all, 0.5));
        systems.insert(
            w.name.to_owned(),
            json!({
                "tool": w.tool,
                "calls": w.ms.len(),
                "p50_ms": r3(percentile(&all, 0.5)),
                "p99_ms": r3(percentile(&all, 0.99)),
                "round_p50_ms_min": r3(rounds_sorted.first().copied().unwrap_or(f64::NAN)),
                "round_p50_ms_max": r3(rounds_sorted.last().copied().unwrap_or(f64::NAN)),
            }),
        );
    }
    let added = |a: &str, b: &str| r3(p50[a] - p50[b]);
    let report = json!({
        "transport": "stdio; the proxy starts the server as its child",
        "rounds": rounds,
        "calls_per_round": per_round,
        "systems": systems,
        "added_p50_ms": {
            "gated": added("gated", "straight"),
            "gated_without_premises": added("gated_without_premises", "straight"),
            "passthrough": added("read_through_proxy", "read_straight"),
        },
        "goal_added_p50_ms": GOAL_ADDED_P50_MS,
        "ways": {
            "straight": "create_refund straight to the server, with an idempotency key",
            "gated": "create_refund through the proxy as worker-examples/mcp/interlock.mcp.toml \
                      configures it: journaled, the lease checked, get_order read once more \
                      before the send, the receipt built",
            "gated_without_premises": "the same without the premise read: the gate alone",
            "read_straight": "get_order straight to the server",
            "read_through_proxy": "get_order through the proxy, which passes it through",
        },
        "note": "each refund on a payment of its own, after the agent read it (untimed); \
                 latencies as the client measures them, in milliseconds",
        "interlock": interlock.display().to_string(),
    });
    for w in ways {
        w.client.close().await;
    }
    let text = serde_json::to_string_pretty(&report)? + "\n";
    if args.quick {
        print!("{text}");
        return Ok(());
    }
    std::fs::write(args.out.join("bench_mcp.json"), &text)?;
    print!("{text}");
    Ok(())
}
