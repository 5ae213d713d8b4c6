//! Recovery of an in-flight effect: take the claim only on evidence the holder cannot be sending,
//! then act by the recovery table.

use crate::core::decide::{plan_recovery, plan_takeover};
use crate::core::{
    Claim, Claimed, Committed, Dispatched, EffectState, Event, Proposed, RecoveryInput,
    RecoveryPlan, TakeoverPlan, TakeoverReason, tier,
};
use crate::effect::EffectKey;
use crate::faults::FaultPoint;
use crate::liveness::HeldLock;

use super::dispatch::final_refusal;
use super::{Bound, GateError, Outcome, Step, ms, outcome_of, wait_until};

impl Bound {
    /// An in-flight effect: take the claim if the evidence allows, then act by the recovery table.
    pub(super) fn recover_claim(
        &self,
        key: &EffectKey,
        first: &Proposed,
        claim: &Claim,
    ) -> Result<Step, GateError> {
        let now = self.now();
        let window = self.target.dedupe_window().map(ms);
        let effective = tier::effective(
            self.target.tier(),
            window,
            ms(self.gate.cfg.dedupe_margin),
            claim.first_dispatch_ms,
            now,
            self.target.has_lookup(),
        );
        let lock_free = claim.holder.host == self.gate.cfg.holder.host
            && self
                .gate
                .locks
                .is_free(key.as_str(), claim.token)
                .map_err(|e| self.lock_err(e))?;
        let reason = match plan_takeover(claim, now, lock_free, effective) {
            TakeoverPlan::Wait { until_ms } => {
                return Ok(Step::Done(Outcome::InFlight {
                    retry_after: wait_until(until_ms, now).min(self.gate.cfg.retry_after),
                    reason: format!(
                        "in flight under claim {} held by pid {} on {} until its deadline",
                        claim.token, claim.holder.pid, claim.holder.host
                    ),
                }));
            }
            TakeoverPlan::Take(reason) => reason,
        };
        self.fault(FaultPoint::BeforeTakeover, key)?;
        let token = claim.token + 1;
        let Some(lock) = self.hold(key, token)? else {
            return Ok(Step::Done(
                self.busy("another recoverer is taking this effect over"),
            ));
        };
        // Until when the previous holder's send may still land: a holder proven dead can only
        // have bytes in flight for the settle margin; otherwise its send runs to its deadline.
        let prior_until_ms = match reason {
            TakeoverReason::HolderDead => claim
                .deadline_ms
                .min(now.saturating_add(ms(self.gate.cfg.settle))),
            TakeoverReason::DeadlinePassed | TakeoverReason::Tier1InWindow => claim.deadline_ms,
        };
        let claimed = Event::Claimed(Claimed {
            token,
            holder: self.gate.cfg.holder.clone(),
            deadline_ms: self.deadline(),
            reason,
            prior_until_ms,
        });
        let out = self.gate.journal.append_with(key, &mut |s, _| match s {
            EffectState::InFlight { claim: c, .. } if c.token == claim.token => {
                vec![claimed.clone()]
            }
            _ => Vec::new(),
        })?;
        if out.appended.is_empty() {
            return Ok(Step::Again);
        }
        tracing::info!(key = %key, token, ?reason, "took over an in-flight effect");
        self.fault(FaultPoint::AfterTakeover, key)?;
        let EffectState::InFlight { claim, .. } = out.after else {
            return Ok(Step::Again);
        };
        self.resolve_as_recoverer(key, first, &claim, effective, lock)
    }

    pub(super) fn resolve_as_recoverer(
        &self,
        key: &EffectKey,
        first: &Proposed,
        claim: &Claim,
        effective: tier::Effective,
        lock: HeldLock,
    ) -> Result<Step, GateError> {
        let token = claim.token;
        let (recheck, _) = self.recheck(key, first);
        let input = RecoveryInput {
            effective,
            recheck: recheck.clone(),
            has_lookup: self.target.has_lookup(),
            now_ms: self.now(),
            quiet_after_ms: claim.quiet_after(None),
            late_done: claim.late_done.clone(),
        };
        let mut plan = plan_recovery(&input, None);
        if plan == RecoveryPlan::Lookup {
            let found = self.lookup(key, &first.payload);
            plan = plan_recovery(&input, Some(&found));
        }
        let event = match plan {
            RecoveryPlan::Resend(via) => {
                let deadline = self.deadline();
                let resend = Event::Dispatched(Dispatched {
                    token,
                    holder: self.gate.cfg.holder.clone(),
                    deadline_ms: deadline,
                    payload_hash: first.payload_hash.clone(),
                    recheck,
                    resend: true,
                });
                let out = self.gate.journal.append_with(key, &mut |s, _| match s {
                    EffectState::InFlight { claim, .. } if claim.token == token => {
                        vec![resend.clone()]
                    }
                    _ => Vec::new(),
                })?;
                if out.appended.is_empty() {
                    return Ok(Step::Again);
                }
                self.fault(FaultPoint::AfterDispatch, key)?;
                return self.send_under_claim(key, first, token, deadline, via, lock);
            }
            RecoveryPlan::CommitFound(via, result) => {
                Event::Committed(Committed { token, via, result })
            }
            RecoveryPlan::Refuse(draft) => {
                let repairs = self.repairs_for(first, &recheck, true);
                Event::Refused(final_refusal(&draft, repairs, &first.payload_hash))
            }
            RecoveryPlan::Ambiguous(a) => Event::Ambiguous(a),
            RecoveryPlan::Wait { reason, until_ms } => {
                let retry_after = match until_ms {
                    Some(until) => wait_until(until, self.now()),
                    None => self.gate.cfg.retry_after,
                };
                return Ok(Step::Done(Outcome::InFlight {
                    retry_after,
                    reason,
                }));
            }
            RecoveryPlan::Lookup => return Ok(Step::Done(self.busy("lookup did not settle"))),
        };
        let out = self.gate.journal.append_with(key, &mut |s, _| match s {
            EffectState::InFlight { claim, .. } if claim.token == token => vec![event.clone()],
            _ => Vec::new(),
        })?;
        self.fault(FaultPoint::AfterRecord, key)?;
        drop(lock);
        Ok(match out.after {
            EffectState::Resolved { resolution, .. } => {
                self.gate.locks.forget(key.as_str(), token);
                Step::Done(outcome_of(resolution, out.appended.is_empty()))
            }
            _ => Step::Again,
        })
    }
}
