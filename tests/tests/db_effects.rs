//! Database effects through the gate: a plan journaled, staged, measured, judged and committed
//! with its marker; recovered by the marker after the gate stopped between the commit and its
//! record; and staged once more, once, after a worker was SIGKILLed in the middle of its stage.
//! A lease revoked while a stage is under way stops it before its commit. The outbox: a call
//! exists only once its plan committed, and a relay SIGKILLed while its
//! refund is in flight leaves one refund, which the next relay delivers without sending again.
//! Judged by the shop database's own rows.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock::faults::FaultPoint;
use interlock::lease::Grant;
use interlock::premise::NoPremises;
use interlock::{
    Effect, EffectKey, Gate, GateConfig, GateError, ManualClock, Outcome, SqliteJournal, Via,
};
use interlock::{SystemClock, Tier};
use interlock_db::{Outbox, Outgoing, Policy, Receipt, SqliteDb, relay};
use interlock_stripe::{StripeConfig, StripeRefunds};
use interlock_testkit::faults::{Action, ScriptedFaults, Stall};
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use interlock_tests::db_shop::{self, AMOUNT, credit};

const T0: i64 = 1_700_000_000_000;
const LEASE: &str = "shop-ops";

struct Shop {
    _dir: tempfile::TempDir,
    shop: PathBuf,
    bound: interlock::Bound,
    clock: ManualClock,
    effect: Effect,
}

fn gate_over_shop(faults: Arc<ScriptedFaults>) -> Shop {
    let dir = tempfile::tempdir().unwrap();
    let shop = db_shop::create(dir.path()).unwrap();
    let journal_path = dir.path().join("journal.db");
    let clock = ManualClock::at(T0);
    let journal = Arc::new(SqliteJournal::open(&journal_path, Arc::new(clock.clone())).unwrap());
    journal
        .grant_lease(&Grant::new(LEASE, "ops", T0).unlimited())
        .unwrap();
    let mut cfg = GateConfig::beside(&journal_path);
    cfg.settle = Duration::from_millis(0);
    let gate = Gate::new(journal.clone(), journal, Arc::new(clock.clone()), cfg)
        .unwrap()
        .with_faults(faults);
    let db = SqliteDb::open(&shop, Policy::default()).unwrap();
    let bound = gate.bind(Arc::new(db), Arc::new(NoPremises)).unwrap();
    let effect = Effect::new(
        EffectKey::derive(&["cancel", "order-1"]),
        &db_shop::cancel_and_credit(0).unwrap().to_payload(),
        LEASE,
    )
    .unwrap();
    Shop {
        _dir: dir,
        shop,
        bound,
        clock,
        effect,
    }
}

/// A new shop database and a journal beside it, its lease granted now.
fn shop_and_journal() -> (tempfile::TempDir, PathBuf, PathBuf, Arc<SqliteJournal>) {
    let dir = tempfile::tempdir().unwrap();
    let shop = db_shop::create(dir.path()).unwrap();
    let journal_path = dir.path().join("journal.db");
    let journal = Arc::new(SqliteJournal::open(&journal_path, Arc::new(SystemClock)).unwrap());
    journal
        .grant_lease(&Grant::new(LEASE, "ops", interlock::Clock::now_ms(&SystemClock)).unlimited())
        .unwrap();
    (dir, shop, journal_path, journal)
}

