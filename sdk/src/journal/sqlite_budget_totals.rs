//! A budget counter's running total, so that a dispatch that fits reads a few rows instead of
//! every place its window holds. Each counter (budget, bucket) has a row with a mark and a total:
//! the total is what the counter's places with `until_ms >= mark_ms` add up to. Every change to a
//! place moves the total by what it changes on the marked side; a tally at a window starting at
//! `since` moves the mark up to `since`, subtracting the places that left in between (each place
//! is passed once), or, for a window starting before the mark (a clock behind another's), adds
//! the places between `since` and the mark back without moving anything. Either way the tally is
//! exactly what the places in the window add up to ([`crate::budget::Tally::of`]). The mark moves
//! only when places leave (a window sliding past nothing changes no total), so a dispatch whose
//! window lost no place since the last writes nothing to the counter until it takes its place.
//!
//! Only transactions that hold the journal's write lock touch a total, so a total read is the one
//! the dispatch is counted against. A counter with no row yet (a journal from before the totals)
//! is added up once from its places, the first time a dispatch reads it.

use std::cell::RefCell;
use std::collections::HashMap;

use rusqlite::{OptionalExtension, params};

use super::sqlite_leases::TxLeaseReader;
use crate::budget::{Hold, Tally};
use crate::lease::LeaseError;

/// A counter's mark and total, if it has a row.
type Total = Option<(i64, i64)>;
/// A key's place in a budget: its bucket, amount and span, if it holds one.
type Place = Option<(String, i64, i64)>;

/// What a transaction's tallies left of each counter (budget, bucket) and a key's place in it,
/// by (budget, bucket, key): the dispatch that tallies then takes its place in the same
/// transaction, and starts from this instead of reading both again. A counter's total written
/// drops what was kept of that counter; a key's place taken or given back, what was kept of that
/// key.
#[derive(Default)]
pub(super) struct Counted(RefCell<HashMap<KeyIn, (Total, Place)>>);

/// A key in a counter: (budget, bucket, key).
type KeyIn = (String, String, String);

/// What counter (`id`, `bucket`)'s places with `from <= until_ms < to` add up to.
fn sum(
    r: &TxLeaseReader<'_>,
    id: &str,
    bucket: &str,
    from: i64,
    to: i64,
) -> Result<i64, LeaseError> {
    r.conn
        .prepare_cached(
            "SELECT COALESCE(SUM(amount), 0) FROM budget_places \
             WHERE budget = ?1 AND bucket = ?2 AND until_ms >= ?3 AND until_ms < ?4",
        )
        .and_then(|mut st| st.query_row(params![id, bucket, from, to], |row| row.get(0)))
        .map_err(|e| LeaseError::from(r.journal.err(e)))
}

