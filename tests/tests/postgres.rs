//! What only a journal on a database server can get wrong: a server that is down or restarts, a
//! schema that belongs to another version or deployment, liveness locks that a restart or a
//! crashed server process dropped while their holders lived, claims longer than a silent holder
//! keeps its lock, reads a dispatch sends with its transaction's start, and an answer sent with
//! its whole transaction that fails on the server.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use interlock::gate::ConfigError;
use interlock::premise::NoPremises;
use interlock::{
    Clock, Effect, EffectKey, GateConfig, GateError, Journal, JournalError, ManualClock, Outcome,
    SqliteJournal, Tier,
};
use interlock_postgres::{PgJournal, PgOptions, SILENT_HOLDER_KEPT};
use interlock_testkit::pg::Cluster;
use interlock_testkit::proxy::Proxy;
use interlock_tests::targets::Counting;
use serde_json::json;

fn clock() -> Arc<dyn Clock> {
    Arc::new(ManualClock::at(1_790_000_000_000))
}

#[test]
fn a_server_that_is_down_at_start_is_a_typed_error_naming_where_it_was_looked_for() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://ana:s3cret@127.0.0.1:{port}/payments");
    let err = PgJournal::open(&url, clock(), &PgOptions::default()).unwrap_err();
    assert!(matches!(err, JournalError::Unavailable { .. }), "{err}");
    assert!(err.is_transient());
    let msg = err.to_string();
    assert!(msg.contains(&format!("127.0.0.1:{port}/payments")), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
    let bad = PgJournal::open("postgres://db:port/x", clock(), &PgOptions::default()).unwrap_err();
    assert!(
        bad.to_string()
            .contains("postgres://user@host:port/database"),
        "{bad}"
    );
}

#[test]
fn a_schema_of_another_deployment_or_version_or_owner_is_refused_with_its_reason() {
    let cluster = Cluster::shared().unwrap();
    let url = cluster.url();
    let schema = cluster.fresh_schema("owned");
    PgJournal::open(url, clock(), &PgOptions::in_schema(&schema)).unwrap();
    let other = PgOptions {
        deployment: "eu".into(),
        ..PgOptions::in_schema(schema.as_str())
    };
    let err = PgJournal::open(url, clock(), &other).unwrap_err();
    assert!(err.to_string().contains("deployment \"default\""), "{err}");

    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "UPDATE {schema}.meta SET value = '99' WHERE name = 'schema_version'"
    ))
    .unwrap();
    let err = PgJournal::open(url, clock(), &PgOptions::in_schema(&schema)).unwrap_err();
    assert!(
        matches!(&err, JournalError::SchemaVersion { found, .. } if found == "99"),
        "{err}"
    );

    let foreign = cluster.fresh_schema("foreign");
    c.batch_execute(&format!(
        "CREATE SCHEMA {foreign}; CREATE TABLE {foreign}.orders (id INT)"
    ))
    .unwrap();
    let err = PgJournal::open(url, clock(), &PgOptions::in_schema(&foreign)).unwrap_err();
    assert!(matches!(err, JournalError::Foreign { .. }), "{err}");
    assert!(err.to_string().contains("orders"), "{err}");

    let err = PgJournal::open(url, clock(), &PgOptions::in_schema("Bad; DROP")).unwrap_err();
    assert!(err.to_string().contains("not usable"), "{err}");
}

#[test]
fn a_claim_longer_than_a_silent_holder_keeps_its_lock_is_refused() {
    let cluster = Cluster::shared().unwrap();
    let journal = Arc::new(
        PgJournal::open(
            cluster.url(),
            clock(),
            &PgOptions::in_schema(cluster.fresh_schema("claim")),
        )
        .unwrap(),
    );
    let too_long = GateConfig::shared_builder()
        .send_timeout(SILENT_HOLDER_KEPT)
        .build()
        .unwrap();
    let err =
        interlock::Gate::new(journal.clone(), journal.clone(), clock(), too_long).unwrap_err();
    assert!(
        matches!(
            &err,
            GateError::Config(ConfigError::ClaimOutlastsLiveness { .. })
        ),
        "{err}"
    );
    assert!(interlock::Gate::new(journal.clone(), journal, clock(), GateConfig::shared()).is_ok());
    // A journal without liveness of its own needs a lock directory.
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteJournal::open(dir.path().join("j.db"), clock()).unwrap());
    let err =
        interlock::Gate::new(sqlite.clone(), sqlite, clock(), GateConfig::shared()).unwrap_err();
    assert!(err.to_string().contains("lock directory"), "{err}");
}