/// SIGKILL `worker` once `reached` says it got to `what`; it must not end on its own first.
fn kill_when(mut worker: std::process::Child, what: &str, reached: impl Fn() -> bool) {
    let start = Instant::now();
    while !reached() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the worker never reached {what}"
        );
        if worker.try_wait().unwrap().is_some() {
            let out = worker.wait_with_output().unwrap();
            panic!(
                "the worker ended before it was killed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    worker.kill().unwrap(); // SIGKILL
    let status = worker.wait().unwrap();
    assert!(!status.success(), "killed, not finished: {status}");
}

#[test]
fn a_plan_submitted_twice_commits_once_and_the_retry_is_answered_from_the_journal() {
    let s = gate_over_shop(ScriptedFaults::new());
    let Outcome::Committed {
        result,
        replayed: false,
        ..
    } = s.bound.submit(&s.effect).unwrap()
    else {
        panic!("the first submit commits");
    };
    let receipt: Receipt = serde_json::from_value(result).unwrap();
    assert_eq!(receipt.diff.changes.len(), 2);
    assert!(matches!(
        s.bound.submit(&s.effect).unwrap(),
        Outcome::Committed { replayed: true, .. }
    ));
    assert_eq!(credit(&s.shop).unwrap(), AMOUNT);
}

#[test]
fn a_gate_stopped_between_the_commit_and_its_record_recovers_by_the_marker_and_credits_once() {
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterSend, Action::Crash);
    let s = gate_over_shop(faults);
    assert!(matches!(
        s.bound.submit(&s.effect),
        Err(GateError::Crashed(_))
    ));
    assert_eq!(
        credit(&s.shop).unwrap(),
        AMOUNT,
        "the stage committed before the stop"
    );
    s.clock.advance(60_000);
    match s.bound.submit(&s.effect).unwrap() {
        Outcome::Committed { via, result, .. } => {
            assert_eq!(
                via,
                Via::FoundByLookup,
                "known from the marker, not sent again"
            );
            let receipt: Receipt = serde_json::from_value(result).unwrap();
            assert!(receipt.diff_matches());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(credit(&s.shop).unwrap(), AMOUNT, "credited once");
}

#[test]
fn a_gate_stopped_before_the_stage_recovers_by_staging_it_once() {
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterDispatch, Action::Crash);
    let s = gate_over_shop(faults);
    assert!(matches!(
        s.bound.submit(&s.effect),
        Err(GateError::Crashed(_))
    ));
    assert_eq!(credit(&s.shop).unwrap(), 0, "nothing staged yet");
    s.clock.advance(60_000);
    assert!(matches!(
        s.bound.submit(&s.effect).unwrap(),
        Outcome::Committed { .. }
    ));
    assert_eq!(credit(&s.shop).unwrap(), AMOUNT);
}

#[test]
fn a_worker_killed_mid_stage_leaves_nothing_and_the_recoverer_stages_it_once() {
    let (_dir, shop, journal_path, journal) = shop_and_journal();
    let clock = Arc::new(SystemClock);
    // Long enough to be caught inside the stage (about a second), well inside the send timeout.
    let spin: u64 = 4_000_000;
    let send_timeout = Duration::from_secs(6);
    let worker = Command::new(env!("CARGO_BIN_EXE_db-stage-worker"))
        .arg("--journal")
        .arg(&journal_path)
        .arg("--shop")
        .arg(&shop)
        .args([
            "--key",
            "killed",
            "--lease",
            LEASE,
            "--spin",
            &spin.to_string(),
        ])
        .args(["--send-timeout-ms", &send_timeout.as_millis().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kill_when(worker, "its stage", || {
        db_shop::stage_under_way(&shop).unwrap()
    });
    assert_eq!(credit(&shop).unwrap(), 0, "a killed stage leaves nothing");

    // The same plan under the same key, from a gate in this process. The dead worker's stage
    // cannot land any more, but the gate does not assume that of a target: it looks, finds
    // nothing, and stages again only once the dead claim's deadline has passed.
    let mut cfg = GateConfig::beside(&journal_path);
    cfg.send_timeout = send_timeout;
    let gate = Gate::new(journal.clone(), journal, clock, cfg).unwrap();
    let db = SqliteDb::open(&shop, Policy::default()).unwrap();
    assert_eq!(interlock::Target::tier(&db), Tier::Two);
    let bound = gate.bind(Arc::new(db), Arc::new(NoPremises)).unwrap();
    let effect = Effect::new(
        EffectKey::derive(&["killed"]),
        &db_shop::cancel_and_credit(spin).unwrap().to_payload(),
        LEASE,
    )
    .unwrap();
    let retried = Instant::now();
    let outcome = loop {
        match bound.submit(&effect).unwrap() {
            Outcome::InFlight { retry_after, .. } if retried.elapsed() < 3 * send_timeout => {
                std::thread::sleep(retry_after.min(Duration::from_millis(500)));
            }
            other => break other,
        }
    };
    match outcome {
        Outcome::Committed { via, .. } => assert_eq!(via, Via::ReappliedAfterLookup),
        other => panic!("{other:?}"),
    }
    assert_eq!(credit(&shop).unwrap(), AMOUNT, "credited once");
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        Outcome::Committed { replayed: true, .. }
    ));
    assert_eq!(credit(&shop).unwrap(), AMOUNT);
}

/// A fact the plan was decided on, read by the gate's premise reader; the test moves it.
struct Stock(std::sync::atomic::AtomicI64);

impl interlock::PremiseReader for Stock {
    fn read(
        &self,
        _key: &EffectKey,
        _payload: &serde_json::Value,
    ) -> Result<interlock::core::Premises, interlock::PremiseError> {
        let mut p = interlock::core::Premises::new();
        p.insert(
            "stock".into(),
            self.0.load(std::sync::atomic::Ordering::SeqCst).into(),
        );
        Ok(p)
    }
}

/// Submit the shop's plan (decided on `stock` = 1) with a credit that counts for about a second
/// inside the stage, and do `meanwhile` once the stage is under way: the outcome, and the
/// customer's credit after.
fn staged_while(meanwhile: impl FnOnce(&SqliteJournal, &Stock)) -> (Outcome, i64) {
    let (_dir, shop, journal_path, journal) = shop_and_journal();
    let clock = Arc::new(SystemClock);
    let mut cfg = GateConfig::beside(&journal_path);
    cfg.send_timeout = Duration::from_secs(20);
    let gate = Gate::new(journal.clone(), journal.clone(), clock, cfg).unwrap();
    let db = SqliteDb::open(&shop, Policy::default()).unwrap();
    let stock = Arc::new(Stock(std::sync::atomic::AtomicI64::new(1)));
    let bound = gate.bind(Arc::new(db), stock.clone()).unwrap();
    let effect = Effect::new(
        EffectKey::derive(&["meanwhile"]),
        &db_shop::cancel_and_credit(4_000_000).unwrap().to_payload(),
        LEASE,
    )
    .unwrap()
    .premise("stock", 1);
    let outcome = std::thread::scope(|s| {
        let staging = s.spawn(|| bound.submit(&effect).unwrap());
        let start = Instant::now();
        while !db_shop::stage_under_way(&shop).unwrap() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the stage never began"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        meanwhile(&journal, &stock);
        staging.join().unwrap()
    });
    (outcome, credit(&shop).unwrap())
}

#[test]
fn a_lease_revoked_while_the_stage_is_under_way_stops_it_before_its_commit() {
    let (outcome, credited) =
        staged_while(|journal, _| assert!(journal.revoke_lease(LEASE).unwrap()));
    match outcome {
        Outcome::Failed(f) => assert_eq!(f.code, "lease_dead", "{f:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(credited, 0, "nothing landed after the revocation");
}

#[test]
fn a_premise_that_moves_while_the_stage_is_under_way_stops_it_before_its_commit() {
    let (outcome, credited) = staged_while(|_, stock| {
        stock.0.store(0, std::sync::atomic::Ordering::SeqCst);
    });
    match outcome {
        Outcome::Failed(f) => {
            assert_eq!(f.code, "premise_moved", "{f:?}");
            assert!(f.message.contains("stock"), "{f:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(credited, 0, "nothing landed on the moved fact");
}

#[test]
fn an_outbox_call_exists_only_once_its_plan_committed_and_the_relay_delivers_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let shop = db_shop::create(dir.path()).unwrap();
    let db = Arc::new(SqliteDb::open(&shop, interlock_tests::db_outbox::policy()).unwrap());
    let understated = db_shop::cancel_and_credit(0)
        .unwrap()
        .footprint([("orders".to_owned(), 1)].into());
    interlock_tests::db_outbox::outbox_round(
        db,
        understated,
        db_shop::cancel_and_credit(0).unwrap(),
    )
    .unwrap();
    assert_eq!(
        credit(&shop).unwrap(),
        AMOUNT,
        "the committed plan credited once"
    );
}

#[test]
fn relays_on_two_journals_over_one_database_send_an_outbox_call_once() {
    let dir = tempfile::tempdir().unwrap();
    let shop = db_shop::create(dir.path()).unwrap();
    let open = || Arc::new(SqliteDb::open(&shop, interlock_tests::db_outbox::policy()).unwrap());
    interlock_tests::db_outbox::two_journals_round(
        open(),
        open(),
        db_shop::cancel_and_credit(0).unwrap(),
    )
    .unwrap();
    assert_eq!(credit(&shop).unwrap(), AMOUNT, "credited once");
}

#[test]
fn an_outbox_row_rewritten_after_its_stage_is_not_relayed() {
    let dir = tempfile::tempdir().unwrap();
    let shop = db_shop::create(dir.path()).unwrap();
    let db = Arc::new(SqliteDb::open(&shop, interlock_tests::db_outbox::policy()).unwrap());
    interlock_tests::db_outbox::rewritten_round(
        db,
        db_shop::cancel_and_credit(0).unwrap(),
        |payload| {
            // A plain connection: no stage, no gate.
            rusqlite::Connection::open(&shop)
                .unwrap()
                .execute("UPDATE interlock_outbox SET payload = ?1", [payload])
                .unwrap();
        },
    )
    .unwrap();
}

#[test]
fn a_relay_killed_while_its_refund_is_in_flight_leaves_one_refund_which_the_next_relay_delivers() {
    const SECRET: &str = "sk_test_relay";
    let (_dir, shop, journal_path, journal) = shop_and_journal();
    let clock = Arc::new(SystemClock);
    let sim = SimPayments::new(Tier::One, Duration::from_secs(86_400), clock.clone());
    sim.add_payment("pi_relay", 10_000);
    let api = PaymentsApi::start(sim.clone(), SECRET).unwrap();
    let send_timeout = Duration::from_secs(3);
    let mut cfg = GateConfig::beside(&journal_path);
    cfg.send_timeout = send_timeout;
    let gate = Gate::new(journal.clone(), journal, clock, cfg).unwrap();

    // The plan commits, and with it the refund it asks for.
    let refunds_allowed = Policy {
        outbox: [(
            interlock_stripe::refunds::DEFAULT_NAME.to_owned(),
            [LEASE.to_owned()].into(),
        )]
        .into(),
        ..Policy::default()
    };
    let shop_db = Arc::new(SqliteDb::open(&shop, refunds_allowed).unwrap());
    let plan = db_shop::cancel_and_credit(0)
        .unwrap()
        .then_send(Outgoing {
            id: "refund".into(),
            target: interlock_stripe::refunds::DEFAULT_NAME.into(),
            lease: LEASE.into(),
            payload: serde_json::json!({"payment_intent": "pi_relay", "amount": 2000, "currency": "usd"}),
        })
        .unwrap();
    let staged = gate.bind(shop_db.clone(), Arc::new(NoPremises)).unwrap();
    let outcome = staged
        .submit(&Effect::new(EffectKey::derive(&["relayed"]), &plan.to_payload(), LEASE).unwrap())
        .unwrap();
    assert!(matches!(outcome, Outcome::Committed { .. }), "{outcome:?}");

    // A relay process sends the refund; the service holds it before applying; the relay dies.
    let stall = Stall::new();
    sim.hold_next(stall.clone());
    let worker = Command::new(env!("CARGO_BIN_EXE_db-relay-worker"))
        .arg("--journal")
        .arg(&journal_path)
        .arg("--shop")
        .arg(&shop)
        .args(["--api", &api.base_url, "--secret", SECRET])
        .args(["--send-timeout-ms", &send_timeout.as_millis().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kill_when(worker, "the service", || stall.reached());
    let start = Instant::now();
    // The request the dead relay sent still lands.
    stall.release();
    while sim.refunds("pi_relay").is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the held refund never landed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        shop_db.pending(0, 10).unwrap().len(),
        1,
        "the dead relay marked nothing"
    );

    // The next relay, in this process: the dead relay's claim is taken over at once (its process
    // is gone), and the gate recovers the delivery under the same key.
    let refunds = StripeRefunds::new(StripeConfig::new(&api.base_url, SECRET).unwrap());
    let pay = gate.bind(Arc::new(refunds), Arc::new(NoPremises)).unwrap();
    let targets = std::collections::BTreeMap::from([(
        interlock_stripe::refunds::DEFAULT_NAME.to_owned(),
        &pay,
    )]);
    let retried = Instant::now();
    let label = loop {
        let relayed = relay(&*shop_db, &targets, 10).unwrap();
        if let Some((_, label)) = relayed.delivered.first() {
            break label.clone();
        }
        assert!(
            retried.elapsed() < 4 * send_timeout,
            "never delivered: {relayed:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        ["COMMITTED/idempotent_resend", "COMMITTED/found_by_lookup"].contains(&label.as_str()),
        "the second relay resent under the same key or found the first's refund: {label}"
    );
    assert_eq!(sim.refunds("pi_relay").len(), 1, "refunded once");
    assert!(shop_db.pending(0, 10).unwrap().is_empty());
    assert_eq!(credit(&shop).unwrap(), AMOUNT);
}

/// A gate over the shop `shop` on the journal at `journal_path`, its lease granted now unless
/// the journal holds it.
fn gate_on(shop: &std::path::Path, journal_path: &std::path::Path) -> interlock::Bound {
    use interlock::LeaseStore as _;
    let journal = Arc::new(SqliteJournal::open(journal_path, Arc::new(SystemClock)).unwrap());
    if journal.describe(LEASE).unwrap().is_none() {
        journal
            .grant_lease(
                &Grant::new(LEASE, "ops", interlock::Clock::now_ms(&SystemClock)).unlimited(),
            )
            .unwrap();
    }
    let gate = Gate::new(
        journal.clone(),
        journal,
        Arc::new(SystemClock),
        GateConfig::beside(journal_path),
    )
    .unwrap();
    let db = SqliteDb::open(shop, Policy::default()).unwrap();
    gate.bind(Arc::new(db), Arc::new(NoPremises)).unwrap()
}

#[test]
fn another_plan_under_a_taken_key_is_refused_as_a_conflict_never_answered_committed() {
    // Two journals on one shop: A commits its plan under the key; B, knowing nothing of it,
    // submits another plan under the same key. B's plan never ran: its caller must not be told
    // it committed (found by the lookup of A's marker).
    let (dir, shop, journal_a, _) = shop_and_journal();
    let key = EffectKey::derive(&["cancel", "order-1"]);
    let a = gate_on(&shop, &journal_a);
    let first = Effect::new(
        key.clone(),
        &db_shop::cancel_and_credit(0).unwrap().to_payload(),
        LEASE,
    )
    .unwrap();
    assert!(matches!(
        a.submit(&first).unwrap(),
        Outcome::Committed { .. }
    ));
    let b = gate_on(&shop, &dir.path().join("journal-b.db"));
    let other = interlock_db::Plan::new(vec![interlock_db::Statement {
        name: "credit_customer".into(),
        sql: "UPDATE customers SET credit = credit + 777 WHERE id = 10".into(),
        params: Default::default(),
    }])
    .unwrap();
    let second = Effect::new(key, &other.to_payload(), LEASE).unwrap();
    let out = b.submit(&second).unwrap();
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == interlock::core::RefusalCode::TargetConflict),
        "another plan under the key: {out:?}"
    );
    assert_eq!(credit(&shop).unwrap(), AMOUNT, "only A's plan ran");
}
