use std::collections::BTreeMap;
use std::time::Duration;

use interlock::EffectKey;
use interlock::target::{LookupAnswer, SendAnswer, SendRequest, Target};
use serde_json::{Value, json};

use super::*;
use crate::checks::{DeltaCap, Policy};
use crate::plan::{Plan, Premise, Statement};

/// A shop: orders, customers' credit, and an audit trigger nobody mentions in a plan.
fn shop(dir: &Path) -> PathBuf {
    let path = dir.join("shop.db");
    let mut conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE orders (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, status TEXT NOT NULL, amount INTEGER NOT NULL);
         CREATE TABLE customers (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, credit INTEGER NOT NULL);
         CREATE TABLE audit (id INTEGER PRIMARY KEY, what TEXT NOT NULL);
         CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT);
         CREATE TRIGGER orders_audit AFTER UPDATE OF status ON orders BEGIN
             INSERT INTO audit (what) VALUES ('order ' || NEW.id || ' ' || NEW.status);
         END;
         INSERT INTO orders VALUES (1, 't1', 'paid', 500), (2, 't2', 'paid', 900);
         INSERT INTO customers VALUES (10, 't1', 0), (20, 't2', 0);",
    )
    .unwrap();
    install(&mut conn, &["orders", "customers", "audit"]).unwrap();
    path
}

fn stmt(name: &str, sql: &str, params: Value) -> Statement {
    Statement {
        name: name.into(),
        sql: sql.into(),
        params: serde_json::from_value(params).unwrap(),
    }
}

/// Cancel order 1 and credit its customer its amount.
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

fn send(db: &SqliteDb, key: &str, plan: &Plan) -> SendAnswer {
    let key = EffectKey::derive(&[key]);
    db.send(&SendRequest {
        key: &key,
        payload: &plan.to_payload(),
        timeout: Duration::from_secs(5),
        deadline: None,
        last_look: None,
    })
}

fn credit(path: &Path, customer: i64) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT credit FROM customers WHERE id = ?1",
            [customer],
            |r| r.get(0),
        )
        .unwrap()
}

fn status(path: &Path, order: i64) -> String {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT status FROM orders WHERE id = ?1", [order], |r| {
            r.get(0)
        })
        .unwrap()
}

#[test]
fn the_trigger_measured_footprint_differs_from_the_sqls_row_count_and_is_what_is_judged() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    // The SQL changes one order and one customer; the database also wrote an audit row.
    let stated = cancel_and_credit()
        .footprint([("orders".to_owned(), 1), ("customers".to_owned(), 1)].into());
    match send(&db, "k1", &stated) {
        SendAnswer::Definite { code, message } => {
            assert_eq!(code, "refused");
            assert!(message.contains("footprint"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(status(&path, 1), "paid", "a refused plan changes nothing");
    assert_eq!(credit(&path, 10), 0);

    let honest = cancel_and_credit().footprint(
        [
            ("orders".to_owned(), 1),
            ("customers".to_owned(), 1),
            ("audit".to_owned(), 1),
        ]
        .into(),
    );
    let SendAnswer::Done(receipt) = send(&db, "k2", &honest) else {
        panic!("the honest plan commits");
    };
    let receipt: Receipt = serde_json::from_value(receipt).unwrap();
    assert_eq!(
        receipt.diff.rows_per_table(),
        [
            ("audit".to_owned(), 1),
            ("customers".to_owned(), 1),
            ("orders".to_owned(), 1)
        ]
        .into()
    );
    assert!(receipt.diff_matches());
    assert_eq!(status(&path, 1), "cancelled");
    assert_eq!(credit(&path, 10), 500);
}

#[test]
fn a_second_stage_under_the_key_finds_the_marker_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let key = EffectKey::derive(&["once"]);
    assert_eq!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::NotFound,
        "nothing before the first stage"
    );
    let SendAnswer::Done(first) = send(&db, "once", &cancel_and_credit()) else {
        panic!("the first stage commits");
    };
    // The order is cancelled now: a plan re-run without its marker would credit again
    // (the credit statement has no guard of its own).
    let again = send(&db, "once", &cancel_and_credit());
    assert_eq!(again, SendAnswer::Replayed(first.clone()));
    assert_eq!(credit(&path, 10), 500, "credited once");
    assert_eq!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::Found(first)
    );

    let other = Plan::new(vec![stmt(
        "credit_customer",
        "UPDATE customers SET credit = credit + 1 WHERE id = 10",
        json!({}),
    )])
    .unwrap();
    assert!(matches!(send(&db, "once", &other), SendAnswer::Conflict(_)));
    assert_eq!(credit(&path, 10), 500);
    // The key's marker is the first plan's: asked for the other, the lookup does not find it
    // (it never ran), and a payload that is no plan cannot be looked up at all.
    assert_eq!(db.lookup(&key, &other.to_payload()), LookupAnswer::NotFound);
    assert!(matches!(
        db.lookup(&key, &Value::Null),
        LookupAnswer::Unknown(_)
    ));
}

