//! One stage on PostgreSQL. Stages and lookups of one key queue on a session advisory lock
//! taken before the transaction begins, so the `REPEATABLE READ` snapshot the stage reads its
//! marker, premises and rows in is taken after any earlier stage of the key has ended. The lock
//! belongs to the session: it is released when the stage ends, and by the server when the
//! session dies with its client — whose transaction, never committed, is rolled back with it.
//!
//! Every statement runs under `statement_timeout` and `lock_timeout` set for what is left of the
//! send's time, re-set before each statement, so a stage cannot outlive its send; and it checks
//! the deadline once more before `COMMIT`. The marker is the rest of the argument, as on SQLite:
//! written in the stage's own transaction, read under the key's lock before anything runs. Both
//! go through the substrate's functions with the token the stage's opening handed this
//! transaction ([`super::install`]), so no statement of the plan can do either.
//!
//! Every row the plan changes must be measured: the server's own per-transaction counts of rows
//! inserted, updated and deleted in every user table (`pg_stat_xact_user_tables`), over the
//! premises and the statements together, must match the rows the triggers recorded for the
//! transaction, or something changed a table nobody observes and the stage is refused.

use std::collections::BTreeMap;
use std::time::Duration;

use super::session::Session as Client;
use postgres::error::SqlState;
use postgres::types::ToSql;
use serde_json::Value;

use super::bind;
use super::install::{KEY_ELSEWHERE, NOT_THE_OPENER};

use crate::checks::{Policy, Spent};
use crate::diff::{Change, Diff};
use crate::outbox::Request;
use crate::plan::{Premise, Statement};
use crate::receipt::Receipt;
use crate::sql_shape::{self, Place};
use crate::stage_end::{self, Asked, Ended, Inside, Stop, Until};

/// How long a reading of the substrate's (a lookup's marker, the outbox) may take.
const READ_WAIT: Duration = Duration::from_secs(10);

/// The advisory lock of a key: 64 bits of its hash (two keys sharing one only queue together).
const KEY_LOCK: &str = "pg_catalog.hashtextextended($1, 7263)";
/// The advisory lock of a window, hashed apart from the keys'.
const WINDOW_LOCK: &str = "pg_catalog.hashtextextended($1, 7264)";

/// Stage `plan` under `key` in the substrate's schema `s`, before `until`; with the ending,
/// why the session must be closed (its key lock may still be held), if it must.
pub(crate) fn stage(client: &mut Client, s: &str, asked: Asked<'_>) -> (Ended, Option<String>) {
    if let Err(e) = lock_key(client, asked.key, asked.until)
        .and_then(|()| lock_windows(client, asked.policy, asked.until))
    {
        let ended = Ended::Unknown(format!(
            "could not take the key's and its windows' locks: {e}"
        ));
        // A lock request cut off by its timeout holds nothing; one cut off by a broken
        // connection went with the session.
        return match unlock_key(client) {
            Ok(()) => (ended, None),
            Err(e) => (ended, Some(e)),
        };
    }
    let ended = in_transaction(client, s, asked);
    match unlock_key(client) {
        Ok(()) => (ended, None),
        Err(e) => (ended, Some(e)),
    }
}

/// End whatever the stage left ([`Client::end_stage`]). `Err`: the session must be closed.
fn unlock_key(client: &mut Client) -> Result<(), String> {
    client.end_stage().map_err(|e| e.to_string())
}

/// Both timeouts for the time left, for the transaction, as one statement (no parameters).
fn timeouts_sql(until: Until<'_>) -> String {
    let ms = timeout_ms(until);
    format!(
        "SELECT pg_catalog.set_config('statement_timeout', '{ms}', true), \
         pg_catalog.set_config('lock_timeout', '{ms}', true)"
    )
}

/// The time left in milliseconds, as the timeouts take it: at least 1 (zero would mean none),
/// at most INT_MAX (PostgreSQL's limit).
fn timeout_ms(until: Until<'_>) -> u128 {
    until.left().as_millis().clamp(1, i32::MAX as u128)
}

/// Both timeouts for the time left.
fn timeouts(client: &mut Client, until: Until<'_>, local: bool) -> Result<(), postgres::Error> {
    let ms = timeout_ms(until).to_string();
    let scope = if local { "true" } else { "false" };
    client.query_one(
        &format!(
            "SELECT pg_catalog.set_config('statement_timeout', $1, {scope}), \
             pg_catalog.set_config('lock_timeout', $1, {scope})"
        ),
        &[&ms],
    )?;
    Ok(())
}

