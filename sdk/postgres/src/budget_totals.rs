//! A budget counter's running total on PostgreSQL, as on SQLite (the `interlock` crate's
//! `sqlite_budget_totals` says why and how): each counter has a row with a mark and the total of
//! its places with `until_ms >= mark_ms`; every change to a place moves the total, and a tally
//! moves the mark up to its window's start, or adds back the places between an earlier start and
//! the mark.
//!
//! Every statement that reads or moves a total, adds a place or gives one back runs under the
//! counter's advisory lock, taken in a statement of its own first: each statement then sees every
//! change committed before the lock was granted, and none is made meanwhile. (Giving a place back
//! without the lock could subtract it twice: once by the giver, once by a tally moving the mark
//! past it on a snapshot taken before the give-back committed.) An append takes counters' locks
//! in budget-id order, after the key's row, the lease and the lease's use lock, as when a place
//! is taken.

use interlock::budget::{Hold, Tally};
use interlock::lease::LeaseError;

use crate::journal::PgJournal;
use crate::pool::Query;

fn counter_lock(id: &str, bucket: &str) -> String {
    format!("{id}\u{1f}{bucket}")
}

impl PgJournal {
    fn one_i64(
        &self,
        q: &mut dyn Query,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<i64, LeaseError> {
        let rows = q
            .query(sql, params)
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        rows.first()
            .map(|r| r.get::<_, i64>(0))
            .ok_or_else(|| LeaseError::Store("a sum of budget places read no row".into()))
    }

    /// What counter (`id`, `bucket`)'s places with `from <= until_ms < to` add up to.
    fn places_sum(
        &self,
        q: &mut dyn Query,
        id: &str,
        bucket: &str,
        from: i64,
        to: i64,
    ) -> Result<i64, LeaseError> {
        self.one_i64(
            q,
            &format!(
                "SELECT COALESCE(SUM(amount), 0)::bigint FROM {}.budget_holds \
                 WHERE budget = $1 AND bucket = $2 AND until_ms >= $3 AND until_ms < $4",
                self.schema()
            ),
            &[&id, &bucket, &from, &to],
        )
    }

    fn set_total(
        &self,
        q: &mut dyn Query,
        id: &str,
        bucket: &str,
        mark: i64,
        total: i64,
    ) -> Result<(), LeaseError> {
        q.execute(
            &format!(
                "INSERT INTO {}.budget_totals (budget, bucket, mark_ms, total) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (budget, bucket) DO UPDATE \
                 SET mark_ms = EXCLUDED.mark_ms, total = EXCLUDED.total",
                self.schema()
            ),
            &[&id, &bucket, &mark, &total],
        )
        .map(drop)
        .map_err(|e| LeaseError::from(self.err(&e)))
    }

    /// Move counter (`id`, `bucket`)'s total by `delta` for a place spanning to `until_ms`, if
    /// that place is on the marked side. The caller holds the counter's lock.
    fn adjust(
        &self,
        q: &mut dyn Query,
        id: &str,
        bucket: &str,
        delta: i64,
        until_ms: i64,
    ) -> Result<(), LeaseError> {
        q.execute(
            &format!(
                "UPDATE {}.budget_totals SET total = total + $3 \
                 WHERE budget = $1 AND bucket = $2 AND $4 >= mark_ms",
                self.schema()
            ),
            &[&id, &bucket, &delta, &until_ms],
        )
        .map(drop)
        .map_err(|e| LeaseError::from(self.err(&e)))
    }

    /// The tally of counter (`id`, `bucket`) from `since_ms` on, for `key`, from its running
    /// total, under the counter's lock until the transaction ends.
    pub(crate) fn budget_tally_in(
        &self,
        q: &mut dyn Query,
        id: &str,
        bucket: &str,
        since_ms: i64,
        key: &str,
    ) -> Result<Tally, LeaseError> {
        let row = self.read_locked(
            q,
            &counter_lock(id, bucket),
            true,
            &format!(
                "SELECT mark_ms, total FROM {}.budget_totals WHERE budget = $1 AND bucket = $2",
                self.schema()
            ),
            &[&id, &bucket],
        )?;
        let (mark, total) = match row.first() {
            Some(r) => (r.get::<_, i64>(0), r.get::<_, i64>(1)),
            None => {
                // Every place is on the marked side of the lowest mark.
                let total = self.one_i64(
                    q,
                    &format!(
                        "SELECT COALESCE(SUM(amount), 0)::bigint FROM {}.budget_holds \
                         WHERE budget = $1 AND bucket = $2",
                        self.schema()
                    ),
                    &[&id, &bucket],
                )?;
                self.set_total(q, id, bucket, i64::MIN, total)?;
                (i64::MIN, total)
            }
        };
        let overflow = || {
            LeaseError::Store(format!(
                "budget {id}: its places add up past the 64-bit range"
            ))
        };
        let used = if since_ms > mark {
            let left = self.places_sum(q, id, bucket, mark, since_ms)?;
            let total = total.checked_sub(left).ok_or_else(overflow)?;
            // Places that add up to nothing leave the total as it is at either mark.
            if left != 0 {
                self.set_total(q, id, bucket, since_ms, total)?;
            }
            total
        } else {
            total
                .checked_add(self.places_sum(q, id, bucket, since_ms, mark)?)
                .ok_or_else(overflow)?
        };
        let own = q
            .query(
                &format!(
                    "SELECT 1 FROM {}.budget_holds WHERE budget = $1 AND key = $2 \
                     AND bucket = $3 AND until_ms >= $4",
                    self.schema()
                ),
                &[&id, &key, &bucket, &since_ms],
            )
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        Ok(Tally {
            used,
            own_in_window: !own.is_empty(),
        })
    }

    /// Record `hold` in counter (`id`, `bucket`), replacing the key's place in the budget, with
    /// the counter's total moved by the difference, under the counter's lock.
    pub(crate) fn hold_budget_in(
        &self,
        q: &mut dyn Query,
        id: &str,
        bucket: &str,
        hold: &Hold,
    ) -> Result<(), LeaseError> {
        let old = self.read_locked(
            q,
            &counter_lock(id, bucket),
            true,
            &format!(
                "SELECT bucket, amount, until_ms FROM {}.budget_holds \
                 WHERE budget = $1 AND key = $2",
                self.schema()
            ),
            &[&id, &hold.key],
        )?;
        if let Some(r) = old.first() {
            let old_bucket: String = r.get(0);
            if old_bucket != bucket {
                // A key's bucket follows from its first proposal and the budget's `per`, neither
                // of which changes; a place elsewhere is someone else's doing.
                return Err(LeaseError::Store(format!(
                    "budget {id}: key {} holds a place in counter {old_bucket}, not {bucket}",
                    hold.key
                )));
            }
            self.adjust(q, id, bucket, -r.get::<_, i64>(1), r.get(2))?;
        }
        q.execute(
            &format!(
                "INSERT INTO {}.budget_holds (budget, bucket, key, amount, at_ms, until_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (budget, key) DO UPDATE \
                 SET bucket = EXCLUDED.bucket, amount = EXCLUDED.amount, at_ms = EXCLUDED.at_ms, \
                 until_ms = EXCLUDED.until_ms",
                self.schema()
            ),
            &[
                &id,
                &bucket,
                &hold.key,
                &hold.amount,
                &hold.at_ms,
                &hold.until_ms,
            ],
        )
        .map_err(|e| LeaseError::from(self.err(&e)))?;
        self.adjust(q, id, bucket, hold.amount, hold.until_ms)
    }

    /// Give back every place `key` holds, each under its counter's lock (taken in budget-id
    /// order), with each counter's total moved. The key's own row lock, held by the append, keeps
    /// other appends from changing its places; the shared rules lock, taken first as a dispatch
    /// takes it, keeps a budget from being removed (its places and total deleted) and set again
    /// between the read of the places and their give-back, which would subtract them from the
    /// new budget's total.
    pub(crate) fn release_budgets_in(
        &self,
        q: &mut dyn Query,
        key: &str,
    ) -> Result<(), LeaseError> {
        self.lock(q, crate::budgets::RULES, false)?;
        let places = q
            .query(
                &format!(
                    "SELECT budget, bucket, amount, until_ms FROM {}.budget_holds \
                     WHERE key = $1 ORDER BY budget",
                    self.schema()
                ),
                &[&key],
            )
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        for r in &places {
            let (id, bucket): (String, String) = (r.get(0), r.get(1));
            self.lock(q, &counter_lock(&id, &bucket), true)?;
            self.adjust(q, &id, &bucket, -r.get::<_, i64>(2), r.get(3))?;
        }
        q.execute(
            &format!("DELETE FROM {}.budget_holds WHERE key = $1", self.schema()),
            &[&key],
        )
        .map(drop)
        .map_err(|e| LeaseError::from(self.err(&e)))
    }
}
