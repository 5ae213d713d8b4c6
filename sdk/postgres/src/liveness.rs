//! Liveness across hosts: a holder takes a session-level advisory lock on a connection of its own
//! and keeps that connection open for the whole send; the server drops the lock the moment that
//! connection closes, which a SIGKILL does at once. So a recoverer on any host can tell a dead
//! holder in milliseconds.
//!
//! A closed connection is not always a dead process, and the lock is only judged released when it
//! is. Two cases are kept out:
//!
//! * **The server restarted, or one of its processes crashed.** Every lock vanished, but the
//!   holders may be alive and sending. Each hold records the server lifetime it was first taken
//!   in (`holds`): the server's start time, and the id in the unlogged `server_epoch` table,
//!   which the server empties when it starts after a crash. The id is what tells a crash of one
//!   server process, after which the server ends every session and carries on under the same
//!   start time. A lock is judged released only within the lifetime its row names, and a later
//!   attempt that takes the same lock in a new lifetime never moves the row. The row is on disk
//!   before the lock counts as taken: one a crash erased could be written again in the new
//!   lifetime by another attempt on the same token, which would make the lock look released.
//! * **A holder went silent** (host cut off, socket never closed). The lock session asks the
//!   server to wait [`SILENT_HOLDER_KEPT`] before its keepalive gives up on the holder, and a
//!   gate refuses a claim deadline longer than that: the deadline rules before the lock can go.
//!
//! * **A session ended by someone else.** `pg_terminate_backend` on a lock session (they are
//!   named `interlock-liveness`), or a proxy that drops idle connections, releases a live
//!   holder's lock: never do either. A connection pooler between workers and the server
//!   (PgBouncer in transaction mode) breaks session locks; connect the journal to the server
//!   itself.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use interlock::liveness::{HeldLock, Liveness};
use sha2::{Digest, Sha256};

use crate::pool::{Conn, ConnError, Pool, Query};

/// How long the server keeps a silent holder's session (and its lock), at least: the keepalive's
/// idle time before its first probe.
pub const SILENT_HOLDER_KEPT: Duration = Duration::from_secs(300);

/// Lock sessions kept open for reuse, at most.
const IDLE_SESSIONS: usize = 16;

/// Advisory locks on the journal's server, one per key and token.
pub(crate) struct PgLiveness {
    /// Settings for lock sessions.
    config: tokio_postgres::Config,
    /// The journal's connections, for judging locks.
    pool: Pool,
    /// Lock sessions between holds.
    idle: Arc<Mutex<Vec<Idle>>>,
    /// Keeps deployments and schemas on one server apart.
    namespace: String,
    schema: String,
    place: String,
}

impl PgLiveness {
    pub(crate) fn new(
        mut config: tokio_postgres::Config,
        pool: Pool,
        schema: &str,
        deployment: &str,
        place: String,
    ) -> Self {
        let kept = SILENT_HOLDER_KEPT.as_secs();
        // The holder's side of a lock session must not give up sooner than the server's: its
        // kernel would close (and reset) the connection, and the server would drop the lock of
        // a holder that is still sending. No user timeout; keepalive only after `kept` s.
        config
            .keepalives(true)
            .keepalives_idle(SILENT_HOLDER_KEPT)
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(6)
            .tcp_user_timeout(Duration::ZERO)
            .application_name("interlock-liveness");
        // The server side: give up on a silent holder only after `kept` s of silence plus six
        // unanswered probes, and never for idleness alone. A hold's row is committed only once on
        // disk, whatever the server, role or database says by default.
        config.options(format!(
            "-c tcp_keepalives_idle={kept} -c tcp_keepalives_interval=10 \
             -c tcp_keepalives_count=6 -c idle_session_timeout=0 \
             -c idle_in_transaction_session_timeout=0 -c statement_timeout=5000 \
             -c synchronous_commit=on"
        ));
        Self {
            config,
            pool,
            idle: Arc::default(),
            namespace: format!("{schema}/{deployment}"),
            schema: schema.to_owned(),
            place,
        }
    }

    /// The advisory lock id of `key`/`token`. A collision can only make a free lock look held
    /// (a wait until the deadline), never the other way round.
    fn lock_id(&self, key: &str, token: u64) -> i64 {
        let mut h = Sha256::new();
        h.update(b"interlock-liveness\0");
        h.update(self.namespace.as_bytes());
        h.update(b"\0");
        h.update(key.as_bytes());
        h.update(b"\0");
        h.update(token.to_be_bytes());
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        i64::from_be_bytes(first)
    }

