//! The activity body: `gated()` and the failures a workflow matches on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use temporalio_common::error::ApplicationFailure;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use interlock::core::{Change, Premises, RefusalCode, Repair, Status, Via};
use interlock::effect::{Effect, EffectKey};
use interlock::gate::{Bound, GateError, Outcome};
use interlock::journal::JournalError;

/// Failure type of a refusal (non-retryable).
pub const REFUSED: &str = "InterlockRefused";
/// Failure type of an ambiguous effect (non-retryable): a person must look.
pub const AMBIGUOUS: &str = "InterlockAmbiguous";
/// Failure type of an effect the target applied more than once under one key (non-retryable):
/// a person must reverse the extra ones, named in the message.
pub const APPLIED_TWICE: &str = "InterlockAppliedTwice";
/// Failure type of a definite failure at the target (non-retryable).
pub const FAILED: &str = "InterlockFailed";
/// Failure type while the effect is in flight elsewhere or a source is unreachable (retryable).
pub const IN_FLIGHT: &str = "InterlockInFlight";
/// Failure type of a journal or configuration problem (retryable only when transient).
pub const JOURNAL: &str = "InterlockJournal";

/// What the activity is asked to do: the decision, with an optional caller-fixed key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GatedEffect {
    /// A caller-fixed key (an approved request id). `None`: derived from workflow id, run id and
    /// activity id.
    pub key: Option<String>,
    /// The effect's arguments.
    pub payload: Value,
    /// Premises as decided (read by code at decision time).
    pub decided: Premises,
    /// The lease it runs under.
    pub lease: String,
    /// What the effect is part of, for budgets that count by it (`label.NAME` in a budget's
    /// scope); `workflow_type`, `activity_type` and `task_queue` are set from the activity,
    /// whatever the workflow passed under those names.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

impl GatedEffect {
    /// The effect `payload` under the caller-fixed `key` (an approved request id) and `lease`,
    /// with no premises decided yet and no labels.
    pub fn new(key: impl Into<String>, payload: Value, lease: impl Into<String>) -> Self {
        Self {
            key: Some(key.into()),
            payload,
            decided: Premises::default(),
            lease: lease.into(),
            labels: std::collections::BTreeMap::new(),
        }
    }

    /// The same effect, decided on `premises`.
    #[must_use]
    pub fn with_decided(mut self, premises: Premises) -> Self {
        self.decided = premises;
        self
    }

    /// The same effect, labelled `name = value` for budgets that count by label.
    #[must_use]
    pub fn with_label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(name.into(), value.into());
        self
    }
}

/// What a committed effect returns to the workflow.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GatedReceipt {
    /// The effect's key.
    pub key: String,
    /// How it is known to have happened once.
    pub via: Via,
    /// The target's answer, as journaled.
    pub result: Value,
    /// True when this attempt answered from the journal without sending.
    pub replayed: bool,
    /// The attempt that answered.
    pub attempt: u32,
}

/// Typed details of a non-retryable Interlock failure; the workflow matches on `code`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FailureDetails {
    /// The effect's key.
    pub key: String,
    /// How the effect ended: `REFUSED`, `FAILED`, `AMBIGUOUS` or `APPLIED_TWICE`.
    pub outcome: Status,
    /// Why it was refused (`REFUSED`).
    pub refusal: Option<RefusalCode>,
    /// The target's error code (`FAILED`).
    pub target_code: Option<String>,
    /// For a person.
    pub reason: String,
    /// Premises that moved.
    pub changes: Vec<Change>,
    /// Suggested new decisions (never applied automatically).
    pub repairs: Vec<Repair>,
}

/// The key an activity's effect runs under.
pub fn key_for(ctx: &ActivityContext, fixed: Option<&str>) -> Result<EffectKey, ActivityError> {
    if let Some(k) = fixed {
        return EffectKey::fixed(k).map_err(|e| {
            Failure {
                type_name: REFUSED,
                message: e.to_string(),
                retryable: false,
                next_retry_delay: None,
                details: None,
            }
            .into()
        });
    }
    // The run is part of the key: after continue-as-new, activity ids start again, and the new
    // run's first refund is another effect. An effect that must stay one across workflow
    // retries (a new run of the same request) needs a caller-fixed key: the approved request id.
    let info = ctx.info();
    let workflow = info.workflow_id.as_deref().unwrap_or("standalone");
    let run = info.workflow_run_id.as_deref().unwrap_or("");
    Ok(EffectKey::derive(&[
        workflow,
        run,
        info.activity_id.as_str(),
    ]))
}

