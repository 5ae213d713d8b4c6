//! An approval is spent once: a lease is consumed by the first effect key dispatched under it,
//! in the dispatch's own transaction, and every other key is refused `lease_spent`, naming the
//! key that spent it — on every store, through the real gate, with racing handles. A grant may
//! allow more uses or a total over a payload field; an effect that provably never applied gives
//! its use back, an ambiguous one keeps it. Before uses were counted, every key below committed
//! under the one lease (one approval paid many times).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::sync::atomic::Ordering;

use interlock::core::RefusalCode;
use interlock::faults::FaultPoint;
use interlock::{Effect, EffectKey, GateError, Grant, ManualClock, Outcome, Tier};
use interlock_tests::stores::{Kind, Store};
use interlock_tests::targets::Ledger as Service;
use serde_json::json;

const T0: i64 = 1_790_000_000_000;

struct Setup {
    store: Store,
    clock: ManualClock,
}

fn setup(kind: Kind, label: &str, grant: Grant) -> Setup {
    let clock = ManualClock::at(T0);
    let store = Store::open(kind, label, Arc::new(clock.clone())).unwrap();
    store.grant(&grant).unwrap();
    Setup { store, clock }
}

/// The approval a person gives for one refund on `pi_1`: up to $20.
fn approval(id: &str) -> Grant {
    Grant::new(id, "ana@support", T0)
        .scope("payment_intent", "pi_1")
        .cap("amount", 2000)
}

fn effect(key: &str, lease: &str, amount: i64) -> Effect {
    Effect::new(
        EffectKey::fixed(key).unwrap(),
        &json!({"payment_intent": "pi_1", "amount": amount}),
        lease,
    )
    .unwrap()
}

fn bound(s: &Setup, service: Arc<Service>, attempt: &str) -> interlock::Bound {
    s.store
        .bound(Arc::new(s.clock.clone()), service, attempt)
        .unwrap()
}

fn refusal(out: &Outcome) -> Option<(RefusalCode, &str)> {
    match out {
        Outcome::Refused(r) => Some((r.code, r.reason.as_str())),
        _ => None,
    }
}

fn used(s: &Setup, lease: &str) -> Vec<String> {
    s.store
        .store()
        .lease_uses(lease)
        .unwrap()
        .into_iter()
        .map(|u| u.key)
        .collect()
}

fn one_lease_is_spent_by_the_first_key_and_refused_to_every_other_naming_it(kind: Kind) {
    let s = setup(kind, "spent-once", approval("case-4471"));
    let service = Service::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    let first = gate.submit(&effect("k-a", "case-4471", 2000)).unwrap();
    assert!(matches!(first, Outcome::Committed { .. }), "{first:?}");
    for key in ["k-b", "k-c", "k-d"] {
        let out = gate.submit(&effect(key, "case-4471", 2000)).unwrap();
        let (code, reason) =
            refusal(&out).unwrap_or_else(|| panic!("{key} was not refused: {out:?}"));
        assert_eq!(code, RefusalCode::LeaseSpent, "{reason}");
        assert!(reason.contains("key k-a spent it"), "{reason}");
    }
    // The key that spent it is answered from the journal, as ever.
    assert!(matches!(
        gate.submit(&effect("k-a", "case-4471", 2000)).unwrap(),
        Outcome::Committed { replayed: true, .. }
    ));
    assert_eq!(service.applied(), vec![("k-a".to_owned(), 2000)]);
    assert_eq!(service.sends.load(Ordering::SeqCst), 1);
    assert_eq!(used(&s, "case-4471"), ["k-a"]);
}

fn keys_racing_on_separate_handles_spend_a_two_use_lease_exactly_twice(kind: Kind) {
    let s = setup(kind, "two-uses", approval("case-2").uses(2));
    let service = Service::new(Tier::Two);
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let gate = s
                    .store
                    .worker(Arc::new(s.clock.clone()), service.clone(), &format!("t{i}"))
                    .unwrap();
                scope.spawn(move || {
                    gate.submit(&effect(&format!("k-{i}"), "case-2", 1500))
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let committed = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Committed { .. }))
        .count();
    let spent = outcomes
        .iter()
        .filter(|o| refusal(o).is_some_and(|(c, _)| c == RefusalCode::LeaseSpent))
        .count();
    assert_eq!((committed, spent), (2, 6), "{outcomes:?}");
    assert_eq!(service.applied().len(), 2);
    let mut holders = used(&s, "case-2");
    holders.sort();
    let mut applied: Vec<String> = service.applied().into_iter().map(|(k, _)| k).collect();
    applied.sort();
    assert_eq!(holders, applied);
}

