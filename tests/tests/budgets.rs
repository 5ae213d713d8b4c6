//! Budgets hold across every key and every worker: an effect is dispatched only if it fits every
//! budget in force that it matches, checked in the transaction that writes its `DISPATCHED` (on
//! every store, with racing handles); a refusal names the budget, what is used and left, and when
//! room frees. A place is held for as long as the effect may have applied and given back only by
//! an end that proves it never did; changes are journaled with who made them.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::collections::BTreeMap;
use std::sync::Arc;

use interlock::budget::{Budget, CalendarUnit, Limit, Window};
use interlock::core::RefusalCode;
use interlock::faults::FaultPoint;
use interlock::lease::in_force;
use interlock::{Clock, Effect, EffectKey, GateError, Grant, ManualClock, Outcome, Tier};
use interlock_tests::stores::{Kind, Store};
use interlock_tests::targets::Ledger;
use serde_json::json;

// 2026-12-01T10:00:00Z.
const T0: i64 = 1_796_119_200_000;
const HOUR: i64 = 3_600_000;

struct Setup {
    store: Store,
    clock: ManualClock,
}

fn setup(kind: Kind, label: &str, budgets: &[Budget]) -> Setup {
    let clock = ManualClock::at(T0);
    let store = Store::open(kind, label, Arc::new(clock.clone())).unwrap();
    store
        .grant(&Grant::new("ops", "ops@example", T0).unlimited())
        .unwrap();
    for b in budgets {
        store.store().set_budget(b, "finance@example").unwrap();
    }
    Setup { store, clock }
}

fn sum_per_day(id: &str, max: i64) -> Budget {
    Budget {
        id: id.into(),
        scope: BTreeMap::new(),
        per: Vec::new(),
        window: Window::Calendar {
            unit: CalendarUnit::Day,
            utc_offset_minutes: 0,
        },
        limit: Limit::Sum {
            field: "amount".into(),
            max,
        },
    }
}

fn effect(key: &str, amount: i64) -> Effect {
    Effect::new(
        EffectKey::fixed(key).unwrap(),
        &json!({"payment_intent": "pi_1", "customer": "cus_1", "amount": amount}),
        "ops",
    )
    .unwrap()
}

fn bound(s: &Setup, service: Arc<Ledger>, attempt: &str) -> interlock::Bound {
    s.store
        .bound(Arc::new(s.clock.clone()), service, attempt)
        .unwrap()
}

fn budget_refusal(out: &Outcome) -> Option<&str> {
    match out {
        Outcome::Refused(r) if r.code == RefusalCode::Budget => Some(r.reason.as_str()),
        _ => None,
    }
}

fn sum(service: &Ledger) -> i64 {
    service.applied().iter().map(|(_, a)| a).sum()
}

fn a_sum_per_day_admits_until_full_and_refuses_naming_the_budget_and_when_room_frees(kind: Kind) {
    let s = setup(kind, "sum-day", &[sum_per_day("refunds-daily", 5000)]);
    let service = Ledger::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    let a = gate.submit(&effect("a", 2000)).unwrap();
    let b = gate.submit(&effect("b", 2000)).unwrap();
    assert!(matches!(a, Outcome::Committed { .. }) && matches!(b, Outcome::Committed { .. }));
    let c = gate.submit(&effect("c", 1500)).unwrap();
    let why = budget_refusal(&c).unwrap_or_else(|| panic!("not refused by the budget: {c:?}"));
    assert!(
        why.contains("budget refunds-daily")
            && why.contains("4000 is used, 1000 left")
            && why.contains("room frees at"),
        "{why}"
    );
    let d = gate.submit(&effect("d", 1000)).unwrap();
    assert!(matches!(d, Outcome::Committed { .. }), "{d:?}");
    assert_eq!(sum(&service), 5000);
    // The next day has room again.
    s.clock.advance(24 * HOUR);
    let e = gate.submit(&effect("e", 5000)).unwrap();
    assert!(matches!(e, Outcome::Committed { .. }), "{e:?}");
}

