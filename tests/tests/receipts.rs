//! Receipts and verify: changing any field of any record, reordering, deleting or truncating
//! records, or rebuilding a consistent chain without the key makes verify fail and name the record;
//! a signed receipt checks with its key (HMAC) or public key (Ed25519) and fails with any other.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::time::Duration;

use interlock::faults::FaultPoint;
use interlock::journal::{Journal, record_hash};
use interlock::receipt::{Receipt, SigningKeyKind, VerifyingKeyKind, build};
use interlock::verify::{Sources, verify};
use interlock::{EffectKey, Gate, GateConfig, GateError, ManualClock, SqliteJournal, Tier};
use interlock_testkit::faults::{Action, ScriptedFaults};
use interlock_testkit::sim::{SimRefundPremises, SimTarget};
use interlock_tests::raw_sql;
use interlock_tests::world::{AMOUNT, PAYMENT, T0, World};
use serde_json::Value;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    key: EffectKey,
    world: World,
}

/// A committed refund with a crash and a recovery behind it: PROPOSED, AUTHORIZED, DISPATCHED,
/// CLAIMED, DISPATCHED, COMMITTED.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let world = World::new(Tier::One);
    let clock = Arc::new(world.clock.clone());
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone()).unwrap());
    journal.grant_lease(&World::grant()).unwrap();
    let mut cfg = GateConfig::beside(&path);
    cfg.settle = Duration::from_millis(0);
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterSend, Action::Crash);
    let gate = Gate::new(journal.clone(), journal, clock, cfg)
        .unwrap()
        .with_faults(faults);
    let bound = gate
        .bind(
            Arc::new(SimTarget(world.sim.clone())),
            Arc::new(SimRefundPremises(world.sim.clone())),
        )
        .unwrap();
    let effect = world.decide(AMOUNT).unwrap();
    assert!(matches!(bound.submit(&effect), Err(GateError::Crashed(_))));
    world.clock.advance(1000);
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        interlock::Outcome::Committed { .. }
    ));
    Fixture {
        _dir: dir,
        path,
        key: effect.key,
        world,
    }
}

fn open(path: &std::path::Path) -> SqliteJournal {
    SqliteJournal::open(path, Arc::new(ManualClock::at(T0))).unwrap()
}

fn receipt(f: &Fixture, signer: &SigningKeyKind) -> Receipt {
    let mut r = build(&open(&f.path).history(&f.key).unwrap()).unwrap();
    signer.sign(&mut r);
    r
}

fn hmac() -> (SigningKeyKind, VerifyingKeyKind) {
    (
        SigningKeyKind::Hmac(b"receipt-secret".to_vec()),
        VerifyingKeyKind::Hmac(b"receipt-secret".to_vec()),
    )
}

fn check(f: &Fixture, r: &Receipt, k: &VerifyingKeyKind) -> interlock::verify::Verification {
    let j = open(&f.path);
    let target = SimTarget(f.world.sim.clone());
    verify(
        &j,
        &f.key,
        &Sources {
            leases: Some(&j),
            records: Some(&target),
            receipt: Some(r),
            key: Some(k),
            ..Sources::default()
        },
    )
}

fn valid_detail(v: &interlock::verify::Verification) -> (Option<bool>, String) {
    let c = &v.columns[0];
    assert_eq!(c.name, "valid");
    (c.holds, c.detail.clone())
}

#[test]
fn an_untouched_journal_verifies_every_column_against_its_signed_receipt() {
    let f = fixture();
    let (s, k) = hmac();
    let r = receipt(&f, &s);
    let v = check(&f, &r, &k);
    assert!(v.holds(), "{v:#?}");
    let get = |n: &str| v.columns.iter().find(|c| c.name == n).unwrap().clone();
    assert_eq!(get("happened once").holds, Some(true));
    assert_eq!(get("authorized when fired").holds, Some(true));
    assert_eq!(get("premises held").holds, Some(true));
    assert_eq!(get("approved by").detail, "ana@support");
    assert_eq!(get("approval verified").holds, Some(true));
    assert_eq!(r.outcome, interlock::core::Status::Committed);
    assert_eq!(r.records.len(), 6);
}

fn leaf_paths(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => m
            .iter()
            .for_each(|(k, v)| leaf_paths(v, format!("{at}/{k}"), out)),
        Value::Array(a) if !a.is_empty() => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| leaf_paths(v, format!("{at}/{i}"), out)),
        _ => out.push(at),
    }
}

