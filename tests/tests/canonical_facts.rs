//! One payment is one payment in every limit, however a caller names it: the gate puts each
//! payload in its target's canonical form (Stripe: a charge by the payment intent it paid, the
//! currency in lower case, the amount an integer, no field a refund does not take) before it is
//! hashed, journaled, scoped or counted. A payload with no canonical form is refused
//! `invalid_payload` with nothing journaled. Against the payments API over HTTP, on SQLite and
//! PostgreSQL.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use interlock::budget::{Budget, Limit, Window};
use interlock::core::{EffectState, RefusalCode};
use interlock::{Effect, EffectKey, Grant, ManualClock, Outcome, Tier};
use interlock_stripe::{StripeConfig, StripeRefunds};
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use interlock_tests::rng::Rng;
use interlock_tests::stores::{Kind, Store};
use serde_json::{Value, json};

const SECRET: &str = "sk_test_interlock";
// 2026-12-01T10:00:00Z.
const T0: i64 = 1_796_119_200_000;
const HOUR: i64 = 3_600_000;

struct World {
    sim: Arc<SimPayments>,
    _api: PaymentsApi,
    store: Store,
    clock: ManualClock,
    gate: interlock::Bound,
}

/// Payments `pi_a` and `pi_b` (charges `ch_a`, `ch_b`) of 10 000 each, a lease `ops` as `lease`
/// makes it, and `budgets`.
fn world(kind: Kind, label: &str, lease: Grant, budgets: &[Budget]) -> World {
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(86_400),
        Arc::new(ManualClock::at(0)),
    );
    sim.add_payment("pi_a", 10_000);
    sim.add_payment("pi_b", 10_000);
    let api = PaymentsApi::start(sim.clone(), SECRET).expect("payments API");
    let clock = ManualClock::at(T0);
    let store = Store::open(kind, label, Arc::new(clock.clone())).unwrap();
    store.grant(&lease).unwrap();
    for b in budgets {
        store.store().set_budget(b, "finance@example").unwrap();
    }
    let target = StripeRefunds::new(StripeConfig::new(&api.base_url, SECRET).unwrap());
    let gate = store
        .bound(Arc::new(clock.clone()), Arc::new(target), "w1")
        .unwrap();
    World {
        sim,
        _api: api,
        store,
        clock,
        gate,
    }
}

fn ops() -> Grant {
    Grant::new("ops", "ops@example", T0).unlimited()
}

/// At most `max` refunds per payment intent in any hour.
fn one_per_payment(max: i64) -> Budget {
    Budget {
        id: "once-per-payment".into(),
        scope: BTreeMap::new(),
        per: vec!["payment_intent".into()],
        window: Window::Rolling { ms: HOUR },
        limit: Limit::Count { max },
    }
}

fn refund(key: &str, payload: Value) -> Effect {
    Effect::new(EffectKey::fixed(key).unwrap(), &payload, "ops").unwrap()
}

fn code(out: &Outcome) -> Option<RefusalCode> {
    match out {
        Outcome::Refused(r) => Some(r.code),
        _ => None,
    }
}

fn committed(out: &Outcome) -> bool {
    matches!(out, Outcome::Committed { .. })
}

fn both_kinds(test: fn(Kind)) {
    test(Kind::Sqlite);
    test(Kind::Postgres);
}