#[test]
fn a_lock_lost_to_a_server_restart_is_never_taken_for_its_holders_death() {
    let mut cluster = Cluster::throwaway().unwrap();
    let journal =
        PgJournal::open(cluster.url(), clock(), &PgOptions::in_schema("interlock")).unwrap();
    let live = journal.liveness().unwrap();
    let held = live.try_hold("k", 1).unwrap().expect("a free lock");
    assert!(
        live.try_hold("k", 1).unwrap().is_none(),
        "one holder at a time"
    );
    assert!(!live.released("k", 1, "any-host").unwrap());
    drop(held);
    assert!(
        live.released("k", 1, "any-host").unwrap(),
        "a closed holder is seen at once"
    );

    let _held = live.try_hold("k", 2).unwrap().expect("a free lock");
    // The holder's claim commits after its lock, as DISPATCHED does (any durable commit will do).
    journal
        .grant_lease(&interlock::Grant::new("claim-stand-in", "ops", 0))
        .unwrap();
    cluster.crash_and_restart().unwrap();
    // The lock is gone with the restart, but its holder may be alive and sending.
    assert_eq!(judged_once_up(&*live, "k", 2), Some(false));
    // A stale attempt takes the same lock in the new lifetime, loses its race to append and lets
    // go: the holder that may still be sending must still not look dead.
    let stale = live
        .try_hold("k", 2)
        .unwrap()
        .expect("free since the restart");
    drop(stale);
    assert!(!live.released("k", 2, "any-host").unwrap());
    // And the journal works again on the restarted server.
    let fresh = live.try_hold("k", 3).unwrap();
    assert!(fresh.is_some());
}

