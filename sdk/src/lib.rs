//! Interlock makes side effects safe under crashes and retries: each effect happens once (or is
//! honestly marked unknown), under a lease that was live when it fired, on premises that still
//! held when it landed. See the repository README for a tour and `docs/` for the contract.

pub mod clock;
pub mod core;
pub mod effect;
pub mod faults;
pub mod gate;
pub mod journal;
pub mod lease;
mod liveness;
pub mod premise;
pub mod receipt;
pub mod target;
#[cfg(feature = "temporal")]
pub mod temporal;
pub mod verify;
pub mod webhook;

pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::core::{Tier, Via};
pub use crate::effect::{Effect, EffectError, EffectKey};
pub use crate::gate::{Bound, DecideError, Gate, GateConfig, GateError, Outcome};
pub use crate::journal::{Journal, JournalError, SqliteJournal};
pub use crate::lease::{Grant, LeaseStore};
pub use crate::premise::{PremiseError, PremiseReader};
pub use crate::target::Target;

#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
