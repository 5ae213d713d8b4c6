//! The gate: the I/O shell around the decision core. It reads the journal, the lease store, the
//! premises, the liveness locks and the target; asks `core` what to do; and does it, writing each
//! step to the journal before acting on it. A crash anywhere leaves a history that the next
//! attempt resolves by the recovery table, never by guessing.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::clock::Clock;
use crate::core::decide::{
    after_send, check_fresh, diff, plan_recovery, plan_submit, plan_takeover,
};
use crate::core::{
    AfterSend, Ambiguous, Authorized, Claim, Claimed, Committed, Dispatched, EffectState, Event,
    Failed, Holder, LateResult, LeaseVerdict, LookupAnswer, MarginError, Premises, Proposed,
    Recheck, RecoveryInput, RecoveryPlan, RefusalCode, RefusalDraft, Refused, Resolution,
    SendAnswer, SubmitPlan, TakeoverPlan, TakeoverReason, Via, tier,
};
use crate::effect::{Effect, EffectKey};
use crate::faults::{Crash, FaultPoint, Faults, NoFaults};
use crate::journal::{Journal, JournalError};
use crate::lease::{LeaseError, LeaseStore};
use crate::liveness::{HeldLock, LockDir};
use crate::premise::{PremiseError, PremiseReader};
use crate::target::{SendRequest, Target};

/// A state that moves under an attempt is re-planned at most this many times per call.
const MAX_ROUNDS: usize = 8;

/// How the gate runs.
#[derive(Clone, Debug)]
pub struct GateConfig {
    /// Who this gate is, for claims.
    pub holder: Holder,
    /// A send is cut off after this long.
    pub send_timeout: Duration,
    /// Added to the send timeout for a claim's deadline: covers bytes still in flight.
    pub settle: Duration,
    /// A tier-1 target is trusted only until `window − margin` after the first dispatch.
    pub dedupe_margin: Duration,
    /// Where liveness lock files live (one host only).
    pub lock_dir: PathBuf,
    /// Suggested wait before retrying an effect in flight elsewhere.
    pub retry_after: Duration,
}

