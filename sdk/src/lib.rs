//! Interlock makes side effects safe under crashes and retries: each effect happens once (or is
//! honestly marked unknown), under a lease that was live when it fired, on premises that still
//! held when it landed.
//!
//! # One gated refund, start to finish
//!
//! 1. **Decide.** [`Bound::decide`] fixes the [`Effect`]: its [`EffectKey`] (an approved request
//!    id, or derived from the workflow's ids), its payload, the lease it runs under, and the
//!    premises read *now* by the binding's [`PremiseReader`].
//! 2. **Submit.** [`Bound::submit`] is the whole body of every attempt — the first, a retry after
//!    a crash, a duplicate delivery. It reads the key's history from the [`Journal`] and asks the
//!    pure [`core`] what to do ([`core::decide::plan_submit`]).
//! 3. **Dispatch.** A new key takes its liveness lock, re-reads the premises, and in one journal
//!    transaction reads the lease and writes `PROPOSED`, `AUTHORIZED` and `DISPATCHED`
//!    ([`core::transition::propose_and_dispatch`]); the send's record is durable before the send.
//! 4. **Send.** The claim's fencing token is read again, the [`Target`] is called under the key
//!    with a budget, and its answer is recorded by [`core::transition::record_answer`] — the
//!    second and last durable write of a first send.
//! 5. **Recover.** An attempt that finds the effect in flight checks whether the holder can still
//!    be sending (its [`liveness`] lock: a file on one host, or the journal's own across hosts),
//!    takes the claim under a new token, and resolves by the target's tier: resend
//!    under the same key inside a dedupe window (tier 1), look the effect up (tier 2), or mark it
//!    ambiguous (tier 3) — re-reading the lease and the premises before anything goes out again.
//! 6. **Prove.** A [`receipt`] lists every record behind the outcome, signed if asked; [`verify`]
//!    checks it against the journal, the lease store and the target's own records; the target's
//!    own confirmations (Stripe's signed webhooks, `interlock_stripe::webhook`) are journaled
//!    beside them. Under Temporal, `interlock_temporal::gated()` wraps steps 2–5 as an activity
//!    body.
//!
//! The crates: `interlock-core` (the pure core, here as [`core`]), `interlock` (this one: the
//! gate, the SQLite journal, leases, receipts, verify), `interlock-postgres` (the journal, leases
//! and liveness on a PostgreSQL server, for workers on several hosts), `interlock-stripe` (the
//! Stripe refunds target, refund premises, webhooks), `interlock-temporal` (`gated()`),
//! `interlock-cli` (the `interlock` command line) and `interlock-testkit` (scripted faults, a
//! simulated payments service and throwaway PostgreSQL servers, for tests only).
//!
//! # The rules every attempt keeps
//!
//! * **R1 — journal before act.** Nothing is sent without a durable `DISPATCHED` for the sending
//!   claim ([`journal`], [`core::transition`]).
//! * **R2 — one sender at a time.** A claim carries a fencing token; a takeover is written only
//!   on the exact claim it planned on, and a superseded attempt sends nothing ([`gate`]).
//! * **R3 — one payload per key.** The first proposed payload is the only one ever sent; another
//!   is refused as `conflicting_payload`.
//! * **R4 — authorized when it fires.** The lease is read inside the transaction that writes each
//!   send's record ([`lease`]).
//! * **R5 — the facts still hold.** The premises are re-read before every send, resends included;
//!   a moved premise refuses with what changed and the repairs that still fit ([`premise`]).
//! * **R6 — honest outcomes.** `COMMITTED` only when the effect landed, `REFUSED`/`FAILED` only
//!   when it did not, `AMBIGUOUS` when that cannot be known, `APPLIED_TWICE` when the target broke
//!   its promise ([`core::Status`]).
//! * **R7 — every effect ends.** Once faults stop, every effect reaches one of those outcomes by
//!   the recovery table ([`core::decide`]).
//!
//! The contract in full, and where its guarantees end, is `docs/contract.md` in the repository.

pub mod approval;
pub mod budget;
pub mod clock;
pub use interlock_core as core;
pub mod effect;
#[cfg(feature = "test-hooks")]
pub mod faults;
#[cfg(not(feature = "test-hooks"))]
mod faults;
pub mod gate;
pub mod journal;
pub mod lease;
pub mod liveness;
pub mod metrics;
pub mod premise;
pub mod private_file;
pub mod reach;
pub mod receipt;
pub mod settle;
pub mod shown;
pub mod target;
pub mod verify;

/// Whether this build carries what a user's must not: the gate's fault points (the `test-hooks`
/// feature) or the core's known-bad variants (its `mutants` feature, which a build can turn on
/// without this crate's). False in any build a user makes; a binary that serves users prints it
/// (`interlock --version`), and CI fails when a user-facing binary is built with it.
pub const TEST_ONLY_CODE: bool = cfg!(feature = "test-hooks") || crate::core::mutants::COMPILED_IN;

pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::core::{Tier, Via};
pub use crate::effect::{Effect, EffectError, EffectKey};
pub use crate::gate::{Bound, DecideError, Gate, GateConfig, GateError, Outcome};
pub use crate::journal::{Journal, JournalError, JournalStore, SqliteJournal};
pub use crate::lease::{Grant, LeaseAdmin, LeaseStore};
pub use crate::premise::{PremiseError, PremiseReader};
pub use crate::target::Target;

#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