fn racing_handles_never_take_a_budget_past_its_limit(kind: Kind) {
    let mut three = sum_per_day("three-a-day", 0);
    three.limit = Limit::Count { max: 3 };
    let s = setup(kind, "race", &[three]);
    let service = Ledger::new(Tier::Two);
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let gate = s
                    .store
                    .worker(Arc::new(s.clock.clone()), service.clone(), &format!("t{i}"))
                    .unwrap();
                scope.spawn(move || gate.submit(&effect(&format!("k-{i}"), 100)).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let committed = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Committed { .. }))
        .count();
    let refused = outcomes
        .iter()
        .filter(|o| budget_refusal(o).is_some())
        .count();
    assert_eq!((committed, refused), (3, 5), "{outcomes:?}");
    assert_eq!(service.applied().len(), 3);
}

fn a_scope_and_per_count_only_matching_effects_each_in_its_own_counter(kind: Kind) {
    let per_customer = Budget {
        id: "bot-twice-per-customer".into(),
        scope: [("label.agent".to_owned(), json!("bot-7"))].into(),
        per: vec!["customer".into()],
        window: Window::Rolling { ms: 7 * 24 * HOUR },
        limit: Limit::Count { max: 2 },
    };
    let s = setup(kind, "per", &[per_customer]);
    let service = Ledger::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    let by_bot = |key: &str, customer: &str| {
        Effect::new(
            EffectKey::fixed(key).unwrap(),
            &json!({"payment_intent": "pi_1", "customer": customer, "amount": 100}),
            "ops",
        )
        .unwrap()
        .label("agent", "bot-7")
    };
    for key in ["b1", "b2"] {
        let out = gate.submit(&by_bot(key, "cus_1")).unwrap();
        assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    }
    let third = gate.submit(&by_bot("b3", "cus_1")).unwrap();
    assert!(budget_refusal(&third).is_some(), "{third:?}");
    // Another customer has a counter of its own; a person's refund is not the bot's.
    let other = gate.submit(&by_bot("b4", "cus_2")).unwrap();
    assert!(matches!(other, Outcome::Committed { .. }), "{other:?}");
    let person = gate.submit(&effect("p1", 100)).unwrap();
    assert!(matches!(person, Outcome::Committed { .. }), "{person:?}");
    assert_eq!(service.applied().len(), 4);
    // The metrics show the budget by its fullest counter (cus_1's), no customer as a label.
    let gauges = interlock::metrics::budget_gauges(&*s.store.store(), s.clock.now_ms()).unwrap();
    assert_eq!(
        gauges,
        [interlock::metrics::BudgetGauge {
            id: "bot-twice-per-customer".into(),
            limit: 2,
            used: 2,
            reserved: 0,
            counters: 2,
        }]
    );
}

fn a_failed_effect_gives_its_place_back_and_an_ambiguous_one_keeps_it(kind: Kind) {
    let s = setup(kind, "give-back", &[sum_per_day("daily", 2000)]);
    let service = Ledger::new(Tier::Two);
    service.refuse.lock().unwrap().insert("fails".into());
    let gate = bound(&s, service.clone(), "w1");
    let failed = gate.submit(&effect("fails", 2000)).unwrap();
    assert!(matches!(failed, Outcome::Failed(_)), "{failed:?}");
    let next = gate.submit(&effect("next", 2000)).unwrap();
    assert!(matches!(next, Outcome::Committed { .. }), "{next:?}");

    // Tier 3, the answer lost: AMBIGUOUS, which keeps its place in full.
    let s = setup(kind, "ambiguous", &[sum_per_day("daily", 2000)]);
    let blind = Ledger::new(Tier::Three);
    let crashed = s
        .store
        .crashing_at(
            Arc::new(s.clock.clone()),
            blind.clone(),
            FaultPoint::AfterSend,
        )
        .unwrap();
    assert!(matches!(
        crashed.submit(&effect("lost", 1500)),
        Err(GateError::Crashed(_))
    ));
    s.clock.advance(600_000);
    let gate = bound(&s, blind.clone(), "a2");
    let lost = gate.submit(&effect("lost", 1500)).unwrap();
    assert!(matches!(lost, Outcome::Ambiguous(_)), "{lost:?}");
    let more = gate.submit(&effect("more", 1000)).unwrap();
    let why = budget_refusal(&more).unwrap_or_else(|| panic!("{more:?}"));
    assert!(why.contains("1500 is used"), "{why}");
    assert_eq!(blind.applied().len(), 1);
}

