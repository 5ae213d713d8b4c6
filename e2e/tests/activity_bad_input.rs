//! Bad input to the gated refund activity, through the same components the worker uses (the
//! Stripe target and refund premises over HTTP, the SQLite journal) and the same mapping to
//! Temporal failures: an unknown payment, a malformed payload, the payments API down, the journal
//! unwritable — each a typed failure, retryable or not as it should be, nothing sent, no panic.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::time::Duration;

use interlock::{Effect, EffectKey, Gate, GateConfig, Grant, SqliteJournal, SystemClock, Tier};
use interlock_stripe::RefundPremises;
use interlock_stripe::{StripeConfig, StripeRefundPremises, StripeRefunds};
use interlock_temporal::{Failure, IN_FLIGHT, JOURNAL, REFUSED, verdict};
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use serde_json::{Value, json};

struct Rig {
    dir: tempfile::TempDir,
    sim: Arc<SimPayments>,
    api: PaymentsApi,
}

fn rig() -> Rig {
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(86_400),
        Arc::new(SystemClock),
    );
    sim.add_payment("pi_1", 10_000);
    let api = PaymentsApi::start(sim.clone(), "sk").unwrap();
    Rig {
        dir: tempfile::tempdir().unwrap(),
        sim,
        api,
    }
}

fn attempt(
    rig: &Rig,
    base: &str,
    journal: Arc<SqliteJournal>,
    payload: Value,
) -> Result<(), Failure> {
    let target = StripeRefunds::new(StripeConfig::new(base, "sk").unwrap());
    let premises = RefundPremises {
        stripe: StripeRefundPremises(target.clone()),
        shop: Some(base.to_owned()),
    };
    let mut cfg = GateConfig::beside(rig.dir.path().join("j.db"));
    cfg.send_timeout = Duration::from_secs(2);
    cfg.settle = Duration::from_millis(100);
    let gate = Gate::new(journal.clone(), journal, Arc::new(SystemClock), cfg).unwrap();
    let bound = gate.bind(Arc::new(target), Arc::new(premises)).unwrap();
    let key = EffectKey::derive(&["wf", "refund"]);
    let decided = [
        ("refunded_by_others".to_owned(), json!(0)),
        ("amount_paid".to_owned(), json!(10_000)),
        ("order_eligible".to_owned(), json!(true)),
    ]
    .into_iter()
    .collect();
    let effect = Effect {
        key: key.clone(),
        payload,
        decided,
        lease: "l".into(),
        labels: Default::default(),
    };
    verdict(&key, 1, bound.submit(&effect)).map(|_| ())
}

fn journal(rig: &Rig) -> Arc<SqliteJournal> {
    let j =
        Arc::new(SqliteJournal::open(rig.dir.path().join("j.db"), Arc::new(SystemClock)).unwrap());
    let _ = j.grant_lease(&Grant::new("l", "ops", 0));
    j
}

#[test]
fn an_unknown_payment_is_refused_for_good_and_nothing_is_sent() {
    let r = rig();
    let f = attempt(
        &r,
        &r.api.base_url,
        journal(&r),
        json!({"payment_intent": "pi_nope", "amount": 2000, "currency": "usd"}),
    )
    .unwrap_err();
    assert_eq!((f.type_name, f.retryable), (REFUSED, false), "{f:?}");
    assert!(f.message.contains("premise_error"), "{}", f.message);
    assert_eq!(r.sim.requests(), 0);
}

#[test]
fn a_malformed_payload_is_refused_for_good_and_nothing_is_sent() {
    let r = rig();
    let f = attempt(
        &r,
        &r.api.base_url,
        journal(&r),
        json!({"payment_intent": "pi_1", "amount": "twenty"}),
    )
    .unwrap_err();
    assert_eq!((f.type_name, f.retryable), (REFUSED, false), "{f:?}");
    assert_eq!(r.sim.requests(), 0);
}

#[test]
fn the_payments_api_down_is_retryable_and_nothing_is_sent_twice() {
    let r = rig();
    let j = journal(&r);
    let dead = "http://127.0.0.1:9";
    let payload = json!({"payment_intent": "pi_1", "amount": 2000, "currency": "usd"});
    let f = attempt(&r, dead, j.clone(), payload.clone()).unwrap_err();
    assert_eq!((f.type_name, f.retryable), (IN_FLIGHT, true), "{f:?}");
    // When it is back, the next attempt sends once.
    assert!(attempt(&r, &r.api.base_url, j.clone(), payload.clone()).is_ok());
    assert!(attempt(&r, &r.api.base_url, j, payload).is_ok());
    assert_eq!(r.sim.refunded("pi_1"), 2000);
    assert_eq!(r.sim.requests(), 1);
}

#[test]
fn an_unwritable_journal_is_retryable_and_nothing_is_sent() {
    let r = rig();
    drop(journal(&r));
    let ro = Arc::new(
        SqliteJournal::open_read_only(r.dir.path().join("j.db"), Arc::new(SystemClock)).unwrap(),
    );
    let f = attempt(
        &r,
        &r.api.base_url,
        ro,
        json!({"payment_intent": "pi_1", "amount": 2000, "currency": "usd"}),
    )
    .unwrap_err();
    assert_eq!((f.type_name, f.retryable), (JOURNAL, true), "{f:?}");
    assert_eq!(r.sim.requests(), 0);
}
