//! What the PostgreSQL substrate installs, and the line it draws between a plan and the
//! substrate. Everything lives in a schema of its own that no role but its owner can read or
//! write: the markers, the outbox, the windows' use, the change records and the open stages. The role a target
//! connects as reaches them only through functions that run with the owner's rights, and all but
//! the first do nothing without the token `open` handed to the transaction that opened the
//! stage — a token a plan's statements never see, because a transaction can open only one stage
//! and the target opens it before any statement runs. So a plan, whatever SQL it reaches, cannot
//! read a marker, write one, or touch a change record or the outbox: the server's privileges stop
//! it, not the text.
//!
//! Change records are labelled with the writing transaction's id, which nothing a statement can
//! set changes; the trigger function runs with its owner's rights, so a write by any role is
//! recorded, and roles that write the team's tables need no grant on the substrate. A record no
//! stage took up when it committed is a write nobody mediated.

use postgres::Client;

use crate::error::DbError;
use crate::plan::is_plain_name;

/// SQLSTATE of a call without its transaction's stage token, or a second stage in one
/// transaction.
pub(crate) const NOT_THE_OPENER: &str = "IL002";
/// SQLSTATE of a server that does not count the rows a transaction changes (`track_counts`).
const NOT_COUNTING: &str = "IL003";
/// SQLSTATE of `open` finding the key held by another server session though the calling
/// session took it.
pub(crate) const KEY_ELSEWHERE: &str = "IL004";
/// SQLSTATE of `open` called without the proof the stage key makes.
pub(crate) const NO_PROOF: &str = "IL005";
/// SQLSTATE of `seal` handed a window use below zero.
pub(crate) const NEGATIVE_USE: &str = "IL006";

/// The functions a target's role is granted, with their argument types.
pub(crate) const ENTRY_POINTS: [&str; 9] = [
    "open(text, text[], text)",
    "measured(uuid)",
    "spent(uuid, text, text, bigint)",
    "seal(uuid, text, text, text, jsonb, jsonb)",
    "unmediated(uuid)",
    "pending(uuid, bigint, integer)",
    "delivered(uuid, text, text, text)",
    "claim(uuid, text, text, text)",
    "marked(uuid)",
];

