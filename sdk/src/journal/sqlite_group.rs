//! Group commit for writers sharing one journal handle. A commit costs one fsync whatever it
//! holds, so threads that arrive while another thread's write is under way join its open
//! transaction instead of queueing for a transaction of their own; the last one in commits for
//! all. Each joining writer's part runs in a savepoint (its failure undoes only its own records;
//! the first part has the transaction to itself, so a ROLLBACK undoes it for less), decides
//! on everything written before it in the group (so two writers never decide on the same state),
//! and returns only once the group is durable: a group that fails to commit fails every part in
//! it, each part reading how its own group ended from a slot it holds (never from a table a later
//! group could overwrite). A connection left inside a failed transaction refuses every later
//! write. Reads go to a connection that sees committed records only.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use rusqlite::Connection;

use super::JournalError;

/// A group admits at most this many writes: the write lock other processes wait for is held for
/// the whole group.
const MAX_GROUP: usize = 64;

/// How a group ended, set once by the writer that ends it and read by every part in it: each
/// part holds its own group's slot, so no later group's ending can hide how its own ended.
type Ending = Arc<OnceLock<Result<(), JournalError>>>;

/// The group transaction open on the write connection.
struct Open {
    /// How many writes joined it.
    size: usize,
    /// How it ended, once it has.
    ending: Ending,
    /// The parts waiting for it to end, each woken on its own thread: a waiter never takes the
    /// writer's lock again, so the writers queued for the next group do not wait behind a
    /// group's worth of wakeups.
    waiting: Vec<std::thread::Thread>,
}

/// The write connection and the group open on it.
pub(super) struct Writer {
    conn: Connection,
    open: Option<Open>,
    /// Set when a group could not be ended cleanly and the connection may still be inside its
    /// transaction: every later write fails rather than build on rows that were never committed.
    stuck: Option<JournalError>,
}

/// The writer, shared by every thread that appends through one journal handle.
pub(super) struct Group {
    writer: Mutex<Writer>,
    /// Threads between asking for the writer and getting it: a part leaves the group open only
    /// while one of them is sure to join and carry it on.
    queued: AtomicUsize,
    /// False for a store with no fsync to share (in memory): every part commits at once.
    grouping: bool,
    /// Groups committed.
    commits: AtomicU64,
}

/// How a writer's part of a group ended.
enum Part<T> {
    /// Its records stay (or it wrote nothing and, having joined a group, its read is to be
    /// confirmed by the group's commit).
    Done(T),
    /// It failed; its savepoint was rolled back, the group goes on.
    Failed(JournalError),
    /// It panicked; its savepoint was rolled back, the group goes on, the panic is re-raised.
    Panicked(Box<dyn std::any::Any + Send>),
}

impl Group {
    pub(super) fn new(conn: Connection, grouping: bool) -> Self {
        Self {
            writer: Mutex::new(Writer {
                conn,
                open: None,
                stuck: None,
            }),
            queued: AtomicUsize::new(0),
            grouping,
            commits: AtomicU64::new(0),
        }
    }

