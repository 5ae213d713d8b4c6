//! The Stripe refunds target against the payments API over real HTTP: idempotent replay, reused
//! keys, 409s, 5xx, pagination in lookups and premises, authentication, and a dead server.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::time::Duration;

use interlock::core::{LookupAnswer, SendAnswer};
use interlock::premise::{PremiseError, PremiseReader};
use interlock::target::{SendRequest, Target};
use interlock::{EffectKey, ManualClock, Tier};
use interlock_stripe::{StripeConfig, StripeRefundPremises, StripeRefunds};
use interlock_testkit::faults::Stall;
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use serde_json::json;

const SECRET: &str = "sk_test_interlock";

fn setup(tier: Tier) -> (Arc<SimPayments>, PaymentsApi, StripeRefunds) {
    let sim = SimPayments::new(
        tier,
        Duration::from_secs(86_400),
        Arc::new(ManualClock::at(0)),
    );
    sim.add_payment("pi_1", 10_000);
    let api = PaymentsApi::start(sim.clone(), SECRET).expect("server");
    let target = StripeRefunds::new(StripeConfig::new(&api.base_url, SECRET).expect("config"));
    (sim, api, target)
}

fn send(t: &StripeRefunds, key: &EffectKey, amount: i64) -> SendAnswer {
    let payload = json!({"payment_intent": "pi_1", "amount": amount, "currency": "usd"});
    t.send(&SendRequest {
        key,
        payload: &payload,
        timeout: Duration::from_secs(5),
        deadline: None,
        last_look: None,
    })
}

#[test]
fn a_resend_under_the_same_key_replays_and_another_amount_is_a_conflict() {
    let (sim, _api, t) = setup(Tier::One);
    let key = EffectKey::derive(&["a"]);
    let SendAnswer::Done(first) = send(&t, &key, 2000) else {
        panic!("first send")
    };
    let SendAnswer::Replayed(again) = send(&t, &key, 2000) else {
        panic!("a resend must be marked as replayed")
    };
    assert_eq!(first["id"], again["id"]);
    assert!(matches!(send(&t, &key, 3000), SendAnswer::Conflict(_)));
    assert_eq!(sim.refunded("pi_1"), 2000);
}

#[test]
fn the_reason_and_the_caller_s_metadata_reach_stripe_beside_the_key() {
    let (sim, _api, t) = setup(Tier::One);
    let key = EffectKey::derive(&["meta"]);
    let payload = serde_json::to_value(
        interlock_stripe::RefundPayload::of_payment_intent("pi_1", 500, "usd")
            .reason("requested_by_customer")
            .metadata("order", "o-17"),
    )
    .unwrap();
    let answer = t.send(&SendRequest {
        key: &key,
        payload: &payload,
        timeout: Duration::from_secs(5),
        deadline: None,
        last_look: None,
    });
    assert!(matches!(answer, SendAnswer::Done(_)), "{answer:?}");
    let refunds = sim.refunds("pi_1");
    assert_eq!(refunds.len(), 1);
    assert_eq!(
        refunds[0].metadata.get("order").map(String::as_str),
        Some("o-17")
    );
    assert_eq!(
        refunds[0].metadata.get("interlock_key").map(String::as_str),
        Some(key.as_str())
    );
    let wrong =
        json!({"payment_intent": "pi_1", "amount": 500, "currency": "usd", "reason": "because"});
    let refused = t.send(&SendRequest {
        key: &EffectKey::derive(&["meta-2"]),
        payload: &wrong,
        timeout: Duration::from_secs(5),
        deadline: None,
        last_look: None,
    });
    assert!(
        matches!(refused, SendAnswer::Definite { .. }),
        "{refused:?}"
    );
    assert_eq!(
        sim.refunds("pi_1").len(),
        1,
        "nothing sent for a payload Stripe would refuse"
    );
}