#[test]
fn a_moved_premise_rolls_the_stage_back_and_names_only_the_premise() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let expect: Vec<BTreeMap<String, Value>> = vec![
        [
            ("status".to_owned(), json!("paid")),
            ("amount".to_owned(), json!(500)),
        ]
        .into(),
    ];
    let plan = cancel_and_credit()
        .premise(Premise {
            name: "order_is_paid".into(),
            sql: "SELECT status, amount FROM orders WHERE id = :order".into(),
            params: [("order".to_owned(), json!(1))].into(),
            expect,
        })
        .unwrap();
    Connection::open(&path)
        .unwrap()
        .execute("UPDATE orders SET amount = 450 WHERE id = 1", [])
        .unwrap();
    match send(&db, "p", &plan) {
        SendAnswer::Definite { code, message } => {
            assert_eq!(code, "premise_moved");
            assert!(message.contains("order_is_paid") && !message.contains("450"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(credit(&path, 10), 0);
}

/// Other tenants' rows, drawn at random: customer 20 renamed and rescaled, and any number of
/// customers more, each under a tenant of its own name.
struct Others {
    name: String,
    credit: i64,
    more: Vec<(String, i64)>,
}

impl Others {
    /// The world drawn from `seed` (xorshift: the same seed, the same world).
    fn drawn(seed: u64) -> Self {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let name = |next: &mut dyn FnMut() -> u64| -> String {
            let len = 1 + next() % 24;
            (0..len)
                .map(|_| {
                    char::from(b"abcdefghijklmnopqrstuvwxyz0123456789-_ "[(next() % 39) as usize])
                })
                .collect::<String>()
                .replace("t1", "u1")
        };
        let scale = |v: u64| i64::try_from(v % 2_000_000_000_000).unwrap_or(0) - 1_000_000_000_000;
        let first = name(&mut next);
        let credit = scale(next());
        let more = (0..next() % 40)
            .map(|_| (name(&mut next), scale(next())))
            .collect();
        Self {
            name: first,
            credit,
            more,
        }
    }
}

/// The agent's refusal of `plan` under `policy` in a shop where other tenants hold `others`.
fn refusal_among(others: &Others, policy: &Policy, plan: &Plan) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE customers SET tenant = ?1, credit = ?2 WHERE id = 20",
        rusqlite::params![others.name, others.credit],
    )
    .unwrap();
    for (i, (tenant, credit)) in others.more.iter().enumerate() {
        conn.execute(
            "INSERT INTO customers (id, tenant, credit) VALUES (?1, ?2, ?3)",
            rusqlite::params![100 + i as i64, tenant, credit],
        )
        .unwrap();
    }
    let db = SqliteDb::open(&path, policy.clone()).unwrap();
    let answer = send(&db, "t", plan);
    assert_eq!(credit(&path, 10), 0, "refused, nothing applied");
    match answer {
        SendAnswer::Definite { code, message } => {
            assert_eq!(code, "refused");
            message
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_refusal_an_agent_reads_is_byte_identical_whatever_other_tenants_hold() {
    let tenant = Policy {
        tenant_column: Some("tenant".into()),
        ..Policy::default()
    };
    let capped = Policy {
        delta_caps: vec![DeltaCap {
            table: "customers".into(),
            column: "credit".into(),
            max: 400,
        }],
        ..Policy::default()
    };
    let one_row = Policy {
        max_rows: [("customers".to_owned(), 1)].into(),
        ..Policy::default()
    };
    let everyone = Plan::new(vec![stmt(
        "credit_customer",
        "UPDATE customers SET credit = credit + :amount WHERE id >= :from",
        json!({"amount": 5, "from": 10}),
    )])
    .unwrap()
    .tenant(json!("t1"));
    let cases = [
        (&tenant, &everyone),
        (&capped, &cancel_and_credit()),
        (&one_row, &everyone),
    ];
    let baseline = Others {
        name: "t2".into(),
        credit: 0,
        more: Vec::new(),
    };
    for (policy, plan) in cases {
        let first = refusal_among(&baseline, policy, plan);
        assert!(first.ends_with("statement `credit_customer`"), "{first}");
        for seed in 1..=24 {
            let others = Others::drawn(seed);
            assert_eq!(
                refusal_among(&others, policy, plan),
                first,
                "seed {seed}: {} more rows, one named {:?} holding {}",
                others.more.len(),
                others.name,
                others.credit
            );
        }
    }
}

#[test]
fn a_delta_cap_holds_the_sum_of_a_columns_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let policy = Policy {
        delta_caps: vec![DeltaCap {
            table: "customers".into(),
            column: "credit".into(),
            max: 400,
        }],
        ..Policy::default()
    };
    let db = SqliteDb::open(&path, policy).unwrap();
    assert!(matches!(
        send(&db, "cap", &cancel_and_credit()),
        SendAnswer::Definite { .. }
    ));
    assert_eq!(credit(&path, 10), 0);
}

#[test]
fn a_statement_that_writes_a_table_nobody_observes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let plan = Plan::new(vec![stmt(
        "note",
        "INSERT INTO notes (text) VALUES (:text)",
        json!({"text": "hello"}),
    )])
    .unwrap();
    match send(&db, "n", &plan) {
        SendAnswer::Definite { code, .. } => assert_eq!(code, "unobserved_table"),
        other => panic!("{other:?}"),
    }
    let notes: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(notes, 0);
}

#[test]
fn a_write_outside_any_stage_is_reported_as_unmediated() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    send(&db, "m", &cancel_and_credit());
    assert!(
        db.unmediated().unwrap().is_empty(),
        "a stage's rows are not unmediated"
    );
    Connection::open(&path)
        .unwrap()
        .execute("UPDATE customers SET credit = 1 WHERE id = 20", [])
        .unwrap();
    let unmediated = db.unmediated().unwrap();
    assert_eq!(unmediated.len(), 1);
    assert_eq!(unmediated[0].table, "customers");
    assert_eq!(unmediated[0].statement, None);
}

#[test]
fn a_plan_that_fails_in_the_database_is_rolled_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let plan = Plan::new(vec![
        stmt(
            "cancel_order",
            "UPDATE orders SET status = 'cancelled' WHERE id = :order",
            json!({"order": 1}),
        ),
        stmt(
            "broken",
            "UPDATE customers SET credit = NULL WHERE id = :customer",
            json!({"customer": 10}),
        ),
    ])
    .unwrap();
    match send(&db, "f", &plan) {
        SendAnswer::Definite { code, message } => {
            assert_eq!(code, "statement_failed");
            assert!(!message.contains("NOT NULL"), "no database text: {message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(status(&path, 1), "paid");
}

#[test]
fn a_lookup_while_a_stage_holds_the_lock_is_unknown_never_absent() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default())
        .unwrap()
        .lookup_wait(Duration::from_millis(200));
    // Another process's stage, frozen inside its transaction.
    let frozen = Connection::open(&path).unwrap();
    frozen.execute_batch("BEGIN IMMEDIATE").unwrap();
    let key = EffectKey::derive(&["frozen"]);
    assert!(matches!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::Unknown(_)
    ));
    frozen.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::NotFound
    );
}

