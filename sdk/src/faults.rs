//! Named points in the gate where a test or the kill-matrix harness can stop the world. Public
//! only with the `test-hooks` feature, which users never turn on: without it the points compile
//! to nothing. Scripted faults (crash or stall at a point) live in the `interlock-testkit` crate.
#![cfg_attr(not(feature = "test-hooks"), allow(unreachable_pub))]

/// A point in the gate's life where a process could die.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultPoint {
    /// An attempt has started; it has read and written nothing.
    Start,
    /// The premises have just been read, and the transaction that dispatches (or resends) on
    /// them has not begun: the gate holds no claim here, so a stall here is bounded only by the
    /// premise read's age ([`crate::GateConfig::premise_max_age`]).
    AfterPremiseRead,
    /// About to dispatch: nothing is journaled yet for a new key (it is proposed, authorized
    /// and dispatched in one transaction); `PROPOSED`/`AUTHORIZED` are durable for a proposal
    /// an earlier attempt left open.
    BeforeDispatch,
    /// `DISPATCHED` is durable; the request has not been sent.
    AfterDispatch,
    /// The target answered; the answer is not journaled.
    AfterSend,
    /// The answer is journaled; the caller has not heard it.
    AfterRecord,
    /// A recoverer has decided to take the claim on what it read and has not yet written it.
    BeforeTakeover,
    /// A recoverer has taken the claim and has not yet looked up or re-checked.
    AfterTakeover,
}

#[cfg(feature = "test-hooks")]
/// The process "died" at a point: the gate stops at once, writing nothing more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("simulated crash at {0:?}")]
pub struct Crash(pub FaultPoint);

#[cfg(feature = "test-hooks")]
/// Called at every [`FaultPoint`]. May block (a stalled process), or return [`Crash`].
pub trait Faults: Send + Sync {
    /// The gate reached `point` for `key`.
    fn at(&self, point: FaultPoint, key: &str) -> Result<(), Crash>;
}

#[cfg(feature = "test-hooks")]
/// No faults.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFaults;

#[cfg(feature = "test-hooks")]
impl Faults for NoFaults {
    fn at(&self, _point: FaultPoint, _key: &str) -> Result<(), Crash> {
        Ok(())
    }
}
