//! Bad input never panics and never sends on doubt: a foreign, corrupt, torn or tampered journal
//! is a typed error naming the place; a premise reader or lease store that errors or panics is a
//! recorded refusal or retry with nothing sent; a target that answers garbage or panics leaves the
//! effect in flight for recovery; `recover` on an unknown key is a typed error.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::time::Duration;

use interlock::core::{Event, LeaseVerdict, Premises, RefusalCode};
use interlock::journal::{Journal, JournalError};
use interlock::lease::{Grant, LeaseError, LeaseStore};
use interlock::premise::{FnPremises, PremiseError, PremiseReader};
use interlock::target::{SendAnswer, SendRequest, Target};
use interlock::{
    Effect, EffectKey, Gate, GateConfig, GateError, ManualClock, Outcome, SqliteJournal, Tier,
};
use interlock_testkit::sim::{SimPayments, SimRefundPremises, SimTarget};
use interlock_tests::world::{AMOUNT, PAYMENT, T0, World};
use serde_json::Value;

struct Setup {
    dir: tempfile::TempDir,
    clock: ManualClock,
    sim: Arc<SimPayments>,
    journal: Arc<SqliteJournal>,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at(T0);
    let world = World::new(Tier::Two);
    let journal =
        Arc::new(SqliteJournal::open(dir.path().join("j.db"), Arc::new(clock.clone())).unwrap());
    journal.grant_lease(&World::grant()).unwrap();
    Setup {
        dir,
        clock,
        sim: world.sim,
        journal,
    }
}

impl Setup {
    fn gate(&self, leases: Arc<dyn LeaseStore>) -> Gate {
        let mut cfg = GateConfig::beside(self.dir.path().join("j.db"));
        cfg.settle = Duration::from_millis(0);
        Gate::new(
            self.journal.clone(),
            leases,
            Arc::new(self.clock.clone()),
            cfg,
        )
        .unwrap()
    }

    fn effect(&self) -> Effect {
        World {
            clock: self.clock.clone(),
            sim: self.sim.clone(),
        }
        .decide(AMOUNT)
        .unwrap()
    }
}

#[test]
fn a_file_that_is_not_a_database_is_named_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are someone's notes, not a journal\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let err = SqliteJournal::open(&path, Arc::new(ManualClock::at(0))).unwrap_err();
    assert!(matches!(err, JournalError::NotADatabase { .. }), "{err}");
    assert!(err.to_string().contains("notes.txt"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the file was not touched"
    );
}

#[test]
fn a_foreign_sqlite_database_and_a_newer_schema_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let conn = rusqlite_like(&path);
    conn("CREATE TABLE users (id INTEGER)");
    let err = SqliteJournal::open(&path, Arc::new(ManualClock::at(0))).unwrap_err();
    assert!(matches!(err, JournalError::Foreign { .. }), "{err}");

    let path = dir.path().join("newer.db");
    drop(SqliteJournal::open(&path, Arc::new(ManualClock::at(0))).unwrap());
    rusqlite_like(&path)("UPDATE interlock_meta SET value = '99' WHERE name = 'schema_version'");
    let err = SqliteJournal::open(&path, Arc::new(ManualClock::at(0))).unwrap_err();
    assert!(
        matches!(err, JournalError::SchemaVersion { ref found, .. } if found == "99"),
        "{err}"
    );
}

/// Raw SQL against a file, with the `sqlite3` semantics a person tampering would use.
fn rusqlite_like(path: &std::path::Path) -> impl Fn(&str) {
    let path = path.to_owned();
    move |sql: &str| {
        let conn = interlock_tests::raw_sql::open(&path);
        interlock_tests::raw_sql::exec(&conn, sql);
    }
}

fn journal_with_history() -> (tempfile::TempDir, std::path::PathBuf, EffectKey) {
    let s = setup();
    let gate = s.gate(s.journal.clone());
    let bound = gate
        .bind(
            Arc::new(SimTarget(s.sim.clone())),
            Arc::new(SimRefundPremises(s.sim.clone())),
        )
        .unwrap();
    let effect = s.effect();
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        Outcome::Committed { .. }
    ));
    let path = s.dir.path().join("j.db");
    (s.dir, path, effect.key)
}

#[test]
fn an_edited_deleted_or_reordered_record_is_named_on_read() {
    for (sql, want) in [
        (
            "UPDATE records SET body = replace(body, '2000', '9000') WHERE n = 0",
            "contents do not match",
        ),
        ("DELETE FROM records WHERE n = 1", "missing or moved"),
        (
            "UPDATE records SET at_ms = at_ms + 1 WHERE n = 2",
            "contents do not match",
        ),
        (
            "UPDATE records SET kind = 'COMMITTED' WHERE n = 0",
            "kind column",
        ),
        (
            "UPDATE records SET body = '{\"kind\":' WHERE n = 1",
            "not a valid record",
        ),
    ] {
        let (_dir, path, key) = journal_with_history();
        rusqlite_like(&path)(sql);
        let j = SqliteJournal::open(&path, Arc::new(ManualClock::at(0))).unwrap();
        let err = j.history(&key).unwrap_err();
        assert!(matches!(err, JournalError::Corrupt { .. }), "{sql}: {err}");
        let msg = err.to_string();
        assert!(msg.contains(want) && msg.contains("record"), "{sql}: {msg}");
    }
}

