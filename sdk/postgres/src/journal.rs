//! The journal on PostgreSQL. An append is one READ COMMITTED transaction: it locks the key's
//! row in `effects` (creating it for a new key), reads the key's records, lets the core decide
//! on them — reading any lease with `FOR SHARE`, so a revocation either committed before the
//! decision or waits until it is durable — and inserts what was decided. Appends to one key are
//! serial on every host; `UNIQUE (key, n)` backs the row lock up. An answer, which reads only
//! the key's records, is decided before its transaction and inserted only where the records are
//! still as read (`at_head`).

use std::cell::RefCell;
use std::sync::Arc;

use crate::ahead::{Ahead, AheadSql};
use crate::connect::{self, journal_err, pool_err};
use crate::liveness::PgLiveness;
use crate::pool::{IN_TRANSACTION, MARK_OFF, Manager, Pool, Query, Step};
use crate::schema;
use interlock::approval::{Route, RouteStep, admits};
use interlock::core::limits::Use;
use interlock::journal::store::{self, Import, NewRecord, StoredRecord};
use interlock::journal::{AppendOutcome, Decide, ReadsAhead, Record, TxLeases, Verified};
use interlock::lease::{Grant, LeaseError, StoredGrant};
use interlock::liveness::Liveness;
use interlock::{Clock, EffectKey, Journal, JournalError};
use postgres::types::ToSql;

/// How to open a PostgreSQL journal.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// The PostgreSQL schema that holds the journal's tables (default `interlock`).
    pub schema: String,
    /// The deployment the journal belongs to (default `default`); a schema created for another
    /// deployment is refused.
    pub deployment: String,
    /// Connections kept open for appends and reads (default 16).
    pub pool_size: u32,
    /// Create the schema when it is missing (default); otherwise a missing journal is an error
    /// (for inspection, which must not leave a new empty journal behind).
    pub create: bool,
}

impl PgOptions {
    /// The defaults, with the journal's tables in `schema`.
    pub fn in_schema(schema: impl Into<String>) -> Self {
        Self {
            schema: schema.into(),
            ..Self::default()
        }
    }
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            schema: "interlock".into(),
            deployment: "default".into(),
            pool_size: 16,
            create: true,
        }
    }
}

/// A journal, lease store and liveness on a PostgreSQL server, shared by workers on any number
/// of hosts.
pub struct PgJournal {
    pool: Pool,
    location: String,
    store: String,
    schema: String,
    clock: Arc<dyn Clock>,
    liveness: Arc<PgLiveness>,
    /// Its name of its own ([`Journal::instance`]), once read.
    instance: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for PgJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgJournal")
            .field("location", &self.location)
            .field("schema", &self.schema)
            .finish()
    }
}

impl PgJournal {
    /// Connect to the server at `url` (`postgres://user@host:port/database`; a password in it is
    /// never shown), create the journal's schema if it is missing, and check it if not.
    pub fn open(url: &str, clock: Arc<dyn Clock>, opts: &PgOptions) -> Result<Self, JournalError> {
        let cfg = connect::config(url)?;
        let location = connect::location(&cfg);
        if !schema::valid_name(&opts.schema) {
            return Err(JournalError::Storage {
                path: location,
                what: format!(
                    "schema name {:?} is not usable: lower-case letters, digits and _ only, not \
                     starting with a digit",
                    opts.schema
                ),
            });
        }
        let mut first = postgres::Config::from(cfg.clone())
            .connect(postgres::NoTls)
            .map_err(|e| journal_err(&location, &e))?;
        check_server(&mut first, &location)?;
        schema::ensure(
            &mut first,
            &location,
            &opts.schema,
            &opts.deployment,
            opts.create,
        )?;
        drop(first);
        let mut pool_cfg = cfg.clone();
        // A transaction left open by a worker that was cut off would hold its key's row until the
        // server noticed; these bound that, and a wait for a row lock ends as Busy, not a hang.
        // A commit is acknowledged only once it is on disk (whatever the role or database says),
        // and no statement timeout can cut a commit's wait for a synchronous standby short (the
        // server would then report it committed with only a warning).
        pool_cfg.options(format!(
            "-c idle_in_transaction_session_timeout=10000 -c lock_timeout=10000 \
             -c statement_timeout=0 -c synchronous_commit=on {MARK_OFF}"
        ));
        let pool = r2d2::Pool::builder()
            .max_size(opts.pool_size.max(2))
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(std::time::Duration::from_secs(10))
            .build_unchecked(Manager { config: pool_cfg });
        let place = format!("{location} (advisory locks, schema {})", opts.schema);
        let liveness = Arc::new(PgLiveness::new(
            cfg,
            pool.clone(),
            &opts.schema,
            &opts.deployment,
            place,
        ));
        Ok(Self {
            pool,
            store: format!("{location}#{}", opts.schema),
            location,
            schema: opts.schema.clone(),
            clock,
            liveness,
            instance: std::sync::OnceLock::new(),
        })
    }