/// Counter (`id`, `bucket`)'s mark and total, if it has a row.
fn total_of(
    r: &TxLeaseReader<'_>,
    id: &str,
    bucket: &str,
) -> Result<Option<(i64, i64)>, LeaseError> {
    r.conn
        .prepare_cached(
            "SELECT mark_ms, total FROM budget_totals WHERE budget = ?1 AND bucket = ?2",
        )
        .and_then(|mut st| {
            st.query_row(params![id, bucket], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(|e| LeaseError::from(r.journal.err(e)))
}

fn set_total(
    r: &TxLeaseReader<'_>,
    id: &str,
    bucket: &str,
    mark: i64,
    total: i64,
) -> Result<(), LeaseError> {
    // What this transaction's tallies left of this counter is out of date now.
    (r.counted.0.borrow_mut()).retain(|(b, k, _), _| !(b == id && k == bucket));
    r.conn
        .prepare_cached(
            "INSERT OR REPLACE INTO budget_totals (budget, bucket, mark_ms, total) \
             VALUES (?1, ?2, ?3, ?4)",
        )
        .and_then(|mut st| st.execute(params![id, bucket, mark, total]))
        .map(drop)
        .map_err(|e| LeaseError::from(r.journal.err(e)))
}

/// Counter (`id`, `bucket`)'s mark and total, and `key`'s place in budget `id`: one statement
/// for both.
fn total_and_place(
    r: &TxLeaseReader<'_>,
    id: &str,
    bucket: &str,
    key: &str,
) -> Result<(Total, Place), LeaseError> {
    r.conn
        .prepare_cached(
            "SELECT t.mark_ms, t.total, p.bucket, p.amount, p.until_ms FROM (SELECT 1) \
             LEFT JOIN budget_totals t ON t.budget = ?1 AND t.bucket = ?2 \
             LEFT JOIN budget_places p ON p.key = ?3 AND p.budget = ?1",
        )
        .and_then(|mut st| {
            st.query_row(params![id, bucket, key], |row| {
                let total = match (row.get::<_, Option<i64>>(0)?, row.get(1)?) {
                    (Some(mark), Some(total)) => Some((mark, total)),
                    _ => None,
                };
                let place = match (row.get::<_, Option<String>>(2)?, row.get(3)?, row.get(4)?) {
                    (Some(b), Some(amount), Some(until)) => Some((b, amount, until)),
                    _ => None,
                };
                Ok((total, place))
            })
        })
        .map_err(|e| LeaseError::from(r.journal.err(e)))
}

/// Move counter (`id`, `bucket`)'s total by each `(delta, until_ms)` whose place spans to the
/// mark or later (a counter with no row is added up when first read): one read and at most one
/// write, however many places changed. Added here, not in SQL: SQLite turns an integer sum past
/// the 64-bit range into a float.
fn adjust(
    r: &TxLeaseReader<'_>,
    id: &str,
    bucket: &str,
    changes: &[(i64, i64)],
) -> Result<(), LeaseError> {
    let Some(read) = total_of(r, id, bucket)? else {
        return Ok(());
    };
    adjust_from(r, id, bucket, read, changes)
}

/// [`adjust`] with the counter's mark and total already read in this transaction.
fn adjust_from(
    r: &TxLeaseReader<'_>,
    id: &str,
    bucket: &str,
    (mark, total): (i64, i64),
    changes: &[(i64, i64)],
) -> Result<(), LeaseError> {
    let mut moved = total;
    for (delta, until_ms) in changes {
        if *until_ms >= mark {
            moved = moved.checked_add(*delta).ok_or_else(|| overflow(id))?;
        }
    }
    if moved == total {
        return Ok(());
    }
    set_total(r, id, bucket, mark, moved)
}

fn overflow(id: &str) -> LeaseError {
    LeaseError::Store(format!(
        "budget {id}: its places add up past the 64-bit range"
    ))
}

impl TxLeaseReader<'_> {
    /// [`crate::journal::TxLeases::budget_tally`] from the counter's running total.
    pub(super) fn budget_tally_on(
        &self,
        id: &str,
        bucket: &str,
        since_ms: i64,
        key: &str,
    ) -> Result<Tally, LeaseError> {
        let (read, own) = total_and_place(self, id, bucket, key)?;
        let (mark, total) = match read {
            Some(t) => t,
            None => {
                // Every place is on the marked side of the lowest mark.
                let total: i64 = self
                    .conn
                    .query_row(
                        "SELECT COALESCE(SUM(amount), 0) FROM budget_places \
                         WHERE budget = ?1 AND bucket = ?2",
                        params![id, bucket],
                        |r| r.get(0),
                    )
                    .map_err(|e| LeaseError::from(self.journal.err(e)))?;
                set_total(self, id, bucket, i64::MIN, total)?;
                (i64::MIN, total)
            }
        };
        // What the window holds, and the counter's row as this tally leaves it.
        let (used, stored) = if since_ms > mark {
            let left = sum(self, id, bucket, mark, since_ms)?;
            let total = total.checked_sub(left).ok_or_else(|| overflow(id))?;
            // Where the places between the mark and the window's start add up to nothing, the
            // total already is what the window holds at either mark: it stays, and the dispatch
            // writes nothing here.
            if left == 0 {
                (total, (mark, total))
            } else {
                set_total(self, id, bucket, since_ms, total)?;
                (total, (since_ms, total))
            }
        } else {
            let used = total
                .checked_add(sum(self, id, bucket, since_ms, mark)?)
                .ok_or_else(|| overflow(id))?;
            (used, (mark, total))
        };
        let own_in_window = own
            .as_ref()
            .is_some_and(|(b, _, until)| b == bucket && *until >= since_ms);
        self.counted.0.borrow_mut().insert(
            (id.to_owned(), bucket.to_owned(), key.to_owned()),
            (Some(stored), own),
        );
        Ok(Tally {
            used,
            own_in_window,
        })
    }

    /// Record `hold` in counter (`id`, `bucket`), replacing the key's place there, with the
    /// counter's total moved by the difference.
    pub(super) fn hold_budget_on(
        &self,
        id: &str,
        bucket: &str,
        hold: &Hold,
    ) -> Result<(), LeaseError> {
        let mut changes = vec![(hold.amount, hold.until_ms)];
        let tallied = {
            let mut counted = self.counted.0.borrow_mut();
            let tallied = counted.remove(&(id.to_owned(), bucket.to_owned(), hold.key.clone()));
            // The key's place in this budget changes, whatever counter a tally saw it in.
            counted.retain(|(b, _, k), _| !(b == id && *k == hold.key));
            tallied
        };
        let (total, place) = match tallied {
            Some(read) => read,
            None => total_and_place(self, id, bucket, &hold.key)?,
        };
        if let Some((old_bucket, amount, until)) = place {
            if old_bucket != bucket {
                // A key's bucket follows from its first proposal and the budget's `per`, neither
                // of which changes; a place elsewhere is someone else's doing.
                return Err(LeaseError::Store(format!(
                    "budget {id}: key {} holds a place in counter {old_bucket}, not {bucket}",
                    hold.key
                )));
            }
            changes.push((-amount, until));
        }
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO budget_places (budget, bucket, key, amount, at_ms, until_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![id, bucket, hold.key, hold.amount, hold.at_ms, hold.until_ms])
            })
            .map_err(|e| LeaseError::from(self.journal.err(e)))?;
        match total {
            Some(read) => adjust_from(self, id, bucket, read, &changes),
            None => Ok(()),
        }
    }

    /// Give back every place `key` holds, with each counter's total moved.
    pub(super) fn release_budgets_on(&self, key: &str) -> Result<(), LeaseError> {
        (self.counted.0.borrow_mut()).retain(|(_, _, k), _| k != key);
        let places: Vec<(String, String, i64, i64)> = self
            .conn
            .prepare_cached(
                "SELECT budget, bucket, amount, until_ms FROM budget_places WHERE key = ?1",
            )
            .and_then(|mut st| {
                st.query_map([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            })
            .map_err(|e| LeaseError::from(self.journal.err(e)))?;
        for (id, bucket, amount, until) in &places {
            adjust(self, id, bucket, &[(-amount, *until)])?;
        }
        self.conn
            .execute("DELETE FROM budget_places WHERE key = ?1", [key])
            .map(drop)
            .map_err(|e| LeaseError::from(self.journal.err(e)))
    }
}
