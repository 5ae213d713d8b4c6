//! The journal benchmark's moving parts: a target that costs nothing (so what is measured is the
//! gate and its journal), the disk's own fsync rate to compare against, and senders that push
//! effects through one gate for a fixed time.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use interlock::core::{LookupAnswer, SendAnswer};
use interlock::premise::NoPremises;
use interlock::target::{SendRequest, Target};
use interlock::{
    Bound, Clock, Effect, EffectKey, Gate, GateConfig, Grant, Outcome, SqliteJournal, SystemClock,
    Tier,
};
use serde_json::{Value, json};

/// The lease every benchmark effect runs under.
pub const LEASE: &str = "bench";

/// A tier-1 target that answers at once and remembers nothing.
#[derive(Debug)]
pub struct NoOp;

impl Target for NoOp {
    fn name(&self) -> &str {
        "no-op"
    }
    fn tier(&self) -> Tier {
        Tier::One
    }
    fn dedupe_window(&self) -> Option<Duration> {
        Some(Duration::from_secs(86_400))
    }
    fn has_lookup(&self) -> bool {
        true
    }
    fn send(&self, _req: &SendRequest<'_>) -> SendAnswer {
        SendAnswer::Done(json!({"id": "re_noop"}))
    }
    fn lookup(&self, _key: &EffectKey, _payload: &Value) -> LookupAnswer {
        LookupAnswer::NotFound
    }
}

/// Syncs per second of one small durable write in `dir`: `overwrite` rewrites one 4 KiB block in
/// place (the cheapest durable write the disk allows), otherwise 512 bytes are appended (each
/// sync then also commits the file's new size).
pub fn fsync_rate(dir: &Path, budget: Duration, overwrite: bool) -> anyhow::Result<(f64, u64)> {
    let path = dir.join("fsync-probe");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    let block = vec![7u8; if overwrite { 4096 } else { 512 }];
    if overwrite {
        f.write_all(&block)?;
        f.sync_all()?;
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        if overwrite {
            f.write_all_at(&block, 0)?;
        } else {
            f.write_all(&block)?;
        }
        f.sync_data()?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    std::fs::remove_file(&path)?;
    Ok((rate, n))
}

/// The cheapest durable SQLite transaction in `dir`, with the journal's own settings (WAL,
/// `synchronous = FULL`): one 200-byte row inserted per transaction. This is the floor the
/// journal stands on: no journal commit can be faster or cost less CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommitProbe {
    /// Commits per second.
    pub per_s: f64,
    /// This process's CPU time per commit (user and kernel), in ms.
    pub cpu_ms: f64,
}

/// [`CommitProbe`] for `budget` of commits one after another in `dir`.
pub fn sqlite_commit_probe(dir: &Path, budget: Duration) -> anyhow::Result<CommitProbe> {
    let path = dir.join("commit-probe.db");
    let conn = rusqlite::Connection::open(&path)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
    )?;
    let body = "x".repeat(200);
    let mut insert = conn.prepare("INSERT INTO t (body) VALUES (?1)")?;
    let (start, cpu) = (Instant::now(), cpu_time());
    let mut n = 0u64;
    while start.elapsed() < budget {
        insert.execute([&body])?;
        n += 1;
    }
    let probe = CommitProbe {
        per_s: n as f64 / start.elapsed().as_secs_f64(),
        cpu_ms: cpu_time().saturating_sub(cpu).as_secs_f64() * 1000.0 / n.max(1) as f64,
    };
    drop(insert);
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("commit-probe.db{suffix}")));
    }
    Ok(probe)
}