    pub(crate) fn conn(&self) -> Result<r2d2::PooledConnection<Manager>, JournalError> {
        self.pool.get().map_err(|e| pool_err(&self.location, &e))
    }

    pub(crate) fn err(&self, e: &postgres::Error) -> JournalError {
        journal_err(&self.location, e)
    }

    pub(crate) fn schema(&self) -> &str {
        &self.schema
    }

    pub(crate) fn location_str(&self) -> &str {
        &self.location
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn select_records(&self) -> String {
        format!(
            "SELECT seq, key, n, kind, at_ms, prev, hash, body FROM {}.records WHERE key = $1 AND n >= $2 ORDER BY n",
            self.schema
        )
    }

    fn rows(&self, q: &mut dyn Query, key: &str) -> Result<Vec<Record>, JournalError> {
        store::decode(&self.location, self.rows_from(q, key, 0)?)
    }

    /// The key's records continuing `seen`, verified once: only what was appended after it is
    /// checked, unless its last record is no longer as seen.
    fn read_on(
        &self,
        q: &mut dyn Query,
        key: &str,
        seen: &Verified,
    ) -> Result<Verified, JournalError> {
        let rows = self.rows_from(q, key, seen.resume_at())?;
        self.read_on_from(q, key, seen, rows)
    }

    /// [`PgJournal::read_on`] with the rows after `seen` already read.
    fn read_on_from(
        &self,
        q: &mut dyn Query,
        key: &str,
        seen: &Verified,
        rows: Vec<StoredRecord>,
    ) -> Result<Verified, JournalError> {
        match store::extend(&self.location, key, seen, rows)? {
            Some(v) => Ok(v),
            None => store::verified(&self.location, key, self.rows_from(q, key, 0)?),
        }
    }

    /// The key's stored rows from position `from` on, in chain order.
    fn rows_from(
        &self,
        q: &mut dyn Query,
        key: &str,
        from: i64,
    ) -> Result<Vec<StoredRecord>, JournalError> {
        let from = i32::try_from(from).unwrap_or(i32::MAX);
        let rows = q
            .query(&self.select_records(), &[&key, &from])
            .map_err(|e| self.err(&e))?;
        Ok(stored_records(&rows))
    }
}

/// Rows of [`PgJournal::select_records`] as the store reads them.
fn stored_records(rows: &[postgres::Row]) -> Vec<StoredRecord> {
    rows.iter()
        .map(|r| StoredRecord {
            seq: r.get(0),
            key: r.get(1),
            n: i64::from(r.get::<_, i32>(2)),
            kind: r.get(3),
            at_ms: r.get(4),
            prev: r.get(5),
            hash: r.get(6),
            body: r.get(7),
        })
        .collect()
}

impl PgJournal {
    /// Record a new grant. Granting an id twice is an error: revoke and grant a new id instead.
    /// A signed approval is recorded only while its group holds the request
    /// ([`interlock::approval::admits`]), with the request's steps share-locked until it commits.
    pub fn grant_lease(&self, grant: &Grant) -> Result<(), LeaseError> {
        let g = StoredGrant::of(grant)?;
        let n = self
            .conn()?
            .run_tx(
                |e| self.err(e),
                |q| {
                    if let Some(a) = &grant.approval {
                        self.lock_request(q, &a.statement.request, false)?;
                        let routes = self.routes_on(q, &a.statement.request, "")?;
                        if let Err(why) = admits(routes.last(), a) {
                            return Ok((Err(LeaseError::Invalid(why)), false));
                        }
                    }
                    let n = q
                        .execute(
                            &format!(
                                "INSERT INTO {}.leases (id, approver, scope, cap_field, cap, granted_ms, expires_ms, revoked_ms, approval)
                                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
                                self.schema
                            ),
                            &[&g.id, &g.approver, &g.scope, &g.cap_field, &g.cap, &g.granted_ms, &g.expires_ms, &g.revoked_ms, &g.approval],
                        )
                        .map_err(|e| self.err(&e))?;
                    Ok((Ok(n), n > 0))
                },
            )
            .map_err(LeaseError::from)??;
        if n == 0 {
            return Err(StoredGrant::exists(&g.id));
        }
        Ok(())
    }