/// Both timeouts for the time left and one setting of the stage's, for the transaction, in one
/// round trip.
fn timeouts_and(
    client: &mut Client,
    until: Until<'_>,
    name: &str,
    value: &str,
) -> Result<(), postgres::Error> {
    let ms = timeout_ms(until).to_string();
    client.query_one(
        "SELECT pg_catalog.set_config('statement_timeout', $1, true), \
         pg_catalog.set_config('lock_timeout', $1, true), pg_catalog.set_config($2, $3, true)",
        &[&ms, &name, &value],
    )?;
    Ok(())
}

fn lock_key(client: &mut Client, key: &str, until: Until<'_>) -> Result<(), String> {
    if until.passed() {
        return Err("the send's time was up before it began".into());
    }
    timeouts(client, until, false).map_err(|e| e.to_string())?;
    client
        .query_one(
            &format!("SELECT pg_catalog.pg_advisory_lock({KEY_LOCK})"),
            &[&key],
        )
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The policy's window ids, each once, in the one order their locks are taken in.
fn window_ids(policy: &Policy) -> Vec<&str> {
    let ids: std::collections::BTreeSet<&str> =
        policy.windows.iter().map(|w| w.id.as_str()).collect();
    ids.into_iter().collect()
}

/// Take the session locks of the policy's windows, in one order, after the key's: held from
/// before the transaction begins until the stage ends, so the snapshot the stage reads a
/// window's use in holds every stage that committed a use of it before this one, and none
/// commits one until this stage has. `open` takes them again for the transaction, which no
/// statement of the plan can release.
fn lock_windows(client: &mut Client, policy: &Policy, until: Until<'_>) -> Result<(), String> {
    for id in window_ids(policy) {
        if until.passed() {
            return Err("the send's time was up while it waited for its windows".into());
        }
        client
            .query_one(
                &format!("SELECT pg_catalog.pg_advisory_lock({WINDOW_LOCK})"),
                &[&id],
            )
            .map_err(|e| format!("window {id}: {e}"))?;
    }
    Ok(())
}

fn in_transaction(client: &mut Client, s: &str, asked: Asked<'_>) -> Ended {
    if let Err(e) = client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ") {
        return Ended::Unknown(format!("could not begin the stage: {e}"));
    }
    let inside = stage_end::in_time(asked.until, || inside(client, s, asked));
    let client = std::cell::RefCell::new(client);
    stage_end::finish(
        asked.key,
        asked.plan_hash,
        inside,
        || {
            client
                .borrow_mut()
                .batch_execute("COMMIT")
                .map_err(|e| e.to_string())
        },
        || client.borrow_mut().batch_execute("ROLLBACK").is_ok(),
    )
}

