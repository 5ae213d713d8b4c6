//! The journal's tables in their own PostgreSQL schema, created once by whichever worker comes
//! first and checked by every later one: a schema written by another version of Interlock, or
//! belonging to another deployment, is refused with the reason rather than read or extended.

use interlock::JournalError;
use interlock::journal::SCHEMA_VERSION;

/// The format marker every journal schema carries.
const FORMAT: &str = "interlock-journal";

/// A PostgreSQL schema name the journal may use: lower-case letters, digits and `_`, not
/// starting with a digit, at most 63 bytes (so it needs no quoting and cannot inject SQL).
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
}

/// The tables, in schema `s`.
///
/// * `records`: one row per record, the same columns as the SQLite journal's.
/// * `effects`: one row per key, its chain head. Every append locks it first, so appends to one
///   key are serial across every host while other keys proceed.
/// * `leases`: grants and revocations, read inside the append that checks them.
/// * `routes`: each request's steps through the approver groups, read inside the append that
///   checks an approval.
/// * `lease_uses`: which keys hold a use of a lease that counts its uses, taken and given back
///   by the append that changes the key's history.
/// * `budget_changes`: every budget as set or removed, with who did it; `budget_holds`: the
///   places effects hold in the budgets, kept as lease uses are.
/// * `holds`: which server lifetime each liveness lock was first taken in: the server's start
///   time and the id in `server_epoch`, an unlogged table the server empties whenever it starts
///   after a crash, including the crash of any one server process, which ends every session
///   without a new start time. A lock with no row, or a row from another lifetime, is never
///   judged released.
fn ddl(s: &str) -> String {
    let routes = routes_ddl(s);
    let uses = uses_ddl(s);
    format!(
        "CREATE TABLE {s}.meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE {s}.records (
             seq   BIGSERIAL PRIMARY KEY,
             key   TEXT NOT NULL,
             n     INTEGER NOT NULL,
             kind  TEXT NOT NULL,
             at_ms BIGINT NOT NULL,
             prev  TEXT,
             hash  TEXT NOT NULL,
             body  TEXT NOT NULL,
             UNIQUE (key, n)
         );
         CREATE INDEX records_kind ON {s}.records (kind);
         CREATE TABLE {s}.effects (key TEXT PRIMARY KEY, n INTEGER NOT NULL);
         CREATE TABLE {s}.leases (
             id         TEXT PRIMARY KEY,
             approver   TEXT NOT NULL,
             scope      TEXT NOT NULL,
             cap_field  TEXT,
             cap        BIGINT,
             granted_ms BIGINT NOT NULL,
             expires_ms BIGINT,
             revoked_ms BIGINT,
             approval   TEXT
         );
         {routes}
         {uses}
         CREATE TABLE {s}.holds (
             lock_id        BIGINT PRIMARY KEY,
             server_started TIMESTAMPTZ NOT NULL
         );
         {}",
        epoch_ddl(s)
    )
}

/// Added within version 2: the lifetime id a crash changes ([`ddl`], `holds`). A row written by
/// an older release has none, and so never looks released.
fn epoch_ddl(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.holds ADD COLUMN IF NOT EXISTS epoch TEXT;
         CREATE UNLOGGED TABLE IF NOT EXISTS {s}.server_epoch (
             one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
             id  TEXT NOT NULL
         );"
    )
}

fn routes_ddl(s: &str) -> String {
    format!(
        "CREATE TABLE {s}.routes (
             request    TEXT NOT NULL,
             n          INTEGER NOT NULL,
             kind       TEXT NOT NULL,
             level      INTEGER NOT NULL,
             group_name TEXT NOT NULL,
             reason     TEXT NOT NULL,
             repair_of  TEXT,
             detail     TEXT NOT NULL,
             at_ms      BIGINT NOT NULL,
             PRIMARY KEY (request, n)
         );"
    )
}

fn uses_ddl(s: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {s}.lease_uses (
             lease  TEXT NOT NULL,
             key    TEXT NOT NULL,
             amount BIGINT NOT NULL,
             at_ms  BIGINT NOT NULL,
             PRIMARY KEY (lease, key)
         );
         CREATE TABLE IF NOT EXISTS {s}.budget_changes (
             id    TEXT NOT NULL,
             n     INTEGER NOT NULL,
             spec  TEXT,
             at_ms BIGINT NOT NULL,
             by    TEXT NOT NULL,
             PRIMARY KEY (id, n)
         );
         CREATE TABLE IF NOT EXISTS {s}.budget_holds (
             budget TEXT NOT NULL,
             bucket TEXT NOT NULL,
             key    TEXT NOT NULL,
             amount   BIGINT NOT NULL,
             at_ms    BIGINT NOT NULL,
             until_ms BIGINT NOT NULL,
             PRIMARY KEY (budget, key)
         );
         CREATE INDEX IF NOT EXISTS budget_holds_window ON {s}.budget_holds (budget, bucket, until_ms);
         CREATE INDEX IF NOT EXISTS budget_holds_key ON {s}.budget_holds (key);
         CREATE TABLE IF NOT EXISTS {s}.budget_totals (
             budget  TEXT NOT NULL,
             bucket  TEXT NOT NULL,
             mark_ms BIGINT NOT NULL,
             total   BIGINT NOT NULL,
             PRIMARY KEY (budget, bucket)
         );"
    )
}

