//! The approval workflow's activities: assess a request against the policy, grant a rule's lease,
//! journal a route step, and check and grant a person's signed approval. Each is idempotent, so a
//! worker killed mid-activity and the retry that follows record nothing twice.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::sync::Arc;

use interlock::approval::{Against, Assessment, Route, RouteKind, verdict};
use interlock::core::{LeaseVerdict, Status};
use interlock::lease::LeaseError;
use interlock::premise::PremiseReader;
use interlock::{EffectKey, Grant};
use temporalio_common::error::ApplicationFailure;
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};

use super::{Assessed, Offer, Opened, RouteArgs};
use crate::activities::Deps;
use crate::model::{Decision, RefundRequest};

/// How long a rule's lease lives: long enough for the refund's retries.
const RULE_LEASE_MS: i64 = 3_600_000;

/// The approval activities.
pub struct ApprovalActivities {
    /// Shared dependencies.
    pub deps: Arc<Deps>,
}

/// The rules' lease for a request, or who holds the request instead.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Clearance {
    /// Granted as this lease.
    Granted(String),
    /// A person holds the request (another run routed it): the rules do not clear it.
    Held {
        /// The workflow that routed it.
        workflow_id: String,
    },
}

/// A person's approval checked and granted, or why not.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Acceptance {
    /// Granted as this lease.
    Granted(String),
    /// Turned down, with why.
    Rejected(String),
}

/// What `accept` checks an approval against: the decision the workflow will send.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct AcceptArgs {
    /// The approval.
    pub offer: Offer,
    /// The decision it must cover exactly.
    pub decision: Decision,
}

fn fatal(message: impl Into<String>) -> ActivityError {
    ApplicationFailure::builder(message.into())
        .type_name("ApprovalMisconfigured".to_owned())
        .non_retryable(true)
        .build()
        .into()
}

fn retry(message: impl std::fmt::Display) -> ActivityError {
    ApplicationFailure::new(message.to_string()).into()
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ActivityError> + Send + 'static,
) -> Result<T, ActivityError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| retry(format!("worker task died: {e}")))?
}

#[activities]
impl ApprovalActivities {
    /// Read the premises and ask the policy.
    #[activity(name = "assess")]
    pub async fn assess(
        self: Arc<Self>,
        _ctx: ActivityContext,
        request: RefundRequest,
    ) -> Result<Assessed, ActivityError> {
        let deps = self.deps.clone();
        blocking(move || {
            let key =
                EffectKey::fixed(request.request_id.clone()).map_err(|e| fatal(e.to_string()))?;
            let premises = deps
                .premises()
                .read(&key, &request.payload())
                .map_err(retry)?;
            let assessment = deps.policy().assess(&request.payload(), &premises);
            let chain: Vec<(String, i64)> = deps
                .approvers()
                .map_err(retry)?
                .map(|d| {
                    d.chain
                        .iter()
                        .map(|l| (l.group.clone(), l.sla_ms))
                        .collect()
                })
                .unwrap_or_default();
            if matches!(assessment, Assessment::NeedsJudgment { .. }) && chain.is_empty() {
                return Err(fatal(
                    "the policy routes this request to a person, but the worker has no approver \
                     directory (INTERLOCK_APPROVERS)",
                ));
            }
            Ok(Assessed {
                decision: Decision { request, premises },
                assessment,
                chain,
            })
        })
        .await
    }