fn inside(client: &mut Client, s: &str, asked: Asked<'_>) -> Result<Inside, Stop> {
    let Asked {
        key,
        plan,
        plan_hash,
        policy,
        until,
        look,
    } = asked;
    // Bounded by the timeouts set for the time left as the key's lock was taken.
    let opened = open(client, s, key, &window_ids(policy))?;
    if let Some(receipt) = opened.receipt {
        return Ok(Inside::Marked(receipt));
    }
    // One window over the premises and the statements: a premise that writes through a function
    // is counted too.
    for p in &plan.premises {
        timeouts(client, until, true)?;
        premise(client, p)?;
    }
    for st in &plan.statements {
        timeouts_and(client, until, "interlock.statement", &st.name)?;
        run(client, st)?;
    }
    // A deferred trigger of the team's, which would otherwise fire at `COMMIT` after the
    // measurement, fires now — here, by the staging role (inside the substrate's functions it
    // would run with the installer's rights), under the timeouts set back for what is left.
    // Then what the statements or those triggers may have set for the rest of the transaction
    // is set back again: the timeouts, and a commit that returns before it is durable — the
    // server's own setting, unless that is `off` too: the marker must be durable before the
    // journal records the commit.
    let timeouts = timeouts_sql(until);
    client.batch_execute(&format!(
        "{timeouts}; SET CONSTRAINTS ALL IMMEDIATE; {timeouts}; \
         SET LOCAL synchronous_commit TO DEFAULT; \
         SELECT pg_catalog.set_config('synchronous_commit', 'on', true) \
         WHERE pg_catalog.current_setting('synchronous_commit') = 'off'"
    ))?;
    let (counted, changes) = measured(client, s, &opened.token)?;
    let diff = Diff { changes };
    if usize::try_from(counted - opened.counted).ok() != Some(diff.changes.len()) {
        return Err(Stop::Refuse(
            "unobserved_table",
            "the plan changed rows the triggers did not all record: a table no trigger observes; \
             observe every table its statements (or their triggers) write"
                .into(),
        ));
    }
    let now_ms = until.now_ms();
    let mut spent = Spent::new();
    for w in &policy.windows {
        let since = now_ms.saturating_sub(i64::try_from(w.window_ms).unwrap_or(i64::MAX));
        // A window the diff cannot be judged by is left for the checks to refuse.
        for name in w.uses(&diff).unwrap_or_default().into_keys() {
            let used: i64 = client
                .query_one(
                    &format!("SELECT {s}.spent($1::pg_catalog.text::pg_catalog.uuid, $2, $3, $4)"),
                    &[&opened.token, &w.id, &name, &since],
                )
                .map_err(stage_lost)?
                .get(0);
            spent.insert(name, used);
        }
    }
    let verdict = stage_end::judged(key, plan, &diff, policy, &spent)?;
    stage_end::last_look(look)?;
    let mut uses = Vec::new();
    for w in &policy.windows {
        for (name, used) in w.uses(&diff).map_err(Stop::Db)? {
            if used > 0 {
                uses.push(serde_json::json!({ "window": name, "at_ms": now_ms, "amount": used }));
            }
        }
    }
    let uses = Value::Array(uses).to_string();
    let receipt = Receipt::new(key, plan_hash, diff, verdict, policy);
    let text = serde_json::to_string(&receipt).map_err(|e| Stop::Db(e.to_string()))?;
    let outbox: Vec<Value> = plan
        .outbox
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id, "target": c.target, "lease": c.lease, "payload": c.payload.to_string(),
            })
        })
        .collect();
    let outbox = Value::Array(outbox).to_string();
    client
        .execute(
            &format!(
                "SELECT {s}.seal($1::pg_catalog.text::pg_catalog.uuid, $2, $3, $4, \
                 $5::pg_catalog.text::pg_catalog.jsonb, $6::pg_catalog.text::pg_catalog.jsonb)"
            ),
            &[
                &opened.token,
                &plan_hash,
                &receipt.diff_hash,
                &text,
                &outbox,
                &uses,
            ],
        )
        .map_err(stage_lost)?;
    Ok(Inside::Passed(receipt))
}

/// The stage this transaction opened.
struct Opened {
    /// What only the opener holds: the substrate's functions refuse any call without it.
    token: String,
    /// The key's marker, if a stage of it already committed.
    receipt: Option<Receipt>,
    /// Rows the server had counted in the transaction when the stage opened.
    counted: i64,
}

/// Open the transaction's stage under `key`.
fn open(client: &mut Client, s: &str, key: &str, windows: &[&str]) -> Result<Opened, Stop> {
    // The proof is good for this transaction only: one seen in a log opens nothing later.
    let xid: String = client
        .query_one("SELECT pg_catalog.pg_current_xact_id()::text", &[])?
        .get(0);
    let proof = client.proof(&xid, key);
    let row = client
        .query_one(
            &format!(
                "SELECT o_token::pg_catalog.text, o_receipt, o_counted FROM {s}.open($1, $2, $3)"
            ),
            &[&key, &windows, &proof],
        )
        .map_err(|e| {
            if e.code().map(SqlState::code) == Some(KEY_ELSEWHERE) {
                Stop::Again(stage_end::described(&e))
            } else {
                Stop::from(e)
            }
        })?;
    let receipt = row
        .get::<_, Option<String>>(1)
        .map(|text| {
            serde_json::from_str(&text).map_err(|e| Stop::Db(format!("the marker of {key}: {e}")))
        })
        .transpose()?;
    Ok(Opened {
        token: row.get(0),
        receipt,
        counted: row.get(2),
    })
}

/// A failure of the substrate's call by the stage's own token: the transaction that opened the
/// stage is no longer the one running — a statement must have ended it, and what it ended
/// with (a commit?) is not known. Anything else is the database failing the call.
fn stage_lost(e: postgres::Error) -> Stop {
    if e.code().map(SqlState::code) == Some(NOT_THE_OPENER) {
        Stop::Unsure(format!(
            "the stage's transaction ended under it ({}); whether its rows committed is not known",
            stage_end::described(&e)
        ))
    } else {
        Stop::from(e)
    }
}

