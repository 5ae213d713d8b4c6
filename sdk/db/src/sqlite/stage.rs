//! One stage on SQLite, start to end, in one `BEGIN IMMEDIATE` transaction: the write lock is
//! taken first, so the marker check, the premises, the statements and the measurement all see
//! one database that nobody else changes until `COMMIT` or `ROLLBACK`.
//!
//! The marker is what makes the stage exactly-once whatever the journal knows. It is checked
//! under the write lock before anything runs, and written in the same transaction as the rows:
//! a stage whose marker is there committed, once; one whose marker is not never did (SQLite
//! rolls an unfinished transaction back when its process dies). A second stage under the same
//! key — a retry, a recoverer, a zombie waking late — finds the marker and writes nothing.
//!
//! Every row a statement changes must be measured. The triggers record rows of observed tables;
//! SQLite counts every row changed, trigger programs included (`total_changes`). A statement
//! whose count is not exactly its measured rows plus the change records they wrote changed a
//! table nobody observes, and the stage is refused rather than judged on half a diff.

use std::collections::BTreeMap;

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OptionalExtension};
use serde_json::{Value, json};

use crate::checks::{Policy, Spent};
use crate::diff::{Change, Diff};
use crate::plan::{Premise, Statement};
use crate::receipt::Receipt;
use crate::stage_end::{self, Asked, Ended, Inside, Stop};

use super::guard;

/// Stage `plan` under `key`, judge it by `policy`, and commit it with its marker if it passes,
/// all before `until`: a stage that would begin or commit after it rolls back instead. The
/// gate lets a recoverer in only after a send's deadline, and a recoverer's lookup waits for the
/// write lock ([`read_marker_locked`]); so a stage that commits is one that held the lock
/// before any lookup could answer "absent", and a stage that begins after the lookup gives up.
pub(crate) fn stage(conn: &Connection, asked: Asked<'_>) -> Ended {
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        return Ended::Unknown(format!("could not begin the stage: {e}"));
    }
    let inside = stage_end::in_time(asked.until, || inside(conn, asked));
    stage_end::finish(
        asked.key,
        asked.plan_hash,
        inside,
        || {
            conn.execute_batch("COMMIT").map_err(|e| {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                e.to_string()
            })
        },
        || conn.execute_batch("ROLLBACK").is_ok() || conn.is_autocommit(),
    )
}

fn inside(conn: &Connection, asked: Asked<'_>) -> Result<Inside, Stop> {
    let Asked {
        key,
        plan,
        plan_hash,
        policy,
        until,
        look,
    } = asked;
    if let Some(receipt) = marker(conn, key)? {
        return Ok(Inside::Marked(receipt));
    }
    conn.execute(
        "INSERT INTO interlock_stage (one, key, statement) VALUES (1, ?1, NULL)",
        [key],
    )?;
    for p in &plan.premises {
        premise(conn, p)?;
    }
    for s in &plan.statements {
        run(conn, key, s)?;
    }
    let diff = measured(conn, key)?;
    // The write lock this transaction holds is the windows' lock: no other stage commits a use
    // of them between this read and this stage's own commit.
    let now_ms = until.now_ms();
    let spent = spent(conn, policy, &diff, now_ms)?;
    let verdict = stage_end::judged(key, plan, &diff, policy, &spent)?;
    stage_end::last_look(look)?;
    conn.execute("DELETE FROM interlock_changes WHERE stage = ?1", [key])?;
    conn.execute("DELETE FROM interlock_stage", [])?;
    for call in &plan.outbox {
        conn.execute(
            "INSERT INTO interlock_outbox (key, id, target, lease, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![key, call.id, call.target, call.lease, call.payload.to_string()],
        )?;
    }
    for w in &policy.windows {
        for (name, used) in w.uses(&diff).map_err(Stop::Db)? {
            if used > 0 {
                conn.execute(
                    "INSERT INTO interlock_spent (window_id, key, at_ms, amount) VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![name, key, now_ms, used],
                )?;
            }
        }
    }
    let receipt = Receipt::new(key, plan_hash, diff, verdict, policy);
    let text = serde_json::to_string(&receipt).map_err(|e| Stop::Db(e.to_string()))?;
    conn.execute(
        "INSERT INTO interlock_markers (key, plan_hash, diff_hash, receipt) VALUES (?1, ?2, ?3, ?4)",
        rusqlite::params![key, plan_hash, receipt.diff_hash, text],
    )?;
    Ok(Inside::Passed(receipt))
}

/// What the stages committed in each of the policy's windows used of it, as of `now_ms`, under
/// each name `diff` would use it by (a window `diff` cannot be judged by is left for the checks
/// to refuse).
fn spent(conn: &Connection, policy: &Policy, diff: &Diff, now_ms: i64) -> Result<Spent, Stop> {
    let mut spent = Spent::new();
    for w in &policy.windows {
        let since = now_ms.saturating_sub(i64::try_from(w.window_ms).unwrap_or(i64::MAX));
        for name in w.uses(diff).unwrap_or_default().into_keys() {
            let used: i64 = conn.query_row(
                "SELECT coalesce(sum(amount), 0) FROM interlock_spent WHERE window_id = ?1 AND at_ms > ?2",
                rusqlite::params![name, since],
                |r| r.get(0),
            )?;
            spent.insert(name, used);
        }
    }
    Ok(spent)
}

/// The receipt the marker under `key` holds, if there is one.
fn marker(conn: &Connection, key: &str) -> Result<Option<Receipt>, Stop> {
    let text: Option<String> = conn
        .query_row(
            "SELECT receipt FROM interlock_markers WHERE key = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| Stop::Db(format!("the marker of {key}: {e}")))
    })
    .transpose()
}

