//! The journal's connections. A connection the network cut does not always know it is dead until
//! it is used, and the driver may not mark it closed afterwards; so every call that fails marks
//! its connection broken, and the pool drops it instead of handing it out again. Each connection
//! keeps its statements prepared: a query is one round trip, not two.

use std::collections::HashMap;

use interlock::JournalError;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Row, Statement};

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
}

/// A client (or a transaction on it) with its connection's prepared statements.
pub(crate) struct Cached<'a, C> {
    c: &'a mut C,
    statements: &'a mut HashMap<String, Statement>,
}

impl<C: GenericClient> Cached<'_, C> {
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        // Prepared statements belong to the session, not the transaction: one prepared inside a
        // transaction that later rolls back stays usable.
        let s = self.c.prepare(sql)?;
        self.statements.insert(sql.to_owned(), s.clone());
        Ok(s)
    }
}

impl<C: GenericClient> Cached<'_, C> {
    /// Statements without parameters, sent together in one round trip (the simple protocol).
    pub(crate) fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.c.batch_execute(sql)
    }
}

impl<C: GenericClient> Query for Cached<'_, C> {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.c.query(&s, params)
    }

    fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        let s = self.statement(sql)?;
        self.c.query_one(&s, params)
    }

    fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.c.query_opt(&s, params)
    }

    fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        let s = self.statement(sql)?;
        self.c.execute(&s, params)
    }
}

/// A pooled connection, its prepared statements, and whether a call on it failed.
pub(crate) struct Conn {
    client: Client,
    statements: HashMap<String, Statement>,
    broken: bool,
}

impl Conn {
    /// A connection of its own, outside the pool (a liveness lock's session).
    pub(crate) fn open(config: &postgres::Config) -> Result<Self, postgres::Error> {
        Ok(Self {
            client: config.connect(NoTls)?,
            statements: HashMap::new(),
            broken: false,
        })
    }

    /// Whether a call failed on it or the driver saw it close.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken || self.client.is_closed()
    }

    /// Run `f` on the connection; any failure retires the connection.
    pub(crate) fn run<T, E>(
        &mut self,
        f: impl FnOnce(&mut Cached<'_, Client>) -> Result<T, E>,
    ) -> Result<T, E> {
        let out = f(&mut Cached {
            c: &mut self.client,
            statements: &mut self.statements,
        });
        if out.is_err() {
            self.broken = true;
        }
        out
    }

    /// Run `f` in a READ COMMITTED transaction (whatever the server's default: each statement
    /// must see what committed before it, which the route lock relies on), committed when `f`
    /// says so and rolled back otherwise (or on any error, which also retires the connection).
    pub(crate) fn run_tx<T>(
        &mut self,
        err: impl Fn(&postgres::Error) -> JournalError,
        f: impl FnOnce(&mut Cached<'_, postgres::Transaction<'_>>) -> Result<(T, bool), JournalError>,
    ) -> Result<T, JournalError> {
        let statements = &mut self.statements;
        let out = self
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::ReadCommitted)
            .start()
            .map_err(|e| err(&e))
            .and_then(|mut tx| {
                let (t, keep) = f(&mut Cached {
                    c: &mut tx,
                    statements,
                })?;
                if keep { tx.commit() } else { tx.rollback() }.map_err(|e| err(&e))?;
                Ok(t)
            });
        if out.is_err() {
            self.broken = true;
        }
        out
    }
}

/// Opens connections with the journal's settings.
#[derive(Debug)]
pub(crate) struct Manager {
    pub(crate) config: postgres::Config,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Conn, postgres::Error> {
        Conn::open(&self.config)
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(drop)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.is_broken()
    }
}

/// The pool.
pub(crate) type Pool = r2d2::Pool<Manager>;