#[test]
fn a_stage_that_cannot_finish_before_its_deadline_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let key = EffectKey::derive(&["late"]);
    let answer = db.send(&SendRequest {
        key: &key,
        payload: &cancel_and_credit().to_payload(),
        timeout: Duration::ZERO,
        deadline: None,
        last_look: None,
    });
    match answer {
        SendAnswer::Definite { code, .. } => assert_eq!(code, "deadline"),
        other => panic!("{other:?}"),
    }
    assert_eq!(credit(&path, 10), 0);
    assert_eq!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::NotFound
    );
}

#[test]
fn a_process_that_wakes_after_the_gates_deadline_does_not_stage_whatever_its_timeout_says() {
    // The gate reckoned the send's time, then the process froze; it wakes with a full
    // `timeout` in hand but past the deadline recoverers judge by.
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let clock = interlock::ManualClock::at(1_000_000);
    let key = EffectKey::derive(&["woke"]);
    let answer = db.send(&SendRequest {
        key: &key,
        payload: &cancel_and_credit().to_payload(),
        timeout: Duration::from_secs(30),
        deadline: Some(interlock::target::Deadline {
            at_ms: 999_999,
            clock: &clock,
        }),
        last_look: None,
    });
    match answer {
        SendAnswer::Definite { code, .. } => assert_eq!(code, "deadline"),
        other => panic!("{other:?}"),
    }
    assert_eq!(credit(&path, 10), 0);
}

