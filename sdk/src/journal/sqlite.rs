//! The default journal: one SQLite file shared by every worker process on a host. WAL with
//! `synchronous=FULL`; appends run in `BEGIN IMMEDIATE` transactions that threads of one process
//! share (group commit, `sqlite_group`), so a record is on disk when `append_with` returns, two
//! writers never decide on the same state, and concurrent senders share fsyncs.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use super::sqlite_group::Group;
use super::sqlite_leases::TxLeaseReader;
use super::sqlite_readers::Readers;
use super::store::{self, NewRecord, StoredRecord, Verified};
use super::{AppendOutcome, Decide, Journal, JournalError, Record};
use crate::clock::Clock;
use crate::effect::EffectKey;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 2;
const FORMAT: &str = "interlock-journal";
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Prepared statements kept per connection: every statement the journal, its leases and its
/// routes run, so none is parsed again on the hot path (SQLite's default keeps 16).
pub(super) const STATEMENTS: usize = 64;

/// An SQLite journal.
pub struct SqliteJournal {
    group: Group,
    /// Reads see committed records only; `None` where the write connection never leaves a group
    /// open (in memory, read-only).
    readers: Option<Readers>,
    path: String,
    store: String,
    clock: Arc<dyn Clock>,
    /// Its name of its own ([`Journal::instance`]), once read.
    instance: std::sync::OnceLock<String>,
    /// The budgets in force as last read, with the position of the latest change they reflect.
    pub(super) budgets_read: std::sync::Mutex<
        Option<(
            Option<super::sqlite_budgets::LatestChange>,
            Vec<crate::budget::Budget>,
        )>,
    >,
}

