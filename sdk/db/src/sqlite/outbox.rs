//! The SQLite substrate's outbox, as the relay reads it: calls whose plans committed, in the
//! order they did, until each is marked with a final outcome.

use crate::error::DbError;
use crate::outbox::{Outbox, Request};

use super::SqliteDb;

impl Outbox for SqliteDb {
    fn source(&self) -> &str {
        interlock::Target::name(self)
    }

    fn pending(&self, after: i64, limit: usize) -> Result<Vec<Request>, DbError> {
        let conn = self.conn();
        let mut st = conn
            .prepare_cached(
                "SELECT seq, key, id, target, lease, payload FROM interlock_outbox
                  WHERE outcome IS NULL AND seq > ?1 ORDER BY seq LIMIT ?2",
            )
            .map_err(|e| DbError::sqlite("read the outbox", e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = st
            .query_map([after, limit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })
            .map_err(|e| DbError::sqlite("read the outbox", e))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, plan_key, id, target, lease, payload) =
                row.map_err(|e| DbError::sqlite("read the outbox", e))?;
            let payload = serde_json::from_str(&payload).map_err(|e| DbError::Stored {
                what: "outbox call",
                detail: format!("{plan_key}/{id}: {e}"),
            })?;
            out.push(Request {
                source: self.source().to_owned(),
                seq,
                plan_key,
                id,
                target,
                lease,
                payload,
            });
        }
        Ok(out)
    }

    fn mark_delivered(&self, request: &Request, outcome: &str) -> Result<(), DbError> {
        self.conn()
            .execute(
                "UPDATE interlock_outbox SET outcome = ?1
                  WHERE key = ?2 AND id = ?3 AND outcome IS NULL",
                rusqlite::params![outcome, request.plan_key, request.id],
            )
            .map(drop)
            .map_err(|e| DbError::sqlite("mark an outbox call delivered", e))
    }

    fn claim(&self, request: &Request, relay: &str) -> Result<Option<String>, DbError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO interlock_outbox_relays (key, id, relay) VALUES (?1, ?2, ?3)
             ON CONFLICT (key, id) DO NOTHING",
            rusqlite::params![request.plan_key, request.id, relay],
        )
        .map_err(|e| DbError::sqlite("claim an outbox call", e))?;
        let holder: String = conn
            .query_row(
                "SELECT relay FROM interlock_outbox_relays WHERE key = ?1 AND id = ?2",
                rusqlite::params![request.plan_key, request.id],
                |r| r.get(0),
            )
            .map_err(|e| DbError::sqlite("claim an outbox call", e))?;
        Ok((holder != relay).then_some(holder))
    }
}
