//! Premises are judged, not only compared: a binding's rules over the premises
//! (`within_cap == true`, `amount_paid - refunded_by_others >= payload.amount`) are judged on the
//! facts the gate reads itself — at decide, at every dispatch and at recovery — and an effect
//! they forbid is refused `premise_rule`, naming the rule and the values, with nothing sent.
//! The rules are journaled with the proposal, so a recoverer that states none still judges
//! them. On SQLite and PostgreSQL.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::{Arc, Mutex};

use interlock::core::{EffectState, Event, RefusalCode, Resolution};
use interlock::faults::FaultPoint;
use interlock::gate::DecideError;
use interlock::premise::FnPremises;
use interlock::{Effect, EffectKey, Grant, ManualClock, Outcome, Tier};
use interlock_tests::stores::{Kind, Store};
use interlock_tests::targets::Ledger;
use serde_json::{Value, json};

const T0: i64 = 1_796_119_200_000;
const CAP_RULE: &str = "within_cap == true";

/// The account service's facts about the credit: whether it keeps the account within its cap.
#[derive(Clone, Default)]
struct Account(Arc<Mutex<bool>>);

impl Account {
    fn set(&self, within_cap: bool) {
        *self.0.lock().unwrap() = within_cap;
    }

    fn reader(&self) -> Arc<dyn interlock::premise::PremiseReader> {
        let me = self.clone();
        Arc::new(FnPremises(move |_: &EffectKey, _: &Value| {
            let within = *me.0.lock().unwrap();
            Ok([("within_cap".to_owned(), json!(within))]
                .into_iter()
                .collect())
        }))
    }
}

fn open(kind: Kind, label: &str) -> (Store, ManualClock) {
    let clock = ManualClock::at(T0);
    let store = Store::open(kind, label, Arc::new(clock.clone())).unwrap();
    store
        .grant(&Grant::new("ops", "ops@example", T0).unlimited())
        .unwrap();
    (store, clock)
}

fn bound(
    store: &Store,
    clock: &ManualClock,
    target: Arc<Ledger>,
    account: &Account,
    rules: &[&str],
) -> interlock::Bound {
    store
        .gate(Arc::new(clock.clone()))
        .unwrap()
        .bind(target, account.reader())
        .unwrap()
        .with_rules(rules.iter().copied())
        .unwrap()
}

fn credit(key: &str) -> Effect {
    Effect::new(
        EffectKey::fixed(key).unwrap(),
        &json!({"customer": "c-10", "amount": 500}),
        "ops",
    )
    .unwrap()
}

fn refusal(out: &Outcome) -> Option<(RefusalCode, &str)> {
    match out {
        Outcome::Refused(r) => Some((r.code, r.reason.as_str())),
        _ => None,
    }
}

fn a_fact_that_held_still_but_forbids_the_credit_is_refused_by_its_rule(kind: Kind) {
    let (store, clock) = open(kind, "still");
    let account = Account::default();
    account.set(false);
    // Without a rule, a decision on `within_cap = false` that stays false is sent: nothing moved.
    let bare_target = Ledger::new(Tier::Two);
    let bare = bound(&store, &clock, bare_target.clone(), &account, &[]);
    let decided = bare
        .decide(
            EffectKey::fixed("bare").unwrap(),
            &json!({"customer": "c-10", "amount": 500}),
            "ops",
        )
        .unwrap();
    let out = bare.submit(&decided).unwrap();
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    assert_eq!(bare_target.applied().len(), 1);

    // With it, the decision is refused at decide, naming the rule and the value.
    let target = Ledger::new(Tier::Two);
    let gate = bound(&store, &clock, target.clone(), &account, &[CAP_RULE]);
    let at_decide = gate.decide(
        EffectKey::fixed("ruled").unwrap(),
        &json!({"customer": "c-10", "amount": 500}),
        "ops",
    );
    match at_decide {
        Err(DecideError::Rules { broken }) => {
            assert_eq!(broken.len(), 1);
            assert_eq!(broken[0].rule, CAP_RULE);
            assert_eq!(broken[0].values.get("within_cap"), Some(&json!(false)));
        }
        other => panic!("not refused at decide: {other:?}"),
    }
    // And a caller that decided without reading it (or said nothing of it) is refused at the
    // dispatch, on the facts the gate read itself: journaled, final, nothing sent.
    let out = gate.submit(&credit("ruled")).unwrap();
    let (code, why) = refusal(&out).unwrap_or_else(|| panic!("not refused: {out:?}"));
    assert_eq!(code, RefusalCode::PremiseRule);
    assert!(
        why.contains("rule `within_cap == true` does not hold (within_cap = false)"),
        "{why}"
    );
    assert!(target.applied().is_empty(), "nothing sent");
    let state = store
        .journal()
        .state(&EffectKey::fixed("ruled").unwrap())
        .unwrap();
    match state {
        EffectState::Resolved {
            first,
            resolution: Resolution::Refused(r),
        } => {
            assert_eq!(r.code, RefusalCode::PremiseRule);
            assert_eq!(first.rules, vec![CAP_RULE.to_owned()]);
        }
        other => panic!("not a journaled refusal: {other:?}"),
    }
    // Once the facts allow it, a new decision goes through.
    account.set(true);
    let ok = gate
        .decide(
            EffectKey::fixed("ruled-2").unwrap(),
            &json!({"customer": "c-10", "amount": 500}),
            "ops",
        )
        .unwrap();
    let out = gate.submit(&ok).unwrap();
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    assert_eq!(target.applied().len(), 1);
}