    /// Revoke a lease now. Returns false when no live lease has that id. Once this returns, no
    /// send under the lease is dispatched.
    pub fn revoke_lease(&self, id: &str) -> Result<bool, LeaseError> {
        let now = self.clock.now_ms();
        let n = self
            .conn()?
            .run(|c| {
                c.execute(
                    &format!(
                        "UPDATE {}.leases SET revoked_ms = $2 WHERE id = $1 AND revoked_ms IS NULL",
                        self.schema
                    ),
                    &[&id, &now],
                )
            })
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        Ok(n > 0)
    }

    /// Every grant, oldest first.
    pub fn leases(&self) -> Result<Vec<Grant>, LeaseError> {
        let rows = self
            .conn()?
            .run(|c| {
                c.query(
                    &format!(
                        "SELECT {GRANT_COLUMNS} FROM {}.leases ORDER BY granted_ms, id",
                        self.schema
                    ),
                    &[],
                )
            })
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        rows.iter().map(|r| stored_grant(r).into_grant()).collect()
    }

    pub(crate) fn lease_on(
        &self,
        q: &mut dyn Query,
        id: &str,
        lock: &str,
    ) -> Result<Option<Grant>, LeaseError> {
        let rows = q
            .query(&self.lease_sql(lock), &[&id])
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        self.grant_of(id, &rows)
    }

    /// The statement that reads one lease (parameter: its id), each row locked by `lock`.
    pub(crate) fn lease_sql(&self, lock: &str) -> String {
        format!(
            "SELECT {GRANT_COLUMNS} FROM {}.leases WHERE id = $1 {lock}",
            self.schema
        )
    }

    /// Lease `id` from the rows [`PgJournal::lease_sql`] answered.
    pub(crate) fn grant_of(
        &self,
        id: &str,
        rows: &[postgres::Row],
    ) -> Result<Option<Grant>, LeaseError> {
        match rows {
            [] => Ok(None),
            [row] => stored_grant(row).into_grant().map(Some),
            more => Err(self
                .storage(&format!("lease {id} is stored {} times", more.len()))
                .into()),
        }
    }

    pub(crate) fn lease(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        self.conn()?.run(|c| self.lease_on(c, id, ""))
    }
}

/// Refuse a server that may lose what it acknowledged, or whose clock and this host's disagree
/// by more than a claim's settle margin could absorb (deadlines written on one host are judged on
/// another).
fn check_server(client: &mut postgres::Client, location: &str) -> Result<(), JournalError> {
    let err = |e: postgres::Error| journal_err(location, &e);
    let fsync: String = client.query_one("SHOW fsync", &[]).map_err(err)?.get(0);
    if fsync != "on" {
        return Err(JournalError::Storage {
            path: location.to_owned(),
            what: "the server runs with fsync off: a crash may lose records the gate has acted \
                   on; turn fsync on"
                .into(),
        });
    }
    let before = std::time::SystemTime::now();
    let server_ms: f64 = client
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8",
            &[],
        )
        .map_err(err)?
        .get(0);
    let after = std::time::SystemTime::now();
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let here = (ms(before) + ms(after)) / 2.0;
    let skew = here - server_ms;
    if skew.abs() > MAX_SKEW_MS {
        return Err(JournalError::Storage {
            path: location.to_owned(),
            what: format!(
                "this host's clock is {:.0} ms off the server's (at most {MAX_SKEW_MS:.0} ms is \
                 allowed): claims written here would be judged wrongly on other hosts; sync \
                 the clock (NTP)",
                skew
            ),
        });
    }
    Ok(())
}