fn mutate(v: &mut Value) {
    *v = match v.take() {
        Value::String(s) => Value::String(format!("{s}x")),
        Value::Number(n) => Value::from(n.as_i64().unwrap_or(0) + 1),
        Value::Bool(b) => Value::Bool(!b),
        _ => Value::from("x"),
    };
}

#[test]
fn changing_any_field_of_any_record_fails_verify_and_names_the_record() {
    let f = fixture();
    let (s, k) = hmac();
    let r = receipt(&f, &s);
    let records = open(&f.path).history(&f.key).unwrap();
    let mut tried = 0;
    for rec in &records {
        let body: Value = serde_json::to_value(&rec.event).unwrap();
        let mut paths = Vec::new();
        leaf_paths(&body, String::new(), &mut paths);
        for path in paths {
            let mut changed = body.clone();
            mutate(changed.pointer_mut(&path).unwrap());
            let conn = raw_sql::open(&f.path);
            let sql = format!(
                "UPDATE records SET body = '{}' WHERE seq = {}",
                changed.to_string().replace('\'', "''"),
                rec.seq
            );
            raw_sql::exec(&conn, &sql);
            let (holds, detail) = valid_detail(&check(&f, &r, &k));
            assert_eq!(
                holds,
                Some(false),
                "record {} field {path}: {detail}",
                rec.n
            );
            assert!(
                detail.contains(&format!("record {}", rec.n)),
                "record {} field {path}: {detail}",
                rec.n
            );
            let restore = format!(
                "UPDATE records SET body = '{}' WHERE seq = {}",
                serde_json::to_string(&rec.event)
                    .unwrap()
                    .replace('\'', "''"),
                rec.seq
            );
            raw_sql::exec(&conn, &restore);
            tried += 1;
        }
        for (column, sql) in [
            (
                "at_ms",
                format!(
                    "UPDATE records SET at_ms = at_ms + 1 WHERE seq = {}",
                    rec.seq
                ),
            ),
            (
                "hash",
                format!(
                    // Another first byte whatever it was (a hash that starts with ff would
                    // otherwise be left as it is, one run in 256).
                    "UPDATE records SET hash = CASE WHEN substr(hash, 1, 2) = 'ff' THEN '00' \
                     ELSE 'ff' END || substr(hash, 3) WHERE seq = {}",
                    rec.seq
                ),
            ),
            (
                "prev",
                format!(
                    "UPDATE records SET prev = 'tampered' WHERE seq = {}",
                    rec.seq
                ),
            ),
            (
                "key",
                format!(
                    "UPDATE records SET key = key || 'x' WHERE seq = {}",
                    rec.seq
                ),
            ),
        ] {
            let before = raw_sql::dump(&f.path);
            raw_sql::exec(&raw_sql::open(&f.path), &sql);
            let (holds, detail) = valid_detail(&check(&f, &r, &k));
            assert_eq!(
                holds,
                Some(false),
                "record {} column {column}: {detail}",
                rec.n
            );
            assert!(
                detail.contains("record"),
                "record {} column {column}: {detail}",
                rec.n
            );
            raw_sql::restore(&f.path, &before);
            tried += 1;
        }
    }
    assert!(valid_detail(&check(&f, &r, &k)).0 == Some(true), "restored");
    eprintln!("{tried} single-field changes, each caught and named");
    assert!(tried > 60);
}

#[test]
fn reordering_deleting_and_truncating_records_fail_verify_and_name_the_record() {
    let f = fixture();
    let (s, k) = hmac();
    let r = receipt(&f, &s);
    let seqs: Vec<i64> = open(&f.path)
        .history(&f.key)
        .unwrap()
        .iter()
        .map(|r| r.seq)
        .collect();
    for (what, sql, want) in [
        (
            "reorder",
            format!(
                "UPDATE records SET seq = -1 WHERE seq = {0}; UPDATE records SET seq = {0} WHERE seq = {1}; UPDATE records SET seq = {1} WHERE seq = -1",
                seqs[2], seqs[3]
            ),
            "record 2",
        ),
        (
            "delete",
            format!("DELETE FROM records WHERE seq = {}", seqs[3]),
            "record 3",
        ),
        (
            "truncate",
            format!("DELETE FROM records WHERE seq >= {}", seqs[4]),
            "record 4",
        ),
    ] {
        let before = raw_sql::dump(&f.path);
        raw_sql::exec(&raw_sql::open(&f.path), &sql);
        let (holds, detail) = valid_detail(&check(&f, &r, &k));
        assert_eq!(holds, Some(false), "{what}: {detail}");
        assert!(detail.contains(want), "{what}: {detail}");
        raw_sql::restore(&f.path, &before);
    }
}

