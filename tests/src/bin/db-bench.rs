//! Benchmark: what staging a database effect adds. The same single-row update, run as a plain
//! transaction and as a plan through the substrate (stage, trigger measurement, checks, marker,
//! commit), side by side in one run, on SQLite (a file with WAL and `synchronous = FULL`) and on
//! PostgreSQL (a throwaway server, or `INTERLOCK_DATABASE_URL`'s). Rounds alternate which goes
//! first; each round's added latency is its staged p50 minus its plain p50, and the figure is the
//! median of the rounds (min–max). Writes `results/bench_db.json` and regenerates
//! `docs/benchmarks.md`; `--quick` runs briefly and writes nothing (CI keeps it from rotting).

#![allow(clippy::print_stdout)] // a benchmark's report is its output

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use interlock::EffectKey;
use interlock::target::{SendAnswer, SendRequest, Target};
use interlock_db::postgres::{allow as pg_allow, install as pg_install};
use interlock_db::{PgDb, PgDbOptions, Plan, Policy, SqliteDb, Statement};
use interlock_testkit::bench_report::round;
use interlock_testkit::pg::Cluster;
use serde_json::{Value, json};

/// Staged against plain, on both substrates.
#[derive(clap::Parser)]
struct Args {
    /// A short run, printed and not written.
    #[arg(long)]
    quick: bool,
}

const ROUNDS: usize = 5;

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let (rounds, per_round) = if args.quick { (1, 20) } else { (ROUNDS, 300) };
    let dir = tempfile::tempdir()?;
    let sqlite = sqlite_rounds(dir.path(), rounds, per_round)?;
    let postgres = postgres_rounds(rounds, per_round)?;
    let report = json!({
        "rounds": rounds,
        "updates_per_round": per_round,
        "update": "UPDATE customers SET credit = credit + :amount WHERE id = :customer (one row, one observed table)",
        "sqlite": sqlite,
        "postgres": postgres,
        "goal_added_p50_ms": { "sqlite": 1.0, "postgres": 2.0 },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    if !args.quick {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        std::fs::write(
            root.join("results/bench_db.json"),
            serde_json::to_string_pretty(&report)? + "\n",
        )?;
        std::fs::write(
            root.join("docs/benchmarks.md"),
            interlock_testkit::bench_report::render_all(&root),
        )?;
        eprintln!("wrote results/bench_db.json and docs/benchmarks.md");
    }
    Ok(())
}

fn credit_plan(n: u64) -> anyhow::Result<Plan> {
    Ok(Plan::new(vec![Statement {
        name: "credit_customer".into(),
        sql: "UPDATE customers SET credit = credit + :amount WHERE id = :customer".into(),
        params: [
            ("amount".to_owned(), json!(1 + n % 7)),
            ("customer".to_owned(), json!(10)),
        ]
        .into(),
    }])?)
}

/// One staged update under a fresh key.
fn staged(db: &dyn Target, run: &str, n: u64) -> anyhow::Result<Duration> {
    let key = EffectKey::derive(&[run, &n.to_string()]);
    let payload = credit_plan(n)?.to_payload();
    let t = Instant::now();
    let answer = db.send(&SendRequest {
        key: &key,
        payload: &payload,
        timeout: Duration::from_secs(10),
        deadline: None,
        last_look: None,
    });
    let took = t.elapsed();
    anyhow::ensure!(
        matches!(answer, SendAnswer::Done(_)),
        "staged update {n}: {answer:?}"
    );
    Ok(took)
}

/// Each round's p50s and the added latency, over `rounds` rounds of `per_round` updates each
/// way, the order alternating.
fn rounds_of(
    rounds: usize,
    per_round: usize,
    mut plain: impl FnMut(u64) -> anyhow::Result<Duration>,
    mut staged: impl FnMut(&str, u64) -> anyhow::Result<Duration>,
) -> anyhow::Result<Value> {
    let mut rows = Vec::new();
    for r in 0..rounds {
        let mut p = Vec::with_capacity(per_round);
        let mut s = Vec::with_capacity(per_round);
        let run = format!("r{r}");
        let mut plain_side = |p: &mut Vec<f64>| -> anyhow::Result<()> {
            for n in 0..per_round as u64 {
                p.push(ms(plain(n)?));
            }
            Ok(())
        };
        let mut staged_side = |s: &mut Vec<f64>| -> anyhow::Result<()> {
            for n in 0..per_round as u64 {
                s.push(ms(staged(&run, n)?));
            }
            Ok(())
        };
        if r % 2 == 0 {
            plain_side(&mut p)?;
            staged_side(&mut s)?;
        } else {
            staged_side(&mut s)?;
            plain_side(&mut p)?;
        }
        let (p50p, p99p) = (pct(&mut p, 0.5), pct(&mut p, 0.99));
        let (p50s, p99s) = (pct(&mut s, 0.5), pct(&mut s, 0.99));
        eprintln!(
            "round {}: plain p50 {p50p:.3} ms, staged p50 {p50s:.3} ms",
            r + 1
        );
        rows.push(json!({
            "plain_p50_ms": round(p50p, 3), "plain_p99_ms": round(p99p, 3),
            "staged_p50_ms": round(p50s, 3), "staged_p99_ms": round(p99s, 3),
            "added_p50_ms": round(p50s - p50p, 3),
        }));
    }
    let field = |name: &str| {
        let mut xs: Vec<f64> = rows.iter().filter_map(|r| r[name].as_f64()).collect();
        spread(&mut xs)
    };
    Ok(json!({
        "plain_p50_ms": field("plain_p50_ms"),
        "staged_p50_ms": field("staged_p50_ms"),
        "plain_p99_ms": field("plain_p99_ms"),
        "staged_p99_ms": field("staged_p99_ms"),
        "added_p50_ms": field("added_p50_ms"),
        "rounds": rows,
    }))
}

fn sqlite_rounds(dir: &Path, rounds: usize, per_round: usize) -> anyhow::Result<Value> {
    let path = dir.join("shop.db");
    {
        let mut conn = rusqlite::Connection::open(&path)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE customers (id INTEGER PRIMARY KEY, credit INTEGER NOT NULL);
             INSERT INTO customers VALUES (10, 0);",
        )?;
        interlock_db::sqlite::install(&mut conn, &["customers"])?;
    }
    let plain_conn = rusqlite::Connection::open(&path)?;
    let db = SqliteDb::open(&path, Policy::default())?;
    // Both connections with the same durability: a commit is on disk when it returns.
    plain_conn.pragma_update(None, "synchronous", "FULL")?;
    db_full_sync(&path)?;
    let plain = |n: u64| -> anyhow::Result<Duration> {
        let t = Instant::now();
        plain_conn.execute_batch("BEGIN IMMEDIATE")?;
        plain_conn.execute(
            "UPDATE customers SET credit = credit + ?1 WHERE id = 10",
            [1 + n as i64 % 7],
        )?;
        plain_conn.execute_batch("COMMIT")?;
        Ok(t.elapsed())
    };
    rounds_of(rounds, per_round, plain, |run, n| staged(&db, run, n)).context("the SQLite rounds")
}