    /// An idle lock session, or a new one ([`Idle::fresh`] tells which).
    fn session(&self) -> Result<Idle, ConnError> {
        let reused = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match reused {
            Some(idle) if !idle.session.is_broken() => Ok(idle),
            _ => Idle::fresh(&self.config),
        }
    }

    fn try_lock(&self, id: i64) -> Result<Option<Conn>, ConnError> {
        // Which server lifetime this lock belongs to, written in the statement that takes it and
        // committed with it, so on disk before the lock counts as taken (the lock session's
        // commits wait for the flush): a row a crash could still lose would let another attempt
        // write it again in the new lifetime, where the lock it names would look released while
        // its first holder may be sending. Written only when the lock was taken (the lock is
        // taken once, before the insert reads it), and never moved to a newer lifetime: an
        // attempt that takes the lock after a restart and then loses the race to append must not
        // make an older holder's lock look released (a row from an older lifetime only ever makes
        // a lock look held: the deadline rules). The lifetime's id is made by the first hold after
        // a crash emptied it. One that another session made after this statement began is not
        // seen here: the row then names none, and its lock is never judged released (the
        // deadline rules), as for a lost row. The lock never waits, so the statement's snapshot
        // is as good as one taken after it. On failure the session is dropped, and closing it
        // drops the lock.
        let sql = format!(
            "WITH got AS MATERIALIZED (SELECT pg_try_advisory_lock($1) AS taken),
             made AS (
                 INSERT INTO {0}.server_epoch (one, id)
                 SELECT true, md5(random()::text || clock_timestamp()::text)
                 FROM got WHERE got.taken
                 ON CONFLICT (one) DO NOTHING RETURNING id),
             held AS (
                 INSERT INTO {0}.holds (lock_id, server_started, epoch)
                 SELECT $1, pg_postmaster_start_time(),
                        COALESCE((SELECT id FROM made), (SELECT id FROM {0}.server_epoch))
                 FROM got WHERE got.taken
                 ON CONFLICT (lock_id) DO NOTHING)
             SELECT taken FROM got",
            self.schema
        );
        // What the session owes goes first, in the same round trip: it ends in the unlock of a
        // resolved key's lock, which this one never needs to wait for.
        let lock = |idle: &mut Idle| {
            let owed = idle.owed.as_deref();
            idle.session
                .run(|q| q.sent_together(owed, &[(&sql, &[&id])]))
                .map_err(ConnError::from)
                .and_then(|mut answers| {
                    let row = answers.pop().and_then(|mut rows| rows.pop());
                    row.map(|row| row.get::<_, bool>(0))
                        .ok_or(ConnError::Unanswered("the liveness lock"))
                })
        };
        let mut idle = self.session()?;
        let got = match lock(&mut idle) {
            Ok(got) => got,
            // A reused session may have died with a server restart, or failed with what it owed
            // sent first (the failure may not be this lock's): one fresh try. The failed session
            // is closed first, which gives back any lock it took; until the server has seen it
            // close, this lock may still look taken (busy, and retried).
            Err(e) if !idle.fresh && (idle.session.is_closed() || idle.owed.is_some()) => {
                if idle.owed.is_some() {
                    tracing::warn!(
                        error = %e,
                        "a lock session failed giving a resolved key's lock back or taking the \
                         next; closed, and the lock tried on a fresh one"
                    );
                }
                drop(idle);
                let mut fresh = Idle::fresh(&self.config)?;
                let got = lock(&mut fresh)?;
                idle = fresh;
                got
            }
            // One still open may hold the lock the failed statement took: it is dropped on
            // return, and closing it gives the lock back.
            Err(e) => return Err(e),
        };
        if !got {
            give_back(&self.idle, idle.session, None);
            return Ok(None);
        }
        Ok(Some(idle.session))
    }
}

impl Drop for PgLiveness {
    /// What the idle sessions owe is paid before they close, so that resolved keys' holds are
    /// not left behind; a server that does not answer within [`PAY_ON_DROP`] is not waited for
    /// (the rows stay, as after a crash, and closing the sessions gives their locks back). The
    /// sessions are paid and closed on a thread of their own: each drives its socket on a
    /// runtime of its own, which may not be dropped inside an async context.
    fn drop(&mut self) {
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(PoisonError::into_inner));
        if idle.is_empty() {
            return;
        }
        let owes = idle.iter().any(|i| i.owed.is_some());
        let (paid, done) = std::sync::mpsc::channel();
        let payer = std::thread::Builder::new()
            .name("interlock-liveness-drop".into())
            .spawn(move || {
                for mut idle in idle {
                    if let Some(sql) = idle.owed.take() {
                        let _ = idle.session.run(|q| q.batch_execute(&sql));
                    }
                }
                let _ = paid.send(());
            });
        if payer.is_ok() && owes {
            let _ = done.recv_timeout(PAY_ON_DROP);
        }
    }
}

