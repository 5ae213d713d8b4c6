//! Leases kept in the journal's own file, so a grant, a revocation and the dispatch that checks
//! them are all on the same disk under the same locks.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::TxLeases;
use super::sqlite::SqliteJournal;
use crate::approval::{Route, RouteStep, StoredRoute, admits, next_step};
use crate::core::LeaseVerdict;
use crate::core::limits::Use;
use crate::journal::{Journal, JournalError};
use crate::lease::{Grant, LeaseError, LeaseStore, StoredGrant, verdict_of};

impl SqliteJournal {
    /// Record a new grant. Granting an id twice is an error: revoke and grant a new id instead.
    /// A signed approval is recorded only while its group holds the request
    /// ([`crate::approval::admits`]), checked in the same transaction.
    pub fn grant_lease(&self, grant: &Grant) -> Result<(), LeaseError> {
        let g = StoredGrant::of(grant)?;
        let done = self
            .write(|conn| {
                if let Some(a) = &grant.approval {
                    let routes = self.routes_on(conn, &a.statement.request)?;
                    if let Err(why) = admits(routes.last(), a) {
                        return Ok((Err(LeaseError::Invalid(why)), false));
                    }
                }
                let n = conn
                    .execute(
                        "INSERT OR IGNORE INTO leases (id, approver, scope, cap_field, cap, granted_ms, expires_ms, revoked_ms, approval)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                        params![g.id, g.approver, g.scope, g.cap_field, g.cap, g.granted_ms, g.expires_ms, g.revoked_ms, g.approval],
                    )
                    .map_err(|e| self.err(e))?;
                Ok((Ok(n), n > 0))
            })
            .map_err(LeaseError::from)??;
        if done == 0 {
            return Err(StoredGrant::exists(&g.id));
        }
        Ok(())
    }

