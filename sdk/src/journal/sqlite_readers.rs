//! Read connections, one per concurrent reader: WAL lets them read committed records side by
//! side while a group writes, where one shared connection would queue every reader behind the
//! others. Connections are opened on first need and kept for reuse.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::Connection;

/// Idle read connections to one journal file.
pub(super) struct Readers {
    path: PathBuf,
    busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    pub(super) fn new(path: PathBuf, busy_timeout: Duration) -> Self {
        Self {
            path,
            busy_timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Run `f` on an idle connection (or a new one), then keep the connection for reuse.
    pub(super) fn with<T>(&self, f: impl FnOnce(&Connection) -> T) -> rusqlite::Result<T> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(c) => c,
            None => {
                let c = Connection::open(&self.path)?;
                c.busy_timeout(self.busy_timeout)?;
                c.set_prepared_statement_cache_capacity(super::sqlite::STATEMENTS);
                c.pragma_update(None, "query_only", "ON")?;
                // No memory map of the database file: every checkpoint grows or moves the file
                // under it, and remapping cost more (measured by `gate-bench`) than the page
                // copies a map saves.
                c
            }
        };
        let out = f(&conn);
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
        Ok(out)
    }
}