/// How far this host's clock may be from the server's.
const MAX_SKEW_MS: f64 = 1000.0;

const GRANT_COLUMNS: &str =
    "id, approver, scope, cap_field, cap, granted_ms, expires_ms, revoked_ms, approval";

fn stored_grant(r: &postgres::Row) -> StoredGrant {
    StoredGrant {
        id: r.get(0),
        approver: r.get(1),
        scope: r.get(2),
        cap_field: r.get(3),
        cap: r.get(4),
        granted_ms: r.get(5),
        expires_ms: r.get(6),
        revoked_ms: r.get(7),
        approval: r.get(8),
    }
}

/// The leases as seen inside an append's transaction, each row share-locked until it commits;
/// a read sent with the transaction's start ([`Ahead`]) is answered from its rows.
struct TxLeaseReader<'a, 'q> {
    journal: &'a PgJournal,
    tx: &'a RefCell<&'q mut dyn Query>,
    ahead: Ahead,
}

impl TxLeases for TxLeaseReader<'_, '_> {
    fn grant(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        if let Some(rows) = self.ahead.grant(id) {
            return self.journal.grant_of(id, &rows);
        }
        let mut tx = self.tx.borrow_mut();
        self.journal.lease_on(&mut **tx, id, "FOR SHARE")
    }

    fn routes(&self, request: &str) -> Result<Vec<Route>, LeaseError> {
        if let Some(rows) = self.ahead.routes(request) {
            return Ok(self.journal.decode_routes(&rows)?);
        }
        let mut tx = self.tx.borrow_mut();
        Ok(self.journal.routes_locked(&mut **tx, request)?)
    }

    fn uses(&self, id: &str) -> Result<Vec<Use>, LeaseError> {
        let mut tx = self.tx.borrow_mut();
        self.journal.uses_in(&mut **tx, id)
    }

    fn set_use(&self, id: &str, key: &str, amount: i64, held: bool) -> Result<(), LeaseError> {
        let mut tx = self.tx.borrow_mut();
        self.journal.set_use_in(&mut **tx, id, key, amount, held)
    }

    fn budgets(&self) -> Result<Vec<interlock::budget::Budget>, LeaseError> {
        if let Some(rows) = self.ahead.budgets() {
            return crate::budgets::budgets_of(&rows);
        }
        let mut tx = self.tx.borrow_mut();
        self.journal.budgets_in(&mut **tx)
    }

    fn budget_holds(
        &self,
        id: &str,
        bucket: &str,
        since_ms: i64,
    ) -> Result<Vec<interlock::budget::Hold>, LeaseError> {
        let mut tx = self.tx.borrow_mut();
        self.journal
            .budget_holds_in(&mut **tx, id, bucket, since_ms)
    }

    fn budget_tally(
        &self,
        id: &str,
        bucket: &str,
        since_ms: i64,
        key: &str,
    ) -> Result<interlock::budget::Tally, LeaseError> {
        let mut tx = self.tx.borrow_mut();
        self.journal
            .budget_tally_in(&mut **tx, id, bucket, since_ms, key)
    }

    fn hold_budget(
        &self,
        id: &str,
        bucket: &str,
        hold: &interlock::budget::Hold,
    ) -> Result<(), LeaseError> {
        let mut tx = self.tx.borrow_mut();
        self.journal.hold_budget_in(&mut **tx, id, bucket, hold)
    }

    fn release_budgets(&self, key: &str) -> Result<(), LeaseError> {
        let mut tx = self.tx.borrow_mut();
        self.journal.release_budgets_in(&mut **tx, key)
    }
}

impl Journal for PgJournal {
    fn location(&self) -> &str {
        &self.location
    }

