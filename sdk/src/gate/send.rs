//! One send under a claim, shared by the first dispatch and every resend: the fencing re-read,
//! the send cut off at the claim's budget, and the answer recorded by the core's rule on the
//! state inside the transaction (its resolution, or a late answer once the claim has moved).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use crate::core::transition::{self, Holding};
use crate::core::{EffectState, Event, LeaseVerdict, Proposed, SendAnswer, Via};
use crate::effect::EffectKey;
use crate::faults::FaultPoint;
use crate::journal::Verified;
use crate::liveness::HeldLock;
use crate::target::{Deadline, LastLook, SendRequest};

use super::{Bound, GateError, Outcome, Step, ms};

/// A send about to go out: under which claim, held by whom until when, and how a success would
/// be recorded.
pub(super) struct Sending {
    /// The claim's fencing token.
    pub(super) token: u64,
    /// The holder and its deadline, as written in `DISPATCHED`.
    pub(super) holding: Holding,
    /// When that deadline was computed, on the monotonic clock.
    pub(super) started: Instant,
    /// How a success is recorded.
    pub(super) via: Via,
    /// The key's records as the transaction that made the claim left them: the fencing re-read
    /// and the answer's transaction verify only what came after.
    pub(super) seen: Verified,
}

impl Bound {
    /// Send under the claim, then record the answer. A zombie — an attempt whose claim was
    /// taken while it stalled — finds out here, immediately before sending, and sends nothing.
    pub(super) fn send_under_claim(
        &self,
        key: &EffectKey,
        first: &Proposed,
        sending: Sending,
        lock: HeldLock,
    ) -> Result<Step, GateError> {
        let Sending {
            token,
            holding,
            started,
            via,
            seen,
        } = sending;
        let seen = self.gate.journal.read_after(key, &seen)?;
        if !transition::may_send(seen.state(), token, &holding.holder) {
            if transition::holds_claim(seen.state(), token, &holding.holder) {
                // The target confirmed the effect (or a superseded send proved it landed) since
                // this dispatch: nothing is sent, and the next round commits on that evidence.
                self.withdraw(
                    key,
                    &seen,
                    token,
                    &holding,
                    "the effect landed before the send",
                )?;
                return Ok(Step::Again);
            }
            return Ok(Step::Done(Outcome::Superseded {
                reason: format!("claim {token} was taken over before this attempt sent"),
            }));
        }
        // A fenced attempt (its gate server's caller went away, or the server is draining)
        // stops here even after its own dispatch: the record stays in flight, the lock is
        // released on return, and the next attempt recovers it as after a crash at this point,
        // re-reading the lease and the premises, which may have moved while this attempt
        // stalled. At every tier: the withdrawal is this holder's word that nothing left under
        // its claim, so even at tier 3, where the service cannot be asked, the next attempt
        // sends or refuses and never marks the effect ambiguous.
        if self.fenced() {
            // This holder's own word that nothing left under its claim ends that send's window
            // at once: the next attempt's lookup is conclusive, not a wait for the deadline.
            self.withdraw(
                key,
                &seen,
                token,
                &holding,
                "fenced between its dispatch and its send",
            )?;
            return Ok(Step::Done(Outcome::Superseded {
                reason: format!(
                    "fenced after claim {token}'s dispatch was journaled, before its send; the \
                     dispatch was withdrawn unsent and the next attempt recovers the effect"
                ),
            }));
        }
        // A lease kept outside the journal could have been revoked while the dispatch was being
        // written, unordered with it: read it once more now that the record is durable.
        if !self.gate.leases_in_journal && self.lease_verdict(first) != LeaseVerdict::Live {
            self.withdraw(
                key,
                &seen,
                token,
                &holding,
                "the lease died before the send",
            )?;
            return Ok(Step::Done(self.busy(
                "the lease is no longer live; nothing was sent, and recovery will close the effect",
            )));
        }
        // The tighter of two clocks: the monotonic one cannot be set back, and the wall clock is
        // the one recoverers in other processes judge the deadline by.
        let cfg = &self.gate.cfg;
        let by_wall = holding.deadline_ms - ms(cfg.settle) - self.now();
        let by_wall = Duration::from_millis(u64::try_from(by_wall).unwrap_or(0));
        let timeout = cfg
            .send_timeout
            .saturating_sub(started.elapsed())
            .min(by_wall);
        if timeout.is_zero() {
            self.withdraw(
                key,
                &seen,
                token,
                &holding,
                "the claim ran out before the send",
            )?;
            return Ok(Step::Done(self.busy(
                "this attempt's claim ran out before it could send; a recoverer will take it",
            )));
        }
        let look = || self.last_look(key, first, &seen);
        let req = SendRequest {
            key,
            payload: &first.payload,
            timeout,
            deadline: Some(Deadline {
                at_ms: holding.deadline_ms - ms(cfg.settle),
                clock: &*self.gate.clock,
            }),
            last_look: Some(LastLook::new(&look)),
        };
        let target = &self.target;
        let span = tracing::info_span!(
            "interlock.send",
            token,
            via = via.as_str(),
            answer = tracing::field::Empty
        );
        let sent_at = Instant::now();
        let answer = span.in_scope(|| {
            catch_unwind(AssertUnwindSafe(|| target.send(&req))).unwrap_or_else(|_| {
                SendAnswer::Unknown("the target panicked while sending; it may have sent".into())
            })
        });
        crate::metrics::send(target.name(), sent_at.elapsed());
        span.record("answer", answer_kind(&answer));
        drop(span);
        // The answer's kind only: its body (the caller's metadata, a customer's details) stays in the
        // journal, which its owner alone reads.
        tracing::debug!(key = %key, token, answer = answer_kind(&answer), "send answered");
        self.fault(FaultPoint::AfterSend, key)?;
        let has_lookup = self.target.has_lookup();
        let found = transition::wants_lookup(&answer, via, has_lookup).then(|| {
            let asked_at = self.now();
            (self.lookup(key, &first.payload), asked_at)
        });
        let now = self.now();
        // The answer is decided on the records alone, so a store may decide it on `seen` and
        // send it in one round trip, kept only if nothing was appended since.
        let out = self.gate.append_on_records(key, &seen, &mut |tx| {
            transition::record_answer(
                tx.state,
                token,
                &answer,
                via,
                has_lookup,
                now,
                found.as_ref().map(|(l, asked_at)| (l, *asked_at)),
            )
        })?;
        self.fault(FaultPoint::AfterRecord, key)?;
        self.let_go(key, token, lock, out.history.state());
        let was_late = matches!(
            out.appended.first().map(|r| &r.event),
            Some(Event::LateResult(_))
        );
        Ok(Step::Done(match out.history.into_state() {
            EffectState::Resolved { resolution, .. } => self.outcome_of(resolution, was_late),
            EffectState::InFlight { claim, .. } if claim.token == token => self.busy(&format!(
                "sent, answer not known yet ({}); recovery will settle it",
                answer_reason(&answer)
            )),
            _ => Outcome::Superseded {
                reason: format!("claim {token} was taken over while this attempt was sending"),
            },
        }))
    }
}

