//! Budgets on PostgreSQL. A counter's places are inserted by appends for different keys, so a row
//! lock cannot order them; each (budget, bucket) has a transaction-scoped advisory lock, taken
//! exclusively in a statement of its own before the counter is read, so the read sees every
//! place committed before the lock was granted and no other append changes the counter until
//! this one commits. An append takes the counters' locks in budget-id order, after the key's row,
//! the lease and the lease's use lock, and nothing takes those while holding one of these, so
//! they add no cycle. The budgets in force are read under a shared lock that setting or removing
//! a budget takes exclusively: a change waits for the dispatches that read the old rules, and
//! every dispatch after it reads the new ones. Every transaction takes that lock before a lease's
//! use lock (a dispatch that names the budgets ahead takes it with its start, `crate::ahead`, and
//! taking a use lock always asks for it first), and a change takes no other lock before it, so a
//! change queued between the two closes no cycle. The price: a change waits for every dispatch
//! that holds the rules lock, including one still waiting for a counted lease's use lock.

use interlock::budget::{Budget, BudgetChange, Hold, budget_of, check_by, check_change, spec_of};
use interlock::lease::LeaseError;

use crate::journal::PgJournal;
use crate::pool::Query;
use postgres::Row;
use postgres::types::ToSql;

/// The prefix of the budgets' advisory lock names (hashed to 64 bits with the schema and the
/// counter, so a caller-chosen `per` value cannot aim at another lock).
pub(crate) const BUDGET_LOCK_SPACE: &str = "interlock-budget:";

/// The name of the lock over the budgets in force (setting or removing one takes it
/// exclusively).
pub(crate) const RULES: &str = "(rules)";

/// The budgets in force from their rows (id, spec).
pub(crate) fn budgets_of(rows: &[Row]) -> Result<Vec<Budget>, LeaseError> {
    rows.iter()
        .map(|r| budget_of(&r.get::<_, String>(0), &r.get::<_, String>(1)))
        .collect()
}

impl PgJournal {
    pub(crate) fn lock(
        &self,
        q: &mut dyn Query,
        name: &str,
        exclusive: bool,
    ) -> Result<(), LeaseError> {
        let (sql, name) = self.lock_sql(name, exclusive);
        q.execute(&sql, &[&BUDGET_LOCK_SPACE, &name])
            .map(drop)
            .map_err(|e| LeaseError::from(self.err(&e)))
    }

    /// The statement that takes lock `name` and its second parameter (the first is
    /// [`BUDGET_LOCK_SPACE`]).
    fn lock_sql(&self, name: &str, exclusive: bool) -> (String, String) {
        let f = if exclusive {
            "pg_advisory_xact_lock"
        } else {
            "pg_advisory_xact_lock_shared"
        };
        (
            format!("SELECT {f}(hashtextextended($1::text || $2, 0))::text"),
            format!("{}:{name}", self.schema()),
        )
    }