/// The substrate's tables and functions, in schema `s`.
fn tables(s: &str) -> String {
    let definer = "SECURITY DEFINER SET search_path = pg_catalog, pg_temp";
    format!(
        "
CREATE SCHEMA IF NOT EXISTS {s};
REVOKE ALL ON SCHEMA {s} FROM PUBLIC;
CREATE TABLE IF NOT EXISTS {s}.markers (
    key       TEXT PRIMARY KEY,
    plan_hash TEXT NOT NULL,
    diff_hash TEXT NOT NULL,
    receipt   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.changes (
    seq       BIGSERIAL PRIMARY KEY,
    xid       xid8,
    statement TEXT,
    tbl       TEXT NOT NULL,
    op        TEXT NOT NULL,
    before    JSONB,
    after     JSONB
);
ALTER TABLE {s}.changes ADD COLUMN IF NOT EXISTS xid xid8;
ALTER TABLE {s}.changes DROP COLUMN IF EXISTS stage;
CREATE INDEX IF NOT EXISTS changes_xid ON {s}.changes (xid);
CREATE TABLE IF NOT EXISTS {s}.stages (
    xid   xid8 PRIMARY KEY,
    key   TEXT NOT NULL,
    token UUID NOT NULL
);
-- The windows a stage locked when it opened: the only ones it may read or record a use of.
ALTER TABLE {s}.stages ADD COLUMN IF NOT EXISTS windows TEXT[] NOT NULL DEFAULT '{{}}';
CREATE TABLE IF NOT EXISTS {s}.outbox (
    seq     BIGSERIAL PRIMARY KEY,
    key     TEXT NOT NULL,
    id      TEXT NOT NULL,
    target  TEXT NOT NULL,
    lease   TEXT NOT NULL,
    payload TEXT NOT NULL,
    outcome TEXT,
    UNIQUE (key, id)
);
CREATE INDEX IF NOT EXISTS outbox_pending ON {s}.outbox (seq) WHERE outcome IS NULL;
CREATE TABLE IF NOT EXISTS {s}.outbox_relays (
    key   TEXT NOT NULL,
    id    TEXT NOT NULL,
    relay TEXT NOT NULL,
    PRIMARY KEY (key, id)
);
CREATE TABLE IF NOT EXISTS {s}.spent (
    window_id TEXT NOT NULL,
    key       TEXT NOT NULL,
    at_ms     BIGINT NOT NULL,
    amount    BIGINT NOT NULL,
    PRIMARY KEY (window_id, key)
);
CREATE INDEX IF NOT EXISTS spent_at ON {s}.spent (window_id, at_ms);
DROP FUNCTION IF EXISTS {s}.seal(uuid, text, text, text);
DROP FUNCTION IF EXISTS {s}.spent(uuid, text, bigint);
DROP FUNCTION IF EXISTS {s}.open(text);
DROP FUNCTION IF EXISTS {s}.open(text, text[]);
-- The stage key: a secret the installer hands the gate, which no role that stages can read. A
-- stage opens only with a proof made with it, so the stager's credentials alone cannot open
-- one (and then seal a marker, outbox calls or window uses no plan of the gate's asked for).
CREATE TABLE IF NOT EXISTS {s}.stage_key (
    one    INT PRIMARY KEY CHECK (one = 1),
    secret BYTEA NOT NULL CHECK (pg_catalog.length(secret) = 32)
);
INSERT INTO {s}.stage_key (one, secret)
SELECT 1, pg_catalog.decode(pg_catalog.replace(
           pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text, '-', ''), 'hex')
ON CONFLICT (one) DO NOTHING;
DROP FUNCTION IF EXISTS {s}.seal(uuid, text, text, text, jsonb);
REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM PUBLIC;

-- Row images in one form whatever the writer's session set.
CREATE OR REPLACE FUNCTION {s}.record_change() RETURNS trigger
LANGUAGE plpgsql {definer}
SET extra_float_digits = 3 SET TimeZone = 'UTC' SET bytea_output = 'hex'
SET IntervalStyle = 'postgres' SET lc_monetary = 'C' AS $fn$
BEGIN
    INSERT INTO {s}.changes (xid, statement, tbl, op, before, after)
    VALUES (
        pg_current_xact_id(),
        NULLIF(current_setting('interlock.statement', true), ''),
        TG_TABLE_NAME,
        lower(TG_OP),
        CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN to_jsonb(OLD) END,
        CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN to_jsonb(NEW) END
    );
    RETURN NULL;
END
$fn$;

-- Rows this transaction has inserted, updated and deleted in every user table but the
-- substrate's: what pg_stat_xact_user_tables sums, read without the view's other columns, over
-- the objects created after the cluster's own (their ids start at 16384, wrapped or not). In
-- PL/pgSQL, whose plans a session keeps: planning a catalog query costs more than running it.
CREATE OR REPLACE FUNCTION {s}.counted() RETURNS bigint
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
BEGIN
    IF current_setting('track_counts') <> 'on' THEN
        RAISE EXCEPTION 'interlock: the server does not count rows changed (track_counts is off), so a stage cannot be measured; turn it on'
            USING ERRCODE = '{NOT_COUNTING}';
    END IF;
    RETURN (
        SELECT coalesce(sum(pg_stat_get_xact_tuples_inserted(c.oid)
                          + pg_stat_get_xact_tuples_updated(c.oid)
                          + pg_stat_get_xact_tuples_deleted(c.oid)), 0)::bigint
          FROM pg_class c
         WHERE c.oid >= 16384 AND c.relkind IN ('r', 'm', 'p')
           AND c.relnamespace <> '{s}'::regnamespace
    );
END
$fn$;

-- HMAC-SHA-256 of `m` under the 32-byte key `k` (RFC 2104), from the server's own sha256.
CREATE OR REPLACE FUNCTION {s}.hmac(k bytea, m bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE {definer} AS $fn$
DECLARE
    inner_pad bytea := pg_catalog.decode(pg_catalog.repeat('36', 64), 'hex');
    outer_pad bytea := pg_catalog.decode(pg_catalog.repeat('5c', 64), 'hex');
    i int;
BEGIN
    FOR i IN 0 .. pg_catalog.length(k) - 1 LOOP
        inner_pad := pg_catalog.set_byte(inner_pad, i, pg_catalog.get_byte(k, i) # 54);
        outer_pad := pg_catalog.set_byte(outer_pad, i, pg_catalog.get_byte(k, i) # 92);
    END LOOP;
    RETURN pg_catalog.sha256(outer_pad || pg_catalog.sha256(inner_pad || m));
END
$fn$;

-- The transaction's id is read into a variable before any lookup by it: the function is
-- volatile, and a condition on it could not use the index.

-- The key of this transaction's stage, if `p_token` is its token; otherwise an error.
CREATE OR REPLACE FUNCTION {s}.opened(p_token uuid) RETURNS text
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
DECLARE
    x xid8 := pg_current_xact_id();
    k text;
BEGIN
    SELECT st.key INTO k FROM {s}.stages st WHERE st.xid = x AND st.token = p_token;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'interlock: only the transaction that opened a stage, with its token, may do this'
            USING ERRCODE = '{NOT_THE_OPENER}';
    END IF;
    RETURN k;
END
$fn$;

-- Open this transaction's one stage under `p_key`: its token, the key's marker (or null) and
-- the rows counted so far. The key's lock is taken again for the transaction, a hold no
-- statement can release, so no lookup of the key can answer until the transaction has ended.
-- The session already holds it, so it is granted at once; if it is not, the session's hold is
-- on another server session (a pooler that moves transactions between sessions), this
-- transaction's snapshot may predate a commit of the key, and the call refuses rather than
-- wait and read a stale marker. The locks of the windows `p_windows` the stage will read are
-- taken again for the transaction the same way: a plan that releases the session's locks
-- cannot let another stage read and use a window while this one has not committed its use.
-- `p_proof` is the hex HMAC-SHA-256 of `interlock-stage-v2:`, this transaction's id, `:` and the
-- key, under the stage key: without it no stage opens, and a proof is good for one transaction.
CREATE OR REPLACE FUNCTION {s}.open(p_key text, p_windows text[], p_proof text, OUT o_token uuid, OUT o_receipt text, OUT o_counted bigint)
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
DECLARE
    x xid8 := pg_current_xact_id();
    wanted text;
BEGIN
    SELECT pg_catalog.encode({s}.hmac(k.secret, pg_catalog.convert_to('interlock-stage-v2:' || x::text || ':' || p_key, 'UTF8')), 'hex')
      INTO wanted FROM {s}.stage_key k;
    IF wanted IS NULL OR p_proof IS DISTINCT FROM wanted THEN
        RAISE EXCEPTION 'interlock: a stage opens only with a proof made with the substrate''s stage key, which this call does not carry'
            USING ERRCODE = '{NO_PROOF}';
    END IF;
    IF EXISTS (SELECT 1 FROM {s}.stages st WHERE st.xid = x) THEN
        RAISE EXCEPTION 'interlock: this transaction has already opened a stage'
            USING ERRCODE = '{NOT_THE_OPENER}';
    END IF;
    IF p_key = '' THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 7263));
    ELSIF NOT pg_try_advisory_xact_lock(hashtextextended(p_key, 7263)) THEN
        RAISE EXCEPTION 'interlock: the key is held by another server session though this session took it: is a pooler moving transactions between sessions?'
            USING ERRCODE = '{KEY_ELSEWHERE}';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(p_windows) AS w
                WHERE NOT pg_try_advisory_xact_lock(hashtextextended(w, 7264))) THEN
        RAISE EXCEPTION 'interlock: a window''s lock is held by another server session though this session took it'
            USING ERRCODE = '{KEY_ELSEWHERE}';
    END IF;
    o_token := gen_random_uuid();
    INSERT INTO {s}.stages (xid, key, token, windows) VALUES (x, p_key, o_token, p_windows);
    SELECT m.receipt INTO o_receipt FROM {s}.markers m WHERE m.key = p_key;
    o_counted := {s}.counted();
END
$fn$;

-- The rows counted so far, and what the triggers recorded in this transaction: one row with
-- no change when they recorded nothing.
CREATE OR REPLACE FUNCTION {s}.measured(p_token uuid)
RETURNS TABLE (o_counted bigint, o_statement text, o_tbl text, o_op text, o_before text, o_after text)
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
DECLARE
    x xid8 := pg_current_xact_id();
    n bigint;
BEGIN
    PERFORM {s}.opened(p_token);
    n := {s}.counted();
    RETURN QUERY
        SELECT n, c.statement, c.tbl, c.op, c.before::text, c.after::text
          FROM (SELECT 1) AS one
          LEFT JOIN {s}.changes c ON c.xid = x
         ORDER BY c.seq;
END
$fn$;

-- What the stages committed since `p_since` (ms since the Unix epoch) used of window
-- `p_window`, under `p_use`: the window's name, or `<window>@<value>` for one value of a window
-- counted per value. The caller holds the window's session lock, taken before its transaction
-- began, so every stage that used the window, for any value, before this one is in its snapshot.
CREATE OR REPLACE FUNCTION {s}.spent(p_token uuid, p_window text, p_use text, p_since bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
BEGIN
    PERFORM {s}.opened(p_token);
    IF NOT EXISTS (SELECT 1 FROM {s}.stages st
                    WHERE st.xid = pg_current_xact_id() AND p_window = ANY (st.windows)) THEN
        RAISE EXCEPTION 'interlock: window % was not opened with the stage', p_window
            USING ERRCODE = '{KEY_ELSEWHERE}';
    END IF;
    IF p_use IS DISTINCT FROM p_window AND left(p_use, length(p_window) + 1) IS DISTINCT FROM p_window || '@' THEN
        RAISE EXCEPTION 'interlock: % is not a use of window %', p_use, p_window
            USING ERRCODE = '{KEY_ELSEWHERE}';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended(p_window, 7264)) THEN
        RAISE EXCEPTION 'interlock: window % was not locked when the stage opened', p_window
            USING ERRCODE = '{KEY_ELSEWHERE}';
    END IF;
    RETURN (SELECT coalesce(sum(u.amount), 0)::bigint FROM {s}.spent u
             WHERE u.window_id = p_use AND u.at_ms > p_since);
END
$fn$;

-- Write the stage's marker, its plan's outbox calls (`p_outbox`: a JSON array of objects with
-- `id`, `target`, `lease` and `payload`, the payload as JSON text) and what it used of the
-- policy's windows (`p_spent`: a JSON array of objects with `window`, `at_ms` and `amount`),
-- and take up its change records; the stage is then closed.
CREATE OR REPLACE FUNCTION {s}.seal(p_token uuid, p_plan_hash text, p_diff_hash text, p_receipt text, p_outbox jsonb, p_spent jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
DECLARE
    x xid8 := pg_current_xact_id();
    k text := {s}.opened(p_token);
BEGIN
    -- Only a plan's stage seals, and a plan has a key; the keyless stages read and relay.
    IF k = '' THEN
        RAISE EXCEPTION 'interlock: a stage opened without a key seals nothing'
            USING ERRCODE = '{NOT_THE_OPENER}';
    END IF;
    -- A use is what a stage's rows moved, gross: never below nothing, so no use can make room.
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_spent) AS u
                WHERE (u->>'amount')::bigint IS NULL OR (u->>'amount')::bigint < 0) THEN
        RAISE EXCEPTION 'interlock: a window''s use is never negative'
            USING ERRCODE = '{NEGATIVE_USE}';
    END IF;
    -- A use only of a window the stage locked when it opened, under its name or `<window>@…`.
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_spent) AS u
                WHERE NOT EXISTS (SELECT 1 FROM {s}.stages st
                                   WHERE st.xid = x
                                     AND pg_catalog.split_part(u->>'window', '@', 1) = ANY (st.windows))) THEN
        RAISE EXCEPTION 'interlock: a use of a window the stage did not open'
            USING ERRCODE = '{NOT_THE_OPENER}';
    END IF;
    DELETE FROM {s}.changes WHERE xid = x;
    DELETE FROM {s}.stages WHERE xid = x;
    INSERT INTO {s}.spent (window_id, key, at_ms, amount)
    SELECT u->>'window', k, (u->>'at_ms')::bigint, (u->>'amount')::bigint
      FROM jsonb_array_elements(p_spent) AS u;
    INSERT INTO {s}.outbox (key, id, target, lease, payload)
    SELECT k, o->>'id', o->>'target', o->>'lease', o->>'payload'
      FROM jsonb_array_elements(p_outbox) AS o;
    INSERT INTO {s}.markers (key, plan_hash, diff_hash, receipt)
    VALUES (k, p_plan_hash, p_diff_hash, p_receipt);
END
$fn$;

-- The key of every marker.
CREATE OR REPLACE FUNCTION {s}.marked(p_token uuid)
RETURNS TABLE (o_key text)
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
BEGIN
    PERFORM {s}.opened(p_token);
    RETURN QUERY SELECT m.key FROM {s}.markers m ORDER BY m.key;
END
$fn$;

-- Outbox calls not yet delivered whose place is after `p_after`, in order.
CREATE OR REPLACE FUNCTION {s}.pending(p_token uuid, p_after bigint, p_limit integer)
RETURNS TABLE (o_seq bigint, o_key text, o_id text, o_target text, o_lease text, o_payload text)
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
BEGIN
    PERFORM {s}.opened(p_token);
    RETURN QUERY
        SELECT b.seq, b.key, b.id, b.target, b.lease, b.payload FROM {s}.outbox b
         WHERE b.outcome IS NULL AND b.seq > p_after ORDER BY b.seq LIMIT p_limit;
END
$fn$;

-- Mark an outbox call delivered with its final outcome; the stage is then closed, so the
-- transaction may commit.
CREATE OR REPLACE FUNCTION {s}.delivered(p_token uuid, p_key text, p_id text, p_outcome text)
RETURNS void
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
DECLARE
    x xid8 := pg_current_xact_id();
BEGIN
    PERFORM {s}.opened(p_token);
    UPDATE {s}.outbox SET outcome = p_outcome
     WHERE key = p_key AND id = p_id AND outcome IS NULL;
    DELETE FROM {s}.stages WHERE xid = x;
END
$fn$;

-- Claim an outbox call for the relay of journal `p_relay`: the first claim stands for good.
-- Returns the journal that holds it. The stage is then closed, so the transaction may commit.
CREATE OR REPLACE FUNCTION {s}.claim(p_token uuid, p_key text, p_id text, p_relay text)
RETURNS text
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
DECLARE
    x xid8 := pg_current_xact_id();
    holder text;
BEGIN
    PERFORM {s}.opened(p_token);
    INSERT INTO {s}.outbox_relays (key, id, relay) VALUES (p_key, p_id, p_relay)
        ON CONFLICT (key, id) DO NOTHING;
    SELECT r.relay INTO holder FROM {s}.outbox_relays r WHERE r.key = p_key AND r.id = p_id;
    DELETE FROM {s}.stages WHERE xid = x;
    RETURN holder;
END
$fn$;

-- What the triggers recorded outside any stage, oldest first.
CREATE OR REPLACE FUNCTION {s}.unmediated(p_token uuid)
RETURNS TABLE (o_statement text, o_tbl text, o_op text, o_before text, o_after text)
LANGUAGE plpgsql VOLATILE {definer} AS $fn$
BEGIN
    PERFORM {s}.opened(p_token);
    RETURN QUERY
        SELECT c.statement, c.tbl, c.op, c.before::text, c.after::text
          FROM {s}.changes c
         WHERE c.xid IS DISTINCT FROM pg_current_xact_id()
         ORDER BY c.seq;
END
$fn$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {s} FROM PUBLIC;
"
    )
}

