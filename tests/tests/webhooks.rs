//! Webhook confirmation: valid, forged, stale, replayed, malformed and unknown-refund deliveries,
//! each with the right answer and journal state.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;

use interlock::core::Event;
use interlock::journal::Journal;
use interlock::{Gate, GateConfig, Outcome, SqliteJournal, Tier};
use interlock_stripe::webhook::{Delivery, handle, sign};
use interlock_testkit::sim::{SimRefundPremises, SimTarget};
use interlock_tests::world::{AMOUNT, World};
use serde_json::json;

const SECRET: &str = "whsec_test";
const NOW: i64 = 1_790_000_000;

fn committed() -> (tempfile::TempDir, Arc<SqliteJournal>, String) {
    let (d, j, k, _) = committed_with_service();
    (d, j, k)
}

fn committed_with_service() -> (tempfile::TempDir, Arc<SqliteJournal>, String, World) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let world = World::new(Tier::One);
    let journal = Arc::new(SqliteJournal::open(&path, Arc::new(world.clock.clone())).unwrap());
    journal.grant_lease(&World::grant()).unwrap();
    let gate = Gate::new(
        journal.clone(),
        journal.clone(),
        Arc::new(world.clock.clone()),
        GateConfig::beside(&path),
    )
    .unwrap();
    let bound = gate
        .bind(
            Arc::new(SimTarget(world.sim.clone())),
            Arc::new(SimRefundPremises(world.sim.clone())),
        )
        .unwrap();
    let effect = world.decide(AMOUNT).unwrap();
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        Outcome::Committed { .. }
    ));
    (dir, journal, effect.key.to_string(), world)
}

fn event(id: &str, key: Option<&str>) -> Vec<u8> {
    let metadata = key.map_or(json!({}), |k| json!({ "interlock_key": k }));
    json!({
        "id": id, "object": "event", "type": "refund.created",
        "data": { "object": { "id": "re_sim000001", "object": "refund", "amount": 2000,
                              "status": "succeeded", "payment_intent": "pi_881", "created": NOW,
                              "metadata": metadata } }
    })
    .to_string()
    .into_bytes()
}

fn confirmations(j: &SqliteJournal, key: &str) -> usize {
    let k = interlock::EffectKey::fixed(key).unwrap();
    j.history(&k)
        .unwrap()
        .iter()
        .filter(|r| matches!(r.event, Event::Confirmed(_)))
        .count()
}

