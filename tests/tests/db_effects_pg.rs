//! Database effects on PostgreSQL (a throwaway server, or `INTERLOCK_DATABASE_URL`'s): the
//! same promises as on SQLite — measured by the server's triggers, judged, committed once with
//! the marker — plus what only a server has: roles that write without any grant on the
//! substrate, and a stage whose client is frozen holding the key's lock.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::sync::Arc;
use std::time::Duration;

use interlock::lease::Grant;
use interlock::premise::NoPremises;
use interlock::target::{Deadline, LookupAnswer, SendAnswer, SendRequest, Target};
use interlock::{Effect, EffectKey, Gate, GateConfig, ManualClock, Outcome, SqliteJournal};
use interlock_db::postgres::{allow, install};
use interlock_db::{PgDb, PgDbOptions, Plan, Policy, Premise, Receipt, RowWindow, Statement};
use interlock_testkit::pg::Cluster;
use postgres::{Client, NoTls};
use serde_json::{Value, json};

/// A shop in a schema of its own, the substrate in another, and a confined role to stage as:
/// the rows its plans need on the shop's tables and what `allow` grants, nothing more. Returns
/// that role's URL, the options that find both schemas, and the installer's client on the
/// shop's search path.
fn shop(label: &str) -> (String, PgDbOptions, Client) {
    let cluster = Cluster::shared().unwrap();
    let tables = cluster.fresh_schema(label);
    let mut options = PgDbOptions {
        schema: format!("interlock_{}", cluster.fresh_schema(label)),
        search_path: Some(tables.clone()),
        plans_are_trusted: false,
        stage_key: None,
    };
    let stager = format!("{tables}_stager");
    let mut client = Client::connect(cluster.url(), NoTls).unwrap();
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {tables}; SET search_path TO {tables};
             CREATE TABLE orders (id INT PRIMARY KEY, tenant TEXT NOT NULL, status TEXT NOT NULL, amount INT NOT NULL);
             CREATE TABLE customers (id INT PRIMARY KEY, tenant TEXT NOT NULL, credit BIGINT NOT NULL);
             CREATE TABLE audit (id SERIAL PRIMARY KEY, what TEXT NOT NULL);
             CREATE TABLE notes (id SERIAL PRIMARY KEY, text TEXT);
             CREATE FUNCTION audit_order() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO audit (what) VALUES ('order ' || NEW.id || ' ' || NEW.status); RETURN NULL; END $$;
             CREATE TRIGGER orders_audit AFTER UPDATE OF status ON orders FOR EACH ROW EXECUTE FUNCTION audit_order();
             INSERT INTO orders VALUES (1, 't1', 'paid', 500), (2, 't2', 'paid', 900);
             INSERT INTO customers VALUES (10, 't1', 0), (20, 't2', 0);
             CREATE ROLE {stager} LOGIN PASSWORD 'stager';
             GRANT USAGE ON SCHEMA {tables} TO {stager};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {tables} TO {stager};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA {tables} TO {stager};"
        ))
        .unwrap();
    options.stage_key = Some(
        install(
            &mut client,
            &options.schema,
            &["orders", "customers", "audit"],
        )
        .unwrap(),
    );
    allow(&mut client, &options.schema, &stager).unwrap();
    (cluster.url_as(&stager, "stager"), options, client)
}

fn stmt(name: &str, sql: &str, params: Value) -> Statement {
    Statement {
        name: name.into(),
        sql: sql.into(),
        params: serde_json::from_value(params).unwrap(),
    }
}

fn cancel_and_credit() -> Plan {
    Plan::new(vec![
        stmt(
            "cancel_order",
            "UPDATE orders SET status = 'cancelled' WHERE id = :order AND status = 'paid'",
            json!({"order": 1}),
        ),
        stmt(
            "credit_customer",
            "UPDATE customers SET credit = credit + :amount WHERE id = :customer",
            json!({"amount": 500, "customer": 10}),
        ),
    ])
    .unwrap()
}

fn send(db: &PgDb, key: &str, plan: &Plan) -> SendAnswer {
    db.send(&SendRequest {
        key: &EffectKey::derive(&[key]),
        payload: &plan.to_payload(),
        timeout: Duration::from_secs(5),
        deadline: None,
        last_look: None,
    })
}

/// Rows in the table no trigger observes.
fn notes(client: &mut Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM notes", &[])
        .unwrap()
        .get(0)
}

fn credit(client: &mut Client, customer: i32) -> i64 {
    client
        .query_one("SELECT credit FROM customers WHERE id = $1", &[&customer])
        .unwrap()
        .get(0)
}

#[test]
fn on_postgres_the_triggers_measure_the_audit_row_the_sql_never_names_and_the_plan_commits_once() {
    let (url, options, mut client) = shop("pg_measure");
    let db = PgDb::open(&url, options, Policy::default()).unwrap();
    let understated =
        cancel_and_credit().footprint([("orders".into(), 1), ("customers".into(), 1)].into());
    match send(&db, "under", &understated) {
        SendAnswer::Definite { code, .. } => assert_eq!(code, "refused"),
        other => panic!("{other:?}"),
    }
    assert_eq!(credit(&mut client, 10), 0);

    let plan = cancel_and_credit().footprint(
        [
            ("orders".into(), 1),
            ("customers".into(), 1),
            ("audit".into(), 1),
        ]
        .into(),
    );
    let SendAnswer::Done(first) = send(&db, "once", &plan) else {
        panic!("the honest plan commits");
    };
    let receipt: Receipt = serde_json::from_value(first.clone()).unwrap();
    assert!(receipt.diff_matches());
    assert_eq!(receipt.diff.changes.len(), 3);
    assert_eq!(
        send(&db, "once", &plan),
        SendAnswer::Replayed(first.clone())
    );
    assert_eq!(credit(&mut client, 10), 500, "credited once");
    assert_eq!(
        db.marker_keys().unwrap(),
        vec![EffectKey::derive(&["once"]).as_str().to_owned()]
    );
    assert_eq!(
        db.lookup(&EffectKey::derive(&["once"]), &plan.to_payload()),
        LookupAnswer::Found(first)
    );
    // The key's marker is this plan's: asked for another, the lookup does not find it.
    assert_eq!(
        db.lookup(
            &EffectKey::derive(&["once"]),
            &cancel_and_credit().to_payload()
        ),
        LookupAnswer::NotFound
    );
    assert_eq!(
        db.lookup(
            &EffectKey::derive(&["never"]),
            &cancel_and_credit().to_payload()
        ),
        LookupAnswer::NotFound
    );
}