    /// Grant the lease a request the policy cleared runs under: the rules' own, bound to this
    /// request, scoped to the payment and capped at the amount — unless a person holds the
    /// request (another run routed it; the gate would refuse the rules' lease on it anyway).
    #[activity(name = "clear")]
    pub async fn clear(
        self: Arc<Self>,
        ctx: ActivityContext,
        decision: Decision,
    ) -> Result<Clearance, ActivityError> {
        let deps = self.deps.clone();
        // One lease per run: a later run never inherits one that lapsed meanwhile.
        let run = ctx.info().workflow_run_id.clone().unwrap_or_default();
        blocking(move || {
            let r = &decision.request;
            let routes = deps.journal().routes(&r.request_id).map_err(retry)?;
            if let Some(first) = routes.first() {
                return Ok(Clearance::Held {
                    workflow_id: first.step.detail["workflow_id"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                });
            }
            let id = format!("rules-{}-{run}", r.request_id);
            let refunded = r.refunded();
            let field = if r.payment.starts_with("ch_") {
                "charge"
            } else {
                "payment_intent"
            };
            let now = deps.now_ms();
            let grant = Grant::new(&id, "rules", now)
                .scope(field, refunded.id())
                .cap("amount", r.amount)
                .for_request(&r.request_id)
                .expires(now + RULE_LEASE_MS);
            match deps.journal().grant_lease(&grant) {
                Ok(()) => Ok(Clearance::Granted(id)),
                // A retry after the grant committed.
                Err(LeaseError::Invalid(_))
                    if deps
                        .journal()
                        .leases()
                        .map_err(retry)?
                        .iter()
                        .any(|g| g.id == id && g.approver == "rules") =>
                {
                    Ok(Clearance::Granted(id))
                }
                Err(e) => Err(retry(e)),
            }
        })
        .await
    }

    /// Journal a route step (routed, escalated, returned as a repair).
    #[activity(name = "route")]
    pub async fn route(
        self: Arc<Self>,
        _ctx: ActivityContext,
        args: RouteArgs,
    ) -> Result<Route, ActivityError> {
        let deps = self.deps.clone();
        blocking(move || {
            deps.journal()
                .route(&args.request_id, &args.step)
                .map_err(|e| match e {
                    LeaseError::Invalid(m) => fatal(m),
                    other => retry(other),
                })
        })
        .await
    }

    /// Open a request's route — routed to its first level, reopened as a repair, or closed by a
    /// rule — unless the request is another workflow run's: routed by it (a second delivery, or
    /// a later run under the same workflow id), or already decided with an effect in the
    /// journal. The journal decides between two runs opening at once: the step journaled first
    /// holds the request, and the other is answered with it.
    #[activity(name = "open")]
    pub async fn open(
        self: Arc<Self>,
        _ctx: ActivityContext,
        args: RouteArgs,
    ) -> Result<Opened, ActivityError> {
        let deps = self.deps.clone();
        blocking(move || {
            let run =
                |v: &serde_json::Value| (v.get("workflow_id").cloned(), v.get("run_id").cloned());
            let ours = run(&args.step.detail);
            let holder = |r: &Route| {
                let theirs = run(&r.step.detail);
                (theirs != ours).then(|| Opened::Duplicate {
                    workflow_id: theirs
                        .0
                        .as_ref()
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                })
            };
            let journal = deps.journal();
            let routes = journal.routes(&args.request_id).map_err(retry)?;
            let key =
                EffectKey::fixed(args.request_id.clone()).map_err(|e| fatal(e.to_string()))?;
            let status = journal.state(&key).map_err(retry)?.status();
            if let (Some(first), Some(head)) = (routes.first(), routes.last()) {
                if let Some(dup) = holder(first) {
                    // Only one run of a workflow id is open at a time: a route of an earlier
                    // run of this workflow that nobody decided is this run's to carry on.
                    let earlier_run = run(&first.step.detail).0 == ours.0;
                    let undecided = head.step.kind != RouteKind::Closed && status.is_none();
                    if earlier_run && undecided && args.step.kind == RouteKind::Routed {
                        return Ok(Opened::Adopted(head.clone()));
                    }
                    return Ok(dup);
                }
            } else if let Some(s) = status {
                // No route, but an effect: the rules cleared it in an earlier run.
                return Ok(if matches!(s, Status::Proposed | Status::InFlight) {
                    Opened::Unfinished
                } else {
                    Opened::Duplicate {
                        workflow_id: String::new(),
                    }
                });
            }
            match journal.route(&args.request_id, &args.step) {
                Ok(route) => Ok(holder(&route).unwrap_or(Opened::Routed(route))),
                // Another run's step won the journal first: re-read and name it.
                Err(LeaseError::Invalid(m)) => {
                    let now = journal.routes(&args.request_id).map_err(retry)?;
                    now.first().and_then(holder).ok_or_else(|| fatal(m))
                }
                Err(other) => Err(retry(other)),
            }
        })
        .await
    }

    /// Check a person's approval as the gate will at the send — signature, membership, expiry,
    /// the exact payload and facts, the group holding the request — and grant it.
    #[activity(name = "accept")]
    pub async fn accept(
        self: Arc<Self>,
        _ctx: ActivityContext,
        args: AcceptArgs,
    ) -> Result<Acceptance, ActivityError> {
        let deps = self.deps.clone();
        blocking(move || {
            let Some(dir) = deps.approvers().map_err(retry)? else {
                return Err(fatal("no approver directory (INTERLOCK_APPROVERS)"));
            };
            let journal = deps.journal();
            let d = &args.decision;
            let grant = Grant::approved(args.offer.clone(), deps.now_ms());
            let routes = journal.routes(&d.request.request_id).map_err(retry)?;
            let seen = verdict(
                &grant.id,
                Some(&grant),
                &Against {
                    directory: Some(&dir),
                    key: &d.request.request_id,
                    proposer: None,
                    target: None,
                    payload: &d.request.payload(),
                    premises: &d.premises,
                    route: routes.last(),
                    now_ms: deps.now_ms(),
                },
            );
            if let LeaseVerdict::Dead { reason } = seen {
                return Ok(Acceptance::Rejected(reason));
            }
            match journal.grant_lease(&grant) {
                Ok(()) => Ok(Acceptance::Granted(grant.id)),
                Err(LeaseError::Invalid(why)) => {
                    // Granted by an earlier try of this activity: the same approval on record.
                    let on_record = journal
                        .leases()
                        .map_err(retry)?
                        .into_iter()
                        .any(|g| g.id == grant.id && g.approval == grant.approval);
                    Ok(if on_record {
                        Acceptance::Granted(grant.id)
                    } else {
                        Acceptance::Rejected(why)
                    })
                }
                Err(e) => Err(retry(e)),
            }
        })
        .await
    }
}