/// A failure, before it becomes the SDK's `ApplicationFailure`.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// Stable type name the workflow (and `non_retryable_error_types`) can match.
    pub type_name: &'static str,
    /// For a person.
    pub message: String,
    /// Whether Temporal should try again.
    pub retryable: bool,
    /// When to try again, where the gate knows.
    pub next_retry_delay: Option<Duration>,
    /// Typed details for refusals, ambiguities and failures.
    pub details: Option<Box<FailureDetails>>,
}

impl From<Failure> for ActivityError {
    fn from(f: Failure) -> Self {
        let b = ApplicationFailure::builder(f.message)
            .type_name(f.type_name.to_owned())
            .non_retryable(!f.retryable)
            .maybe_next_retry_delay(f.next_retry_delay);
        match f.details {
            Some(d) => b.details(*d).build().into(),
            None => b.build().into(),
        }
    }
}

/// How an attempt's result reaches the workflow: a receipt, or a typed failure. Pure, so the
/// mapping is tested without a Temporal server.
pub fn verdict(
    key: &EffectKey,
    attempt: u32,
    result: Result<Outcome, GateError>,
) -> Result<GatedReceipt, Failure> {
    let fail = |type_name, message: String, retryable, delay, details| Failure {
        type_name,
        message,
        retryable,
        next_retry_delay: delay,
        details,
    };
    let details = |outcome: Status, reason: String, changes, repairs| FailureDetails {
        key: key.to_string(),
        outcome,
        refusal: None,
        target_code: None,
        reason,
        changes,
        repairs,
    };
    let outcome = match result {
        Ok(o) => o,
        // Nothing is sent without the journal; a busy or full disk may recover, a damaged or
        // foreign journal will not by itself.
        Err(GateError::Journal(e)) => {
            let retryable = e.is_transient() || matches!(e, JournalError::Storage { .. });
            return Err(fail(
                JOURNAL,
                e.to_string(),
                retryable,
                retryable.then(|| Duration::from_secs(1)),
                None,
            ));
        }
        // A lock directory that cannot be used (full disk, permissions) may be mended while the
        // effect waits; nothing was sent.
        Err(e @ GateError::Locks { .. }) => {
            return Err(fail(
                JOURNAL,
                e.to_string(),
                true,
                Some(Duration::from_secs(1)),
                None,
            ));
        }
        Err(e) => return Err(fail(JOURNAL, e.to_string(), false, None, None)),
    };
    match outcome {
        Outcome::Committed {
            via,
            result,
            replayed,
        } => Ok(GatedReceipt {
            key: key.to_string(),
            via,
            result,
            replayed,
            attempt,
        }),
        Outcome::Refused(r) => Err(fail(
            REFUSED,
            format!("{}: {}", r.code, r.reason),
            false,
            None,
            Some(Box::new(FailureDetails {
                refusal: Some(r.code),
                ..details(Status::Refused, r.reason, r.changes, r.repairs)
            })),
        )),
        Outcome::Ambiguous(a) => Err(fail(
            AMBIGUOUS,
            a.reason.clone(),
            false,
            None,
            Some(Box::new(details(
                Status::Ambiguous,
                a.reason,
                a.changes,
                Vec::new(),
            ))),
        )),
        Outcome::AppliedTwice(a) => {
            let ids: Vec<String> = a
                .found
                .iter()
                .map(|v| {
                    v.get("id")
                        .map_or_else(|| v.to_string(), ToString::to_string)
                })
                .collect();
            let message = format!("{} (found: {})", a.reason, ids.join(", "));
            Err(fail(
                APPLIED_TWICE,
                message.clone(),
                false,
                None,
                Some(Box::new(details(
                    Status::AppliedTwice,
                    message,
                    Vec::new(),
                    Vec::new(),
                ))),
            ))
        }
        Outcome::Failed(f) => Err(fail(
            FAILED,
            format!("{}: {}", f.code, f.message),
            false,
            None,
            Some(Box::new(FailureDetails {
                target_code: Some(f.code),
                ..details(Status::Failed, f.message, Vec::new(), Vec::new())
            })),
        )),
        Outcome::InFlight {
            retry_after,
            reason,
        }
        | Outcome::Retry {
            retry_after,
            reason,
        } => Err(fail(IN_FLIGHT, reason, true, Some(retry_after), None)),
        Outcome::Superseded { reason } => Err(fail(
            IN_FLIGHT,
            reason,
            true,
            Some(Duration::from_millis(200)),
            None,
        )),
        // An outcome a newer `interlock` added: stop the workflow's retries and let a person look,
        // rather than guess whether it is final.
        other => Err(fail(
            JOURNAL,
            format!(
                "the gate answered {}, which this version of interlock-temporal does not know: \
                 upgrade interlock-temporal to match interlock",
                other.label()
            ),
            false,
            None,
            None,
        )),
    }
}