fn a_refund_by_the_charge_counts_against_its_payment_s_budget(kind: Kind) {
    let w = world(kind, "by-charge", ops(), &[one_per_payment(1)]);
    let first = w
        .gate
        .submit(&refund(
            "r1",
            json!({"payment_intent": "pi_a", "amount": 100, "currency": "usd"}),
        ))
        .unwrap();
    assert!(committed(&first), "{first:?}");
    let again = w
        .gate
        .submit(&refund(
            "r2",
            json!({"payment_intent": "pi_a", "amount": 100, "currency": "usd"}),
        ))
        .unwrap();
    assert_eq!(code(&again), Some(RefusalCode::Budget), "{again:?}");
    let by_charge = w
        .gate
        .submit(&refund(
            "r3",
            json!({"charge": "ch_a", "amount": 100, "currency": "usd"}),
        ))
        .unwrap();
    assert_eq!(
        code(&by_charge),
        Some(RefusalCode::Budget),
        "the same payment by its charge: {by_charge:?}"
    );
    assert_eq!(w.sim.refunds("pi_a").len(), 1, "one refund on the payment");
    // Another payment has its own counter, by whichever name.
    let other = w
        .gate
        .submit(&refund(
            "r4",
            json!({"charge": "ch_b", "amount": 100, "currency": "usd"}),
        ))
        .unwrap();
    assert!(committed(&other), "{other:?}");
    // The journal holds the payment by its intent.
    let state = w
        .store
        .journal()
        .state(&EffectKey::fixed("r4").unwrap())
        .unwrap();
    assert_eq!(
        state.first().map(|f| f.payload.clone()),
        Some(json!({"payment_intent": "pi_b", "amount": 100, "currency": "usd"}))
    );
}

#[test]
fn a_refund_by_the_charge_counts_against_its_payment_s_budget_on_every_store() {
    both_kinds(a_refund_by_the_charge_counts_against_its_payment_s_budget);
}

fn a_currency_in_upper_case_counts_in_a_lower_case_scope(kind: Kind) {
    let mut usd = one_per_payment(1);
    usd.id = "one-usd-refund".into();
    usd.per = Vec::new();
    usd.scope = [("currency".to_owned(), json!("usd"))]
        .into_iter()
        .collect();
    let w = world(kind, "currency-case", ops(), &[usd]);
    let first = w
        .gate
        .submit(&refund(
            "u1",
            json!({"payment_intent": "pi_a", "amount": 100, "currency": "usd"}),
        ))
        .unwrap();
    assert!(committed(&first), "{first:?}");
    let upper = w
        .gate
        .submit(&refund(
            "u2",
            json!({"payment_intent": "pi_b", "amount": 100, "currency": "USD"}),
        ))
        .unwrap();
    assert_eq!(code(&upper), Some(RefusalCode::Budget), "{upper:?}");
    assert!(w.sim.refunds("pi_b").is_empty());
}

#[test]
fn a_currency_in_upper_case_counts_in_a_lower_case_scope_on_every_store() {
    both_kinds(a_currency_in_upper_case_counts_in_a_lower_case_scope);
}

fn a_lease_scoped_to_a_payment_covers_its_charge_and_no_other(kind: Kind) {
    let lease = ops().scope("payment_intent", "pi_a").cap("amount", 500);
    let w = world(kind, "scope", lease, &[]);
    let own = w
        .gate
        .submit(&refund(
            "s1",
            json!({"charge": "ch_a", "amount": 500, "currency": "usd"}),
        ))
        .unwrap();
    assert!(committed(&own), "its own charge is the payment: {own:?}");
    let other = w
        .gate
        .submit(&refund(
            "s2",
            json!({"charge": "ch_b", "amount": 100, "currency": "usd"}),
        ))
        .unwrap();
    assert_eq!(code(&other), Some(RefusalCode::Lease), "{other:?}");
    assert!(w.sim.refunds("pi_b").is_empty());
}

#[test]
fn a_lease_scoped_to_a_payment_covers_its_charge_and_no_other_on_every_store() {
    both_kinds(a_lease_scoped_to_a_payment_covers_its_charge_and_no_other);
}

