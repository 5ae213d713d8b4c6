//! Lease uses on PostgreSQL. Two appends for two different keys under one lease share no row: a
//! row lock on the lease would have to be exclusive (and serialize every dispatch under a
//! standing lease), and a row lock cannot order the insert of a use that does not exist yet. So
//! each lease has a transaction-scoped advisory lock, taken exclusively in a statement of its own
//! before the uses are read: the read then sees every use committed before the lock was granted,
//! and no other append takes or gives back a use of the lease until this one commits. Appends
//! take it after their key's row lock, the lease's share lock and the budgets' rules lock (shared,
//! sent right before it, and granted at once to an append that took it with its start,
//! `crate::ahead`), and nothing takes those while holding it, so it adds no cycle to the order the
//! journal already locks in.

use interlock::core::limits::Use;
use interlock::lease::LeaseError;

use crate::budgets::BUDGET_LOCK_SPACE;
use crate::journal::PgJournal;
use crate::pool::Query;

/// The advisory locks' key space for lease uses (the routes have another).
const USE_LOCKS: i32 = 0x1c7e_0002;

impl PgJournal {
    /// Take lease `id`'s use lock for the rest of the transaction, after the budgets' rules lock
    /// (shared; already held by a dispatch that read the budgets ahead): every transaction takes
    /// the two in that order, so a change to the budgets queued between them closes no cycle.
    fn lock_uses(&self, q: &mut dyn Query, id: &str) -> Result<(), LeaseError> {
        let name = format!("{}:{id}", self.schema());
        let (rules, rules_name) = self.rules_lock_sql();
        q.pipeline(&[
            (&rules, &[&BUDGET_LOCK_SPACE, &rules_name]),
            (
                "SELECT pg_advisory_xact_lock($1, hashtext($2))::text",
                &[&USE_LOCKS, &name],
            ),
        ])
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::pool::Conn;

    /// Lease `name`'s use locks (`schema:id`) granted or awaited, as (granted, waiting).
    fn use_locks(c: &mut Conn, name: &str) -> (i64, i64) {
        let space = i64::from(USE_LOCKS);
        let row = c
            .run(|q| {
                q.query_one(
                    "SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) \
                     FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 \
                     AND classid::int8 = $1 AND objid::int8 = (hashtext($2)::int8 & 4294967295)",
                    &[&space, &name],
                )
            })
            .expect("counted");
        (row.get(0), row.get(1))
    }

    /// A budget change holding the rules lock while a transaction asks for a lease's use lock:
    /// the use lock is not taken until the change ends. Taken before the rules lock, a dispatch
    /// that holds the rules lock (read ahead) and waits for the use lock, the holder of the use
    /// lock queued behind the change for the rules lock, and the change would wait on each other.
    #[test]
    fn a_use_lock_is_taken_only_after_the_budgets_rules_lock() {
        let (journal, schema, config) = PgJournal::on_fresh_schema("use_order");
        let mut change = Conn::open(&config).expect("a connection");
        let (rules, rules_name) = journal.rules_lock_sql();
        let exclusive = rules.replace("pg_advisory_xact_lock_shared", "pg_advisory_xact_lock");
        change
            .run(|q| {
                q.batch_execute("BEGIN")?;
                q.execute(&exclusive, &[&BUDGET_LOCK_SPACE, &rules_name])
            })
            .expect("the rules lock held");
        let mut watcher = Conn::open(&config).expect("a connection");
        std::thread::scope(|scope| {
            let using = scope.spawn(|| {
                journal.conn().expect("a connection").run_tx(
                    |e| journal.err(e),
                    |q| {
                        let uses = journal.uses_in(q, "l").map_err(|e| match e {
                            LeaseError::Journal(j) => j,
                            other => panic!("{other}"),
                        })?;
                        Ok((uses, false))
                    },
                )
            });
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(2) && !using.is_finished() {
                assert_eq!(
                    use_locks(&mut watcher, &format!("{schema}:l")),
                    (0, 0),
                    "no use lock is taken or awaited while the rules lock is held exclusively"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(!using.is_finished(), "it waits for the budget change");
            change
                .run(|q| q.batch_execute("COMMIT"))
                .expect("the change ended");
            assert!(using.join().expect("no panic").is_ok());
        });
    }
}