#[test]
fn a_server_that_ignores_the_key_answers_a_resend_as_new_and_a_lookup_names_both() {
    let (sim, _api, t) = setup(Tier::Two);
    let key = EffectKey::derive(&["twice"]);
    let payload = json!({"payment_intent": "pi_1", "amount": 2000, "currency": "usd"});
    assert!(matches!(send(&t, &key, 2000), SendAnswer::Done(_)));
    let again = send(&t, &key, 2000);
    assert!(
        matches!(again, SendAnswer::Done(_)),
        "not replayed: {again:?}"
    );
    assert_eq!(sim.refunded("pi_1"), 4000);
    let LookupAnswer::Several(found) = t.lookup(&key, &payload) else {
        panic!("two refunds under one key must be reported as several")
    };
    assert_eq!(found.len(), 2);
}

#[test]
fn lookup_and_premises_follow_pagination_past_the_first_hundred() {
    let (sim, _api, t) = setup(Tier::One);
    let key = EffectKey::derive(&["b"]);
    assert!(matches!(send(&t, &key, 2000), SendAnswer::Done(_)));
    for _ in 0..250 {
        sim.hand_refund("pi_1", 1);
    }
    let payload = json!({"payment_intent": "pi_1", "amount": 2000, "currency": "usd"});
    assert!(matches!(t.lookup(&key, &payload), LookupAnswer::Found(_)));
    assert_eq!(
        t.lookup(&EffectKey::derive(&["other"]), &payload),
        LookupAnswer::NotFound
    );
    let premises = StripeRefundPremises(t.clone())
        .read(&key, &payload)
        .expect("premises");
    assert_eq!(premises["refunded_by_others"], json!(250));
    assert_eq!(premises["amount_paid"], json!(10_000));
}

#[test]
fn a_definite_4xx_a_5xx_and_a_409_map_to_failed_unknown_and_unknown() {
    let (sim, _api, t) = setup(Tier::One);
    sim.set_disputed("pi_1", true);
    let SendAnswer::Definite { code, .. } = send(&t, &EffectKey::derive(&["c"]), 2000) else {
        panic!()
    };
    assert_eq!(code, "charge_disputed");
    sim.set_disputed("pi_1", false);
    sim.error_after_apply(1);
    assert!(matches!(
        send(&t, &EffectKey::derive(&["d"]), 2000),
        SendAnswer::Unknown(_)
    ));
    assert_eq!(sim.refunded("pi_1"), 2000, "the 500 came after applying");
    // A request held at the service keeps its key in use: a concurrent send gets a 409.
    let stall = Stall::new();
    sim.hold_next(stall.clone());
    let key = EffectKey::derive(&["e"]);
    std::thread::scope(|s| {
        let first = s.spawn(|| send(&t, &key, 1000));
        stall.wait_reached();
        let second = send(&t, &key, 1000);
        assert!(
            matches!(&second, SendAnswer::Unknown(m) if m.contains("409")),
            "{second:?}"
        );
        stall.release();
        assert!(matches!(first.join().expect("join"), SendAnswer::Done(_)));
    });
}

#[test]
fn a_wrong_secret_is_a_definite_401_and_a_dead_server_is_unknown() {
    let (_sim, api, _t) = setup(Tier::One);
    let bad = StripeRefunds::new(StripeConfig::new(&api.base_url, "sk_wrong").expect("config"));
    assert!(
        matches!(send(&bad, &EffectKey::derive(&["f"]), 100), SendAnswer::Definite { code, .. } if code == "http_401")
    );
    let base = api.base_url.clone();
    drop(api);
    let dead = StripeRefunds::new(StripeConfig::new(base, SECRET).expect("config"));
    assert!(matches!(
        send(&dead, &EffectKey::derive(&["g"]), 100),
        SendAnswer::Unknown(_)
    ));
    let payload = json!({"payment_intent": "pi_1", "amount": 100, "currency": "usd"});
    assert!(matches!(
        dead.lookup(&EffectKey::derive(&["g"]), &payload),
        LookupAnswer::Unknown(_)
    ));
}

