//! One suite, every store: each journal and lease-store property below runs against SQLite and
//! against PostgreSQL (`sqlite::…` and `postgres::…` in the test names), through the real gate.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use interlock::core::{Event, RefusalCode, TakeoverReason};
use interlock::faults::FaultPoint;
use interlock::premise::NoPremises;
use interlock::{Effect, EffectKey, GateError, Grant, JournalError, ManualClock, Outcome, Tier};
use interlock_testkit::faults::{Action, ScriptedFaults};
use interlock_tests::stores::{Kind, Store};
use interlock_tests::targets::Counting;
use serde_json::json;

const LEASE: &str = "ops";
const T0: i64 = 1_790_000_000_000;

struct Setup {
    store: Store,
    clock: ManualClock,
}

fn setup(kind: Kind, label: &str) -> Setup {
    let clock = ManualClock::at(T0);
    let store = Store::open(kind, label, Arc::new(clock.clone())).unwrap();
    store
        .grant(&Grant::new(LEASE, "ops@example", T0).unlimited())
        .unwrap();
    Setup { store, clock }
}

fn effect(name: &str) -> Effect {
    Effect::new(
        EffectKey::derive(&[name]),
        &json!({"amount": 2000, "currency": "usd"}),
        LEASE,
    )
    .unwrap()
}

/// A gate over the store on the test's clock, bound to `target`.
fn bound(s: &Setup, target: Arc<Counting>) -> interlock::Bound {
    s.store
        .gate(Arc::new(s.clock.clone()))
        .unwrap()
        .bind(target, Arc::new(NoPremises))
        .unwrap()
}

fn kinds(store: &Store, key: &EffectKey) -> Vec<&'static str> {
    store
        .journal()
        .history(key)
        .unwrap()
        .iter()
        .map(|r| r.event.kind())
        .collect()
}

fn a_committed_effect_has_one_verified_chain_that_every_handle_reads_alike(kind: Kind) {
    let s = setup(kind, "committed");
    let target = Counting::new(Tier::One, Duration::ZERO);
    let bound = bound(&s, target.clone());
    let e = effect("one");
    assert!(matches!(
        bound.submit(&e).unwrap(),
        Outcome::Committed {
            replayed: false,
            ..
        }
    ));
    assert!(matches!(
        bound.submit(&e).unwrap(),
        Outcome::Committed { replayed: true, .. }
    ));
    assert_eq!(target.sends.load(Ordering::SeqCst), 1);
    assert_eq!(
        kinds(&s.store, &e.key),
        ["PROPOSED", "AUTHORIZED", "DISPATCHED", "COMMITTED"]
    );
    let other = s.store.reopen().unwrap();
    assert_eq!(
        other.history(&e.key).unwrap(),
        s.store.journal().history(&e.key).unwrap()
    );
    assert_eq!(other.keys().unwrap(), vec![e.key.to_string()]);
    assert_eq!(
        other.keys_with("COMMITTED").unwrap(),
        vec![e.key.to_string()]
    );
    assert!(other.keys_with("APPLIED_TWICE").unwrap().is_empty());
    let history = other.history(&e.key).unwrap();
    assert!(history.windows(2).all(|w| w[0].seq < w[1].seq));
}

fn concurrent_submitters_through_separate_handles_make_one_send(kind: Kind) {
    let s = setup(kind, "concurrent");
    // Tier 2: nothing at the target dedupes a second send, so one send is the gate's doing.
    let target = Counting::new(Tier::Two, Duration::from_millis(30));
    let e = effect("raced");
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let journal = s.store.reopen().unwrap();
                let gate = interlock::Gate::new(
                    journal,
                    s.store.leases(),
                    Arc::new(s.clock.clone()),
                    s.store.config(),
                )
                .unwrap()
                .with_attempt(format!("t{i}"));
                let bound = gate.bind(target.clone(), Arc::new(NoPremises)).unwrap();
                let e = e.clone();
                scope.spawn(move || {
                    // Until this submitter sees the effect end.
                    for _ in 0..400 {
                        let out = bound.submit(&e).unwrap();
                        if out.is_final() {
                            return out;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    panic!("the effect never ended for submitter {i}");
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(target.sends.load(Ordering::SeqCst), 1);
    assert_eq!(target.applications(), 1);
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Committed { .. })),
        "{outcomes:?}"
    );
    assert_eq!(
        kinds(&s.store, &e.key),
        ["PROPOSED", "AUTHORIZED", "DISPATCHED", "COMMITTED"]
    );
}

fn a_revoked_lease_stops_the_send_and_every_grant_is_listed(kind: Kind) {
    let s = setup(kind, "revoked");
    let target = Counting::new(Tier::One, Duration::ZERO);
    let bound = bound(&s, target.clone());
    let twice = s
        .store
        .grant(&Grant::new(LEASE, "someone", T0))
        .unwrap_err();
    assert!(twice.to_string().contains("already exists"), "{twice}");
    assert!(s.store.grant(&Grant::new("", "someone", T0)).is_err());
    s.clock.advance(1000);
    assert!(s.store.revoke(LEASE).unwrap());
    assert!(!s.store.revoke(LEASE).unwrap());
    assert!(!s.store.revoke("never-granted").unwrap());
    let listed = s.store.all_leases().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revoked_ms, Some(T0 + 1000));
    match bound.submit(&effect("after-revoke")).unwrap() {
        Outcome::Refused(r) => assert_eq!(r.code, RefusalCode::Lease),
        other => panic!("sent under a revoked lease: {other:?}"),
    }
    assert_eq!(target.sends.load(Ordering::SeqCst), 0);
}

