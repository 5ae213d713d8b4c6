//! The journal's connections. A connection the network cut does not always know it is dead until
//! it is used, and the driver may not mark it closed afterwards; so every call that fails marks
//! its connection broken, and the pool drops it instead of handing it out again. Each connection
//! keeps its statements prepared: a query is one round trip, not two. On a server a few
//! processes away, an effect's time is mostly round trips, so a connection can also send
//! statements that need nothing from each other's answers together ([`Query::pipeline`]): the
//! server still runs them one after another, each as a statement of its own.

use std::collections::HashMap;

use interlock::JournalError;
use postgres::types::ToSql;
use postgres::{Row, Statement};
use tokio::runtime::Runtime;
use tokio_postgres::{Client, NoTls};

/// One statement of a pipeline and its parameters.
pub(crate) type Step<'a> = (&'a str, &'a [&'a (dyn ToSql + Sync)]);

/// Queries by SQL text, each prepared once per connection.
pub(crate) trait Query {
    /// Every row.
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error>;
    /// Exactly one row.
    fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error>;
    /// At most one row.
    fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error>;
    /// Rows changed.
    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error>;
    /// Statements sent together, in one round trip, and each one's rows. The server runs them in
    /// order, each as a statement of its own: under READ COMMITTED a statement sees what
    /// committed before it began, so one that follows a lock sees what committed before the lock
    /// was granted. The first failure is returned once every answer is in; inside a transaction
    /// the statements after it fail too (the transaction is aborted), so only use this inside one
    /// or for statements that are safe to run whatever the others did.
    fn pipeline(&mut self, steps: &[Step<'_>]) -> Result<Vec<Vec<Row>>, postgres::Error>;
    /// The rows of `sql`, sent with the transaction's COMMIT in one round trip: `sql` must be
    /// the transaction's last statement. If the server fails it, the transaction is aborted and
    /// the COMMIT ends it as a rollback; if it cannot be sent at all, no COMMIT follows (the
    /// connection, retired for the failure, rolls it back as it closes). The failure is
    /// returned, and either way the transaction is over.
    fn query_and_commit(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error>;
    /// The rows of `read`, sent with `lock` in one round trip: the server runs the read once the
    /// lock is granted, so it sees every change committed before.
    fn read_under(&mut self, lock: Step<'_>, read: Step<'_>) -> Result<Vec<Row>, postgres::Error> {
        let mut answers = self.pipeline(&[lock, read])?;
        Ok(answers.pop().unwrap_or_default())
    }
}

/// A connection's client with its prepared statements, and the runtime that drives it.
pub(crate) struct Cached<'a> {
    rt: &'a Runtime,
    c: &'a Client,
    statements: &'a mut HashMap<String, Statement>,
    /// Set once a statement ended the transaction ([`Query::query_and_commit`]).
    ended: bool,
}

impl Cached<'_> {
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        // Outside the transaction it would commit on its own: a caller's bug, caught by tests.
        debug_assert!(
            !self.ended,
            "a statement after its transaction's last: {sql}"
        );
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        // Prepared statements belong to the session, not the transaction: one prepared inside a
        // transaction that later rolls back stays usable.
        let s = self.rt.block_on(self.c.prepare(sql))?;
        self.statements.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Statements without parameters, sent together in one round trip (the simple protocol).
    pub(crate) fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        debug_assert!(
            !self.ended,
            "a statement after its transaction's last: {sql}"
        );
        self.rt.block_on(self.c.batch_execute(sql))
    }
}

impl Query for Cached<'_> {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.rt.block_on(self.c.query(&s, params))
    }

    fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        let s = self.statement(sql)?;
        self.rt.block_on(self.c.query_one(&s, params))
    }

    fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.rt.block_on(self.c.query_opt(&s, params))
    }

    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        let s = self.statement(sql)?;
        self.rt.block_on(self.c.execute(&s, params))
    }

    fn pipeline(&mut self, steps: &[Step<'_>]) -> Result<Vec<Vec<Row>>, postgres::Error> {
        self.sent_together(None, steps)
    }

    fn query_and_commit(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let mut answers = self.committed_with(None, &[(sql, params)])?;
        Ok(answers.pop().unwrap_or_default())
    }
}

