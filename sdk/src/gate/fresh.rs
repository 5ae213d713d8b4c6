//! The way to a first send. A new key goes there in one durable transaction — the liveness lock
//! taken and the premises read (R5) first, then `PROPOSED`, the lease (R4) and `DISPATCHED`
//! together — so a revocation that commits before that transaction stops the send, and a crash
//! before it leaves nothing to recover. A proposal that is already journaled (an earlier attempt
//! stopped on an unreachable lease store or premise source) is authorized, then dispatched.

use crate::core::transition;
use crate::core::{Event, Proposed, Via};
use crate::effect::EffectKey;
use crate::faults::FaultPoint;
use crate::journal::Verified;
use crate::liveness::HeldLock;

use super::send::Sending;
use super::{Bound, GateError, Outcome, Step};

impl Bound {
    /// A new key: under the liveness lock, the premises, then `PROPOSED`, the lease and
    /// `DISPATCHED` in one transaction, then the send.
    pub(super) fn propose(
        &self,
        key: &EffectKey,
        proposal: &Proposed,
        seen: &Verified,
    ) -> Result<Step, GateError> {
        self.first_dispatch(key, proposal, true, seen)
    }

    /// R4 for a proposal an earlier attempt journaled but could not authorize (the lease store
    /// was unreachable): `AUTHORIZED`, a final `lease` refusal, or another retry note — then the
    /// dispatch.
    pub(super) fn authorize(
        &self,
        key: &EffectKey,
        first: &Proposed,
        seen: &Verified,
    ) -> Result<Step, GateError> {
        let mut unwritten = None;
        let out = self
            .gate
            .append_reading(key, seen, self.reads_ahead(first), &mut |tx| {
                let (lease, grant) = self.authorization_in(tx, key, first);
                let events = transition::authorize(tx.state, first, &lease.verdict, grant);
                let (events, note) = bounded(tx.records, events);
                unwritten = note;
                events
            })?;
        match out.appended.last().map(|r| &r.event) {
            Some(Event::Authorized(_)) => self.first_dispatch(key, first, false, &out.history),
            Some(Event::Refused(r)) => Ok(Step::Done(self.refused_or_retry(r.clone()))),
            None => Ok(unwritten.map_or(Step::Again, |r| Step::Done(self.refused_or_retry(r)))),
            _ => Ok(Step::Again),
        }
    }

    /// Under the liveness lock: the premises, then the lease and `DISPATCHED` (with `PROPOSED`
    /// and `AUTHORIZED` when `fresh`) in one transaction, then the send.
    fn first_dispatch(
        &self,
        key: &EffectKey,
        first: &Proposed,
        fresh: bool,
        seen: &Verified,
    ) -> Result<Step, GateError> {
        let lock = match self.dispatch_lock(key)? {
            Ok(lock) => lock,
            Err(step) => return Ok(step),
        };
        let premises = self.read_premises(key, first);
        self.fault(FaultPoint::AfterPremiseRead, key)?;
        // A cancellation that came while the premises were read stops here, before anything is
        // journaled: nothing to recover, at any tier.
        if let Some(stopped) = self.cancelled() {
            return Ok(stopped);
        }
        let repairs = self.repair_candidates(first, &premises);
        let (holding, started) = self.holding();
        let mut stale = false;
        let mut unwritten = None;
        let out = self
            .gate
            .append_reading(key, seen, self.reads_ahead(first), &mut |tx| {
                // The read's age is judged by the clock inside the transaction: a stall anywhere
                // between the read and this write counts.
                let holding = self.written_now(&holding);
                let (lease, grant) = if fresh {
                    self.authorization_in(tx, key, first)
                } else {
                    (self.lease_in(tx, key, first), serde_json::Value::Null)
                };
                let recheck = premises.with_lease(lease, holding.now_ms);
                stale = !transition::read_is_fresh(&recheck, &holding);
                let events = if fresh {
                    transition::propose_and_dispatch(
                        tx.state,
                        first,
                        &recheck,
                        grant,
                        premises.unavailable(),
                        &repairs,
                        &holding,
                    )
                } else {
                    transition::dispatch_first(
                        tx.state,
                        &first.payload_hash,
                        &recheck,
                        premises.unavailable(),
                        &repairs,
                        &holding,
                    )
                };
                let (events, note) = bounded(tx.records, events);
                unwritten = note;
                events
            })?;
        match out.appended.last().map(|r| &r.event) {
            Some(Event::Dispatched(_)) => {
                self.fault(FaultPoint::AfterDispatch, key)?;
                let sending = Sending {
                    token: 1,
                    holding,
                    started,
                    via: Via::FirstSend,
                    seen: out.history,
                };
                self.send_under_claim(key, first, sending, lock)
            }
            Some(Event::Refused(r)) => Ok(Step::Done(self.refused_or_retry(r.clone()))),
            // Premises read too long before the write: read them again at once, unless the read
            // itself outlasts the bound.
            None if stale => {
                tracing::warn!(key = %key, "premises read too long before the dispatch; reading again");
                Ok(self.stale_read(&premises).map_or(Step::Again, Step::Done))
            }
            // The key holds as many retry notes as it keeps: answered with this one, unwritten.
            None => Ok(unwritten.map_or(Step::Again, |r| Step::Done(self.refused_or_retry(r)))),
            _ => Ok(Step::Again),
        }
    }

    /// Liveness lock 1, unless the attempt was cancelled or another attempt holds it.
    fn dispatch_lock(&self, key: &EffectKey) -> Result<Result<HeldLock, Step>, GateError> {
        self.fault(FaultPoint::BeforeDispatch, key)?;
        if let Some(stopped) = self.cancelled() {
            return Ok(Err(stopped));
        }
        Ok(self
            .hold(key, 1)?
            .ok_or_else(|| Step::Done(self.busy("another attempt is dispatching this effect"))))
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

/// [`transition::bounded_retry_notes`] over the records read in the write transaction.
fn bounded(
    records: &[crate::journal::Record],
    events: Vec<Event>,
) -> (Vec<Event>, Option<crate::core::Refused>) {
    transition::bounded_retry_notes(records.iter().map(|r| &r.event), events)
}