    /// The rows of `read`, read under lock `name` ([`Query::read_under`]).
    pub(crate) fn read_locked(
        &self,
        q: &mut dyn Query,
        name: &str,
        exclusive: bool,
        read: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LeaseError> {
        let (lock, name) = self.lock_sql(name, exclusive);
        q.read_under((&lock, &[&BUDGET_LOCK_SPACE, &name]), (read, params))
            .map_err(|e| LeaseError::from(self.err(&e)))
    }

    /// The budgets in force, read under the shared rules lock.
    pub(crate) fn budgets_in(&self, q: &mut dyn Query) -> Result<Vec<Budget>, LeaseError> {
        let rows = self.read_locked(q, RULES, false, &self.budgets_sql(), &[])?;
        budgets_of(&rows)
    }

    /// The statement that takes the rules lock shared, and its second parameter (the first is
    /// [`BUDGET_LOCK_SPACE`]).
    pub(crate) fn rules_lock_sql(&self) -> (String, String) {
        self.lock_sql(RULES, false)
    }

    /// The read of the budgets in force (no parameters), made under the rules lock.
    pub(crate) fn budgets_sql(&self) -> String {
        format!(
            "SELECT c.id, c.spec FROM {s}.budget_changes c \
             WHERE c.n = (SELECT MAX(n) FROM {s}.budget_changes WHERE id = c.id) \
             AND c.spec IS NOT NULL ORDER BY c.id",
            s = self.schema()
        )
    }

    /// Counter `bucket` of budget `id` from `since_ms` on, locked until the transaction ends.
    pub(crate) fn budget_holds_in(
        &self,
        q: &mut dyn Query,
        id: &str,
        bucket: &str,
        since_ms: i64,
    ) -> Result<Vec<Hold>, LeaseError> {
        let rows = self.read_locked(
            q,
            &format!("{id}\u{1f}{bucket}"),
            true,
            &format!(
                "SELECT key, amount, at_ms, until_ms FROM {}.budget_holds \
                 WHERE budget = $1 AND bucket = $2 AND until_ms >= $3",
                self.schema()
            ),
            &[&id, &bucket, &since_ms],
        )?;
        Ok(rows
            .iter()
            .map(|r| Hold {
                key: r.get(0),
                amount: r.get(1),
                at_ms: r.get(2),
                until_ms: r.get(3),
            })
            .collect())
    }

    /// Set a budget, journaled with who set it.
    pub fn set_budget(&self, budget: &Budget, by: &str) -> Result<BudgetChange, LeaseError> {
        check_by(by)?;
        let spec = spec_of(budget)?;
        let at_ms = self.now_ms();
        let n = self
            .conn()?
            .run_tx(
                |e| self.err(e),
                |q| {
                    self.lock_rules(q)?;
                    if let Some(old) = self.latest(q, &budget.id)? {
                        let old =
                            budget_of(&budget.id, &old).and_then(|o| check_change(&o, budget));
                        if let Err(e) = old {
                            return Ok((Err(e), false));
                        }
                    }
                    let n = self.change(q, &budget.id, Some(&spec), at_ms, by)?;
                    Ok((Ok(n), true))
                },
            )
            .map_err(LeaseError::from)??;
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
        let n = self
            .conn()?
            .run_tx(
                |e| self.err(e),
                |q| {
                    self.lock_rules(q)?;
                    if self.latest(q, id)?.is_none() {
                        return Ok((None, false));
                    }
                    // A budget set again under this id starts with no places.
                    for table in ["budget_totals", "budget_holds"] {
                        q.execute(
                            &format!("DELETE FROM {}.{table} WHERE budget = $1", self.schema()),
                            &[&id],
                        )
                        .map_err(|e| self.err(&e))?;
                    }
                    let n = self.change(q, id, None, at_ms, by)?;
                    Ok((Some(n), true))
                },
            )
            .map_err(LeaseError::from)?;
        Ok(n.map(|n| BudgetChange {
            id: id.to_owned(),
            n,
            budget: None,
            at_ms,
            by: by.to_owned(),
        }))
    }

    /// The exclusive rules lock, for a change: it waits for every dispatch that read the rules.
    fn lock_rules(&self, q: &mut dyn Query) -> Result<(), interlock::JournalError> {
        self.lock(q, RULES, true).map_err(|e| match e {
            LeaseError::Journal(j) => j,
            other => interlock::JournalError::Storage {
                path: self.location_str().to_owned(),
                what: other.to_string(),
            },
        })
    }

    /// The spec of budget `id`'s latest change, if it is in force.
    fn latest(
        &self,
        q: &mut dyn Query,
        id: &str,
    ) -> Result<Option<String>, interlock::JournalError> {
        let row = q
            .query_opt(
                &format!(
                    "SELECT spec FROM {}.budget_changes WHERE id = $1 ORDER BY n DESC LIMIT 1",
                    self.schema()
                ),
                &[&id],
            )
            .map_err(|e| self.err(&e))?;
        Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
    }

    /// Append a change (under the exclusive rules lock, taken by the caller).
    fn change(
        &self,
        q: &mut dyn Query,
        id: &str,
        spec: Option<&str>,
        at_ms: i64,
        by: &str,
    ) -> Result<u32, interlock::JournalError> {
        let s = self.schema();
        let n: i32 = q
            .query_one(
                &format!("SELECT COALESCE(MAX(n) + 1, 0) FROM {s}.budget_changes WHERE id = $1"),
                &[&id],
            )
            .map_err(|e| self.err(&e))?
            .get(0);
        q.execute(
            &format!(
                "INSERT INTO {s}.budget_changes (id, n, spec, at_ms, by) VALUES ($1, $2, $3, $4, $5)"
            ),
            &[&id, &n, &spec, &at_ms, &by],
        )
        .map_err(|e| self.err(&e))?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// Every change to every budget, by id, oldest first.
    pub fn budget_changes(&self) -> Result<Vec<BudgetChange>, LeaseError> {
        let rows = self
            .conn()?
            .run(|c| {
                c.query(
                    &format!(
                        "SELECT id, n, spec, at_ms, by FROM {}.budget_changes ORDER BY id, n",
                        self.schema()
                    ),
                    &[],
                )
            })
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        rows.iter()
            .map(|r| {
                let id: String = r.get(0);
                let spec: Option<String> = r.get(2);
                Ok(BudgetChange {
                    budget: spec.map(|s| budget_of(&id, &s)).transpose()?,
                    n: u32::try_from(r.get::<_, i32>(1)).unwrap_or(u32::MAX),
                    at_ms: r.get(3),
                    by: r.get(4),
                    id,
                })
            })
            .collect()
    }

    /// The places budget `id` holds from `since_ms` on, with their counters' buckets.
    pub fn budget_places(
        &self,
        id: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, Hold)>, LeaseError> {
        let rows = self
            .conn()?
            .run(|c| {
                c.query(
                    &format!(
                        "SELECT bucket, key, amount, at_ms, until_ms FROM {}.budget_holds \
                         WHERE budget = $1 AND until_ms >= $2 ORDER BY at_ms, key",
                        self.schema()
                    ),
                    &[&id, &since_ms],
                )
            })
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    Hold {
                        key: r.get(1),
                        amount: r.get(2),
                        at_ms: r.get(3),
                        until_ms: r.get(4),
                    },
                )
            })
            .collect())
    }
}
