//! Leases kept in the journal's own file, so a grant, a revocation and the dispatch that checks
//! them are all on the same disk under the same locks.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::TxLeases;
use super::sqlite::SqliteJournal;
use crate::core::LeaseVerdict;
use crate::journal::Journal;
use crate::lease::{Grant, LeaseError, LeaseStore, StoredGrant, verdict_of};

fn store_err(e: impl std::fmt::Display) -> LeaseError {
    LeaseError::Store(e.to_string())
}

impl SqliteJournal {
    /// Record a new grant. Granting an id twice is an error: revoke and grant a new id instead.
    pub fn grant_lease(&self, grant: &Grant) -> Result<(), LeaseError> {
        let g = StoredGrant::of(grant)?;
        let done = self
            .write(|conn| {
                let n = conn
                    .execute(
                        "INSERT OR IGNORE INTO leases (id, approver, scope, cap_field, cap, granted_ms, expires_ms, revoked_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                        params![g.id, g.approver, g.scope, g.cap_field, g.cap, g.granted_ms, g.expires_ms, g.revoked_ms],
                    )
                    .map_err(|e| self.err(e))?;
                Ok((n, n > 0))
            })
            .map_err(store_err)?;
        if done == 0 {
            return Err(StoredGrant::exists(&g.id));
        }
        Ok(())
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
            .map_err(store_err)?;
        Ok(n > 0)
    }

    /// Every grant, oldest first.
    pub fn leases(&self) -> Result<Vec<Grant>, LeaseError> {
        self.read_with(|conn| {
            let mut st = conn
                .prepare("SELECT id, approver, scope, cap_field, cap, granted_ms, expires_ms, revoked_ms FROM leases ORDER BY granted_ms, id")
                .map_err(|e| store_err(self.err(e)))?;
            let rows = st
                .query_map([], row_to_parts)
                .map_err(|e| store_err(self.err(e)))?;
            rows.map(|r| {
                r.map_err(|e| store_err(self.err(e)))
                    .and_then(StoredGrant::into_grant)
            })
            .collect()
        })
    }

    fn lease(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        self.read_with(|conn| self.lease_on(conn, id))
    }

    fn lease_on(&self, conn: &Connection, id: &str) -> Result<Option<Grant>, LeaseError> {
        let parts = conn
            .query_row(
                "SELECT id, approver, scope, cap_field, cap, granted_ms, expires_ms, revoked_ms FROM leases WHERE id = ?1",
                [id],
                row_to_parts,
            )
            .optional()
            .map_err(|e| store_err(self.err(e)))?;
        parts.map(StoredGrant::into_grant).transpose()
    }
}

/// The journal's leases as read inside one of its write transactions.
pub(super) struct TxLeaseReader<'a> {
    pub(super) journal: &'a SqliteJournal,
    pub(super) conn: &'a Connection,
}

impl TxLeases for TxLeaseReader<'_> {
    fn grant(&self, id: &str) -> Result<Option<Grant>, LeaseError> {
        self.journal.lease_on(self.conn, id)
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
