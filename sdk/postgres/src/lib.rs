//! PostgreSQL for Interlock: the journal, the lease store and the liveness locks on one server,
//! so workers on several hosts share one gate. SQLite stays the embedded default for the workers
//! of one host; this crate is for fleets.
//!
//! ```no_run
//! use std::sync::Arc;
//! use interlock::{Clock, Gate, GateConfig, SystemClock};
//! use interlock_postgres::{PgJournal, PgOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock: Arc<dyn Clock> = Arc::new(SystemClock);
//! let journal = Arc::new(PgJournal::open(
//!     "postgres://interlock@db.internal:5432/payments",
//!     clock.clone(),
//!     &PgOptions::default(),
//! )?);
//! // The journal brings its own liveness: no lock directory is used.
//! let gate = Gate::new(journal.clone(), journal, clock, GateConfig::shared())?;
//! # let _ = gate;
//! # Ok(())
//! # }
//! ```
//!
//! Why a synchronous driver and `r2d2`: the gate's journal API is synchronous (the Temporal
//! adapter runs it on a blocking thread), so `postgres` — the blocking face of `tokio-postgres`
//! — fits without a runtime of our own in the caller's way, and `r2d2` is the plain blocking pool
//! for it. `docs/journal.md` in the repository says more.

mod ahead;
mod at_head;
mod budget_totals;
mod budgets;
mod connect;
mod journal;
mod liveness;
mod named;
mod pool;
mod routes;
mod schema;
mod uses;

pub use journal::{PgJournal, PgOptions};
pub use liveness::SILENT_HOLDER_KEPT;
pub use named::{Opened, PRINCIPAL_VAR, is_server, open_named, shown};
