//! What the PostgreSQL substrate installs: a schema of its own holding the markers, the change
//! records and the one trigger function every observed table calls. The function runs with its
//! owner's rights (`SECURITY DEFINER`, with a fixed `search_path`), so a write by any role — the
//! application's, a migration's, a person's at a prompt — is recorded, and roles that write the
//! team's tables need no grant on the substrate's schema. A write outside a stage finds no
//! stage named in its transaction's settings and is recorded as unmediated.

use postgres::Client;

use crate::error::DbError;
use crate::plan::is_plain_name;

/// The substrate's tables and trigger function, in schema `s`.
fn tables(s: &str) -> String {
    format!(
        "
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.markers (
    key       TEXT PRIMARY KEY,
    plan_hash TEXT NOT NULL,
    diff_hash TEXT NOT NULL,
    receipt   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.changes (
    seq       BIGSERIAL PRIMARY KEY,
    stage     TEXT,
    statement TEXT,
    tbl       TEXT NOT NULL,
    op        TEXT NOT NULL,
    before    JSONB,
    after     JSONB
);
CREATE INDEX IF NOT EXISTS changes_stage ON {s}.changes (stage);
CREATE OR REPLACE FUNCTION {s}.record_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    INSERT INTO {s}.changes (stage, statement, tbl, op, before, after)
    VALUES (
        NULLIF(current_setting('interlock.stage', true), ''),
        NULLIF(current_setting('interlock.statement', true), ''),
        TG_TABLE_NAME,
        lower(TG_OP),
        CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN to_jsonb(OLD) END,
        CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN to_jsonb(NEW) END
    );
    RETURN NULL;
END
$fn$;
"
    )
}

/// Install (or re-install) the substrate in schema `schema` and observe `tables` (found by the
/// connection's `search_path`), in one transaction.
pub fn install(
    client: &mut Client,
    schema: &str,
    tables_to_observe: &[&str],
) -> Result<(), DbError> {
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
    tx.commit().map_err(|e| DbError::postgres("install", e))
}