    /// Append `step` to `request`'s route ([`crate::approval::next_step`]).
    pub fn route(&self, request: &str, step: &RouteStep) -> Result<Route, LeaseError> {
        let now = self.now_ms();
        self.write(|conn| {
            let routes = self.routes_on(conn, request)?;
            let n = match next_step(request, routes.last(), step) {
                Ok(Some(there)) => return Ok((Ok(there.clone()), false)),
                Ok(None) => u32::try_from(routes.len()).unwrap_or(u32::MAX),
                Err(why) => return Ok((Err(LeaseError::Invalid(why)), false)),
            };
            conn.execute(
                "INSERT INTO routes (request, n, kind, level, group_name, reason, repair_of, detail, at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    request,
                    n,
                    step.kind.label(),
                    step.level,
                    step.group,
                    step.reason,
                    step.repair_of,
                    step.detail.to_string(),
                    now
                ],
            )
            .map_err(|e| self.err(e))?;
            let route = Route {
                request: request.to_owned(),
                n,
                step: step.clone(),
                at_ms: now,
            };
            Ok((Ok(route), true))
        })
        .map_err(LeaseError::from)?
    }

    /// `request`'s route, first step first.
    pub fn routes(&self, request: &str) -> Result<Vec<Route>, LeaseError> {
        self.read_with(|conn| self.routes_on(conn, request).map_err(LeaseError::from))
    }

    /// The latest step of every request, oldest request first.
    pub fn route_heads(&self) -> Result<Vec<Route>, LeaseError> {
        self.read_with(|conn| {
            self.select_routes(
                conn,
                "SELECT n, kind, level, group_name, reason, repair_of, detail, at_ms, request \
                 FROM routes r WHERE n = (SELECT MAX(n) FROM routes WHERE request = r.request) \
                 ORDER BY at_ms, request",
                [],
            )
            .map_err(LeaseError::from)
        })
    }

    fn routes_on(&self, conn: &Connection, request: &str) -> Result<Vec<Route>, JournalError> {
        self.select_routes(
            conn,
            "SELECT n, kind, level, group_name, reason, repair_of, detail, at_ms, request \
             FROM routes WHERE request = ?1 ORDER BY n",
            [request],
        )
    }

    fn select_routes(
        &self,
        conn: &Connection,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<Route>, JournalError> {
        let mut st = conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params, |r| {
                Ok(StoredRoute {
                    n: r.get(0)?,
                    kind: r.get(1)?,
                    level: r.get(2)?,
                    group: r.get(3)?,
                    reason: r.get(4)?,
                    repair_of: r.get(5)?,
                    detail: r.get(6)?,
                    at_ms: r.get(7)?,
                    request: r.get(8)?,
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| self.err(e))?;
        rows.into_iter()
            .map(|row| {
                let place = format!("route {} of request {}", row.n, row.request);
                row.into_route().map_err(|what| JournalError::Corrupt {
                    path: self.location().to_owned(),
                    place,
                    what,
                })
            })
            .collect()
    }

    /// Revoke a lease now. Returns false when no live lease has that id.
    pub fn revoke_lease(&self, id: &str) -> Result<bool, LeaseError> {
        let now = self.now_ms();
        let n = self
            .write(|conn| {
                let n = conn
                    .execute(
                        "UPDATE leases SET revoked_ms = ?2 WHERE id = ?1 AND revoked_ms IS NULL",
                        params![id, now],
                    )
                    .map_err(|e| self.err(e))?;
                Ok((n, n > 0))
            })
            .map_err(LeaseError::from)?;
        Ok(n > 0)
    }

    /// Every grant, oldest first.
    pub fn leases(&self) -> Result<Vec<Grant>, LeaseError> {
        self.read_with(|conn| {
            let mut st = conn
                .prepare("SELECT id, approver, scope, cap_field, cap, granted_ms, expires_ms, revoked_ms, approval FROM leases ORDER BY granted_ms, id")
                .map_err(|e| LeaseError::from(self.err(e)))?;
            let rows = st
                .query_map([], row_to_parts)
                .map_err(|e| LeaseError::from(self.err(e)))?;
            rows.map(|r| {
                r.map_err(|e| LeaseError::from(self.err(e)))
                    .and_then(StoredGrant::into_grant)
            })
            .collect()
        })
    }

    /// The uses lease `id`'s keys hold, oldest first.
    pub fn lease_uses(&self, id: &str) -> Result<Vec<Use>, LeaseError> {
        self.read_with(|conn| self.uses_on(conn, id))
    }

    fn uses_on(&self, conn: &Connection, id: &str) -> Result<Vec<Use>, LeaseError> {
        let mut st = conn
            .prepare_cached(
                "SELECT key, amount FROM lease_uses WHERE lease = ?1 ORDER BY at_ms, key",
            )
            .map_err(|e| LeaseError::from(self.err(e)))?;
        st.query_map([id], |r| {
            Ok(Use {
                key: r.get(0)?,
                amount: r.get(1)?,
            })
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| LeaseError::from(self.err(e)))
    }

    fn lease(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        self.read_with(|conn| self.lease_on(conn, id))
    }

    fn lease_on(&self, conn: &Connection, id: &str) -> Result<Option<Grant>, LeaseError> {
        // Read twice in every dispatch transaction: parsed once per connection.
        let parts = conn
            .prepare_cached(
                "SELECT id, approver, scope, cap_field, cap, granted_ms, expires_ms, revoked_ms, approval FROM leases WHERE id = ?1",
            )
            .and_then(|mut st| st.query_row([id], row_to_parts).optional())
            .map_err(|e| LeaseError::from(self.err(e)))?;
        parts.map(StoredGrant::into_grant).transpose()
    }
}

/// The journal's leases as read inside one of its write transactions.
pub(super) struct TxLeaseReader<'a> {
    pub(super) journal: &'a SqliteJournal,
    pub(super) conn: &'a Connection,
    /// What this transaction's tallies read (and wrote) of each counter and the key's place in
    /// it, for the same transaction's taking of the place to start from.
    pub(super) counted: super::sqlite_budget_totals::Counted,
    /// The budgets in force, once this transaction has read them.
    pub(super) budgets_read: std::cell::RefCell<Option<Vec<crate::budget::Budget>>>,
}

impl TxLeases for TxLeaseReader<'_> {
    fn grant(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        self.journal.lease_on(self.conn, id)
    }

    fn routes(&self, request: &str) -> Result<Vec<Route>, LeaseError> {
        self.journal
            .routes_on(self.conn, request)
            .map_err(LeaseError::from)
    }

    // The write transaction holds the journal's one write lock: nothing else reads or keeps a
    // use until it ends.
    fn uses(&self, id: &str) -> Result<Vec<Use>, LeaseError> {
        self.journal.uses_on(self.conn, id)
    }

    // No budget changes while this transaction holds the write lock: read once per transaction
    // (a dispatch checks them, then its append takes its places in them).
    fn budgets(&self) -> Result<Vec<crate::budget::Budget>, LeaseError> {
        let mut read = self.budgets_read.borrow_mut();
        if let Some(budgets) = read.as_ref() {
            return Ok(budgets.clone());
        }
        let budgets = self.journal.budgets_on(self.conn)?;
        *read = Some(budgets.clone());
        Ok(budgets)
    }

    fn budget_holds(
        &self,
        id: &str,
        bucket: &str,
        since_ms: i64,
    ) -> Result<Vec<crate::budget::Hold>, LeaseError> {
        self.journal
            .budget_holds_on(self.conn, id, bucket, since_ms)
    }

    fn budget_tally(
        &self,
        id: &str,
        bucket: &str,
        since_ms: i64,
        key: &str,
    ) -> Result<crate::budget::Tally, LeaseError> {
        self.budget_tally_on(id, bucket, since_ms, key)
    }

    fn hold_budget(
        &self,
        id: &str,
        bucket: &str,
        hold: &crate::budget::Hold,
    ) -> Result<(), LeaseError> {
        self.hold_budget_on(id, bucket, hold)
    }

    fn release_budgets(&self, key: &str) -> Result<(), LeaseError> {
        self.release_budgets_on(key)
    }

    fn set_use(&self, id: &str, key: &str, amount: i64, held: bool) -> Result<(), LeaseError> {
        let done = if held {
            self.conn.execute(
                "INSERT OR REPLACE INTO lease_uses (lease, key, amount, at_ms) VALUES (?1, ?2, ?3, ?4)",
                params![id, key, amount, self.journal.now_ms()],
            )
        } else {
            self.conn.execute(
                "DELETE FROM lease_uses WHERE lease = ?1 AND key = ?2",
                params![id, key],
            )
        };
        done.map(drop)
            .map_err(|e| LeaseError::from(self.journal.err(e)))
    }
}

fn row_to_parts(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredGrant> {
    Ok(StoredGrant {
        id: r.get(0)?,
        approver: r.get(1)?,
        scope: r.get(2)?,
        cap_field: r.get(3)?,
        cap: r.get(4)?,
        granted_ms: r.get(5)?,
        expires_ms: r.get(6)?,
        revoked_ms: r.get(7)?,
        approval: r.get(8)?,
    })
}

impl crate::lease::LeaseAdmin for SqliteJournal {
    fn grant_lease(&self, grant: &Grant) -> Result<(), LeaseError> {
        SqliteJournal::grant_lease(self, grant)
    }

    fn revoke_lease(&self, id: &str) -> Result<bool, LeaseError> {
        SqliteJournal::revoke_lease(self, id)
    }

    fn leases(&self) -> Result<Vec<Grant>, LeaseError> {
        SqliteJournal::leases(self)
    }

    fn route(&self, request: &str, step: &RouteStep) -> Result<Route, LeaseError> {
        SqliteJournal::route(self, request, step)
    }

    fn routes(&self, request: &str) -> Result<Vec<Route>, LeaseError> {
        SqliteJournal::routes(self, request)
    }

    fn route_heads(&self) -> Result<Vec<Route>, LeaseError> {
        SqliteJournal::route_heads(self)
    }

    fn lease_uses(&self, id: &str) -> Result<Vec<Use>, LeaseError> {
        SqliteJournal::lease_uses(self, id)
    }

    fn set_budget(
        &self,
        budget: &crate::budget::Budget,
        by: &str,
    ) -> Result<crate::budget::BudgetChange, LeaseError> {
        SqliteJournal::set_budget(self, budget, by)
    }

    fn remove_budget(
        &self,
        id: &str,
        by: &str,
    ) -> Result<Option<crate::budget::BudgetChange>, LeaseError> {
        SqliteJournal::remove_budget(self, id, by)
    }

    fn budget_changes(&self) -> Result<Vec<crate::budget::BudgetChange>, LeaseError> {
        SqliteJournal::budget_changes(self)
    }

    fn budget_places(
        &self,
        id: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, crate::budget::Hold)>, LeaseError> {
        SqliteJournal::budget_places(self, id, since_ms)
    }
}

impl LeaseStore for SqliteJournal {
    fn check(&self, id: &str, payload: &Value, now_ms: i64) -> Result<LeaseVerdict, LeaseError> {
        Ok(verdict_of(self.lease(id)?.as_ref(), id, payload, now_ms))
    }

    fn describe(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        self.lease(id)
    }

    fn kept_in(&self) -> Option<&str> {
        Some(self.store_id())
    }
}