fn a_person_s_settlement_ends_an_ambiguous_effect_and_not_applied_gives_its_place_back(kind: Kind) {
    use interlock::approval::{Approver, ApproverKey, Approvers};
    use interlock::core::Status;
    use interlock::core::settle::Finding;
    use interlock::settle::{DEFAULT_GROUP, Settlers, SignedSettlement, draft, settle};

    let s = setup(kind, "settle", &[sum_per_day("daily", 3000)]);
    let blind = Ledger::new(Tier::Three);
    // One request reached the service before its worker died, the other never left.
    for (key, amount, point) in [
        ("sent", 1500, FaultPoint::AfterSend),
        ("unsent", 1000, FaultPoint::AfterDispatch),
    ] {
        let crashed = s
            .store
            .crashing_at(Arc::new(s.clock.clone()), blind.clone(), point)
            .unwrap();
        assert!(matches!(
            crashed.submit(&effect(key, amount)),
            Err(GateError::Crashed(_))
        ));
    }
    s.clock.advance(600_000);
    let gate = bound(&s, blind.clone(), "a2");
    for (key, amount) in [("sent", 1500), ("unsent", 1000)] {
        let out = gate.submit(&effect(key, amount)).unwrap();
        assert!(matches!(out, Outcome::Ambiguous(_)), "{key}: {out:?}");
    }
    let more = gate.submit(&effect("more", 1000)).unwrap();
    assert!(budget_refusal(&more).is_some(), "{more:?}");

    // Olga, of the operators, looks at the service and signs what she finds for each.
    let olga = ApproverKey::from_seed("olga", [7; 32]);
    let directory = Approvers {
        approvers: [(
            "olga".to_owned(),
            Approver {
                public_key: olga.public_hex(),
                name: "Olga".into(),
            },
        )]
        .into(),
        groups: [(DEFAULT_GROUP.to_owned(), vec!["olga".to_owned()])].into(),
        chain: Vec::new(),
    };
    let settlers = Settlers {
        directory: &directory,
        group: DEFAULT_GROUP,
    };
    let journal = s.store.store();
    let now = s.clock.now_ms();
    let applied_key = blind.applied()[0].0.clone();
    for (key, finding) in [
        (
            "sent",
            Finding::Applied {
                reference: applied_key,
            },
        ),
        ("unsent", Finding::NotApplied),
    ] {
        let statement = draft(journal.as_ref(), key, finding, "olga", "ledger", now).unwrap();
        let signed = SignedSettlement::sign(&olga, statement).unwrap();
        settle(journal.as_ref(), settlers, &signed).unwrap();
    }
    let status = |key: &str| {
        journal
            .state(&EffectKey::fixed(key).unwrap())
            .unwrap()
            .status()
    };
    assert_eq!(status("sent"), Some(Status::Committed));
    assert_eq!(status("unsent"), Some(Status::Failed));
    // The unsent effect's 1000 is free again; the sent one's 1500 stays used.
    let again = gate.submit(&effect("more-again", 1000)).unwrap();
    assert!(matches!(again, Outcome::Committed { .. }), "{again:?}");
    let over = gate.submit(&effect("over", 1000)).unwrap();
    assert!(budget_refusal(&over).is_some(), "{over:?}");
    // verify names who settled each, with the signature checked against the directory.
    let v = interlock::verify::verify(
        journal.as_ref(),
        &EffectKey::fixed("unsent").unwrap(),
        &interlock::verify::Sources {
            approvers: Some(&directory),
            ..Default::default()
        },
    );
    let by = v.columns.iter().find(|c| c.name == "settled by").unwrap();
    assert_eq!(by.holds, Some(true), "{}", by.detail);
    assert!(
        by.detail.starts_with("olga found it not applied"),
        "{}",
        by.detail
    );
    assert_eq!(blind.applied().len(), 2, "the sent one and `more-again`");
}

fn every_change_names_who_made_it_and_a_removed_budget_counts_nothing(kind: Kind) {
    let s = setup(kind, "changes", &[sum_per_day("daily", 1000)]);
    let store = s.store.store();
    let raised = sum_per_day("daily", 3000);
    store.set_budget(&raised, "cfo@example").unwrap();
    assert!(
        store.set_budget(&raised, " ").is_err(),
        "a change names who made it"
    );
    let changes = store.budget_changes().unwrap();
    let who: Vec<(u32, &str)> = changes.iter().map(|c| (c.n, c.by.as_str())).collect();
    assert_eq!(who, [(0, "finance@example"), (1, "cfo@example")]);
    assert_eq!(in_force(&changes), [raised]);
    let service = Ledger::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    assert!(matches!(
        gate.submit(&effect("a", 2500)).unwrap(),
        Outcome::Committed { .. }
    ));
    assert!(budget_refusal(&gate.submit(&effect("b", 1000)).unwrap()).is_some());
    let removed = store.remove_budget("daily", "cfo@example").unwrap();
    assert_eq!(removed.map(|c| c.n), Some(2));
    assert!(
        store
            .remove_budget("daily", "cfo@example")
            .unwrap()
            .is_none()
    );
    assert!(in_force(&store.budget_changes().unwrap()).is_empty());
    assert!(matches!(
        gate.submit(&effect("c", 1000)).unwrap(),
        Outcome::Committed { .. }
    ));
}

