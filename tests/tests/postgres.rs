//! What only a journal on a database server can get wrong: a server that is down or restarts, a
//! schema that belongs to another version or deployment, liveness locks that a restart dropped
//! while their holders lived, and claims longer than a silent holder keeps its lock.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::time::Duration;

use interlock::gate::ConfigError;
use interlock::{Clock, GateConfig, GateError, Journal, JournalError, ManualClock, SqliteJournal};
use interlock_postgres::{PgJournal, PgOptions, SILENT_HOLDER_KEPT};
use interlock_testkit::pg::Cluster;

fn clock() -> Arc<dyn Clock> {
    Arc::new(ManualClock::at(1_790_000_000_000))
}

fn options(schema: &str) -> PgOptions {
    PgOptions {
        schema: schema.to_owned(),
        ..PgOptions::default()
    }
}

#[test]
fn a_server_that_is_down_at_start_is_a_typed_error_naming_where_it_was_looked_for() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://ana:s3cret@127.0.0.1:{port}/payments");
    let err = PgJournal::open(&url, clock(), &PgOptions::default()).unwrap_err();
    assert!(matches!(err, JournalError::Unavailable { .. }), "{err}");
    assert!(err.is_transient());
    let msg = err.to_string();
    assert!(msg.contains(&format!("127.0.0.1:{port}/payments")), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
    let bad = PgJournal::open("postgres://db:port/x", clock(), &PgOptions::default()).unwrap_err();
    assert!(
        bad.to_string()
            .contains("postgres://user@host:port/database"),
        "{bad}"
    );
}

#[test]
fn a_schema_of_another_deployment_or_version_or_owner_is_refused_with_its_reason() {
    let cluster = Cluster::shared().unwrap();
    let url = cluster.url();
    let schema = cluster.fresh_schema("owned");
    PgJournal::open(url, clock(), &options(&schema)).unwrap();
    let other = PgOptions {
        deployment: "eu".into(),
        ..options(&schema)
    };
    let err = PgJournal::open(url, clock(), &other).unwrap_err();
    assert!(err.to_string().contains("deployment \"default\""), "{err}");

    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "UPDATE {schema}.meta SET value = '99' WHERE name = 'schema_version'"
    ))
    .unwrap();
    let err = PgJournal::open(url, clock(), &options(&schema)).unwrap_err();
    assert!(
        matches!(&err, JournalError::SchemaVersion { found, .. } if found == "99"),
        "{err}"
    );

    let foreign = cluster.fresh_schema("foreign");
    c.batch_execute(&format!(
        "CREATE SCHEMA {foreign}; CREATE TABLE {foreign}.orders (id INT)"
    ))
    .unwrap();
    let err = PgJournal::open(url, clock(), &options(&foreign)).unwrap_err();
    assert!(matches!(err, JournalError::Foreign { .. }), "{err}");
    assert!(err.to_string().contains("orders"), "{err}");

    let err = PgJournal::open(url, clock(), &options("Bad; DROP")).unwrap_err();
    assert!(err.to_string().contains("not usable"), "{err}");
}

#[test]
fn a_claim_longer_than_a_silent_holder_keeps_its_lock_is_refused() {
    let cluster = Cluster::shared().unwrap();
    let journal = Arc::new(
        PgJournal::open(
            cluster.url(),
            clock(),
            &options(&cluster.fresh_schema("claim")),
        )
        .unwrap(),
    );
    let too_long = GateConfig::shared_builder()
        .send_timeout(SILENT_HOLDER_KEPT)
        .build()
        .unwrap();
    let err =
        interlock::Gate::new(journal.clone(), journal.clone(), clock(), too_long).unwrap_err();
    assert!(
        matches!(
            &err,
            GateError::Config(ConfigError::ClaimOutlastsLiveness { .. })
        ),
        "{err}"
    );
    assert!(interlock::Gate::new(journal.clone(), journal, clock(), GateConfig::shared()).is_ok());
    // A journal without liveness of its own needs a lock directory.
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteJournal::open(dir.path().join("j.db"), clock()).unwrap());
    let err =
        interlock::Gate::new(sqlite.clone(), sqlite, clock(), GateConfig::shared()).unwrap_err();
    assert!(err.to_string().contains("lock directory"), "{err}");
}

#[test]
fn a_lock_lost_to_a_server_restart_is_never_taken_for_its_holders_death() {
    let mut cluster = Cluster::throwaway().unwrap();
    let journal = PgJournal::open(cluster.url(), clock(), &options("interlock")).unwrap();
    let live = journal.liveness().unwrap();
    let held = live.try_hold("k", 1).unwrap().expect("a free lock");
    assert!(
        live.try_hold("k", 1).unwrap().is_none(),
        "one holder at a time"
    );
    assert!(!live.released("k", 1, "any-host").unwrap());
    drop(held);
    assert!(
        live.released("k", 1, "any-host").unwrap(),
        "a closed holder is seen at once"
    );

    let _held = live.try_hold("k", 2).unwrap().expect("a free lock");
    cluster.crash_and_restart().unwrap();
    // The lock is gone with the restart, but its holder may be alive and sending.
    let mut judged = None;
    for _ in 0..50 {
        match live.released("k", 2, "any-host") {
            Ok(r) => {
                judged = Some(r);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    assert_eq!(judged, Some(false));
    // And the journal works again on the restarted server.
    let fresh = live.try_hold("k", 3).unwrap();
    assert!(fresh.is_some());
}
