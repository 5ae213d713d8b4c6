//! What a plan's statements may do on SQLite, enforced by SQLite itself: an authorizer, installed
//! while a plan's statement (or premise) is prepared and run, sees every table and action the
//! statement's program — and every trigger program it fires — compiles to. The lexer in
//! [`crate::sql_shape`] refuses what it can read; this catches what it cannot (a name built at
//! run time is not possible in SQLite, but a view or a team's trigger may reach anywhere).
//!
//! Refused: reading the substrate's markers and change records, writing any of its tables
//! (except the change record its own triggers write), transactions and savepoints, pragmas,
//! attaching databases, and any schema change.

use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};

/// The first thing the authorizer refused while it was installed.
#[derive(Clone, Default)]
pub(crate) struct Refusals(Arc<Mutex<Option<String>>>);

impl Refusals {
    /// What was refused, if anything.
    pub(crate) fn first(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Install the authorizer on `conn`; [`lift`] removes it.
pub(crate) fn install(conn: &Connection) -> Refusals {
    let refusals = Refusals::default();
    let seen = refusals.clone();
    conn.authorizer(Some(move |ctx: AuthContext<'_>| match refusal(&ctx) {
        None => Authorization::Allow,
        Some(why) => {
            let mut first = seen.0.lock().unwrap_or_else(PoisonError::into_inner);
            first.get_or_insert(why);
            Authorization::Deny
        }
    }));
    refusals
}

/// Remove the authorizer: the substrate's own statements run unchecked.
pub(crate) fn lift(conn: &Connection) {
    conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>);
}

fn substrate(table: &str) -> bool {
    table.to_ascii_lowercase().starts_with("interlock_")
}

/// Whether `accessor` is one of the substrate's own triggers (`interlock_<table>_insert`, …).
/// SQLite also names a subquery or a CTE as the accessor of what it reads, and a plan may name
/// those freely: so this only ever admits the one write those triggers make, never a read.
fn substrate_trigger(accessor: Option<&str>) -> bool {
    accessor.is_some_and(|a| {
        substrate(a) && (a.ends_with("_insert") || a.ends_with("_update") || a.ends_with("_delete"))
    })
}

/// Why `ctx` is refused, or `None`.
fn refusal(ctx: &AuthContext<'_>) -> Option<String> {
    match ctx.action {
        // The substrate's triggers write change records and read the stage's name; nothing of
        // a plan's touches its tables otherwise. The stage's own row is the plan's key and
        // statement name, nothing another tenant owns.
        AuthAction::Insert { table_name }
            if table_name.eq_ignore_ascii_case("interlock_changes")
                && substrate_trigger(ctx.accessor) =>
        {
            None
        }
        AuthAction::Read { table_name, .. }
            if table_name.eq_ignore_ascii_case("interlock_stage") =>
        {
            None
        }
        AuthAction::Insert { table_name }
        | AuthAction::Delete { table_name }
        | AuthAction::Update { table_name, .. }
        | AuthAction::Read { table_name, .. }
            if substrate(table_name) =>
        {
            Some(format!("it reaches the substrate's table {table_name}"))
        }
        AuthAction::Insert { .. }
        | AuthAction::Delete { .. }
        | AuthAction::Update { .. }
        | AuthAction::Read { .. }
        | AuthAction::Select
        | AuthAction::Function { .. }
        | AuthAction::Recursive => None,
        AuthAction::Transaction { .. } | AuthAction::Savepoint { .. } => {
            Some("it would end or nest the stage's transaction".into())
        }
        AuthAction::Pragma { pragma_name, .. } => Some(format!("it runs pragma {pragma_name}")),
        AuthAction::Attach { .. } | AuthAction::Detach { .. } => {
            Some("it attaches or detaches a database".into())
        }
        other => Some(format!("a plan may not do this: {other:?}")),
    }
}