#[test]
fn a_valid_delivery_records_confirmed_once_however_often_it_is_redelivered() {
    let (_d, j, key) = committed();
    let body = event("evt_1", Some(&key));
    let sig = sign(&body, SECRET, NOW);
    let first = handle(j.as_ref(), SECRET, Some(&sig), &body, NOW, 300).unwrap();
    assert_eq!(first, Delivery::Recorded { key: key.clone() });
    for _ in 0..3 {
        let again = handle(
            j.as_ref(),
            SECRET,
            Some(&sign(&body, SECRET, NOW + 10)),
            &body,
            NOW + 10,
            300,
        )
        .unwrap();
        assert_eq!(again, Delivery::AlreadyRecorded { key: key.clone() });
    }
    assert_eq!(confirmations(&j, &key), 1);
    let receipt = interlock::receipt::build(
        &j.history(&interlock::EffectKey::fixed(&key).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(receipt.confirmations[0].event.as_deref(), Some("evt_1"));
}

#[test]
fn one_of_several_v1_signatures_may_match_as_during_a_secret_rotation() {
    let (_d, j, key) = committed();
    let body = event("evt_2", Some(&key));
    let good = sign(&body, SECRET, NOW);
    let old = sign(&body, "whsec_old", NOW);
    let header = format!("{},{}", old, good.split(',').nth(1).unwrap());
    assert_eq!(
        handle(j.as_ref(), SECRET, Some(&header), &body, NOW, 300)
            .unwrap()
            .status(),
        200
    );
    assert_eq!(confirmations(&j, &key), 1);
}

#[test]
fn forged_stale_and_malformed_deliveries_get_400_and_record_nothing() {
    let (_d, j, key) = committed();
    let body = event("evt_3", Some(&key));
    let cases: Vec<(&str, Option<String>, Vec<u8>, i64)> = vec![
        (
            "forged",
            Some(sign(&body, "whsec_wrong", NOW)),
            body.clone(),
            NOW,
        ),
        (
            "body changed after signing",
            Some(sign(&body, SECRET, NOW)),
            event("evt_3", Some("other-key")),
            NOW,
        ),
        (
            "stale",
            Some(sign(&body, SECRET, NOW - 301)),
            body.clone(),
            NOW,
        ),
        ("no header", None, body.clone(), NOW),
        ("no v1", Some(format!("t={NOW}")), body.clone(), NOW),
        ("not hex", Some(format!("t={NOW},v1=zz")), body.clone(), NOW),
        ("no t", Some("v1=00".into()), body.clone(), NOW),
        (
            "not json",
            Some(sign(b"{not json", SECRET, NOW)),
            b"{not json".to_vec(),
            NOW,
        ),
        (
            "not an event",
            Some(sign(b"{}", SECRET, NOW)),
            b"{}".to_vec(),
            NOW,
        ),
    ];
    for (what, header, body, now) in cases {
        let d = handle(j.as_ref(), SECRET, header.as_deref(), &body, now, 300).unwrap();
        assert_eq!(d.status(), 400, "{what}: {d:?}");
        assert!(matches!(d, Delivery::Rejected(_)), "{what}");
    }
    assert_eq!(confirmations(&j, &key), 0);
}

#[test]
fn a_valid_delivery_about_an_unknown_or_untagged_refund_is_acknowledged_and_ignored() {
    let (_d, j, key) = committed();
    for body in [
        event("evt_4", None),
        event("evt_5", Some("not-in-this-journal")),
    ] {
        let d = handle(
            j.as_ref(),
            SECRET,
            Some(&sign(&body, SECRET, NOW)),
            &body,
            NOW,
            300,
        )
        .unwrap();
        assert!(matches!(d, Delivery::Ignored(_)), "{d:?}");
        assert_eq!(d.status(), 200);
    }
    assert_eq!(confirmations(&j, &key), 0);
    assert_eq!(
        j.keys().unwrap().len(),
        1,
        "nothing was created for the unknown key"
    );
}

#[test]
fn confirmation_by_lookup_records_once_and_ignores_what_the_target_does_not_hold() {
    let (_d, j, key, world) = committed_with_service();
    let target = SimTarget(world.sim.clone());
    let k = interlock::EffectKey::fixed(&key).unwrap();
    assert_eq!(
        interlock_stripe::webhook::confirm_by_lookup(j.as_ref(), &target, &k).unwrap(),
        Delivery::Recorded { key: key.clone() }
    );
    assert_eq!(
        interlock_stripe::webhook::confirm_by_lookup(j.as_ref(), &target, &k).unwrap(),
        Delivery::AlreadyRecorded { key: key.clone() }
    );
    assert_eq!(confirmations(&j, &key), 1);
    let unknown = interlock::EffectKey::fixed("never-proposed").unwrap();
    assert!(matches!(
        interlock_stripe::webhook::confirm_by_lookup(j.as_ref(), &target, &unknown).unwrap(),
        Delivery::Ignored(_)
    ));
}

fn refund_event(id: &str, key: &str, kind: &str, status: &str, pi: &str, amount: i64) -> Vec<u8> {
    json!({
        "id": id, "object": "event", "type": kind,
        "data": { "object": { "id": "re_sim000001", "object": "refund", "amount": amount,
                              "status": status, "payment_intent": pi, "created": NOW,
                              "metadata": { "interlock_key": key } } }
    })
    .to_string()
    .into_bytes()
}

#[test]
fn a_timestamp_at_the_edge_of_i64_is_stale_never_an_overflow() {
    let (_d, j, key) = committed();
    let body = event("evt_edge", Some(&key));
    for t in [i64::MIN, i64::MAX, -1] {
        let header = sign(&body, SECRET, t);
        let got = handle(j.as_ref(), SECRET, Some(&header), &body, NOW, 300).unwrap();
        assert!(
            matches!(&got, Delivery::Rejected(why) if why.contains("tolerance")),
            "t={t}: {got:?}"
        );
    }
    assert_eq!(confirmations(&j, &key), 0);
}

#[test]
fn an_oversized_body_is_refused_before_anything_is_parsed() {
    let (_d, j, key) = committed();
    let body = vec![b' '; interlock_stripe::webhook::MAX_BODY_BYTES + 1];
    let header = sign(&body, SECRET, NOW);
    let got = handle(j.as_ref(), SECRET, Some(&header), &body, NOW, 300).unwrap();
    assert!(
        matches!(&got, Delivery::Rejected(why) if why.contains("bytes")),
        "{got:?}"
    );
    assert_eq!(confirmations(&j, &key), 0);
}

#[test]
fn only_a_succeeded_refund_of_the_effect_s_payment_and_amount_confirms_it() {
    let (_d, j, key) = committed();
    let cases = [
        ("evt_failed", "refund.failed", "failed", "pi_881", AMOUNT),
        ("evt_pending", "refund.created", "pending", "pi_881", AMOUNT),
        (
            "evt_other_pi",
            "refund.created",
            "succeeded",
            "pi_999",
            AMOUNT,
        ),
        (
            "evt_other_amount",
            "refund.updated",
            "succeeded",
            "pi_881",
            AMOUNT + 1,
        ),
    ];
    for (id, kind, status, pi, amount) in cases {
        let body = refund_event(id, &key, kind, status, pi, amount);
        let header = sign(&body, SECRET, NOW);
        let got = handle(j.as_ref(), SECRET, Some(&header), &body, NOW, 300).unwrap();
        assert!(matches!(got, Delivery::Ignored(_)), "{id}: {got:?}");
        assert_eq!(
            got.status(),
            200,
            "{id}: acknowledged so it is not redelivered"
        );
    }
    assert_eq!(
        confirmations(&j, &key),
        0,
        "none of them confirms the effect"
    );
    let body = refund_event(
        "evt_ok",
        &key,
        "refund.updated",
        "succeeded",
        "pi_881",
        AMOUNT,
    );
    let header = sign(&body, SECRET, NOW);
    let got = handle(j.as_ref(), SECRET, Some(&header), &body, NOW, 300).unwrap();
    assert_eq!(got, Delivery::Recorded { key: key.clone() });
    assert_eq!(confirmations(&j, &key), 1);
}