    fn store_id(&self) -> &str {
        &self.store
    }

    fn instance(&self) -> Result<String, JournalError> {
        if let Some(name) = self.instance.get() {
            return Ok(name.clone());
        }
        let s = &self.schema;
        let row = self
            .conn()?
            .run(|c| {
                c.execute(
                    &format!(
                        "INSERT INTO {s}.meta (name, value) \
                         VALUES ('instance', pg_catalog.gen_random_uuid()::text) \
                         ON CONFLICT (name) DO NOTHING"
                    ),
                    &[],
                )?;
                c.query_one(
                    &format!("SELECT value FROM {s}.meta WHERE name = 'instance'"),
                    &[],
                )
            })
            .map_err(|e| self.err(&e))?;
        let name = format!("journal:{}", row.get::<_, String>(0));
        Ok(self.instance.get_or_init(|| name).clone())
    }

    fn liveness(&self) -> Option<Arc<dyn Liveness>> {
        Some(self.liveness.clone())
    }

    fn history(&self, key: &EffectKey) -> Result<Vec<Record>, JournalError> {
        self.conn()?.run(|c| self.rows(c, key.as_str()))
    }

    fn read_after(&self, key: &EffectKey, seen: &Verified) -> Result<Verified, JournalError> {
        self.conn()?.run(|c| self.read_on(c, key.as_str(), seen))
    }

    fn append_after(
        &self,
        key: &EffectKey,
        seen: &Verified,
        decide: &mut Decide<'_>,
    ) -> Result<AppendOutcome, JournalError> {
        self.append_reading(key, seen, ReadsAhead::default(), decide)
    }

    fn append_reading(
        &self,
        key: &EffectKey,
        seen: &Verified,
        ahead: ReadsAhead<'_>,
        decide: &mut Decide<'_>,
    ) -> Result<AppendOutcome, JournalError> {
        // The key's lock and the records after `seen` go out with the transaction's start, in
        // one round trip, and the reads named ahead after them: each read runs once the lock
        // before it is granted, so it sees everything that committed before.
        let k = key.as_str();
        let from = i32::try_from(seen.resume_at()).unwrap_or(i32::MAX);
        let (lock, read) = (self.lock_key_sql(), self.select_records());
        let on_key: [&(dyn ToSql + Sync); 1] = [&k];
        let after_seen: [&(dyn ToSql + Sync); 2] = [&k, &from];
        let sql = AheadSql::of(self, &ahead);
        let mut first: Vec<Step<'_>> = vec![(&lock, &on_key), (&read, &after_seen)];
        let params = sql.params(&ahead, &k);
        sql.push_steps(&ahead, &params, &mut first);
        self.conn()?.run_tx_opening(
            |e| self.err(e),
            &first,
            |q, rows| {
                let mut rows = rows.into_iter();
                let (Some(locked), Some(after)) = (rows.next(), rows.next()) else {
                    return Err(self.storage("the transaction's first statements"));
                };
                self.one_row(&locked, "the key's lock")?;
                let ahead = Ahead::answered(&ahead, k, rows)
                    .ok_or_else(|| self.storage("the reads sent with the transaction's start"))?;
                self.append_on(q, key, seen, stored_records(&after), ahead, decide)
            },
        )
    }

    fn append_on_records(
        &self,
        key: &EffectKey,
        seen: &Verified,
        decide: &mut Decide<'_>,
    ) -> Result<AppendOutcome, JournalError> {
        match self.append_at_head(key, seen, decide)? {
            Some(out) => Ok(out),
            None => self.append_after(key, seen, decide),
        }
    }

    fn import_history(&self, records: &[Record]) -> Result<Import, JournalError> {
        self.conn()?
            .run_tx(|e| self.err(e), |q| self.import_on(q, records))
    }