/// A gate over the journal at `path` (with the benchmark lease granted when `grant`), bound to
/// the no-op target. Returns the journal too, for its commit count.
pub fn bound(path: &Path, grant: bool) -> anyhow::Result<(Bound, Arc<SqliteJournal>)> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(path, clock.clone())?);
    if grant {
        journal.grant_lease(&Grant::new(LEASE, "ops", clock.now_ms()).unlimited())?;
    }
    let gate = Gate::new(
        journal.clone(),
        journal.clone(),
        clock,
        GateConfig::beside(path),
    )?;
    Ok((gate.bind(Arc::new(NoOp), Arc::new(NoPremises))?, journal))
}

/// Three budgets that match every benchmark effect and never refuse one: a count per rolling
/// hour over the target, a sum of `amount` per calendar day over the currency, and a count per
/// rolling minute for each currency. What they cost is what the gate does for every budget an
/// effect matches: read its places in the window inside the dispatch transaction, and take one.
pub fn three_budgets() -> Vec<interlock::budget::Budget> {
    use interlock::budget::{Budget, CalendarUnit, Limit, Window};
    let never = 1_000_000_000_000;
    vec![
        Budget {
            id: "bench-hourly".into(),
            scope: [("target".to_owned(), json!("no-op"))].into(),
            per: Vec::new(),
            window: Window::Rolling { ms: 3_600_000 },
            limit: Limit::Count { max: never },
        },
        Budget {
            id: "bench-daily-sum".into(),
            scope: [("currency".to_owned(), json!("usd"))].into(),
            per: Vec::new(),
            window: Window::Calendar {
                unit: CalendarUnit::Day,
                utc_offset_minutes: 0,
            },
            limit: Limit::Sum {
                field: "amount".into(),
                max: never,
            },
        },
        Budget {
            id: "bench-per-currency".into(),
            scope: std::collections::BTreeMap::new(),
            per: vec!["currency".into()],
            window: Window::Rolling { ms: 60_000 },
            limit: Limit::Count { max: never },
        },
    ]
}

/// [`bound`] with the benchmark lease granted and, when `budgets`, [`three_budgets`] set.
pub fn bound_with_budgets(
    path: &Path,
    budgets: bool,
) -> anyhow::Result<(Bound, Arc<SqliteJournal>)> {
    let (b, journal) = bound(path, true)?;
    if budgets {
        for budget in three_budgets() {
            journal.set_budget(&budget, "bench")?;
        }
    }
    Ok((b, journal))
}

/// The PostgreSQL server's own commit rate: one small row inserted and committed per
/// transaction (`synchronous_commit = on`, as the journal commits) on one connection.
pub fn pg_commit_rate(url: &str, budget: Duration) -> anyhow::Result<f64> {
    let mut c = postgres::Client::connect(url, postgres::NoTls)?;
    c.batch_execute(
        "SET synchronous_commit = on;
         DROP TABLE IF EXISTS bench_commit_probe;
         CREATE TABLE bench_commit_probe (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);",
    )?;
    let body = "x".repeat(200);
    let insert = c.prepare("INSERT INTO bench_commit_probe (body) VALUES ($1)")?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        c.execute(&insert, &[&body])?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    c.batch_execute("DROP TABLE bench_commit_probe")?;
    Ok(rate)
}

/// The times the server at `url` has synced its log to disk (`pg_stat_wal`), counted only where
/// it syncs by call (`wal_sync_method` `fdatasync`, `fsync` or `fsync_writethrough`).
pub fn pg_wal_syncs(url: &str) -> anyhow::Result<i64> {
    let mut c = postgres::Client::connect(url, postgres::NoTls)?;
    Ok(
        c.query_one("SELECT wal_sync FROM pg_catalog.pg_stat_wal", &[])?
            .get(0),
    )
}

/// [`pg_wal_syncs`] once the count has not moved for 300 ms (server processes that are ending add
/// theirs as they end), or after 5 s.
pub fn pg_wal_syncs_settled(url: &str) -> anyhow::Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = pg_wal_syncs(url)?;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = pg_wal_syncs(url)?;
        if now == last || Instant::now() > deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// A gate over a PostgreSQL journal in `schema` (the benchmark lease granted), bound to the