    /// Transactions committed so far (each one fsync on a durable file).
    pub(super) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// The write connection with no group open on it: for set-up and for reads where the
    /// journal has no separate read connection (which never groups, so nothing is left open).
    pub(super) fn idle_conn(&self) -> MutexGuard<'_, Writer> {
        self.lock()
    }

    /// The write connection if it is free right now with no group open: its page cache holds
    /// what it last wrote, where another connection would read those pages from the file again.
    pub(super) fn try_idle(&self) -> Option<MutexGuard<'_, Writer>> {
        let w = match self.writer.try_lock() {
            Ok(w) => w,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        (w.open.is_none() && w.stuck.is_none() && w.conn.is_autocommit()).then_some(w)
    }

    fn lock(&self) -> MutexGuard<'_, Writer> {
        // A panic while holding the lock is caught inside `write`; the guard is never poisoned
        // with a group half-open.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run `part` inside a group transaction. `part` returns its value and whether its writes
    /// stay (`false` rolls them back: it decided to write nothing, or refuses what it wrote).
    /// Returns once the group holding the part is durable, or, for a group's first part that
    /// keeps nothing, at once (it read committed, durable records only).
    pub(super) fn write<T>(
        &self,
        err: &dyn Fn(rusqlite::Error) -> JournalError,
        part: impl FnOnce(&Connection) -> Result<(T, bool), JournalError>,
    ) -> Result<T, JournalError> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        let mut w = self.lock();
        self.queued.fetch_sub(1, Ordering::SeqCst);
        if let Some(e) = &w.stuck {
            return Err(e.clone());
        }
        let first = w.open.is_none();
        if first {
            run(&w.conn, "BEGIN IMMEDIATE").map_err(err)?;
            w.open = Some(Open {
                size: 0,
                ending: Ending::default(),
                waiting: Vec::new(),
            });
        }
        // A group's first part has the transaction to itself until it returns (later writers
        // join only once it has), so the transaction is its savepoint: undoing its writes is a
        // ROLLBACK of the whole, which also ends a group that nothing else joined.
        let (mine, broken) = if first {
            match run_alone(&w.conn, err, part) {
                Alone::Kept(mine) => (mine, None),
                Alone::Undone(mine) => {
                    w.open = None;
                    if !w.conn.is_autocommit() {
                        w.stuck = Some(stuck(err));
                    }
                    drop(w);
                    return answer(mine, None);
                }
                Alone::Broken(mine, e) => (mine, Some(e)),
            }
        } else {
            run_part(&w.conn, err, part)
        };
        let (size, ending) = match &mut w.open {
            Some(open) => {
                open.size += 1;
                (open.size, open.ending.clone())
            }
            None => (1, Ending::default()),
        };
        let carry_on = self.grouping
            && w.open.is_some()
            && broken.is_none()
            && size < MAX_GROUP
            && self.queued.load(Ordering::SeqCst) > 0;
        if carry_on && let Some(open) = &mut w.open {
            open.waiting.push(std::thread::current());
            drop(w);
            // The writer that ends the group sets its ending before it wakes this thread; a
            // wakeup meant for something else only brings it back here to look again.
            while ending.get().is_none() {
                std::thread::park();
            }
        } else {
            let ended = match broken {
                Some(e) => Err(e),
                None => run(&w.conn, "COMMIT").map_err(err),
            };
            if ended.is_ok() {
                self.commits.fetch_add(1, Ordering::Relaxed);
            } else {
                // A failed COMMIT may leave the transaction open; end it so the next group
                // starts clean. Nothing of this group is on disk.
                let _ = w.conn.execute_batch("ROLLBACK");
            }
            if !w.conn.is_autocommit() {
                w.stuck = Some(stuck(err));
            }
            let _ = ending.set(ended);
            let waiting = w.open.take().map(|open| open.waiting).unwrap_or_default();
            drop(w);
            for part in waiting {
                part.unpark();
            }
        }
        answer(mine, ending.get())
    }
}

impl std::ops::Deref for Writer {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

/// The error every write answers once the connection may be inside a transaction it could not
/// end.
fn stuck(err: &dyn Fn(rusqlite::Error) -> JournalError) -> JournalError {
    failure(
        err,
        rusqlite::ffi::SQLITE_ERROR,
        "the journal's write connection could not end a failed transaction; reopen the journal",
    )
}

/// An error of the group's own making, with SQLite's result `code`.
fn failure(
    err: &dyn Fn(rusqlite::Error) -> JournalError,
    code: std::ffi::c_int,
    what: &str,
) -> JournalError {
    err(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(code),
        Some(what.into()),
    ))
}

/// How a group's first part ended.
enum Alone<T> {
    /// Its writes stay; the group goes on as any group does.
    Kept(Part<T>),
    /// Its writes (if any) were undone with the whole transaction, which is over: nothing of
    /// anyone else's was in it, and nothing it read waits for a commit (it read committed
    /// records only).
    Undone(Part<T>),
    /// The transaction could not be rolled back: it must not be used again.
    Broken(Part<T>, JournalError),
}

/// A group's first part, with the group's transaction as its savepoint.
fn run_alone<T>(
    conn: &Connection,
    err: &dyn Fn(rusqlite::Error) -> JournalError,
    part: impl FnOnce(&Connection) -> Result<(T, bool), JournalError>,
) -> Alone<T> {
    let outcome = match catch_unwind(AssertUnwindSafe(|| part(conn))) {
        // Kept only if the transaction is still open: SQLite rolls a whole transaction back on
        // some errors, and a part that swallowed one must not let later parts commit alone.
        Ok(Ok((t, true))) if !conn.is_autocommit() => return Alone::Kept(Part::Done(t)),
        Ok(Ok((_, true))) => {
            let e = failure(
                err,
                rusqlite::ffi::SQLITE_ABORT,
                "the journal's transaction ended inside a write",
            );
            return Alone::Broken(Part::Failed(e.clone()), e);
        }
        Ok(Ok((t, false))) => Part::Done(t),
        Ok(Err(e)) => Part::Failed(e),
        Err(p) => Part::Panicked(p),
    };
    match run(conn, "ROLLBACK") {
        Ok(()) => Alone::Undone(outcome),
        Err(e) => {
            let e = err(e);
            let outcome = match outcome {
                Part::Panicked(p) => Part::Panicked(p),
                _ => Part::Failed(e.clone()),
            };
            Alone::Broken(outcome, e)
        }
    }
}

