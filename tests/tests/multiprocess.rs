//! Many OS processes (not threads) on one journal, against a slow refunds service over HTTP: one
//! dispatch and one refund however many submit at once; one resolution however many recover at
//! once; a SIGKILLed sender's claim taken over at once, a live sender's never. Each test runs on
//! an SQLite file the processes share, and on a PostgreSQL server that is all they share: each
//! process there claims under a host name of its own, so only the server's locks can tell them
//! apart.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock::core::Event;
use interlock::journal::{Journal, Record};
use interlock::premise::PremiseReader;
use interlock::{Clock, EffectKey, Grant, SqliteJournal, SystemClock, Tier};
use interlock_postgres::{PgJournal, PgOptions};
use interlock_stripe::{StripeConfig, StripeRefundPremises, StripeRefunds};
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::pg::Cluster;
use interlock_testkit::sim::SimPayments;
use interlock_tests::stores::Kind;
use serde_json::{Value, json};

const SECRET: &str = "sk_test_race";
const KEY: &str = "race-refund-1";

struct Race {
    kind: Kind,
    dir: tempfile::TempDir,
    journal: PathBuf,
    /// For PostgreSQL: the server and the schema.
    pg: Option<(String, String)>,
    workers: std::cell::Cell<usize>,
    sim: Arc<SimPayments>,
    api: PaymentsApi,
    premises: String,
    settle_ms: u64,
    send_timeout_ms: u64,
}

impl Race {
    fn new(kind: Kind, service_delay: Duration, settle_ms: u64, send_timeout_ms: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal.db");
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let grant =
            Grant::new("race-lease", "ops", clock.now_ms()).scope("payment_intent", "pi_race");
        let pg = match kind {
            Kind::Sqlite => {
                let j = SqliteJournal::open(&journal, clock.clone()).unwrap();
                j.grant_lease(&grant).unwrap();
                None
            }
            Kind::Postgres => {
                let cluster = Cluster::shared().unwrap();
                let schema = cluster.fresh_schema("race");
                let j =
                    PgJournal::open(cluster.url(), clock.clone(), &PgOptions::in_schema(&schema))
                        .unwrap();
                j.grant_lease(&grant).unwrap();
                Some((cluster.url().to_owned(), schema))
            }
        };
        let sim = SimPayments::new(Tier::Two, Duration::from_secs(86_400), clock);
        sim.add_payment("pi_race", 10_000);
        let api = PaymentsApi::start(sim.clone(), SECRET).unwrap();
        let target = StripeRefunds::new(StripeConfig::new(&api.base_url, SECRET).unwrap())
            .assume_tier(Tier::Two);
        let payload = json!({"payment_intent": "pi_race", "amount": 2000, "currency": "usd"});
        let decided = StripeRefundPremises(target)
            .read(&EffectKey::fixed(KEY).unwrap(), &payload)
            .unwrap();
        sim.set_delay(service_delay);
        Self {
            kind,
            dir,
            journal,
            pg,
            workers: std::cell::Cell::new(0),
            sim,
            api,
            premises: serde_json::to_string(&decided).unwrap(),
            settle_ms,
            send_timeout_ms,
        }
    }

    fn worker(&self, mode: &str, start_at_ms: i64, extra: &[&str]) -> Child {
        self.worker_for(KEY, mode, start_at_ms, extra)
    }

    /// Grant another lease in the shared journal, as an approver would.
    fn grant(&self, grant: &Grant) {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        match &self.pg {
            None => SqliteJournal::open(&self.journal, clock)
                .unwrap()
                .grant_lease(grant)
                .unwrap(),
            Some((url, schema)) => {
                PgJournal::open(url, clock, &PgOptions::in_schema(schema))
                    .unwrap()
                    .grant_lease(grant)
                    .unwrap();
            }
        }
    }

