//! The fresh path: propose, authorize (R4), dispatch under the liveness lock (R1, R3, R5), send
//! under the claim with the fencing check, and record the answer (or a late one).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use serde_json::{Value, json};

use crate::core::decide::{after_send, check_fresh, plan_submit};
use crate::core::{
    AfterSend, Authorized, Committed, Dispatched, EffectState, Event, Failed, LateResult,
    LeaseVerdict, Premises, Proposed, Recheck, RefusalCode, RefusalDraft, Refused, SendAnswer,
    SubmitPlan, Via,
};
use crate::effect::{Effect, EffectKey};
use crate::faults::FaultPoint;
use crate::liveness::HeldLock;
use crate::target::SendRequest;

use super::{Bound, GateError, Outcome, Step, ms, outcome_of};

impl Bound {
    pub(super) fn submit_once(&self, effect: &Effect) -> Result<Step, GateError> {
        let key = &effect.key;
        let hash = effect.payload_hash();
        let state = self.gate.journal.state(key)?;
        let first = state.first().cloned();
        Ok(match (plan_submit(&state, &hash), first) {
            (SubmitPlan::Conflict { recorded }, _) => {
                let note = conflict_note(&hash, &recorded);
                self.gate
                    .journal
                    .append_with(key, &mut |_, _| vec![Event::Refused(note.clone())])?;
                Step::Done(Outcome::Refused(note))
            }
            (SubmitPlan::Replay(res), _) => Step::Done(outcome_of(res, true)),
            (SubmitPlan::Recover(claim), Some(first)) => self.recover_claim(key, &first, &claim)?,
            (SubmitPlan::Continue, Some(first)) => self.authorize(key, &first, false)?,
            (SubmitPlan::Fresh, _) => {
                let proposal = Proposed {
                    payload: effect.payload.clone(),
                    payload_hash: hash,
                    premises: effect.decided.clone(),
                    lease: effect.lease.clone(),
                    target: self.target.name().to_owned(),
                    tier: self.target.tier().into(),
                };
                self.authorize(key, &proposal, true)?
            }
            (_, None) => Step::Again,
        })
    }

    /// R4 at submit, written in one transaction with the proposal when it is fresh: the lease
    /// authorizes the effect, refuses it, or (store unreachable) is noted for a retry.
    pub(super) fn authorize(
        &self,
        key: &EffectKey,
        first: &Proposed,
        fresh: bool,
    ) -> Result<Step, GateError> {
        let verdict = self.lease_verdict(first);
        let mut events = Vec::new();
        if fresh {
            events.push(Event::Proposed(first.clone()));
        }
        let refusal = check_fresh(&Recheck {
            lease: verdict.clone(),
            premises_now: Premises::new(),
            changes: Vec::new(),
            premise_error: None,
        })
        .map(|draft| final_refusal(&draft, Vec::new(), &first.payload_hash));
        let note = match &verdict {
            LeaseVerdict::Error { message } => {
                Some(retry_note(RefusalCode::LeaseError, message, first))
            }
            _ => None,
        };
        match (&verdict, &note, &refusal) {
            (LeaseVerdict::Live, _, _) => {
                let grant = self.describe_lease(&first.lease);
                events.push(Event::Authorized(Authorized {
                    lease: first.lease.clone(),
                    grant,
                }));
            }
            (_, Some(n), _) => events.push(Event::Refused(n.clone())),
            (_, None, Some(r)) => events.push(Event::Refused(r.clone())),
            (_, None, None) => {}
        }
        let out = self.gate.journal.append_with(key, &mut |s, _| {
            let still = match s {
                EffectState::Absent => fresh,
                EffectState::Proposed { first: f } => {
                    !fresh && f.payload_hash == first.payload_hash
                }
                _ => false,
            };
            if still { events.clone() } else { Vec::new() }
        })?;
        if out.appended.is_empty() {
            return Ok(Step::Again);
        }
        match (note, refusal) {
            (Some(n), _) => Ok(Step::Done(Outcome::Retry {
                retry_after: self.gate.cfg.retry_after,
                reason: n.reason,
            })),
            (None, Some(r)) => Ok(Step::Done(Outcome::Refused(r))),
            (None, None) => self.dispatch(key, first),
        }
    }

