//! Requests' routes on PostgreSQL. Steps are only ever inserted, and a row lock cannot order an
//! insert (a reader blocked on an old row, once released, still does not see the new one; a
//! request with no rows has nothing to lock). So each request has a transaction-scoped advisory
//! lock: the append that writes a send's record takes it shared in a statement of its own before
//! it reads the steps (its read then sees every step committed before it got the lock), and a new
//! step takes it exclusively. An escalation therefore waits for a dispatch that read the old
//! group to commit, and once it returns no send under that group's approval is dispatched.

use interlock::JournalError;
use interlock::approval::{Route, RouteStep, StoredRoute, next_step};
use interlock::lease::LeaseError;

use crate::journal::PgJournal;
use crate::pool::Query;

impl PgJournal {
    /// Append `step` to `request`'s route ([`interlock::approval::next_step`]).
    pub fn route(&self, request: &str, step: &RouteStep) -> Result<Route, LeaseError> {
        let now = self.now_ms();
        self.conn()?
            .run_tx(
                |e| self.err(e),
                |q| {
                    self.lock_request(q, request, true)?;
                    let routes = self.routes_on(q, request, "")?;
                    let n = match next_step(request, routes.last(), step) {
                        Ok(Some(there)) => return Ok((Ok(there.clone()), false)),
                        Ok(None) => routes.len(),
                        Err(why) => return Ok((Err(LeaseError::Invalid(why)), false)),
                    };
                    let (Ok(n32), Ok(level)) = (i32::try_from(n), i32::try_from(step.level)) else {
                        return Ok((
                            Err(LeaseError::Invalid(format!(
                                "request {request}: level {} is out of range",
                                step.level
                            ))),
                            false,
                        ));
                    };
                    q.execute(
                        &format!(
                            "INSERT INTO {}.routes (request, n, kind, level, group_name, reason, \
                             repair_of, detail, at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                            self.schema()
                        ),
                        &[
                            &request,
                            &n32,
                            &step.kind.label(),
                            &level,
                            &step.group,
                            &step.reason,
                            &step.repair_of,
                            &step.detail.to_string(),
                            &now,
                        ],
                    )
                    .map_err(|e| self.err(&e))?;
                    let route = Route {
                        request: request.to_owned(),
                        n: u32::try_from(n).unwrap_or(u32::MAX),
                        step: step.clone(),
                        at_ms: now,
                    };
                    Ok((Ok(route), true))
                },
            )
            .map_err(LeaseError::from)?
    }

    /// `request`'s route, first step first.
    pub fn routes(&self, request: &str) -> Result<Vec<Route>, LeaseError> {
        let mut conn = self.conn()?;
        conn.run(|q| self.routes_on(q, request, ""))
            .map_err(LeaseError::from)
    }

    /// Take `request`'s route lock for the rest of the transaction: `exclusive` to add a step,
    /// shared to read the steps a decision stands on. Its own statement, so the reads after it
    /// see everything committed before it was granted.
    pub(crate) fn lock_request(
        &self,
        q: &mut dyn Query,
        request: &str,
        exclusive: bool,
    ) -> Result<(), JournalError> {
        q.execute(&lock_request_sql(exclusive), &[&ROUTE_LOCKS, &request])
            .map(drop)
            .map_err(|e| self.err(&e))
    }

    /// The request's steps, read under its shared lock until the transaction ends
    /// ([`Query::read_under`]).
    pub(crate) fn routes_locked(
        &self,
        q: &mut dyn Query,
        request: &str,
    ) -> Result<Vec<Route>, JournalError> {
        let (lock, read) = self.routes_locked_sql();
        let rows = q
            .read_under((&lock, &[&ROUTE_LOCKS, &request]), (&read, &[&request]))
            .map_err(|e| self.err(&e))?;
        self.decode_routes(&rows)
    }

    /// The statements of [`PgJournal::routes_locked`]: the request's shared lock (parameters
    /// [`ROUTE_LOCKS`] and the request), then its steps (the request).
    pub(crate) fn routes_locked_sql(&self) -> (String, String) {
        (lock_request_sql(false), self.routes_sql(""))
    }

    /// The latest step of every request, oldest request first.
    pub fn route_heads(&self) -> Result<Vec<Route>, LeaseError> {
        let mut conn = self.conn()?;
        let sql = format!(
            "SELECT n, kind, level, group_name, reason, repair_of, detail, at_ms, request \
             FROM {s}.routes r WHERE n = (SELECT MAX(n) FROM {s}.routes WHERE request = r.request) \
             ORDER BY at_ms, request",
            s = self.schema()
        );
        let rows = conn
            .run(|q| q.query(&sql, &[]))
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        Ok(self.decode_routes(&rows)?)
    }

    /// `request`'s steps, each row locked by `lock` (`FOR SHARE`, `FOR UPDATE` or nothing).
    pub(crate) fn routes_on(
        &self,
        q: &mut dyn Query,
        request: &str,
        lock: &str,
    ) -> Result<Vec<Route>, JournalError> {
        let rows = q
            .query(&self.routes_sql(lock), &[&request])
            .map_err(|e| self.err(&e))?;
        self.decode_routes(&rows)
    }

    fn routes_sql(&self, lock: &str) -> String {
        format!(
            "SELECT n, kind, level, group_name, reason, repair_of, detail, at_ms, request \
             FROM {}.routes WHERE request = $1 ORDER BY n {lock}",
            self.schema()
        )
    }

    pub(crate) fn decode_routes(&self, rows: &[postgres::Row]) -> Result<Vec<Route>, JournalError> {
        rows.iter()
            .map(|r| {
                let row = StoredRoute {
                    n: i64::from(r.get::<_, i32>(0)),
                    kind: r.get(1),
                    level: i64::from(r.get::<_, i32>(2)),
                    group: r.get(3),
                    reason: r.get(4),
                    repair_of: r.get(5),
                    detail: r.get(6),
                    at_ms: r.get(7),
                    request: r.get(8),
                };
                let place = format!("route {} of request {}", row.n, row.request);
                row.into_route().map_err(|what| JournalError::Corrupt {
                    path: self.location_str().to_owned(),
                    place,
                    what,
                })
            })
            .collect()
    }
}

/// The first key of every route lock.
pub(crate) const ROUTE_LOCKS: i32 = 0x1c7e_0001;

/// The statement that takes a request's lock (the two-key form: a key space of its own, apart
/// from the liveness locks' one-key form).
fn lock_request_sql(exclusive: bool) -> String {
    let f = if exclusive {
        "pg_advisory_xact_lock"
    } else {
        "pg_advisory_xact_lock_shared"
    };
    format!("SELECT {f}($1, hashtext($2))::text")
}
