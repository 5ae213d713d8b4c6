//! What the SQLite substrate installs in the team's database: the marker table, the outbox, what
//! each committed stage used of the policy's windows, the table the triggers write changes to,
//! the one-row table that names the stage under way, and three triggers per observed table. The triggers are the measurement: they run inside whatever
//! statement changes a row (a plan's, another trigger's, or a write nobody mediated), so what
//! they record is the database's own account, not a prediction from the SQL.

use rusqlite::Connection;

use crate::error::DbError;
use crate::plan::is_plain_name;

/// The tables the substrate keeps beside the team's own.
pub(crate) const TABLES: &str = "
CREATE TABLE IF NOT EXISTS interlock_markers (
    key       TEXT PRIMARY KEY,
    plan_hash TEXT NOT NULL,
    diff_hash TEXT NOT NULL,
    receipt   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS interlock_changes (
    seq       INTEGER PRIMARY KEY,
    stage     TEXT,
    statement TEXT,
    tbl       TEXT NOT NULL,
    op        TEXT NOT NULL,
    before    TEXT,
    after     TEXT
);
CREATE INDEX IF NOT EXISTS interlock_changes_stage ON interlock_changes (stage);
CREATE TABLE IF NOT EXISTS interlock_outbox (
    seq       INTEGER PRIMARY KEY,
    key       TEXT NOT NULL,
    id        TEXT NOT NULL,
    target    TEXT NOT NULL,
    lease     TEXT NOT NULL,
    payload   TEXT NOT NULL,
    outcome   TEXT,
    UNIQUE (key, id)
);
CREATE INDEX IF NOT EXISTS interlock_outbox_pending ON interlock_outbox (seq) WHERE outcome IS NULL;
CREATE TABLE IF NOT EXISTS interlock_outbox_relays (
    key       TEXT NOT NULL,
    id        TEXT NOT NULL,
    relay     TEXT NOT NULL,
    PRIMARY KEY (key, id)
);
CREATE TABLE IF NOT EXISTS interlock_spent (
    window_id TEXT NOT NULL,
    key       TEXT NOT NULL,
    at_ms     INTEGER NOT NULL,
    amount    INTEGER NOT NULL,
    PRIMARY KEY (window_id, key)
);
CREATE INDEX IF NOT EXISTS interlock_spent_at ON interlock_spent (window_id, at_ms);
CREATE TABLE IF NOT EXISTS interlock_stage (
    one       INTEGER PRIMARY KEY CHECK (one = 1),
    key       TEXT NOT NULL,
    statement TEXT
);
";

/// Install (or re-install, after a table's columns changed) the substrate's tables and the
/// triggers that observe `tables`, in one transaction.
pub fn install(conn: &mut Connection, tables: &[&str]) -> Result<(), DbError> {
    let tx = conn
        .transaction()
        .map_err(|e| DbError::sqlite("install", e))?;
    tx.execute_batch(TABLES)
        .map_err(|e| DbError::sqlite("install", e))?;
    for table in tables {
        if !is_plain_name(table) || table.starts_with("interlock_") {
            return Err(DbError::BadTable {
                table: (*table).to_owned(),
                why: "observe a table of your own, named with letters, digits and `_`",
            });
        }
        let columns = columns(&tx, table)?;
        tx.execute_batch(&triggers(table, &columns))
            .map_err(|e| DbError::sqlite("install", e))?;
    }
    tx.commit().map_err(|e| DbError::sqlite("install", e))
}

/// The observed tables: those with the substrate's triggers.
pub fn observed(conn: &Connection) -> Result<Vec<String>, DbError> {
    let mut st = conn
        .prepare(
            "SELECT tbl_name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'interlock\\_%\\_insert' ESCAPE '\\' ORDER BY tbl_name",
        )
        .map_err(|e| DbError::sqlite("observed tables", e))?;
    st.query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| DbError::sqlite("observed tables", e))
}

fn columns(conn: &Connection, table: &str) -> Result<Vec<String>, DbError> {
    let mut st = conn
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .map_err(|e| DbError::sqlite("install", e))?;
    let columns: Vec<String> = st
        .query_map([table], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| DbError::sqlite("install", e))?;
    if columns.is_empty() {
        return Err(DbError::BadTable {
            table: table.to_owned(),
            why: "no such table in this database",
        });
    }
    Ok(columns)
}

/// A row image as JSON text: each column by name; a blob as its hex (JSON holds no bytes).
fn image(row: &str, columns: &[String]) -> String {
    let pairs: Vec<String> = columns
        .iter()
        .map(|c| {
            let c = c.replace('"', "\"\"");
            let name = c.replace('\'', "''");
            format!(
                "'{name}', iif(typeof({row}.\"{c}\") = 'blob', hex({row}.\"{c}\"), {row}.\"{c}\")"
            )
        })
        .collect();
    format!("json_object({})", pairs.join(", "))
}

fn triggers(table: &str, columns: &[String]) -> String {
    let stage = "(SELECT key FROM interlock_stage)";
    let statement = "(SELECT statement FROM interlock_stage)";
    let (old, new) = (image("OLD", columns), image("NEW", columns));
    format!(
        "
DROP TRIGGER IF EXISTS interlock_{table}_insert;
DROP TRIGGER IF EXISTS interlock_{table}_update;
DROP TRIGGER IF EXISTS interlock_{table}_delete;
CREATE TRIGGER interlock_{table}_insert AFTER INSERT ON \"{table}\" BEGIN
    INSERT INTO interlock_changes (stage, statement, tbl, op, before, after)
    VALUES ({stage}, {statement}, '{table}', 'insert', NULL, {new});
END;
CREATE TRIGGER interlock_{table}_update AFTER UPDATE ON \"{table}\" BEGIN
    INSERT INTO interlock_changes (stage, statement, tbl, op, before, after)
    VALUES ({stage}, {statement}, '{table}', 'update', {old}, {new});
END;
CREATE TRIGGER interlock_{table}_delete AFTER DELETE ON \"{table}\" BEGIN
    INSERT INTO interlock_changes (stage, statement, tbl, op, before, after)
    VALUES ({stage}, {statement}, '{table}', 'delete', {old}, NULL);
END;
"
    )
}