/// How long dropping the liveness waits for its sessions' debts to be paid, at most.
const PAY_ON_DROP: Duration = Duration::from_secs(2);

/// A lock session between holds, and what it owes: the statements that delete a resolved key's
/// holds and give its lock back, sent ahead of the session's next statement. Until then that lock
/// counts as held, which is no loss for a resolved key.
struct Idle {
    session: Conn,
    owed: Option<String>,
    /// Opened for this use, not taken from the idle ones.
    fresh: bool,
}

impl Idle {
    fn fresh(config: &tokio_postgres::Config) -> Result<Self, ConnError> {
        Ok(Self {
            session: Conn::open(config)?,
            owed: None,
            fresh: true,
        })
    }
}

/// Keep `session` for reuse with what it `owed`, if it is sound and there is room; a session that
/// owes is used first, so no debt waits long. Otherwise a debt is paid now (the rows it deletes
/// would be left behind), and closing the session gives back any lock it still holds.
fn give_back(idle: &Mutex<Vec<Idle>>, mut session: Conn, owed: Option<String>) {
    if session.is_broken() {
        return;
    }
    let mut kept = idle.lock().unwrap_or_else(PoisonError::into_inner);
    if kept.len() < IDLE_SESSIONS {
        let at = if owed.is_some() { kept.len() } else { 0 };
        kept.insert(
            at,
            Idle {
                session,
                owed,
                fresh: false,
            },
        );
        return;
    }
    drop(kept);
    if let Some(sql) = owed {
        let _ = session.run(|q| q.batch_execute(&sql));
    }
}