fn a_total_admits_effects_until_their_amounts_would_pass_it(kind: Kind) {
    let s = setup(
        kind,
        "total",
        approval("budget-1").unlimited().total("amount", 5000),
    );
    let service = Service::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    let mut ends = Vec::new();
    for (key, amount) in [("a", 2000), ("b", 2000), ("c", 1500), ("d", 1000)] {
        ends.push(gate.submit(&effect(key, "budget-1", amount)).unwrap());
    }
    assert!(matches!(ends[0], Outcome::Committed { .. }));
    assert!(matches!(ends[1], Outcome::Committed { .. }));
    let (code, reason) = refusal(&ends[2]).unwrap();
    assert_eq!(code, RefusalCode::LeaseSpent);
    assert!(
        reason.contains("4000 is spent") && reason.contains("1000 left"),
        "{reason}"
    );
    assert!(
        matches!(ends[3], Outcome::Committed { .. }),
        "{:?}",
        ends[3]
    );
    let sum: i64 = service.applied().iter().map(|(_, a)| a).sum();
    assert_eq!(sum, 5000);
}

fn a_failed_effect_gives_its_use_back_and_a_refused_one_never_took_it(kind: Kind) {
    let s = setup(kind, "give-back", approval("case-3"));
    let service = Service::new(Tier::Two);
    service.refuse.lock().unwrap().insert("k-fails".into());
    let gate = bound(&s, service.clone(), "w1");
    // Over the cap: refused before anything is dispatched, so no use is taken.
    let over = gate.submit(&effect("k-over", "case-3", 2500)).unwrap();
    assert_eq!(refusal(&over).map(|r| r.0), Some(RefusalCode::Lease));
    assert!(used(&s, "case-3").is_empty());
    // A definite 4xx, and nothing found by key: FAILED, which the contract allows only when the
    // effect did not apply. Its use is given back in the same transaction.
    let failed = gate.submit(&effect("k-fails", "case-3", 2000)).unwrap();
    assert!(matches!(failed, Outcome::Failed(_)), "{failed:?}");
    assert!(used(&s, "case-3").is_empty());
    let next = gate.submit(&effect("k-next", "case-3", 2000)).unwrap();
    assert!(matches!(next, Outcome::Committed { .. }), "{next:?}");
    assert_eq!(used(&s, "case-3"), ["k-next"]);
    assert_eq!(service.applied(), vec![("k-next".to_owned(), 2000)]);
}

fn an_ambiguous_effect_keeps_its_use(kind: Kind) {
    let s = setup(kind, "ambiguous", approval("case-5"));
    // Tier 3: the service cannot be asked by key, so a send whose answer was lost is unknowable.
    let service = Service::new(Tier::Three);
    let crashed = s
        .store
        .crashing_at(
            Arc::new(s.clock.clone()),
            service.clone(),
            FaultPoint::AfterSend,
        )
        .unwrap();
    let e = effect("k-lost", "case-5", 2000);
    assert!(matches!(crashed.submit(&e), Err(GateError::Crashed(_))));
    assert_eq!(service.applied().len(), 1);
    s.clock.advance(600_000);
    let gate = bound(&s, service.clone(), "a2");
    let out = gate.submit(&e).unwrap();
    assert!(matches!(out, Outcome::Ambiguous(_)), "{out:?}");
    assert_eq!(used(&s, "case-5"), ["k-lost"]);
    let other = gate.submit(&effect("k-other", "case-5", 2000)).unwrap();
    let (code, reason) = refusal(&other).unwrap();
    assert_eq!(code, RefusalCode::LeaseSpent);
    assert!(reason.contains("k-lost"), "{reason}");
    assert_eq!(service.applied().len(), 1);
}

