//! The approval workflow. Its waiting is durable: the approvals arrive as signals in the
//! workflow's history, and each level's SLA is a workflow timer, so a worker killed while the
//! request waits, escalates or is approved leaves nothing for the next worker to redo but what
//! the history has not recorded — and every step it redoes (routing, granting, the refund) is
//! idempotent in the journal.

#![allow(missing_docs)] // the Temporal macros generate undocumented marker items

use std::time::{Duration, UNIX_EPOCH};

use interlock::approval::{Assessment, RouteKind, RouteStep, reason};
use interlock::core::RefusalCode;
use interlock_stripe::refund::RefundPayload;
use serde_json::{Value, json};
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ActivityOptions, SyncWorkflowContext, WorkflowContext, WorkflowContextView, WorkflowResult,
};

use super::activities::{AcceptArgs, Acceptance, ApprovalActivities, Clearance};
use super::{
    AskInput, AskReport, AskStatus, CLEARED_BY_RULES, Denial, Ending, Escalation,
    OVER_BUDGET_SUFFIX, Offer, Opened, Returned, RouteArgs, Way,
};
use crate::activities::RefundActivities;
use crate::model::{Decision, RefundReport, Reported, System};
use crate::workflow::{failure_details, refund_options, report_of, retry};
use interlock_temporal::FailureDetails;

/// A person's decision, as signalled.
#[derive(Clone, Debug)]
enum Said {
    Approve(Offer),
    Deny(Denial),
}

/// The workflow.
#[workflow]
#[derive(Default)]
pub struct ApprovalWorkflow {
    /// Decisions in the order they arrived; each is handled once, in that order.
    said: Vec<Said>,
    consumed: usize,
    status: AskStatus,
}

/// How a wait for a person ended.
enum Waited {
    Approved {
        approver: (String, String, u32),
        lease: String,
    },
    Denied(Denial),
    Expired,
}

fn short(id: String) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(Duration::from_secs(10))
        .activity_id(id)
        .retry_policy(retry(20))
        .build()
}

fn now_ms(ctx: &WorkflowContext<ApprovalWorkflow>) -> i64 {
    ctx.workflow_time()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What the inbox shows a person for `decision`, and which workflow run holds it.
fn detail(ctx: &WorkflowContext<ApprovalWorkflow>, decision: &Decision, extra: Value) -> Value {
    let r = &decision.request;
    let mut v = json!({
        "workflow_id": ctx.workflow_id(),
        "run_id": ctx.run_id(),
        "payment": r.payment,
        "amount": r.amount,
        "currency": r.currency,
        "payload": r.payload(),
        "premises": decision.premises,
    });
    if let (Some(obj), Value::Object(more)) = (v.as_object_mut(), extra) {
        obj.extend(more);
    }
    v
}

/// The first step of a request routed to a person because of `rule`.
fn routed(
    ctx: &WorkflowContext<ApprovalWorkflow>,
    chain: &[(String, i64)],
    decision: &Decision,
    rule: &str,
    extra: Value,
) -> RouteStep {
    RouteStep {
        kind: RouteKind::Routed,
        level: 0,
        group: chain.first().map(|c| c.0.clone()).unwrap_or_default(),
        reason: format!("{}: {rule}", reason::NEEDS_JUDGMENT),
        repair_of: None,
        detail: detail(ctx, decision, extra),
    }
}

/// Take over `head`, the step an earlier run of this workflow waited at: the request, amount
/// and facts it showed the person.
fn adopt(decision: &mut Decision, head: &interlock::approval::Route) {
    let d = &head.step.detail;
    decision.request.request_id = head.request.clone();
    if let Some(amount) = d.get("amount").and_then(Value::as_i64) {
        decision.request.amount = amount;
    }
    if let Ok(premises) = serde_json::from_value(d.get("premises").cloned().unwrap_or_default()) {
        decision.premises = premises;
    }
}

/// How the request ended when its send neither landed nor came back to a person.
fn unsent(mut report: AskReport, refund: RefundReport) -> AskReport {
    report.ending = if refund.outcome == Reported::Refused {
        Ending::RefusedAtSend
    } else {
        Ending::Other
    };
    report.refund = Some(refund);
    report
}

/// Everything one wait for a person needs, kept across levels.
struct Waiting<'a> {
    decision: &'a Decision,
    chain: &'a [(String, i64)],
    divisor: i64,
    level: u32,
}