fn a_rolling_window_frees_room_as_its_oldest_places_age_out(kind: Kind) {
    let hourly = Budget {
        id: "hourly".into(),
        scope: BTreeMap::new(),
        per: Vec::new(),
        window: Window::Rolling { ms: HOUR },
        limit: Limit::Count { max: 2 },
    };
    let s = setup(kind, "rolling", &[hourly]);
    let service = Ledger::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    gate.submit(&effect("r1", 100)).unwrap();
    s.clock.advance(30 * 60_000);
    gate.submit(&effect("r2", 100)).unwrap();
    let full = gate.submit(&effect("r3", 100)).unwrap();
    let why = budget_refusal(&full).unwrap_or_else(|| panic!("{full:?}"));
    // r1 could land until its send's deadline; the window frees an hour after that.
    let deadline = s
        .store
        .journal()
        .history(&EffectKey::fixed("r1").unwrap())
        .unwrap()
        .iter()
        .find_map(|r| match &r.event {
            interlock::core::Event::Dispatched(d) => Some(d.deadline_ms),
            _ => None,
        })
        .unwrap();
    assert!(
        why.contains(&format!("room frees at {}", deadline + HOUR)),
        "{why}"
    );
    s.clock.advance(deadline + HOUR - s.clock.now_ms() - 1);
    let early = gate.submit(&effect("r4", 100)).unwrap();
    assert!(budget_refusal(&early).is_some(), "{early:?}");
    s.clock.advance(1);
    let later = gate.submit(&effect("r5", 100)).unwrap();
    assert!(matches!(later, Outcome::Committed { .. }), "{later:?}");
    assert_eq!(service.applied().len(), 3);
}

fn a_resend_in_a_later_window_is_counted_in_that_window(kind: Kind) {
    let hourly = Budget {
        id: "one-an-hour".into(),
        scope: BTreeMap::new(),
        per: Vec::new(),
        window: Window::Rolling { ms: HOUR },
        limit: Limit::Count { max: 1 },
    };
    let s = setup(kind, "resend-later", &[hourly]);
    let service = Ledger::new(Tier::Two);
    let crashed = s
        .store
        .crashing_at(
            Arc::new(s.clock.clone()),
            service.clone(),
            FaultPoint::AfterDispatch,
        )
        .unwrap();
    assert!(matches!(
        crashed.submit(&effect("late", 100)),
        Err(GateError::Crashed(_))
    ));
    // Two hours on, recovery finds nothing at the service and sends it now: it lands in this
    // hour, so this hour has no room left for another.
    s.clock.advance(2 * HOUR);
    let gate = bound(&s, service.clone(), "a2");
    let resent = gate.submit(&effect("late", 100)).unwrap();
    assert!(matches!(resent, Outcome::Committed { .. }), "{resent:?}");
    let other = gate.submit(&effect("other", 100)).unwrap();
    assert!(budget_refusal(&other).is_some(), "{other:?}");
    assert_eq!(service.applied().len(), 1);
}

fn only_a_limit_or_window_changes_under_one_id_and_a_removed_budget_starts_afresh(kind: Kind) {
    let s = setup(kind, "shape", &[sum_per_day("daily", 2000)]);
    let store = s.store.store();
    let mut per_customer = sum_per_day("daily", 2000);
    per_customer.per = vec!["customer".into()];
    let refused = store.set_budget(&per_customer, "cfo@example").unwrap_err();
    assert!(refused.to_string().contains("set a new id"), "{refused}");
    let mut count = sum_per_day("daily", 5);
    count.limit = Limit::Count { max: 5 };
    assert!(store.set_budget(&count, "cfo@example").is_err());
    let service = Ledger::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    assert!(matches!(
        gate.submit(&effect("a", 2000)).unwrap(),
        Outcome::Committed { .. }
    ));
    assert!(budget_refusal(&gate.submit(&effect("b", 100)).unwrap()).is_some());
    store.remove_budget("daily", "cfo@example").unwrap();
    store.set_budget(&per_customer, "cfo@example").unwrap();
    let fresh = gate.submit(&effect("c", 2000)).unwrap();
    assert!(matches!(fresh, Outcome::Committed { .. }), "{fresh:?}");
}

