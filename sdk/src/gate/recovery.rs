//! Recovery of an in-flight effect: take the claim only on evidence the holder cannot be sending,
//! then act by the recovery table on the tier journaled at the first proposal. Every step is
//! decided by the core on the state inside the write transaction, with the lease read there too:
//! a lookup, a premise read or a revocation that happens meanwhile is seen, never skipped.

use crate::core::decide::plan_takeover;
use crate::core::transition::{self, RecoveryFacts, TierFacts};
use crate::core::{
    Claim, EffectState, LeaseVerdict, LookupAnswer, Proposed, RecoveryPlan, TakeoverPlan, tier,
};
use crate::effect::EffectKey;
use crate::faults::FaultPoint;
use crate::journal::Verified;
use crate::liveness::HeldLock;

use super::send::Sending;
use super::{Bound, GateError, Outcome, Step, ms, wait_until};

/// How many times one recovery step reads the premises again when they aged past the bound
/// before its resend could be written.
const MAX_REREADS: usize = 3;

impl Bound {
    /// An in-flight effect: take the claim if the evidence allows, then act by the recovery table.
    pub(super) fn recover_claim(
        &self,
        key: &EffectKey,
        first: &Proposed,
        claim: &Claim,
        seen: &Verified,
    ) -> Result<Step, GateError> {
        // A lock that cannot be judged counts as held: the claim's deadline rules.
        let lock_free = self
            .gate
            .locks
            .released(key.as_str(), claim.token, &claim.holder.host)
            .unwrap_or_else(|e| {
                tracing::warn!(
                    key = %key,
                    token = claim.token,
                    place = %self.gate.locks.place(),
                    error = %e,
                    "cannot judge the holder's liveness lock; counted as held until its claim's deadline"
                );
                false
            });
        // Read after the liveness check: a holder seen dead died before this instant.
        let now = self.now();
        let tier = self.tier_facts();
        let effective = tier.effective(first, claim, now);
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
        if let Some(stopped) = self.cancelled() {
            return Ok(stopped);
        }
        let token = claim.token + 1;
        let Some(lock) = self.hold(key, token)? else {
            return Ok(Step::Done(
                self.busy("another recoverer is taking this effect over"),
            ));
        };
        let (holding, _) = self.holding();
        let settle = ms(self.gate.cfg.settle);
        let out =
            tracing::info_span!("interlock.takeover", token, reason = ?reason).in_scope(|| {
                self.gate.append_after(key, seen, &mut |tx| {
                    transition::takeover(tx.state, claim, reason, now, settle, &holding)
                })
            })?;
        if out.appended.is_empty() {
            return Ok(Step::Again);
        }
        tracing::info!(key = %key, token, ?reason, "took over an in-flight effect");
        self.fault(FaultPoint::AfterTakeover, key)?;
        // A recovery is counted once its takeover is written: an attempt that finds the holder
        // still live waits, and takes nothing over.
        let span = tracing::info_span!("interlock.recovery", token, ended = tracing::field::Empty);
        let step = span.in_scope(|| {
            self.resolve_as_recoverer(key, first, token, effective, lock, out.history)
        })?;
        if let Step::Done(o) = &step {
            crate::metrics::recovery(self.target.name(), o);
            span.record("ended", o.label());
        }
        Ok(step)
    }

    /// What the tier recovery acts on depends on: journaled at the proposal, lowered by this
    /// binding if it promises less, demoted by the clock past a tier-1 window.
    fn tier_facts(&self) -> TierFacts {
        TierFacts {
            bound: self.tier(),
            window_ms: self.target.dedupe_window().map(ms),
            margin_ms: ms(self.gate.cfg.dedupe_margin),
            has_lookup: self.target.has_lookup(),
        }
    }

    /// Under claim `token`: look up if the table asks, then re-read the premises and decide in
    /// the transaction, with the lease as of that transaction.
    fn resolve_as_recoverer(
        &self,
        key: &EffectKey,
        first: &Proposed,
        token: u64,
        effective_at_takeover: tier::Effective,
        lock: HeldLock,
        mut seen: Verified,
    ) -> Result<Step, GateError> {
        let has_lookup = self.target.has_lookup();
        let tier = self.tier_facts();
        let mut lookup: Option<(LookupAnswer, i64)> = None;
        let mut rereads = 0;
        loop {
            if let Some(stopped) = self.cancelled() {
                return Ok(stopped);
            }
            let premises = self.read_premises(key, first);
            self.fault(FaultPoint::AfterPremiseRead, key)?;
            let repairs = self.repair_candidates(first, &premises);
            let (holding, started) = self.holding();
            let now = self.now();
            let mut plan = None;
            let out = self.gate.append_after(key, &seen, &mut |tx| {
                let holding = self.written_now(&holding);
                let lease = self.lease_in(tx, key, first);
                let transient = matches!(lease.verdict, LeaseVerdict::Error { .. })
                    || premises.unavailable().is_some();
                let facts = RecoveryFacts {
                    tier,
                    effective_at_takeover,
                    recheck: premises.with_lease(lease, holding.now_ms),
                    transient,
                    has_lookup,
                    now_ms: now,
                };
                let (events, p) = transition::recover(
                    tx.state,
                    token,
                    &facts,
                    lookup.as_ref().map(|(l, asked_at)| (l, *asked_at)),
                    &repairs,
                    &holding,
                );
                plan = p;
                events
            })?;
            let plan = match plan {
                None => return Ok(Step::Again),
                Some(RecoveryPlan::Lookup) if lookup.is_none() => {
                    let asked_at = self.now();
                    lookup = Some((self.lookup(key, &first.payload), asked_at));
                    seen = out.history;
                    continue;
                }
                // The premises aged past the bound before the resend could be written: read
                // them again under the same claim, a few times at most.
                Some(RecoveryPlan::Reread { reason }) => {
                    tracing::warn!(key = %key, %reason, "reading the premises again before the resend");
                    if let Some(slow) = self.stale_read(&premises) {
                        return Ok(Step::Done(slow));
                    }
                    rereads += 1;
                    if rereads >= MAX_REREADS {
                        return Ok(Step::Done(self.busy(&reason)));
                    }
                    seen = out.history;
                    continue;
                }
                Some(p) => p,
            };
            return match plan {
                RecoveryPlan::Resend(via) => {
                    self.fault(FaultPoint::AfterDispatch, key)?;
                    let sending = Sending {
                        token,
                        holding,
                        started,
                        via,
                        seen: out.history,
                    };
                    self.send_under_claim(key, first, sending, lock)
                }
                RecoveryPlan::Wait { reason, until_ms } => {
                    let retry_after = match until_ms {
                        Some(until) => wait_until(until, self.now()),
                        None => self.gate.cfg.retry_after,
                    };
                    Ok(Step::Done(Outcome::InFlight {
                        retry_after,
                        reason,
                    }))
                }
                RecoveryPlan::Lookup => Ok(Step::Done(self.busy("lookup did not settle"))),
                RecoveryPlan::Reread { reason } => Ok(Step::Done(self.busy(&reason))),
                RecoveryPlan::CommitFound(..)
                | RecoveryPlan::Refuse(_)
                | RecoveryPlan::Ambiguous(_)
                | RecoveryPlan::AppliedTwice(_) => {
                    self.fault(FaultPoint::AfterRecord, key)?;
                    self.let_go(key, token, lock, out.history.state());
                    Ok(match out.history.into_state() {
                        EffectState::Resolved { resolution, .. } => {
                            Step::Done(self.outcome_of(resolution, false))
                        }
                        _ => Step::Again,
                    })
                }
            };
        }
    }
}