/// Version 1 to 2: leases may carry a signed approval, and requests have routes.
fn upgrade_1_to_2(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.leases ADD COLUMN approval TEXT; {} \
         UPDATE {s}.meta SET value = '2' WHERE name = 'schema_version';",
        routes_ddl(s)
    )
}

/// Create the journal's schema if it does not exist, or check the one that does.
pub(crate) fn ensure(
    client: &mut postgres::Client,
    location: &str,
    schema: &str,
    deployment: &str,
    create: bool,
) -> Result<(), JournalError> {
    let err = |e: postgres::Error| crate::connect::journal_err(location, &e);
    let mut tx = client.transaction().map_err(err)?;
    // Workers starting together: one creates, the others wait here and then check.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('interlock-schema:' || $1, 0))",
        &[&schema],
    )
    .map_err(err)?;
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .map_err(err)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let place = format!("{location} (schema {schema})");
    if tables.iter().any(|t| t == "meta") {
        let meta: Vec<(String, String)> = tx
            .query(&format!("SELECT name, value FROM {schema}.meta"), &[])
            .map_err(err)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let get = |name: &str| meta.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        if get("format").as_deref() != Some(FORMAT) {
            return Err(JournalError::Foreign {
                path: place,
                why: format!("its format marker is {:?}", get("format")),
            });
        }
        let mut version = get("schema_version").unwrap_or_default();
        if version == "1" && create {
            tx.batch_execute(&upgrade_1_to_2(schema)).map_err(err)?;
            tracing::info!(location, schema, "upgraded the journal to schema version 2");
            version = SCHEMA_VERSION.to_string();
        }
        // Added within version 2: a release without it reads the journal as before, and never
        // dispatches under a lease whose uses are counted.
        let missing = [
            "lease_uses",
            "budget_changes",
            "budget_holds",
            "budget_totals",
        ]
        .iter()
        .any(|name| !tables.iter().any(|t| t == name));
        if create && version == SCHEMA_VERSION.to_string() && missing {
            tx.batch_execute(&uses_ddl(schema)).map_err(err)?;
            tracing::info!(
                location,
                schema,
                "added the tables of lease uses and budgets to the journal"
            );
        }
        if create
            && version == SCHEMA_VERSION.to_string()
            && !tables.iter().any(|t| t == "server_epoch")
        {
            tx.batch_execute(&epoch_ddl(schema)).map_err(err)?;
            tracing::info!(
                location,
                schema,
                "added the server lifetime id that liveness locks are judged by"
            );
        }
        if version != SCHEMA_VERSION.to_string() {
            return Err(JournalError::SchemaVersion {
                path: place,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let theirs = get("deployment").unwrap_or_default();
        if theirs != deployment {
            return Err(JournalError::Foreign {
                path: place,
                why: format!(
                    "it belongs to deployment {theirs:?}, not {deployment:?}; give each \
                     deployment its own schema"
                ),
            });
        }
        return tx.commit().map_err(err);
    }
    if let Some(other) = tables.first() {
        return Err(JournalError::Foreign {
            path: place,
            why: format!("it holds a table named {other:?} and no journal marker"),
        });
    }
    if !create {
        return Err(JournalError::Storage {
            path: place,
            what: "no Interlock journal here: check the URL and the schema (INTERLOCK_JOURNAL, \
                   INTERLOCK_JOURNAL_SCHEMA), or start a worker to create it"
                .into(),
        });
    }
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema}; {}",
        ddl(schema)
    ))
    .map_err(err)?;
    tx.execute(
        &format!(
            "INSERT INTO {schema}.meta (name, value) VALUES ('format', $1), \
             ('schema_version', $2), ('deployment', $3)"
        ),
        &[&FORMAT, &SCHEMA_VERSION.to_string(), &deployment],
    )
    .map_err(err)?;
    tx.commit().map_err(err)?;
    tracing::info!(location, schema, deployment, "created the journal's schema");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_lower_case_schema_names_are_accepted() {
        assert!(valid_name("interlock"));
        assert!(valid_name("shop_eu_2"));
        assert!(!valid_name(""));
        assert!(!valid_name("2shop"));
        assert!(!valid_name("Interlock"));
        assert!(!valid_name("a; DROP TABLE x"));
        assert!(!valid_name(&"a".repeat(64)));
    }
}