fn an_edited_deleted_or_reordered_record_is_named_on_read(kind: Kind) {
    for (sql, want) in [
        (
            "UPDATE {records} SET body = replace(body, '2000', '9000') WHERE n = 0",
            "contents do not match",
        ),
        ("DELETE FROM {records} WHERE n = 1", "missing or moved"),
        (
            "UPDATE {records} SET at_ms = at_ms + 1 WHERE n = 2",
            "contents do not match",
        ),
        (
            "UPDATE {records} SET kind = 'COMMITTED' WHERE n = 0",
            "kind column",
        ),
        (
            "UPDATE {records} SET body = '{\"kind\":' WHERE n = 1",
            "not a valid record",
        ),
    ] {
        let s = setup(kind, "tamper");
        let bound = bound(&s, Counting::new(Tier::One, Duration::ZERO));
        let e = effect("tampered");
        assert!(matches!(
            bound.submit(&e).unwrap(),
            Outcome::Committed { .. }
        ));
        s.store.tamper(sql).unwrap();
        let err = s.store.reopen().unwrap().history(&e.key).unwrap_err();
        assert!(matches!(err, JournalError::Corrupt { .. }), "{sql}: {err}");
        let msg = err.to_string();
        assert!(msg.contains(want) && msg.contains("record"), "{sql}: {msg}");
        // The gate stops too: nothing is decided on a damaged history.
        assert!(matches!(bound.submit(&e), Err(GateError::Journal(_))));
    }
}

fn a_crashed_holders_claim_is_taken_over_on_its_lock_not_its_deadline(kind: Kind) {
    let s = setup(kind, "takeover");
    // Tier 2: only a dead holder or a passed deadline lets another worker take the claim.
    let target = Counting::new(Tier::Two, Duration::ZERO);
    let faults = ScriptedFaults::new();
    faults.arm(FaultPoint::AfterDispatch, Action::Crash);
    let crashed = s
        .store
        .gate(Arc::new(s.clock.clone()))
        .unwrap()
        .with_attempt("a1")
        .with_faults(faults)
        .bind(target.clone(), Arc::new(NoPremises))
        .unwrap();
    let e = effect("crashed");
    assert!(matches!(crashed.submit(&e), Err(GateError::Crashed(_))));
    assert_eq!(target.sends.load(Ordering::SeqCst), 0);
    // Another worker, the clock where it was: the lock, not the deadline, lets it take over.
    let gate = interlock::Gate::new(
        s.store.reopen().unwrap(),
        s.store.leases(),
        Arc::new(s.clock.clone()),
        s.store.config(),
    )
    .unwrap()
    .with_attempt("a2");
    let bound = gate.bind(target.clone(), Arc::new(NoPremises)).unwrap();
    let mut out = bound.submit(&e).unwrap();
    // The first attempt took the claim; the resend waits until no earlier send can land.
    for _ in 0..20 {
        if out.is_final() {
            break;
        }
        s.clock.advance(5000);
        out = bound.submit(&e).unwrap();
    }
    assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
    assert_eq!(target.applications(), 1);
    // Each worker that found the lock free took the claim; the first did so at once, long
    // before the deadline.
    let claims: Vec<(i64, TakeoverReason)> = s
        .store
        .journal()
        .history(&e.key)
        .unwrap()
        .iter()
        .filter_map(|r| match &r.event {
            Event::Claimed(c) => Some((r.at_ms, c.reason)),
            _ => None,
        })
        .collect();
    assert_eq!(claims.first(), Some(&(T0, TakeoverReason::HolderDead)));
    assert!(claims.iter().all(|(_, r)| *r == TakeoverReason::HolderDead));
}