/// The marker's receipt: `Err` is the database's message.
pub(crate) fn read_marker(conn: &Connection, key: &str) -> Result<Option<Receipt>, String> {
    marker(conn, key).map_err(Stop::into_message)
}

/// The marker's receipt, read holding the write lock: a stage under way (even one whose process
/// is frozen) holds that lock until it commits or rolls back, so "absent" here means no stage
/// committed and none is still able to. A stage whose process died released the lock with it,
/// its transaction never committed.
pub(crate) fn read_marker_locked(conn: &Connection, key: &str) -> Result<Option<Receipt>, String> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| format!("could not take the write lock: {e}"))?;
    let found = read_marker(conn, key);
    if conn.execute_batch("ROLLBACK").is_err() && !conn.is_autocommit() {
        return Err("could not end the lookup's transaction".into());
    }
    found
}

/// Run `f` with the plan's authorizer installed ([`guard`]); a refusal of the authorizer's is
/// the answer, whatever `f` made of it.
fn guarded<T>(
    conn: &Connection,
    what: &str,
    f: impl FnOnce() -> Result<T, Stop>,
) -> Result<T, Stop> {
    let refusals = guard::install(conn);
    let out = f();
    guard::lift(conn);
    match refusals.first() {
        Some(why) => Err(Stop::Refuse(
            "bad_plan",
            format!("{what} is refused: {why}"),
        )),
        None => out,
    }
}

fn premise(conn: &Connection, p: &Premise) -> Result<(), Stop> {
    let got = guarded(conn, &format!("premise `{}`", p.name), || {
        let mut st = conn.prepare(&p.sql)?;
        bind(&mut st, &p.params)?;
        let names: Vec<String> = st.column_names().iter().map(|s| (*s).to_owned()).collect();
        let mut rows = st.raw_query();
        let mut got: Vec<BTreeMap<String, Value>> = Vec::new();
        while let Some(row) = rows.next()? {
            let mut out = BTreeMap::new();
            for (i, name) in names.iter().enumerate() {
                out.insert(name.clone(), json_of(row.get_ref(i)?));
            }
            got.push(out);
        }
        Ok(got)
    })?;
    stage_end::premise_holds(p, &got)
}

fn run(conn: &Connection, key: &str, s: &Statement) -> Result<(), Stop> {
    conn.execute("UPDATE interlock_stage SET statement = ?1", [&s.name])?;
    let before = conn.total_changes();
    guarded(conn, &format!("statement `{}`", s.name), || {
        let mut st = conn.prepare(&s.sql)?;
        bind(&mut st, &s.params)?;
        st.raw_execute()
            .map_err(|e| stage_end::statement_failed(&s.name, &e))?;
        Ok(())
    })?;
    let counted = conn.total_changes() - before;
    let measured: u64 = conn.query_row(
        "SELECT count(*) FROM interlock_changes WHERE stage = ?1 AND statement = ?2",
        [key, &s.name],
        |r| r.get(0),
    )?;
    // Each measured row is two changes: the row itself and its change record.
    if counted != 2 * measured {
        return Err(Stop::Refuse(
            "unobserved_table",
            format!(
                "statement `{}` changed rows the triggers did not all record: a table no trigger observes, or a row a conflict clause replaced; observe every table it (or a trigger) writes",
                s.name
            ),
        ));
    }
    Ok(())
}

fn bind(st: &mut rusqlite::Statement<'_>, params: &BTreeMap<String, Value>) -> Result<(), Stop> {
    // Every placeholder SQLite found must be one the plan names: one the lexer could not read
    // (`:é`) would otherwise bind NULL.
    for i in 1..=st.parameter_count() {
        let named = st
            .parameter_name(i)
            .and_then(|n| n.strip_prefix(':'))
            .is_some_and(|n| params.contains_key(n));
        if !named {
            return Err(Stop::Refuse(
                "bad_plan",
                format!(
                    "placeholder {} is not one of the plan's named parameters",
                    st.parameter_name(i).unwrap_or("?")
                ),
            ));
        }
    }
    for (name, v) in params {
        let Some(i) = st.parameter_index(&format!(":{name}"))? else {
            return Err(Stop::Refuse(
                "bad_plan",
                format!("parameter `{name}` is not in the statement"),
            ));
        };
        st.raw_bind_parameter(i, sql_of(v))?;
    }
    Ok(())
}

fn sql_of(v: &Value) -> SqlValue {
    match v {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Integer(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        // Refused when the plan was checked.
        Value::Array(_) | Value::Object(_) => SqlValue::Text(v.to_string()),
    }
}

fn json_of(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => json!(i),
        ValueRef::Real(f) => json!(f),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::String(b.iter().map(|x| format!("{x:02X}")).collect()),
    }
}

/// What the triggers recorded: under `stage`, or (`None`) outside any stage.
pub(crate) fn changes(conn: &Connection, stage: Option<&str>) -> Result<Vec<Change>, String> {
    let mut st = conn
        .prepare(
            "SELECT statement, tbl, op, before, after FROM interlock_changes WHERE stage IS ?1 ORDER BY seq",
        )
        .map_err(|e| e.to_string())?;
    let rows = st
        .query_map([stage], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
            ))
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| e.to_string())?;
    rows.into_iter()
        .map(|(statement, table, op, before, after)| {
            Change::from_stored(statement, table, &op, before, after)
        })
        .collect()
}

fn measured(conn: &Connection, key: &str) -> Result<Diff, Stop> {
    changes(conn, Some(key))
        .map(|changes| Diff { changes })
        .map_err(Stop::Db)
}