fn a_standing_lease_and_one_granted_before_uses_were_counted_allow_every_key(kind: Kind) {
    let s = setup(kind, "standing", approval("rule-1").unlimited());
    // A lease as the previous release stored it: no limit in its scope.
    s.store
        .tamper(
            "INSERT INTO {leases} (id, approver, scope, cap_field, cap, granted_ms) \
             VALUES ('legacy-1', 'ops', '{\"payment_intent\":\"pi_1\"}', 'amount', 2000, 0)",
        )
        .unwrap();
    let legacy = s
        .store
        .all_leases()
        .unwrap()
        .into_iter()
        .find(|g| g.id == "legacy-1")
        .unwrap();
    assert_eq!((legacy.uses, legacy.total.clone()), (None, None));
    let service = Service::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    for (i, lease) in ["rule-1", "rule-1", "legacy-1", "legacy-1"]
        .iter()
        .enumerate()
    {
        let out = gate.submit(&effect(&format!("k-{i}"), lease, 500)).unwrap();
        assert!(matches!(out, Outcome::Committed { .. }), "{lease}: {out:?}");
    }
    assert_eq!(service.applied().len(), 4);
    assert!(used(&s, "rule-1").is_empty());
}

fn an_imported_history_counts_against_its_lease_where_it_is_imported(kind: Kind) {
    let from = setup(kind, "import-from", approval("case-6"));
    let service = Service::new(Tier::Two);
    let e = effect("k-moved", "case-6", 2000);
    let out = bound(&from, service.clone(), "w1").submit(&e).unwrap();
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    let to = setup(kind, "import-to", approval("case-6"));
    let history = from.store.journal().history(&e.key).unwrap();
    to.store.journal().import_history(&history).unwrap();
    assert_eq!(used(&to, "case-6"), ["k-moved"]);
    let other = bound(&to, service.clone(), "w2")
        .submit(&effect("k-new", "case-6", 2000))
        .unwrap();
    assert_eq!(refusal(&other).map(|r| r.0), Some(RefusalCode::LeaseSpent));
    assert_eq!(service.applied().len(), 1);
}

fn a_lease_naming_its_spender_is_spent_by_that_principal_only(kind: Kind) {
    let s = setup(
        kind,
        "spenders",
        approval("case-4471").unlimited().spender("billing-worker"),
    );
    let service = Service::new(Tier::Two);
    // Another principal (an in-process worker configured as support-bot) that knows the id, and
    // a worker with no principal at all: neither may spend it.
    let other = bound(&s, service.clone(), "w1").with_caller("support-bot");
    let out = other.submit(&effect("k-a", "case-4471", 500)).unwrap();
    assert_eq!(
        refusal(&out).map(|r| r.0),
        Some(RefusalCode::LeaseCaller),
        "{out:?}"
    );
    let nobody = bound(&s, service.clone(), "w2");
    let out = nobody.submit(&effect("k-b", "case-4471", 500)).unwrap();
    assert_eq!(refusal(&out).map(|r| r.0), Some(RefusalCode::LeaseCaller));
    assert!(service.applied().is_empty(), "nothing was sent");
    let named = bound(&s, service.clone(), "w3").with_caller("billing-worker");
    let out = named.submit(&effect("k-c", "case-4471", 500)).unwrap();
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    assert_eq!(service.applied().len(), 1);
}

fn a_lease_naming_its_target_is_spent_on_that_target_only(kind: Kind) {
    // The ledger's target is named `payments`.
    let s = setup(
        kind,
        "on-target",
        approval("payouts-only").unlimited().on_target("payouts"),
    );
    let service = Service::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    let out = gate.submit(&effect("k-a", "payouts-only", 500)).unwrap();
    let (code, reason) = refusal(&out).unwrap_or((RefusalCode::Budget, "not refused"));
    assert_eq!(code, RefusalCode::Lease, "{out:?}");
    assert!(reason.contains("payouts only"), "{reason}");
    assert!(service.applied().is_empty(), "nothing was sent");
    let s = setup(
        kind,
        "on-target-2",
        approval("payments-ok").unlimited().on_target("payments"),
    );
    let gate = bound(&s, service.clone(), "w1");
    let out = gate.submit(&effect("k-b", "payments-ok", 500)).unwrap();
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
}

interlock_tests::every_store!(
    a_lease_naming_its_target_is_spent_on_that_target_only,
    a_lease_naming_its_spender_is_spent_by_that_principal_only,
    an_imported_history_counts_against_its_lease_where_it_is_imported,
    one_lease_is_spent_by_the_first_key_and_refused_to_every_other_naming_it,
    keys_racing_on_separate_handles_spend_a_two_use_lease_exactly_twice,
    a_total_admits_effects_until_their_amounts_would_pass_it,
    a_failed_effect_gives_its_use_back_and_a_refused_one_never_took_it,
    an_ambiguous_effect_keeps_its_use,
    a_standing_lease_and_one_granted_before_uses_were_counted_allow_every_key,
);
