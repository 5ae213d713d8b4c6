//! Interlock's gate as a system in the matrix: a real SQLite journal on disk, a journal-backed
//! lease, the simulated service at the column's tier, and faults at the gate's own points.

use std::sync::Arc;
use std::time::Duration;

use interlock::faults::FaultPoint;
use interlock::journal::SqliteJournal;
use interlock::{Clock, Effect, Gate, GateConfig, GateError, Outcome, Tier};
use interlock_testkit::faults::{Action, ScriptedFaults};
use interlock_testkit::sim::{SimPayments, SimRefundPremises, SimTarget};

use crate::system::{Answer, Attempt, Fault, Says, System};
use crate::world::World;

/// Send timeout used in the matrix.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Settle margin used in the matrix.
pub const SETTLE: Duration = Duration::from_secs(5);

/// The gate at one tier.
pub struct Gated {
    tier: Tier,
    gate: Gate,
    journal: Arc<SqliteJournal>,
    sim: Arc<SimPayments>,
    _dir: tempfile::TempDir,
}

impl Gated {
    /// A gate with a fresh journal, over `world`'s service.
    pub fn new(tier: Tier, world: &World) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("journal.db");
        let clock: Arc<dyn Clock> = Arc::new(world.clock.clone());
        let journal = Arc::new(SqliteJournal::open(&path, clock.clone())?);
        journal.grant_lease(&World::grant())?;
        let mut cfg = GateConfig::beside(&path);
        cfg.send_timeout = SEND_TIMEOUT;
        cfg.settle = SETTLE;
        cfg.retry_after = Duration::from_secs(1);
        let gate = Gate::new(journal.clone(), journal.clone(), clock, cfg)?;
        Ok(Self {
            tier,
            gate,
            journal,
            sim: world.sim.clone(),
            _dir: dir,
        })
    }

    /// The journal, for inspection.
    pub fn journal(&self) -> &Arc<SqliteJournal> {
        &self.journal
    }
}

/// How an outcome reads as an answer.
pub fn answer_of(o: &Outcome) -> Answer {
    let says = match o {
        Outcome::Committed { .. } => Says::Done,
        Outcome::Refused(_) | Outcome::Failed(_) => Says::NotDone,
        _ => Says::Unknown,
    };
    let repair_offered = matches!(o, Outcome::Refused(r) if !r.repairs.is_empty());
    let retry_after_ms = match o {
        Outcome::InFlight { retry_after, .. } | Outcome::Retry { retry_after, .. } => {
            i64::try_from(retry_after.as_millis()).ok()
        }
        _ => None,
    };
    Answer {
        label: o.label(),
        says,
        is_final: o.is_final(),
        repair_offered,
        retry_after_ms,
    }
}

impl System for Gated {
    fn name(&self) -> String {
        format!("gate tier {}", u8::from(self.tier))
    }

    fn attempt(&self, effect: &Effect, n: u32, faults: &[Fault]) -> anyhow::Result<Attempt> {
        let scripted = ScriptedFaults::new();
        for f in faults {
            let (point, action) = match f {
                Fault::CrashBeforeSend => (FaultPoint::AfterDispatch, Action::Crash),
                Fault::CrashAfterApply => (FaultPoint::AfterSend, Action::Crash),
                Fault::StallBeforeSend(s) => (FaultPoint::AfterDispatch, Action::Stall(s.clone())),
                Fault::StallAfterPremiseRead(s) => {
                    (FaultPoint::AfterPremiseRead, Action::Stall(s.clone()))
                }
            };
            scripted.arm(point, action);
        }
        let gate = self
            .gate
            .clone()
            .with_faults(scripted)
            .with_attempt(n.to_string());
        let bound = gate.bind(
            Arc::new(SimTarget(self.sim.clone())),
            Arc::new(SimRefundPremises(self.sim.clone())),
        )?;
        match bound.submit(effect) {
            Ok(o) => Ok(Attempt::Answered(answer_of(&o))),
            Err(GateError::Crashed(_)) => Ok(Attempt::Crashed),
            Err(e) => Err(e.into()),
        }
    }

    fn revoke_lease(&self) -> anyhow::Result<()> {
        self.journal.revoke_lease(crate::world::LEASE)?;
        Ok(())
    }
}
