//! Errors of setting a substrate up and of reading what it recorded. A stage's own failures are
//! not errors here: they are the target's answers (refused, not applied, or unknown), judged by
//! the gate like any other target's.

use crate::plan::PlanError;

/// What went wrong outside a stage.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database refused or failed a statement of the substrate's own.
    #[error("{doing}: {what}")]
    Database {
        /// What the substrate was doing.
        doing: &'static str,
        /// The database's message.
        what: String,
    },
    /// A table that cannot be observed.
    #[error("table `{table}` cannot be observed: {why}")]
    BadTable {
        /// The name given.
        table: String,
        /// Why, and what to do.
        why: &'static str,
    },
    /// The substrate's tables are missing.
    #[error(
        "this database has no interlock substrate{where_}: install it first (interlock_db::sqlite::install or interlock_db::postgres::install, naming the tables to observe)"
    )]
    NotInstalled {
        /// Where it was looked for (a PostgreSQL schema), or empty.
        where_: String,
    },
    /// A PostgreSQL target opened without `PgDbOptions::plans_are_trusted`.
    #[error(
        "the PostgreSQL substrate does not yet confine a plan's statements by the server's privileges (a statement could reach the markers through a function that runs SQL of its own); set PgDbOptions::plans_are_trusted only if your own code writes every plan, or stage agents' plans on SQLite, whose authorizer confines them (docs/db-effects.md)"
    )]
    UntrustedPlans,
    /// A plan.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A stored row the substrate cannot read back.
    #[error("a stored {what} cannot be read: {detail}")]
    Stored {
        /// Which row.
        what: &'static str,
        /// Why.
        detail: String,
    },
}

impl DbError {
    pub(crate) fn sqlite(doing: &'static str, e: rusqlite::Error) -> Self {
        DbError::Database {
            doing,
            what: e.to_string(),
        }
    }

    pub(crate) fn postgres(doing: &'static str, e: postgres::Error) -> Self {
        // The server's own message (with its SQLSTATE) where there is one.
        let what = e.as_db_error().map_or_else(
            || e.to_string(),
            |d| format!("{} ({})", d.message(), d.code().code()),
        );
        DbError::Database { doing, what }
    }
}