fn a_held_claim_is_not_taken_before_its_deadline(kind: Kind) {
    let s = setup(kind, "held");
    let target = Counting::new(Tier::Two, Duration::from_millis(400));
    let e = effect("slow");
    let store = &s.store;
    let clock = &s.clock;
    std::thread::scope(|scope| {
        let slow = store
            .gate(Arc::new(clock.clone()))
            .unwrap()
            .with_attempt("slow")
            .bind(target.clone(), Arc::new(NoPremises))
            .unwrap();
        let e1 = e.clone();
        let sender = scope.spawn(move || slow.submit(&e1).unwrap());
        std::thread::sleep(Duration::from_millis(150));
        let other = interlock::Gate::new(
            store.reopen().unwrap(),
            store.leases(),
            Arc::new(clock.clone()),
            store.config(),
        )
        .unwrap()
        .with_attempt("other")
        .bind(target.clone(), Arc::new(NoPremises))
        .unwrap();
        assert!(matches!(
            other.submit(&e).unwrap(),
            Outcome::InFlight { .. }
        ));
        assert!(matches!(sender.join().unwrap(), Outcome::Committed { .. }));
    });
    assert_eq!(target.sends.load(Ordering::SeqCst), 1);
}

fn a_read_after_verifies_what_came_since_and_sees_every_handles_appends(kind: Kind) {
    let s = setup(kind, "read-after");
    let bound = bound(&s, Counting::new(Tier::One, Duration::ZERO));
    let e = effect("continued");
    assert!(matches!(
        bound.submit(&e).unwrap(),
        Outcome::Committed { .. }
    ));
    let mine = s.store.journal();
    let seen = mine.read(&e.key).unwrap();
    assert_eq!(seen.records().len(), 4);
    // Another handle (another worker) appends: a read that continues `seen` finds it, verified,
    // and folds to what a full read folds to.
    let note = interlock::core::transition::conflict_note("other", "payload");
    s.store
        .reopen()
        .unwrap()
        .append_with(&e.key, &mut |_| vec![Event::Refused(note.clone())])
        .unwrap();
    let after = mine.read_after(&e.key, &seen).unwrap();
    assert_eq!(after.records(), mine.history(&e.key).unwrap().as_slice());
    assert_eq!(after.state(), mine.read(&e.key).unwrap().state());
    assert_eq!(
        mine.read_after(&e.key, &after).unwrap().records(),
        after.records()
    );
    // A record appended since is verified before anything is decided on it.
    s.store
        .tamper("UPDATE {records} SET at_ms = at_ms + 1 WHERE n = 4")
        .unwrap();
    let err = mine.read_after(&e.key, &seen).unwrap_err();
    assert!(err.to_string().contains("record 4"), "{err}");
    // The last record the attempt saw, no longer in place as seen: the whole key is read and
    // verified again.
    let s = setup(kind, "read-after-changed");
    let gate = self::bound(&s, Counting::new(Tier::One, Duration::ZERO));
    assert!(matches!(
        gate.submit(&e).unwrap(),
        Outcome::Committed { .. }
    ));
    let seen = s.store.journal().read(&e.key).unwrap();
    s.store
        .tamper("UPDATE {records} SET hash = 'f' || hash WHERE n = 3")
        .unwrap();
    let err = s.store.journal().read_after(&e.key, &seen).unwrap_err();
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err}");
    // So is an append that continues what the attempt saw.
    let err = s
        .store
        .journal()
        .append_after(&e.key, &seen, &mut |_| vec![Event::Refused(note.clone())])
        .unwrap_err();
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err}");
}

/// A store with one effect `label` committed through the gate (4 records).
fn one_committed(kind: Kind, label: &str) -> (Setup, Effect) {
    let s = setup(kind, label);
    let bound = bound(&s, Counting::new(Tier::One, Duration::ZERO));
    let e = effect(label);
    assert!(matches!(
        bound.submit(&e).unwrap(),
        Outcome::Committed { .. }
    ));
    (s, e)
}

