//! The journal stores the conformance suite runs every journal and lease-store test against:
//! SQLite in a temporary directory, and PostgreSQL in a schema of its own on one throwaway
//! server per test process (or the server `INTERLOCK_DATABASE_URL` names).

use std::sync::Arc;

use interlock::lease::LeaseError;
use interlock::{Clock, Gate, GateConfig, Grant, Journal, JournalStore, LeaseStore, SqliteJournal};
use interlock_postgres::{PgJournal, PgOptions};
use interlock_testkit::pg::Cluster;

/// Which store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One SQLite file.
    Sqlite,
    /// A PostgreSQL schema.
    Postgres,
}

enum Handle {
    Sqlite(Arc<SqliteJournal>),
    Postgres(Arc<PgJournal>),
}

/// One journal with its leases, and what a test needs to reach around the API (a second handle,
/// raw SQL for tampering).
pub struct Store {
    /// Which store this is.
    pub kind: Kind,
    handle: Handle,
    clock: Arc<dyn Clock>,
    dir: tempfile::TempDir,
    /// The PostgreSQL schema, or empty.
    pub schema: String,
    url: String,
}

impl Store {
    /// A new, empty store of `kind`.
    pub fn open(kind: Kind, label: &str, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        Ok(match kind {
            Kind::Sqlite => Self {
                kind,
                handle: Handle::Sqlite(Arc::new(SqliteJournal::open(
                    dir.path().join("j.db"),
                    clock.clone(),
                )?)),
                clock,
                dir,
                schema: String::new(),
                url: String::new(),
            },
            Kind::Postgres => {
                let cluster = Cluster::shared()?;
                let schema = cluster.fresh_schema(label);
                let url = cluster.url().to_owned();
                let journal =
                    PgJournal::open(&url, clock.clone(), &PgOptions::in_schema(schema.as_str()))?;
                Self {
                    kind,
                    handle: Handle::Postgres(Arc::new(journal)),
                    clock,
                    dir,
                    schema,
                    url,
                }
            }
        })
    }

    /// The journal.
    pub fn journal(&self) -> Arc<dyn Journal> {
        match &self.handle {
            Handle::Sqlite(j) => j.clone(),
            Handle::Postgres(j) => j.clone(),
        }
    }

    /// The journal with its leases.
    pub fn store(&self) -> Arc<dyn JournalStore> {
        match &self.handle {
            Handle::Sqlite(j) => j.clone(),
            Handle::Postgres(j) => j.clone(),
        }
    }

    /// The lease store (the journal's own).
    pub fn leases(&self) -> Arc<dyn LeaseStore> {
        match &self.handle {
            Handle::Sqlite(j) => j.clone(),
            Handle::Postgres(j) => j.clone(),
        }
    }

    /// Another handle on the same store, as another worker process would open it.
    pub fn reopen(&self) -> anyhow::Result<Arc<dyn Journal>> {
        Ok(self.reopen_store()?)
    }

    /// The PostgreSQL server's URL, or empty.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Another handle on the same store, with its leases and routes.
    pub fn reopen_store(&self) -> anyhow::Result<Arc<dyn JournalStore>> {
        Ok(match self.kind {
            Kind::Sqlite => Arc::new(SqliteJournal::open(
                self.dir.path().join("j.db"),
                self.clock.clone(),
            )?),
            Kind::Postgres => Arc::new(PgJournal::open(
                &self.url,
                self.clock.clone(),
                &PgOptions::in_schema(self.schema.as_str()),
            )?),
        })
    }

    /// The gate configuration for this store: lock files beside an SQLite journal, none for
    /// PostgreSQL (its advisory locks serve every host).
    pub fn config(&self) -> GateConfig {
        match self.kind {
            Kind::Sqlite => GateConfig::beside(self.dir.path().join("j.db")),
            Kind::Postgres => GateConfig::shared(),
        }
    }

    /// A gate over this store with `clock`.
    pub fn gate(&self, clock: Arc<dyn Clock>) -> anyhow::Result<Gate> {
        Ok(Gate::new(
            self.journal(),
            self.leases(),
            clock,
            self.config(),
        )?)
    }