/// The rows the server counted in the transaction so far, and what the triggers recorded in it.
fn measured(client: &mut Client, s: &str, token: &str) -> Result<(i64, Vec<Change>), Stop> {
    let rows = client
        .query(
            &format!(
                "SELECT o_counted, o_statement, o_tbl, o_op, o_before, o_after FROM {s}.measured($1::pg_catalog.text::pg_catalog.uuid)"
            ),
            &[&token],
        )
        .map_err(stage_lost)?;
    let counted = rows.first().map_or(0, |r| r.get(0));
    let changes = rows
        .iter()
        .filter_map(|r| {
            let table: Option<String> = r.get(2);
            let op: Option<String> = r.get(3);
            Some(Change::from_stored(
                r.get(1),
                table?,
                &op?,
                r.get(4),
                r.get(5),
            ))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(Stop::Db)?;
    Ok((counted, changes))
}

/// `f` in a transaction of its own with a stage opened under `key`, rolled back after unless `f`
/// commits it: how the substrate reads (and marks) what only a stage's opener may.
///
/// A lookup, which takes the key's lock before it begins, reads in `REPEATABLE READ`; the
/// outbox's reads and marks (`key` empty) in `READ COMMITTED`, so a mark that follows another
/// relay's mark of the same call finds it marked, rather than failing to serialize. Every
/// statement is bounded by `wait`.
fn read_in_stage<T>(
    client: &mut Client,
    s: &str,
    key: &str,
    f: impl FnOnce(&mut Client, Opened) -> Result<T, Stop>,
) -> Result<T, String> {
    let isolation = if key.is_empty() {
        "READ COMMITTED"
    } else {
        "REPEATABLE READ"
    };
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL {isolation}; {}",
            timeouts_sql(Until::after(READ_WAIT))
        ))
        .map_err(|e| e.to_string())?;
    let out = open(client, s, key, &[]).and_then(|opened| f(client, opened));
    // The session ends the transaction in any case ([`Client::end_stage`]).
    out.map_err(Stop::into_message)
}

/// The marker, read holding the key's lock: a stage of the key under way — even one whose
/// client is frozen — holds it until its transaction ends, so "absent" means no stage committed
/// and none begun before this lookup still can. `wait` bounds the wait for the lock.
pub(crate) fn read_marker_locked(
    client: &mut Client,
    s: &str,
    key: &str,
    wait: Duration,
) -> Result<Option<Receipt>, String> {
    if let Err(e) = lock_key(client, key, Until::after(wait)) {
        let _ = unlock_key(client);
        return Err(format!("could not take the key's lock: {e}"));
    }
    let found = read_in_stage(client, s, key, |_, opened| Ok(opened.receipt));
    unlock_key(client).map_err(|e| format!("could not release the key's lock: {e}"))?;
    found
}

/// Outbox calls not yet delivered, oldest first, at most `limit`.
pub(crate) fn pending(
    client: &mut Client,
    s: &str,
    source: &str,
    after: i64,
    limit: i32,
) -> Result<Vec<Request>, String> {
    let found = read_in_stage(client, s, "", |client, opened| {
        let rows = client.query(
            &format!(
                "SELECT o_seq, o_key, o_id, o_target, o_lease, o_payload FROM {s}.pending($1::pg_catalog.text::pg_catalog.uuid, $2, $3)"
            ),
            &[&opened.token, &after, &limit],
        )?;
        rows.iter()
            .map(|r| {
                let payload: String = r.get(5);
                Ok(Request {
                    source: source.to_owned(),
                    seq: r.get(0),
                    plan_key: r.get(1),
                    id: r.get(2),
                    target: r.get(3),
                    lease: r.get(4),
                    payload: serde_json::from_str(&payload)
                        .map_err(|e| Stop::Db(format!("an outbox call's payload: {e}")))?,
                })
            })
            .collect()
    });
    unlock_key(client).map_err(|e| format!("could not end the reading: {e}"))?;
    found
}

/// Mark an outbox call delivered, in a transaction of its own.
pub(crate) fn delivered(
    client: &mut Client,
    s: &str,
    request: &Request,
    outcome: &str,
) -> Result<(), String> {
    let done = read_in_stage(client, s, "", |client, opened| {
        client.execute(
            &format!("SELECT {s}.delivered($1::pg_catalog.text::pg_catalog.uuid, $2, $3, $4)"),
            &[&opened.token, &request.plan_key, &request.id, &outcome],
        )?;
        client.batch_execute("COMMIT")?;
        Ok(())
    });
    unlock_key(client).map_err(|e| format!("could not end the marking: {e}"))?;
    done
}

