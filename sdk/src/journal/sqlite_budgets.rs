//! Budgets kept in the journal's own file: their changes, and the places effects hold in them,
//! written by the same transactions that write the effects' records. The journal's one write lock
//! orders every dispatch, so a counter read in a transaction is the counter its dispatch is
//! counted against.

use rusqlite::{Connection, OptionalExtension, params};

use super::sqlite::SqliteJournal;
use crate::budget::{Budget, BudgetChange, Hold, budget_of, check_by, check_change, spec_of};
use crate::lease::LeaseError;

/// The latest budget change a read of the budgets in force reflected: its row id, budget id,
/// position and spec.
pub(super) type LatestChange = (i64, String, u32, Option<String>);

impl SqliteJournal {
    /// Set a budget, journaled with who set it.
    pub fn set_budget(&self, budget: &Budget, by: &str) -> Result<BudgetChange, LeaseError> {
        check_by(by)?;
        let spec = spec_of(budget)?;
        let at_ms = self.now_ms();
        let n = self.write(|conn| {
            if let Some(old) = latest(self, conn, &budget.id)? {
                let old = budget_of(&budget.id, &old).and_then(|old| check_change(&old, budget));
                if let Err(e) = old {
                    return Ok((Err(e), false));
                }
            }
            let n = next_change(self, conn, &budget.id)?;
            conn.execute(
                "INSERT INTO budget_changes (id, n, spec, at_ms, by) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![budget.id, n, spec, at_ms, by],
            )
            .map_err(|e| self.err(e))?;
            Ok((Ok(n), true))
        })??;
        Ok(BudgetChange {
            id: budget.id.clone(),
            n,
            budget: Some(budget.clone()),
            at_ms,
            by: by.to_owned(),
        })
    }

    /// Remove budget `id`, journaled with who removed it.
    pub fn remove_budget(&self, id: &str, by: &str) -> Result<Option<BudgetChange>, LeaseError> {
        check_by(by)?;
        let at_ms = self.now_ms();
        let n = self.write(|conn| {
            if latest(self, conn, id)?.is_none() {
                return Ok((None, false));
            }
            // A budget set again under this id starts with no places.
            conn.execute("DELETE FROM budget_places WHERE budget = ?1", [id])
                .and_then(|_| conn.execute("DELETE FROM budget_totals WHERE budget = ?1", [id]))
                .map_err(|e| self.err(e))?;
            let n = next_change(self, conn, id)?;
            conn.execute(
                "INSERT INTO budget_changes (id, n, spec, at_ms, by) VALUES (?1, ?2, NULL, ?3, ?4)",
                params![id, n, at_ms, by],
            )
            .map_err(|e| self.err(e))?;
            Ok((Some(n), true))
        })?;
        Ok(n.map(|n| BudgetChange {
            id: id.to_owned(),
            n,
            budget: None,
            at_ms,
            by: by.to_owned(),
        }))
    }

    /// Every change to every budget, by id, oldest first.
    pub fn budget_changes(&self) -> Result<Vec<BudgetChange>, LeaseError> {
        self.read_with(|conn| {
            let mut st = conn
                .prepare_cached("SELECT id, n, spec, at_ms, by FROM budget_changes ORDER BY id, n")
                .map_err(|e| LeaseError::from(self.err(e)))?;
            let rows = st
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, u32>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(|e| LeaseError::from(self.err(e)))?;
            rows.into_iter()
                .map(|(id, n, spec, at_ms, by)| {
                    let budget = spec.map(|s| budget_of(&id, &s)).transpose()?;
                    Ok(BudgetChange {
                        id,
                        n,
                        budget,
                        at_ms,
                        by,
                    })
                })
                .collect()
        })
    }