#[test]
fn on_postgres_a_moved_premise_a_second_tenant_and_an_unobserved_table_are_each_refused() {
    let (url, options, mut client) = shop("pg_refusals");
    let policy = Policy {
        tenant_column: Some("tenant".into()),
        ..Policy::default()
    };
    let db = PgDb::open(&url, options, policy).unwrap();

    let expect = vec![[("amount".to_owned(), json!(500))].into()];
    let plan = cancel_and_credit()
        .tenant(json!("t1"))
        .premise(Premise {
            name: "order_amount".into(),
            sql: "SELECT amount FROM orders WHERE id = :order".into(),
            params: [("order".to_owned(), json!(1))].into(),
            expect,
        })
        .unwrap();
    client
        .execute("UPDATE orders SET amount = 450 WHERE id = 1", &[])
        .unwrap();
    match send(&db, "premise", &plan) {
        SendAnswer::Definite { code, message } => {
            assert_eq!(code, "premise_moved");
            assert!(!message.contains("450"), "{message}");
        }
        other => panic!("{other:?}"),
    }

    let both = Plan::new(vec![stmt(
        "credit_customer",
        "UPDATE customers SET credit = credit + :amount WHERE id IN (10, 20)",
        json!({"amount": 5}),
    )])
    .unwrap()
    .tenant(json!("t1"));
    match send(&db, "tenants", &both) {
        SendAnswer::Definite { code, message } => {
            assert_eq!(code, "refused");
            assert_eq!(message, "tenant: refused; statement `credit_customer`");
        }
        other => panic!("{other:?}"),
    }

    let note = Plan::new(vec![stmt(
        "note",
        "INSERT INTO notes (text) VALUES (:text)",
        json!({"text": "hello"}),
    )])
    .unwrap();
    match send(&db, "note", &note) {
        SendAnswer::Definite { code, .. } => assert_eq!(code, "unobserved_table"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        (credit(&mut client, 10), notes(&mut client)),
        (0, 0),
        "nothing applied"
    );
}

#[test]
fn on_postgres_a_deferred_trigger_fires_inside_the_measurement_not_after_it() {
    let (url, options, mut client) = shop("pg_deferred");
    // Fires at COMMIT unless something makes it fire sooner; writes a table nobody observes.
    client
        .batch_execute(
            "CREATE FUNCTION note_credit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO notes (text) VALUES ('credit ' || NEW.id); RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER customers_note AFTER UPDATE ON customers
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION note_credit();",
        )
        .unwrap();
    let db = PgDb::open(&url, options, Policy::default()).unwrap();
    match send(&db, "deferred", &cancel_and_credit()) {
        SendAnswer::Definite { code, .. } => assert_eq!(code, "unobserved_table"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        (credit(&mut client, 10), notes(&mut client)),
        (0, 0),
        "nothing applied"
    );
}

#[test]
fn on_postgres_a_write_by_a_role_without_grants_on_the_substrate_is_still_recorded_as_unmediated() {
    let (url, options, mut client) = shop("pg_unmediated");
    let role = format!("{}_app", options.schema);
    let tables = options.search_path.clone().unwrap();
    client
        .batch_execute(&format!(
            "CREATE ROLE {role};
             GRANT USAGE ON SCHEMA {tables} TO {role};
             GRANT SELECT, UPDATE ON customers TO {role};
             SET ROLE {role};
             UPDATE customers SET credit = 7 WHERE id = 20;
             RESET ROLE;"
        ))
        .unwrap();
    let db = PgDb::open(&url, options, Policy::default()).unwrap();
    let unmediated = db.unmediated().unwrap();
    assert_eq!(unmediated.len(), 1);
    assert_eq!(unmediated[0].table, "customers");
    assert_eq!(unmediated[0].statement, None);
    assert_eq!(
        unmediated[0].after.as_ref().and_then(|a| a.get("credit")),
        Some(&json!(7))
    );
}

#[test]
fn on_postgres_a_lookup_while_a_frozen_stage_holds_the_key_is_unknown_never_absent() {
    let (url, options, _client) = shop("pg_frozen");
    let db = PgDb::open(&url, options, Policy::default())
        .unwrap()
        .lookup_wait(Duration::from_millis(300));
    let key = EffectKey::derive(&["frozen"]);
    // A stage's session, frozen while it holds the key's lock.
    let mut frozen = Client::connect(&url, NoTls).unwrap();
    frozen
        .query_one(
            "SELECT pg_advisory_lock(hashtextextended($1, 7263))",
            &[&key.as_str()],
        )
        .unwrap();
    assert!(matches!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::Unknown(_)
    ));
    drop(frozen); // its session ends, and the lock with it
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::NotFound
    );
}