fn a_payload_with_no_canonical_form_is_refused_and_nothing_is_journaled(kind: Kind) {
    let w = world(kind, "invalid", ops(), &[]);
    let cases = [
        (
            "unknown-field",
            json!({"payment_intent": "pi_a", "amount": 100, "currency": "usd", "merchant": "m1"}),
            "merchant",
        ),
        (
            "amount-text",
            json!({"payment_intent": "pi_a", "amount": "100", "currency": "usd"}),
            "refund payload",
        ),
        (
            "amount-fraction",
            json!({"payment_intent": "pi_a", "amount": 100.5, "currency": "usd"}),
            "refund payload",
        ),
        (
            "currency-code",
            json!({"payment_intent": "pi_a", "amount": 100, "currency": "US"}),
            "three-letter",
        ),
        (
            "charge-of-another",
            json!({"payment_intent": "pi_a", "charge": "ch_b", "amount": 100, "currency": "usd"}),
            "paid payment intent pi_b, not pi_a",
        ),
        (
            "no-such-charge",
            json!({"charge": "ch_nothing", "amount": 100, "currency": "usd"}),
            "ch_nothing",
        ),
    ];
    for (key, payload, says) in cases {
        let out = w.gate.submit(&refund(key, payload)).unwrap();
        let Outcome::Refused(r) = &out else {
            panic!("{key}: not refused: {out:?}")
        };
        assert_eq!(r.code, RefusalCode::InvalidPayload, "{key}: {r:?}");
        assert!(r.reason.contains(says), "{key}: {}", r.reason);
        let state = w
            .store
            .journal()
            .state(&EffectKey::fixed(key).unwrap())
            .unwrap();
        assert!(
            matches!(state, EffectState::Absent),
            "{key}: journaled {state:?}"
        );
    }
    assert!(w.sim.refunds("pi_a").is_empty() && w.sim.refunds("pi_b").is_empty());
}

#[test]
fn a_payload_with_no_canonical_form_is_refused_and_nothing_is_journaled_on_every_store() {
    both_kinds(a_payload_with_no_canonical_form_is_refused_and_nothing_is_journaled);
}

#[test]
fn another_spelling_of_the_payload_a_key_holds_replays_it_and_another_payment_conflicts() {
    let w = world(Kind::Sqlite, "respell", ops(), &[]);
    let first = w
        .gate
        .submit(&refund(
            "k",
            json!({"charge": "ch_a", "amount": 100, "currency": "USD"}),
        ))
        .unwrap();
    assert!(committed(&first), "{first:?}");
    for spelling in [
        json!({"charge": "ch_a", "amount": 100, "currency": "USD"}),
        json!({"payment_intent": "pi_a", "amount": 100, "currency": "usd"}),
        json!({"payment_intent": "pi_a", "charge": "ch_a", "amount": 100, "currency": "Usd", "reason": null}),
    ] {
        let again = w.gate.submit(&refund("k", spelling.clone())).unwrap();
        assert!(
            matches!(again, Outcome::Committed { replayed: true, .. }),
            "{spelling}: {again:?}"
        );
    }
    let other = w
        .gate
        .submit(&refund(
            "k",
            json!({"charge": "ch_b", "amount": 100, "currency": "usd"}),
        ))
        .unwrap();
    assert_eq!(code(&other), Some(RefusalCode::ConflictingPayload));
    assert_eq!(w.sim.refunds("pi_a").len(), 1);
    assert!(w.sim.refunds("pi_b").is_empty());
}

#[test]
fn a_charge_that_cannot_be_resolved_now_is_answered_retry_and_nothing_is_journaled() {
    let w = world(Kind::Sqlite, "unresolved", ops(), &[]);
    // Nothing listens on port 9 on this machine's loopback: the read is lost.
    let down = StripeRefunds::new(StripeConfig::new("http://127.0.0.1:9", SECRET).unwrap());
    let gate = w
        .store
        .bound(Arc::new(w.clock.clone()), Arc::new(down), "w2")
        .unwrap();
    let out = gate
        .submit(&refund(
            "down",
            json!({"charge": "ch_a", "amount": 100, "currency": "usd"}),
        ))
        .unwrap();
    assert!(matches!(out, Outcome::Retry { .. }), "{out:?}");
    let state = w
        .store
        .journal()
        .state(&EffectKey::fixed("down").unwrap())
        .unwrap();
    assert!(matches!(state, EffectState::Absent), "{state:?}");
}