/// Install (or re-install) the substrate in schema `schema` and observe `tables` (found by the
/// connection's `search_path`), in one transaction. The connecting role owns what is installed;
/// grant a target's role its way in with [`allow`]. Returns the substrate's stage key (hex),
/// made at the first install and kept by every later one: give it to the gate
/// ([`super::PgDbOptions::stage_key`], or `INTERLOCK_DB_STAGE_KEY`), and to no role that stages.
pub fn install(
    client: &mut Client,
    schema: &str,
    tables_to_observe: &[&str],
) -> Result<String, DbError> {
    super::check_schema(schema)?;
    let mut tx = client
        .transaction()
        .map_err(|e| DbError::postgres("install", e))?;
    tx.batch_execute(&tables(schema))
        .map_err(|e| DbError::postgres("install", e))?;
    for table in tables_to_observe {
        if !is_plain_name(table) {
            return Err(DbError::BadTable {
                table: (*table).to_owned(),
                why: "observe a table of your own, named with letters, digits and `_`",
            });
        }
        let exists: bool = tx
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[table])
            .map_err(|e| DbError::postgres("install", e))?
            .get(0);
        if !exists {
            return Err(DbError::BadTable {
                table: (*table).to_owned(),
                why: "no such table on this connection's search_path",
            });
        }
        tx.batch_execute(&format!(
            "DROP TRIGGER IF EXISTS interlock_observe ON \"{table}\";
             CREATE TRIGGER interlock_observe AFTER INSERT OR UPDATE OR DELETE ON \"{table}\"
                 FOR EACH ROW EXECUTE FUNCTION {schema}.record_change();"
        ))
        .map_err(|e| DbError::postgres("install", e))?;
    }
    let key = read_stage_key(&mut tx, schema)?;
    tx.commit().map_err(|e| DbError::postgres("install", e))?;
    Ok(key)
}