#[test]
fn a_consistent_chain_rebuilt_without_the_key_fails_against_the_signed_receipt() {
    let f = fixture();
    let (s, k) = hmac();
    let r = receipt(&f, &s);
    // The forger changes the committed amount and re-hashes every record from there on.
    let j = open(&f.path);
    let records = j.history(&f.key).unwrap();
    drop(j);
    let conn = raw_sql::open(&f.path);
    let mut prev: Option<String> = None;
    for rec in &records {
        let mut event = serde_json::to_value(&rec.event).unwrap();
        if let Some(a) = event.pointer_mut("/payload/amount") {
            *a = Value::from(200);
        }
        let event: interlock::core::Event = serde_json::from_value(event).unwrap();
        let hash = record_hash(&rec.key, rec.n, rec.at_ms, prev.as_deref(), &event);
        let body = serde_json::to_string(&event).unwrap().replace('\'', "''");
        let prev_sql = prev
            .as_ref()
            .map_or("NULL".to_owned(), |p| format!("'{p}'"));
        raw_sql::exec(
            &conn,
            &format!(
                "UPDATE records SET body = '{body}', hash = '{hash}', prev = {prev_sql} WHERE seq = {}",
                rec.seq
            ),
        );
        prev = Some(hash);
    }
    // The rebuilt chain is internally consistent…
    let j = open(&f.path);
    assert!(j.history(&f.key).is_ok());
    let unsigned = verify(&j, &f.key, &Sources::default());
    assert_eq!(
        unsigned.columns[0].holds,
        Some(true),
        "an unsigned check cannot see a rebuilt chain"
    );
    assert!(
        unsigned.columns[0]
            .detail
            .contains("internal consistency only")
    );
    // …but not the one the signed receipt anchors; and a forged receipt does not carry the key.
    let (holds, detail) = valid_detail(&check(&f, &r, &k));
    assert_eq!(holds, Some(false));
    assert!(detail.contains("record 0"), "{detail}");
    let mut forged = build(&j.history(&f.key).unwrap()).unwrap();
    SigningKeyKind::Hmac(b"guessed".to_vec()).sign(&mut forged);
    let (holds, detail) = valid_detail(&check(&f, &forged, &k));
    assert_eq!(holds, Some(false), "{detail}");
}

#[test]
fn ed25519_receipts_check_with_the_public_key_only() {
    let f = fixture();
    let signer = SigningKeyKind::ed25519_from_hex(&"07".repeat(32)).unwrap();
    let public = VerifyingKeyKind::ed25519_from_hex(&signer.public_hex().unwrap()).unwrap();
    let r = receipt(&f, &signer);
    assert!(check(&f, &r, &public).holds());
    let other = SigningKeyKind::ed25519_from_hex(&"08".repeat(32)).unwrap();
    let wrong = VerifyingKeyKind::ed25519_from_hex(&other.public_hex().unwrap()).unwrap();
    assert_eq!(valid_detail(&check(&f, &r, &wrong)).0, Some(false));
    let mut unsigned = r.clone();
    unsigned.signature = None;
    assert_eq!(valid_detail(&check(&f, &unsigned, &public)).0, Some(false));
    assert!(VerifyingKeyKind::ed25519_from_hex("zz").is_err());
}

#[test]
fn happened_once_sees_a_hand_refund_beside_the_tagged_one() {
    let f = fixture();
    f.world.sim.hand_refund(PAYMENT, 700);
    let (s, k) = hmac();
    let r = receipt(&f, &s);
    let v = check(&f, &r, &k);
    let once = v
        .columns
        .iter()
        .find(|c| c.name == "happened once")
        .unwrap();
    assert_eq!(once.holds, Some(true));
    assert!(
        once.detail.contains("untagged on the same payment") && once.detail.contains("(700)"),
        "{}",
        once.detail
    );
}

#[test]
fn a_signed_receipt_checked_without_its_key_fails_unless_accepted_explicitly() {
    let f = fixture();
    let (s, _) = hmac();
    let mut r = receipt(&f, &s);
    // A signature replaced by zeros is never checked when no key is given.
    if let Some(sig) = r.signature.as_mut() {
        sig.value = "0".repeat(sig.value.len());
    }
    let j = open(&f.path);
    let unchecked = verify(
        &j,
        &f.key,
        &Sources {
            receipt: Some(&r),
            ..Sources::default()
        },
    );
    assert_eq!(valid_detail(&unchecked).0, Some(false), "{unchecked:?}");
    assert!(!unchecked.holds());
    let accepted = verify(
        &j,
        &f.key,
        &Sources {
            receipt: Some(&r),
            accept_unchecked_signatures: true,
            ..Sources::default()
        },
    );
    let (holds, detail) = valid_detail(&accepted);
    assert_eq!(holds, None, "{detail}");
    assert!(detail.contains("NOT checked"), "{detail}");
}