/// How bringing a refusal back went.
enum Back {
    /// It waits for a person.
    Waiting,
    /// A rule refused the repair.
    RefusedByRule(String),
    /// Another workflow holds the repair.
    Duplicate(String),
}

/// A refusal to bring back to a person.
struct Again<'a> {
    refused: &'a FailureDetails,
    chain: &'a [(String, i64)],
    level: u32,
    /// The request id a person is asked about.
    id: String,
    /// The id of the activity that assesses it (`assess-repair<n>`, `assess-over-budget`).
    assess_id: String,
}

impl ApprovalWorkflow {
    /// Journal `step` of `request`'s route (each step's activity id is unique in the workflow:
    /// one per request, kind and level).
    async fn journal_route(
        ctx: &mut WorkflowContext<Self>,
        request: &str,
        step: RouteStep,
    ) -> WorkflowResult<()> {
        let id = format!(
            "route-{request}-{}-{}",
            step.kind.label().to_lowercase(),
            step.level
        );
        let args = RouteArgs {
            request_id: request.to_owned(),
            step,
        };
        ctx.execute_activity(ApprovalActivities::route, args, short(id))
            .await?;
        Ok(())
    }

    /// Wait for an approval of `w.decision` at its level, escalating each time a level's SLA
    /// runs out, until a person approves or declines or the last level's SLA runs out.
    async fn wait_for_person(
        ctx: &mut WorkflowContext<Self>,
        w: &mut Waiting<'_>,
        report: &mut AskReport,
    ) -> WorkflowResult<Waited> {
        let request = w.decision.request.request_id.clone();
        let mut level_started = now_ms(ctx);
        loop {
            let group = w.chain[w.level as usize].0.clone();
            let (level, rejected) = (w.level, report.rejected.clone());
            ctx.state_mut(|s| {
                s.status = AskStatus {
                    request_id: request.clone(),
                    waiting: true,
                    level,
                    group: group.clone(),
                    rejected,
                }
            });
            let pending: Vec<Said> = ctx.state(|s| s.said[s.consumed..].to_vec());
            for said in pending {
                let n = ctx.state_mut(|s| {
                    s.consumed += 1;
                    s.consumed
                });
                let offer = match said {
                    Said::Deny(d) if d.request == request => {
                        ctx.state_mut(|s| s.status.waiting = false);
                        return Ok(Waited::Denied(d));
                    }
                    Said::Deny(d) => {
                        report.rejected.push(format!(
                            "{}'s refusal of request {} arrived while {request} waits",
                            d.approver, d.request
                        ));
                        continue;
                    }
                    Said::Approve(offer) => offer,
                };
                if offer.statement.request != request {
                    report.rejected.push(format!(
                        "an approval for request {} arrived while {request} waits",
                        offer.statement.request
                    ));
                    continue;
                }
                let who = (
                    offer.statement.approver.clone(),
                    offer.statement.group.clone(),
                    offer.statement.level,
                );
                let args = AcceptArgs {
                    offer,
                    decision: w.decision.clone(),
                };
                let id = format!("accept-{n}");
                match ctx
                    .execute_activity(ApprovalActivities::accept, args, short(id))
                    .await?
                {
                    Acceptance::Granted(lease) => {
                        ctx.state_mut(|s| s.status.waiting = false);
                        return Ok(Waited::Approved {
                            approver: who,
                            lease,
                        });
                    }
                    Acceptance::Rejected(why) => report.rejected.push(why),
                }
            }
            let sla = w.chain[w.level as usize].1 / w.divisor;
            let left = level_started
                .saturating_add(sla)
                .saturating_sub(now_ms(ctx));
            if left <= 0 {
                report.sla_breaches += 1;
                if (w.level as usize) + 1 >= w.chain.len() {
                    ctx.state_mut(|s| s.status.waiting = false);
                    return Ok(Waited::Expired);
                }
                w.level += 1;
                let group = w.chain[w.level as usize].0.clone();
                let step = RouteStep {
                    kind: RouteKind::Escalated,
                    level: w.level,
                    group: group.clone(),
                    reason: reason::SLA_BREACH.into(),
                    repair_of: None,
                    detail: detail(ctx, w.decision, json!({})),
                };
                Self::journal_route(ctx, &request, step).await?;
                report.escalations.push(Escalation {
                    request_id: request.clone(),
                    level: w.level,
                    group,
                    reason: reason::SLA_BREACH.into(),
                });
                level_started = now_ms(ctx);
                continue;
            }
            let seen = ctx.state(|s| s.consumed);
            let wait = Duration::from_millis(u64::try_from(left).unwrap_or(0));
            temporalio_sdk::workflows::select! {
                _ = ctx.timer(wait) => {}
                _ = ctx.wait_condition(move |s: &Self| s.said.len() > seen) => {}
            }
        }
    }
}