#[test]
fn on_postgres_a_plan_through_the_gate_commits_once_and_a_retry_is_answered_from_the_journal() {
    let (url, options, mut client) = shop("pg_gate");
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.db");
    let t0 = 1_700_000_000_000;
    let clock = ManualClock::at(t0);
    let journal = Arc::new(SqliteJournal::open(&journal_path, Arc::new(clock.clone())).unwrap());
    journal
        .grant_lease(&Grant::new("shop-ops", "ops", t0).unlimited())
        .unwrap();
    let gate = Gate::new(
        journal.clone(),
        journal,
        Arc::new(clock),
        GateConfig::beside(&journal_path),
    )
    .unwrap();
    let db = PgDb::open(&url, options, Policy::default()).unwrap();
    let bound = gate.bind(Arc::new(db), Arc::new(NoPremises)).unwrap();
    let effect = Effect::new(
        EffectKey::derive(&["pg", "order-1"]),
        &cancel_and_credit().to_payload(),
        "shop-ops",
    )
    .unwrap();
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        Outcome::Committed {
            replayed: false,
            ..
        }
    ));
    assert!(matches!(
        bound.submit(&effect).unwrap(),
        Outcome::Committed { replayed: true, .. }
    ));
    assert_eq!(credit(&mut client, 10), 500);
}

#[test]
fn on_postgres_a_plan_that_releases_the_keys_lock_still_keeps_every_lookup_of_the_key_waiting() {
    let (url, options, mut client) = shop("pg_escape");
    let db = Arc::new(PgDb::open(&url, options.clone(), Policy::default()).unwrap());
    let looker = PgDb::open(&url, options, Policy::default())
        .unwrap()
        .lookup_wait(Duration::from_millis(300));
    let key = EffectKey::derive(&["unlock"]);
    // Releases the session's hold on the key, then sleeps: a lookup in that window that found
    // no marker would answer "absent" for a stage about to commit.
    let unlock = Plan::new(vec![
        stmt(
            "release",
            "UPDATE customers SET credit = credit + 1 WHERE id = :customer \
             AND pg_advisory_unlock(hashtextextended(:k, 7263))",
            json!({"customer": 10, "k": key.as_str()}),
        ),
        stmt(
            "linger",
            "UPDATE customers SET credit = credit + 1 WHERE id = :customer \
             AND (SELECT true FROM pg_sleep(2))",
            json!({"customer": 10}),
        ),
    ])
    .unwrap();
    let unlock_payload = unlock.to_payload();
    let staging = {
        let db = db.clone();
        std::thread::spawn(move || send(&db, "unlock", &unlock))
    };
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        matches!(
            looker.lookup(&key, &unlock_payload),
            LookupAnswer::Unknown(_)
        ),
        "a lookup while the stage is open must wait, not answer"
    );
    assert!(matches!(staging.join().unwrap(), SendAnswer::Done(_)));
    assert_eq!(credit(&mut client, 10), 2);
    assert!(matches!(
        looker.lookup(&key, &unlock_payload),
        LookupAnswer::Found(_)
    ));
}

#[test]
fn on_postgres_a_plan_naming_the_substrate_is_refused_before_any_database_sees_it() {
    let (url, options, _client) = shop("pg_named");
    let db = PgDb::open(&url, options, Policy::default()).unwrap();
    // The substrate's schema cannot be named, quoted or not.
    for sql in [
        "DELETE FROM interlock_db.markers WHERE key = :k",
        "UPDATE customers SET credit = 0 WHERE id = :k AND EXISTS (SELECT 1 FROM \"INTERLOCK_DB\".changes)",
    ] {
        let payload = json!({"statements": [{"name": "x", "sql": sql, "params": {"k": 1}}]});
        let answer = db.send(&SendRequest {
            key: &EffectKey::derive(&["named"]),
            payload: &payload,
            timeout: Duration::from_secs(5),
            deadline: None,
            last_look: None,
        });
        assert!(
            matches!(&answer, SendAnswer::Definite { code, .. } if code == "bad_plan"),
            "{sql}: {answer:?}"
        );
    }
}

#[test]
fn on_postgres_a_target_whose_role_could_reach_the_substrate_is_refused_naming_each_way() {
    let (url, options, mut client) = shop("pg_unconfined");
    let cluster = Cluster::shared().unwrap();
    // The installer: a superuser, owning the substrate.
    let text = PgDb::open(cluster.url(), options.clone(), Policy::default())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("is a superuser")
            && text.contains("owns the substrate's schema")
            && text.contains("plans_are_trusted"),
        "{text}"
    );
    // Vouched for, the same role is let through.
    let trusted = PgDbOptions {
        plans_are_trusted: true,
        ..options.clone()
    };
    PgDb::open(cluster.url(), trusted, Policy::default()).unwrap();
    // A grant on a column of the markers, TRUNCATE on an observed table, or a server that does
    // not count rows, unconfines the staging role.
    let stager = format!("{}_stager", options.search_path.clone().unwrap());
    let markers = format!("{}.markers", options.schema);
    client
        .batch_execute(&format!(
            "GRANT SELECT (receipt) ON {markers} TO {stager}; GRANT TRUNCATE ON orders TO {stager};
             ALTER ROLE {stager} SET track_counts = off;"
        ))
        .unwrap();
    let text = PgDb::open(&url, options.clone(), Policy::default())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains(&format!("has rights on {markers}"))
            && text.contains("may truncate or add triggers to")
            && text.contains("track_counts is off")
            && !text.contains("superuser"),
        "{text}"
    );
    // A role never let in is told how to be.
    let outsider = format!("{stager}_out");
    client
        .batch_execute(&format!("CREATE ROLE {outsider} LOGIN PASSWORD 'out'"))
        .unwrap();
    let text = PgDb::open(
        &cluster.url_as(&outsider, "out"),
        options,
        Policy::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(text.contains("interlock_db::postgres::allow"), "{text}");
}

