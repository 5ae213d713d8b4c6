//! An exhaustive model of the gate's protocol, run on the code's own decision core. The random
//! property test samples schedules we thought of; this enumerates every interleaving of a few
//! actors, crashes, revocations, premise moves, service faults and clock steps up to a bound, and
//! checks the promise on each: one application, no send after a revocation, no send on a failed
//! re-check, commits only when applied, refusals only when not, and resolution once calm.

pub mod check;
pub mod configs;
pub mod db;
pub mod limits;
pub mod spec;
mod walk;