impl ApprovalWorkflow {
    /// Send the refund `decision` names the way the request is sent: through the gate, or with
    /// Temporal's recommended idempotency key and nothing re-checked.
    async fn send(
        ctx: &mut WorkflowContext<Self>,
        way: Way,
        decision: &Decision,
        activity_id: &str,
    ) -> (RefundReport, Option<FailureDetails>) {
        let res = if way == Way::RulesAndGate {
            ctx.execute_activity(
                RefundActivities::refund_gated,
                decision.clone(),
                refund_options(activity_id, decision.request.step),
            )
            .await
        } else {
            ctx.execute_activity(
                RefundActivities::refund_keyed,
                decision.clone(),
                refund_options(activity_id, decision.request.step),
            )
            .await
        };
        let details = res.as_ref().err().and_then(failure_details);
        (report_of(res), details)
    }

    /// Bring a stale-premise refusal of `decision` back to a person as a new decision: the
    /// repair's payload under a new id, its premises read again, judged afresh by the policy —
    /// `Some(rule)` when a rule refuses it (journaled, no person) — and journaled as a `REPAIR`
    /// linked to the refused request, at the level the request was at — unless another
    /// workflow (a second delivery of the same request) brought it back first.
    async fn bring_back(
        ctx: &mut WorkflowContext<Self>,
        decision: &mut Decision,
        again: Again<'_>,
    ) -> WorkflowResult<Back> {
        let d = again.refused;
        let old = decision.request.request_id.clone();
        let mut asked = decision.request.clone();
        // A person's approval is not the rules': nothing sent under it counts in their budgets.
        asked.labels.clear();
        let (why, extra) = if d.refusal == Some(RefusalCode::Budget) {
            (
                format!("{}: {}", reason::OVER_BUDGET, d.reason),
                json!({ "over_budget": d.reason }),
            )
        } else {
            let repair = d.repairs[0].clone();
            if let Ok(p) = RefundPayload::from_value(&repair.payload) {
                asked.amount = p.amount;
            }
            (
                format!("{}: {}", reason::STALE_PREMISE, repair.kind),
                json!({"changes": d.changes, "repair": repair}),
            )
        };
        asked.request_id = again.id;
        let re = ctx
            .execute_activity(ApprovalActivities::assess, asked, short(again.assess_id))
            .await?;
        *decision = re.decision;
        if let Assessment::Refused { rule } = re.assessment {
            return Ok(
                match Self::refuse_by_rule(ctx, decision, &rule, Some(old)).await? {
                    Opened::Routed(_) => Back::RefusedByRule(rule),
                    Opened::Duplicate { workflow_id } => Back::Duplicate(workflow_id),
                    // A repair's key has no effect before its route, and only a ROUTED step
                    // is adopted: neither can answer here.
                    _ => Back::Duplicate(String::new()),
                },
            );
        }
        let step = RouteStep {
            kind: RouteKind::Repair,
            level: again.level,
            group: again.chain[again.level as usize].0.clone(),
            reason: why,
            repair_of: Some(old),
            detail: detail(ctx, decision, extra),
        };
        let id = decision.request.request_id.clone();
        Ok(match Self::open(ctx, &id, step).await? {
            Opened::Routed(_) => Back::Waiting,
            Opened::Duplicate { workflow_id } => Back::Duplicate(workflow_id),
            _ => Back::Duplicate(String::new()),
        })
    }