#[test]
fn a_server_answering_garbage_is_unknown_never_done_or_failed() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        for _ in 0..2 {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{not json");
            }
        }
    });
    let t = StripeRefunds::new(
        StripeConfig::new(format!("http://127.0.0.1:{port}"), SECRET).expect("config"),
    );
    assert!(matches!(
        send(&t, &EffectKey::derive(&["h"]), 100),
        SendAnswer::Unknown(_)
    ));
    let payload = json!({"payment_intent": "pi_1", "amount": 100, "currency": "usd"});
    assert!(matches!(
        t.lookup(&EffectKey::derive(&["h"]), &payload),
        LookupAnswer::Unknown(_)
    ));
    let _ = server.join();
}

#[test]
fn every_request_names_the_pinned_stripe_version() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let mut heads = Vec::new();
        for _ in 0..2 {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).unwrap_or(0);
                heads.push(String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase());
                let _ = s.write_all(b"HTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\n{}");
            }
        }
        heads
    });
    let t = StripeRefunds::new(
        StripeConfig::new(format!("http://127.0.0.1:{port}"), SECRET).expect("config"),
    );
    let _ = send(&t, &EffectKey::derive(&["v"]), 100);
    let payload = json!({"payment_intent": "pi_1", "amount": 100, "currency": "usd"});
    let _ = t.lookup(&EffectKey::derive(&["v"]), &payload);
    let heads = server.join().expect("server");
    assert_eq!(heads.len(), 2);
    let pinned = format!(
        "stripe-version: {}",
        interlock_stripe::refunds::STRIPE_VERSION
    );
    for h in heads {
        assert!(h.contains(&pinned), "{h}");
    }
}

#[test]
fn a_refund_in_another_currency_than_the_payment_is_refused_at_decision() {
    let (_sim, _api, t) = setup(Tier::One);
    let premises = StripeRefundPremises(t);
    let eur = json!({"payment_intent": "pi_1", "amount": 2000, "currency": "eur"});
    let err = premises
        .read(&EffectKey::derive(&["eur"]), &eur)
        .unwrap_err();
    assert!(matches!(err, PremiseError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("paid in usd"), "{err}");
    let usd = json!({"payment_intent": "pi_1", "amount": 2000, "currency": "USD"});
    let read = premises.read(&EffectKey::derive(&["usd"]), &usd).unwrap();
    assert_eq!(read["currency"], json!("usd"));
}

#[test]
fn a_refund_named_by_its_charge_is_sent_looked_up_and_checked_on_its_payment_through_the_gate() {
    use interlock::{Clock, Gate, GateConfig, Grant, Outcome, SqliteJournal, SystemClock};
    use interlock_stripe::refund::RefundPayload;

    let (sim, _api, t) = setup(Tier::One);
    let charge = sim.charge_of("pi_1").expect("the payment's charge");
    // Someone refunds part of the payment by hand, through the payment intent: it is on the
    // charge too, and counts as refunded by others.
    sim.hand_refund("pi_1", 1500);
    let premises = StripeRefundPremises(t.clone());
    let payload = RefundPayload::of_charge(&charge, 2000, "usd");
    let value = serde_json::to_value(&payload).unwrap();
    assert_eq!(value["charge"], json!(charge));
    let key = EffectKey::derive(&["by-charge"]);
    let read = premises.read(&key, &value).unwrap();
    assert_eq!(read["amount_paid"], json!(10_000));
    assert_eq!(read["refunded_by_others"], json!(1500));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let journal = Arc::new(SqliteJournal::open(&path, clock.clone()).unwrap());
    journal
        .grant_lease(
            // Scopes name the payment as the journal does: by its intent, however a refund
            // names it.
            &Grant::new("l", "ana@support", clock.now_ms())
                .scope("payment_intent", "pi_1")
                .cap("amount", 2000),
        )
        .unwrap();
    let gate = Gate::new(journal.clone(), journal, clock, GateConfig::beside(&path)).unwrap();
    let bound = gate.bind(Arc::new(t.clone()), Arc::new(premises)).unwrap();
    let effect = bound.decide(key.clone(), &payload, "l").unwrap();
    assert_eq!(
        effect.payload,
        json!({"payment_intent": "pi_1", "amount": 2000, "currency": "usd"}),
        "decided in canonical form"
    );
    let out = bound.submit(&effect).unwrap();
    assert!(
        matches!(&out, Outcome::Committed { replayed: false, result, .. } if result["charge"] == json!(charge)),
        "{out:?}"
    );
    // The refund is on the charge and the payment intent alike, found by the key on either.
    let refunds = sim.refunds("pi_1");
    assert_eq!(refunds.iter().map(|r| r.amount).sum::<i64>(), 3500);
    assert!(
        matches!(t.lookup(&key, &value), LookupAnswer::Found(r) if r["charge"] == json!(charge))
    );
    // A retry replays from the journal; nothing more reaches the service.
    let requests = sim.requests();
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        Outcome::Committed { replayed: true, .. }
    ));
    assert_eq!(sim.requests(), requests);
    // A charge the service does not know is a definite 404, not a send into the void.
    let unknown = json!({"charge": "ch_nobody", "amount": 100, "currency": "usd"});
    let answer = t.send(&SendRequest {
        key: &EffectKey::derive(&["nobody"]),
        payload: &unknown,
        timeout: Duration::from_secs(5),
        deadline: None,
        last_look: None,
    });
    assert!(
        matches!(&answer, SendAnswer::Definite { code, .. } if code == "resource_missing"),
        "{answer:?}"
    );
    // A payload naming both is refused before anything is sent.
    let both =
        json!({"charge": charge, "payment_intent": "pi_1", "amount": 100, "currency": "usd"});
    let answer = t.send(&SendRequest {
        key: &EffectKey::derive(&["both"]),
        payload: &both,
        timeout: Duration::from_secs(5),
        deadline: None,
        last_look: None,
    });
    assert!(
        matches!(&answer, SendAnswer::Definite { code, .. } if code == "invalid_payload"),
        "{answer:?}"
    );
    assert_eq!(sim.requests(), requests + 1);
}