/// The substrate's stage key (hex), read by the role that installed it.
pub fn stage_key(client: &mut Client, schema: &str) -> Result<String, DbError> {
    super::check_schema(schema)?;
    let mut tx = client
        .transaction()
        .map_err(|e| DbError::postgres("read the stage key", e))?;
    read_stage_key(&mut tx, schema)
}

fn read_stage_key(tx: &mut postgres::Transaction<'_>, schema: &str) -> Result<String, DbError> {
    tx.query_one(
        &format!("SELECT pg_catalog.encode(secret, 'hex') FROM {schema}.stage_key"),
        &[],
    )
    .map(|row| row.get(0))
    .map_err(|e| DbError::postgres("read the stage key", e))
}

/// Let `role` stage plans through the substrate in `schema`: the use of the schema and of the
/// substrate's entry points, nothing on its tables. Run by the role that installed it.
pub fn allow(client: &mut Client, schema: &str, role: &str) -> Result<(), DbError> {
    super::check_schema(schema)?;
    if !is_plain_name(role) {
        return Err(DbError::BadRole {
            role: role.to_owned(),
        });
    }
    let functions = ENTRY_POINTS
        .iter()
        .map(|f| format!("{schema}.{f}"))
        .collect::<Vec<_>>()
        .join(", ");
    client
        .batch_execute(&format!(
            "GRANT USAGE ON SCHEMA {schema} TO \"{role}\";
             GRANT EXECUTE ON FUNCTION {functions} TO \"{role}\";"
        ))
        .map_err(|e| DbError::postgres("allow", e))
}