    /// Journal that a rule refused `decision`'s request (a repair of `repair_of`, if given)
    /// before any person saw it: its route opens closed, so nothing can approve or send it —
    /// unless the request is already another run's, which this one leaves alone (see
    /// [`Opened`]).
    async fn refuse_by_rule(
        ctx: &mut WorkflowContext<Self>,
        decision: &Decision,
        rule: &str,
        repair_of: Option<String>,
    ) -> WorkflowResult<Opened> {
        let step = RouteStep {
            kind: RouteKind::Closed,
            level: 0,
            group: "policy".into(),
            reason: format!("{}: {rule}", reason::REFUSED_BY_RULE),
            repair_of,
            detail: detail(ctx, decision, json!({ "rule": rule })),
        };
        let id = decision.request.request_id.clone();
        Self::open(ctx, &id, step).await
    }

    /// Open `request`'s route with `step` (`ROUTED`, `REPAIR`, or a rule's `CLOSED`), unless
    /// the journal shows the request is another run's — routed by it, or already decided and
    /// sent or refused — or left unfinished by an earlier run of this workflow (see
    /// [`Opened`]).
    async fn open(
        ctx: &mut WorkflowContext<Self>,
        request: &str,
        step: RouteStep,
    ) -> WorkflowResult<Opened> {
        let id = format!("open-{request}-{}", step.kind.label().to_lowercase());
        let args = RouteArgs {
            request_id: request.to_owned(),
            step,
        };
        ctx.execute_activity(ApprovalActivities::open, args, short(id))
            .await
            .map_err(Into::into)
    }

    /// Journal that `decision`'s request closed with no approval, so nothing signed for it
    /// before can be granted or sent afterwards.
    async fn close(
        ctx: &mut WorkflowContext<Self>,
        decision: &Decision,
        chain: &[(String, i64)],
        level: u32,
        reason: String,
    ) -> WorkflowResult<()> {
        let step = RouteStep {
            kind: RouteKind::Closed,
            level,
            group: chain[level as usize].0.clone(),
            reason,
            repair_of: None,
            detail: detail(ctx, decision, json!({})),
        };
        let id = decision.request.request_id.clone();
        Self::journal_route(ctx, &id, step).await
    }
}

