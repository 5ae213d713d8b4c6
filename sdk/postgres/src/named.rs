//! One way to name a journal wherever a person or a worker names one (`INTERLOCK_JOURNAL`,
//! `--journal`): a file path is an SQLite journal, a `postgres://` URL a PostgreSQL one. What
//! comes back carries the gate configuration that store needs: lock files beside an SQLite
//! journal, the server's own locks for PostgreSQL.

use std::sync::Arc;

use interlock::gate::GateConfigBuilder;
use interlock::{Clock, GateConfig, JournalError, JournalStore, SqliteJournal};

use crate::{PgJournal, PgOptions};

/// An opened journal and the gate configuration its store needs.
pub struct Opened {
    /// The journal with its leases.
    pub store: Arc<dyn JournalStore>,
    /// Defaults for a gate over it (lock directory, or none).
    pub config: GateConfigBuilder,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("store", &self.store.location())
            .finish()
    }
}

/// `name` as it may be shown in a message or a log: a password in a URL is cut out.
pub fn shown(name: &str) -> String {
    crate::connect::redact(name)
}

/// Whether `name` names a PostgreSQL server rather than a file.
pub fn is_server(name: &str) -> bool {
    name.starts_with("postgres://") || name.starts_with("postgresql://")
}

/// The variable naming the principal a process acts for: journaled as the proposer of the
/// effects its gates propose and the caller of the claims they take, and who the leases that
/// name their spenders are judged for (a gate server's callers are its own, whatever it says).
pub const PRINCIPAL_VAR: &str = "INTERLOCK_PRINCIPAL";

/// Open the journal `name` (a path, or a `postgres://` URL with `opts`), creating it if missing.
/// The gate configuration it comes with acts for [`PRINCIPAL_VAR`]'s principal, when it is set.
pub fn open_named(
    name: &str,
    clock: Arc<dyn Clock>,
    opts: &PgOptions,
) -> Result<Opened, JournalError> {
    let (store, config): (Arc<dyn JournalStore>, GateConfigBuilder) = if is_server(name) {
        (
            Arc::new(PgJournal::open(name, clock, opts)?),
            GateConfig::shared_builder(),
        )
    } else {
        (
            Arc::new(SqliteJournal::open(name, clock)?),
            GateConfig::builder(name),
        )
    };
    let config = match std::env::var(PRINCIPAL_VAR) {
        Ok(p) if !p.trim().is_empty() => config.principal(p.trim()),
        _ => config,
    };
    Ok(Opened { store, config })
}