/// A writer's answer from its part and how its group ended (`None`: no group is left to end,
/// as for a first part whose transaction it rolled back).
fn answer<T>(mine: Part<T>, ending: Option<&Result<(), JournalError>>) -> Result<T, JournalError> {
    match (mine, ending) {
        (Part::Panicked(p), _) => resume_unwind(p),
        (Part::Failed(e), _) => Err(e),
        (Part::Done(_), Some(Err(e))) => Err(e.clone()),
        (Part::Done(t), _) => Ok(t),
    }
}

/// One writer's part in a savepoint. The second value is set when the savepoint itself could
/// not be handled: the group's transaction is then unusable and must be rolled back whole.
fn run_part<T>(
    conn: &Connection,
    err: &dyn Fn(rusqlite::Error) -> JournalError,
    part: impl FnOnce(&Connection) -> Result<(T, bool), JournalError>,
) -> (Part<T>, Option<JournalError>) {
    if let Err(e) = run(conn, "SAVEPOINT part") {
        let e = err(e);
        return (Part::Failed(e.clone()), Some(e));
    }
    let (outcome, keep) = match catch_unwind(AssertUnwindSafe(|| part(conn))) {
        Ok(Ok((t, keep))) => (Part::Done(t), keep),
        Ok(Err(e)) => (Part::Failed(e), false),
        Err(p) => (Part::Panicked(p), false),
    };
    let end = if keep {
        run(conn, "RELEASE part")
    } else {
        run(conn, "ROLLBACK TO part").and_then(|()| run(conn, "RELEASE part"))
    };
    match end {
        Ok(()) => (outcome, None),
        Err(e) => {
            let e = err(e);
            let outcome = match outcome {
                Part::Panicked(p) => Part::Panicked(p),
                _ => Part::Failed(e.clone()),
            };
            (outcome, Some(e))
        }
    }
}