impl GateConfig {
    /// Defaults for a journal at `journal_path`: 30 s send timeout, 5 s settle, 1 h dedupe margin,
    /// lock files beside the journal.
    pub fn beside(journal_path: impl Into<PathBuf>) -> Self {
        let mut lock_dir = journal_path.into().into_os_string();
        lock_dir.push(".locks");
        Self {
            holder: Holder {
                host: host_name(),
                pid: std::process::id(),
                attempt: "1".into(),
            },
            send_timeout: Duration::from_secs(30),
            settle: Duration::from_secs(5),
            dedupe_margin: Duration::from_secs(3600),
            lock_dir: lock_dir.into(),
            retry_after: Duration::from_millis(500),
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// What an attempt ended with.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The effect landed once.
    Committed {
        /// How that is known.
        via: Via,
        /// The target's answer, as journaled.
        result: Value,
        /// True when answered from the journal without sending.
        replayed: bool,
    },
    /// Refused: nothing sent on this path. Also returned for a conflicting resubmission.
    Refused(Refused),
    /// The target definitively said no.
    Failed(Failed),
    /// Unknowable from here; a person must look.
    Ambiguous(Ambiguous),
    /// A send may be in flight elsewhere, or the target could not be asked: try again later.
    InFlight {
        /// Suggested wait.
        retry_after: Duration,
        /// Why.
        reason: String,
    },
    /// Premises or the lease could not be read just now; nothing was sent. Try again later.
    Retry {
        /// Suggested wait.
        retry_after: Duration,
        /// Why.
        reason: String,
    },
    /// This attempt lost its claim to a recoverer before sending: it sent nothing.
    Superseded {
        /// Why.
        reason: String,
    },
}

impl Outcome {
    /// A short stable label, e.g. `COMMITTED/idempotent_resend`, `REFUSED:stale_premise`.
    pub fn label(&self) -> String {
        match self {
            Self::Committed {
                via,
                replayed: true,
                ..
            } => {
                format!("COMMITTED/{}(replayed)", via_str(*via))
            }
            Self::Committed { via, .. } => format!("COMMITTED/{}", via_str(*via)),
            Self::Refused(r) => format!("REFUSED:{}", r.code),
            Self::Failed(f) => format!("FAILED:{}", f.code),
            Self::Ambiguous(_) => "AMBIGUOUS".into(),
            Self::InFlight { .. } => "IN_FLIGHT".into(),
            Self::Retry { .. } => "RETRY".into(),
            Self::Superseded { .. } => "SUPERSEDED".into(),
        }
    }

    /// True for outcomes that will not change on another attempt.
    pub fn is_final(&self) -> bool {
        !matches!(
            self,
            Self::InFlight { .. } | Self::Retry { .. } | Self::Superseded { .. }
        )
    }
}

fn via_str(via: Via) -> &'static str {
    match via {
        Via::FirstSend => "first_send",
        Via::IdempotentResend => "idempotent_resend",
        Via::FoundByLookup => "found_by_lookup",
        Via::ReappliedAfterLookup => "reapplied_after_lookup",
        Via::FailedButLanded => "failed_but_landed",
        Via::LateAnswer => "late_answer",
    }
}

/// Errors that stop an attempt without an outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// The journal failed; nothing was sent after the failure.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A fault injected by a test or the harness.
    #[error(transparent)]
    Crashed(#[from] Crash),
    /// A tier-1 target whose dedupe window cannot be trusted with this configuration.
    #[error("target {target}: {source}")]
    Margin {
        /// The target.
        target: String,
        /// The check that failed.
        source: MarginError,
    },
    /// `recover` on a key the journal has never seen.
    #[error("no effect with key {0} is in the journal: check the key (`interlock journal list`)")]
    UnknownKey(String),
    /// The liveness lock directory cannot be used.
    #[error("liveness locks in {dir}: {source}: make the directory writable")]
    Locks {
        /// The directory.
        dir: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A decision could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecideError {
    /// The key or payload is unusable.
    #[error(transparent)]
    Effect(#[from] crate::effect::EffectError),
    /// The premises could not be read.
    #[error(transparent)]
    Premises(#[from] PremiseError),
}

/// The gate, shared by every effect a worker runs.
#[derive(Clone)]
pub struct Gate {
    journal: Arc<dyn Journal>,
    leases: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    faults: Arc<dyn Faults>,
    cfg: GateConfig,
    locks: LockDir,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("journal", &self.journal.location())
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl Gate {
    /// A gate over a journal and a lease store.
    pub fn new(
        journal: Arc<dyn Journal>,
        leases: Arc<dyn LeaseStore>,
        clock: Arc<dyn Clock>,
        cfg: GateConfig,
    ) -> Result<Self, GateError> {
        let locks = LockDir::new(&cfg.lock_dir).map_err(|source| GateError::Locks {
            dir: cfg.lock_dir.display().to_string(),
            source,
        })?;
        Ok(Self {
            journal,
            leases,
            clock,
            faults: Arc::new(NoFaults),
            cfg,
            locks,
        })
    }

    /// Inject faults (tests and the kill-matrix harness).
    pub fn with_faults(mut self, faults: Arc<dyn Faults>) -> Self {
        self.faults = faults;
        self
    }

    /// The same gate, naming another attempt in the claims it takes.
    pub fn with_attempt(mut self, attempt: impl Into<String>) -> Self {
        self.cfg.holder.attempt = attempt.into();
        self
    }

    /// The configuration.
    pub fn config(&self) -> &GateConfig {
        &self.cfg
    }

    /// The journal.
    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.journal
    }

    /// Bind a target and its premise reader. A tier-1 target's dedupe margin is checked here,
    /// at start-up, instead of being trusted.
    pub fn bind(
        &self,
        target: Arc<dyn Target>,
        premises: Arc<dyn PremiseReader>,
    ) -> Result<Bound, GateError> {
        if let (crate::core::Tier::One, Some(window)) = (target.tier(), target.dedupe_window()) {
            tier::check_margin(
                ms(window),
                ms(self.cfg.dedupe_margin),
                ms(self.cfg.send_timeout),
                ms(self.cfg.settle),
            )
            .map_err(|source| GateError::Margin {
                target: target.name().to_owned(),
                source,
            })?;
        }
        Ok(Bound {
            gate: self.clone(),
            target,
            premises,
        })
    }
}

fn wait_until(until_ms: i64, now_ms: i64) -> Duration {
    Duration::from_millis(
        u64::try_from(until_ms.saturating_sub(now_ms))
            .unwrap_or(0)
            .max(1),
    )
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A gate bound to one target and one premise reader: the thing an activity body calls.
#[derive(Clone)]
pub struct Bound {
    gate: Gate,
    target: Arc<dyn Target>,
    premises: Arc<dyn PremiseReader>,
}

enum Step {
    Done(Outcome),
    Again,
}

impl Bound {
    /// Run one attempt of `effect`: replay, recover, or check and send.
    pub fn submit(&self, effect: &Effect) -> Result<Outcome, GateError> {
        self.fault(FaultPoint::Start, &effect.key)?;
        for _ in 0..MAX_ROUNDS {
            if let Step::Done(o) = self.submit_once(effect)? {
                return Ok(o);
            }
        }
        Ok(self.busy("the effect kept changing under this attempt"))
    }

    /// Resolve whatever the journal holds for `key`: continue a proposal, recover an in-flight
    /// send, or replay a resolution.
    pub fn recover(&self, key: &EffectKey) -> Result<Outcome, GateError> {
        self.fault(FaultPoint::Start, key)?;
        for _ in 0..MAX_ROUNDS {
            let step = match self.gate.journal.state(key)? {
                EffectState::Absent => return Err(GateError::UnknownKey(key.to_string())),
                EffectState::Proposed { first } => self.authorize(key, &first, false)?,
                EffectState::InFlight { first, claim } => {
                    self.recover_claim(key, &first, &claim)?
                }
                EffectState::Resolved { resolution, .. } => {
                    Step::Done(outcome_of(resolution, true))
                }
            };
            if let Step::Done(o) = step {
                return Ok(o);
            }
        }
        Ok(self.busy("the effect kept changing under this attempt"))
    }

    /// The target this gate sends to.
    pub fn target(&self) -> &Arc<dyn Target> {
        &self.target
    }

    /// Make a decision: the effect with its premises read now by this gate's premise reader.
    pub fn decide(
        &self,
        key: EffectKey,
        payload: &impl serde::Serialize,
        lease: impl Into<String>,
    ) -> Result<Effect, DecideError> {
        let effect = Effect::new(key, payload, lease)?;
        let premises = self.premises.read(&effect.key, &effect.payload)?;
        Ok(effect.premises(premises))
    }

    fn busy(&self, reason: &str) -> Outcome {
        Outcome::InFlight {
            retry_after: self.gate.cfg.retry_after,
            reason: reason.to_owned(),
        }
    }

    fn now(&self) -> i64 {
        self.gate.clock.now_ms()
    }

    fn fault(&self, point: FaultPoint, key: &EffectKey) -> Result<(), Crash> {
        self.gate.faults.at(point, key.as_str())
    }

    fn submit_once(&self, effect: &Effect) -> Result<Step, GateError> {
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
    fn authorize(&self, key: &EffectKey, first: &Proposed, fresh: bool) -> Result<Step, GateError> {
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
    fn dispatch(&self, key: &EffectKey, first: &Proposed) -> Result<Step, GateError> {
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
    fn send_under_claim(
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

    /// An in-flight effect: take the claim if the evidence allows, then act by the recovery table.
    fn recover_claim(
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

    fn resolve_as_recoverer(
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

    /// A transient failure to read the lease or the premises: record it, send nothing, retry.
    fn note_and_retry(
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

    fn deadline(&self) -> i64 {
        self.now() + ms(self.gate.cfg.send_timeout) + ms(self.gate.cfg.settle)
    }

    fn hold(&self, key: &EffectKey, token: u64) -> Result<Option<HeldLock>, GateError> {
        self.gate
            .locks
            .try_hold(key.as_str(), token)
            .map_err(|e| self.lock_err(e))
    }

    fn lock_err(&self, source: std::io::Error) -> GateError {
        GateError::Locks {
            dir: self.gate.locks.dir().display().to_string(),
            source,
        }
    }

    fn lease_verdict(&self, first: &Proposed) -> LeaseVerdict {
        let now = self.now();
        let leases = &self.gate.leases;
        match catch_unwind(AssertUnwindSafe(|| {
            leases.check(&first.lease, &first.payload, now)
        })) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => LeaseVerdict::Error {
                message: e.to_string(),
            },
            Err(_) => LeaseVerdict::Error {
                message: "the lease store panicked".into(),
            },
        }
    }

    fn describe_lease(&self, id: &str) -> Value {
        match self.gate.leases.describe(id) {
            Ok(Some(g)) => serde_json::to_value(g).unwrap_or(Value::Null),
            Ok(None) => Value::Null,
            Err(LeaseError::Store(e) | LeaseError::Invalid(e)) => json!({ "error": e }),
        }
    }

    /// R4 and R5 as of now. The second value is set when a failure may pass (the store or the
    /// premise source was unreachable) rather than a verdict.
    fn recheck(
        &self,
        key: &EffectKey,
        first: &Proposed,
    ) -> (Recheck, Option<(RefusalCode, String)>) {
        let lease = self.lease_verdict(first);
        let premises = &self.premises;
        let read = catch_unwind(AssertUnwindSafe(|| premises.read(key, &first.payload)));
        let mut transient = match &lease {
            LeaseVerdict::Error { message } => Some((RefusalCode::LeaseError, message.clone())),
            _ => None,
        };
        let (premises_now, premise_error) = match read {
            Ok(Ok(p)) => (p, None),
            Ok(Err(e)) => {
                if matches!(e, PremiseError::Unavailable(_)) && transient.is_none() {
                    transient = Some((RefusalCode::PremiseError, e.to_string()));
                }
                (Premises::new(), Some(e.to_string()))
            }
            Err(_) => (
                Premises::new(),
                Some("the premise reader panicked".to_owned()),
            ),
        };
        let changes = if premise_error.is_none() {
            diff(&first.premises, &premises_now)
        } else {
            Vec::new()
        };
        (
            Recheck {
                lease,
                premises_now,
                changes,
                premise_error,
            },
            transient,
        )
    }

    fn repairs_for(
        &self,
        first: &Proposed,
        recheck: &Recheck,
        refusing: bool,
    ) -> Vec<crate::core::Repair> {
        if !refusing || recheck.changes.is_empty() || recheck.lease != LeaseVerdict::Live {
            return Vec::new();
        }
        let premises = &self.premises;
        catch_unwind(AssertUnwindSafe(|| {
            premises.repairs(&first.payload, &recheck.premises_now)
        }))
        .unwrap_or_default()
    }

    fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        let target = &self.target;
        catch_unwind(AssertUnwindSafe(|| target.lookup(key, payload)))
            .unwrap_or_else(|_| LookupAnswer::Unknown("the target panicked in lookup".into()))
    }
}

fn retry_note(code: RefusalCode, message: &str, first: &Proposed) -> Refused {
    Refused {
        code,
        reason: format!("{message}; nothing was sent, try again later"),
        changes: Vec::new(),
        repairs: Vec::new(),
        is_final: false,
        payload_hash: first.payload_hash.clone(),
    }
}

fn conflict_note(hash: &str, recorded: &str) -> Refused {
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

fn final_refusal(d: &RefusalDraft, repairs: Vec<crate::core::Repair>, hash: &str) -> Refused {
    Refused {
        code: d.code,
        reason: d.reason.clone(),
        changes: d.changes.clone(),
        repairs,
        is_final: true,
        payload_hash: hash.to_owned(),
    }
}

fn outcome_of(res: Resolution, replayed: bool) -> Outcome {
    match res {
        Resolution::Committed(c) => Outcome::Committed {
            via: c.via,
            result: c.result,
            replayed,
        },
        Resolution::Refused(r) => Outcome::Refused(r),
        Resolution::Failed(f) => Outcome::Failed(f),
        Resolution::Ambiguous(a) => Outcome::Ambiguous(a),
    }
}

fn answer_json(a: &SendAnswer) -> Value {
    match a {
        SendAnswer::Done(v) => json!({ "done": v }),
        SendAnswer::Definite { code, message } => {
            json!({ "failed": { "code": code, "message": message } })
        }
        SendAnswer::Conflict(m) => json!({ "conflict": m }),
        SendAnswer::Unknown(m) => json!({ "unknown": m }),
    }
}

fn answer_reason(a: &SendAnswer) -> String {
    match a {
        SendAnswer::Unknown(m) | SendAnswer::Conflict(m) => m.clone(),
        SendAnswer::Definite { code, message } => format!("{code}: {message}"),
        SendAnswer::Done(_) => "done".into(),
    }
}