/// A server answering every request with `status` and `body`, for `n` requests: its address.
fn answering(status: &'static str, body: &'static str, n: usize) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for _ in 0..n {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(
                    format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            }
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn a_refused_key_or_an_error_page_is_a_source_that_did_not_answer_never_a_definite_no() {
    let payload = json!({"payment_intent": "pi_1", "amount": 100, "currency": "usd"});
    let key = EffectKey::derive(&["k"]);
    // A rotated or revoked key reads as an outage: a refund is not refused for good by it.
    for status in ["401 Unauthorized", "403 Forbidden"] {
        let base = answering(status, r#"{"error":{"message":"Invalid API Key"}}"#, 1);
        let t = StripeRefunds::new(StripeConfig::new(base, SECRET).expect("config"));
        let err = StripeRefundPremises(t).read(&key, &payload).unwrap_err();
        assert!(
            matches!(err, PremiseError::Unavailable(_)),
            "{status}: {err}"
        );
    }
    // No such payment is an answer.
    let base = answering(
        "404 Not Found",
        r#"{"error":{"message":"No such payment_intent"}}"#,
        1,
    );
    let t = StripeRefunds::new(StripeConfig::new(base, SECRET).expect("config"));
    let err = StripeRefundPremises(t).read(&key, &payload).unwrap_err();
    assert!(matches!(err, PremiseError::Invalid(_)), "{err}");
    // The shop's order service behind a proxy that answers an HTML error page.
    let (_sim, _api, t) = setup(Tier::One);
    let shop = answering(
        "502 Bad Gateway",
        "<html><body>Bad Gateway</body></html>",
        1,
    );
    let premises = interlock_stripe::RefundPremises {
        stripe: StripeRefundPremises(t),
        shop: Some(shop),
    };
    let err = premises.read(&key, &payload).unwrap_err();
    assert!(matches!(err, PremiseError::Unavailable(_)), "{err}");
}