#[test]
fn a_statement_that_reaches_the_substrates_tables_through_a_trigger_is_refused_by_sqlite_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let SendAnswer::Done(_) = send(&db, "earlier", &cancel_and_credit()) else {
        panic!("an earlier effect commits");
    };
    // No plan names the markers, but a trigger (a careless one) would erase them.
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER careless AFTER UPDATE ON customers BEGIN DELETE FROM interlock_markers; END;",
        )
        .unwrap();
    let credit_again = Plan::new(vec![stmt(
        "credit_customer",
        "UPDATE customers SET credit = credit + 1 WHERE id = :customer",
        json!({"customer": 20}),
    )])
    .unwrap();
    match send(&db, "later", &credit_again) {
        SendAnswer::Definite { code, message } => {
            assert_eq!(code, "bad_plan");
            assert!(message.contains("interlock_markers"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        db.receipt(&EffectKey::derive(&["earlier"]))
            .unwrap()
            .is_some(),
        "the earlier marker is still there"
    );
    // The substrate's own statements run unguarded afterwards.
    assert!(db.unmediated().unwrap().is_empty());
}

#[test]
fn a_plan_cannot_read_the_markers_through_a_subquery_named_like_the_substrate() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let SendAnswer::Done(_) = send(&db, "earlier", &cancel_and_credit()) else {
        panic!("an earlier effect commits");
    };
    // Names in strings pass the lexer; SQLite names the CTE as the reader of the markers.
    let peek = Plan::new(vec![stmt(
        "credit_customer",
        "UPDATE customers SET credit = (WITH 'interlock_r_insert' AS (SELECT count(*) AS r FROM 'interlock_markers') SELECT r FROM 'interlock_r_insert') WHERE id = :customer",
        json!({"customer": 20}),
    )])
    .unwrap();
    match send(&db, "peek", &peek) {
        SendAnswer::Definite { code, message } => {
            assert_eq!(code, "bad_plan");
            assert!(message.contains("interlock_markers"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(credit(&path, 20), 0);
}

#[test]
fn a_row_a_conflict_clause_replaces_is_seen_and_the_stage_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let mut conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE handles (id INTEGER PRIMARY KEY, tenant TEXT, handle TEXT UNIQUE ON CONFLICT REPLACE);
         INSERT INTO handles VALUES (1, 'other', 'taken');",
    )
    .unwrap();
    install(&mut conn, &["handles"]).unwrap();
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let plan = Plan::new(vec![stmt(
        "claim_handle",
        "INSERT INTO handles (id, tenant, handle) VALUES (2, 'mine', :h)",
        json!({"h": "taken"}),
    )])
    .unwrap();
    match send(&db, "replace", &plan) {
        SendAnswer::Definite { code, .. } => assert_eq!(code, "unobserved_table"),
        other => panic!("{other:?}"),
    }
    let owner: String = conn
        .query_row(
            "SELECT tenant FROM handles WHERE handle = 'taken'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(owner, "other", "the other tenant's row is untouched");
}

#[test]
fn a_payload_that_is_not_a_valid_plan_is_refused_before_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let key = EffectKey::derive(&["bad"]);
    for payload in [
        json!({"statements": [{"name": "x", "sql": "UPDATE orders SET status = 'x'; COMMIT"}]}),
        json!({"statements": [{"name": "x", "sql": "DROP TABLE orders"}]}),
        json!({"statements": [{"name": "x", "sql": "UPDATE orders SET amount = ?"}]}),
        json!("not a plan"),
    ] {
        let answer = db.send(&SendRequest {
            key: &key,
            payload: &payload,
            timeout: Duration::from_secs(1),
            deadline: None,
            last_look: None,
        });
        assert!(
            matches!(&answer, SendAnswer::Definite { code, .. } if code == "bad_plan"),
            "{payload}: {answer:?}"
        );
    }
    assert_eq!(status(&path, 1), "paid");
}

#[test]
fn opening_a_database_without_the_substrate_says_to_install_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE t (a INTEGER)")
        .unwrap();
    let err = SqliteDb::open(&path, Policy::default()).unwrap_err();
    assert!(err.to_string().contains("install"), "{err}");
    let mut conn = Connection::open(&path).unwrap();
    assert!(matches!(
        install(&mut conn, &["missing"]),
        Err(DbError::BadTable { .. })
    ));
    assert!(matches!(
        install(&mut conn, &["t; DROP TABLE t"]),
        Err(DbError::BadTable { .. })
    ));
    install(&mut conn, &["t"]).unwrap();
    assert_eq!(observed(&conn).unwrap(), vec!["t"]);
}

#[test]
fn the_gates_last_look_decides_at_the_commit_lapsed_refuses_unreadable_rolls_back_for_later() {
    use interlock::target::{LastLook, Looked};
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, Policy::default()).unwrap();
    let key = EffectKey::derive(&["looked"]);
    let payload = cancel_and_credit().to_payload();
    let send_with = |found: Looked| {
        let look = move || found.clone();
        db.send(&SendRequest {
            key: &key,
            payload: &payload,
            timeout: Duration::from_secs(5),
            deadline: None,
            last_look: Some(LastLook::new(&look)),
        })
    };
    let lapsed = send_with(Looked::Lapsed {
        code: "lease_dead",
        why: "lease ops was revoked at 7".into(),
    });
    assert!(
        matches!(&lapsed, SendAnswer::Definite { code, .. } if code == "lease_dead"),
        "{lapsed:?}"
    );
    let unreadable = send_with(Looked::Unreadable("the journal is down".into()));
    assert!(
        matches!(&unreadable, SendAnswer::Unknown(m) if m.contains("nothing applied")),
        "{unreadable:?}"
    );
    assert_eq!(credit(&path, 10), 0, "neither landed");
    assert_eq!(
        db.lookup(&key, &cancel_and_credit().to_payload()),
        LookupAnswer::NotFound
    );
    assert!(matches!(send_with(Looked::Holds), SendAnswer::Done(_)));
    assert_eq!(credit(&path, 10), 500);
}

/// Credit customer 10 with `amount`, under a deadline on `clock` that never passes.
fn credit_at(db: &SqliteDb, key: &str, amount: i64, clock: &interlock::ManualClock) -> SendAnswer {
    credit_customer_at(db, key, 10, amount, clock)
}

/// Credit `customer` with `amount`, under a deadline on `clock` that never passes.
fn credit_customer_at(
    db: &SqliteDb,
    key: &str,
    customer: i64,
    amount: i64,
    clock: &interlock::ManualClock,
) -> SendAnswer {
    let plan = Plan::new(vec![stmt(
        "credit_customer",
        "UPDATE customers SET credit = credit + :amount WHERE id = :customer",
        json!({ "amount": amount, "customer": customer }),
    )])
    .unwrap();
    send_at(db, key, &plan, clock)
}

/// Stage `plan` under `key`, under a deadline on `clock` that never passes.
fn send_at(db: &SqliteDb, key: &str, plan: &Plan, clock: &interlock::ManualClock) -> SendAnswer {
    db.send(&SendRequest {
        key: &EffectKey::derive(&[key]),
        payload: &plan.to_payload(),
        timeout: Duration::from_secs(5),
        deadline: Some(interlock::target::Deadline {
            at_ms: i64::MAX,
            clock,
        }),
        last_look: None,
    })
}

/// A budget of 1,000 over the credit customers are given within an hour, counted per `per`.
fn credit_budget(per: Option<&str>) -> Policy {
    Policy {
        windows: vec![crate::checks::RowWindow {
            id: "credit_hour".into(),
            table: "customers".into(),
            column: Some("credit".into()),
            per: per.map(str::to_owned),
            window_ms: 3_600_000,
            max: 1_000,
        }],
        ..Policy::default()
    }
}

#[test]
fn a_budget_over_measured_credit_refuses_the_stage_that_would_overrun_it_until_its_window_has_passed()
 {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, credit_budget(None)).unwrap();
    let clock = interlock::ManualClock::at(1_700_000_000_000);
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
    assert_eq!(credit(&path, 10), 1_000, "the refused stage wrote nothing");
    // The first use leaves the window; the second is still in it.
    clock.advance(3_600_000 - 1_000);
    assert!(matches!(
        credit_at(&db, "d", 400, &clock),
        SendAnswer::Done(_)
    ));
    assert!(!matches!(
        credit_at(&db, "e", 1, &clock),
        SendAnswer::Done(_)
    ));
    assert_eq!(credit(&path, 10), 1_400);
}