/// Claim an outbox call for the relay of journal `relay`, in a transaction of its own: the
/// journal that holds it.
pub(crate) fn claim(
    client: &mut Client,
    s: &str,
    request: &Request,
    relay: &str,
) -> Result<String, String> {
    let done = read_in_stage(client, s, "", |client, opened| {
        let row = client.query_one(
            &format!("SELECT {s}.claim($1::pg_catalog.text::pg_catalog.uuid, $2, $3, $4)"),
            &[&opened.token, &request.plan_key, &request.id, &relay],
        )?;
        client.batch_execute("COMMIT")?;
        Ok(row.get::<_, String>(0))
    });
    unlock_key(client).map_err(|e| format!("could not end the claim: {e}"))?;
    done
}

/// The key of every marker.
pub(crate) fn marker_keys(client: &mut Client, s: &str) -> Result<Vec<String>, String> {
    let found = read_in_stage(client, s, "", |client, opened| {
        let rows = client.query(
            &format!("SELECT o_key FROM {s}.marked($1::pg_catalog.text::pg_catalog.uuid)"),
            &[&opened.token],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    });
    unlock_key(client).map_err(|e| format!("could not end the reading: {e}"))?;
    found
}

/// What the triggers recorded outside any stage, oldest first.
pub(crate) fn unmediated(client: &mut Client, s: &str) -> Result<Vec<Change>, String> {
    let found = read_in_stage(client, s, "", |client, opened| {
        let rows = client.query(
            &format!(
                "SELECT o_statement, o_tbl, o_op, o_before, o_after FROM {s}.unmediated($1::pg_catalog.text::pg_catalog.uuid)"
            ),
            &[&opened.token],
        )?;
        rows.iter()
            .map(|r| {
                let op: String = r.get(2);
                Change::from_stored(r.get(0), r.get(1), &op, r.get(3), r.get(4))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(Stop::Db)
    });
    unlock_key(client).map_err(|e| format!("could not end the reading: {e}"))?;
    found
}

fn bound_values(
    client: &mut Client,
    sql: &str,
    params: &BTreeMap<String, Value>,
    place: Place,
    what: &str,
) -> Result<(postgres::Statement, Vec<Box<dyn ToSql + Sync>>), Stop> {
    let (numbered, names) =
        sql_shape::numbered(sql, place).map_err(|e| Stop::Refuse("bad_plan", e.to_string()))?;
    let st = client.prepare_once(&numbered)?;
    let mut values = Vec::with_capacity(names.len());
    for (name, ty) in names.iter().zip(st.params()) {
        let v = params.get(name).unwrap_or(&Value::Null);
        values.push(bind::value_for(v, ty).map_err(|why| {
            Stop::Refuse("bad_plan", format!("{what}, parameter `{name}`: {why}"))
        })?);
    }
    Ok((st, values))
}

fn refs(values: &[Box<dyn ToSql + Sync>]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|b| b.as_ref()).collect()
}

fn premise(client: &mut Client, p: &Premise) -> Result<(), Stop> {
    let what = format!("premise `{}`", p.name);
    let (st, values) = bound_values(client, &p.sql, &p.params, Place::Premise, &what)?;
    // Each row as JSON, by the server: the same values the plan's author read.
    let rows = client.query_prepared(&st, &refs(&values))?;
    let mut got: Vec<BTreeMap<String, Value>> = Vec::with_capacity(rows.len());
    for row in rows {
        let mut out = BTreeMap::new();
        for (i, col) in row.columns().iter().enumerate() {
            out.insert(col.name().to_owned(), json_cell(&row, i, col.type_())?);
        }
        got.push(out);
    }
    stage_end::premise_holds(p, &got)
}

/// One cell as JSON, for the types a premise compares; others are refused by name.
fn json_cell(row: &postgres::Row, i: usize, ty: &postgres::types::Type) -> Result<Value, Stop> {
    use postgres::types::Type;
    let v = match *ty {
        Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(Value::from),
        Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(Value::from),
        Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(Value::from),
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::from),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::from),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            row.try_get::<_, Option<String>>(i)?.map(Value::from)
        }
        _ => {
            return Err(Stop::Refuse(
                "bad_plan",
                format!(
                    "a premise's column `{}` is of type {ty}; select it as text (`::text`)",
                    row.columns()[i].name()
                ),
            ));
        }
    };
    Ok(v.unwrap_or(Value::Null))
}

fn run(client: &mut Client, st: &Statement) -> Result<(), Stop> {
    let what = format!("statement `{}`", st.name);
    let (prepared, values) = bound_values(client, &st.sql, &st.params, Place::Change, &what)?;
    client
        .execute_prepared(&prepared, &refs(&values))
        .map_err(|e| stage_end::statement_failed(&st.name, &stage_end::described(&e)))?;
    Ok(())
}