/// no-op target, with room for `senders` concurrent senders.
pub fn pg_bound(
    url: &str,
    schema: &str,
    senders: u32,
) -> anyhow::Result<(Bound, Arc<interlock_postgres::PgJournal>)> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let opts = interlock_postgres::PgOptions {
        pool_size: senders + 4,
        ..interlock_postgres::PgOptions::in_schema(schema)
    };
    let journal = Arc::new(interlock_postgres::PgJournal::open(
        url,
        clock.clone(),
        &opts,
    )?);
    journal.grant_lease(&Grant::new(LEASE, "ops", clock.now_ms()).unlimited())?;
    let gate = Gate::new(
        journal.clone(),
        journal.clone(),
        clock,
        GateConfig::shared(),
    )?;
    Ok((gate.bind(Arc::new(NoOp), Arc::new(NoPremises))?, journal))
}

/// One effect through the gate; anything but a first commit is an error.
pub fn one_effect(bound: &Bound, sender: &str, i: u64) -> anyhow::Result<()> {
    let key = EffectKey::derive(&[sender.to_owned(), i.to_string()]);
    let effect = Effect::new(key, &json!({"amount": i, "currency": "usd"}), LEASE)?;
    match bound.submit(&effect)? {
        Outcome::Committed {
            replayed: false, ..
        } => Ok(()),
        other => anyhow::bail!("effect {sender}/{i}: {other:?}"),
    }
}

/// `senders` threads sharing `bound`, each sending effects until `for_how_long` has passed.
/// Returns the effects committed and the wall time they took.
pub fn threads(
    bound: &Bound,
    senders: usize,
    run: &str,
    for_how_long: Duration,
) -> anyhow::Result<(u64, Duration)> {
    let barrier = Barrier::new(senders + 1);
    let (done, start) = std::thread::scope(|s| -> anyhow::Result<(u64, Instant)> {
        let handles: Vec<_> = (0..senders)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || -> anyhow::Result<u64> {
                    let sender = format!("{run}-t{t}");
                    barrier.wait();
                    let start = Instant::now();
                    let mut i = 0;
                    while start.elapsed() < for_how_long {
                        one_effect(bound, &sender, i)?;
                        i += 1;
                    }
                    Ok(i)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut done = 0;
        for h in handles {
            done += h
                .join()
                .map_err(|_| anyhow::anyhow!("a sender thread panicked"))??;
        }
        Ok((done, start))
    })?;
    Ok((done, start.elapsed()))
}

/// The value at percentile `p` of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// CPU time this process has used so far (user and system, every thread, living or ended), from
/// `/proc/self/stat`; zero where that cannot be read.
pub fn cpu_time() -> Duration {
    let (user, system) = user_and_system_time();
    user + system
}

/// CPU time this process has used so far in user space and in the kernel (every thread, living
/// or ended), from `/proc/self/stat`; zeros where that cannot be read.
pub fn user_and_system_time() -> (Duration, Duration) {
    // Fields after the command name (which may hold spaces, so split after its closing paren):
    // utime and stime are the 12th and 13th, in clock ticks of 1/100 s on Linux.
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (Duration::ZERO, Duration::ZERO);
    };
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let mut ticks = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse::<u64>().unwrap_or(0));
    let mut next = || Duration::from_millis(ticks.next().unwrap_or(0) * 10);
    (next(), next())
}

/// Seconds of CPU the whole machine has spent busy so far (every process, user and kernel, not
/// idle or waiting for the disk), from the first line of `/proc/stat` in ticks of 1/100 s.
pub fn machine_busy() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let (Some(idle), Some(iowait)) = (ticks.get(3), ticks.get(4)) else {
        anyhow::bail!("/proc/stat's first line has no idle and iowait columns");
    };
    let total: u64 = ticks.iter().take(8).sum();
    Ok(total.saturating_sub(idle + iowait) as f64 / 100.0)
}