#[test]
fn a_budget_per_customer_bounds_each_customers_credit_whatever_anothers_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = shop(dir.path());
    let db = SqliteDb::open(&path, credit_budget(Some("id"))).unwrap();
    let clock = interlock::ManualClock::at(1_700_000_000_000);
    let done = |a: SendAnswer| matches!(a, SendAnswer::Done(_));
    assert!(done(credit_customer_at(&db, "a", 10, 900, &clock)));
    // One count for the table would refuse this; customer 20 has a budget of its own.
    assert!(done(credit_customer_at(&db, "b", 20, 900, &clock)));
    match credit_customer_at(&db, "c", 10, 200, &clock) {
        SendAnswer::Definite { message, .. } => {
            assert!(message.contains("windows"), "{message}");
        }
        other => panic!("customer 10's full budget let a stage in: {other:?}"),
    }
    assert!(done(credit_customer_at(&db, "d", 20, 100, &clock)));
    assert_eq!((credit(&path, 10), credit(&path, 20)), (900, 1_000));
    // Both customers in one plan: 50 fits customer 10's budget, not customer 20's, so nothing
    // lands for either.
    let plan = Plan::new(vec![stmt(
        "credit_both",
        "UPDATE customers SET credit = credit + 50 WHERE id IN (10, 20)",
        json!({}),
    )])
    .unwrap();
    let answer = send_at(&db, "e", &plan, &clock);
    assert!(matches!(answer, SendAnswer::Definite { .. }), "{answer:?}");
    assert_eq!(
        (credit(&path, 10), credit(&path, 20)),
        (900, 1_000),
        "the refused stage wrote nothing"
    );
}
