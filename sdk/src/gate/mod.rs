//! The gate: the I/O shell around the decision core. It reads the journal, the lease store, the
//! premises, the liveness locks and the target; asks `core` what to do; and does it, writing each
//! step to the journal before acting on it. A crash anywhere leaves a history that the next
//! attempt resolves by the recovery table, never by guessing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::approval::Approvers;
use crate::clock::Clock;

use crate::core::decide::plan_submit;
use crate::core::transition::{self, Holding};
use crate::core::{
    Ambiguous, AppliedTwice, EffectState, Failed, MarginError, Proposed, Refused, Resolution,
    SubmitPlan, Tier, Via, tier,
};
use crate::effect::{Effect, EffectKey};
use crate::faults::FaultPoint;
#[cfg(feature = "test-hooks")]
use crate::faults::{Crash, Faults, NoFaults};
use crate::journal::{Journal, JournalError, Verified};
use crate::lease::LeaseStore;
use crate::liveness::{HeldLock, Liveness, LockDir};
use crate::premise::{PremiseError, PremiseReader};
use crate::target::Target;

mod checks;
mod config;
mod fresh;
mod recovery;
mod send;

pub use config::{ConfigError, GateConfig, GateConfigBuilder};

/// A state that moves under an attempt is re-planned at most this many times per call.
const MAX_ROUNDS: usize = 8;

/// What an attempt ended with. Workflows match on it; new outcomes may be added, so a match
/// keeps a catch-all arm.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
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
    /// The target holds the effect more than once (it did not dedupe as its tier promised): each
    /// is named, for a person to reverse the extra ones. Nothing more is sent under the key.
    AppliedTwice(AppliedTwice),
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
    /// This attempt sent nothing: it lost its claim to a recoverer, or was stopped or fenced
    /// ([`Bound::with_stop`], [`Bound::with_fence`]). Submit again: the next attempt replays,
    /// waits for or recovers the effect.
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
                format!("COMMITTED/{via}(replayed)")
            }
            Self::Committed { via, .. } => format!("COMMITTED/{via}"),
            Self::Refused(r) => format!("REFUSED:{}", r.code),
            Self::Failed(f) => format!("FAILED:{}", f.code),
            Self::Ambiguous(_) => "AMBIGUOUS".into(),
            Self::AppliedTwice(_) => "APPLIED_TWICE".into(),
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

/// Errors that stop an attempt without an outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// The journal failed; nothing was sent after the failure.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A fault injected by a test or the harness.
    #[cfg(feature = "test-hooks")]
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
    /// The effect was journaled for another target than the one this binding sends to.
    #[error(
        "effect {key} was proposed for target {journaled}, but this gate is bound to {bound}: \
         recover it through a binding to {journaled}"
    )]
    TargetMismatch {
        /// The effect's key.
        key: String,
        /// The target named in its `PROPOSED` record.
        journaled: String,
        /// The target this binding sends to.
        bound: String,
    },
    /// The configuration cannot run a gate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The liveness locks cannot be taken or tested.
    #[error("liveness locks at {place}: {source}")]
    Locks {
        /// Where the locks live (a directory, a database).
        place: String,
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
    /// The target has no canonical form for the payload, or could not resolve its names.
    #[error(transparent)]
    Canonical(#[from] crate::target::CanonicalError),
    /// The facts read do not satisfy the binding's rules ([`Bound::with_rules`]): the effect
    /// must not be decided on them.
    #[error(
        "the facts do not allow this effect: {}",
        crate::core::rules::describe(broken)
    )]
    Rules {
        /// Each rule that does not hold, with the values it was judged on.
        broken: Vec<crate::core::rules::Broken>,
    },
}