impl Cached<'_> {
    /// Each step's statement, prepared first (a round trip each, once per connection), so that
    /// the statements themselves can go out together.
    fn prepared(&mut self, steps: &[Step<'_>]) -> Result<Vec<Statement>, postgres::Error> {
        steps.iter().map(|(sql, _)| self.statement(sql)).collect()
    }

    /// `steps`, after `simple` if given (the simple protocol), and the transaction's COMMIT,
    /// sent together in one round trip; the transaction is over either way. A step the server
    /// fails aborts the transaction, and the COMMIT ends it as a rollback. A step the driver
    /// cannot send at all (parameters it cannot encode) is followed by no COMMIT: the
    /// connection, retired for the failure, rolls the transaction back as it closes. The first
    /// failure is returned: `simple`'s, then the steps' in order, then the COMMIT's.
    fn committed_with(
        &mut self,
        simple: Option<&str>,
        steps: &[Step<'_>],
    ) -> Result<Vec<Vec<Row>>, postgres::Error> {
        use futures::future::maybe_done;
        let prepared = self.prepared(steps)?;
        let commit = self.statement("COMMIT")?;
        self.ended = true;
        let c = self.c;
        self.rt.block_on(async {
            let mut before = Box::pin(maybe_done(simple_first(c, simple)));
            let mut queries: Vec<_> = prepared
                .iter()
                .zip(steps)
                .map(|(s, (_, params))| Box::pin(maybe_done(c.query(s, params))))
                .collect();
            // The first poll sends each request in order, or fails before sending anything;
            // an answer cannot be in yet (the connection's task has not run), so an error now
            // is one of sending, and no COMMIT may follow it.
            let _ = futures::poll!(before.as_mut());
            if let Some(e) = failed(before.as_mut()) {
                return Err(e);
            }
            for q in &mut queries {
                let _ = futures::poll!(q.as_mut());
                if let Some(e) = failed(q.as_mut()) {
                    return Err(e);
                }
            }
            let mut committed = Box::pin(maybe_done(c.query(&commit, &[])));
            futures::join!(
                before.as_mut(),
                futures::future::join_all(queries.iter_mut().map(|q| q.as_mut())),
                committed.as_mut()
            );
            before.as_mut().take_output().unwrap_or(Ok(()))?;
            let mut answers = Vec::with_capacity(queries.len());
            for q in &mut queries {
                answers.push(q.as_mut().take_output().unwrap_or_else(|| Ok(Vec::new()))?);
            }
            committed
                .as_mut()
                .take_output()
                .unwrap_or_else(|| Ok(Vec::new()))?;
            Ok(answers)
        })
    }

    /// [`Query::pipeline`], after `simple` if given (statements without parameters, the simple
    /// protocol) in the same round trip; its failure comes first.
    pub(crate) fn sent_together(
        &mut self,
        simple: Option<&str>,
        steps: &[Step<'_>],
    ) -> Result<Vec<Vec<Row>>, postgres::Error> {
        // The driver sends a request when its future is first polled, join! polls its futures
        // in order, and join_all polls every query before waiting for any answer.
        let prepared = self.prepared(steps)?;
        let c = self.c;
        let before = simple_first(c, simple);
        let queries = futures::future::join_all(
            prepared
                .iter()
                .zip(steps)
                .map(|(s, (_, params))| c.query(s, params)),
        );
        let (before, answers) = self.rt.block_on(async { futures::join!(before, queries) });
        before?;
        answers.into_iter().collect()
    }
}

/// Statements without parameters sent ahead of a pipeline, if any (the simple protocol).
async fn simple_first(c: &Client, simple: Option<&str>) -> Result<(), postgres::Error> {
    match simple {
        Some(sql) => c.batch_execute(sql).await,
        None => Ok(()),
    }
}

/// The error of a step that has already failed, taken out of it; `None` while it has not.
fn failed<T, F: std::future::Future<Output = Result<T, postgres::Error>>>(
    mut f: std::pin::Pin<&mut futures::future::MaybeDone<F>>,
) -> Option<postgres::Error> {
    if matches!(f.as_mut().output_mut(), Some(Err(_))) {
        f.take_output().and_then(Result::err)
    } else {
        None
    }
}

/// A pooled connection: the driver's client, the runtime its socket is driven on, its prepared
/// statements, and whether a call on it failed.
pub(crate) struct Conn {
    rt: Runtime,
    client: Client,
    statements: HashMap<String, Statement>,
    broken: bool,
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// The server refused it or could not be reached.
    #[error(transparent)]
    Server(#[from] postgres::Error),
    /// This process could not make the runtime that drives its socket.
    #[error("cannot start the runtime that drives a PostgreSQL connection: {0}")]
    Runtime(std::io::Error),
    /// A statement that always answers a row answered none.
    #[error("the server answered no row for {0}")]
    Unanswered(&'static str),
}

/// What [`Conn::run_tx`] sends first, in one message: the start of the transaction, and a mark
/// that only a statement inside it sees ([`IN_TRANSACTION`]). If the start failed, the rest of
/// the message is skipped.
const START: &str = "START TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                     SET LOCAL interlock.in_transaction = 'on'";

/// A condition true only inside a transaction [`Conn::run_tx`] started. Statements sent together
/// with the start run even if the start failed, outside any transaction, each committing on its
/// own: one of them that writes must write only where this holds, and so writes nothing then.
pub(crate) const IN_TRANSACTION: &str =
    "pg_catalog.current_setting('interlock.in_transaction', true) = 'on'";

/// The mark's value at the start of every session of the journal ([`IN_TRANSACTION`]): a role's
/// or database's default cannot turn it on outside a transaction.
pub(crate) const MARK_OFF: &str = "-c interlock.in_transaction=off";

impl Conn {
    /// A connection of its own, outside the pool (a liveness lock's session). Its socket is
    /// read only while a call on it runs, as the `postgres` crate's are.
    pub(crate) fn open(config: &tokio_postgres::Config) -> Result<Self, ConnError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ConnError::Runtime)?;
        let (client, connection) = rt.block_on(config.connect(NoTls))?;
        rt.spawn(async move {
            // An error the server sent while no call was waiting (a FATAL such as the end of
            // an idle transaction, or a socket that timed out) reaches no caller: the next call
            // only finds the connection closed, and is answered Unavailable.
            if let Err(e) = connection.await {
                tracing::warn!(
                    error = %e,
                    sqlstate = e.code().map_or("", |c| c.code()),
                    "a PostgreSQL connection of the journal ended"
                );
            }
        });
        Ok(Self {
            rt,
            client,
            statements: HashMap::new(),
            broken: false,
        })
    }

    fn cached(&mut self) -> Cached<'_> {
        Cached {
            rt: &self.rt,
            c: &self.client,
            statements: &mut self.statements,
            ended: false,
        }
    }

    /// Whether a call failed on it or the driver saw it close.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken || self.is_closed()
    }

    /// Whether the driver saw it close (the server or the network ended it).
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Run `f` on the connection; any failure retires the connection.
    pub(crate) fn run<T, E>(
        &mut self,
        f: impl FnOnce(&mut Cached<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let out = f(&mut self.cached());
        if out.is_err() {
            self.broken = true;
        }
        out
    }

    /// A whole transaction in one round trip: its start, `steps` and its COMMIT, sent together,
    /// and each step's rows. Every step that writes must write only [`IN_TRANSACTION`]: if the
    /// start failed, the steps run on their own. Any failure (or a panic) retires the
    /// connection, and the transaction is over; whether it committed is not known when the
    /// failure came after the COMMIT was sent (its answer lost), so a failure is never a sign
    /// that nothing was written.
    pub(crate) fn run_tx_whole(
        &mut self,
        steps: &[Step<'_>],
    ) -> Result<Vec<Vec<Row>>, postgres::Error> {
        self.broken = true;
        let rows = self.cached().committed_with(Some(START), steps)?;
        self.broken = false;
        Ok(rows)
    }

    /// Run `f` in a READ COMMITTED transaction (whatever the server's default: each statement
    /// must see what committed before it, which the route lock relies on), committed when `f`
    /// says so and rolled back otherwise (or on any error, which also retires the connection).
    pub(crate) fn run_tx<T>(
        &mut self,
        err: impl Fn(&postgres::Error) -> JournalError,
        f: impl FnOnce(&mut Cached<'_>) -> Result<(T, bool), JournalError>,
    ) -> Result<T, JournalError> {
        self.run_tx_opening(err, &[], |q, _| f(q))
    }

    /// [`Conn::run_tx`], with `first` sent together with the transaction's start and their rows
    /// handed to `f`: a transaction that begins by taking a lock and reading what it guards
    /// costs one round trip for the three. If `f` ended the transaction with its last statement
    /// ([`Query::query_and_commit`]), nothing more is sent.
    pub(crate) fn run_tx_opening<T>(
        &mut self,
        err: impl Fn(&postgres::Error) -> JournalError,
        first: &[Step<'_>],
        f: impl FnOnce(&mut Cached<'_>, Vec<Vec<Row>>) -> Result<(T, bool), JournalError>,
    ) -> Result<T, JournalError> {
        // Broken until the transaction has ended: a failure or a panic anywhere in it retires
        // the connection, and closing it rolls the transaction back on the server.
        self.broken = true;
        let mut q = self.cached();
        let rows = q.sent_together(Some(START), first).map_err(|e| err(&e))?;
        let (t, keep) = f(&mut q, rows)?;
        if !q.ended {
            q.batch_execute(if keep { "COMMIT" } else { "ROLLBACK" })
                .map_err(|e| err(&e))?;
        }
        self.broken = false;
        Ok(t)
    }
}

/// Opens connections with the journal's settings.
#[derive(Debug)]
pub(crate) struct Manager {
    pub(crate) config: tokio_postgres::Config,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = ConnError;

    fn connect(&self) -> Result<Conn, ConnError> {
        Conn::open(&self.config)
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), ConnError> {
        conn.rt
            .block_on(conn.client.simple_query(""))
            .map(drop)
            .map_err(ConnError::from)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.is_broken()
    }
}

/// The pool.
pub(crate) type Pool = r2d2::Pool<Manager>;

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn server() -> (
        &'static interlock_testkit::pg::Cluster,
        tokio_postgres::Config,
    ) {
        let cluster = interlock_testkit::pg::Cluster::shared().expect("a PostgreSQL server");
        let cfg = crate::connect::config(cluster.url()).expect("its URL");
        (cluster, cfg)
    }

    /// The error with its SQLSTATE, if the server sent one.
    fn storage(e: &postgres::Error) -> JournalError {
        JournalError::Storage {
            path: "test".into(),
            what: format!("{e} {}", e.code().map_or("", |c| c.code())),
        }
    }

    /// A connection and a fresh schema `name`_… holding an empty table `t (x int)`.
    fn with_table(name: &str) -> (tokio_postgres::Config, Conn, String) {
        let (cluster, cfg) = server();
        let schema = cluster.fresh_schema(name);
        let mut c = Conn::open(&cfg).expect("a connection");
        c.run(|q| {
            q.batch_execute(&format!(
                "CREATE SCHEMA {schema}; CREATE TABLE {schema}.t (x int)"
            ))
        })
        .expect("a table");
        (cfg, c, schema)
    }

    /// The rows of `schema`.t that another session sees.
    fn committed_rows(cfg: &tokio_postgres::Config, schema: &str) -> i64 {
        let mut other = Conn::open(cfg).expect("a connection");
        other
            .run(|q| q.query_one(&format!("SELECT count(*) FROM {schema}.t"), &[]))
            .expect("counted")
            .get(0)
    }

    /// A transaction that inserts a row into `schema`.t, then sends `INSERT INTO … {last}`, with
    /// no parameters, together with the COMMIT.
    fn one_row_then_commit_with(
        c: &mut Conn,
        schema: &str,
        last: &str,
    ) -> Result<(), JournalError> {
        c.run_tx_opening(
            storage,
            &[(&format!("INSERT INTO {schema}.t VALUES (1)"), &[])],
            |q, _| {
                q.query_and_commit(&format!("INSERT INTO {schema}.t {last}"), &[])
                    .map_err(|e| storage(&e))?;
                Ok(((), true))
            },
        )
    }

    #[test]
    fn a_read_sent_with_a_lock_sees_what_committed_while_the_lock_was_awaited() {
        let (cluster, cfg) = server();
        let schema = cluster.fresh_schema("pool");
        let t = format!("{schema}.rows");
        let mut holder = Conn::open(&cfg).expect("a connection");
        holder
            .run(|q| q.batch_execute(&format!("CREATE SCHEMA {schema}; CREATE TABLE {t} (x int)")))
            .expect("a table");
        holder
            .run(|q| {
                q.batch_execute(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock(7070); INSERT INTO {t} VALUES (1)"
                ))
            })
            .expect("the lock held and a row written, uncommitted");
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn({
            let (cfg, t) = (cfg.clone(), t.clone());
            move || {
                let mut c = Conn::open(&cfg).expect("a connection");
                let seen = c.run_tx_opening(
                    storage,
                    &[
                        ("SELECT pg_advisory_xact_lock_shared(7070)::text", &[]),
                        (&format!("SELECT count(*) FROM {t}"), &[]),
                    ],
                    |_, rows| Ok((rows[1][0].get::<_, i64>(0), false)),
                );
                tx.send(seen).expect("the test waits");
            }
        });
        // The pipeline is sent and waiting on the lock; only then does the row commit.
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
        holder
            .run(|q| q.batch_execute("COMMIT"))
            .expect("committed");
        let seen = rx.recv_timeout(Duration::from_secs(10)).expect("an answer");
        assert_eq!(
            seen.expect("no error"),
            1,
            "the read saw the row committed before it"
        );
        reader.join().expect("the reader ends");
    }

    #[test]
    fn a_failed_statement_fails_its_pipeline_and_retires_the_connection_with_its_transaction() {
        let (_, cfg) = server();
        let mut c = Conn::open(&cfg).expect("a connection");
        let failed = c.run_tx_opening(
            storage,
            &[("SELECT 1", &[]), ("SELECT 1 / 0", &[]), ("SELECT 3", &[])],
            |_, _| Ok(((), true)),
        );
        let Err(JournalError::Storage { what, .. }) = failed else {
            panic!("the division by zero is the answer: {failed:?}");
        };
        assert!(what.ends_with("22012"), "division by zero: {what}");
        assert!(c.is_broken(), "a failed transaction retires its connection");
        let mut fresh = Conn::open(&cfg).expect("a connection");
        let answers = fresh
            .run(|q| q.pipeline(&[("SELECT 1::int4", &[]), ("SELECT $1::int4 + 1", &[&41_i32])]))
            .expect("both answered");
        let got: Vec<i32> = answers.iter().map(|rows| rows[0].get(0)).collect();
        assert_eq!(got, [1, 42], "each statement's rows, in the order sent");
        assert!(!fresh.is_broken());
    }

    #[test]
    fn a_write_guarded_by_in_transaction_writes_only_inside_a_started_transaction() {
        let (cfg, mut c, schema) = with_table("guard");
        let insert = format!("INSERT INTO {schema}.t SELECT 1 WHERE {IN_TRANSACTION} RETURNING x");
        let outside = c.run(|q| q.query(&insert, &[])).expect("answered");
        assert!(
            outside.is_empty(),
            "outside a transaction it writes nothing"
        );
        let after_one = c
            .run(|q| q.batch_execute("BEGIN; SET LOCAL interlock.in_transaction = 'on'; COMMIT"))
            .and_then(|()| c.run(|q| q.query(&insert, &[])))
            .expect("answered");
        assert!(after_one.is_empty(), "the mark ends with its transaction");
        let inside = c
            .run_tx_opening(storage, &[(&insert, &[])], |_, rows| {
                Ok((rows[0].len(), true))
            })
            .expect("committed");
        assert_eq!(inside, 1, "sent with the start, it writes");
        assert_eq!(committed_rows(&cfg, &schema), 1);
    }

    #[test]
    fn a_role_that_turns_the_mark_on_by_default_does_not_turn_it_on_for_the_journal() {
        let (cluster, cfg) = server();
        let role = cluster.fresh_schema("marked");
        let mut admin = Conn::open(&cfg).expect("a connection");
        admin
            .run(|q| {
                q.batch_execute(&format!(
                    "CREATE ROLE {role} LOGIN PASSWORD 'pw'; \
                     ALTER ROLE {role} SET interlock.in_transaction = 'on'"
                ))
            })
            .expect("a role whose sessions start with the mark on");
        let mut as_role = crate::connect::config(&cluster.url_as(&role, "pw")).expect("its URL");
        let mark = format!("SELECT {IN_TRANSACTION}");
        let mut plain = Conn::open(&as_role).expect("a connection");
        let on = plain.run(|q| q.query_one(&mark, &[])).expect("read");
        assert!(on.get::<_, bool>(0), "the role's default alone turns it on");
        as_role.options(MARK_OFF);
        let mut journal = Conn::open(&as_role).expect("a connection");
        let on = journal.run(|q| q.query_one(&mark, &[])).expect("read");
        assert!(
            !on.get::<_, bool>(0),
            "the journal's sessions start with it off"
        );
        drop((plain, journal));
        // Best effort: a server of the caller's (INTERLOCK_DATABASE_URL) keeps no test role.
        let _ = admin.run(|q| q.batch_execute(&format!("DROP ROLE {role}")));
    }

    #[test]
    fn a_statement_sent_with_the_commit_ends_its_transaction_committed() {
        let (cfg, mut c, schema) = with_table("commit_with");
        let mark = format!("SELECT {IN_TRANSACTION}");
        let inserted = c
            .run_tx_opening(
                storage,
                &[(&format!("INSERT INTO {schema}.t VALUES (1)"), &[])],
                |q, _| {
                    let inside: bool = q.query_one(&mark, &[]).expect("read").get(0);
                    assert!(inside, "still inside the transaction");
                    let rows = q
                        .query_and_commit(
                            &format!("INSERT INTO {schema}.t VALUES (2) RETURNING x"),
                            &[],
                        )
                        .map_err(|e| storage(&e))?;
                    Ok((rows.len(), true))
                },
            )
            .expect("committed");
        assert_eq!(inserted, 1, "the last statement's rows");
        assert!(
            !c.is_broken(),
            "a committed transaction keeps its connection"
        );
        let inside: bool = c.run(|q| q.query_one(&mark, &[])).expect("read").get(0);
        assert!(
            !inside,
            "nothing is left open after the commit sent with the statement"
        );
        let count = committed_rows(&cfg, &schema);
        assert_eq!(count, 2, "both rows committed, seen from another session");
    }

    #[test]
    fn a_failed_statement_sent_with_the_commit_rolls_its_whole_transaction_back() {
        let (cfg, mut c, schema) = with_table("commit_fail");
        let failed = one_row_then_commit_with(&mut c, &schema, "VALUES (1 / 0)");
        let Err(JournalError::Storage { what, .. }) = failed else {
            panic!("the division by zero is the answer: {failed:?}");
        };
        assert!(what.ends_with("22012"), "division by zero: {what}");
        assert!(c.is_broken(), "a failed transaction retires its connection");
        let count = committed_rows(&cfg, &schema);
        assert_eq!(count, 0, "the first statement's row was rolled back too");
    }

    #[test]
    fn a_statement_that_cannot_be_sent_sends_no_commit_after_it() {
        let (cfg, mut c, schema) = with_table("commit_unsent");
        // One parameter short: the driver refuses it before anything is sent.
        let failed = one_row_then_commit_with(&mut c, &schema, "VALUES ($1)");
        assert!(failed.is_err(), "{failed:?}");
        assert!(c.is_broken(), "a failed transaction retires its connection");
        drop(c);
        let count = committed_rows(&cfg, &schema);
        assert_eq!(count, 0, "the transaction's first row was never committed");
    }

    #[test]
    fn a_panic_inside_a_transaction_leaves_its_connection_retired() {
        let (_, cfg) = server();
        let mut c = Conn::open(&cfg).expect("a connection");
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _: Result<(), _> = c.run_tx(storage, |_| panic!("a bug in the caller"));
        }));
        assert!(unwound.is_err());
        assert!(
            c.is_broken(),
            "never handed out again with its transaction open"
        );
    }
}
