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