impl Bound {
    /// Record that this holder's dispatch under `token` goes out unsent (`LATE_RESULT`
    /// `withdrawn`), ending its send's window now instead of at the claim's deadline.
    fn withdraw(
        &self,
        key: &EffectKey,
        seen: &Verified,
        token: u64,
        holding: &Holding,
        why: &str,
    ) -> Result<(), GateError> {
        let why = format!("{why}; nothing was sent under claim {token}");
        self.gate.append_after(key, seen, &mut |tx| {
            transition::withdraw(tx.state, token, &holding.holder, &why)
        })?;
        Ok(())
    }
}

/// The kind of a send's answer, for its span: a closed set.
fn answer_kind(a: &SendAnswer) -> &'static str {
    match a {
        SendAnswer::Done(_) => "done",
        SendAnswer::Replayed(_) => "replayed",
        SendAnswer::Definite { .. } => "definite_error",
        SendAnswer::Conflict(_) => "conflict",
        SendAnswer::SavedError(_) => "saved_error",
        SendAnswer::Unknown(_) => "unknown",
    }
}

fn answer_reason(a: &SendAnswer) -> String {
    match a {
        SendAnswer::Unknown(m) | SendAnswer::Conflict(m) | SendAnswer::SavedError(m) => m.clone(),
        SendAnswer::Definite { code, message } => format!("{code}: {message}"),
        SendAnswer::Done(_) | SendAnswer::Replayed(_) => "done".into(),
    }
}