#[test]
fn a_fact_that_held_still_but_forbids_the_credit_is_refused_by_its_rule_on_every_store() {
    a_fact_that_held_still_but_forbids_the_credit_is_refused_by_its_rule(Kind::Sqlite);
    a_fact_that_held_still_but_forbids_the_credit_is_refused_by_its_rule(Kind::Postgres);
}

fn a_recoverer_that_states_no_rule_still_judges_the_journaled_one(kind: Kind) {
    let (store, clock) = open(kind, "recovery");
    let account = Account::default();
    account.set(true);
    let target = Ledger::new(Tier::Two);
    // The first worker dispatches under the rule and dies before its request leaves.
    let faults = interlock_testkit::faults::ScriptedFaults::new();
    faults.arm(
        FaultPoint::AfterDispatch,
        interlock_testkit::faults::Action::Crash,
    );
    let dying = store
        .gate(Arc::new(clock.clone()))
        .unwrap()
        .with_attempt("dying")
        .with_faults(faults)
        .bind(target.clone(), account.reader())
        .unwrap()
        .with_rules([CAP_RULE])
        .unwrap();
    let crashed = dying.submit(&credit("k"));
    assert!(crashed.is_err(), "{crashed:?}");
    // Meanwhile the account reached its cap. The recoverer's binding states no rule; the lookup
    // finds nothing, and the journaled rule forbids the resend.
    account.set(false);
    clock.advance(120_000);
    let recoverer = bound(&store, &clock, target.clone(), &account, &[]).with_attempt("recoverer");
    let out = recoverer.recover(&EffectKey::fixed("k").unwrap()).unwrap();
    let (code, why) = refusal(&out).unwrap_or_else(|| panic!("not refused: {out:?}"));
    assert_eq!(code, RefusalCode::PremiseRule, "{why}");
    assert!(why.contains("read at recovery"), "{why}");
    assert!(target.applied().is_empty(), "nothing sent");
    // The dispatch record shows what the rule was judged on.
    let history = store
        .journal()
        .history(&EffectKey::fixed("k").unwrap())
        .unwrap();
    assert!(history.iter().any(|r| matches!(
        &r.event,
        Event::Dispatched(d) if d.recheck.broken.is_empty() && d.recheck.premises_now.get("within_cap") == Some(&json!(true))
    )));
}

#[test]
fn a_recoverer_that_states_no_rule_still_judges_the_journaled_one_on_every_store() {
    a_recoverer_that_states_no_rule_still_judges_the_journaled_one(Kind::Sqlite);
    a_recoverer_that_states_no_rule_still_judges_the_journaled_one(Kind::Postgres);
}

#[test]
fn what_is_left_to_refund_must_cover_the_amount_and_verify_judges_it_again() {
    let (store, clock) = open(Kind::Sqlite, "left");
    let paid = Arc::new(Mutex::new((1000i64, 0i64)));
    let facts = paid.clone();
    let reader: Arc<dyn interlock::premise::PremiseReader> =
        Arc::new(FnPremises(move |_: &EffectKey, _: &Value| {
            let (amount_paid, others) = *facts.lock().unwrap();
            Ok([
                ("amount_paid".to_owned(), json!(amount_paid)),
                ("refunded_by_others".to_owned(), json!(others)),
            ]
            .into_iter()
            .collect())
        }));
    let target = Ledger::new(Tier::Two);
    let gate = store
        .gate(Arc::new(clock.clone()))
        .unwrap()
        .bind(target.clone(), reader)
        .unwrap()
        .with_rules(["amount_paid - refunded_by_others >= payload.amount"])
        .unwrap();
    *paid.lock().unwrap() = (1000, 600);
    let over = gate
        .decide(
            EffectKey::fixed("over").unwrap(),
            &json!({"amount": 500}),
            "ops",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        over.contains("amount_paid = 1000, payload.amount = 500, refunded_by_others = 600"),
        "{over}"
    );
    let fits = gate
        .decide(
            EffectKey::fixed("fits").unwrap(),
            &json!({"amount": 400}),
            "ops",
        )
        .unwrap();
    assert!(matches!(
        gate.submit(&fits).unwrap(),
        Outcome::Committed { .. }
    ));
    let v = interlock::verify::verify(
        store.journal().as_ref(),
        &EffectKey::fixed("fits").unwrap(),
        &interlock::verify::Sources::default(),
    );
    let premises = v
        .columns
        .iter()
        .find(|c| c.name == "premises held")
        .map(|c| (c.holds, c.detail.clone()));
    assert_eq!(
        premises,
        Some((
            Some(true),
            "re-read before every send; none had moved, and its 1 rule(s) held at every send"
                .to_owned()
        ))
    );
}

#[test]
fn a_rule_that_cannot_be_read_is_refused_where_the_binding_is_made() {
    let (store, clock) = open(Kind::Sqlite, "unreadable");
    let err = store
        .gate(Arc::new(clock))
        .unwrap()
        .bind(Ledger::new(Tier::Two), Account::default().reader())
        .unwrap()
        .with_rules(["within_cap = true"])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("within_cap = true") && err.contains("not a comparison"),
        "{err}"
    );
}