impl std::fmt::Debug for SqliteJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteJournal")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteJournal {
    /// Open (or create) the journal at `path`. Every commit is synced to disk before it returns
    /// (`synchronous = FULL`).
    pub fn open(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> Result<Self, JournalError> {
        let shown = path.as_ref().display().to_string();
        crate::private_file::prepare_sqlite(path.as_ref()).map_err(|e| JournalError::Storage {
            path: shown.clone(),
            what: e.to_string(),
        })?;
        let conn = Connection::open(path.as_ref()).map_err(|e| map_err(&shown, e))?;
        let mut journal = Self::init(conn, shown.clone(), store_id(path.as_ref()), clock, true)?;
        journal.readers = Some(Readers::new(path.as_ref().to_path_buf(), BUSY_TIMEOUT));
        Ok(journal)
    }

    /// Open an existing journal for reading only (inspection, audits). Appends fail with a
    /// storage error; nothing on disk changes.
    pub fn open_read_only(
        path: impl AsRef<Path>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, JournalError> {
        let shown = path.as_ref().display().to_string();
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path.as_ref(), flags).map_err(|e| map_err(&shown, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| map_err(&shown, e))?;
        let journal = Self {
            group: Group::new(conn, false),
            readers: None,
            store: store_id(path.as_ref()),
            path: shown,
            clock,
            budgets_read: std::sync::Mutex::new(None),
            instance: std::sync::OnceLock::new(),
        };
        journal.check_schema_read_only()?;
        Ok(journal)
    }

    fn check_schema_read_only(&self) -> Result<(), JournalError> {
        self.read_with(|conn| self.check_schema_on(conn))
    }

    fn check_schema_on(&self, conn: &Connection) -> Result<(), JournalError> {
        let format: Option<String> = conn
            .query_row(
                "SELECT value FROM interlock_meta WHERE name = 'format'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| match e.sqlite_error_code() {
                Some(ErrorCode::NotADatabase) => self.err(e),
                _ => JournalError::Foreign {
                    path: self.path.clone(),
                    why: e.to_string(),
                },
            })?;
        if format.as_deref() != Some(FORMAT) {
            return Err(JournalError::Foreign {
                path: self.path.clone(),
                why: format!("its format marker is {format:?}"),
            });
        }
        let version: Option<String> = conn
            .query_row(
                "SELECT value FROM interlock_meta WHERE name = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        if version.as_deref() != Some(SCHEMA_VERSION.to_string().as_str()) {
            return Err(JournalError::SchemaVersion {
                path: self.path.clone(),
                found: version.unwrap_or_default(),
                supported: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// A private in-memory journal (tests and benchmarks of the decision path).
    pub fn in_memory(clock: Arc<dyn Clock>) -> Result<Self, JournalError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let conn = Connection::open_in_memory().map_err(|e| map_err(":memory:", e))?;
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self::init(
            conn,
            ":memory:".into(),
            format!("sqlite-memory:{}:{n}", std::process::id()),
            clock,
            false,
        )
    }

    fn init(
        conn: Connection,
        path: String,
        store: String,
        clock: Arc<dyn Clock>,
        on_disk: bool,
    ) -> Result<Self, JournalError> {
        let err = |e| map_err(&path, e);
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        conn.set_prepared_statement_cache_capacity(STATEMENTS);
        // Reading the schema forces SQLite to read the header: a foreign file fails here.
        let _: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(err)?;
        if on_disk {
            set_wal(&conn, &path)?;
        }
        // Memory has no disk to sync to.
        let sync = if on_disk { "FULL" } else { "OFF" };
        conn.pragma_update(None, "synchronous", sync).map_err(err)?;
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(err)?;
        if check != "ok" {
            return Err(JournalError::Corrupt {
                path,
                place: "storage".into(),
                what: check,
            });
        }
        let journal = Self {
            // A file's commits cost an fsync each, worth sharing; memory's cost nothing.
            group: Group::new(conn, on_disk),
            readers: None,
            path,
            store,
            clock,
            budgets_read: std::sync::Mutex::new(None),
            instance: std::sync::OnceLock::new(),
        };
        journal.ensure_schema()?;
        Ok(journal)
    }

    fn ensure_schema(&self) -> Result<(), JournalError> {
        self.write(|conn| {
            let tables: Vec<String> = {
                let mut st = conn
                    .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
                    .map_err(|e| self.err(e))?;
                st.query_map([], |r| r.get(0))
                    .and_then(|rows| rows.collect::<Result<_, _>>())
                    .map_err(|e| self.err(e))?
            };
            if tables.iter().any(|t| t == "interlock_meta") {
                let get = |name: &str| -> Result<Option<String>, JournalError> {
                    conn.query_row(
                        "SELECT value FROM interlock_meta WHERE name = ?1",
                        [name],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(|e| self.err(e))
                };
                let format = get("format")?;
                if format.as_deref() != Some(FORMAT) {
                    return Err(JournalError::Foreign {
                        path: self.path.clone(),
                        why: format!("its format marker is {format:?}"),
                    });
                }
                let version = get("schema_version")?.unwrap_or_default();
                if version == "1" {
                    conn.execute_batch(UPGRADE_1_TO_2)
                        .and_then(|()| conn.execute_batch(ROUTES))
                        .and_then(|()| conn.execute_batch(LEASE_USES))
                        .map_err(|e| self.err(e))?;
                    tracing::info!(path = %self.path, "upgraded the journal to schema version 2");
                    return Ok(((), true));
                }
                if version != SCHEMA_VERSION.to_string() {
                    return Err(JournalError::SchemaVersion {
                        path: self.path.clone(),
                        found: version,
                        supported: SCHEMA_VERSION,
                    });
                }
                // Added within version 2: a release without it reads the journal as before,
                // and never dispatches under a lease whose uses are counted (LIMITED_SCOPE).
                if ["lease_uses", "budget_changes", "budget_places", "budget_totals"]
                    .iter()
                    .any(|name| !tables.iter().any(|t| t == name))
                {
                    conn.execute_batch(LEASE_USES).map_err(|e| self.err(e))?;
                    if tables.iter().any(|t| t == "budget_holds") {
                        conn.execute_batch(PLACES_FROM_HOLDS)
                            .map_err(|e| self.err(e))?;
                    }
                    tracing::info!(path = %self.path, "added the tables of lease uses and budgets to the journal");
                    return Ok(((), true));
                }
                Ok(((), false))
            } else if let Some(other) = tables.iter().find(|t| !t.starts_with("sqlite_")) {
                Err(JournalError::Foreign {
                    path: self.path.clone(),
                    why: format!("it holds a table named {other:?} and no journal marker"),
                })
            } else {
                conn.execute_batch(SCHEMA)
                    .and_then(|()| conn.execute_batch(ROUTES))
                    .and_then(|()| conn.execute_batch(LEASE_USES))
                    .map_err(|e| self.err(e))?;
                conn.execute(
                    "INSERT INTO interlock_meta (name, value) VALUES ('format', ?1), ('schema_version', ?2)",
                    params![FORMAT, SCHEMA_VERSION.to_string()],
                )
                .map_err(|e| self.err(e))?;
                Ok(((), true))
            }
        })
    }

    /// Transactions this handle has committed (each one fsync with full durability): with
    /// concurrent appends, fewer than the appends.
    pub fn commits(&self) -> u64 {
        self.group.commits()
    }

    /// Run a write in a group transaction (see `sqlite_group`); durable when this returns.
    pub(super) fn write<T>(
        &self,
        part: impl FnOnce(&Connection) -> Result<(T, bool), JournalError>,
    ) -> Result<T, JournalError> {
        self.group.write(&|e| self.err(e), part)
    }

    /// Run `f` on a connection that sees committed records only: the write connection when it
    /// is idle (its page cache holds what it last wrote), else a read connection of its own.
    pub(super) fn read_with<T, E: From<JournalError>>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, E>,
    ) -> Result<T, E> {
        match &self.readers {
            Some(readers) => match self.group.try_idle() {
                Some(w) => f(&w),
                None => readers.with(f).map_err(|e| self.err(e))?,
            },
            None => f(&self.group.idle_conn()),
        }
    }

    pub(super) fn err(&self, e: rusqlite::Error) -> JournalError {
        map_err(&self.path, e)
    }

    pub(super) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn read_all(&self, tx: &Connection, key: &str) -> Result<Vec<Record>, JournalError> {
        store::decode(&self.path, self.rows_from(tx, key, 0)?)
    }

    /// The key's records continuing `seen`, verified once: only what was appended after it is
    /// checked, unless its last record is no longer as seen.
    fn read_on(
        &self,
        conn: &Connection,
        key: &str,
        seen: &Verified,
    ) -> Result<Verified, JournalError> {
        let rows = self.rows_from(conn, key, seen.resume_at())?;
        match store::extend(&self.path, key, seen, rows)? {
            Some(v) => Ok(v),
            None => store::verified(&self.path, key, self.rows_from(conn, key, 0)?),
        }
    }

    /// The key's stored rows from position `from` on, in append order (`seq`): a row moved out of
    /// its place in the chain is then named by the chain's check. Read in the `(key, n)` index's
    /// order and put in `seq` order here: the same rows in the same order, without the temporary
    /// B-tree SQLite builds to sort a few rows by `seq` on every read.
    fn rows_from(
        &self,
        conn: &Connection,
        key: &str,
        from: i64,
    ) -> Result<Vec<StoredRecord>, JournalError> {
        let mut st = conn
            .prepare_cached(
                "SELECT seq, key, n, kind, at_ms, prev, hash, body FROM records WHERE key = ?1 AND n >= ?2 ORDER BY n",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = st
            .query_map(params![key, from], |r| {
                Ok(StoredRecord {
                    seq: r.get(0)?,
                    key: r.get(1)?,
                    n: r.get(2)?,
                    kind: r.get(3)?,
                    at_ms: r.get(4)?,
                    prev: r.get(5)?,
                    hash: r.get(6)?,
                    body: r.get(7)?,
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))?;
        // Already in order unless a row was moved; a stable sort of a sorted slice is one pass.
        rows.sort_by_key(|r| r.seq);
        Ok(rows)
    }

    /// One record's row; its `seq`.
    fn insert(&self, tx: &Connection, r: &NewRecord<'_>) -> Result<i64, JournalError> {
        tx.prepare_cached(
            "INSERT INTO records (key, n, kind, at_ms, prev, hash, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut st| st.execute(params![r.key, r.n, r.kind, r.at_ms, r.prev, r.hash, r.body]))
        .map_err(|e| self.err(e))?;
        Ok(tx.last_insert_rowid())
    }
}

impl Journal for SqliteJournal {
    fn location(&self) -> &str {
        &self.path
    }

    fn store_id(&self) -> &str {
        &self.store
    }

    fn instance(&self) -> Result<String, JournalError> {
        if let Some(name) = self.instance.get() {
            return Ok(name.clone());
        }
        let name = self.write(|conn| {
            let made = conn
                .execute(
                    "INSERT OR IGNORE INTO interlock_meta (name, value) \
                     VALUES ('instance', lower(hex(randomblob(16))))",
                    [],
                )
                .map_err(|e| self.err(e))?;
            let name: String = conn
                .query_row(
                    "SELECT value FROM interlock_meta WHERE name = 'instance'",
                    [],
                    |r| r.get(0),
                )
                .map_err(|e| self.err(e))?;
            Ok((format!("journal:{name}"), made > 0))
        })?;
        Ok(self.instance.get_or_init(|| name).clone())
    }

    fn history(&self, key: &EffectKey) -> Result<Vec<Record>, JournalError> {
        self.read_with(|conn| self.read_all(conn, key.as_str()))
    }

    fn read_after(&self, key: &EffectKey, seen: &Verified) -> Result<Verified, JournalError> {
        self.read_with(|conn| self.read_on(conn, key.as_str(), seen))
    }

    fn append_after(
        &self,
        key: &EffectKey,
        seen: &Verified,
        decide: &mut Decide<'_>,
    ) -> Result<AppendOutcome, JournalError> {
        self.write(|tx| {
            let seen = self.read_on(tx, key.as_str(), seen)?;
            let leases = TxLeaseReader {
                journal: self,
                conn: tx,
                counted: Default::default(),
                budgets_read: Default::default(),
            };
            let out = store::decide_and_append(
                &self.path,
                key.as_str(),
                seen,
                Some(&leases),
                decide,
                self.now_ms(),
                |rows| rows.iter().map(|r| self.insert(tx, r)).collect(),
            )?;
            let keep = !out.appended.is_empty();
            Ok((out, keep))
        })
    }

    fn import_history(&self, records: &[Record]) -> Result<store::Import, JournalError> {
        let Some(first) = records.first() else {
            return Ok(store::Import::AlreadyThere);
        };
        self.write(|tx| {
            let existing = self.read_all(tx, &first.key)?;
            let plan = store::check_import(&self.path, records, &existing)?;
            if plan == store::Import::Insert {
                let leases = TxLeaseReader {
                    journal: self,
                    conn: tx,
                    counted: Default::default(),
                    budgets_read: Default::default(),
                };
                store::insert_imported(&self.path, records, &leases, |r| self.insert(tx, r))?;
            }
            Ok((plan, plan == store::Import::Insert))
        })
    }

    fn keys(&self) -> Result<Vec<String>, JournalError> {
        self.read_with(|conn| {
            let mut st = conn
                .prepare_cached("SELECT key FROM records WHERE n = 0 ORDER BY seq")
                .map_err(|e| self.err(e))?;
            st.query_map([], |r| r.get(0))
                .and_then(|rows| rows.collect::<Result<_, _>>())
                .map_err(|e| self.err(e))
        })
    }

    fn keys_page(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>, JournalError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Every key is non-empty, so "" starts before the first.
        let after = after.unwrap_or("");
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read_with(|conn| {
            let mut st = conn.prepare_cached(KEYS_PAGE).map_err(|e| self.err(e))?;
            st.query_map(params![after, limit], |r| r.get(0))
                .and_then(|rows| rows.collect::<Result<_, _>>())
                .map_err(|e| self.err(e))
        })
    }

    fn keys_with(&self, kind: &str) -> Result<Vec<String>, JournalError> {
        self.read_with(|conn| {
            let mut st = conn
                .prepare_cached("SELECT DISTINCT key FROM records WHERE kind = ?1")
                .map_err(|e| self.err(e))?;
            st.query_map([kind], |r| r.get(0))
                .and_then(|rows| rows.collect::<Result<_, _>>())
                .map_err(|e| self.err(e))
        })
    }
}

/// Up to `?2` keys after `?1`, in key order: one seek per key into the index that
/// `UNIQUE (key, n)` keeps (every schema version has it), each to the smallest key after the
/// last, so a page costs `?2` seeks however many keys or records per key the journal holds (a
/// `DISTINCT` scan would walk every record of every key on the page).
const KEYS_PAGE: &str = "
WITH RECURSIVE page(key) AS (
    SELECT (SELECT key FROM records WHERE key > ?1 ORDER BY key LIMIT 1)
    UNION ALL
    SELECT (SELECT r.key FROM records r WHERE r.key > page.key ORDER BY r.key LIMIT 1)
    FROM page WHERE page.key IS NOT NULL
    LIMIT ?2
)
SELECT key FROM page WHERE key IS NOT NULL
";

// `seq` needs no AUTOINCREMENT: records are never deleted, so the next rowid is always one past
// the last, and each commit is spared a write to `sqlite_sequence`. (Journals created with it
// read the same.)
const SCHEMA: &str = "
CREATE TABLE interlock_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE records (
    seq   INTEGER PRIMARY KEY,
    key   TEXT NOT NULL,
    n     INTEGER NOT NULL,
    kind  TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    prev  TEXT,
    hash  TEXT NOT NULL,
    body  TEXT NOT NULL,
    UNIQUE (key, n)
);
CREATE TABLE leases (
    id         TEXT PRIMARY KEY,
    approver   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    cap_field  TEXT,
    cap        INTEGER,
    granted_ms INTEGER NOT NULL,
    expires_ms INTEGER,
    revoked_ms INTEGER,
    approval   TEXT
);
";

/// Each request's steps through the approver groups (schema version 2).
const ROUTES: &str = "
CREATE TABLE routes (
    request    TEXT NOT NULL,
    n          INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    level      INTEGER NOT NULL,
    group_name TEXT NOT NULL,
    reason     TEXT NOT NULL,
    repair_of  TEXT,
    detail     TEXT NOT NULL,
    at_ms      INTEGER NOT NULL,
    PRIMARY KEY (request, n)
);
";

/// Which keys hold a use of a lease that counts its uses, the budgets' changes and the places
/// effects hold in them ([`crate::core::limits`]): a row from
/// the transaction that writes a key's first `DISPATCHED`, deleted by the one that proves the
/// effect never applied.
const LEASE_USES: &str = "
CREATE TABLE IF NOT EXISTS lease_uses (
    lease  TEXT NOT NULL,
    key    TEXT NOT NULL,
    amount INTEGER NOT NULL,
    at_ms  INTEGER NOT NULL,
    PRIMARY KEY (lease, key)
);
CREATE TABLE IF NOT EXISTS budget_changes (
    id    TEXT NOT NULL,
    n     INTEGER NOT NULL,
    spec  TEXT,
    at_ms INTEGER NOT NULL,
    by    TEXT NOT NULL,
    PRIMARY KEY (id, n)
);
CREATE TABLE IF NOT EXISTS budget_places (
    key    TEXT NOT NULL,
    budget TEXT NOT NULL,
    bucket TEXT NOT NULL,
    amount   INTEGER NOT NULL,
    at_ms    INTEGER NOT NULL,
    until_ms INTEGER NOT NULL,
    PRIMARY KEY (key, budget)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS budget_places_window
    ON budget_places (budget, bucket, until_ms, amount);
CREATE TABLE IF NOT EXISTS budget_totals (
    budget  TEXT NOT NULL,
    bucket  TEXT NOT NULL,
    mark_ms INTEGER NOT NULL,
    total   INTEGER NOT NULL,
    PRIMARY KEY (budget, bucket)
);
";

/// The places as the first builds with budgets kept them (one row in three B-trees, an effect's
/// places on as many pages as it has budgets), moved to `budget_places`: an effect's places side
/// by side under its key, and one index for the windows that also adds up their amounts.
const PLACES_FROM_HOLDS: &str = "
INSERT OR IGNORE INTO budget_places (key, budget, bucket, amount, at_ms, until_ms)
    SELECT key, budget, bucket, amount, at_ms, until_ms FROM budget_holds;
DROP TABLE budget_holds;
";

/// Version 1 to 2, with [`ROUTES`]: leases may carry a signed approval.
const UPGRADE_1_TO_2: &str = "
ALTER TABLE leases ADD COLUMN approval TEXT;
UPDATE interlock_meta SET value = '2' WHERE name = 'schema_version';
";

/// One name per database file, however it was reached: the leases of a journal opened twice are
/// still the journal's own.
fn store_id(path: &Path) -> String {
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    format!("sqlite:{}", canonical.display())
}

fn set_wal(conn: &Connection, path: &str) -> Result<(), JournalError> {
    // Switching to WAL needs a moment of exclusive access; many workers opening a new journal at
    // once can see SQLITE_BUSY here, which the busy handler does not cover.
    let start = Instant::now();
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(JournalError::Storage {
                    path: path.to_owned(),
                    what: format!("could not switch to WAL mode (still {mode})"),
                });
            }
            Err(e) if is_busy(&e) && start.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(map_err(path, e)),
        }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

fn map_err(path: &str, e: rusqlite::Error) -> JournalError {
    let path = path.to_owned();
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => JournalError::NotADatabase { path },
        Some(ErrorCode::DatabaseCorrupt) => JournalError::Corrupt {
            path,
            place: "storage".into(),
            what: e.to_string(),
        },
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => JournalError::Busy {
            path,
            waited_ms: u64::try_from(BUSY_TIMEOUT.as_millis()).unwrap_or(u64::MAX),
        },
        _ => JournalError::Storage {
            path,
            what: e.to_string(),
        },
    }
}