/// Run blocking work on tokio's blocking pool while this task heartbeats (every quarter of the
/// activity's heartbeat timeout, or every second without one), so a dead worker is noticed by the
/// heartbeat timeout while a live one is never timed out mid-send. The work cannot be cancelled
/// half-way: heartbeats only prove the worker lives.
pub async fn with_heartbeats<T: Send + 'static>(
    ctx: &ActivityContext,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    heartbeat_while(ctx, &AtomicBool::new(false), work).await
}

/// [`with_heartbeats`], also raising `cancelled` when Temporal cancels the activity (it learns
/// of a cancellation through a heartbeat's answer), for the work to read at its next step.
async fn heartbeat_while<T: Send + 'static>(
    ctx: &ActivityContext,
    cancelled: &AtomicBool,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let attempt = ctx.info().attempt;
    let every = ctx
        .info()
        .heartbeat_timeout
        .filter(|t| !t.is_zero())
        .map_or(Duration::from_secs(1), |t| t / 4);
    let mut task = tokio::task::spawn_blocking(work);
    let _ = ctx.record_heartbeat(attempt).await;
    let mut told = false;
    loop {
        tokio::select! {
            res = &mut task => return res,
            _ = ctx.cancelled(), if !told => {
                cancelled.store(true, Ordering::SeqCst);
                told = true;
            }
            _ = tokio::time::sleep(every) => { let _ = ctx.record_heartbeat(attempt).await; }
        }
    }
}