/// A store's running total of a counter is what the counter's places add up to, through any
/// sequence of places taken, stretched, moved up and given back, and windows whose start moves
/// forward and back (a clock behind another's): 2,000 random steps in one transaction (rolled back
/// at the end: nothing is appended), each tally compared with the places read beside it.
fn a_counters_running_total_is_always_what_its_places_add_up_to(kind: Kind) {
    let s = setup(kind, "budget_totals", &[sum_per_day("daily", 1_000_000)]);
    let journal = s.store.journal();
    let mut rng = 0x2545_F491_4F6C_DD1D_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        i64::try_from(rng % n).unwrap()
    };
    let mut checked = 0;
    let mut failure = None;
    journal
        .append_with(&EffectKey::fixed("totals").unwrap(), &mut |tx| {
            let leases = tx.leases.expect("the journal keeps the leases");
            let mut now = T0;
            let mut step = || -> anyhow::Result<()> {
                // A clock that moves on, seen by tallies whose windows start a little before or
                // after each other's (every time a multiple of 200 ms, so boundaries meet).
                now += 200;
                let key = format!("k{}", next(12));
                let bucket = if next(4) == 0 { "[\"b\"]" } else { "[]" };
                match next(5) {
                    0 | 1 => {
                        let at_ms = now;
                        let hold = interlock::budget::Hold {
                            key,
                            amount: 1 + next(5000),
                            at_ms,
                            until_ms: at_ms + next(30) * 200,
                        };
                        // A key's place stays in its counter; one elsewhere is refused.
                        let _ = leases.hold_budget("daily", bucket, &hold);
                    }
                    2 => leases.release_budgets(&key)?,
                    _ => {
                        let since = now - 3000 + next(20) * 200;
                        let tally = leases.budget_tally("daily", bucket, since, &key)?;
                        let places = leases.budget_holds("daily", bucket, since)?;
                        let want = interlock::budget::Tally::of(&places, &key, since);
                        anyhow::ensure!(
                            tally == want,
                            "since {since}, key {key}: total says {tally:?}, places {want:?}"
                        );
                        checked += 1;
                    }
                }
                Ok(())
            };
            for _ in 0..2000 {
                if let Err(e) = step() {
                    failure = Some(e.to_string());
                    break;
                }
            }
            Vec::new()
        })
        .unwrap();
    assert_eq!(failure, None);
    assert!(checked > 100, "{checked} tallies checked");
}

fn verify_rechecks_what_each_dispatch_counted_against_the_budgets_on_record(kind: Kind) {
    let s = setup(kind, "verify", &[sum_per_day("refunds-daily", 5000)]);
    // Beyond the margin verify allows for the clocks of the hosts that set budgets.
    s.clock.advance(HOUR);
    let service = Ledger::new(Tier::Two);
    let gate = bound(&s, service.clone(), "w1");
    for k in ["a", "b"] {
        let out = gate.submit(&effect(k, 2000)).unwrap();
        assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    }
    let store = s.store.store();
    let column = |key: &str, changes: &[interlock::budget::BudgetChange]| {
        let v = interlock::verify::verify(
            store.as_ref(),
            &EffectKey::fixed(key).unwrap(),
            &interlock::verify::Sources {
                budgets: Some(changes),
                ..interlock::verify::Sources::default()
            },
        );
        v.columns
            .into_iter()
            .find(|c| c.name == "within budget when fired")
            .unwrap()
    };
    let changes = store.budget_changes().unwrap();
    let b = column("b", &changes);
    assert_eq!(b.holds, Some(true), "{b:?}");
    assert!(
        b.detail
            .contains("refunds-daily: 2000 of 5000 used, 2000 asked"),
        "{b:?}"
    );
    // A budget in force since before the dispatches that none of them counted: the dispatch
    // of a build that did not check budgets looks like this.
    let mut unseen = changes.clone();
    unseen.push(interlock::budget::BudgetChange {
        id: "unseen".into(),
        n: 0,
        budget: Some(sum_per_day("unseen", 10_000)),
        at_ms: T0 - HOUR,
        by: "cfo@example".into(),
    });
    let a = column("a", &unseen);
    assert_eq!(a.holds, Some(false), "{a:?}");
    assert!(
        a.detail
            .contains("budget unseen (set by cfo@example) was in force"),
        "{a:?}"
    );
}