    /// Under the liveness lock: R4 and R5 again, the atomic dispatch, then the send.
    pub(super) fn dispatch(&self, key: &EffectKey, first: &Proposed) -> Result<Step, GateError> {
        self.fault(FaultPoint::BeforeDispatch, key)?;
        let Some(lock) = self.hold(key, 1)? else {
            return Ok(Step::Done(
                self.busy("another attempt is dispatching this effect"),
            ));
        };
        let (recheck, transient) = self.recheck(key, first);
        if let Some(err) = transient {
            return self.note_and_retry(key, err.0, &err.1, first);
        }
        let deadline = self.deadline();
        let draft = check_fresh(&recheck);
        let repairs = self.repairs_for(first, &recheck, draft.is_some());
        let dispatched = Event::Dispatched(Dispatched {
            token: 1,
            holder: self.gate.cfg.holder.clone(),
            deadline_ms: deadline,
            payload_hash: first.payload_hash.clone(),
            recheck: recheck.clone(),
            resend: false,
        });
        let refused = draft
            .as_ref()
            .map(|d| final_refusal(d, repairs.clone(), &first.payload_hash));
        let out = self
            .gate
            .journal
            .append_with(key, &mut |s, _| match (s, &refused) {
                (EffectState::Proposed { .. }, Some(r)) => vec![Event::Refused(r.clone())],
                (EffectState::Proposed { .. }, None) => vec![dispatched.clone()],
                _ => Vec::new(),
            })?;
        if out.appended.is_empty() {
            return Ok(Step::Again);
        }
        if let Some(r) = refused {
            return Ok(Step::Done(Outcome::Refused(r)));
        }
        self.fault(FaultPoint::AfterDispatch, key)?;
        self.send_under_claim(key, first, 1, deadline, Via::FirstSend, lock)
    }

    /// Send under claim `token`, then record the answer. A zombie — an attempt whose claim was
    /// taken while it stalled — finds out here, immediately before sending, and sends nothing.
    pub(super) fn send_under_claim(
        &self,
        key: &EffectKey,
        first: &Proposed,
        token: u64,
        deadline_ms: i64,
        via: Via,
        lock: HeldLock,
    ) -> Result<Step, GateError> {
        let quiet_after = match self.gate.journal.state(key)? {
            EffectState::InFlight { claim, .. } if claim.token == token => {
                claim.quiet_after(Some(token))
            }
            _ => {
                return Ok(Step::Done(Outcome::Superseded {
                    reason: format!("claim {token} was taken over before this attempt sent"),
                }));
            }
        };
        let budget = deadline_ms - ms(self.gate.cfg.settle) - self.now();
        if budget <= 0 {
            return Ok(Step::Done(self.busy(
                "this attempt's claim ran out before it could send; a recoverer will take it",
            )));
        }
        let timeout = self
            .gate
            .cfg
            .send_timeout
            .min(Duration::from_millis(u64::try_from(budget).unwrap_or(0)));
        let req = SendRequest {
            key,
            payload: &first.payload,
            timeout,
        };
        let target = &self.target;
        let answer = catch_unwind(AssertUnwindSafe(|| target.send(&req))).unwrap_or_else(|_| {
            SendAnswer::Unknown("the target panicked while sending; it may have sent".into())
        });
        tracing::debug!(key = %key, token, ?answer, "send answered");
        self.fault(FaultPoint::AfterSend, key)?;
        let has_lookup = self.target.has_lookup();
        let earlier_quiet = self.now() >= quiet_after;
        let mut plan = after_send(&answer, via, has_lookup, earlier_quiet, None);
        if plan == AfterSend::Lookup {
            let found = self.lookup(key, &first.payload);
            plan = after_send(&answer, via, has_lookup, earlier_quiet, Some(&found));
        }
        let event = match plan {
            AfterSend::Commit(via, result) => {
                Some(Event::Committed(Committed { token, via, result }))
            }
            AfterSend::Fail { code, message } => Some(Event::Failed(Failed {
                token,
                code,
                message,
            })),
            AfterSend::Refuse(d) => Some(Event::Refused(final_refusal(
                &d,
                Vec::new(),
                &first.payload_hash,
            ))),
            AfterSend::StayInFlight(_) | AfterSend::Lookup => None,
        };
        let late = Event::LateResult(LateResult {
            token,
            answer: answer_json(&answer),
        });
        let out = self.gate.journal.append_with(key, &mut |s, _| match s {
            EffectState::InFlight { claim, .. } if claim.token == token => {
                event.clone().into_iter().collect()
            }
            _ => vec![late.clone()],
        })?;
        self.fault(FaultPoint::AfterRecord, key)?;
        drop(lock);
        let was_late = matches!(
            out.appended.first().map(|r| &r.event),
            Some(Event::LateResult(_))
        );
        Ok(Step::Done(match out.after {
            EffectState::Resolved { resolution, .. } => {
                self.gate.locks.forget(key.as_str(), token);
                outcome_of(resolution, was_late)
            }
            EffectState::InFlight { claim, .. } if claim.token == token => self.busy(&format!(
                "sent, answer not known yet ({}); recovery will settle it",
                answer_reason(&answer)
            )),
            _ => Outcome::Superseded {
                reason: format!("claim {token} was taken over while this attempt was sending"),
            },
        }))
    }