#[test]
fn on_postgres_a_plan_that_reaches_the_substrate_by_any_path_is_stopped_by_the_servers_privileges()
{
    let (url, options, mut client) = shop("pg_confined");
    let schema = options.schema.clone();
    let shop = options.search_path.clone().unwrap();
    let db = PgDb::open(&url, options, Policy::default()).unwrap();
    let SendAnswer::Done(first) = send(&db, "first", &cancel_and_credit()) else {
        panic!("the honest plan commits");
    };
    // Each plan first points the search path at the substrate's schema (its name is a
    // parameter, which the lexer never reads), then names its tables or functions bare.
    let reach = |name: &str, sql: &str, params: Value| {
        json!({"statements": [
            {"name": "aim", "sql": "UPDATE customers SET credit = credit + 1 WHERE id = :customer AND set_config('search_path', :path, true) IS NOT NULL", "params": {"path": schema, "customer": 10}},
            {"name": name, "sql": sql, "params": params},
        ]})
    };
    let first_key = EffectKey::derive(&["first"]);
    let attempts = [
        (
            "erase",
            "DELETE FROM markers WHERE key = :k".to_owned(),
            json!({"k": first_key.as_str()}),
        ),
        (
            "rewrite",
            "UPDATE changes SET op = 'insert' WHERE seq > :n".to_owned(),
            json!({"n": 0}),
        ),
        (
            "copy",
            format!(
                "INSERT INTO {shop}.customers (id, tenant, credit) SELECT 99, receipt, 0 FROM markers WHERE key <> :k"
            ),
            json!({"k": ""}),
        ),
        (
            "reopen",
            format!(
                "UPDATE {shop}.customers SET credit = 0 WHERE id = :customer AND (SELECT o_token FROM open(:k, '{{}}', :k)) IS NOT NULL"
            ),
            json!({"k": "other", "customer": 10}),
        ),
        (
            "forge",
            format!(
                "UPDATE {shop}.customers SET credit = 0 WHERE id = :customer AND seal(gen_random_uuid(), :k, :k, :k, '[]', '[]') IS NULL"
            ),
            json!({"k": "x", "customer": 10}),
        ),
        (
            "unspend",
            "DELETE FROM spent WHERE amount > :n".to_owned(),
            json!({"n": 0}),
        ),
        (
            "peek",
            format!(
                "UPDATE {shop}.customers SET credit = 0 WHERE id = :customer AND spent(gen_random_uuid(), :k, :k, 0) IS NULL"
            ),
            json!({"k": "x", "customer": 10}),
        ),
        (
            "inject",
            "INSERT INTO outbox (key, id, target, lease, payload) VALUES (:k, 'x', 'counting', 'shop-ops', '{}')"
                .to_owned(),
            json!({"k": "first"}),
        ),
        (
            "deliver",
            format!(
                "UPDATE {shop}.customers SET credit = 0 WHERE id = :customer AND delivered(gen_random_uuid(), :k, :k, :k) IS NULL"
            ),
            json!({"k": "x", "customer": 10}),
        ),
    ];
    for (name, sql, extra) in attempts {
        let answer = db.send(&SendRequest {
            key: &EffectKey::derive(&[name]),
            payload: &reach(name, &sql, extra),
            timeout: Duration::from_secs(5),
            deadline: None,
            last_look: None,
        });
        match &answer {
            SendAnswer::Definite { code, message } => {
                assert_eq!(code, "statement_failed", "{name}: {message}");
                assert!(message.contains(name), "{name}: {message}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert_eq!(credit(&mut client, 10), 500, "only the honest plan applied");
    assert_eq!(
        send(&db, "first", &cancel_and_credit()),
        SendAnswer::Replayed(first)
    );
    let markers: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.markers"), &[])
        .unwrap()
        .get(0);
    assert_eq!(markers, 1);
}

#[test]
fn on_postgres_an_outbox_call_exists_only_once_its_plan_committed_and_the_relay_delivers_it_once() {
    let (url, options, mut client) = shop("pg_outbox");
    let db = Arc::new(PgDb::open(&url, options, interlock_tests::db_outbox::policy()).unwrap());
    let understated = cancel_and_credit().footprint([("orders".into(), 1)].into());
    interlock_tests::db_outbox::outbox_round(db, understated, cancel_and_credit()).unwrap();
    assert_eq!(
        credit(&mut client, 10),
        500,
        "the committed plan credited once"
    );
}

#[test]
fn on_postgres_relays_on_two_journals_over_one_database_send_an_outbox_call_once() {
    let (url, options, mut client) = shop("pg_two_relays");
    let policy = interlock_tests::db_outbox::policy();
    let db = Arc::new(PgDb::open(&url, options.clone(), policy.clone()).unwrap());
    let db_again = Arc::new(PgDb::open(&url, options, policy).unwrap());
    interlock_tests::db_outbox::two_journals_round(db, db_again, cancel_and_credit()).unwrap();
    assert_eq!(credit(&mut client, 10), 500, "credited once");
}

#[test]
fn on_postgres_an_outbox_row_rewritten_after_its_stage_is_not_relayed() {
    let (url, options, mut client) = shop("pg_rewritten");
    let schema = options.schema.clone();
    let db = Arc::new(PgDb::open(&url, options, interlock_tests::db_outbox::policy()).unwrap());
    interlock_tests::db_outbox::rewritten_round(db, cancel_and_credit(), |payload| {
        // The installer's connection: no stage, no gate.
        client
            .execute(
                &format!("UPDATE {schema}.outbox SET payload = $1"),
                &[&payload],
            )
            .unwrap();
    })
    .unwrap();
}

#[test]
fn on_postgres_a_lease_that_lapsed_before_the_commit_rolls_the_stage_back() {
    use interlock::target::{LastLook, Looked};
    let (url, options, mut client) = shop("pg_lapsed");
    let db = PgDb::open(&url, options, Policy::default()).unwrap();
    let look = || Looked::Lapsed {
        code: "lease_dead",
        why: "lease shop-ops was revoked".into(),
    };
    let key = EffectKey::derive(&["lapsed"]);
    let answer = db.send(&SendRequest {
        key: &key,
        payload: &cancel_and_credit().to_payload(),
        timeout: Duration::from_secs(5),
        deadline: None,
        last_look: Some(LastLook::new(&look)),
    });
    assert!(
        matches!(&answer, SendAnswer::Definite { code, .. } if code == "lease_dead"),
        "{answer:?}"
    );
    assert_eq!(credit(&mut client, 10), 0);
    assert_eq!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::NotFound
    );
}

#[test]
fn on_postgres_a_worker_killed_mid_stage_leaves_a_transaction_that_holds_the_key_until_the_server_ends_it_and_the_plan_commits_once()
 {
    let (url, options, mut client) = shop("pg_killed");
    let dir = tempfile::tempdir().unwrap();
    let journal_path = dir.path().join("journal.db");
    let clock = Arc::new(interlock::SystemClock);
    let journal = Arc::new(SqliteJournal::open(&journal_path, clock.clone()).unwrap());
    journal
        .grant_lease(&Grant::new("shop-ops", "ops", interlock::Clock::now_ms(&*clock)).unlimited())
        .unwrap();
    // The plan's last statement sleeps in the server: the worker is killed during it.
    let mut statements = cancel_and_credit().statements;
    statements.push(stmt(
        "linger",
        "UPDATE customers SET credit = credit + 0 WHERE id = :customer \
         AND (SELECT true FROM pg_sleep(3.25))",
        json!({"customer": 10}),
    ));
    let plan = Plan::new(statements).unwrap();
    let send_timeout = Duration::from_secs(6);
    let mut worker = std::process::Command::new(env!("CARGO_BIN_EXE_db-stage-worker"))
        .arg("--journal")
        .arg(&journal_path)
        .args(["--shop", &url, "--pg-schema", &options.schema])
        .args(["--pg-search-path", options.search_path.as_deref().unwrap()])
        .args(["--key", "pg-killed", "--lease", "shop-ops"])
        .args(["--plan", &plan.to_payload().to_string()])
        .args(["--send-timeout-ms", &send_timeout.as_millis().to_string()])
        .env(
            interlock_db::postgres::STAGE_KEY_ENV,
            options.stage_key.as_deref().unwrap(),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let sleeping = |client: &mut Client| -> bool {
        client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE state = 'active' AND query LIKE '%pg_sleep(3.25)%' AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
            > 0
    };
    while !sleeping(&mut client) {
        assert!(
            worker.try_wait().unwrap().is_none(),
            "the worker ended before its stage slept"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no stage began"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    worker.kill().unwrap(); // SIGKILL
    worker.wait().unwrap();

    // The server is still running the dead worker's statement, inside its transaction, which
    // holds the key: a lookup now must not answer "absent".
    let key = EffectKey::derive(&["pg-killed"]);
    let looker = PgDb::open(&url, options.clone(), Policy::default())
        .unwrap()
        .lookup_wait(Duration::from_millis(300));
    assert!(
        matches!(
            looker.lookup(&key, &cancel_and_credit().to_payload()),
            LookupAnswer::Unknown(_)
        ),
        "a lookup while the dead worker's transaction is open must answer unknown"
    );
    assert_eq!(
        credit(&mut client, 10),
        0,
        "nothing of the killed stage is seen"
    );

    // Once the server ends that transaction (its statement done, the client gone), the gate's
    // recovery finds no marker and stages the plan again, once.
    let mut cfg = GateConfig::beside(&journal_path);
    cfg.send_timeout = send_timeout;
    let gate = Gate::new(journal.clone(), journal, clock, cfg).unwrap();
    let db = PgDb::open(&url, options, Policy::default()).unwrap();
    let bound = gate.bind(Arc::new(db), Arc::new(NoPremises)).unwrap();
    let effect = Effect::new(key.clone(), &plan.to_payload(), "shop-ops").unwrap();
    let retried = std::time::Instant::now();
    let outcome = loop {
        match bound.submit(&effect).unwrap() {
            Outcome::InFlight { retry_after, .. } if retried.elapsed() < 4 * send_timeout => {
                std::thread::sleep(retry_after.min(Duration::from_millis(500)));
            }
            other => break other,
        }
    };
    assert!(
        matches!(
            outcome,
            Outcome::Committed {
                via: interlock::Via::ReappliedAfterLookup,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(credit(&mut client, 10), 500, "credited once");
    assert!(matches!(
        looker.lookup(&key, &plan.to_payload()),
        LookupAnswer::Found(_)
    ));
}

#[test]
fn on_postgres_a_stage_opened_without_its_sessions_hold_on_the_key_refuses_rather_than_wait() {
    // What a pooler that moves transactions between server sessions would do: the key's lock
    // taken on one server session, the stage's transaction run on another. Waiting there would
    // read the marker in a snapshot older than the commit it waited for.
    let (url, options, _client) = shop("pg_pooled");
    let key = "pooled";
    let mut holder = Client::connect(&url, NoTls).unwrap();
    holder
        .query_one(
            "SELECT pg_advisory_lock(hashtextextended($1, 7263))",
            &[&key],
        )
        .unwrap();
    let mut other = Client::connect(&url, NoTls).unwrap();
    other
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SET LOCAL lock_timeout = '5s'")
        .unwrap();
    let proof = stage_proof(&options, &mut other, key);
    let started = std::time::Instant::now();
    let err = other
        .query_one(
            &format!(
                "SELECT o_token FROM {}.open($1, '{{}}', $2)",
                options.schema
            ),
            &[&key, &proof],
        )
        .unwrap_err();
    assert_eq!(
        err.code().map(postgres::error::SqlState::code),
        Some("IL004"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once"
    );
}

/// The proof `open` asks of a stage under `key` in the transaction `client` is in, made with
/// the stage key as the gate makes it.
fn stage_proof(options: &PgDbOptions, client: &mut Client, key: &str) -> String {
    use hmac::Mac;
    let xid: String = client
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .unwrap()
        .get(0);
    let secret = hex::decode(options.stage_key.as_deref().unwrap()).unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&secret).unwrap();
    mac.update(format!("interlock-stage-v2:{xid}:{key}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn sqlstate(e: &postgres::Error) -> Option<&str> {
    e.code().map(postgres::error::SqlState::code)
}

#[test]
fn on_postgres_the_stagers_credentials_alone_open_no_stage_and_seal_no_negative_use() {
    let (url, options, mut installer) = shop("pg_forge");
    let s = options.schema.clone();
    let mut stager = Client::connect(&url, NoTls).unwrap();
    // Open a stage under `key` in a new transaction, with the proof `proof` makes in it.
    let open = |c: &mut Client, key: &str, proof: &dyn Fn(&mut Client) -> String| {
        c.batch_execute("BEGIN").unwrap();
        let proof = proof(c);
        c.query_one(
            &format!("SELECT o_token::text FROM {s}.open($1, '{{}}', $2)"),
            &[&key, &proof],
        )
        .map(|row| row.get::<_, String>(0))
    };
    // Outside any plan, with the stager's credentials and no stage key: no stage opens, so no
    // marker, outbox call or window use can be sealed.
    let wrong_key = "f".repeat(64);
    for proof in ["", "00", wrong_key.as_str()] {
        let err = open(&mut stager, "forged-key", &|_| proof.to_owned()).unwrap_err();
        assert_eq!(sqlstate(&err), Some("IL005"), "{err}");
        stager.batch_execute("ROLLBACK").unwrap();
    }
    // A proof made for one key opens no other, and one made in one transaction opens nothing
    // in the next (a proof seen in a log is spent).
    let err = open(&mut stager, "forged-key", &|c| {
        stage_proof(&options, c, "key-a")
    })
    .unwrap_err();
    assert_eq!(sqlstate(&err), Some("IL005"), "{err}");
    stager.batch_execute("ROLLBACK").unwrap();
    stager.batch_execute("BEGIN").unwrap();
    let seen = stage_proof(&options, &mut stager, "forged-key");
    stager.batch_execute("ROLLBACK").unwrap();
    let err = open(&mut stager, "forged-key", &|_| seen.clone()).unwrap_err();
    assert_eq!(sqlstate(&err), Some("IL005"), "{err}");
    stager.batch_execute("ROLLBACK").unwrap();
    // The entry point without a proof is gone, and the key and the function that checks
    // proofs are the owner's alone.
    for sql in [
        format!("SELECT {s}.open('forged-key')"),
        format!("SELECT {s}.open('forged-key', '{{}}')"),
    ] {
        let err = stager.query_one(&sql, &[]).unwrap_err();
        assert_eq!(sqlstate(&err), Some("42883"), "{sql}: {err}");
    }
    for sql in [
        format!("SELECT secret FROM {s}.stage_key"),
        format!("SELECT {s}.hmac('\\x00'::bytea, '\\x00'::bytea)"),
    ] {
        let err = stager.query_one(&sql, &[]).unwrap_err();
        assert_eq!(sqlstate(&err), Some("42501"), "{sql}: {err}");
    }
    // With the gate's stage key, a seal handing a window a negative use is refused, so no use
    // can make room in a budget; and a keyless stage (the relay's) seals nothing.
    let seal = |c: &mut Client, token: &str, spent: &str| {
        c.execute(
            &format!("SELECT {s}.seal($1::text::uuid, 'h', 'h', '{{}}', '[]', $2::text::jsonb)"),
            &[&token, &spent],
        )
    };
    let token = open(&mut stager, "forged-key", &|c| {
        stage_proof(&options, c, "forged-key")
    })
    .unwrap();
    let err = seal(
        &mut stager,
        &token,
        r#"[{"window": "credit_hour", "at_ms": 1, "amount": -100000}]"#,
    )
    .unwrap_err();
    assert_eq!(sqlstate(&err), Some("IL006"), "{err}");
    stager.batch_execute("ROLLBACK").unwrap();
    // Nor is a use, or a read, of a window the stage did not lock when it opened.
    for spent in [
        r#"[{"window": "credit_hour", "at_ms": 1, "amount": 5}]"#,
        r#"[{"window": "credit_hour@10", "at_ms": 1, "amount": 5}]"#,
    ] {
        let token = open(&mut stager, "forged-key", &|c| {
            stage_proof(&options, c, "forged-key")
        })
        .unwrap();
        let err = seal(&mut stager, &token, spent).unwrap_err();
        assert_eq!(sqlstate(&err), Some("IL002"), "{spent}: {err}");
        stager.batch_execute("ROLLBACK").unwrap();
    }
    let token = open(&mut stager, "forged-key", &|c| {
        stage_proof(&options, c, "forged-key")
    })
    .unwrap();
    let err = stager
        .query_one(
            &format!("SELECT {s}.spent($1::text::uuid, 'credit_hour', 'credit_hour', 0)"),
            &[&token],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), Some("IL004"), "{err}");
    stager.batch_execute("ROLLBACK").unwrap();
    let token = open(&mut stager, "", &|c| stage_proof(&options, c, "")).unwrap();
    let err = seal(&mut stager, &token, "[]").unwrap_err();
    assert_eq!(sqlstate(&err), Some("IL002"), "{err}");
    stager.batch_execute("ROLLBACK").unwrap();
    let written: i64 = installer
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {s}.markers) + (SELECT count(*) FROM {s}.outbox)                  + (SELECT count(*) FROM {s}.spent)"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(written, 0, "nothing was forged");
    // And the gate, with the key, stages as before.
    let db = PgDb::open(&url, options.clone(), Policy::default()).unwrap();
    let answer = credit_at(&db, "with-the-key", 5, &ManualClock::at(0));
    assert!(matches!(answer, SendAnswer::Done(_)), "{answer:?}");
    // Without it, the target does not open, and says where the key is.
    let keyless = PgDbOptions {
        stage_key: Some("00".repeat(32)),
        ..options
    };
    let db = PgDb::open(&url, keyless, Policy::default()).unwrap();
    let answer = credit_at(&db, "without-the-key", 5, &ManualClock::at(0));
    assert!(
        !matches!(answer, SendAnswer::Done(_)),
        "a wrong key staged: {answer:?}"
    );
}

/// A budget of `max` over the credit customers are given within an hour.
fn credit_budget(max: i64) -> Policy {
    Policy {
        windows: vec![RowWindow {
            id: "credit_hour".into(),
            table: "customers".into(),
            column: Some("credit".into()),
            per: None,
            window_ms: 3_600_000,
            max,
        }],
        ..Policy::default()
    }
}

/// Credit customer 10 with `amount`, under a deadline on `clock` that never passes.
fn credit_at(db: &PgDb, key: &str, amount: i64, clock: &ManualClock) -> SendAnswer {
    credit_slowly(db, key, 10, amount, 0.0, clock)
}

/// Credit `customer` with `amount`, taking `sleep_s` inside the statement, under a deadline on
/// `clock` that never passes.
fn credit_slowly(
    db: &PgDb,
    key: &str,
    customer: i64,
    amount: i64,
    sleep_s: f64,
    clock: &ManualClock,
) -> SendAnswer {
    let plan = Plan::new(vec![stmt(
        "credit_customer",
        "UPDATE customers SET credit = credit + :amount WHERE id = :customer \
         AND (SELECT true FROM pg_sleep(:sleep))",
        json!({ "amount": amount, "customer": customer, "sleep": sleep_s }),
    )])
    .unwrap();
    send_at(db, key, &plan, clock)
}

/// Stage `plan` under `key`, under a deadline on `clock` that never passes.
fn send_at(db: &PgDb, key: &str, plan: &Plan, clock: &ManualClock) -> SendAnswer {
    db.send(&SendRequest {
        key: &EffectKey::derive(&[key]),
        payload: &plan.to_payload(),
        timeout: Duration::from_secs(10),
        deadline: Some(Deadline {
            at_ms: i64::MAX,
            clock,
        }),
        last_look: None,
    })
}

#[test]
fn on_postgres_a_budget_over_measured_credit_refuses_the_stage_that_would_overrun_it_until_its_window_has_passed()
 {
    let (url, options, mut client) = shop("pg_budget");
    let db = PgDb::open(&url, options, credit_budget(1_000)).unwrap();
    let clock = ManualClock::at(1_700_000_000_000);
    assert!(matches!(
        credit_at(&db, "a", 400, &clock),
        SendAnswer::Done(_)
    ));
    clock.advance(1_000);
    assert!(matches!(
        credit_at(&db, "b", 600, &clock),
        SendAnswer::Done(_)
    ));
    match credit_at(&db, "c", 1, &clock) {
        SendAnswer::Definite { message, .. } => {
            assert!(message.contains("windows"), "{message}");
            assert!(
                !message.contains("1000"),
                "no totals for the agent: {message}"
            );
        }
        other => panic!("a full budget let a stage in: {other:?}"),
    }
    assert_eq!(
        credit(&mut client, 10),
        1_000,
        "the refused stage wrote nothing"
    );
    clock.advance(3_600_000 - 1_000);
    assert!(matches!(
        credit_at(&db, "d", 400, &clock),
        SendAnswer::Done(_)
    ));
    assert!(!matches!(
        credit_at(&db, "e", 1, &clock),
        SendAnswer::Done(_)
    ));
    assert_eq!(credit(&mut client, 10), 1_400);
}

#[test]
fn on_postgres_a_budget_per_customer_bounds_each_customers_credit_whatever_anothers_is() {
    let (url, options, mut client) = shop("pg_budget_per");
    let schema = options.schema.clone();
    let mut policy = credit_budget(1_000);
    policy.windows[0].per = Some("id".into());
    let db = PgDb::open(&url, options, policy).unwrap();
    let clock = ManualClock::at(1_700_000_000_000);
    let done = |a: SendAnswer| matches!(a, SendAnswer::Done(_));
    assert!(done(credit_slowly(&db, "a", 10, 900, 0.0, &clock)));
    // One count for the table would refuse this; customer 20 has a budget of its own.
    assert!(done(credit_slowly(&db, "b", 20, 900, 0.0, &clock)));
    match credit_slowly(&db, "c", 10, 200, 0.0, &clock) {
        SendAnswer::Definite { message, .. } => assert!(message.contains("windows"), "{message}"),
        other => panic!("customer 10's full budget let a stage in: {other:?}"),
    }
    assert!(done(credit_slowly(&db, "d", 20, 100, 0.0, &clock)));
    let credits: Vec<(i64, i64)> = client
        .query(
            "SELECT id::bigint, credit::bigint FROM customers WHERE id IN (10, 20) ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(credits, vec![(10, 900), (20, 1_000)]);
    // Both customers in one plan: 50 fits customer 10's budget, not customer 20's, so nothing
    // lands for either.
    let both = Plan::new(vec![stmt(
        "credit_both",
        "UPDATE customers SET credit = credit + 50 WHERE id IN (10, 20)",
        json!({}),
    )])
    .unwrap();
    let answer = send_at(&db, "e", &both, &clock);
    assert!(matches!(answer, SendAnswer::Definite { .. }), "{answer:?}");
    let after: i64 = client
        .query_one(
            "SELECT sum(credit)::bigint FROM customers WHERE id IN (10, 20)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(after, 1_900, "the refused stage wrote nothing");
    // Each use is recorded under the window and the customer.
    let uses: Vec<(String, i64)> = client
        .query(
            &format!("SELECT window_id, amount FROM {schema}.spent ORDER BY window_id, amount"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        uses,
        vec![
            ("credit_hour@10".to_owned(), 900),
            ("credit_hour@20".to_owned(), 100),
            ("credit_hour@20".to_owned(), 900),
        ]
    );
}

#[test]
fn on_postgres_two_stages_racing_for_a_budgets_last_room_commit_one() {
    let (url, options, mut client) = shop("pg_budget_race");
    let clock = ManualClock::at(1_700_000_000_000);
    // Two targets, two sessions, two customers: each stage's statement sleeps, so the second
    // arrives while the first is under way, and with no row in common only the window's lock
    // stands between them.
    let answers: Vec<SendAnswer> = std::thread::scope(|scope| {
        let racers: Vec<_> = [("first", 10), ("second", 20)]
            .into_iter()
            .enumerate()
            .map(|(i, (key, customer))| {
                let db = PgDb::open(&url, options.clone(), credit_budget(400)).unwrap();
                let clock = clock.clone();
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(100 * i as u64));
                    credit_slowly(&db, key, customer, 400, 0.5, &clock)
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let done = answers
        .iter()
        .filter(|a| matches!(a, SendAnswer::Done(_)))
        .count();
    assert_eq!(done, 1, "{answers:?}");
    assert!(
        answers.iter().any(
            |a| matches!(a, SendAnswer::Definite { message, .. } if message.contains("windows"))
        ),
        "{answers:?}"
    );
    assert_eq!(credit(&mut client, 10) + credit(&mut client, 20), 400);
}

#[test]
fn on_postgres_a_plan_that_releases_its_sessions_locks_still_holds_its_windows_until_it_commits() {
    let (url, options, mut client) = shop("pg_budget_unlock");
    let clock = ManualClock::at(1_700_000_000_000);
    // The first stage lets go of every session lock it holds, the window's among them, then
    // sleeps; the second, started 200 ms later, asks for the window's session lock meanwhile.
    // The first transaction's own hold, taken when its stage opened, is what keeps the second
    // waiting until the first has committed its use (without it both commit).
    let release = Plan::new(vec![
        stmt(
            "credit_customer",
            "UPDATE customers SET credit = credit + :amount WHERE id = 10 \
             AND (SELECT true FROM pg_advisory_unlock_all())",
            json!({ "amount": 400 }),
        ),
        stmt(
            "linger",
            "UPDATE customers SET credit = credit WHERE id = 10 AND (SELECT true FROM pg_sleep(:s))",
            json!({ "s": 0.6 }),
        ),
    ])
    .unwrap();
    let answers: Vec<SendAnswer> = std::thread::scope(|scope| {
        let first = {
            let db = PgDb::open(&url, options.clone(), credit_budget(400)).unwrap();
            let clock = clock.clone();
            let release = release.clone();
            scope.spawn(move || send_at(&db, "releaser", &release, &clock))
        };
        let second = {
            let db = PgDb::open(&url, options.clone(), credit_budget(400)).unwrap();
            let clock = clock.clone();
            scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                credit_slowly(&db, "second", 20, 400, 0.0, &clock)
            })
        };
        vec![first.join().unwrap(), second.join().unwrap()]
    });
    let done = answers
        .iter()
        .filter(|a| matches!(a, SendAnswer::Done(_)))
        .count();
    assert_eq!(done, 1, "{answers:?}");
    assert_eq!(
        credit(&mut client, 10) + credit(&mut client, 20),
        400,
        "{answers:?}"
    );
}

#[test]
fn on_postgres_a_substrate_installed_before_the_windows_is_named_not_installed() {
    let (url, options, mut client) = shop("pg_old_substrate");
    client
        .batch_execute(&format!(
            "DROP FUNCTION {}.spent(uuid, text, text, bigint)",
            options.schema
        ))
        .unwrap();
    match PgDb::open(&url, options, Policy::default()) {
        Err(e @ interlock_db::DbError::NotInstalled { .. }) => {
            assert!(e.to_string().contains("predates"), "{e}");
        }
        other => panic!("an old substrate was taken as installed: {other:?}"),
    }
}

#[test]
fn on_postgres_another_plan_under_a_taken_key_is_refused_as_a_conflict_never_answered_committed() {
    // Two journals on one shop database: A commits its plan under the key; B submits another
    // plan (credit customer 20) under the same key. B's plan never ran: it must not be told it
    // committed because the lookup found A's marker.
    let (url, options, mut client) = shop("pg_two_plans");
    let dir = tempfile::tempdir().unwrap();
    let key = EffectKey::derive(&["pg", "taken"]);
    let gate_on = |journal_name: &str| {
        let path = dir.path().join(journal_name);
        let t0 = interlock::Clock::now_ms(&interlock::SystemClock);
        let journal =
            Arc::new(SqliteJournal::open(&path, Arc::new(interlock::SystemClock)).unwrap());
        journal
            .grant_lease(&Grant::new("shop-ops", "ops", t0).unlimited())
            .unwrap();
        let gate = Gate::new(
            journal.clone(),
            journal,
            Arc::new(interlock::SystemClock),
            GateConfig::beside(&path),
        )
        .unwrap();
        let db = PgDb::open(&url, options.clone(), Policy::default()).unwrap();
        gate.bind(Arc::new(db), Arc::new(NoPremises)).unwrap()
    };
    let first = Effect::new(key.clone(), &cancel_and_credit().to_payload(), "shop-ops").unwrap();
    assert!(matches!(
        gate_on("a.db").submit(&first).unwrap(),
        Outcome::Committed { .. }
    ));
    let other = Plan::new(vec![stmt(
        "credit_customer",
        "UPDATE customers SET credit = credit + :amount WHERE id = :customer",
        json!({"amount": 777, "customer": 20}),
    )])
    .unwrap();
    let second = Effect::new(key, &other.to_payload(), "shop-ops").unwrap();
    let out = gate_on("b.db").submit(&second).unwrap();
    assert!(
        matches!(&out, Outcome::Refused(r) if r.code == interlock::core::RefusalCode::TargetConflict),
        "another plan under the key: {out:?}"
    );
    assert_eq!(credit(&mut client, 20), 0, "customer 20 was never credited");
    assert_eq!(credit(&mut client, 10), 500, "only A's plan ran");
}