#[test]
fn a_truncated_journal_file_is_a_typed_error_never_a_panic() {
    let (root, path, key) = journal_with_history();
    // Grow the file so a truncation cuts through pages that hold data.
    {
        let j = SqliteJournal::open(&path, Arc::new(ManualClock::at(0))).unwrap();
        for i in 0..200 {
            j.grant_lease(&Grant::new(format!("pad-{i}"), "x".repeat(200), 0))
                .unwrap();
        }
    }
    let len = std::fs::metadata(&path).unwrap().len();
    for cut in [len / 2, len / 3, 4096 + 17, 100] {
        let copy = root.path().join(format!("cut-{cut}.db"));
        std::fs::copy(&path, &copy).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
        f.set_len(cut).unwrap();
        let result = SqliteJournal::open(&copy, Arc::new(ManualClock::at(0))).and_then(|j| {
            j.history(&key)?;
            j.leases().map_err(|e| JournalError::Storage {
                path: String::new(),
                what: e.to_string(),
            })?;
            Ok(())
        });
        let err = result.expect_err("a truncated journal must not read as whole");
        assert!(
            matches!(
                err,
                JournalError::Corrupt { .. }
                    | JournalError::NotADatabase { .. }
                    | JournalError::Storage { .. }
            ),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn a_torn_wal_tail_loses_only_the_unacknowledged_append() {
    // Copy a live journal (main file + WAL) and tear the WAL's last bytes, as a power cut during
    // an append would: every record that was acknowledged before it reads back, chain intact.
    let root = tempfile::tempdir().unwrap();
    let s = setup();
    let path = s.dir.path().join("j.db");
    let gate = s.gate(s.journal.clone());
    let bound = gate
        .bind(
            Arc::new(SimTarget(s.sim.clone())),
            Arc::new(SimRefundPremises(s.sim.clone())),
        )
        .unwrap();
    let effect = s.effect();
    bound.submit(&effect).unwrap();
    let before = s.journal.history(&effect.key).unwrap().len();
    let other = Effect {
        key: EffectKey::derive(&["other"]),
        ..effect.clone()
    };
    bound.submit(&other).unwrap();
    let copy = root.path().join("copy.db");
    std::fs::copy(&path, &copy).unwrap();
    let wal = std::fs::read(path.with_extension("db-wal")).unwrap();
    std::fs::write(copy.with_extension("db-wal"), &wal[..wal.len() - 100]).unwrap();
    let j = SqliteJournal::open(&copy, Arc::new(ManualClock::at(0))).unwrap();
    assert_eq!(j.history(&effect.key).unwrap().len(), before);
    let torn = j.history(&other.key).unwrap();
    assert!(
        torn.len() < s.journal.history(&other.key).unwrap().len(),
        "the torn append is gone"
    );
}

fn refuses_without_sending(reader: Arc<dyn PremiseReader>, want: &str) {
    let s = setup();
    let gate = s.gate(s.journal.clone());
    let bound = gate
        .bind(Arc::new(SimTarget(s.sim.clone())), reader)
        .unwrap();
    let effect = s.effect();
    let out = bound.submit(&effect).unwrap();
    assert_eq!(out.label(), want, "{out:?}");
    assert_eq!(s.sim.requests(), 0, "nothing was sent");
    let h = s.journal.history(&effect.key).unwrap();
    assert!(
        h.iter()
            .any(|r| matches!(&r.event, Event::Refused(r) if r.code == RefusalCode::PremiseError)),
        "recorded"
    );
    assert!(!h.iter().any(|r| r.event.kind() == "DISPATCHED"));
}

#[test]
fn a_premise_reader_that_errors_or_panics_sends_nothing_and_is_recorded() {
    refuses_without_sending(
        Arc::new(FnPremises(|_: &EffectKey, _: &Value| {
            Err(PremiseError::Invalid("refunds list had no amounts".into()))
        })),
        "REFUSED:premise_error",
    );
    refuses_without_sending(
        Arc::new(FnPremises(
            |_: &EffectKey, _: &Value| -> Result<Premises, PremiseError> { panic!("reader bug") },
        )),
        "REFUSED:premise_error",
    );
    // Unreachable is transient: recorded as a note, answered as retry, still nothing sent.
    refuses_without_sending(
        Arc::new(FnPremises(|_: &EffectKey, _: &Value| {
            Err(PremiseError::Unavailable("connection refused".into()))
        })),
        "RETRY",
    );
}

struct BrokenLeases(bool);

impl LeaseStore for BrokenLeases {
    fn check(&self, _: &str, _: &Value, _: i64) -> Result<LeaseVerdict, LeaseError> {
        if self.0 {
            panic!("lease store bug");
        }
        Err(LeaseError::Store("database is locked".into()))
    }
    fn describe(&self, _: &str) -> Result<Option<Grant>, LeaseError> {
        Err(LeaseError::Store("database is locked".into()))
    }
}

#[test]
fn a_lease_store_that_errors_or_panics_sends_nothing_and_is_recorded() {
    for panics in [false, true] {
        let s = setup();
        let gate = s.gate(Arc::new(BrokenLeases(panics)));
        let bound = gate
            .bind(
                Arc::new(SimTarget(s.sim.clone())),
                Arc::new(SimRefundPremises(s.sim.clone())),
            )
            .unwrap();
        let effect = s.effect();
        assert_eq!(bound.submit(&effect).unwrap().label(), "RETRY");
        assert_eq!(s.sim.requests(), 0);
        let h = s.journal.history(&effect.key).unwrap();
        assert!(h.iter().any(|r| matches!(&r.event, Event::Refused(r) if r.code == RefusalCode::LeaseError && !r.is_final)));
    }
}

struct Garbage {
    inner: SimTarget,
    panic: bool,
}

/// The same service, through a client with bugs: the effect is journaled under its name.
impl Target for Garbage {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn tier(&self) -> Tier {
        Tier::Two
    }
    fn has_lookup(&self) -> bool {
        true
    }
    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        let _ = self.inner.send(req);
        if self.panic {
            panic!("client bug after the request went out");
        }
        SendAnswer::Unknown("HTTP 200 with a body that is not JSON".into())
    }
    fn lookup(&self, key: &EffectKey, payload: &Value) -> interlock::core::LookupAnswer {
        if self.panic {
            panic!("lookup bug");
        }
        self.inner.lookup(key, payload)
    }
}

#[test]
fn a_target_that_answers_garbage_or_panics_leaves_the_effect_in_flight_never_resent_blindly() {
    for panic in [false, true] {
        let s = setup();
        let gate = s.gate(s.journal.clone());
        let bound = gate
            .bind(
                Arc::new(Garbage {
                    inner: SimTarget(s.sim.clone()),
                    panic,
                }),
                Arc::new(SimRefundPremises(s.sim.clone())),
            )
            .unwrap();
        let effect = s.effect();
        let first = bound.submit(&effect).unwrap();
        if panic {
            assert!(matches!(first, Outcome::InFlight { .. }), "{first:?}");
        } else {
            // A lookup after the garbage answer finds the refund.
            assert_eq!(first.label(), "COMMITTED/found_by_lookup");
        }
        assert_eq!(s.sim.refunded(PAYMENT), AMOUNT);
        // With a sane target, recovery settles it without a second refund.
        let sane = gate
            .bind(
                Arc::new(SimTarget(s.sim.clone())),
                Arc::new(SimRefundPremises(s.sim.clone())),
            )
            .unwrap();
        s.clock.advance(1);
        let out = sane.submit(&effect).unwrap();
        assert!(matches!(out, Outcome::Committed { .. }), "{out:?}");
        assert_eq!(s.sim.refunded(PAYMENT), AMOUNT);
    }
}

#[test]
fn recover_on_an_unknown_key_is_a_typed_error() {
    let s = setup();
    let gate = s.gate(s.journal.clone());
    let bound = gate
        .bind(
            Arc::new(SimTarget(s.sim.clone())),
            Arc::new(SimRefundPremises(s.sim.clone())),
        )
        .unwrap();
    let err = bound.recover(&EffectKey::derive(&["never"])).unwrap_err();
    assert!(matches!(err, GateError::UnknownKey(_)), "{err}");
    assert!(err.to_string().contains("journal list"));
}

#[test]
fn an_unwritable_journal_is_a_typed_error_and_nothing_is_sent() {
    let s = setup();
    let path = s.dir.path().join("j.db");
    drop(s.journal);
    let ro = Arc::new(SqliteJournal::open_read_only(&path, Arc::new(s.clock.clone())).unwrap());
    let mut cfg = GateConfig::beside(&path);
    cfg.settle = Duration::from_millis(0);
    let gate = Gate::new(ro.clone(), ro, Arc::new(s.clock.clone()), cfg).unwrap();
    let bound = gate
        .bind(
            Arc::new(SimTarget(s.sim.clone())),
            Arc::new(SimRefundPremises(s.sim.clone())),
        )
        .unwrap();
    let effect = World {
        clock: s.clock.clone(),
        sim: s.sim.clone(),
    }
    .decide(AMOUNT)
    .unwrap();
    let err = bound.submit(&effect).unwrap_err();
    assert!(
        matches!(err, GateError::Journal(JournalError::Storage { .. })),
        "{err}"
    );
    assert_eq!(s.sim.requests(), 0);
}