    fn keys(&self) -> Result<Vec<String>, JournalError> {
        let rows = self
            .conn()?
            .run(|c| {
                c.query(
                    &format!(
                        "SELECT key FROM {}.records WHERE n = 0 ORDER BY seq",
                        self.schema
                    ),
                    &[],
                )
            })
            .map_err(|e| self.err(&e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// From `effects`, one row per key in its primary key's order, so a page is `limit` steps of
    /// that index however many keys the journal holds. A key's row commits with its first record
    /// (an append or import that inserts nothing rolls it back), so these are the keys with a
    /// record, as [`Journal::keys`] lists them. (A probe of `records` for each row would let the
    /// planner pick a join that reads every key after `after`.)
    fn keys_page(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>, JournalError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Every key is non-empty, so "" starts before the first.
        let after = after.unwrap_or("");
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .conn()?
            .run(|c| {
                c.query(
                    &format!(
                        "SELECT key FROM {}.effects WHERE key > $1 ORDER BY key LIMIT $2",
                        self.schema
                    ),
                    &[&after, &limit],
                )
            })
            .map_err(|e| self.err(&e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn keys_with(&self, kind: &str) -> Result<Vec<String>, JournalError> {
        let rows = self
            .conn()?
            .run(|c| {
                c.query(
                    &format!(
                        "SELECT key FROM {}.records WHERE kind = $1 GROUP BY key ORDER BY min(seq)",
                        self.schema
                    ),
                    &[&kind],
                )
            })
            .map_err(|e| self.err(&e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

impl PgJournal {
    /// Lock the key's row in `effects` (made for a new key) until the transaction ends: every
    /// other append or import of this key, on any host, waits here.
    fn lock_key(&self, q: &mut dyn Query, key: &str) -> Result<(), JournalError> {
        q.query_one(&self.lock_key_sql(), &[&key])
            .map(drop)
            .map_err(|e| self.err(&e))
    }

    /// The key's lock. It goes out with the transaction's start, so it writes only inside the
    /// transaction: were the start to fail, it would otherwise commit a key's row on its own,
    /// with no record in it.
    pub(crate) fn lock_key_sql(&self) -> String {
        let s = &self.schema;
        format!(
            "INSERT INTO {s}.effects (key, n) SELECT $1, 0 WHERE {IN_TRANSACTION}
             ON CONFLICT (key) DO UPDATE SET n = {s}.effects.n RETURNING n"
        )
    }

    /// A statement of a pipeline that must have answered one row.
    pub(crate) fn one_row(&self, rows: &[postgres::Row], what: &str) -> Result<(), JournalError> {
        if rows.len() == 1 {
            Ok(())
        } else {
            Err(self.storage(&format!("{what} answered {} rows, not one", rows.len())))
        }
    }

    pub(crate) fn storage(&self, what: &str) -> JournalError {
        JournalError::Storage {
            path: self.location.clone(),
            what: what.to_owned(),
        }
    }

    /// Inside a transaction: the key's records as exported, if the key is new here. Commits
    /// only what it inserted.
    fn import_on(
        &self,
        q: &mut dyn Query,
        records: &[Record],
    ) -> Result<(Import, bool), JournalError> {
        let Some(first) = records.first() else {
            return Ok((Import::AlreadyThere, false));
        };
        self.lock_key(q, &first.key)?;
        let existing = self.rows(q, &first.key)?;
        let plan = store::check_import(&self.location, records, &existing)?;
        if plan == Import::AlreadyThere {
            return Ok((plan, false));
        }
        let q = RefCell::new(q);
        let leases = TxLeaseReader {
            journal: self,
            tx: &q,
            ahead: Ahead::default(),
        };
        store::insert_imported(&self.location, records, &leases, |r| {
            self.insert(&mut **q.borrow_mut(), r)
        })?;
        let q = q.into_inner();
        let head = i32::try_from(records.len().saturating_sub(1)).unwrap_or(i32::MAX);
        self.set_head(q, &first.key, head)?;
        Ok((plan, true))
    }

    /// One record's row; its `seq`.
    fn insert(&self, q: &mut dyn Query, r: &NewRecord<'_>) -> Result<i64, JournalError> {
        let n = i32::try_from(r.n).map_err(|_| JournalError::Storage {
            path: self.location.clone(),
            what: format!("key {} has too many records", r.key),
        })?;
        let row = q
            .query_one(
                &format!(
                    "INSERT INTO {}.records (key, n, kind, at_ms, prev, hash, body)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq",
                    self.schema
                ),
                &[&r.key, &n, &r.kind, &r.at_ms, &r.prev, &r.hash, &r.body],
            )
            .map_err(|e| self.err(&e))?;
        Ok(row.get(0))
    }

    /// A transaction's new records of one key, and the key's head moved to the last of them, in
    /// one statement sent with the transaction's COMMIT (one round trip); their `seq`s in the
    /// order given.
    fn insert_all_and_commit(
        &self,
        q: &mut dyn Query,
        rows: &[NewRecord<'_>],
    ) -> Result<Vec<i64>, JournalError> {
        let Some(c) = Columns::of(self, rows)? else {
            return Ok(Vec::new());
        };
        // A data-modifying WITH runs to completion even though nothing reads its rows.
        let returned = q
            .query_and_commit(
                &format!(
                    "WITH head AS (UPDATE {s}.effects SET n = $8 WHERE key = $9)
                     INSERT INTO {s}.records (key, n, kind, at_ms, prev, hash, body)
                     SELECT * FROM unnest($1::text[], $2::int4[], $3::text[], $4::int8[],
                                          $5::text[], $6::text[], $7::text[])
                     RETURNING n, seq",
                    s = self.schema
                ),
                &c.params(),
            )
            .map_err(|e| self.err(&e))?;
        c.seqs(self, &returned)
    }

    fn set_head(&self, q: &mut dyn Query, key: &str, head: i32) -> Result<(), JournalError> {
        q.execute(
            &format!("UPDATE {}.effects SET n = $2 WHERE key = $1", self.schema),
            &[&key, &head],
        )
        .map(drop)
        .map_err(|e| self.err(&e))
    }

    /// Inside a transaction: read the key, decide, insert. Commits with the insert when something
    /// was appended; the caller rolls back otherwise.
    fn append_on(
        &self,
        q: &mut dyn Query,
        key: &EffectKey,
        seen: &Verified,
        after: Vec<StoredRecord>,
        ahead: Ahead,
        decide: &mut Decide<'_>,
    ) -> Result<(AppendOutcome, bool), JournalError> {
        let records = self.read_on_from(q, key.as_str(), seen, after)?;
        let q = RefCell::new(q);
        let leases = TxLeaseReader {
            journal: self,
            tx: &q,
            ahead,
        };
        let out = store::decide_and_append(
            &self.location,
            key.as_str(),
            records,
            Some(&leases),
            decide,
            self.clock.now_ms(),
            |rows| self.insert_all_and_commit(&mut **q.borrow_mut(), rows),
        )?;
        let keep = !out.appended.is_empty();
        Ok((out, keep))
    }
}

/// One transaction's new records of a key, as the columns of one INSERT over `unnest`, and the
/// key's head moved to the last of them.
pub(crate) struct Columns<'r> {
    key: Vec<&'r str>,
    n: Vec<i32>,
    kind: Vec<&'r str>,
    at_ms: Vec<i64>,
    prev: Vec<Option<&'r str>>,
    hash: Vec<&'r str>,
    body: Vec<&'r str>,
    head: i32,
    of_key: &'r str,
}

impl<'r> Columns<'r> {
    /// `None` for no rows.
    pub(crate) fn of(
        journal: &PgJournal,
        rows: &'r [NewRecord<'r>],
    ) -> Result<Option<Self>, JournalError> {
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let mut n = Vec::with_capacity(rows.len());
        for r in rows {
            n.push(
                i32::try_from(r.n)
                    .map_err(|_| journal.storage(&format!("key {} has too many records", r.key)))?,
            );
        }
        Ok(Some(Self {
            key: rows.iter().map(|r| r.key).collect(),
            kind: rows.iter().map(|r| r.kind).collect(),
            at_ms: rows.iter().map(|r| r.at_ms).collect(),
            prev: rows.iter().map(|r| r.prev).collect(),
            hash: rows.iter().map(|r| r.hash).collect(),
            body: rows.iter().map(|r| r.body).collect(),
            head: n.iter().copied().max().unwrap_or(0),
            n,
            of_key: first.key,
        }))
    }

    /// `$1` to `$7` the columns, `$8` the new head, `$9` the key.
    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 9] {
        [
            &self.key,
            &self.n,
            &self.kind,
            &self.at_ms,
            &self.prev,
            &self.hash,
            &self.body,
            &self.head,
            &self.of_key,
        ]
    }

    /// The rows' `seq`s in the order given, from the `(n, seq)` rows the insert returned:
    /// matched by position in the chain, whatever order they came back in.
    pub(crate) fn seqs(
        &self,
        journal: &PgJournal,
        returned: &[postgres::Row],
    ) -> Result<Vec<i64>, JournalError> {
        let seq_of: std::collections::HashMap<i32, i64> =
            returned.iter().map(|r| (r.get(0), r.get(1))).collect();
        self.n
            .iter()
            .map(|n| {
                seq_of.get(n).copied().ok_or_else(|| {
                    journal.storage(&format!(
                        "record {n} was inserted but no row came back for it"
                    ))
                })
            })
            .collect()
    }
}

impl interlock::lease::LeaseAdmin for PgJournal {
    fn grant_lease(&self, grant: &Grant) -> Result<(), LeaseError> {
        PgJournal::grant_lease(self, grant)
    }

    fn revoke_lease(&self, id: &str) -> Result<bool, LeaseError> {
        PgJournal::revoke_lease(self, id)
    }

    fn leases(&self) -> Result<Vec<Grant>, LeaseError> {
        PgJournal::leases(self)
    }

    fn route(&self, request: &str, step: &RouteStep) -> Result<Route, LeaseError> {
        PgJournal::route(self, request, step)
    }

    fn routes(&self, request: &str) -> Result<Vec<Route>, LeaseError> {
        PgJournal::routes(self, request)
    }

    fn route_heads(&self) -> Result<Vec<Route>, LeaseError> {
        PgJournal::route_heads(self)
    }

    fn lease_uses(&self, id: &str) -> Result<Vec<Use>, LeaseError> {
        PgJournal::lease_uses(self, id)
    }

    fn set_budget(
        &self,
        budget: &interlock::budget::Budget,
        by: &str,
    ) -> Result<interlock::budget::BudgetChange, LeaseError> {
        PgJournal::set_budget(self, budget, by)
    }

    fn remove_budget(
        &self,
        id: &str,
        by: &str,
    ) -> Result<Option<interlock::budget::BudgetChange>, LeaseError> {
        PgJournal::remove_budget(self, id, by)
    }

    fn budget_changes(&self) -> Result<Vec<interlock::budget::BudgetChange>, LeaseError> {
        PgJournal::budget_changes(self)
    }

    fn budget_places(
        &self,
        id: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, interlock::budget::Hold)>, LeaseError> {
        PgJournal::budget_places(self, id, since_ms)
    }
}

impl interlock::LeaseStore for PgJournal {
    fn check(
        &self,
        id: &str,
        payload: &serde_json::Value,
        now_ms: i64,
    ) -> Result<interlock::core::LeaseVerdict, LeaseError> {
        Ok(interlock::lease::verdict_of(
            self.lease(id)?.as_ref(),
            id,
            payload,
            now_ms,
        ))
    }

    fn describe(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        self.lease(id)
    }

    fn kept_in(&self) -> Option<&str> {
        Some(&self.store)
    }
}

#[cfg(test)]
impl PgJournal {
    /// A journal on a fresh schema (named after `name`) of the shared test server, with that
    /// schema and the server's connection settings.
    pub(crate) fn on_fresh_schema(name: &str) -> (Self, String, tokio_postgres::Config) {
        let cluster = interlock_testkit::pg::Cluster::shared().expect("a PostgreSQL server");
        let schema = cluster.fresh_schema(name);
        let journal = Self::open(
            cluster.url(),
            Arc::new(interlock::SystemClock),
            &PgOptions::in_schema(&schema),
        )
        .expect("a journal");
        let config = crate::connect::config(cluster.url()).expect("its URL");
        (journal, schema, config)
    }
}
