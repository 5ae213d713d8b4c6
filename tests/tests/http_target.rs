//! The HTTP target from configuration, judged by the services' own records: a credits service
//! with no idempotency (tiers 2 and 3) and the payments API, which dedupes keys (tier 1). A
//! credit whose answer is lost is found by the lookup, never sent again; a lookup that cannot see
//! keys, and a tier-3 target, leave the effect unknown rather than resend; a broken rule, a
//! payload of another shape and a definite 4xx send nothing more.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::time::Duration;

use interlock::core::{RefusalCode, Via};
use interlock::target::Target;
use interlock::{
    Bound, EffectKey, Gate, GateConfig, Grant, Journal, Outcome, SqliteJournal, SystemClock, Tier,
};
use interlock_http::{HttpTarget, HttpTargetConfig};
use interlock_server::config::TargetConfig;
use interlock_testkit::ledger::{Ledger, target_table};
use serde_json::{Value, json};

const TOKEN: &str = "ledger-token";

/// The target named `credits` as the gate server's file configures it.
fn table(server_file: &str) -> HttpTargetConfig {
    let cfg = interlock_server::ServerConfig::parse(server_file, std::path::Path::new("t.toml"))
        .expect("the server's file");
    match cfg.targets.get("credits") {
        Some(TargetConfig::Http(http)) => (**http).clone(),
        other => panic!("not an HTTP target: {other:?}"),
    }
}

struct World {
    ledger: Ledger,
    journal: Arc<SqliteJournal>,
    bound: Bound,
    target: HttpTarget,
    _dir: tempfile::TempDir,
}

/// The ledger with account `acct_1` (limit `limit`), a journal with a lease for it, and the
/// gate bound to the target `cfg` makes, sends cut off after 1 s.
fn world(cfg: impl FnOnce(&Ledger) -> HttpTargetConfig, limit: i64) -> World {
    let ledger = Ledger::start(TOKEN).unwrap();
    ledger.open("acct_1", limit);
    let cfg = cfg(&ledger);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone()).unwrap());
    journal
        .grant_lease(
            &Grant::new("ticket-1", "ana@support", 0)
                .scope("account", "acct_1")
                .uses(10),
        )
        .unwrap();
    let config = GateConfig::builder(&path)
        .send_timeout(Duration::from_secs(1))
        .settle(Duration::from_millis(200))
        .build()
        .unwrap();
    let gate = Gate::new(journal.clone(), journal.clone(), clock, config).unwrap();
    let base = ledger.base_url.clone();
    let env = move |var: &str| match var {
        "LEDGER_URL" => Some(base.clone()),
        "LEDGER_TOKEN" => Some(TOKEN.to_owned()),
        _ => None,
    };
    let target = HttpTarget::with_env("credits", &cfg, &env).unwrap();
    let bound = target.bind(&gate, &cfg.rules).unwrap();
    World {
        ledger,
        journal,
        bound,
        target,
        _dir: dir,
    }
}

fn tier2(_: &Ledger) -> HttpTargetConfig {
    table(&target_table("credits", true))
}

fn tier3(_: &Ledger) -> HttpTargetConfig {
    table(&target_table("credits", false))
}

fn credit(amount: i64) -> Value {
    json!({"account": "acct_1", "amount": amount, "note": null})
}

fn submit(w: &World, key: &str, payload: &Value) -> Outcome {
    let effect = w
        .bound
        .decide(EffectKey::fixed(key).unwrap(), payload, "ticket-1")
        .expect("decided");
    w.bound.submit(&effect).expect("submitted")
}

#[test]
fn a_credit_lands_once_and_a_repeat_is_answered_from_the_journal() {
    let w = world(tier2, 10_000);
    assert_eq!(w.target.tier(), Tier::Two);
    let first = submit(&w, "req-1", &credit(2_500));
    assert!(
        matches!(
            first,
            Outcome::Committed {
                via: Via::FirstSend,
                replayed: false,
                ..
            }
        ),
        "{first:?}"
    );
    let again = submit(&w, "req-1", &credit(2_500));
    assert!(
        matches!(again, Outcome::Committed { replayed: true, .. }),
        "{again:?}"
    );
    let credits = w.ledger.credits();
    assert_eq!(credits.len(), 1, "{credits:?}");
    assert_eq!(credits[0].request_key.as_deref(), Some("req-1"));
    // The canonical form dropped the null note: the journal holds one spelling.
    let first_proposal = w
        .journal
        .state(&EffectKey::fixed("req-1").unwrap())
        .unwrap();
    assert_eq!(
        first_proposal.first().map(|p| p.payload.clone()),
        Some(json!({"account": "acct_1", "amount": 2_500}))
    );
}