#[workflow_methods]
impl ApprovalWorkflow {
    /// Assess, wait for a person if the policy asks for one, send through the gate, and bring a
    /// stale-premise refusal back to the person as a repair.
    #[run(name = "ApprovalRefundWorkflow")]
    pub async fn run(
        ctx: &mut WorkflowContext<Self>,
        input: AskInput,
    ) -> WorkflowResult<AskReport> {
        let started = now_ms(ctx);
        let way = input.way;
        let mut request = input.request.clone();
        if way != Way::RulesAndGate {
            // Without the gate nothing knows a request by its own id beyond Temporal's workflow
            // id: each run is its own request, to a person and to the payments API.
            request.request_id = format!("{}-run-{}", ctx.workflow_id(), ctx.run_id());
            request.system = System::Keyed;
        }
        let mut report = AskReport {
            request_id: request.request_id.clone(),
            ..AskReport::default()
        };
        let assessed = ctx
            .execute_activity(
                ApprovalActivities::assess,
                request.clone(),
                short("assess".into()),
            )
            .await?;
        let mut decision = assessed.decision;
        let assessment = if way == Way::EveryoneByHand {
            Assessment::NeedsJudgment {
                rule: "everyone_by_hand".into(),
                fired: Vec::new(),
            }
        } else {
            assessed.assessment
        };
        let divisor = i64::from(input.sla_divisor.max(1));
        let chain = assessed.chain;
        let comes_back = |d: &FailureDetails, repairs: u32| {
            matches!(
                d.refusal,
                Some(RefusalCode::StalePremise | RefusalCode::StalePremiseAtRecovery)
            ) && !d.repairs.is_empty()
                && repairs < input.max_repairs
                && !chain.is_empty()
        };
        // A stale-premise refusal to bring back to a person, with the refused send's report.
        let mut back: Option<(FailureDetails, RefundReport)> = None;
        let mut level = 0;
        // The route to open — a person's, or a rule's refusal — if the rules did not clear it.
        let opened = match assessment {
            Assessment::Cleared if way == Way::RulesAndGate => {
                match ctx
                    .execute_activity(
                        ApprovalActivities::clear,
                        decision.clone(),
                        short("clear".into()),
                    )
                    .await?
                {
                    Clearance::Granted(lease) => {
                        decision.request.lease = lease;
                        // What the rules send alone counts in the budgets on them.
                        let (name, value) = CLEARED_BY_RULES;
                        decision.request.labels.insert(name.into(), value.into());
                        None
                    }
                    // An earlier run of this workflow routed it to a person: a person decides,
                    // as that run asked.
                    Clearance::Held { workflow_id } if workflow_id == ctx.workflow_id() => {
                        let step = routed(ctx, &chain, &decision, "an earlier run", json!({}));
                        Some(Self::open(ctx, &request.request_id, step).await?)
                    }
                    // Another workflow's person holds it.
                    Clearance::Held { workflow_id } => {
                        report.ending = Ending::Duplicate;
                        report.duplicate_of = Some(workflow_id);
                        return Ok(report);
                    }
                }
            }
            Assessment::Cleared => None,
            Assessment::Refused { rule } => {
                match Self::refuse_by_rule(ctx, &decision, &rule, None).await? {
                    Opened::Routed(_) => {
                        report.ending = Ending::RefusedByRule;
                        report.rule = Some(rule);
                        return Ok(report);
                    }
                    other => Some(other),
                }
            }
            Assessment::NeedsJudgment { rule, fired } => {
                report.rule = Some(rule.clone());
                let extra = json!({"rule": rule, "fired": fired});
                let step = routed(ctx, &chain, &decision, &rule, extra);
                Some(Self::open(ctx, &request.request_id, step).await?)
            }
            _ => {
                report.ending = Ending::Other;
                return Ok(report);
            }
        };
        let send_now = match opened {
            None | Some(Opened::Unfinished) => true,
            Some(Opened::Routed(_)) => false,
            Some(Opened::Adopted(head)) => {
                // Carry on where the earlier run left off: the step it waited at, and what
                // that step showed the person (their approvals are signed over it).
                adopt(&mut decision, &head);
                level = head.step.level;
                false
            }
            Some(Opened::Duplicate { workflow_id }) => {
                report.ending = Ending::Duplicate;
                report.duplicate_of = Some(workflow_id);
                return Ok(report);
            }
        };
        if send_now {
            // Cleared by the rules (now, or in an earlier run whose send this one finishes:
            // the gate carries on under that first proposal's lease and facts).
            let (refund, details) = Self::send(ctx, way, &decision, "refund").await;
            report.sent_as = Some(decision.request.request_id.clone());
            match (refund.outcome, details) {
                (Reported::Committed | Reported::Refunded, _) => {
                    report.ending = Ending::ClearedNoPerson;
                    report.refund = Some(refund);
                    return Ok(report);
                }
                // The rules cleared it on facts that moved since: a person judges the repair
                // (whether the other refund was this one is not a rule's call).
                (Reported::Refused, Some(d)) if comes_back(&d, 0) => back = Some((d, refund)),
                // A budget on what the rules send alone is full: a person decides instead.
                (Reported::Refused, Some(d))
                    if d.refusal == Some(RefusalCode::Budget) && !chain.is_empty() =>
                {
                    back = Some((d, refund));
                }
                _ => return Ok(unsent(report, refund)),
            }
        }
        let mut repairs = 0;
        loop {
            if let Some((d, refund)) = back.take() {
                // A budget's refusal asks a person about the request as it was; a stale
                // premise's, about its repair.
                let suffix = if d.refusal == Some(RefusalCode::Budget) {
                    OVER_BUDGET_SUFFIX.to_owned()
                } else {
                    repairs += 1;
                    format!("repair{repairs}")
                };
                let again = Again {
                    refused: &d,
                    chain: &chain,
                    level,
                    id: format!("{}-{suffix}", request.request_id),
                    assess_id: format!("assess-{suffix}"),
                };
                match Self::bring_back(ctx, &mut decision, again).await? {
                    Back::Waiting => {}
                    Back::RefusedByRule(rule) => {
                        report.ending = Ending::RefusedByRule;
                        report.rule = Some(rule);
                        report.refund = Some(refund);
                        return Ok(report);
                    }
                    Back::Duplicate(workflow_id) => {
                        report.ending = Ending::Duplicate;
                        report.duplicate_of = Some(workflow_id);
                        report.refund = Some(refund);
                        return Ok(report);
                    }
                }
                report.returned = Some(Returned {
                    changes: d.changes.clone(),
                    repairs: d.repairs.clone(),
                });
            }
            let mut w = Waiting {
                decision: &decision,
                chain: &chain,
                divisor,
                level,
            };
            let waited = Self::wait_for_person(ctx, &mut w, &mut report).await?;
            level = w.level;
            let (approver, lease) = match waited {
                Waited::Approved { approver, lease } => (approver, lease),
                Waited::Denied(d) => {
                    let why = format!("{} by {}: {}", reason::DENIED, d.approver, d.reason);
                    Self::close(ctx, &decision, &chain, level, why).await?;
                    report.ending = Ending::Denied;
                    return Ok(report);
                }
                Waited::Expired => {
                    let why = format!("{} at level {level}", reason::SLA_EXPIRED);
                    Self::close(ctx, &decision, &chain, level, why).await?;
                    report.ending = Ending::Expired;
                    return Ok(report);
                }
            };
            report.approved_by = Some(approver);
            report.decision_ms.get_or_insert(now_ms(ctx) - started);
            decision.request.lease = lease;
            let id = format!("refund-{}", decision.request.request_id);
            let (refund, details) = Self::send(ctx, way, &decision, &id).await;
            report.sent_as = Some(decision.request.request_id.clone());
            match (refund.outcome, details) {
                (Reported::Committed | Reported::Refunded, _) => {
                    report.ending = if repairs > 0 {
                        Ending::ClosedByRepair
                    } else {
                        Ending::SentAfterPerson
                    };
                    report.refund = Some(refund);
                    return Ok(report);
                }
                (Reported::Refused, Some(d)) if comes_back(&d, repairs) => {
                    back = Some((d, refund));
                }
                _ => return Ok(unsent(report, refund)),
            }
        }
    }

    /// A person's signed approval.
    #[signal]
    pub fn approve(&mut self, _ctx: &mut SyncWorkflowContext<Self>, offer: Offer) {
        self.said.push(Said::Approve(offer));
    }

    /// A person declines the request.
    #[signal]
    pub fn deny(&mut self, _ctx: &mut SyncWorkflowContext<Self>, denial: Denial) {
        self.said.push(Said::Deny(denial));
    }

    /// Where the request stands.
    #[query]
    pub fn status(&self, _ctx: &WorkflowContextView) -> AskStatus {
        self.status.clone()
    }
}