#[test]
fn a_retry_spelt_as_proposed_reads_nothing_and_an_outage_is_retry_never_a_conflict() {
    let w = world(Kind::Sqlite, "alias", ops(), &[]);
    let by_charge = json!({"charge": "ch_a", "amount": 100, "currency": "usd"});
    let first = w.gate.submit(&refund("k", by_charge.clone())).unwrap();
    assert!(committed(&first), "{first:?}");
    // The payments API is unreachable now, to the same target by name.
    let down = StripeRefunds::new(StripeConfig::new("http://127.0.0.1:9", SECRET).unwrap());
    let gate = w
        .store
        .bound(Arc::new(w.clock.clone()), Arc::new(down), "w2")
        .unwrap();
    // Spelt as proposed: the journal knows the spelling, so nothing is read to answer it.
    let again = gate.submit(&refund("k", by_charge)).unwrap();
    assert!(
        matches!(again, Outcome::Committed { replayed: true, .. }),
        "{again:?}"
    );
    // Spelt another way, with the charge unreadable: RETRY, never a conflict on doubt.
    let other_spelling = json!({"charge": "ch_a", "amount": 100, "currency": "USD"});
    let doubt = gate.submit(&refund("k", other_spelling)).unwrap();
    assert!(matches!(doubt, Outcome::Retry { .. }), "{doubt:?}");
    assert_eq!(w.sim.refunds("pi_a").len(), 1);
}

/// One spelling of a refund of `amount` from payment `p` (`a` or `b`): by the intent, the
/// charge or both, the currency in any case, the fields in any order, with or without fields
/// that say nothing (`reason: null`, `metadata: null`).
fn spelling(rng: &mut Rng, p: char, amount: i64) -> Value {
    let mut fields: Vec<String> = Vec::new();
    match rng.below(3) {
        0 => fields.push(format!("\"payment_intent\": \"pi_{p}\"")),
        1 => fields.push(format!("\"charge\": \"ch_{p}\"")),
        _ => {
            fields.push(format!("\"payment_intent\": \"pi_{p}\""));
            fields.push(format!("\"charge\": \"ch_{p}\""));
        }
    }
    let currency: String = "usd"
        .chars()
        .map(|c| {
            if rng.chance(50) {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    fields.push(format!("\"currency\": \"{currency}\""));
    fields.push(format!("\"amount\": {amount}"));
    if rng.chance(30) {
        fields.push("\"reason\": null".into());
    }
    if rng.chance(30) {
        fields.push("\"metadata\": null".into());
    }
    // Any order, as a caller's JSON text holds it.
    for i in (1..fields.len()).rev() {
        let j = usize::try_from(rng.below(u64::try_from(i + 1).unwrap())).unwrap();
        fields.swap(i, j);
    }
    serde_json::from_str(&format!("{{{}}}", fields.join(", "))).unwrap()
}

#[test]
fn random_spellings_of_one_payment_count_as_one_in_every_limit() {
    for seed in 0..12u64 {
        let mut rng = Rng(seed);
        // Every limit a payment can be named in: a lease scoped to the payments and capped, a
        // count per payment, a sum per payment and currency.
        let lease = ops().cap("amount", 300);
        let sum = Budget {
            id: "sum-per-payment".into(),
            scope: [("currency".to_owned(), json!("usd"))]
                .into_iter()
                .collect(),
            per: vec!["payment_intent".into()],
            window: Window::Rolling { ms: HOUR },
            limit: Limit::Sum {
                field: "amount".into(),
                max: 300,
            },
        };
        let w = world(
            Kind::Sqlite,
            &format!("spellings-{seed}"),
            lease,
            &[one_per_payment(1), sum],
        );
        let mut done: BTreeMap<char, usize> = BTreeMap::new();
        for n in 0..6 {
            let p = if rng.chance(50) { 'a' } else { 'b' };
            let payload = spelling(&mut rng, p, 300);
            let out = w
                .gate
                .submit(&refund(&format!("s{seed}-{n}"), payload.clone()))
                .unwrap();
            let first = !done.contains_key(&p);
            if first {
                assert!(committed(&out), "seed {seed}: {payload}: {out:?}");
            } else {
                assert_eq!(
                    code(&out),
                    Some(RefusalCode::Budget),
                    "seed {seed}: {payload}: {out:?}"
                );
            }
            *done.entry(p).or_default() += 1;
        }
        for p in ["pi_a", "pi_b"] {
            assert!(
                w.sim.refunds(p).len() <= 1,
                "seed {seed}: {p} refunded {} times",
                w.sim.refunds(p).len()
            );
        }
    }
}