    /// A gate over this handle bound to `target` with no premises, its claims named `attempt`.
    pub fn bound(
        &self,
        clock: Arc<dyn Clock>,
        target: Arc<dyn interlock::Target>,
        attempt: &str,
    ) -> anyhow::Result<interlock::Bound> {
        Ok(self
            .gate(clock)?
            .with_attempt(attempt)
            .bind(target, Arc::new(interlock::premise::NoPremises))?)
    }

    /// A gate on a handle of its own (as another worker process opens the store), bound to
    /// `target` with no premises, its claims named `attempt`.
    pub fn worker(
        &self,
        clock: Arc<dyn Clock>,
        target: Arc<dyn interlock::Target>,
        attempt: &str,
    ) -> anyhow::Result<interlock::Bound> {
        Ok(
            Gate::new(self.reopen()?, self.leases(), clock, self.config())?
                .with_attempt(attempt)
                .bind(target, Arc::new(interlock::premise::NoPremises))?,
        )
    }

    /// A gate bound to `target` with no premises whose process "dies" at `point`.
    pub fn crashing_at(
        &self,
        clock: Arc<dyn Clock>,
        target: Arc<dyn interlock::Target>,
        point: interlock::faults::FaultPoint,
    ) -> anyhow::Result<interlock::Bound> {
        let faults = interlock_testkit::faults::ScriptedFaults::new();
        faults.arm(point, interlock_testkit::faults::Action::Crash);
        Ok(self
            .gate(clock)?
            .with_attempt("crashing")
            .with_faults(faults)
            .bind(target, Arc::new(interlock::premise::NoPremises))?)
    }

    /// Grant a lease.
    pub fn grant(&self, g: &Grant) -> Result<(), LeaseError> {
        match &self.handle {
            Handle::Sqlite(j) => j.grant_lease(g),
            Handle::Postgres(j) => j.grant_lease(g),
        }
    }

    /// Revoke a lease.
    pub fn revoke(&self, id: &str) -> Result<bool, LeaseError> {
        match &self.handle {
            Handle::Sqlite(j) => j.revoke_lease(id),
            Handle::Postgres(j) => j.revoke_lease(id),
        }
    }

    /// Every grant.
    pub fn all_leases(&self) -> Result<Vec<Grant>, LeaseError> {
        match &self.handle {
            Handle::Sqlite(j) => j.leases(),
            Handle::Postgres(j) => j.leases(),
        }
    }

    /// Run `sql` on the store behind the journal's back, as a person with `sqlite3` or `psql`
    /// would; `{records}`, `{leases}`, `{routes}` and `{meta}` name the tables.
    pub fn tamper(&self, sql: &str) -> anyhow::Result<()> {
        match self.kind {
            Kind::Sqlite => {
                let conn = rusqlite::Connection::open(self.dir.path().join("j.db"))?;
                let sql = ["records", "leases", "routes"]
                    .iter()
                    .fold(sql.to_owned(), |s, t| s.replace(&format!("{{{t}}}"), t))
                    .replace("{meta}", "interlock_meta");
                conn.execute_batch(&sql)?;
            }
            Kind::Postgres => {
                let mut c = postgres::Client::connect(&self.url, postgres::NoTls)?;
                let sql = ["records", "leases", "routes", "meta"]
                    .iter()
                    .fold(sql.to_owned(), |s, t| {
                        s.replace(&format!("{{{t}}}"), &format!("{}.{t}", self.schema))
                    });
                c.batch_execute(&sql)?;
            }
        }
        Ok(())
    }
}

/// One test function per store: `every_store!(f, g)` makes `sqlite::f`, `postgres::f`, … each
/// calling `f(Kind::…)`.
#[macro_export]
macro_rules! every_store {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name($crate::stores::Kind::Sqlite) })*
        }
        mod postgres {
            $(#[test] fn $name() { super::$name($crate::stores::Kind::Postgres) })*
        }
    };
}
