//! `gated()`: the whole body of a Temporal activity. Every attempt Temporal makes — the first, a
//! retry after a worker died, an attempt that overlaps a stalled one — passes through the journal,
//! the lease check and the premise check. The blocking gate runs on tokio's blocking pool while
//! this task heartbeats, so a dead worker is noticed by the heartbeat timeout within seconds.
//!
//! Outcomes map to what a workflow can act on: a receipt for a committed effect; a non-retryable
//! `ApplicationFailure` with a stable type name and typed details for a refusal, an ambiguity or
//! a failure; a retryable failure with a next-retry delay while the effect is in flight elsewhere.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use temporalio_common::error::ApplicationFailure;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use crate::core::{Change, Premises, RefusalCode, Repair, Via};
use crate::effect::{Effect, EffectKey};
use crate::gate::{Bound, GateError, Outcome};

/// Failure type of a refusal (non-retryable).
pub const REFUSED: &str = "InterlockRefused";
/// Failure type of an ambiguous effect (non-retryable): a person must look.
pub const AMBIGUOUS: &str = "InterlockAmbiguous";
/// Failure type of a definite failure at the target (non-retryable).
pub const FAILED: &str = "InterlockFailed";
/// Failure type while the effect is in flight elsewhere or a source is unreachable (retryable).
pub const IN_FLIGHT: &str = "InterlockInFlight";
/// Failure type of a journal or configuration problem (retryable only when transient).
pub const JOURNAL: &str = "InterlockJournal";

/// What the activity is asked to do: the decision, with an optional caller-fixed key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GatedEffect {
    /// A caller-fixed key (an approved request id). `None`: derived from workflow id + activity id.
    pub key: Option<String>,
    /// The effect's arguments.
    pub payload: Value,
    /// Premises as decided (read by code at decision time).
    pub decided: Premises,
    /// The lease it runs under.
    pub lease: String,
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
    /// `REFUSED`, `AMBIGUOUS` or `FAILED`.
    pub outcome: String,
    /// Refusal code, or the target's error code for `FAILED`.
    pub code: Option<String>,
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
        return EffectKey::fixed(k).map_err(|e| non_retryable(REFUSED, e.to_string(), None));
    }
    let info = ctx.info();
    let workflow = info.workflow_id.as_deref().unwrap_or("standalone");
    Ok(EffectKey::derive(&[workflow, info.activity_id.as_str()]))
}

fn non_retryable(kind: &str, message: String, details: Option<FailureDetails>) -> ActivityError {
    let b = ApplicationFailure::builder(message)
        .type_name(kind.to_owned())
        .non_retryable(true);
    match details {
        Some(d) => b.details(d).build().into(),
        None => b.build().into(),
    }
}

fn retryable(kind: &str, message: String, after: Duration) -> ActivityError {
    ApplicationFailure::builder(message)
        .type_name(kind.to_owned())
        .next_retry_delay(after)
        .build()
        .into()
}

/// Run one attempt of `effect` through `bound` as the body of the activity.
pub async fn gated(
    ctx: &ActivityContext,
    bound: &Bound,
    effect: GatedEffect,
) -> Result<GatedReceipt, ActivityError> {
    let key = key_for(ctx, effect.key.as_deref())?;
    let attempt = ctx.info().attempt;
    let effect = Effect {
        key: key.clone(),
        payload: effect.payload,
        decided: effect.decided,
        lease: effect.lease,
    };
    let heartbeat_every = ctx
        .info()
        .heartbeat_timeout
        .filter(|t| !t.is_zero())
        .map_or(Duration::from_secs(1), |t| t / 4);
    let gate = bound.clone();
    let mut work = tokio::task::spawn_blocking(move || gate.submit(&effect));
    let _ = ctx.record_heartbeat(attempt).await;
    let joined = loop {
        tokio::select! {
            res = &mut work => break res,
            _ = tokio::time::sleep(heartbeat_every) => {
                // The send cannot be cancelled half-way; heartbeats only prove this worker lives.
                let _ = ctx.record_heartbeat(attempt).await;
            }
        }
    };
    let result = joined.map_err(|e| {
        retryable(
            JOURNAL,
            format!("the gate's task died: {e}"),
            Duration::from_secs(1),
        )
    })?;
    tracing::info!(key = %key, attempt, outcome = ?result.as_ref().map(Outcome::label), "gated attempt");
    let outcome = match result {
        Ok(o) => o,
        Err(GateError::Journal(e)) if e.is_transient() => {
            return Err(retryable(
                JOURNAL,
                e.to_string(),
                Duration::from_millis(500),
            ));
        }
        Err(e) => return Err(non_retryable(JOURNAL, e.to_string(), None)),
    };
    let details =
        |outcome: &str, code: Option<String>, reason: String, changes, repairs| FailureDetails {
            key: key.to_string(),
            outcome: outcome.into(),
            code,
            reason,
            changes,
            repairs,
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
        Outcome::Refused(r) => Err(non_retryable(
            REFUSED,
            format!("{}: {}", r.code, r.reason),
            Some(details(
                "REFUSED",
                Some(code_str(r.code)),
                r.reason,
                r.changes,
                r.repairs,
            )),
        )),
        Outcome::Ambiguous(a) => Err(non_retryable(
            AMBIGUOUS,
            a.reason.clone(),
            Some(details("AMBIGUOUS", None, a.reason, a.changes, Vec::new())),
        )),
        Outcome::Failed(f) => Err(non_retryable(
            FAILED,
            format!("{}: {}", f.code, f.message),
            Some(details(
                "FAILED",
                Some(f.code),
                f.message,
                Vec::new(),
                Vec::new(),
            )),
        )),
        Outcome::InFlight {
            retry_after,
            reason,
        }
        | Outcome::Retry {
            retry_after,
            reason,
        } => Err(retryable(IN_FLIGHT, reason, retry_after)),
        Outcome::Superseded { reason } => {
            Err(retryable(IN_FLIGHT, reason, Duration::from_millis(200)))
        }
    }
}

fn code_str(c: RefusalCode) -> String {
    c.as_str().to_owned()
}