    /// A transient failure to read the lease or the premises: record it, send nothing, retry.
    pub(super) fn note_and_retry(
        &self,
        key: &EffectKey,
        code: RefusalCode,
        message: &str,
        first: &Proposed,
    ) -> Result<Step, GateError> {
        let note = retry_note(code, message, first);
        let reason = note.reason.clone();
        self.gate
            .journal
            .append_with(key, &mut |_, _| vec![Event::Refused(note.clone())])?;
        Ok(Step::Done(Outcome::Retry {
            retry_after: self.gate.cfg.retry_after,
            reason,
        }))
    }
}

pub(super) fn retry_note(code: RefusalCode, message: &str, first: &Proposed) -> Refused {
    Refused {
        code,
        reason: format!("{message}; nothing was sent, try again later"),
        changes: Vec::new(),
        repairs: Vec::new(),
        is_final: false,
        payload_hash: first.payload_hash.clone(),
    }
}

pub(super) fn conflict_note(hash: &str, recorded: &str) -> Refused {
    Refused {
        code: RefusalCode::ConflictingPayload,
        reason: format!(
            "this key is bound to payload {recorded}; payload {hash} is refused (a new decision \
             needs a new key)"
        ),
        changes: Vec::new(),
        repairs: Vec::new(),
        is_final: false,
        payload_hash: hash.to_owned(),
    }
}

pub(super) fn final_refusal(
    d: &RefusalDraft,
    repairs: Vec<crate::core::Repair>,
    hash: &str,
) -> Refused {
    Refused {
        code: d.code,
        reason: d.reason.clone(),
        changes: d.changes.clone(),
        repairs,
        is_final: true,
        payload_hash: hash.to_owned(),
    }
}

pub(super) fn answer_json(a: &SendAnswer) -> Value {
    match a {
        SendAnswer::Done(v) => json!({ "done": v }),
        SendAnswer::Definite { code, message } => {
            json!({ "failed": { "code": code, "message": message } })
        }
        SendAnswer::Conflict(m) => json!({ "conflict": m }),
        SendAnswer::Unknown(m) => json!({ "unknown": m }),
    }
}

pub(super) fn answer_reason(a: &SendAnswer) -> String {
    match a {
        SendAnswer::Unknown(m) | SendAnswer::Conflict(m) => m.clone(),
        SendAnswer::Definite { code, message } => format!("{code}: {message}"),
        SendAnswer::Done(_) => "done".into(),
    }
}
