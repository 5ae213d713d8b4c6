//! Lease uses on PostgreSQL. Two appends for two different keys under one lease share no row: a
//! row lock on the lease would have to be exclusive (and serialize every dispatch under a
//! standing lease), and a row lock cannot order the insert of a use that does not exist yet. So
//! each lease has a transaction-scoped advisory lock, taken exclusively in a statement of its own
//! before the uses are read: the read then sees every use committed before the lock was granted,
//! and no other append takes or gives back a use of the lease until this one commits. Appends
//! take it after their key's row lock and the lease's share lock, and nothing takes those while
//! holding it, so it adds no cycle to the order the journal already locks in.

use interlock::core::limits::Use;
use interlock::lease::LeaseError;

use crate::journal::PgJournal;
use crate::pool::Query;

/// The advisory locks' key space for lease uses (the routes have another).
const USE_LOCKS: i32 = 0x1c7e_0002;

impl PgJournal {
    /// Take lease `id`'s use lock for the rest of the transaction.
    fn lock_uses(&self, q: &mut dyn Query, id: &str) -> Result<(), LeaseError> {
        let name = format!("{}:{id}", self.schema());
        q.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))::text",
            &[&USE_LOCKS, &name],
        )
        .map(drop)
        .map_err(|e| LeaseError::from(self.err(&e)))
    }

    /// The uses lease `id`'s keys hold, locked against other appends until the transaction ends.
    pub(crate) fn uses_in(&self, q: &mut dyn Query, id: &str) -> Result<Vec<Use>, LeaseError> {
        self.lock_uses(q, id)?;
        self.uses_on(q, id)
    }

    fn uses_on(&self, q: &mut dyn Query, id: &str) -> Result<Vec<Use>, LeaseError> {
        let rows = q
            .query(
                &format!(
                    "SELECT key, amount FROM {}.lease_uses WHERE lease = $1 ORDER BY at_ms, key",
                    self.schema()
                ),
                &[&id],
            )
            .map_err(|e| LeaseError::from(self.err(&e)))?;
        Ok(rows
            .iter()
            .map(|r| Use {
                key: r.get(0),
                amount: r.get(1),
            })
            .collect())
    }

    /// Record that `key` holds a use of lease `id` (`held`), or that it gave it back.
    pub(crate) fn set_use_in(
        &self,
        q: &mut dyn Query,
        id: &str,
        key: &str,
        amount: i64,
        held: bool,
    ) -> Result<(), LeaseError> {
        self.lock_uses(q, id)?;
        let s = self.schema();
        let done = if held {
            q.execute(
                &format!(
                    "INSERT INTO {s}.lease_uses (lease, key, amount, at_ms) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (lease, key) DO UPDATE SET amount = EXCLUDED.amount"
                ),
                &[&id, &key, &amount, &self.now_ms()],
            )
        } else {
            q.execute(
                &format!("DELETE FROM {s}.lease_uses WHERE lease = $1 AND key = $2"),
                &[&id, &key],
            )
        };
        done.map(drop).map_err(|e| LeaseError::from(self.err(&e)))
    }

    /// The uses lease `id`'s keys hold now, oldest first.
    pub fn lease_uses(&self, id: &str) -> Result<Vec<Use>, LeaseError> {
        self.conn()?.run(|c| self.uses_on(c, id))
    }
}
