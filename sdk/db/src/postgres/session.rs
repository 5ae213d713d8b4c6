//! One connection to the team's server and the substrate's own statements prepared on it: each
//! is parsed and planned once per session, not on every stage (the statistics and lock views the
//! stage reads cost more to plan than to run).

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

/// Statements kept per session; past this the cache starts again.
const KEPT: usize = 256;

/// A connection and its prepared statements.
pub(crate) struct Session {
    client: Client,
    prepared: HashMap<String, Statement>,
    search_path: Option<String>,
    /// The substrate's stage key: every stage opens with a proof made with it.
    stage_key: std::sync::Arc<[u8]>,
}

impl Session {
    /// A session on `client`, its `search_path` set (and set again after every stage).
    pub(crate) fn new(
        mut client: Client,
        search_path: Option<String>,
        stage_key: std::sync::Arc<[u8]>,
    ) -> Result<Self, postgres::Error> {
        if let Some(path) = &search_path {
            client.query_one(
                "SELECT pg_catalog.set_config('search_path', $1, false)",
                &[path],
            )?;
        }
        Ok(Self {
            client,
            prepared: HashMap::new(),
            search_path,
            stage_key,
        })
    }

    /// The proof `open` asks for a stage under `key` in transaction `xid`: the hex
    /// HMAC-SHA-256 of `interlock-stage-v2:`, the transaction's id, `:` and the key, under the
    /// stage key.
    pub(crate) fn proof(&self, xid: &str, key: &str) -> String {
        use hmac::Mac;
        // HMAC takes a key of any length: this cannot fail.
        let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.stage_key) else {
            return String::new();
        };
        mac.update(b"interlock-stage-v2:");
        mac.update(xid.as_bytes());
        mac.update(b":");
        mac.update(key.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// End whatever a stage left: its transaction, every setting a plan's statement may have
    /// made for the session, and every advisory lock the session holds (the key's, and any a
    /// statement took). `Err`: the session may still hold some, and must be closed.
    pub(crate) fn end_stage(&mut self) -> Result<(), postgres::Error> {
        // `RESET ALL` leaves the role alone: a statement may have set it for the session.
        let path = self.search_path.as_deref().map_or_else(String::new, |p| {
            format!(
                " SELECT pg_catalog.set_config('search_path', '{}', false);",
                p.replace('\'', "''")
            )
        });
        self.client.batch_execute(&format!(
            "ROLLBACK; RESET ROLE; RESET ALL; SELECT pg_catalog.pg_advisory_unlock_all();{path}"
        ))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// `sql`, prepared once per session.
    pub(crate) fn prepare(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(st) = self.prepared.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.prepare(sql)?;
        if self.prepared.len() >= KEPT {
            self.prepared.clear();
        }
        self.prepared.insert(sql.to_owned(), st.clone());
        Ok(st)
    }

    /// `sql`, prepared for this use only: a plan's statements are not kept, so one the team's
    /// migration changed under it is planned afresh.
    pub(crate) fn prepare_once(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        self.client.prepare(sql)
    }

    pub(crate) fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        let st = self.prepare(sql)?;
        self.client.query_one(&st, params)
    }

    pub(crate) fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let st = self.prepare(sql)?;
        self.client.query(&st, params)
    }

    pub(crate) fn query_prepared(
        &mut self,
        st: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        self.client.query(st, params)
    }

    pub(crate) fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        let st = self.prepare(sql)?;
        self.client.execute(&st, params)
    }

    pub(crate) fn execute_prepared(
        &mut self,
        st: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.client.execute(st, params)
    }

    /// Statements without parameters, in one round trip (never prepared).
    pub(crate) fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.client.batch_execute(sql)
    }
}