/// The gate, shared by every effect a worker runs.
#[derive(Clone)]
pub struct Gate {
    journal: Arc<dyn Journal>,
    leases: Arc<dyn LeaseStore>,
    /// The leases live in the journal's store: read them inside its write transactions.
    leases_in_journal: bool,
    clock: Arc<dyn Clock>,
    #[cfg(feature = "test-hooks")]
    faults: Arc<dyn Faults>,
    cfg: GateConfig,
    locks: Arc<dyn Liveness>,
    /// Targets seen to apply an effect twice under one key (here, or in the journal at bind
    /// time): from then on this gate trusts them no further than tier 2, whatever they claim.
    demoted: Arc<Mutex<HashSet<String>>>,
    /// Whom signed approvals are checked against; without it a signed approval lets nothing
    /// through.
    approvers: Option<Arc<dyn crate::approval::DirectorySource>>,
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
        cfg.check()?;
        // A journal shared by several hosts brings liveness they can all see; a lock file serves
        // the processes of one host.
        let locks = match journal.liveness() {
            Some(shared) => shared,
            None if cfg.lock_dir.as_os_str().is_empty() => {
                return Err(ConfigError::NoLockDir.into());
            }
            None => Arc::new(
                LockDir::new(&cfg.lock_dir, cfg.holder.host.clone()).map_err(|source| {
                    GateError::Locks {
                        place: cfg.lock_dir.display().to_string(),
                        source,
                    }
                })?,
            ),
        };
        if let Some(kept) = locks.keeps_silent_holder() {
            let claim = cfg.send_timeout.saturating_add(cfg.settle);
            if claim >= kept {
                return Err(ConfigError::ClaimOutlastsLiveness {
                    claim_ms: u64::try_from(claim.as_millis()).unwrap_or(u64::MAX),
                    kept_ms: u64::try_from(kept.as_millis()).unwrap_or(u64::MAX),
                }
                .into());
            }
        }
        let leases_in_journal = leases.kept_in() == Some(journal.store_id());
        Ok(Self {
            journal,
            leases,
            leases_in_journal,
            clock,
            #[cfg(feature = "test-hooks")]
            faults: Arc::new(NoFaults),
            cfg,
            locks,
            demoted: Arc::default(),
            approvers: None,
        })
    }

    /// Check signed approvals ([`crate::approval`]) against `approvers` at every send. The
    /// leases must be kept in the journal's store, where the requests' routes are. The
    /// directory is the one given, for as long as this gate lives; a process that runs for
    /// long reads it live ([`Gate::with_approver_file`]).
    pub fn with_approvers(self, approvers: Arc<Approvers>) -> Result<Self, GateError> {
        approvers
            .check()
            .map_err(|e| ConfigError::Approvers(e.to_string()))?;
        self.with_approver_source(Arc::new(crate::approval::Fixed(approvers)))
    }

    /// Check signed approvals against the directory file at `path`, read again whenever it
    /// changes: a person removed from it or re-keyed approves nothing from the next check on,
    /// and a file that cannot be read or does not check lets no approval through.
    pub fn with_approver_file(
        self,
        path: impl Into<std::path::PathBuf>,
    ) -> Result<Self, GateError> {
        let file = crate::approval::DirectoryFile::open(path)
            .map_err(|e| ConfigError::Approvers(e.to_string()))?;
        self.with_approver_source(Arc::new(file))
    }

    /// Check signed approvals against whatever directory `source` gives at each check.
    pub fn with_approver_source(
        mut self,
        source: Arc<dyn crate::approval::DirectorySource>,
    ) -> Result<Self, GateError> {
        if !self.leases_in_journal {
            return Err(ConfigError::ApprovalsOutsideJournal.into());
        }
        self.approvers = Some(source);
        Ok(self)
    }

    /// Inject faults (tests and the kill-matrix harness).
    #[cfg(feature = "test-hooks")]
    pub fn with_faults(mut self, faults: Arc<dyn Faults>) -> Self {
        self.faults = faults;
        self
    }

    /// The same gate, naming another attempt in the claims it takes.
    pub fn with_attempt(mut self, attempt: impl Into<String>) -> Self {
        self.cfg.holder.attempt = attempt.into();
        self
    }

    /// The same gate, acting for `principal`: journaled as the caller of every claim it takes
    /// and as the proposer of every effect it proposes, and who a lease that names its spenders
    /// is judged for. Only a name the process verified or was configured with belongs here
    /// (a gate server passes the caller it authenticated), never one a caller wrote.
    pub fn with_caller(mut self, principal: impl Into<String>) -> Self {
        self.cfg.holder.caller = Some(principal.into());
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

    /// The journal's read-decide-append, timed and traced.
    fn append_after(
        &self,
        key: &EffectKey,
        seen: &Verified,
        decide: &mut crate::journal::Decide<'_>,
    ) -> Result<crate::journal::AppendOutcome, JournalError> {
        self.append_reading(key, seen, crate::journal::ReadsAhead::default(), decide)
    }

    /// [`Gate::append_after`] for a decision that will read `ahead` as of the transaction.
    fn append_reading(
        &self,
        key: &EffectKey,
        seen: &Verified,
        ahead: crate::journal::ReadsAhead<'_>,
        decide: &mut crate::journal::Decide<'_>,
    ) -> Result<crate::journal::AppendOutcome, JournalError> {
        self.timed_append(|j| j.append_reading(key, seen, ahead, decide))
    }

    /// [`Gate::append_after`] for a decision on the key's records alone
    /// ([`Journal::append_on_records`]: it may run twice).
    fn append_on_records(
        &self,
        key: &EffectKey,
        seen: &Verified,
        decide: &mut crate::journal::Decide<'_>,
    ) -> Result<crate::journal::AppendOutcome, JournalError> {
        self.timed_append(|j| j.append_on_records(key, seen, decide))
    }

    fn timed_append(
        &self,
        append: impl FnOnce(&dyn Journal) -> Result<crate::journal::AppendOutcome, JournalError>,
    ) -> Result<crate::journal::AppendOutcome, JournalError> {
        let span =
            tracing::debug_span!("interlock.journal.append", records = tracing::field::Empty);
        let _in = span.enter();
        let started = Instant::now();
        let out = append(self.journal.as_ref());
        crate::metrics::journal_append(started.elapsed());
        if let (false, Ok(o)) = (span.is_disabled(), &out) {
            let kinds: Vec<&str> = o.appended.iter().map(|r| r.event.kind()).collect();
            span.record("records", tracing::field::display(kinds.join(",")));
        }
        out
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
        self.recall_demotion(target.name())?;
        Ok(Bound {
            gate: self.clone(),
            target,
            premises,
            rules: Arc::new([]),
            stop: None,
            fence: None,
        })
    }

    /// A target the journal shows applying an effect twice is trusted no further than tier 2 by
    /// every gate over that journal, from its next binding on (after a restart, in
    /// `interlock recover`), not only by the process that saw it happen.
    fn recall_demotion(&self, target: &str) -> Result<(), GateError> {
        for k in self.journal.keys_with("APPLIED_TWICE")? {
            // A key that cannot be read cannot clear the target: demote it, and leave the
            // corruption to be reported where that key is used.
            let proposed_for = EffectKey::fixed(k.clone())
                .ok()
                .and_then(|key| self.journal.state(&key).ok())
                .map(|state| state.first().map(|f| f.target.clone()));
            if proposed_for.is_none() {
                tracing::warn!(key = %k, "an APPLIED_TWICE key cannot be read; trusting the target as tier 2");
            }
            if proposed_for.is_none_or(|t| t.as_deref() == Some(target)) {
                self.demoted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(target.to_owned());
                break;
            }
        }
        Ok(())
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
    /// The rules over the premises this binding states ([`Bound::with_rules`]).
    rules: Arc<[crate::core::rules::Rule]>,
    stop: Option<StopCheck>,
    fence: Option<StopCheck>,
}

/// Asked before each step that could lead to a send: `true` means the attempt was cancelled
/// (a Temporal activity cancellation) and must not dispatch, take over or resend.
pub type StopCheck = Arc<dyn Fn() -> bool + Send + Sync>;

enum Step {
    Done(Outcome),
    Again,
}

impl Bound {
    /// Run one attempt of `effect`: replay, recover, or check and send.
    ///
    /// A payload the journal does not hold as it is given is put in the target's canonical form
    /// ([`Target::canonical`]) before it is hashed, journaled, scoped or counted: one that has
    /// none is refused `invalid_payload` with nothing journaled, and one whose names cannot be
    /// resolved just now is answered `RETRY`. Another spelling of the payload the key holds is
    /// that payload, not a conflict.
    pub fn submit(&self, effect: &Effect) -> Result<Outcome, GateError> {
        let span = self.attempt_span("submit", &effect.key);
        let _in = span.enter();
        let out = self.submit_rounds(effect);
        self.finish(&span, &out);
        out
    }

    /// `effect`'s payload in the target's canonical form, or the answer when it has none. A
    /// target that panics has none: nothing is journaled on doubt.
    fn canonical(&self, effect: &Effect) -> Result<Value, Outcome> {
        use crate::target::CanonicalError;
        let target = &self.target;
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            target.canonical(&effect.payload)
        }))
        .unwrap_or_else(|_| {
            Err(CanonicalError::Invalid(format!(
                "target {} panicked putting the payload in canonical form",
                target.name()
            )))
        });
        match read {
            Ok(payload) => Ok(payload),
            Err(CanonicalError::Unavailable(why)) => Err(Outcome::Retry {
                retry_after: self.gate.cfg.retry_after,
                reason: format!(
                    "target {} could not resolve the payload's names ({why}); nothing was \
                     journaled",
                    target.name()
                ),
            }),
            Err(e) => Err(Outcome::Refused(Refused {
                code: crate::core::RefusalCode::InvalidPayload,
                reason: format!("target {}: {e}", target.name()),
                changes: Vec::new(),
                repairs: Vec::new(),
                is_final: false,
                payload_hash: effect.payload_hash(),
            })),
        }
    }

    fn submit_rounds(&self, effect: &Effect) -> Result<Outcome, GateError> {
        self.fault(FaultPoint::Start, &effect.key)?;
        for _ in 0..MAX_ROUNDS {
            if let Step::Done(o) = self.submit_once(effect)? {
                return Ok(o);
            }
        }
        Ok(self.busy("the effect kept changing under this attempt"))
    }

    /// The span of one attempt: its fields are filled in as it learns them and when it ends.
    fn attempt_span(&self, how: &'static str, key: &EffectKey) -> tracing::Span {
        tracing::info_span!(
            "interlock.attempt",
            how,
            key = %key,
            target = self.target.name(),
            tier = u8::from(self.tier()),
            outcome = tracing::field::Empty,
            via = tracing::field::Empty,
            refusal_code = tracing::field::Empty,
        )
    }

    /// Record how an attempt ended, on its span and in the metrics.
    fn finish(&self, span: &tracing::Span, out: &Result<Outcome, GateError>) {
        let target = self.target.name();
        match out {
            Ok(o) => {
                crate::metrics::attempt(target, o);
                span.record("outcome", crate::metrics::outcome_label(o));
                match o {
                    Outcome::Committed { via, .. } => {
                        span.record("via", via.as_str());
                    }
                    Outcome::Refused(r) => {
                        span.record("refusal_code", r.code.as_str());
                    }
                    _ => {}
                }
            }
            Err(e) => {
                crate::metrics::attempt_error(target);
                span.record("outcome", "error");
                tracing::warn!(error = %e, "the attempt stopped without an outcome");
            }
        }
    }

    /// Resolve whatever the journal holds for `key`: continue a proposal, recover an in-flight
    /// send, or replay a resolution.
    pub fn recover(&self, key: &EffectKey) -> Result<Outcome, GateError> {
        let span = self.attempt_span("recover", key);
        let _in = span.enter();
        let out = self.recover_rounds(key);
        self.finish(&span, &out);
        out
    }

    fn recover_rounds(&self, key: &EffectKey) -> Result<Outcome, GateError> {
        self.fault(FaultPoint::Start, key)?;
        for _ in 0..MAX_ROUNDS {
            let seen = self.gate.journal.read(key)?;
            let step = match seen.state() {
                EffectState::Absent => return Err(GateError::UnknownKey(key.to_string())),
                EffectState::Resolved { first, resolution } => {
                    self.check_binding(key, first)?;
                    Step::Done(self.outcome_of(resolution.clone(), true))
                }
                _ => self.resume(key, &seen)?,
            };
            if let Step::Done(o) = step {
                return Ok(o);
            }
        }
        Ok(self.busy("the effect kept changing under this attempt"))
    }

    /// One attempt's step: what the key's state says to do with this submission.
    fn submit_once(&self, given: &Effect) -> Result<Step, GateError> {
        let key = &given.key;
        // The attempt's one full read: later reads verify only what was appended since.
        let seen = self.gate.journal.read(key)?;
        let state = seen.state();
        let given_hash = given.payload_hash();
        let mut hash = given_hash.clone();
        let mut plan = plan_submit(state, &hash);
        // The journal holds canonical payloads, with the spelling each was proposed in: a
        // payload it holds either way needs no other form, and one it does not is put in
        // canonical form before anything is decided on it.
        let mut effect = std::borrow::Cow::Borrowed(given);
        let mut respelt = false;
        if matches!(plan, SubmitPlan::Fresh | SubmitPlan::Conflict { .. }) {
            match self.canonical(given) {
                Ok(c) if c == given.payload => {}
                Ok(c) => {
                    let c = Effect {
                        payload: c,
                        ..given.clone()
                    };
                    let c_hash = c.payload_hash();
                    // Another spelling of the payload the key holds is that payload; another
                    // payload stays a conflict, noted under the hash it was given with.
                    if matches!(&plan, SubmitPlan::Fresh)
                        || matches!(&plan, SubmitPlan::Conflict { recorded } if *recorded == c_hash)
                    {
                        plan = plan_submit(state, &c_hash);
                        hash = c_hash;
                        effect = std::borrow::Cow::Owned(c);
                        respelt = true;
                    }
                }
                // No canonical form: nothing is journaled for a new key. For a key that holds
                // a payload, one whose names cannot be resolved just now may be another
                // spelling of it: answered RETRY, never a conflict on doubt; one the target
                // refuses outright is a conflict as any other payload.
                Err(answer)
                    if matches!(plan, SubmitPlan::Fresh)
                        || matches!(answer, Outcome::Retry { .. }) =>
                {
                    return Ok(Step::Done(answer));
                }
                Err(_) => {}
            }
        }
        let effect = effect.as_ref();
        Ok(match plan {
            // Refused either way; the journal keeps one note per distinct refused payload, a
            // bounded number per key, so a caller looping conflicts grows nothing.
            SubmitPlan::Conflict { recorded } => {
                self.gate.append_after(key, &seen, &mut |tx| {
                    transition::conflict(tx.records.iter().map(|r| &r.event), &hash, &recorded)
                })?;
                Step::Done(Outcome::Refused(transition::conflict_note(
                    &hash, &recorded,
                )))
            }
            // A resolution is replayed only to the binding it was proposed through: another
            // target's caller would take it for its own.
            SubmitPlan::Replay(res) => {
                if let Some(first) = state.first() {
                    self.check_binding(key, first)?;
                }
                Step::Done(self.outcome_of(res, true))
            }
            SubmitPlan::Recover(_) | SubmitPlan::Continue => self.resume(key, &seen)?,
            SubmitPlan::Fresh => {
                let proposal = Proposed {
                    payload: effect.payload.clone(),
                    payload_hash: hash,
                    premises: effect.decided.clone(),
                    lease: effect.lease.clone(),
                    target: self.target.name().to_owned(),
                    tier: self.tier().into(),
                    window_ms: (self.tier() == Tier::One)
                        .then(|| self.target.dedupe_window().map(ms))
                        .flatten(),
                    labels: effect.labels.clone(),
                    by: self.gate.cfg.holder.caller.clone(),
                    rules: self.rules.iter().map(|r| r.text().to_owned()).collect(),
                    given_hash: respelt.then_some(given_hash),
                };
                self.propose(key, &proposal, &seen)?
            }
        })
    }

    /// An effect the journal already holds: continue its proposal, or recover its send — only
    /// through the target it was proposed for.
    fn resume(&self, key: &EffectKey, seen: &Verified) -> Result<Step, GateError> {
        match seen.state() {
            EffectState::Proposed { first } => {
                self.check_binding(key, first)?;
                self.authorize(key, first, seen)
            }
            EffectState::InFlight { first, claim } => {
                self.check_binding(key, first)?;
                self.recover_claim(key, first, claim, seen)
            }
            EffectState::Absent | EffectState::Resolved { .. } => Ok(Step::Again),
        }
    }

    /// An effect is continued or recovered only through the target it was proposed for.
    fn check_binding(&self, key: &EffectKey, first: &Proposed) -> Result<(), GateError> {
        if first.target == self.target.name() {
            Ok(())
        } else {
            Err(GateError::TargetMismatch {
                key: key.to_string(),
                journaled: first.target.clone(),
                bound: self.target.name().to_owned(),
            })
        }
    }

    /// The same binding, judging `rules` over the premises ([`crate::core::rules`]) at decide,
    /// at every dispatch and at recovery: an effect whose facts do not satisfy one is refused
    /// `premise_rule` (at decide, [`DecideError::Rules`]), naming the rule and the values. The
    /// rules are journaled with each effect this binding proposes, and judged again by any
    /// binding that dispatches or recovers it, beside its own.
    pub fn with_rules<S: AsRef<str>>(
        mut self,
        rules: impl IntoIterator<Item = S>,
    ) -> Result<Self, crate::core::rules::RuleError> {
        let mut parsed: Vec<crate::core::rules::Rule> = self.rules.to_vec();
        for text in rules {
            let rule: crate::core::rules::Rule = text.as_ref().parse()?;
            if !parsed.iter().any(|r| r.text() == rule.text()) {
                parsed.push(rule);
            }
        }
        self.rules = parsed.into();
        Ok(self)
    }

    /// The rules this binding states.
    pub fn rules(&self) -> &[crate::core::rules::Rule] {
        &self.rules
    }

    /// The same binding, asking `stop` before every step that could lead to a send.
    pub fn with_stop(mut self, stop: StopCheck) -> Self {
        self.stop = Some(stop);
        self
    }

    /// The same binding, also asking `fence` between a dispatch this attempt journaled and its
    /// send: `true` stops the attempt there, withdraws the dispatch unsent (its window closes at
    /// once) and leaves the effect in flight, for the next attempt to recover as after a crash at
    /// that point (with the lease and the premises read again), without waiting out the claim.
    /// Only where another attempt is sure to follow — a gate server whose caller's
    /// connection broke, or that is draining; a cancellation that ends the effect's attempts for
    /// good (a workflow cancelled) must not fence, or the effect stays in flight until someone
    /// recovers it. At tier 3 too: the withdrawal says nothing left, so the next attempt sends
    /// or refuses, never marks the effect ambiguous.
    pub fn with_fence(mut self, fence: StopCheck) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Whether the fence says to stop between this attempt's dispatch and its send.
    fn fenced(&self) -> bool {
        self.fence.as_ref().is_some_and(|fence| fence())
    }

    /// `Some` when the attempt was cancelled: it stops here, before anything is sent on it.
    fn cancelled(&self) -> Option<Step> {
        self.stop.as_ref().filter(|stop| stop()).map(|_| {
            Step::Done(Outcome::Superseded {
                reason: "the attempt was cancelled; nothing was sent on it".into(),
            })
        })
    }

    /// The same binding, naming another attempt in the claims it takes.
    pub fn with_attempt(mut self, attempt: impl Into<String>) -> Self {
        self.gate = self.gate.with_attempt(attempt);
        self
    }

    /// The same binding, acting for `principal` ([`Gate::with_caller`]).
    pub fn with_caller(mut self, principal: impl Into<String>) -> Self {
        self.gate = self.gate.with_caller(principal);
        self
    }

    /// The journal this binding writes.
    pub fn journal(&self) -> &Arc<dyn Journal> {
        self.gate.journal()
    }

    /// The target this gate sends to.
    pub fn target(&self) -> &Arc<dyn Target> {
        &self.target
    }

    /// The tier this binding acts on: the target's own, unless the target was seen applying an
    /// effect twice under one key (by this gate, or in the journal when it was bound); then no
    /// better than tier 2 (lookups, no trust in dedupe), whatever it claims.
    pub fn tier(&self) -> Tier {
        let demoted = self
            .gate
            .demoted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(self.target.name());
        if demoted {
            self.target.tier().max(Tier::Two)
        } else {
            self.target.tier()
        }
    }

    /// The outcome of a resolution; one that shows the target applied an effect twice demotes
    /// the target for this gate (and, through the journal, for gates bound after it).
    pub(super) fn outcome_of(&self, res: Resolution, replayed: bool) -> Outcome {
        if let Resolution::AppliedTwice(a) = &res {
            tracing::error!(
                target_name = self.target.name(),
                found = a.found.len(),
                "the target applied an effect twice under one key; treating it as tier 2 from now on"
            );
            self.gate
                .demoted
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(self.target.name().to_owned());
        }
        outcome_of(res, replayed)
    }

    /// Make a decision: the effect with its payload in the target's canonical form
    /// ([`Target::canonical`]) and its premises read now, on that form, by this gate's premise
    /// reader, which must satisfy the binding's rules ([`Bound::with_rules`]).
    pub fn decide(
        &self,
        key: EffectKey,
        payload: &impl serde::Serialize,
        lease: impl Into<String>,
    ) -> Result<Effect, DecideError> {
        let mut effect = Effect::new(key, payload, lease)?;
        effect.payload = self.target.canonical(&effect.payload)?;
        let premises = self.premises.read(&effect.key, &effect.payload)?;
        let broken: Vec<_> = self
            .rules
            .iter()
            .filter_map(|r| r.judge(&premises, &effect.payload).err())
            .collect();
        if !broken.is_empty() {
            return Err(DecideError::Rules { broken });
        }
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

    #[cfg(feature = "test-hooks")]
    fn fault(&self, point: FaultPoint, key: &EffectKey) -> Result<(), GateError> {
        self.gate
            .faults
            .at(point, key.as_str())
            .map_err(GateError::Crashed)
    }

    #[cfg(not(feature = "test-hooks"))]
    #[allow(clippy::unused_self, clippy::unnecessary_wraps)]
    #[inline(always)]
    fn fault(&self, _point: FaultPoint, _key: &EffectKey) -> Result<(), GateError> {
        Ok(())
    }

    /// A claim for this gate's holder, starting now: its send is cut off after the send timeout,
    /// and its deadline adds the settle margin for bytes still in flight. Stamp it with
    /// [`Bound::written_now`] inside the write transaction that carries it.
    pub(super) fn holding(&self) -> (Holding, Instant) {
        let now = self.now();
        let deadline_ms = now
            .saturating_add(ms(self.gate.cfg.send_timeout))
            .saturating_add(ms(self.gate.cfg.settle));
        (
            Holding {
                holder: self.gate.cfg.holder.clone(),
                deadline_ms,
                now_ms: now,
                max_read_age_ms: ms(self.gate.cfg.max_premise_age()),
            },
            Instant::now(),
        )
    }

    /// `holding` as of the clock read now, inside the write transaction that carries it: the
    /// moment a premise read's age is judged at.
    fn written_now(&self, holding: &Holding) -> Holding {
        Holding {
            now_ms: self.now(),
            ..holding.clone()
        }
    }

    /// Why a dispatch on `premises` was not written, when it was for their age: the read
    /// itself took longer than the bound (no retry can help until the bound or the read
    /// changes), or the attempt stalled after it (read again at once).
    fn stale_read(&self, premises: &checks::PremiseCheck) -> Option<Outcome> {
        let bound = self.gate.cfg.max_premise_age();
        (premises.took() > bound).then(|| Outcome::Retry {
            retry_after: self.gate.cfg.retry_after,
            reason: format!(
                "reading the premises took {} ms, longer than the {} ms a read may age before \
                 the dispatch standing on it is written: nothing was sent; make the premise read \
                 faster or raise GateConfig::premise_max_age",
                premises.took().as_millis(),
                bound.as_millis()
            ),
        })
    }

    pub(super) fn hold(&self, key: &EffectKey, token: u64) -> Result<Option<HeldLock>, GateError> {
        self.gate
            .locks
            .try_hold(key.as_str(), token)
            .map_err(|e| self.lock_err(e))
    }

    /// Give back the liveness lock held for `key`/`token` once its answer is journaled; for a
    /// key whose effect `state` shows resolved, its locks are forgotten with it.
    pub(super) fn let_go(&self, key: &EffectKey, token: u64, lock: HeldLock, state: &EffectState) {
        if matches!(state, EffectState::Resolved { .. }) {
            self.gate.locks.release_resolved(lock, key.as_str(), token);
        } else {
            drop(lock);
        }
    }

    pub(super) fn lock_err(&self, source: std::io::Error) -> GateError {
        GateError::Locks {
            place: self.gate.locks.place(),
            source,
        }
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
        Resolution::AppliedTwice(a) => Outcome::AppliedTwice(a),
    }
}