fn io(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl PgLiveness {
    /// The statements that delete the holds of `key`'s locks up to `up_to_token` (and the next,
    /// which an attempt may have taken).
    fn forget_sql(&self, key: &str, up_to_token: u64) -> String {
        let ids: Vec<String> = (1..=up_to_token.saturating_add(1))
            .map(|t| self.lock_id(key, t).to_string())
            .collect();
        // Best effort, so without waiting for the disk, in one round trip (the ids are numbers):
        // a delete a crash loses leaves the rows as they were while the key was being resolved,
        // which is how its locks were judged until then.
        format!(
            "BEGIN; SET LOCAL synchronous_commit = off;
             DELETE FROM {}.holds WHERE lock_id IN ({}); COMMIT;",
            self.schema,
            ids.join(", ")
        )
    }
}

/// A held advisory lock and the session holding it.
struct PgHeld {
    session: Option<Conn>,
    id: i64,
    idle: Arc<Mutex<Vec<Idle>>>,
}

impl Drop for PgHeld {
    fn drop(&mut self) {
        let Some(mut session) = self.session.take() else {
            return;
        };
        // Unlocked cleanly, the session is reused; otherwise closing it drops the lock.
        let id = self.id;
        let unlocked = session
            .run(|q| q.query_one("SELECT pg_advisory_unlock($1)", &[&id]))
            .map(|r| r.get::<_, bool>(0));
        if matches!(unlocked, Ok(true)) {
            give_back(&self.idle, session, None);
        }
    }
}

impl Liveness for PgLiveness {
    fn place(&self) -> String {
        self.place.clone()
    }

    fn try_hold(&self, key: &str, token: u64) -> std::io::Result<Option<HeldLock>> {
        let id = self.lock_id(key, token);
        Ok(self.try_lock(id).map_err(io)?.map(|session| {
            HeldLock::new(PgHeld {
                session: Some(session),
                id,
                idle: self.idle.clone(),
            })
        }))
    }

    fn released(&self, key: &str, token: u64, _host: &str) -> std::io::Result<bool> {
        // Any host's locks are visible here.
        let id = self.lock_id(key, token);
        #[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
        let (class, obj) = ((id as u64 >> 32) as u32, id as u64 as u32);
        let mut conn = self.pool.get().map_err(io)?;
        let row = conn
            .run(|c| {
                c.query_one(
                    &format!(
                        "SELECT EXISTS (SELECT 1 FROM {0}.holds
                                     WHERE lock_id = $1
                                       AND server_started = pg_postmaster_start_time()
                                       AND epoch = (SELECT id FROM {0}.server_epoch))
                        AND NOT EXISTS (SELECT 1 FROM pg_locks
                                         WHERE locktype = 'advisory'
                                           AND database = (SELECT oid FROM pg_database
                                                            WHERE datname = current_database())
                                           AND classid = $2 AND objid = $3 AND objsubid = 1)",
                        self.schema
                    ),
                    &[&id, &class, &obj],
                )
            })
            .map_err(io)?;
        Ok(row.get(0))
    }

    fn release_resolved(&self, lock: HeldLock, key: &str, up_to_token: u64) {
        let session = match lock.downcast::<PgHeld>() {
            Ok(mut held) => held.session.take().map(|s| (s, held.id)),
            Err(other) => {
                drop(other);
                None
            }
        };
        let Some((session, id)) = session else {
            return self.forget(key, up_to_token);
        };
        // The holds' rows go first, then the lock, sent with the session's next statement so
        // that no round trip of the send waits for them (`Idle`): until the lock is given back
        // its holds are gone and it counts as held (a lock with no hold is never judged
        // released), which is no loss for a resolved key. A failure drops the session, which
        // gives the lock back; the rows stay if it came before their deletion committed, as
        // after a crash.
        let sql = format!(
            "{} SELECT pg_advisory_unlock({id})",
            self.forget_sql(key, up_to_token)
        );
        give_back(&self.idle, session, Some(sql));
    }

    fn forget(&self, key: &str, up_to_token: u64) {
        let sql = self.forget_sql(key, up_to_token);
        // On an idle lock session when there is one, leaving the journal's pool to the senders.
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some(Idle {
            mut session, owed, ..
        }) = idle.filter(|i| !i.session.is_broken())
        {
            let sql = owed.map_or_else(|| sql.clone(), |owed| format!("{owed}; {sql}"));
            if session.run(|q| q.batch_execute(&sql)).is_ok() {
                give_back(&self.idle, session, None);
            }
            return;
        }
        if let Ok(mut conn) = self.pool.get() {
            let _ = conn.run(|c| c.batch_execute(&sql));
        }
    }

    fn keeps_silent_holder(&self) -> Option<Duration> {
        Some(SILENT_HOLDER_KEPT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::PgJournal;
    use crate::pool::Manager;

    /// A liveness on a fresh schema of the shared test server, its schema and its settings.
    fn liveness_in(name: &str) -> (String, tokio_postgres::Config, PgLiveness) {
        let (_, schema, config) = PgJournal::on_fresh_schema(name);
        let pool = r2d2::Pool::builder().build_unchecked(Manager {
            config: config.clone(),
        });
        let live = PgLiveness::new(config.clone(), pool, &schema, "default", "test".into());
        (schema, config, live)
    }

    #[test]
    fn holds_are_written_for_locks_taken_only_and_a_resolved_lock_goes_with_its_holds() {
        let (schema, config, live) = liveness_in("holds");
        let id = live.lock_id("k", 1);
        let holds = |c: &mut Conn| {
            c.run(|q| {
                q.query_one(
                    &format!("SELECT count(*) FROM {schema}.holds WHERE lock_id = $1"),
                    &[&id],
                )
            })
            .expect("counted")
            .get::<_, i64>(0)
        };
        let mut other = Conn::open(&config).expect("a connection");
        other
            .run(|q| q.execute("SELECT pg_advisory_lock($1)::text", &[&id]))
            .expect("the lock taken elsewhere");
        let lost = live.try_hold("k", 1).expect("asked");
        assert!(lost.is_none(), "held by another session");
        assert_eq!(holds(&mut other), 0, "a lock not taken writes no hold");
        other
            .run(|q| q.execute("SELECT pg_advisory_unlock($1)::text", &[&id]))
            .expect("given up");
        let held = live.try_hold("k", 1).expect("asked");
        assert!(held.is_some(), "free, so taken");
        assert_eq!(
            holds(&mut other),
            1,
            "its hold is committed once it counts as taken"
        );
        assert!(
            !live.released("k", 1, "").expect("judged"),
            "a lock still held is never judged released"
        );
        drop(held);
        assert!(
            live.released("k", 1, "").expect("judged"),
            "and given back, it is"
        );
        let resolved = live.try_hold("k", 1).expect("asked").expect("free");
        // Each deleted hold notes whether the session deleting it held an advisory lock then.
        other
            .run(|q| {
                q.batch_execute(&format!(
                    "CREATE TABLE {schema}.deleted_by (held boolean);
                     CREATE FUNCTION {schema}.note_delete() RETURNS trigger LANGUAGE plpgsql AS $$
                     BEGIN
                         INSERT INTO {schema}.deleted_by SELECT EXISTS (SELECT 1 FROM pg_locks
                             WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted);
                         RETURN OLD;
                     END $$;
                     CREATE TRIGGER note_delete AFTER DELETE ON {schema}.holds
                         FOR EACH ROW EXECUTE FUNCTION {schema}.note_delete();"
                ))
            })
            .expect("a trigger");
        live.release_resolved(resolved, "k", 1);
        let held_by_other = |c: &mut Conn| {
            let taken: bool = c
                .run(|q| q.query_one("SELECT pg_try_advisory_lock($1)", &[&id]))
                .expect("asked")
                .get(0);
            if taken {
                c.run(|q| q.execute("SELECT pg_advisory_unlock($1)::text", &[&id]))
                    .expect("given up");
            }
            !taken
        };
        assert_eq!(
            (holds(&mut other), held_by_other(&mut other)),
            (1, true),
            "a resolved key's holds and lock stay until its session is used again"
        );
        let next = live.try_hold("k2", 1).expect("asked").expect("free");
        assert_eq!(holds(&mut other), 0, "a resolved key's holds are deleted");
        let deleted: Vec<bool> = other
            .run(|q| q.query(&format!("SELECT held FROM {schema}.deleted_by"), &[]))
            .expect("read")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            deleted,
            [true],
            "by the session holding the lock, before it gave the lock back"
        );
        assert!(
            !held_by_other(&mut other),
            "and its lock is given back with them, ahead of the next lock"
        );
        drop(next);
        assert_eq!(
            live.idle.lock().expect("no panic").len(),
            1,
            "on a session kept for the next lock"
        );
    }

    #[test]
    fn a_resolved_keys_holds_are_deleted_by_the_next_forget_at_once_when_no_session_is_kept_or_on_drop()
     {
        let (schema, config, live) = liveness_in("owed");
        let mut other = Conn::open(&config).expect("a connection");
        let mut holds = || {
            other
                .run(|q| q.query_one(&format!("SELECT count(*) FROM {schema}.holds"), &[]))
                .expect("counted")
                .get::<_, i64>(0)
        };
        // More locks at once than sessions are kept between holds.
        let held: Vec<_> = (0..=IDLE_SESSIONS)
            .map(|i| {
                live.try_hold(&format!("k{i}"), 1)
                    .expect("asked")
                    .expect("free")
            })
            .collect();
        assert_eq!(holds(), i64::try_from(held.len()).expect("a few"));
        for (i, lock) in held.into_iter().enumerate() {
            live.release_resolved(lock, &format!("k{i}"), 1);
        }
        assert_eq!(
            holds(),
            i64::try_from(IDLE_SESSIONS).expect("a few"),
            "the one resolved on a session that is not kept is deleted at once"
        );
        for i in 0..3 {
            live.forget("unrelated", 1);
            assert_eq!(
                holds(),
                i64::try_from(IDLE_SESSIONS - i - 1).expect("a few"),
                "a forget pays what the session it runs on owes"
            );
        }
        drop(live);
        assert_eq!(
            holds(),
            0,
            "and the rest are paid as the liveness is dropped"
        );
    }

    #[test]
    fn a_debt_that_fails_to_be_paid_is_not_the_next_locks_failure() {
        let (schema, config, live) = liveness_in("unpaid");
        let mut other = Conn::open(&config).expect("a connection");
        let resolved = live.try_hold("k", 1).expect("asked").expect("free");
        live.release_resolved(resolved, "k", 1);
        other
            .run(|q| {
                q.batch_execute(&format!(
                    "CREATE FUNCTION {schema}.no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
                     BEGIN RAISE EXCEPTION 'holds are kept'; END $$;
                     CREATE TRIGGER no_delete BEFORE DELETE ON {schema}.holds
                         FOR EACH ROW EXECUTE FUNCTION {schema}.no_delete();"
                ))
            })
            .expect("a trigger");
        let next = live.try_hold("k2", 1).expect("not the debt's failure");
        assert!(next.is_some(), "taken on a fresh session");
        // The session that failed to pay was closed, which gives the resolved key's lock back.
        let id = live.lock_id("k", 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let free: bool = other
                .run(|q| q.query_one("SELECT pg_try_advisory_lock($1)", &[&id]))
                .expect("asked")
                .get(0);
            if free {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the lock was never given back"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
