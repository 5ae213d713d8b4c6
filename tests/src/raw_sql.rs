//! Raw SQL on a journal file, as a person with `sqlite3` would run it: for tamper tests.

#![allow(clippy::panic)] // test setup: a failure here is the test's report

use std::path::Path;

/// Open a file with plain SQLite.
pub fn open(path: &Path) -> rusqlite::Connection {
    match rusqlite::Connection::open(path) {
        Ok(c) => c,
        Err(e) => panic!("open {}: {e}", path.display()),
    }
}

/// Run SQL, panicking on failure (a test setup step).
pub fn exec(conn: &rusqlite::Connection, sql: &str) {
    if let Err(e) = conn.execute_batch(sql) {
        panic!("{sql}: {e}");
    }
}

/// One `records` row: seq, key, n, kind, at_ms, prev, hash, body.
pub type Row = (
    i64,
    String,
    i64,
    String,
    i64,
    Option<String>,
    String,
    String,
);

/// A copy of every record row, to undo a tamper step.
pub fn dump(path: &Path) -> Vec<Row> {
    let conn = open(path);
    let mut st = match conn
        .prepare("SELECT seq, key, n, kind, at_ms, prev, hash, body FROM records ORDER BY seq")
    {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let rows = st.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(7)?,
        ))
    });
    match rows.and_then(|r| r.collect::<Result<Vec<_>, _>>()) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// Put back the rows [`dump`] returned.
pub fn restore(path: &Path, rows: &[Row]) {
    let conn = open(path);
    exec(&conn, "DELETE FROM records");
    for (seq, key, n, kind, at_ms, prev, hash, body) in rows {
        if let Err(e) = conn.execute(
            "INSERT INTO records (seq, key, n, kind, at_ms, prev, hash, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            rusqlite::params![seq, key, n, kind, at_ms, prev, hash, body],
        ) {
            panic!("{e}");
        }
    }
}
