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

/// Open the journal `name` (a path, or a `postgres://` URL with `opts`), creating it if missing.
pub fn open_named(
    name: &str,
    clock: Arc<dyn Clock>,
    opts: &PgOptions,
) -> Result<Opened, JournalError> {
    if is_server(name) {
        Ok(Opened {
            store: Arc::new(PgJournal::open(name, clock, opts)?),
            config: GateConfig::shared_builder(),
        })
    } else {
        Ok(Opened {
            store: Arc::new(SqliteJournal::open(name, clock)?),
            config: GateConfig::builder(name),
        })
    }
}