    /// The places budget `id` holds that can land from `since_ms` on, with their counters' buckets.
    pub fn budget_places(
        &self,
        id: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, Hold)>, LeaseError> {
        self.read_with(|conn| {
            let mut st = conn
                .prepare_cached(
                    "SELECT bucket, key, amount, at_ms, until_ms FROM budget_places \
                     WHERE budget = ?1 AND until_ms >= ?2 ORDER BY at_ms, key",
                )
                .map_err(|e| LeaseError::from(self.err(e)))?;
            st.query_map(params![id, since_ms], |r| {
                Ok((
                    r.get(0)?,
                    Hold {
                        key: r.get(1)?,
                        amount: r.get(2)?,
                        at_ms: r.get(3)?,
                        until_ms: r.get(4)?,
                    },
                ))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| LeaseError::from(self.err(e)))
        })
    }

    /// The budgets in force as `conn`'s transaction sees them. Changes are only ever appended
    /// (a removal too is a new row), so the latest change says whether the budgets last read are
    /// still the ones in force: the same row, with the same budget, id and position. (Its row id
    /// alone would not do: a change rolled back frees its row id for the next.) Only then are
    /// they reused instead of parsed again.
    pub(super) fn budgets_on(&self, conn: &Connection) -> Result<Vec<Budget>, LeaseError> {
        let latest: Option<LatestChange> = conn
            .prepare_cached(
                "SELECT rowid, id, n, spec FROM budget_changes ORDER BY rowid DESC LIMIT 1",
            )
            .and_then(|mut st| {
                st.query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .optional()
            })
            .map_err(|e| LeaseError::from(self.err(e)))?;
        let mut cache = self
            .budgets_read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, budgets)) = cache.as_ref().filter(|(seen, _)| *seen == latest) {
            return Ok(budgets.clone());
        }
        let budgets = self.budgets_read_on(conn)?;
        *cache = Some((latest, budgets.clone()));
        Ok(budgets)
    }

    fn budgets_read_on(&self, conn: &Connection) -> Result<Vec<Budget>, LeaseError> {
        let mut st = conn
            .prepare_cached(
                "SELECT c.id, c.spec FROM budget_changes c \
                 WHERE c.n = (SELECT MAX(n) FROM budget_changes WHERE id = c.id) \
                 AND c.spec IS NOT NULL ORDER BY c.id",
            )
            .map_err(|e| LeaseError::from(self.err(e)))?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| LeaseError::from(self.err(e)))?;
        rows.iter().map(|(id, spec)| budget_of(id, spec)).collect()
    }

    pub(super) fn budget_holds_on(
        &self,
        conn: &Connection,
        id: &str,
        bucket: &str,
        since_ms: i64,
    ) -> Result<Vec<Hold>, LeaseError> {
        let mut st = conn
            .prepare_cached(
                "SELECT key, amount, at_ms, until_ms FROM budget_places \
                 WHERE budget = ?1 AND bucket = ?2 AND until_ms >= ?3",
            )
            .map_err(|e| LeaseError::from(self.err(e)))?;
        st.query_map(params![id, bucket, since_ms], |r| {
            Ok(Hold {
                key: r.get(0)?,
                amount: r.get(1)?,
                at_ms: r.get(2)?,
                until_ms: r.get(3)?,
            })
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| LeaseError::from(self.err(e)))
    }
}

/// The spec of budget `id`'s latest change, if it is in force.
fn latest(
    j: &SqliteJournal,
    conn: &Connection,
    id: &str,
) -> Result<Option<String>, crate::journal::JournalError> {
    let spec: Option<Option<String>> = conn
        .query_row(
            "SELECT spec FROM budget_changes WHERE id = ?1 ORDER BY n DESC LIMIT 1",
            [id],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| j.err(e))?;
    Ok(spec.flatten())
}

fn next_change(
    j: &SqliteJournal,
    conn: &Connection,
    id: &str,
) -> Result<u32, crate::journal::JournalError> {
    conn.query_row(
        "SELECT COALESCE(MAX(n) + 1, 0) FROM budget_changes WHERE id = ?1",
        [id],
        |r| r.get(0),
    )
    .map_err(|e| j.err(e))
}
