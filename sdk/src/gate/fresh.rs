//! The fresh path: propose and authorize (R4), then dispatch under the liveness lock: premises
//! read (R5), and the lease read again inside the transaction that writes `DISPATCHED`, so a
//! revocation that commits before that record stops the send.

use crate::core::transition;
use crate::core::{Event, Proposed, Via};
use crate::effect::EffectKey;
use crate::faults::FaultPoint;

use super::send::Sending;
use super::{Bound, GateError, Outcome, Step};

impl Bound {
    /// R4 at submit, written in one transaction with the proposal when it is fresh: the lease
    /// authorizes the effect, refuses it, or (store unreachable) is noted for a retry.
    pub(super) fn authorize(&self, key: &EffectKey, first: &Proposed) -> Result<Step, GateError> {
        // The grant's description is evidence only; the verdict is read in the transaction.
        let grant = self.describe_lease(&first.lease);
        let out = self.gate.journal.append_with(key, &mut |tx| {
            let lease = self.lease_in(tx, first);
            transition::authorize(tx.state, first, &lease, grant.clone())
        })?;
        match out.appended.last().map(|r| &r.event) {
            Some(Event::Authorized(_)) => self.dispatch(key, first),
            Some(Event::Refused(r)) => Ok(Step::Done(self.refused_or_retry(r.clone()))),
            _ => Ok(Step::Again),
        }
    }

    /// Under the liveness lock: the premises, then the lease and `DISPATCHED` in one
    /// transaction, then the send.
    pub(super) fn dispatch(&self, key: &EffectKey, first: &Proposed) -> Result<Step, GateError> {
        self.fault(FaultPoint::BeforeDispatch, key)?;
        if let Some(stopped) = self.cancelled() {
            return Ok(stopped);
        }
        let Some(lock) = self.hold(key, 1)? else {
            return Ok(Step::Done(
                self.busy("another attempt is dispatching this effect"),
            ));
        };
        let premises = self.read_premises(key, first);
        let repairs = self.repair_candidates(first, &premises);
        let (holding, started) = self.holding();
        let out = self.gate.journal.append_with(key, &mut |tx| {
            let recheck = premises.with_lease(self.lease_in(tx, first));
            transition::dispatch_first(
                tx.state,
                &first.payload_hash,
                &recheck,
                premises.unavailable(),
                &repairs,
                &holding,
            )
        })?;
        match out.appended.last().map(|r| &r.event) {
            Some(Event::Dispatched(_)) => {
                self.fault(FaultPoint::AfterDispatch, key)?;
                let sending = Sending {
                    token: 1,
                    holding,
                    started,
                    via: Via::FirstSend,
                };
                self.send_under_claim(key, first, sending, lock)
            }
            Some(Event::Refused(r)) => Ok(Step::Done(self.refused_or_retry(r.clone()))),
            _ => Ok(Step::Again),
        }
    }

    fn refused_or_retry(&self, r: crate::core::Refused) -> Outcome {
        if r.is_final {
            Outcome::Refused(r)
        } else {
            Outcome::Retry {
                retry_after: self.gate.cfg.retry_after,
                reason: r.reason,
            }
        }
    }
}
