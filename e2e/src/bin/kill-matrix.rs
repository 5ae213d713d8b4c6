//! Run the kill matrix and write `results/e2e_matrix.md` and `.json`.
//!
//! Options: `--repeat N` (default 3), `--cases a,b`, `--systems x,y`, `--quick` (the CI subset:
//! gated tiers 1 and 2 and the keyed baseline on six cases, once; written to
//! `target/e2e-quick/`), `--out DIR`, `--port P` (Temporal dev server, default 7244).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use interlock::target::sim::SimPayments;
use interlock::{Clock, SqliteJournal, Tier};
use interlock_e2e::cases::{ALL, QUICK};
use interlock_e2e::cell::{Env, SYSTEMS, SharedSkew, run_cell};
use interlock_e2e::payments_api::PaymentsApi;
use interlock_e2e::procs::DevServer;
use interlock_e2e::report::{markdown, summarize};

struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    let repeat: u32 = value("--repeat")
        .map(|v| v.parse())
        .transpose()
        .context("--repeat N")?
        .unwrap_or(if quick { 1 } else { 3 });
    let list =
        |name: &str| value(name).map(|v| v.split(',').map(str::to_owned).collect::<Vec<_>>());
    let cases: Vec<_> = match list("--cases") {
        Some(names) => names
            .iter()
            .map(|n| {
                ALL.iter()
                    .find(|c| c.name == n)
                    .copied()
                    .with_context(|| format!("unknown case {n}"))
            })
            .collect::<Result<_, _>>()?,
        None if quick => ALL
            .iter()
            .filter(|c| QUICK.contains(&c.name))
            .copied()
            .collect(),
        None => ALL.to_vec(),
    };
    let systems: Vec<_> = match list("--systems") {
        Some(names) => names
            .iter()
            .map(|n| {
                SYSTEMS
                    .iter()
                    .find(|s| s.0 == n)
                    .copied()
                    .with_context(|| format!("unknown system {n}"))
            })
            .collect::<Result<_, _>>()?,
        None if quick => SYSTEMS
            .iter()
            .filter(|s| ["keyed", "gated_t1", "gated_t2"].contains(&s.0))
            .copied()
            .collect(),
        None => SYSTEMS.to_vec(),
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out_dir = value("--out").map(PathBuf::from).unwrap_or_else(|| {
        if quick {
            root.join("target/e2e-quick")
        } else {
            root.join("results")
        }
    });
    let port: u16 = value("--port")
        .map(|v| v.parse())
        .transpose()
        .context("--port P")?
        .unwrap_or(7244);
    let bins = std::env::current_exe()?
        .parent()
        .map(PathBuf::from)
        .context("no binary directory")?;
    let (worker_bin, starter_bin, cli_bin) = (
        bins.join("refund-worker"),
        bins.join("refund-starter"),
        bins.join("interlock"),
    );
    for b in [&worker_bin, &starter_bin, &cli_bin] {
        if !b.exists() {
            bail!(
                "{} is missing: build it with `cargo build -p worker-examples -p interlock`",
                b.display()
            );
        }
    }
    let scratch = tempfile::tempdir()?;
    let work = match std::env::var_os("KILL_MATRIX_KEEP") {
        Some(dir) => PathBuf::from(dir),
        None => scratch.path().to_owned(),
    };
    std::fs::create_dir_all(&work)?;
    eprintln!("starting the Temporal dev server on 127.0.0.1:{port} …");
    let server = DevServer::start(&work, port)?;
    let skew = SharedSkew::new(work.join("clock-skew"))?;
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(24 * 3600),
        skew.clone() as Arc<dyn Clock>,
    );
    let secret = "sk_test_e2e".to_owned();
    let api = PaymentsApi::start(sim.clone(), &secret)?;
    let journal_path = work.join("journal.db");
    let journal = Arc::new(SqliteJournal::open(
        &journal_path,
        skew.clone() as Arc<dyn Clock>,
    )?);
    // The API's signed refund webhooks go to `interlock webhook serve`, which records them.
    let webhook_secret = "whsec_e2e";
    let hook_port = port + 10;
    let _receiver = ChildGuard(
        Command::new(&cli_bin)
            .args(["webhook", "serve", "--port", &hook_port.to_string()])
            .env("INTERLOCK_JOURNAL", &journal_path)
            .env("STRIPE_WEBHOOK_SECRET", webhook_secret)
            .stderr(std::fs::File::create(work.join("webhooks.log"))?)
            .spawn()
            .context("starting `interlock webhook serve`")?,
    );
    api.send_webhooks(&format!("http://127.0.0.1:{hook_port}/"), webhook_secret);
    let env = Env {
        server,
        sim,
        base_url: api.base_url.clone(),
        secret,
        journal,
        journal_path,
        skew,
        worker_bin,
        starter_bin,
        work: work.clone(),
    };
    let total = cases.len() * systems.len() * repeat as usize;
    let mut cells = Vec::new();
    let mut n = 0;
    for rep in 1..=repeat {
        for case in &cases {
            for (system, tier) in &systems {
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
    let command = if quick {
        "scripts/main-job --quick".to_owned()
    } else {
        format!("scripts/main-job (kill-matrix --repeat {repeat})")
    };
    let md = markdown(&cells, &command);
    let json = serde_json::json!({ "cells": cells, "systems": summarize(&cells) });
    std::fs::create_dir_all(&out_dir)?;
    std::fs::write(out_dir.join("e2e_matrix.md"), &md)?;
    std::fs::write(
        out_dir.join("e2e_matrix.json"),
        serde_json::to_string_pretty(&json)? + "\n",
    )?;
    eprintln!("\n{md}\nwrote {}", out_dir.join("e2e_matrix.md").display());
    let failed_gated = cells
        .iter()
        .filter(|c| c.system.starts_with("gated") && !c.held)
        .count();
    drop(api);
    if failed_gated > 0 {
        bail!("{failed_gated} gated cell(s) did not hold");
    }
    Ok(())
}