fn a_decision_on_records_alone_lands_on_the_key_as_it_is_and_never_forks_it(kind: Kind) {
    let (s, e) = one_committed(kind, "on-records");
    let mine = s.store.journal();
    let seen = mine.read(&e.key).unwrap();
    let note = |n: usize| {
        Event::Refused(interlock::core::transition::conflict_note(
            &format!("after-{n}"),
            "payload",
        ))
    };
    // Nothing appended since the read: decided once, on what was read, and appended after it.
    let mut decided_on = Vec::new();
    let out = mine
        .append_on_records(&e.key, &seen, &mut |tx| {
            decided_on.push(tx.records.len());
            vec![note(tx.records.len())]
        })
        .unwrap();
    assert_eq!(decided_on, vec![4]);
    assert_eq!(out.appended.len(), 1);
    assert_eq!(out.appended[0].n, 4);
    assert_eq!(
        out.history.records(),
        mine.history(&e.key).unwrap().as_slice()
    );
    // Another handle appends after this attempt's read: the decision that lands is the one
    // made on the key as it is (a decision on `seen` alone is never appended), after the other
    // handle's record, and the chain is one.
    let seen = mine.read(&e.key).unwrap();
    s.store
        .reopen()
        .unwrap()
        .append_with(&e.key, &mut |tx| vec![note(tx.records.len())])
        .unwrap();
    let mut decided_on = Vec::new();
    let out = mine
        .append_on_records(&e.key, &seen, &mut |tx| {
            decided_on.push(tx.records.len());
            vec![note(tx.records.len())]
        })
        .unwrap();
    assert_eq!(decided_on.last(), Some(&6), "decided on {decided_on:?}");
    assert_eq!(out.appended.len(), 1);
    assert_eq!(out.appended[0].n, 6);
    assert_eq!(out.appended[0].event, note(6));
    let history = mine.history(&e.key).unwrap();
    assert_eq!(history.len(), 7);
    assert_eq!(out.history.records(), history.as_slice());
    assert_eq!(history[6].prev.as_deref(), Some(history[5].hash.as_str()));
}

fn a_decision_on_records_that_reads_a_lease_reads_it_in_the_transaction(kind: Kind) {
    let (s, e) = one_committed(kind, "on-records-lease");
    let mine = s.store.journal();
    let seen = mine.read(&e.key).unwrap();
    // Whatever the read answered, the decision appends a record saying so; the one that lands
    // read the lease as the transaction sees it. The closure hands out what it read on every
    // run: the value left is the landed run's.
    let said = |read: bool| {
        Event::Refused(interlock::core::transition::conflict_note(
            if read { "read" } else { "unread" },
            "payload",
        ))
    };
    let mut read = None;
    let out = mine
        .append_on_records(&e.key, &seen, &mut |tx| {
            let grant = tx.leases.map(|l| l.grant(LEASE).map(|g| g.is_some()));
            read = Some(matches!(grant, Some(Ok(true))));
            vec![said(read == Some(true))]
        })
        .unwrap();
    assert_eq!(read, Some(true), "the landed decision read the lease");
    assert_eq!(out.appended.len(), 1);
    assert_eq!(out.appended[0].event, said(true));
    assert_eq!(mine.history(&e.key).unwrap().len(), 5);
}

/// Every key, read a page of `size` at a time, each page resuming after the last key of the one
/// before; `between(page)` runs after each page (another worker appending, say).
fn page_through(
    journal: &dyn interlock::Journal,
    size: usize,
    mut between: impl FnMut(usize),
) -> Vec<String> {
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    for page in 0..10_000 {
        let keys = journal.keys_page(after.as_deref(), size).unwrap();
        assert!(keys.len() <= size, "a page of {size} held {}", keys.len());
        let Some(last) = keys.last() else {
            return listed;
        };
        after = Some(last.clone());
        listed.extend(keys);
        between(page);
    }
    panic!("paging by {size} did not end");
}