/// `synchronous = FULL` as the database's own setting for new connections is not a thing in
/// SQLite; WAL mode's default (`FULL` unless compiled otherwise) is what the substrate's
/// connection gets, and this checks it.
fn db_full_sync(path: &Path) -> anyhow::Result<()> {
    let conn = rusqlite::Connection::open(path)?;
    let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    anyhow::ensure!(
        sync >= 2,
        "the substrate's connection runs with synchronous = {sync}, not FULL; the comparison would not be like for like"
    );
    Ok(())
}

fn postgres_rounds(rounds: usize, per_round: usize) -> anyhow::Result<Value> {
    let cluster = Cluster::shared().context("a PostgreSQL server for the benchmark")?;
    let tables = cluster.fresh_schema("db_bench");
    let mut options = PgDbOptions {
        schema: format!("interlock_{}", cluster.fresh_schema("db_bench")),
        search_path: Some(tables.clone()),
        plans_are_trusted: false,
        stage_key: None,
    };
    // Staged as users are told to: by a confined role, checked as the target opens.
    let stager = format!("{tables}_stager");
    let mut client = postgres::Client::connect(cluster.url(), postgres::NoTls)?;
    client.batch_execute(&format!(
        "CREATE SCHEMA {tables}; SET search_path TO {tables};
         CREATE TABLE customers (id INT PRIMARY KEY, credit BIGINT NOT NULL);
         INSERT INTO customers VALUES (10, 0);
         CREATE ROLE {stager} LOGIN PASSWORD 'stager';
         GRANT USAGE ON SCHEMA {tables} TO {stager};
         GRANT SELECT, UPDATE ON customers TO {stager};"
    ))?;
    options.stage_key = Some(pg_install(&mut client, &options.schema, &["customers"])?);
    pg_allow(&mut client, &options.schema, &stager)?;
    let db = PgDb::open(
        &cluster.url_as(&stager, "stager"),
        options,
        Policy::default(),
    )?;
    let update = client.prepare("UPDATE customers SET credit = credit + $1 WHERE id = 10")?;
    let mut plain = |n: u64| -> anyhow::Result<Duration> {
        let t = Instant::now();
        let mut tx = client.transaction()?;
        tx.execute(&update, &[&(1 + n as i64 % 7)])?;
        tx.commit()?;
        Ok(t.elapsed())
    };
    rounds_of(rounds, per_round, &mut plain, |run, n| staged(&db, run, n))
        .context("the PostgreSQL rounds")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `q` quantile of `xs` (sorted in place).
fn pct(xs: &mut [f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let i = ((xs.len() - 1) as f64 * q).round() as usize;
    xs[i.min(xs.len() - 1)]
}

fn spread(xs: &mut [f64]) -> Value {
    if xs.is_empty() {
        return Value::Null;
    }
    xs.sort_by(f64::total_cmp);
    json!({
        "median": round(xs[xs.len() / 2], 3),
        "min": round(xs[0], 3),
        "max": round(xs[xs.len() - 1], 3),
    })
}
