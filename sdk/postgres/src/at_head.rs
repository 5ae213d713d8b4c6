//! An append in one round trip, for a decision that needs nothing but the key's records (an
//! answer). Such a decision made on the records the attempt already read is the one the
//! transaction would make, as long as no record was appended since: so it is made before the
//! transaction, and its records go out with the transaction's start, the key's lock and the
//! COMMIT, inserted only if the key's last record is still the one seen and nothing follows it.
//! Where that does not hold, nothing is written and the append is made the usual way, deciding
//! again on the key as its transaction reads it. The key's lock is taken before the check, so
//! no other append of the key can slip between the check and the insert, on any host.

use std::cell::Cell;

use interlock::core::limits::Use;
use interlock::journal::store::{self, NewRecord};
use interlock::journal::{AppendOutcome, Decide, TxLeases, Verified};
use interlock::lease::{Grant, LeaseError};
use interlock::{EffectKey, JournalError};
use postgres::types::ToSql;

use crate::journal::{Columns, PgJournal};
use crate::pool::IN_TRANSACTION;

/// How far an append at the key's head went.
#[derive(Clone, Copy)]
enum Reached {
    /// Nothing was sent: the decision asked for what only a transaction can read, or appends
    /// nothing, or failed before its records were made; the usual append says how it ends.
    Nothing,
    /// Its transaction was sent: a failure now is the append's (its COMMIT may have landed).
    Server,
    /// Sent, and nothing was inserted: the key had moved on.
    MovedOn,
}

/// The leases as an append decided before its transaction sees them: not at all. Any read marks
/// the decision as one for a transaction, and fails.
#[derive(Default)]
struct Outside {
    asked: Cell<bool>,
}

impl Outside {
    fn asked<T>(&self) -> Result<T, LeaseError> {
        self.asked.set(true);
        Err(LeaseError::Store(
            "read before the append's transaction; decided again inside it".into(),
        ))
    }
}

impl TxLeases for Outside {
    fn grant(&self, _: &str) -> Result<Option<Grant>, LeaseError> {
        self.asked()
    }
    fn routes(&self, _: &str) -> Result<Vec<interlock::approval::Route>, LeaseError> {
        self.asked()
    }
    fn uses(&self, _: &str) -> Result<Vec<Use>, LeaseError> {
        self.asked()
    }
    fn set_use(&self, _: &str, _: &str, _: i64, _: bool) -> Result<(), LeaseError> {
        self.asked()
    }
    fn budgets(&self) -> Result<Vec<interlock::budget::Budget>, LeaseError> {
        self.asked()
    }
    fn budget_holds(
        &self,
        _: &str,
        _: &str,
        _: i64,
    ) -> Result<Vec<interlock::core::budget::Hold>, LeaseError> {
        self.asked()
    }
    fn hold_budget(
        &self,
        _: &str,
        _: &str,
        _: &interlock::core::budget::Hold,
    ) -> Result<(), LeaseError> {
        self.asked()
    }
    fn release_budgets(&self, _: &str) -> Result<(), LeaseError> {
        self.asked()
    }
}

impl PgJournal {
    /// The append decided on `seen` and sent whole, or `None` when it was not appended (nothing
    /// of it is written then). A failure once the transaction was sent is returned: like any
    /// append's, its COMMIT may have landed.
    pub(crate) fn append_at_head(
        &self,
        key: &EffectKey,
        seen: &Verified,
        decide: &mut Decide<'_>,
    ) -> Result<Option<AppendOutcome>, JournalError> {
        let Some(last) = seen.records().last() else {
            return Ok(None);
        };
        // The connection first, so the time decided at is not earlier than the transaction by
        // a wait for the pool (only by the wait for the key's lock). It is given back before
        // the caller falls back to the usual append, which takes one of its own.
        let mut conn = self.conn()?;
        let outside = Outside::default();
        let reached = Cell::new(Reached::Nothing);
        let out = store::decide_and_append(
            self.location_str(),
            key.as_str(),
            seen.clone(),
            Some(&outside),
            decide,
            self.now_ms(),
            |rows| {
                if outside.asked.get() {
                    return Err(self.storage("decided on a lease outside a transaction"));
                }
                let inserted =
                    self.insert_at_head(&mut conn, key.as_str(), last, rows, &reached)?;
                if inserted.is_none() {
                    reached.set(Reached::MovedOn);
                }
                inserted.ok_or_else(|| self.storage("the key moved on"))
            },
        );
        match (out, reached.get()) {
            (Ok(out), _) if !out.appended.is_empty() => Ok(Some(out)),
            (Err(e), Reached::Server) => Err(e),
            (Ok(_) | Err(_), _) => Ok(None),
        }
    }