#[test]
fn a_refund_at_the_target_carrying_a_key_the_journal_does_not_know_is_reported() {
    let f = fixture();
    let metadata = [("interlock_key".to_owned(), "lost-effect".to_owned())]
        .into_iter()
        .collect();
    let interlock_testkit::sim::SimResponse::Created(lost) =
        f.world
            .sim
            .create_refund(PAYMENT, 1500, Some("lost-effect"), metadata)
    else {
        panic!("the refund was not created")
    };
    f.world.sim.hand_refund(PAYMENT, 300);
    // A refund under the journaled key, but on another payment than the effect's.
    f.world.sim.add_payment("pi_elsewhere", 5_000);
    let on_other = [("interlock_key".to_owned(), f.key.to_string())]
        .into_iter()
        .collect();
    let interlock_testkit::sim::SimResponse::Created(elsewhere) =
        f.world
            .sim
            .create_refund("pi_elsewhere", 1000, None, on_other)
    else {
        panic!("the refund was not created")
    };
    let journaled = open(&f.path).history(&f.key).unwrap();
    let known = [(f.key.to_string(), build(&journaled).unwrap().payload)]
        .into_iter()
        .collect();
    // Asked in process, and over HTTP as Stripe's API lists an account's refunds.
    let api = interlock_testkit::payments_api::PaymentsApi::start(f.world.sim.clone(), "sk_test_x")
        .unwrap();
    let stripe = interlock_stripe::StripeRefunds::new(
        interlock_stripe::StripeConfig::new(&api.base_url, "sk_test_x").unwrap(),
    );
    let sim = SimTarget(f.world.sim.clone());
    let targets: [&dyn interlock::target::TargetRecords; 2] = [&sim, &stripe];
    for target in targets {
        let found = interlock::verify::strangers(target, &known).unwrap();
        let [a, b] = &found[..] else {
            panic!("two strangers expected (the hand refund carries no key): {found:?}");
        };
        let (lost_v, elsewhere_v) = if a.key == "lost-effect" {
            (a, b)
        } else {
            (b, a)
        };
        assert_eq!(lost_v.key, "lost-effect");
        assert!(!lost_v.holds() && !elsewhere_v.holds());
        assert!(
            lost_v.columns[0]
                .detail
                .contains(lost["id"].as_str().unwrap()),
            "{lost_v:?}"
        );
        assert_eq!(elsewhere_v.key, f.key.as_str());
        assert!(
            elsewhere_v.columns[0]
                .detail
                .contains(elsewhere["id"].as_str().unwrap()),
            "{elsewhere_v:?}"
        );
    }
}

#[test]
fn a_receipt_anchors_neither_how_an_effect_ended_after_it_nor_evidence_journaled_after_it() {
    let f = fixture();
    let (s, k) = hmac();
    let history = open(&f.path).history(&f.key).unwrap();
    // Exported while in flight: PROPOSED, AUTHORIZED, DISPATCHED.
    let mut early = build(&history[..3]).unwrap();
    assert_eq!(early.outcome, interlock::core::Status::InFlight);
    s.sign(&mut early);
    let (holds, detail) = valid_detail(&check(&f, &early, &k));
    assert_eq!(holds, Some(false), "{detail}");
    assert!(detail.contains("not anchored"), "{detail}");
    // Exported once resolved, then a confirmation arrives: still anchored.
    let r = receipt(&f, &s);
    let j = open(&f.path);
    j.append_with(&f.key, &mut |_| {
        vec![interlock::core::Event::Confirmed(
            interlock::core::Confirmed {
                via: "lookup".into(),
                event: None,
                refund: None,
                status: Some("succeeded".into()),
                amount: Some(AMOUNT),
                payment_intent: Some(PAYMENT.into()),
                charge: None,
                created: None,
            },
        )]
    })
    .unwrap();
    let (holds, detail) = valid_detail(&check(&f, &r, &k));
    assert_eq!(holds, Some(true), "{detail}");
    // ... but verify says the confirmation is read from the journal alone, not vouched for by
    // the receipt's signature.
    assert!(
        detail.contains("(CONFIRMED) came after the receipt") && detail.contains("not anchored"),
        "{detail}"
    );
}