/// Whether `live` judges `key`/`token` released, once the server answers again.
fn judged_once_up(live: &dyn interlock::liveness::Liveness, key: &str, token: u64) -> Option<bool> {
    for _ in 0..100 {
        match live.released(key, token, "any-host") {
            Ok(r) => return Some(r),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    None
}

fn start_time(url: &str) -> String {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.query_one("SELECT pg_postmaster_start_time()::text", &[])
        .unwrap()
        .get(0)
}

#[test]
fn a_lock_lost_to_a_crashed_server_process_is_never_taken_for_its_holders_death() {
    let cluster = Cluster::throwaway().unwrap();
    let journal =
        PgJournal::open(cluster.url(), clock(), &PgOptions::in_schema("interlock")).unwrap();
    let live = journal.liveness().unwrap();
    let _held = live.try_hold("k", 1).unwrap().expect("a free lock");
    journal
        .grant_lease(&interlock::Grant::new("claim-stand-in", "ops", 0))
        .unwrap();
    let started = start_time(cluster.url());
    // Any one server process dies (the kernel's OOM killer, a crash): the server ends every
    // session, the holder's lock with them, and carries on under the same start time.
    crash_one_server_process(cluster.url());
    assert_eq!(judged_once_up(&*live, "k", 1), Some(false));
    assert_eq!(
        start_time(cluster.url()),
        started,
        "the server's start time does not tell a crash"
    );
    // The journal works again, and a lock taken now is judged as before.
    let fresh = live.try_hold("k", 2).unwrap().expect("a free lock");
    drop(fresh);
    assert!(live.released("k", 2, "any-host").unwrap());
}

/// SIGKILL one server process: the server ends every session and starts again after a crash.
/// Returns once that has happened and the server takes connections again, so that what follows
/// is judged in the new state and never races the server's own reaction to the death.
fn crash_one_server_process(url: &str) {
    let mut victim = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let mut witness = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    // The witness session is ended by the server once it sees the death.
    while witness.simple_query("SELECT 1").is_ok() {
        assert!(
            Instant::now() < deadline,
            "the server never ended its other sessions after one process was killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Then it recovers ("the database system is in recovery mode" until it is done).
    while postgres::Client::connect(url, postgres::NoTls).is_err() {
        assert!(
            Instant::now() < deadline,
            "the server did not take connections again after a crash"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_hold_is_durable_before_its_lock_counts_as_taken() {
    // The WAL writer flushes no earlier than every 10 s: nothing but a commit that waits for the
    // disk makes the hold's row durable before the crash.
    let cluster = Cluster::throwaway_with(&["wal_writer_delay=10000"]).unwrap();
    let journal =
        PgJournal::open(cluster.url(), clock(), &PgOptions::in_schema("interlock")).unwrap();
    let live = journal.liveness().unwrap();
    let _held = live.try_hold("k", 1).unwrap().expect("a free lock");
    crash_one_server_process(cluster.url());
    assert_eq!(judged_once_up(&*live, "k", 1), Some(false));
    // Another attempt on the same token takes the lock in the new lifetime and lets go: had the
    // first hold's row been lost with the crash, this one's would make the lock look released
    // while its first holder may still be sending.
    drop(
        live.try_hold("k", 1)
            .unwrap()
            .expect("free since the crash"),
    );
    assert!(!live.released("k", 1, "any-host").unwrap());
}

#[test]
fn a_hold_from_before_the_lifetime_id_is_never_judged_released_and_a_worker_adds_the_id() {
    let cluster = Cluster::throwaway().unwrap();
    let opts = PgOptions::in_schema("interlock");
    let journal = PgJournal::open(cluster.url(), clock(), &opts).unwrap();
    let live = journal.liveness().unwrap();
    drop(live.try_hold("k", 1).unwrap().expect("a free lock"));
    assert!(live.released("k", 1, "any-host").unwrap());
    // The journal as an older release left it: holds with no lifetime id.
    let mut c = postgres::Client::connect(cluster.url(), postgres::NoTls).unwrap();
    c.batch_execute(
        "ALTER TABLE interlock.holds DROP COLUMN epoch; DROP TABLE interlock.server_epoch;",
    )
    .unwrap();
    assert!(
        live.released("k", 1, "any-host").is_err(),
        "a lock that cannot be judged is an error, which counts as held"
    );
    let reopened = PgJournal::open(cluster.url(), clock(), &opts).unwrap();
    let live = reopened.liveness().unwrap();
    assert!(!live.released("k", 1, "any-host").unwrap());
    drop(live.try_hold("k", 2).unwrap().expect("a free lock"));
    assert!(live.released("k", 2, "any-host").unwrap());
}

#[test]
fn a_server_restarted_mid_run_loses_nothing_and_sends_nothing_twice() {
    let mut cluster = Cluster::throwaway().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(interlock::SystemClock);
    let journal = Arc::new(
        PgJournal::open(
            cluster.url(),
            clock.clone(),
            &PgOptions::in_schema("interlock"),
        )
        .unwrap(),
    );
    journal
        .grant_lease(&interlock::Grant::new("ops", "ops@example", 0).unlimited())
        .unwrap();
    // Tier 2: nothing at the target dedupes, so each effect applied once is the gate's doing.
    let target = Counting::new(Tier::Two, Duration::from_millis(20));
    let effects = many_effects("restart", 200);
    let retried = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for part in effects.chunks(50) {
            let bound = gate(&journal, &clock, &target);
            let retried = &retried;
            s.spawn(move || {
                for e in part {
                    submit_until_final(&bound, e, retried);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        cluster.crash_and_restart().unwrap();
    });
    let recovered = each_committed_once(&journal, &effects, &target);
    eprintln!(
        "{} calls failed while the server restarted and were retried; {recovered} effects \
         recovered; {} requests for {} effects",
        retried.load(Ordering::SeqCst),
        target.sends.load(Ordering::SeqCst),
        effects.len()
    );
}

#[test]
fn a_worker_cut_off_from_the_server_keeps_its_claim_until_the_deadline_and_its_answer_lands_late() {
    let cluster = Cluster::shared().unwrap();
    let schema = cluster.fresh_schema("silent");
    let clock: Arc<dyn Clock> = Arc::new(interlock::SystemClock);
    let direct = Arc::new(
        PgJournal::open(cluster.url(), clock.clone(), &PgOptions::in_schema(&schema)).unwrap(),
    );
    direct
        .grant_lease(&interlock::Grant::new("ops", "ops@example", 0).unlimited())
        .unwrap();
    let proxy = Proxy::start(cluster.address().expect("the server's address")).unwrap();
    let behind = Arc::new(
        PgJournal::open(
            &format!("postgres://interlock@{}/postgres", proxy.addr()),
            clock.clone(),
            &PgOptions::in_schema(&schema),
        )
        .unwrap(),
    );
    let cfg = GateConfig::shared_builder()
        .send_timeout(Duration::from_millis(2000))
        .settle(Duration::from_millis(500))
        .retry_after(Duration::from_millis(50))
        .build()
        .unwrap();
    // Tier 2, 1.5 s to apply: the cut-off worker's request lands while it cannot write.
    let target = Counting::new(Tier::Two, Duration::from_millis(1500));
    let e = Effect::new(
        EffectKey::derive(&["silent"]),
        &json!({"amount": 2000, "currency": "usd"}),
        "ops",
    )
    .unwrap();
    let gate = |j: &Arc<PgJournal>, attempt: &str| {
        interlock::Gate::new(j.clone(), j.clone(), clock.clone(), cfg.clone())
            .unwrap()
            .with_attempt(attempt)
            .bind(target.clone(), Arc::new(NoPremises))
            .unwrap()
    };
    let cut_off = gate(&behind, "cut-off");
    let recoverer = gate(&direct, "recoverer");
    std::thread::scope(|s| {
        // However this ends, the cut-off worker gets its network back, so the test fails rather
        // than waits for it forever.
        let _heal = HealOnDrop(&proxy);
        let e1 = e.clone();
        let sender = s.spawn(move || cut_off.submit(&e1));
        let t0 = Instant::now();
        while target.sends.load(Ordering::SeqCst) == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the sender never sent"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        proxy.go_silent();
        let deadline = direct
            .history(&e.key)
            .unwrap()
            .iter()
            .find_map(|r| match &r.event {
                interlock::core::Event::Dispatched(d) => Some(d.deadline_ms),
                _ => None,
            })
            .expect("the sender's DISPATCHED is durable");
        let out = loop {
            let out = recoverer.submit(&e).unwrap();
            if out.is_final() {
                break out;
            }
            assert_eq!(
                target.sends.load(Ordering::SeqCst),
                1,
                "a second send while the holder was cut off"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
        let history = direct.history(&e.key).unwrap();
        let taken = history
            .iter()
            .find_map(|r| match &r.event {
                interlock::core::Event::Claimed(c) => Some((r.at_ms, c.reason)),
                _ => None,
            })
            .expect("the recoverer took the claim");
        assert_eq!(taken.1, interlock::core::TakeoverReason::DeadlinePassed);
        assert!(
            taken.0 >= deadline,
            "taken at {} before the deadline {deadline}",
            taken.0
        );
        proxy.heal();
        let late = sender.join().unwrap();
        eprintln!("the cut-off sender, healed, answered {late:?}");
    });
    let kinds: Vec<&str> = direct
        .history(&e.key)
        .unwrap()
        .iter()
        .map(|r| r.event.kind())
        .collect();
    assert!(kinds.contains(&"LATE_RESULT"), "{kinds:?}");
    assert_eq!(target.sends.load(Ordering::SeqCst), 1);
    assert_eq!(target.applications(), 1);
}

struct HealOnDrop<'a>(&'a Proxy);

impl Drop for HealOnDrop<'_> {
    fn drop(&mut self) {
        self.0.heal();
    }
}

/// Every connection is cut this often. An append needs a connection (a new one after a cut) and a
/// transaction to finish between two cuts: at 40 ms a machine whose PostgreSQL takes longer than
/// that to connect and append never lets one through, and the test measures the machine instead
/// of the journal (seen on a clean machine, at this commit and the ones before it). At 120 ms a
/// run still cuts hundreds of calls mid-append.
const CUT_EVERY_MS: u64 = 120;

#[test]
fn connections_cut_mid_append_lose_nothing_and_send_nothing_twice() {
    let cluster = Cluster::shared().unwrap();
    let schema = cluster.fresh_schema("cut");
    let clock: Arc<dyn Clock> = Arc::new(interlock::SystemClock);
    let proxy = Proxy::start(cluster.address().expect("the server's address")).unwrap();
    let journal = Arc::new(
        PgJournal::open(
            &format!("postgres://interlock@{}/postgres", proxy.addr()),
            clock.clone(),
            &PgOptions::in_schema(&schema),
        )
        .unwrap(),
    );
    journal
        .grant_lease(&interlock::Grant::new("ops", "ops@example", 0).unlimited())
        .unwrap();
    let target = Counting::new(Tier::Two, Duration::from_millis(5));
    let effects = many_effects("cut", 120);
    let done = AtomicBool::new(false);
    let retried = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let (done, retried, proxy) = (&done, &retried, &proxy);
        // Every connection cut every 40 ms, whatever it is doing, until the writers are done
        // (or one of them fails the test).
        let _stop = SetOnDrop(done);
        s.spawn(move || {
            while !done.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(CUT_EVERY_MS));
                proxy.cut();
            }
        });
        let workers: Vec<_> = effects
            .chunks(30)
            .map(|part| {
                // Binding reads the journal too: a cut there is retried like any other.
                let bound = (0..100)
                    .find_map(|_| try_gate(&journal, &clock, &target).ok())
                    .expect("bound within 100 tries");
                s.spawn(move || {
                    for e in part {
                        submit_until_final(&bound, e, retried);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    let direct =
        PgJournal::open(cluster.url(), clock.clone(), &PgOptions::in_schema(&schema)).unwrap();
    each_committed_once(&direct, &effects, &target);
    eprintln!(
        "{} calls failed on a cut connection and were retried; {} requests for {} effects",
        retried.load(Ordering::SeqCst),
        target.sends.load(Ordering::SeqCst),
        effects.len()
    );
}

/// A gate with short claims (so effects whose holders lost their locks resolve within a
/// second) over `journal`, bound to `target`.
fn gate(
    journal: &Arc<PgJournal>,
    clock: &Arc<dyn Clock>,
    target: &Arc<Counting>,
) -> interlock::Bound {
    try_gate(journal, clock, target).unwrap()
}

fn try_gate(
    journal: &Arc<PgJournal>,
    clock: &Arc<dyn Clock>,
    target: &Arc<Counting>,
) -> Result<interlock::Bound, GateError> {
    let cfg = GateConfig::shared_builder()
        .send_timeout(Duration::from_millis(800))
        .settle(Duration::from_millis(200))
        .retry_after(Duration::from_millis(50))
        .build()?;
    interlock::Gate::new(journal.clone(), journal.clone(), clock.clone(), cfg)?
        .bind(target.clone(), Arc::new(NoPremises))
}

fn many_effects(label: &str, n: usize) -> Vec<Effect> {
    (0..n)
        .map(|i| {
            Effect::new(
                EffectKey::derive(&[label, &i.to_string()]),
                &json!({"amount": i, "currency": "usd"}),
                "ops",
            )
            .unwrap()
        })
        .collect()
}

/// Submit `e` until it ends committed, retrying (and counting in `retried`) what a server away
/// or a cut connection makes fail; any other error fails the test.
fn submit_until_final(bound: &interlock::Bound, e: &Effect, retried: &AtomicUsize) {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < give_up, "effect {} never ended", e.key);
        match bound.submit(e) {
            Ok(out) if out.is_final() => {
                assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
                return;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
            Err(GateError::Journal(err)) if err.is_transient() => {
                retried.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
            // A lock session on a cut or restarted connection.
            Err(GateError::Locks { .. }) => {
                retried.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(other) => panic!("effect {}: {other}", e.key),
        }
    }
}

/// Every effect ended COMMITTED in `journal` and the target applied each exactly once. Returns
/// how many went through a takeover.
fn each_committed_once(journal: &PgJournal, effects: &[Effect], target: &Counting) -> usize {
    let mut recovered = 0;
    for e in effects {
        let history = journal.history(&e.key).unwrap();
        recovered += usize::from(history.iter().any(|r| r.event.kind() == "CLAIMED"));
        let last = history.last().map(|r| r.event.kind());
        assert_eq!(last, Some("COMMITTED"), "{}", e.key);
    }
    assert_eq!(
        target.applications(),
        effects.len(),
        "every effect applied exactly once"
    );
    recovered
}

struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_server_that_may_lose_acknowledged_commits_is_refused() {
    let cluster = Cluster::throwaway_with(&["fsync=off"]).unwrap();
    let err = PgJournal::open(cluster.url(), clock(), &PgOptions::default()).unwrap_err();
    assert!(err.to_string().contains("fsync off"), "{err}");
}

/// A journal in a fresh schema of the shared server.
fn fresh_journal(label: &str) -> (&'static Cluster, PgJournal, String) {
    let cluster = Cluster::shared().unwrap();
    let opts = PgOptions::in_schema(cluster.fresh_schema(label));
    let journal = PgJournal::open(cluster.url(), clock(), &opts).unwrap();
    (cluster, journal, opts.schema)
}

/// What a decision read of the leases, the key's route and the budgets inside its transaction.
#[derive(Debug, Default)]
struct Seen {
    named: Option<interlock::Grant>,
    other: Option<interlock::Grant>,
    routes: usize,
    budgets: Vec<String>,
}

/// An append on `key` that names `named` ahead (with the route and the budgets) and whose
/// decision reads `other`, then `named`, the route and the budgets, appending nothing.
fn read_in_append(journal: &PgJournal, key: &str, named: &str, other: &str) -> Seen {
    let key = EffectKey::fixed(key).unwrap();
    let ahead = interlock::journal::ReadsAhead {
        lease: Some(named),
        routes: true,
        budgets: true,
    };
    let mut seen = Seen::default();
    journal
        .append_reading(&key, &Default::default(), ahead, &mut |tx| {
            let leases = tx.leases.expect("the leases live in the journal");
            // The other first: an answer read ahead must not be handed to it.
            seen.other = leases.grant(other).unwrap();
            seen.named = leases.grant(named).unwrap();
            seen.routes = leases.routes(key.as_str()).unwrap().len();
            seen.budgets = leases
                .budgets()
                .unwrap()
                .into_iter()
                .map(|b| b.id)
                .collect();
            Vec::new()
        })
        .unwrap();
    seen
}

/// A lease, route and budgets sent with the transaction's start answer the decision as reading
/// them in the transaction would; a lease the decision asks for that was not named is read then.
#[test]
fn reads_sent_ahead_answer_as_the_transaction_and_another_lease_is_read_in_it() {
    let (_cluster, journal, _schema) = fresh_journal("ahead_answers");
    journal
        .grant_lease(&interlock::Grant::new("named", "ops", 1))
        .unwrap();
    journal
        .grant_lease(&interlock::Grant::new("other", "ops", 1))
        .unwrap();
    assert!(journal.revoke_lease("other").unwrap());
    journal
        .set_budget(&daily_count("per-day", 10), "finance@example")
        .unwrap();
    journal
        .route(
            "ahead-1",
            &interlock::approval::RouteStep {
                kind: interlock::approval::RouteKind::Routed,
                level: 0,
                group: "support".into(),
                reason: "needs_judgment".into(),
                repair_of: None,
                detail: serde_json::Value::Null,
            },
        )
        .unwrap();
    let seen = read_in_append(&journal, "ahead-1", "named", "other");
    let named = seen.named.expect("the named lease");
    assert_eq!((named.id.as_str(), named.revoked_ms), ("named", None));
    let other = seen
        .other
        .expect("the other lease, read in the transaction");
    assert_eq!(other.id, "other");
    assert!(other.revoked_ms.is_some(), "{other:?}");
    assert_eq!(seen.routes, 1, "the key's own route");
    assert_eq!(seen.budgets, ["per-day"]);
    // A lease named ahead that does not exist reads as none, as it would in the transaction.
    let seen = read_in_append(&journal, "ahead-2", "missing", "named");
    assert!(seen.named.is_none());
    assert_eq!(seen.routes, 0, "another key's route is not this one's");
    assert_eq!(seen.other.expect("read in the transaction").id, "named");
}

/// A revocation whose transaction is open when a dispatch starts: the lease read sent ahead
/// waits for it, so the decision sees the lease revoked. And once a dispatch has read a lease
/// ahead, a revocation waits for the dispatch's transaction to end.
#[test]
fn a_lease_read_ahead_is_ordered_against_revocations_both_ways() {
    let (cluster, journal, schema) = fresh_journal("ahead_revoke");
    for id in ["first", "second"] {
        journal
            .grant_lease(&interlock::Grant::new(id, "ops", 1))
            .unwrap();
    }
    let revoke = |id: &str| format!("UPDATE {schema}.leases SET revoked_ms = 2 WHERE id = '{id}'");
    let mut c = ::postgres::Client::connect(cluster.url(), ::postgres::NoTls).unwrap();
    let mut tx = c.transaction().unwrap();
    tx.execute(&revoke("first"), &[]).unwrap();
    let seen = std::thread::scope(|scope| {
        let reading = scope.spawn(|| read_in_append(&journal, "ahead-3", "first", "first"));
        assert!(
            waits_on_a_lock(cluster.url(), &schema, || reading.is_finished()),
            "the read sent ahead waits for the open revocation"
        );
        tx.commit().unwrap();
        reading.join().unwrap()
    });
    assert!(
        seen.named.expect("the lease").revoked_ms.is_some(),
        "a revocation that committed while the read waited is seen"
    );

    let key = EffectKey::fixed("ahead-4").unwrap();
    let ahead = interlock::journal::ReadsAhead {
        lease: Some("second"),
        ..Default::default()
    };
    let (url, sql) = (cluster.url().to_owned(), revoke("second"));
    let mut revoking = None;
    journal
        .append_reading(&key, &Default::default(), ahead, &mut |_tx| {
            let (url, sql) = (url.clone(), sql.clone());
            let r = std::thread::spawn(move || {
                let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
                c.execute(&sql, &[]).unwrap()
            });
            assert!(
                waits_on_a_lock(cluster.url(), &schema, || r.is_finished()),
                "a revocation never passes a lease read ahead while its transaction is open"
            );
            revoking = Some(r);
            Vec::new()
        })
        .unwrap();
    let revoked = revoking.expect("decided").join().unwrap();
    assert_eq!(
        revoked, 1,
        "the revocation went through once the transaction ended"
    );
}

/// Whether a statement on `schema`'s leases comes to wait on a lock within 5 s, while `done`
/// says the session that would wait has not finished.
fn waits_on_a_lock(url: &str, schema: &str, done: impl Fn() -> bool) -> bool {
    let mut watcher = ::postgres::Client::connect(url, ::postgres::NoTls).unwrap();
    let pattern = format!("%{schema}.leases%");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) && !done() {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE $1",
                &[&pattern],
            )
            .unwrap()
            .get(0);
        if waiting > 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A budget counting the effects of a UTC day.
fn daily_count(id: &str, max: i64) -> interlock::budget::Budget {
    use interlock::budget::{Budget, CalendarUnit, Limit, Window};
    Budget {
        id: id.into(),
        scope: std::collections::BTreeMap::new(),
        per: Vec::new(),
        window: Window::Calendar {
            unit: CalendarUnit::Day,
            utc_offset_minutes: 0,
        },
        limit: Limit::Count { max },
    }
}

#[test]
fn an_answer_whose_one_round_trip_fails_on_the_server_is_an_error_never_appended_again() {
    // An append sent whole may have committed when its failure comes back (a COMMIT whose
    // answer was lost): the journal returns the failure and never appends the decision again
    // by itself. Here the server ends the append's session inside its insert, once.
    let (cluster, journal, schema) = fresh_journal("at-head-fails");
    let journal = Arc::new(journal);
    journal
        .grant_lease(&interlock::Grant::new("ops", "ops@example", 0).unlimited())
        .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(interlock::SystemClock);
    let target = Counting::new(Tier::One, Duration::ZERO);
    let e = many_effects("at-head-fails", 1).remove(0);
    assert!(matches!(
        gate(&journal, &clock, &target).submit(&e).unwrap(),
        Outcome::Committed { .. }
    ));
    let seen = journal.read(&e.key).unwrap();
    let mut c = ::postgres::Client::connect(cluster.url(), ::postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "CREATE SEQUENCE {schema}.inserts;
         CREATE FUNCTION {schema}.end_first() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('{schema}.inserts') = 1 THEN
                 PERFORM pg_terminate_backend(pg_backend_pid());
             END IF;
             RETURN NULL;
         END $$;
         CREATE TRIGGER end_first AFTER INSERT ON {schema}.records
             FOR EACH STATEMENT EXECUTE FUNCTION {schema}.end_first();"
    ))
    .unwrap();
    let note = interlock::core::Event::Refused(interlock::core::transition::conflict_note(
        "late", "payload",
    ));
    let mut runs = 0;
    let failed = journal.append_on_records(&e.key, &seen, &mut |_| {
        runs += 1;
        vec![note.clone()]
    });
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(
        runs, 1,
        "decided once, and not appended again after the failure"
    );
    assert_eq!(journal.history(&e.key).unwrap().len(), seen.records().len());
    // The caller's next try appends it, once.
    let out = journal
        .append_on_records(&e.key, &seen, &mut |_| vec![note.clone()])
        .unwrap();
    assert_eq!(out.appended.len(), 1);
    assert_eq!(
        journal.history(&e.key).unwrap().len(),
        seen.records().len() + 1
    );
}