    /// START, the key's lock, the records inserted if `last` is still the key's last record,
    /// and COMMIT, in one round trip; the records' `seq`s, or `None` if the key moved on.
    fn insert_at_head(
        &self,
        conn: &mut crate::pool::Conn,
        key: &str,
        last: &interlock::journal::Record,
        rows: &[NewRecord<'_>],
        reached: &Cell<Reached>,
    ) -> Result<Option<Vec<i64>>, JournalError> {
        let Some(c) = Columns::of(self, rows)? else {
            return Ok(Some(Vec::new()));
        };
        let last_n = i32::try_from(last.n).map_err(|_| self.storage("too many records"))?;
        let (lock, insert) = (self.lock_key_sql(), self.insert_at_head_sql());
        let on_key: [&(dyn ToSql + Sync); 1] = [&key];
        let columns = c.params();
        let mut params: Vec<&(dyn ToSql + Sync)> = columns.to_vec();
        params.extend([&last_n as &(dyn ToSql + Sync), &last.seq, &last.hash]);
        reached.set(Reached::Server);
        let answers = conn
            .run_tx_whole(&[(&lock, &on_key), (&insert, &params)])
            .map_err(|e| self.err(&e))?;
        let [locked, inserted] = answers.as_slice() else {
            return Err(self.storage("the append's statements answered no rows"));
        };
        self.one_row(locked, "the key's lock")?;
        if inserted.is_empty() {
            return Ok(None);
        }
        c.seqs(self, inserted).map(Some)
    }

    /// The records and the key's head, written only if the key's last record is record `$10`
    /// with `seq` `$11` and hash `$12`, nothing follows it, and the transaction started (sent
    /// with its start, the statement would otherwise commit on its own).
    fn insert_at_head_sql(&self) -> String {
        format!(
            "WITH head AS (
                 UPDATE {s}.effects SET n = $8
                 WHERE key = $9 AND {IN_TRANSACTION}
                   AND EXISTS (SELECT 1 FROM {s}.records
                               WHERE key = $9 AND n = $10 AND seq = $11 AND hash = $12)
                   AND NOT EXISTS (SELECT 1 FROM {s}.records WHERE key = $9 AND n > $10)
                 RETURNING 1)
             INSERT INTO {s}.records (key, n, kind, at_ms, prev, hash, body)
             SELECT * FROM unnest($1::text[], $2::int4[], $3::text[], $4::int8[],
                                  $5::text[], $6::text[], $7::text[])
             WHERE EXISTS (SELECT 1 FROM head)
             RETURNING n, seq",
            s = self.schema()
        )
    }
}

#[cfg(test)]
mod tests {
    use postgres::types::ToSql;

    use crate::journal::PgJournal;
    use crate::pool::Query;

    #[test]
    fn a_head_insert_run_outside_a_transaction_writes_nothing() {
        // As when the START sent with it failed: the statement then runs on its own, and would
        // commit its records without the key's lock.
        let (journal, schema, _) = PgJournal::on_fresh_schema("at_head");
        let mut conn = journal.conn().expect("a connection");
        let count = |conn: &mut crate::pool::Conn| {
            conn.run(|q| {
                q.query_one(&format!("SELECT count(*) FROM {schema}.records"), &[])
                    .map(|r| r.get::<_, i64>(0))
            })
            .expect("counted")
        };
        let seq: i64 = conn
            .run(|q| {
                q.query_one(
                    &format!(
                        "WITH e AS (INSERT INTO {schema}.effects (key, n) VALUES ('k', 0))
                         INSERT INTO {schema}.records (key, n, kind, at_ms, prev, hash, body)
                         VALUES ('k', 0, 'PROPOSED', 1, NULL, 'h0', '{{}}') RETURNING seq"
                    ),
                    &[],
                )
            })
            .expect("the key's first record")
            .get(0);
        let insert = journal.insert_at_head_sql();
        let (keys, ns, kinds, ats) = (vec!["k"], vec![1_i32], vec!["COMMITTED"], vec![2_i64]);
        let (prevs, hashes, bodies) = (vec!["h0"], vec!["h1"], vec!["{}"]);
        let params: [&(dyn ToSql + Sync); 12] = [
            &keys, &ns, &kinds, &ats, &prevs, &hashes, &bodies, &1_i32, &"k", &0_i32, &seq, &"h0",
        ];
        let alone = conn.run(|q| q.query(&insert, &params)).expect("run");
        assert_eq!((alone.len(), count(&mut conn)), (0, 1), "nothing inserted");
        // Sent with the START, as the journal sends it, the same statement appends.
        let answers = conn.run_tx_whole(&[(&insert, &params)]).expect("run");
        let rows = answers.last().map_or(0, Vec::len);
        assert_eq!(
            (rows, count(&mut conn)),
            (1, 2),
            "appended in a transaction"
        );
    }
}
