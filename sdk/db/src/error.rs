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
    /// A PostgreSQL target was opened without the substrate's stage key.
    #[error(
        "the PostgreSQL target has no usable stage key for the substrate in schema {schema} ({why}): \
         give it the key interlock_db::postgres::install returned (or read it again, as the role that \
         installed the substrate, with interlock_db::postgres::stage_key or `interlock db stage-key`) \
         in PgDbOptions::stage_key or INTERLOCK_DB_STAGE_KEY"
    )]
    NoStageKey {
        /// The substrate's schema.
        schema: String,
        /// What is missing or wrong.
        why: String,
    },
    /// A PostgreSQL target's role could reach the substrate other than through its functions.
    #[error(
        "the role this PostgreSQL target connects as is not confined, so a plan's statements could reach the markers: {}. Connect as a role that holds only the rights its plans need on your tables plus what interlock_db::postgres::allow grants, or set PgDbOptions::plans_are_trusted if your own code writes every plan (docs/db-effects.md, \"Roles and grants\")",
        findings.join("; ")
    )]
    Unconfined {
        /// What the server's catalogs say the role can do, one finding each.
        findings: Vec<String>,
    },
    /// A PostgreSQL target's role has not been let in to the substrate.
    #[error(
        "role {role} may not use the substrate in schema {schema}: run interlock_db::postgres::allow(client, \"{schema}\", \"{role}\") as the role that installed it"
    )]
    NotAllowed {
        /// The role the target connects as.
        role: String,
        /// The substrate's schema.
        schema: String,
    },
    /// A role name that cannot be granted as given.
    #[error("role `{role}` cannot be granted: name a role with letters, digits and `_`")]
    BadRole {
        /// The name given.
        role: String,
    },
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
        DbError::Database {
            doing,
            what: crate::stage_end::described(&e),
        }
    }
}
