//! The SQLite substrate: a team's own SQLite database as a gate target. A send stages the plan
//! and commits it with its marker or not at all, before the send's deadline; a lookup reads the
//! marker holding the write lock, which makes it a definitive answer (tier 2): present, the plan
//! committed once; absent, it never did and no stage begun before the lookup still can.

mod guard;
mod install;
mod outbox;
mod stage;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use interlock::EffectKey;
use interlock::target::{LookupAnswer, SendAnswer, SendRequest, Target, Tier};
use rusqlite::Connection;
use serde_json::Value;

pub use install::{install, observed};

use crate::checks::Policy;
use crate::diff::Change;
use crate::error::DbError;
use crate::receipt::Receipt;
use crate::stage_end::{self, Asked};

/// How long a connection waits for the database's write lock outside a send (a send waits for
/// at most its own timeout).
const BUSY: Duration = Duration::from_secs(10);

/// The longest lock wait asked of SQLite (its busy timeout is a 32-bit count of milliseconds).
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// A team's SQLite database, with the substrate installed, as a gate target.
pub struct SqliteDb {
    name: String,
    path: PathBuf,
    conn: Mutex<Connection>,
    policy: Policy,
    lookup_wait: Duration,
}

impl std::fmt::Debug for SqliteDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDb")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteDb {
    /// The database at `path`, judged by `policy`. It must have the substrate installed
    /// ([`install`]); its journal mode and other settings are left as the team set them.
    pub fn open(path: impl AsRef<Path>, policy: Policy) -> Result<Self, DbError> {
        let conn = Connection::open(path.as_ref()).map_err(|e| DbError::sqlite("open", e))?;
        conn.busy_timeout(BUSY)
            .map_err(|e| DbError::sqlite("open", e))?;
        // A row a conflict clause replaces then fires the delete trigger, so the stage's count
        // check sees it (SQLite does not count it as a change).
        conn.pragma_update(None, "recursive_triggers", "ON")
            .map_err(|e| DbError::sqlite("open", e))?;
        let installed: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('interlock_markers', 'interlock_changes', 'interlock_stage', 'interlock_outbox', 'interlock_spent')",
                [],
                |r| r.get(0),
            )
            .map_err(|e| DbError::sqlite("open", e))?;
        if installed != 5 {
            return Err(DbError::NotInstalled {
                where_: String::new(),
            });
        }
        Ok(Self {
            name: "sqlite-db".into(),
            path: path.as_ref().to_path_buf(),
            conn: Mutex::new(conn),
            policy,
            lookup_wait: BUSY,
        })
    }

    /// The same target under another name (the journal records effects by target name).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How long a lookup waits for a stage under way to end (default 10 s); past it, the lookup
    /// answers unknown rather than absent.
    #[must_use]
    pub fn lookup_wait(mut self, wait: Duration) -> Self {
        self.lookup_wait = wait;
        self
    }

    /// The receipt of the plan committed under `key`, if one was.
    pub fn receipt(&self, key: &EffectKey) -> Result<Option<Receipt>, DbError> {
        stage::read_marker(&self.conn(), key.as_str()).map_err(|detail| DbError::Stored {
            what: "marker",
            detail,
        })
    }

    /// The key of every marker: every plan this database committed.
    pub fn marker_keys(&self) -> Result<Vec<String>, DbError> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT key FROM interlock_markers ORDER BY key")
            .map_err(|e| DbError::sqlite("read the markers", e))?;
        let keys: Vec<String> = st
            .query_map([], |r| r.get(0))
            .and_then(Iterator::collect)
            .map_err(|e| DbError::sqlite("read the markers", e))?;
        Ok(keys)
    }

    /// Rows of observed tables changed outside any stage: writes nobody mediated, oldest first.
    pub fn unmediated(&self) -> Result<Vec<Change>, DbError> {
        stage::changes(&self.conn(), None).map_err(|detail| DbError::Stored {
            what: "change record",
            detail,
        })
    }

    /// The connection, out of any transaction a panicked send left open.
    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        guard::lift(&conn);
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        conn
    }
}

impl Target for SqliteDb {
    fn name(&self) -> &str {
        &self.name
    }

    fn tier(&self) -> Tier {
        Tier::Two
    }

    fn has_lookup(&self) -> bool {
        true
    }

    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        let plan = match stage_end::plan_of(req) {
            Ok(p) => p,
            Err(refused) => return refused,
        };
        let plan_hash = crate::receipt::plan_hash(&plan);
        let asked = Asked::of(req, &plan, &plan_hash, &self.policy);
        let conn = self.conn();
        if let Err(e) = conn.busy_timeout(asked.until.left().min(MAX_WAIT)) {
            return SendAnswer::Unknown(format!("could not set the lock wait: {e}"));
        }
        let ended = stage::stage(&conn, asked);
        let _ = conn.busy_timeout(BUSY);
        ended.into()
    }

    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        let plan_hash = match stage_end::looked_for(payload) {
            Ok(h) => h,
            Err(unknown) => return unknown,
        };
        let conn = self.conn();
        let read = conn
            .busy_timeout(self.lookup_wait.min(MAX_WAIT))
            .map_err(|e| e.to_string())
            .and_then(|()| stage::read_marker_locked(&conn, key.as_str()));
        let _ = conn.busy_timeout(BUSY);
        stage_end::lookup_answer(read, &plan_hash)
    }
}

#[cfg(test)]
mod tests;