    fn worker_for(&self, key: &str, mode: &str, start_at_ms: i64, extra: &[&str]) -> Child {
        let n = self.workers.get();
        self.workers.set(n + 1);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_race-worker"));
        match &self.pg {
            None => cmd.arg("--journal").arg(&self.journal),
            // Shared: the server and nothing else. Each process its own host and lock directory.
            Some((url, schema)) => cmd
                .args(["--database-url", url, "--schema", schema])
                .args(["--host", &format!("host-{n}")])
                .current_dir(self.dir.path()),
        };
        cmd.args(["--api", &self.api.base_url])
            .args(["--secret", SECRET])
            .args(["--tier", "2"])
            .args(["--mode", mode])
            .args(["--key", key])
            .args(["--amount", "2000"])
            .args(["--premises", &self.premises])
            .args(["--start-at-ms", &start_at_ms.to_string()])
            .args(["--settle-ms", &self.settle_ms.to_string()])
            .args(["--send-timeout-ms", &self.send_timeout_ms.to_string()])
            .args(["--poll-ms", "20"])
            .args(["--give-up-ms", "20000"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn race-worker")
    }

    fn history(&self) -> Vec<Record> {
        let key = EffectKey::fixed(KEY).unwrap();
        match &self.pg {
            None => SqliteJournal::open(&self.journal, Arc::new(SystemClock))
                .unwrap()
                .history(&key)
                .unwrap(),
            Some((url, schema)) => {
                PgJournal::open(url, Arc::new(SystemClock), &PgOptions::in_schema(schema))
                    .unwrap()
                    .history(&key)
                    .unwrap()
            }
        }
    }

    /// How fast a SIGKILLed holder's claim must be taken: a lock file is seen free at once; a
    /// server session needs the server to notice the closed socket.
    fn takeover_bound_ms(&self) -> i64 {
        match self.kind {
            Kind::Sqlite => 500,
            Kind::Postgres => 100,
        }
    }
}

fn outcome(child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "worker failed: {:?}", out.status);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn count(records: &[Record], kind: &str) -> usize {
    records.iter().filter(|r| r.event.kind() == kind).count()
}

fn soon() -> i64 {
    SystemClock.now_ms() + 700
}

fn eight_processes_submitting_at_once_make_one_dispatch_and_one_refund(kind: Kind) {
    let race = Race::new(kind, Duration::from_millis(400), 300, 3000);
    let at = soon();
    let workers: Vec<_> = (0..8).map(|_| race.worker("submit", at, &[])).collect();
    let outcomes: Vec<Value> = workers.into_iter().map(outcome).collect();
    let h = race.history();
    assert_eq!(count(&h, "DISPATCHED"), 1, "{h:#?}");
    assert_eq!(count(&h, "COMMITTED"), 1);
    assert_eq!(race.sim.refunds("pi_race").len(), 1);
    assert!(
        outcomes
            .iter()
            .all(|o| o["outcome"].as_str().unwrap().starts_with("COMMITTED")),
        "{outcomes:?}"
    );
    let firsts = outcomes
        .iter()
        .filter(|o| o["outcome"] == "COMMITTED/first_send")
        .count();
    assert_eq!(firsts, 1, "{outcomes:?}");
}

fn eight_processes_with_keys_of_their_own_spend_a_three_use_approval_three_times(kind: Kind) {
    let race = Race::new(kind, Duration::from_millis(100), 300, 3000);
    race.grant(
        &Grant::new("three-refunds", "ops", SystemClock.now_ms())
            .scope("payment_intent", "pi_race")
            .uses(3),
    );
    let at = soon();
    let workers: Vec<_> = (0..8)
        .map(|i| {
            race.worker_for(
                &format!("race-use-{i}"),
                "submit",
                at,
                &["--lease", "three-refunds", "--no-premises"],
            )
        })
        .collect();
    let outcomes: Vec<Value> = workers.into_iter().map(outcome).collect();
    let label = |o: &Value| o["outcome"].as_str().unwrap().to_owned();
    let committed = outcomes
        .iter()
        .filter(|o| label(o).starts_with("COMMITTED"))
        .count();
    let spent = outcomes
        .iter()
        .filter(|o| label(o) == "REFUSED:lease_spent")
        .count();
    assert_eq!((committed, spent), (3, 5), "{outcomes:?}");
    // The payments API's own records: three refunds, each from a worker that was told so.
    assert_eq!(race.sim.refunds("pi_race").len(), 3);
}

fn after_a_crash_before_send_eight_recoverers_make_one_resolution(kind: Kind) {
    let race = Race::new(kind, Duration::from_millis(200), 300, 3000);
    let dying = race.worker("submit", 0, &["--die-at", "after_dispatch"]);
    let status = dying.wait_with_output().unwrap().status;
    assert_eq!(status.signal(), Some(9), "the sender died by SIGKILL");
    assert_eq!(count(&race.history(), "DISPATCHED"), 1);
    assert_eq!(
        race.sim.refunds("pi_race").len(),
        0,
        "it died before sending"
    );
    let at = soon();
    let workers: Vec<_> = (0..8).map(|_| race.worker("recover", at, &[])).collect();
    let outcomes: Vec<Value> = workers.into_iter().map(outcome).collect();
    let h = race.history();
    assert_eq!(count(&h, "COMMITTED"), 1, "{h:#?}");
    assert_eq!(race.sim.refunds("pi_race").len(), 1);
    let resends = h
        .iter()
        .filter(|r| matches!(&r.event, Event::Dispatched(d) if d.resend))
        .count();
    assert_eq!(resends, 1, "exactly one recoverer resent");
    assert!(
        outcomes
            .iter()
            .all(|o| o["outcome"].as_str().unwrap().starts_with("COMMITTED")),
        "{outcomes:?}"
    );
}

fn a_sigkilled_senders_claim_is_taken_over_at_once_and_its_request_is_not_sent_twice(kind: Kind) {
    // The service takes 1 s to apply a request; the settle margin (1.5 s) covers it.
    let race = Race::new(kind, Duration::from_millis(1000), 1500, 5000);
    let mut sender = race.worker("submit", 0, &[]);
    let recoverer = race.worker("recover", 0, &[]);
    let t0 = Instant::now();
    while race.sim.requests() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the sender never reached the service"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_at = SystemClock.now_ms();
    sender.kill().unwrap();
    assert_eq!(sender.wait().unwrap().signal(), Some(9));
    let o = outcome(recoverer);
    let h = race.history();
    let claimed = h.iter().find_map(|r| match &r.event {
        Event::Claimed(_) => Some(r.at_ms),
        _ => None,
    });
    let takeover_ms = claimed.expect("a recoverer took the claim") - killed_at;
    eprintln!(
        "takeover {takeover_ms} ms after SIGKILL; recoverer answered {}",
        o["outcome"]
    );
    assert!(
        takeover_ms < race.takeover_bound_ms(),
        "takeover took {takeover_ms} ms"
    );
    assert_eq!(o["outcome"], "COMMITTED/found_by_lookup", "{h:#?}");
    assert_eq!(race.sim.refunds("pi_race").len(), 1);
}

fn a_live_slow_senders_claim_is_never_taken_before_its_deadline(kind: Kind) {
    let race = Race::new(kind, Duration::from_millis(1500), 500, 3000);
    let sender = race.worker("submit", 0, &[]);
    let t0 = Instant::now();
    while race.sim.requests() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the sender never reached the service"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let recoverers: Vec<_> = (0..3).map(|_| race.worker("recover", 0, &[])).collect();
    assert_eq!(outcome(sender)["outcome"], "COMMITTED/first_send");
    for r in recoverers {
        assert_eq!(outcome(r)["outcome"], "COMMITTED/first_send(replayed)");
    }
    let h = race.history();
    assert_eq!(count(&h, "CLAIMED"), 0, "{h:#?}");
    assert_eq!(race.sim.refunds("pi_race").len(), 1);
}

interlock_tests::every_store!(
    eight_processes_with_keys_of_their_own_spend_a_three_use_approval_three_times,
    eight_processes_submitting_at_once_make_one_dispatch_and_one_refund,
    after_a_crash_before_send_eight_recoverers_make_one_resolution,
    a_sigkilled_senders_claim_is_taken_over_at_once_and_its_request_is_not_sent_twice,
    a_live_slow_senders_claim_is_never_taken_before_its_deadline,
);
