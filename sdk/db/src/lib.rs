//! Database effects: a write to the team's own database, gated like a call to a service but
//! with more to go on. A plan is staged in a real transaction, the database's own triggers say
//! which rows it changed and how, deterministic checks judge that measurement, and only then is
//! it committed — with a marker row under the effect's key in the same transaction, so after a
//! crash the marker alone says whether it happened. Nothing is ambiguous and nothing is sent
//! twice: a second stage under a key finds the marker and writes nothing.
//!
//! * [`plan`]: what a plan is and the rules its SQL must follow ([`sql_shape`]).
//! * [`diff`]: what a stage changed, as measured.
//! * [`checks`]: the operator's [`Policy`] and the pure checks that judge a diff by it.
//! * [`receipt`]: what a commit leaves in its marker and in the journal.
//! * [`outbox`]: calls a plan asks for once its rows commit, and the relay that makes them
//!   through the gate.
//! * [`sqlite`]: the SQLite substrate: [`sqlite::install`] and [`SqliteDb`], a gate target.
//! * [`postgres`]: the PostgreSQL substrate: [`postgres::install`] and [`PgDb`], a gate target.
//!
//! A plan is the effect's payload: `Effect::new(key, &plan.to_payload(), lease)`, submitted
//! through a gate bound to a [`SqliteDb`], from a Temporal activity like any other effect.

pub mod checks;
pub mod diff;
mod error;
pub mod outbox;
pub mod plan;
pub mod postgres;
pub mod receipt;
pub mod sql_shape;
pub mod sqlite;
mod stage_end;

pub use checks::{DeltaCap, Policy, RowWindow, Spent, Verdict};
pub use diff::{Change, Diff, Op};
pub use error::DbError;
pub use outbox::{Outbox, Relayed, Request, as_planned, relay};
pub use plan::{Footprint, Outgoing, Plan, PlanError, Premise, Statement};
pub use postgres::{PgDb, PgDbOptions};
pub use receipt::Receipt;
pub use sqlite::SqliteDb;