/// Run one attempt of `effect` through `bound` as the body of the activity.
pub async fn gated(
    ctx: &ActivityContext,
    bound: &Bound,
    effect: GatedEffect,
) -> Result<GatedReceipt, ActivityError> {
    let key = key_for(ctx, effect.key.as_deref())?;
    let attempt = ctx.info().attempt;
    let mut labels = effect.labels;
    let info = ctx.info();
    for (name, value) in [
        ("workflow_type", info.workflow_type.clone()),
        ("activity_type", Some(info.activity_type.clone())),
        ("task_queue", Some(info.task_queue.clone())),
    ] {
        // The activity's own word, never the caller's: a budget scoped on the workflow type
        // must not be escaped by a workflow that names another.
        if let Some(v) = value {
            labels.insert(name.to_owned(), v);
        }
    }
    let effect = Effect {
        key: key.clone(),
        payload: effect.payload,
        decided: effect.decided,
        lease: effect.lease,
        labels,
    };
    // Claims name the Temporal attempt that holds them, so a journal shows which attempt sent.
    let info = ctx.info();
    // A cancelled activity stops before its next dispatch, takeover or resend; a dispatch it
    // journaled is sent and a send already on its way is seen through, and the answer recorded. It
    // sets no fence (`Bound::with_fence`): a cancellation may end the effect's attempts for good.
    if ctx.is_cancelled() {
        return Err(ActivityError::cancelled());
    }
    let cancelled = Arc::new(AtomicBool::new(false));
    let seen = cancelled.clone();
    let gate = bound
        .clone()
        .with_attempt(format!(
            "{}/{}#{attempt}",
            info.workflow_id.as_deref().unwrap_or("standalone"),
            info.activity_id
        ))
        .with_stop(Arc::new(move || seen.load(Ordering::SeqCst)));
    // The attempt's spans nest under the activity's, on the blocking thread the gate runs on.
    let span = tracing::info_span!(
        "interlock.activity",
        workflow_id = info.workflow_id.as_deref().unwrap_or("standalone"),
        run_id = info.workflow_run_id.as_deref().unwrap_or(""),
        activity_id = info.activity_id.as_str(),
        activity_type = info.activity_type.as_str(),
        attempt,
        key = %key,
    );
    let joined = heartbeat_while(ctx, &cancelled, move || {
        span.in_scope(|| gate.submit(&effect))
    })
    .await;
    let result = joined.map_err(|e| Failure {
        type_name: JOURNAL,
        message: format!("the gate's task died: {e}"),
        retryable: true,
        next_retry_delay: Some(Duration::from_secs(1)),
        details: None,
    })?;
    tracing::info!(key = %key, attempt, outcome = ?result.as_ref().map(Outcome::label), "gated attempt");
    // A final outcome stands even if the cancellation came meanwhile: it is what happened.
    let settled = matches!(&result, Ok(o) if o.is_final());
    if cancelled.load(Ordering::SeqCst) && !settled {
        return Err(ActivityError::cancelled());
    }
    Ok(verdict(&key, attempt, result)?)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use interlock::core::{Ambiguous, Refused};

    fn key() -> EffectKey {
        EffectKey::derive(&["wf", "refund"])
    }

    #[test]
    fn refusals_ambiguity_and_failures_stop_retries_with_typed_details() {
        let refused = Outcome::Refused(Refused {
            code: RefusalCode::StalePremiseAtRecovery,
            reason: "moved".into(),
            changes: vec![Change {
                field: "refunded_by_others".into(),
                was: json!(0),
                now: json!(2000),
            }],
            repairs: vec![],
            is_final: true,
            payload_hash: "h".into(),
        });
        let f = verdict(&key(), 2, Ok(refused)).unwrap_err();
        assert_eq!((f.type_name, f.retryable), (REFUSED, false));
        let d = f.details.unwrap();
        assert_eq!(d.outcome, Status::Refused);
        assert_eq!(d.refusal, Some(RefusalCode::StalePremiseAtRecovery));
        assert_eq!(d.changes.len(), 1);
        let amb = Outcome::Ambiguous(Ambiguous {
            reason: "tier 3".into(),
            changes: vec![],
        });
        assert_eq!(
            verdict(&key(), 2, Ok(amb)).unwrap_err().type_name,
            AMBIGUOUS
        );
        let twice = Outcome::AppliedTwice(interlock::core::AppliedTwice {
            token: 2,
            found: vec![json!({"id": "re_1"}), json!({"id": "re_2"})],
            reason: "two under one key".into(),
        });
        let f = verdict(&key(), 2, Ok(twice)).unwrap_err();
        assert_eq!((f.type_name, f.retryable), (APPLIED_TWICE, false));
        assert!(
            f.message.contains("re_1") && f.message.contains("re_2"),
            "{}",
            f.message
        );
    }

    #[test]
    fn in_flight_elsewhere_is_retryable_with_the_gates_delay() {
        let o = Outcome::InFlight {
            retry_after: Duration::from_millis(700),
            reason: "held".into(),
        };
        let f = verdict(&key(), 1, Ok(o)).unwrap_err();
        assert!(f.retryable);
        assert_eq!(f.next_retry_delay, Some(Duration::from_millis(700)));
    }

    #[test]
    fn an_unwritable_journal_is_retried_and_a_damaged_one_is_not() {
        let storage = GateError::Journal(JournalError::Storage {
            path: "j".into(),
            what: "readonly".into(),
        });
        assert!(verdict(&key(), 1, Err(storage)).unwrap_err().retryable);
        let corrupt = GateError::Journal(JournalError::Corrupt {
            path: "j".into(),
            place: "p".into(),
            what: "w".into(),
        });
        assert!(!verdict(&key(), 1, Err(corrupt)).unwrap_err().retryable);
    }

    #[test]
    fn an_unusable_lock_directory_is_retried_and_another_target_is_not() {
        let locks = GateError::Locks {
            place: "/x".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert!(verdict(&key(), 1, Err(locks)).unwrap_err().retryable);
        let other = GateError::TargetMismatch {
            key: "k".into(),
            journaled: "stripe-refunds".into(),
            bound: "sim-payments".into(),
        };
        assert!(!verdict(&key(), 1, Err(other)).unwrap_err().retryable);
    }

    #[test]
    fn a_commit_is_a_receipt_naming_how_it_is_known() {
        let o = Outcome::Committed {
            via: Via::IdempotentResend,
            result: json!({"id": "re_1"}),
            replayed: false,
        };
        let r = verdict(&key(), 3, Ok(o)).unwrap();
        assert_eq!((r.via, r.attempt), (Via::IdempotentResend, 3));
    }
}