/// One statement without arguments, parsed once per connection.
fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    use super::*;

    fn group(dir: &std::path::Path) -> Arc<Group> {
        let conn = Connection::open(dir.join("g.db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER)")
            .unwrap();
        Arc::new(Group::new(conn, true))
    }

    fn err(e: rusqlite::Error) -> JournalError {
        JournalError::Storage {
            path: "g.db".into(),
            what: e.to_string(),
        }
    }

    fn insert(conn: &Connection, x: i64) -> Result<(), JournalError> {
        conn.execute("INSERT INTO t (x) VALUES (?1)", [x])
            .map(|_| ())
            .map_err(err)
    }

    fn wait_for(cond: impl Fn() -> bool) {
        let start = Instant::now();
        while !cond() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A first part inserts 1 and holds its group open until a second writer has queued for
    /// it; `second` then runs as the second part of the same group, on another thread.
    fn two_parts<R: Send + 'static>(
        g: &Arc<Group>,
        second: impl FnOnce(Arc<Group>) -> R + Send + 'static,
    ) -> (Result<(), JournalError>, R) {
        let inside = Arc::new(AtomicBool::new(false));
        let (g2, inside2) = (g.clone(), inside.clone());
        let joiner = std::thread::spawn(move || {
            wait_for(|| inside2.load(Ordering::SeqCst));
            second(g2)
        });
        let first = g.write(&err, |conn| {
            insert(conn, 1)?;
            inside.store(true, Ordering::SeqCst);
            wait_for(|| g.queued.load(Ordering::SeqCst) > 0);
            Ok(((), true))
        });
        (first, joiner.join().unwrap())
    }

    fn rows(g: &Group) -> Vec<i64> {
        let w = g.lock();
        let mut st = w.prepare("SELECT x FROM t ORDER BY x").unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_writer_that_arrives_during_a_write_joins_its_transaction_and_one_commit_covers_both() {
        let dir = tempfile::tempdir().unwrap();
        let g = group(dir.path());
        let (first, second) = two_parts(&g, |g| {
            g.write(&err, |conn| insert(conn, 2).map(|()| ((), true)))
        });
        first.unwrap();
        second.unwrap();
        assert_eq!(g.commits(), 1);
        assert_eq!(rows(&g), vec![1, 2]);
    }

    #[test]
    fn a_part_that_fails_undoes_only_its_own_writes() {
        let dir = tempfile::tempdir().unwrap();
        let g = group(dir.path());
        let (first, second) = two_parts(&g, |g| {
            g.write(&err, |conn| -> Result<((), bool), JournalError> {
                insert(conn, 2)?;
                Err(JournalError::Storage {
                    path: "g.db".into(),
                    what: "refused".into(),
                })
            })
        });
        first.unwrap();
        assert!(second.is_err());
        assert_eq!(g.commits(), 1);
        assert_eq!(rows(&g), vec![1]);
    }

    #[test]
    fn a_group_whose_commit_fails_fails_every_part_in_it_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let g = group(dir.path());
        // A deferred foreign key is checked at COMMIT: a part that breaks it makes its whole
        // group's commit fail, deterministically.
        g.lock()
            .execute_batch(
                "PRAGMA foreign_keys = ON;
                 CREATE TABLE parent (id INTEGER PRIMARY KEY);
                 CREATE TABLE child (pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
            )
            .unwrap();
        let (first, second) = two_parts(&g, |g| {
            g.write(&err, |conn| {
                conn.execute("INSERT INTO child (pid) VALUES (999)", [])
                    .map_err(err)?;
                Ok(((), true))
            })
        });
        assert!(first.is_err(), "the first part's group never committed");
        assert!(second.is_err());
        assert_eq!(g.commits(), 0);
        assert!(
            rows(&g).is_empty(),
            "nothing of the failed group is on disk"
        );
        assert!(
            g.try_idle().is_some(),
            "the writer is out of the failed transaction"
        );
        g.write(&err, |conn| insert(conn, 3).map(|()| ((), true)))
            .unwrap();
        assert_eq!(rows(&g), vec![3]);
    }

    #[test]
    fn a_lone_part_that_fails_or_keeps_nothing_leaves_nothing_and_costs_no_commit() {
        let dir = tempfile::tempdir().unwrap();
        let g = group(dir.path());
        let failed = g.write(&err, |conn| -> Result<((), bool), JournalError> {
            insert(conn, 1)?;
            Err(err(rusqlite::Error::InvalidQuery))
        });
        assert!(failed.is_err());
        let kept_nothing = g.write(&err, |conn| insert(conn, 2).map(|()| (7, false)));
        assert_eq!(kept_nothing.unwrap(), 7);
        let panicked = std::panic::catch_unwind(AssertUnwindSafe(|| {
            g.write(&err, |conn| -> Result<((), bool), JournalError> {
                insert(conn, 3)?;
                panic!("a bug inside a lone part")
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(g.commits(), 0, "nothing was committed");
        assert!(rows(&g).is_empty(), "every write was undone");
        assert!(g.try_idle().is_some(), "no transaction is left open");
        g.write(&err, |conn| insert(conn, 4).map(|()| ((), true)))
            .unwrap();
        assert_eq!((rows(&g), g.commits()), (vec![4], 1));
    }

    #[test]
    fn a_first_part_whose_transaction_ended_inside_it_ends_the_group_and_a_joiner_starts_anew() {
        // SQLite ends a whole transaction on some errors: a first part that swallowed one and
        // keeps its writes must not leave a joiner to commit outside any group, told it failed
        // while its records are on disk.
        let dir = tempfile::tempdir().unwrap();
        let g = group(dir.path());
        let inside = Arc::new(AtomicBool::new(false));
        let (g2, inside2) = (g.clone(), inside.clone());
        let joiner = std::thread::spawn(move || {
            wait_for(|| inside2.load(Ordering::SeqCst));
            g2.write(&err, |conn| insert(conn, 2).map(|()| ((), true)))
        });
        let first = g.write(&err, |conn| {
            insert(conn, 1)?;
            conn.execute_batch("ROLLBACK").map_err(err)?;
            inside.store(true, Ordering::SeqCst);
            wait_for(|| g.queued.load(Ordering::SeqCst) > 0);
            Ok(((), true))
        });
        assert!(first.is_err(), "its transaction never committed");
        joiner.join().unwrap().unwrap();
        assert_eq!((rows(&g), g.commits()), (vec![2], 1));
    }

    #[test]
    fn a_part_that_panics_undoes_only_its_own_writes_and_the_group_still_commits() {
        let dir = tempfile::tempdir().unwrap();
        let g = group(dir.path());
        let (first, panicked) = two_parts(&g, |g| {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                g.write(&err, |conn| -> Result<((), bool), JournalError> {
                    insert(conn, 2)?;
                    panic!("a bug inside a part")
                })
            }))
            .is_err()
        });
        first.unwrap();
        assert!(panicked, "the panic reaches the thread whose part panicked");
        assert_eq!(rows(&g), vec![1]);
        // The writer is usable afterwards.
        g.write(&err, |conn| insert(conn, 3).map(|()| ((), true)))
            .unwrap();
        assert_eq!(rows(&g), vec![1, 3]);
    }
}
