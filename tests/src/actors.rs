//! One journal (on either store), one simulated payments service and one clock, with gates made
//! per actor: the bench the safety regressions drive one schedule at a time.

#![allow(clippy::unwrap_used, clippy::panic)] // a bench for tests: a panic is the report

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use interlock::faults::FaultPoint;
use interlock::target::Target;
use interlock::{Bound, Effect, Gate, GateError, JournalStore, ManualClock, Outcome, Tier};
use interlock_testkit::faults::{Action, ScriptedFaults, Stall};
use interlock_testkit::sim::{SimPayments, SimRefundPremises, SimTarget};

use crate::stores::{Kind, Store};
use crate::world::{AMOUNT, LEASE, PAYMENT, World};

/// One journal, one payments service, one clock; gates are made per actor.
pub struct Bench {
    /// The journal's store.
    pub store: Store,
    /// The clock every actor reads.
    pub clock: ManualClock,
    /// The payments service.
    pub sim: Arc<SimPayments>,
    /// The journal, with its leases.
    pub journal: Arc<dyn JournalStore>,
}

impl Bench {
    /// A bench whose service acts as a target of `tier`, with the lease granted.
    pub fn new(kind: Kind, tier: Tier) -> Self {
        let world = World::new(tier);
        let store = Store::open(kind, "safety", Arc::new(world.clock.clone())).unwrap();
        let journal = store.store();
        journal.grant_lease(&World::grant()).unwrap();
        Self {
            store,
            clock: world.clock,
            sim: world.sim,
            journal,
        }
    }

    /// A gate for the actor `attempt`, with `faults` if given.
    pub fn gate(&self, attempt: &str, faults: Option<Arc<ScriptedFaults>>) -> Gate {
        let gate = Gate::new(
            self.journal.clone(),
            self.journal.clone(),
            Arc::new(self.clock.clone()),
            self.store.config(),
        )
        .unwrap()
        .with_attempt(attempt);
        match faults {
            Some(f) => gate.with_faults(f),
            None => gate,
        }
    }

    /// `gate` bound to `target`, reading the service's premises.
    pub fn bind(&self, gate: &Gate, target: Arc<dyn Target>) -> Bound {
        gate.bind(target, Arc::new(SimRefundPremises(self.sim.clone())))
            .unwrap()
    }

    /// The service as a target.
    pub fn sim_target(&self) -> Arc<dyn Target> {
        Arc::new(SimTarget(self.sim.clone()))
    }

    /// The approved refund, decided now.
    pub fn effect(&self) -> Effect {
        World {
            clock: self.clock.clone(),
            sim: self.sim.clone(),
        }
        .decide(AMOUNT)
        .unwrap()
    }

    /// Refunded on the payment so far, by the service's own records.
    pub fn refunded(&self) -> i64 {
        self.sim.refunded(PAYMENT)
    }

    /// A first attempt that dies at `point` (its liveness lock goes with it).
    pub fn first_attempt_dies_at(&self, point: FaultPoint) {
        let faults = ScriptedFaults::new();
        faults.arm(point, Action::Crash);
        let gate = self.gate("first", Some(faults));
        let bound = self.bind(&gate, self.sim_target());
        let err = bound.submit(&self.effect()).unwrap_err();
        assert!(matches!(err, GateError::Crashed(_)), "{err}");
    }

    /// An attempt stalled between its dispatch record and its send (stopped there by the test)
    /// under `stop` and `fence` checks that turn true while it stalls, as the lease is revoked
    /// (if `revoke`); its outcome.
    pub fn stalled_after_dispatch(
        &self,
        target: Arc<dyn Target>,
        fence: bool,
        revoke: bool,
    ) -> Outcome {
        let stall = Stall::new();
        let faults = ScriptedFaults::new();
        faults.arm(FaultPoint::AfterDispatch, Action::Stall(stall.clone()));
        let flag = Arc::new(AtomicBool::new(false));
        let seen = flag.clone();
        let check: interlock::gate::StopCheck = Arc::new(move || seen.load(Ordering::SeqCst));
        let mut bound = self
            .bind(&self.gate("stalled", Some(faults)), target)
            .with_stop(check.clone());
        if fence {
            bound = bound.with_fence(check);
        }
        let effect = self.effect();
        let attempt = std::thread::spawn(move || bound.submit(&effect));
        stall.wait_reached();
        flag.store(true, Ordering::SeqCst);
        if revoke {
            assert!(self.journal.revoke_lease(LEASE).unwrap());
        }
        stall.release();
        attempt.join().unwrap().unwrap()
    }
}