fn paging_after_the_last_key_lists_every_key_once_even_as_keys_are_added(kind: Kind) {
    let s = setup(kind, "keys-page");
    let bound = bound(&s, Counting::new(Tier::One, Duration::ZERO));
    let journal = s.store.journal();
    assert!(journal.keys_page(None, 10).unwrap().is_empty());
    for i in 0..23 {
        let e = effect(&format!("paged-{i}"));
        assert!(matches!(
            bound.submit(&e).unwrap(),
            Outcome::Committed { .. }
        ));
    }
    let all: BTreeSet<String> = journal.keys().unwrap().into_iter().collect();
    assert_eq!(all.len(), 23);
    assert!(journal.keys_page(None, 0).unwrap().is_empty());
    let whole = journal.keys_page(None, usize::MAX).unwrap();
    for size in [1, 2, 5, 22, 23, 24, 1000] {
        let listed = page_through(&*journal, size, |_| ());
        // Each key once, in one order that every page size agrees on.
        assert_eq!(listed, whole, "pages of {size}");
        assert_eq!(listed.iter().cloned().collect::<BTreeSet<_>>(), all);
        assert!(listed.windows(2).all(|w| w[0] < w[1]), "pages of {size}");
    }
    let last = whole.last().unwrap();
    assert!(journal.keys_page(Some(last), 5).unwrap().is_empty());

    // Another handle (another worker) appends new keys between pages: every key there before
    // the listing began is listed exactly once, and no key twice.
    let other = interlock::Gate::new(
        s.store.reopen().unwrap(),
        s.store.leases(),
        Arc::new(s.clock.clone()),
        s.store.config(),
    )
    .unwrap()
    .with_attempt("other")
    .bind(
        Counting::new(Tier::One, Duration::ZERO),
        Arc::new(NoPremises),
    )
    .unwrap();
    for size in [1, 3, 7] {
        let before: BTreeSet<String> = journal.keys().unwrap().into_iter().collect();
        let mut added = BTreeSet::new();
        let listed = page_through(&*journal, size, |page| {
            if page < 6 {
                let e = effect(&format!("added-{size}-{page}"));
                assert!(matches!(
                    other.submit(&e).unwrap(),
                    Outcome::Committed { .. }
                ));
                added.insert(e.key.to_string());
            }
        });
        let once: BTreeSet<String> = listed.iter().cloned().collect();
        assert_eq!(once.len(), listed.len(), "a key listed twice by {size}");
        assert!(once.is_superset(&before), "a key missed by {size}");
        assert!(once.is_subset(&before.union(&added).cloned().collect()));
        assert!(listed.windows(2).all(|w| w[0] < w[1]), "pages of {size}");
        let now: BTreeSet<String> = journal.keys().unwrap().into_iter().collect();
        assert_eq!(now, before.union(&added).cloned().collect());
    }
}

fn a_journal_keeps_one_name_of_its_own_wherever_it_is_reached_from(kind: Kind) {
    let s = setup(kind, "instance");
    let name = s.store.journal().instance().unwrap();
    assert!(name.starts_with("journal:") && name.len() > 20, "{name}");
    // Another handle (a process opening it again) reads the same name; another journal has
    // another.
    assert_eq!(s.store.reopen().unwrap().instance().unwrap(), name);
    let other = setup(kind, "instance-other");
    assert_ne!(other.store.journal().instance().unwrap(), name);
    if kind == Kind::Sqlite {
        // Moved to another path, the journal names its store otherwise but is the same journal.
        let root = tempfile::tempdir().unwrap();
        let (before, after) = (root.path().join("before"), root.path().join("after"));
        std::fs::create_dir(&before).unwrap();
        let clock = Arc::new(s.clock.clone());
        let journal = interlock::SqliteJournal::open(before.join("j.db"), clock.clone()).unwrap();
        let (name, store) = (
            interlock::Journal::instance(&journal).unwrap(),
            interlock::Journal::store_id(&journal).to_owned(),
        );
        drop(journal);
        std::fs::rename(&before, &after).unwrap();
        let moved = interlock::SqliteJournal::open(after.join("j.db"), clock).unwrap();
        assert_ne!(interlock::Journal::store_id(&moved), store);
        assert_eq!(interlock::Journal::instance(&moved).unwrap(), name);
    }
}

interlock_tests::every_store!(
    a_journal_keeps_one_name_of_its_own_wherever_it_is_reached_from,
    a_committed_effect_has_one_verified_chain_that_every_handle_reads_alike,
    concurrent_submitters_through_separate_handles_make_one_send,
    a_revoked_lease_stops_the_send_and_every_grant_is_listed,
    an_edited_deleted_or_reordered_record_is_named_on_read,
    a_crashed_holders_claim_is_taken_over_on_its_lock_not_its_deadline,
    a_held_claim_is_not_taken_before_its_deadline,
    a_read_after_verifies_what_came_since_and_sees_every_handles_appends,
    paging_after_the_last_key_lists_every_key_once_even_as_keys_are_added,
    a_decision_on_records_alone_lands_on_the_key_as_it_is_and_never_forks_it,
    a_decision_on_records_that_reads_a_lease_reads_it_in_the_transaction,
);