/// SQLite journals written by the first builds with budgets kept places in `budget_holds`; the
/// next open moves them to `budget_places`, and the counters go on from them.
#[test]
fn places_kept_by_the_first_budget_builds_are_moved_and_still_count() {
    let s = setup(Kind::Sqlite, "places-moved", &[sum_per_day("daily", 5000)]);
    let service = Ledger::new(Tier::Two);
    for k in ["a", "b"] {
        let out = bound(&s, service.clone(), "w1")
            .submit(&effect(k, 2000))
            .unwrap();
        assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    }
    // As those builds left it: the places in `budget_holds`, with its two indexes.
    s.store
        .tamper(
            "CREATE TABLE budget_holds (budget TEXT NOT NULL, bucket TEXT NOT NULL, \
             key TEXT NOT NULL, amount INTEGER NOT NULL, at_ms INTEGER NOT NULL, \
             until_ms INTEGER NOT NULL, PRIMARY KEY (budget, key));
             CREATE INDEX budget_holds_window ON budget_holds (budget, bucket, until_ms);
             CREATE INDEX budget_holds_key ON budget_holds (key);
             INSERT INTO budget_holds SELECT budget, bucket, key, amount, at_ms, until_ms \
             FROM budget_places;
             DROP TABLE budget_places;",
        )
        .unwrap();
    let moved = s.store.reopen_store().unwrap();
    let places = moved.budget_places("daily", 0).unwrap();
    assert_eq!(places.len(), 2, "{places:?}");
    let c = bound(&s, service.clone(), "w2")
        .submit(&effect("c", 1500))
        .unwrap();
    let why = budget_refusal(&c).unwrap_or_else(|| panic!("not refused by the budget: {c:?}"));
    assert!(why.contains("4000 is used, 1000 left"), "{why}");
    assert_eq!(sum(&service), 4000);
}

/// A key's place stays in the counter it was first taken in, whatever a tally earlier in the
/// same transaction saw: taking it again in another counter is refused, not a silent move.
fn a_place_is_never_moved_to_another_counter_within_one_transaction(kind: Kind) {
    let s = setup(kind, "place_stays", &[sum_per_day("daily", 1_000_000)]);
    let journal = s.store.journal();
    let mut outcome = None;
    journal
        .append_with(&EffectKey::fixed("stays").unwrap(), &mut |tx| {
            let leases = tx.leases.expect("the journal keeps the leases");
            let hold = |bucket: &str| {
                let place = interlock::budget::Hold {
                    key: "k".into(),
                    amount: 100,
                    at_ms: T0,
                    until_ms: T0 + HOUR,
                };
                leases.hold_budget("daily", bucket, &place)
            };
            outcome = Some((|| {
                leases.budget_tally("daily", "[]", T0, "k")?;
                hold("[\"b\"]")?;
                Ok::<_, interlock::lease::LeaseError>(hold("[]").map_err(|e| e.to_string()))
            })());
            Vec::new()
        })
        .unwrap();
    let refused = outcome.unwrap().unwrap().unwrap_err();
    assert!(refused.contains("holds a place in counter"), "{refused}");
}

interlock_tests::every_store!(
    a_place_is_never_moved_to_another_counter_within_one_transaction,
    verify_rechecks_what_each_dispatch_counted_against_the_budgets_on_record,
    a_counters_running_total_is_always_what_its_places_add_up_to,
    a_resend_in_a_later_window_is_counted_in_that_window,
    only_a_limit_or_window_changes_under_one_id_and_a_removed_budget_starts_afresh,
    a_sum_per_day_admits_until_full_and_refuses_naming_the_budget_and_when_room_frees,
    racing_handles_never_take_a_budget_past_its_limit,
    a_scope_and_per_count_only_matching_effects_each_in_its_own_counter,
    a_failed_effect_gives_its_place_back_and_an_ambiguous_one_keeps_it,
    a_person_s_settlement_ends_an_ambiguous_effect_and_not_applied_gives_its_place_back,
    every_change_names_who_made_it_and_a_removed_budget_counts_nothing,
    a_rolling_window_frees_room_as_its_oldest_places_age_out,
);