#[test]
fn a_credit_whose_answer_is_lost_is_found_by_the_lookup_and_not_sent_again() {
    let w = world(tier2, 10_000);
    w.ledger.hold_next_answer(Duration::from_secs(3));
    let out = submit(&w, "req-lost", &credit(1_000));
    let settled = match out {
        Outcome::Committed { .. } => out,
        // Still inside the claim's settle window: recover as the next attempt would.
        _ => {
            std::thread::sleep(Duration::from_millis(1_500));
            w.bound
                .recover(&EffectKey::fixed("req-lost").unwrap())
                .unwrap()
        }
    };
    assert!(
        matches!(
            settled,
            Outcome::Committed {
                via: Via::FoundByLookup,
                ..
            }
        ),
        "{settled:?}"
    );
    assert_eq!(w.ledger.credits().len(), 1, "{:?}", w.ledger.credits());
}

#[test]
fn a_lookup_whose_filter_the_service_ignores_leaves_the_credit_unknown_instead_of_resending() {
    let w = world(
        |_| {
            let mut cfg = table(&target_table("credits", true));
            if let Some(l) = cfg.lookup.as_mut() {
                // A misspelt filter: the ledger ignores it and lists every credit.
                l.url = "${LEDGER_URL}/credits?requestkey={key}".into();
            }
            cfg
        },
        10_000,
    );
    assert!(matches!(
        submit(&w, "req-other", &credit(500)),
        Outcome::Committed { .. }
    ));
    w.ledger.hold_next_answer(Duration::from_secs(3));
    let key = EffectKey::fixed("req-blind").unwrap();
    let _ = submit(&w, "req-blind", &credit(1_000));
    let asked = w
        .target
        .lookup(&key, &json!({"account": "acct_1", "amount": 1_000}));
    match &asked {
        interlock::core::LookupAnswer::Unknown(why) => {
            assert!(why.contains("does not filter"), "{why}");
        }
        other => panic!("a list of other keys proves nothing: {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(1_500));
    for _ in 0..3 {
        let out = w.bound.recover(&key).unwrap();
        assert!(
            !matches!(out, Outcome::Committed { .. } | Outcome::Failed(_)),
            "a lookup that cannot tell must not settle: {out:?}"
        );
    }
    assert_eq!(w.ledger.credits().len(), 2, "req-blind never sent again");
}

#[test]
fn a_tier_3_credit_whose_answer_is_lost_is_ambiguous_and_never_resent() {
    let w = world(tier3, 10_000);
    assert_eq!(w.target.tier(), Tier::Three);
    w.ledger.hold_next_answer(Duration::from_secs(3));
    let key = EffectKey::fixed("req-t3").unwrap();
    let _ = submit(&w, "req-t3", &credit(1_000));
    std::thread::sleep(Duration::from_millis(1_500));
    let out = w.bound.recover(&key).unwrap();
    assert!(matches!(out, Outcome::Ambiguous(_)), "{out:?}");
    assert_eq!(w.ledger.credits().len(), 1);
}

#[test]
fn a_broken_rule_and_a_payload_of_another_shape_send_nothing_and_journal_nothing() {
    let w = world(tier2, 2_000);
    let over = w.bound.decide(
        EffectKey::fixed("req-over").unwrap(),
        &credit(2_500),
        "ticket-1",
    );
    let why = format!("{:?}", over.err());
    assert!(why.contains("limit - credited >= payload.amount"), "{why}");
    for (key, payload) in [
        (
            "req-extra",
            json!({"account": "acct_1", "amount": 10, "currency": "usd"}),
        ),
        ("req-float", json!({"account": "acct_1", "amount": 10.5})),
        ("req-text", json!({"account": "acct_1", "amount": "10"})),
    ] {
        let decided = w
            .bound
            .decide(EffectKey::fixed(key).unwrap(), &payload, "ticket-1");
        assert!(decided.is_err(), "{key} must be refused");
    }
    assert!(w.journal.keys().unwrap().is_empty());
    assert!(w.ledger.credits().is_empty());
}

#[test]
fn a_payload_cannot_carry_the_field_the_target_fills_with_the_key() {
    // Undeclared fields: any object goes, but never the key's own field, which would let a
    // caller plant another effect's key where the lookup looks.
    let w = world(
        |_| {
            let mut cfg = table(&target_table("credits", true));
            cfg.payload.clear();
            cfg
        },
        10_000,
    );
    let planted = json!({"account": "acct_1", "amount": 10, "request_key": "req-1"});
    let why = format!(
        "{:?}",
        w.bound
            .decide(EffectKey::fixed("req-2").unwrap(), &planted, "ticket-1")
            .err()
    );
    assert!(why.contains("request_key"), "{why}");
    assert!(w.journal.keys().unwrap().is_empty());
}

#[test]
fn a_definite_4xx_fails_the_credit_and_a_5xx_is_settled_by_the_lookup() {
    let w = world(tier2, 10_000);
    w.ledger.fail_next(422);
    let failed = submit(&w, "req-422", &credit(100));
    assert!(matches!(failed, Outcome::Failed(_)), "{failed:?}");
    w.ledger.fail_next(503);
    let out = submit(&w, "req-503", &credit(100));
    let out = match out {
        Outcome::Committed { .. } => out,
        _ => {
            std::thread::sleep(Duration::from_millis(1_500));
            w.bound
                .recover(&EffectKey::fixed("req-503").unwrap())
                .unwrap()
        }
    };
    assert!(
        matches!(
            out,
            Outcome::Committed {
                via: Via::ReappliedAfterLookup,
                ..
            }
        ),
        "{out:?}"
    );
    let credits = w.ledger.credits();
    assert_eq!(credits.len(), 1, "{credits:?}");
    assert_eq!(credits[0].request_key.as_deref(), Some("req-503"));
}

#[test]
fn a_credit_of_another_request_moving_the_facts_refuses_the_send() {
    let w = world(tier2, 3_000);
    let effect = w
        .bound
        .decide(
            EffectKey::fixed("req-a").unwrap(),
            &credit(2_000),
            "ticket-1",
        )
        .unwrap();
    // Another request credits the account between the decision and the send.
    assert!(matches!(
        submit(&w, "req-b", &credit(1_500)),
        Outcome::Committed { .. }
    ));
    let out = w.bound.submit(&effect).unwrap();
    match out {
        Outcome::Refused(r) => assert!(
            matches!(r.code, RefusalCode::StalePremise | RefusalCode::PremiseRule),
            "{r:?}"
        ),
        other => panic!("must be refused: {other:?}"),
    }
    assert_eq!(w.ledger.credits().len(), 1);
}

#[test]
fn facts_that_moved_but_still_pass_the_rules_refuse_the_send_and_offer_the_same_payload() {
    let w = world(tier2, 3_000);
    let payload = credit(2_000);
    let effect = w
        .bound
        .decide(EffectKey::fixed("req-a").unwrap(), &payload, "ticket-1")
        .unwrap();
    // Another request credits 500 in between: the facts moved, the limit still has room.
    assert!(matches!(
        submit(&w, "req-b", &credit(500)),
        Outcome::Committed { .. }
    ));
    match w.bound.submit(&effect).unwrap() {
        Outcome::Refused(r) => {
            assert_eq!(r.code, RefusalCode::StalePremise, "{r:?}");
            let kinds: Vec<_> = r.repairs.iter().map(|p| p.kind.as_str()).collect();
            assert_eq!(kinds, ["rules_hold"], "{r:?}");
            assert_eq!(
                r.repairs[0].payload,
                json!({"account": "acct_1", "amount": 2_000})
            );
        }
        other => panic!("must be refused: {other:?}"),
    }
    assert_eq!(
        w.ledger.credits().len(),
        1,
        "only the other request's credit"
    );
}

/// Tier 1 against the payments API, which dedupes `Idempotency-Key` for 24 h as Stripe does: a
/// refund configured in the table alone, a resend replayed, a reused key with another amount a
/// conflict.
#[test]
fn the_payments_api_configured_as_an_http_target_dedupes_at_tier_1() {
    use interlock_testkit::payments_api::PaymentsApi;
    use interlock_testkit::sim::SimPayments;
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(86_400),
        Arc::new(SystemClock),
    );
    sim.add_payment("pi_1", 10_000);
    let api = PaymentsApi::start(sim.clone(), "sk_test_http").unwrap();
    let mut table = interlock_testkit::payments_api::refunds_table("${BASE}", "KEY", 1).unwrap();
    table.insert("rules".into(), vec!["amount_paid >= payload.amount"].into());
    let cfg: HttpTargetConfig = table.try_into().unwrap();
    let base = api.base_url.clone();
    let env = move |v: &str| match v {
        "BASE" => Some(base.clone()),
        "KEY" => Some("sk_test_http".to_owned()),
        _ => None,
    };
    let target = HttpTarget::with_env("refunds-http", &cfg, &env).unwrap();
    assert_eq!(target.tier(), Tier::One);
    let payload = json!({"payment_intent": "pi_1", "amount": 2_000, "currency": "usd"});
    let key = EffectKey::fixed("refund-1").unwrap();
    let send = |p: &Value| {
        target.send(&interlock::target::SendRequest {
            key: &key,
            payload: p,
            timeout: Duration::from_secs(5),
            deadline: None,
            last_look: None,
        })
    };
    use interlock::core::SendAnswer;
    assert!(matches!(send(&payload), SendAnswer::Done(_)));
    assert!(matches!(send(&payload), SendAnswer::Replayed(_)));
    let other = json!({"payment_intent": "pi_1", "amount": 3_000, "currency": "usd"});
    assert!(
        matches!(send(&other), SendAnswer::Conflict(_)),
        "{:?}",
        send(&other)
    );
    assert_eq!(sim.refunded("pi_1"), 2_000);
    let found = target.lookup(&key, &payload);
    assert!(
        matches!(found, interlock::core::LookupAnswer::Found(_)),
        "{found:?}"
    );
    let read = interlock::premise::PremiseReader::read(&target.premises(), &key, &payload).unwrap();
    assert_eq!(read.get("amount_paid"), Some(&json!(10_000)));

    // Through the gate: decided, sent once, and a repeat answered from the journal.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let clock = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone()).unwrap());
    journal
        .grant_lease(&Grant::new("case-1", "ana@support", 0).scope("payment_intent", "pi_1"))
        .unwrap();
    let config = GateConfig::builder(&path).build().unwrap();
    let gate = Gate::new(journal.clone(), journal, clock, config).unwrap();
    let bound = target.bind(&gate, &cfg.rules).unwrap();
    let refund = json!({"payment_intent": "pi_1", "amount": 3_000, "currency": "usd"});
    let effect = bound
        .decide(EffectKey::fixed("refund-2").unwrap(), &refund, "case-1")
        .unwrap();
    let first = bound.submit(&effect).unwrap();
    assert!(
        matches!(
            first,
            Outcome::Committed {
                via: Via::FirstSend,
                ..
            }
        ),
        "{first:?}"
    );
    let again = bound.submit(&effect).unwrap();
    assert!(
        matches!(again, Outcome::Committed { replayed: true, .. }),
        "{again:?}"
    );
    assert_eq!(sim.refunded("pi_1"), 5_000);

    // A refund made by hand has no key in its metadata: the lookup passes it by and finds the
    // gate's refund, and the records list it as a refund of no key.
    sim.hand_refund("pi_1", 500);
    let found = target.lookup(&key, &payload);
    assert!(
        matches!(found, interlock::core::LookupAnswer::Found(_)),
        "{found:?}"
    );
    use interlock::target::TargetRecords;
    let records = target.records_for(&payload).unwrap();
    assert_eq!(records.len(), 3, "{records:?}");
    let keys: Vec<_> = records.iter().map(|r| target.key_of(r)).collect();
    assert_eq!(keys.iter().filter(|k| k.is_none()).count(), 1, "{keys:?}");
}

/// `verify` against the service's own records, listed as the table's `[records]` says: one credit
/// under the key holds; a second one made under the same key by other means fails it; a credit
/// under a key no journal knows is a stranger.
#[test]
fn verify_asks_the_service_s_own_records_and_finds_a_second_credit_under_the_key() {
    use interlock::verify::{Sources, strangers, verify};
    let w = world(tier2, 10_000);
    assert!(interlock::target::TargetRecords::records_for(&w.target, &credit(1)).is_ok());
    assert!(matches!(
        submit(&w, "req-v", &credit(400)),
        Outcome::Committed { .. }
    ));
    let key = EffectKey::fixed("req-v").unwrap();
    let happened_once = |w: &World| {
        let v = verify(
            w.journal.as_ref(),
            &key,
            &Sources {
                records: Some(&w.target),
                ..Sources::default()
            },
        );
        v.columns
            .into_iter()
            .find(|c| c.name == "happened once")
            .map(|c| (c.holds, c.detail))
    };
    let once = happened_once(&w);
    assert_eq!(once.as_ref().map(|c| c.0), Some(Some(true)), "{once:?}");

    w.ledger.credit_by_hand("acct_1", 400, Some("req-v"));
    let twice = happened_once(&w);
    assert_eq!(twice.as_ref().map(|c| c.0), Some(Some(false)), "{twice:?}");

    w.ledger
        .credit_by_hand("acct_1", 400, Some("req-nobody-knows"));
    let known = std::collections::HashMap::from([(
        "req-v".to_owned(),
        json!({"account": "acct_1", "amount": 400}),
    )]);
    let found = strangers(&w.target, &known).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].key, "req-nobody-knows");

    // A service that cannot answer does not let an audit that asked it pass.
    let World {
        ledger,
        journal,
        target,
        ..
    } = w;
    drop(ledger);
    let v = verify(
        journal.as_ref(),
        &key,
        &Sources {
            records: Some(&target),
            ..Sources::default()
        },
    );
    assert!(!v.holds(), "{v:?}");
}
