//! A refund that may need a person: the policy clears it, refuses it, or routes it to the first
//! group of the escalation chain; the workflow then waits for a signed approval by signal, with a
//! durable timer per level that escalates the request when the level's SLA runs out; the approved
//! refund goes through the gate under the approval; a stale-premise refusal comes back to the
//! group as a repair to accept, and a budget's refusal of a refund the rules cleared alone comes
//! to the group as the request it was. Everything the people did is journaled beside the effect.

pub mod activities;
pub mod workflow;

use interlock::approval::{Assessment, SignedApproval};
use interlock::core::{Change, Repair};
use serde::{Deserialize, Serialize};

use crate::model::{Decision, RefundReport, RefundRequest};

pub use activities::ApprovalActivities;
pub use workflow::ApprovalWorkflow;

/// The workflow type's name.
pub const WORKFLOW_TYPE: &str = "ApprovalRefundWorkflow";

/// The label on a refund the rules cleared alone (`label.cleared_by` in a budget's scope): a
/// budget on it limits what goes out with no person, and a refund over it goes to a person.
pub const CLEARED_BY_RULES: (&str, &str) = ("cleared_by", "rules");

/// The suffix of the request a person is asked about when a budget refused what the rules
/// cleared (the refused key keeps its refusal; the person's approval is sent under this one).
pub const OVER_BUDGET_SUFFIX: &str = "over-budget";

/// What the approval workflow is started with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct AskInput {
    /// The refund asked for (its `lease` is ignored: the policy or a person provides one).
    pub request: RefundRequest,
    /// Each level's SLA is divided by this in the workflow's timers (the injected workflow
    /// clock of a demonstration: 1 in production).
    pub sla_divisor: u32,
    /// How many stale-premise repairs may come back to a person.
    pub max_repairs: u32,
    /// How the request is decided and sent (the approval day compares the three).
    #[serde(default)]
    pub way: Way,
}

/// How a request is decided and sent.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "snake_case")]
pub enum Way {
    /// Every delivery goes to a person; the approved refund is sent with Temporal's recommended
    /// idempotency key (workflow run + activity id), nothing re-checked at the send.
    EveryoneByHand,
    /// The policy clears, refuses or routes each delivery; the refund is sent with Temporal's
    /// recommended idempotency key, nothing re-checked at the send.
    RulesAlone,
    /// The policy, then the gate: the request's own key, the journal, the lease (the rules' or a
    /// person's signed approval) and the premises checked at the send.
    #[default]
    RulesAndGate,
}

impl Way {
    /// Every way, in table order.
    pub const ALL: [Way; 3] = [Way::EveryoneByHand, Way::RulesAlone, Way::RulesAndGate];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Way::EveryoneByHand => "everyone_by_hand",
            Way::RulesAlone => "rules_alone",
            Way::RulesAndGate => "rules_and_gate",
        }
    }
}

/// How opening a request's route went.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Opened {
    /// Routed to the first level, for this workflow to wait on.
    Routed(interlock::approval::Route),
    /// The journal already has the request, routed by another workflow or decided: this
    /// delivery is a duplicate.
    Duplicate {
        /// The workflow that holds the request.
        workflow_id: String,
    },
    /// An earlier run of this same workflow routed the request and closed before anyone
    /// decided it (terminated, reset, failed): this run takes over its latest step.
    Adopted(interlock::approval::Route),
    /// The request's effect is in the journal and unresolved (an earlier run's send that did
    /// not finish): this run finishes it.
    Unfinished,
}

/// What `assess` found: the decision and the policy's verdict on it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Assessed {
    /// The request with the premises read now.
    pub decision: Decision,
    /// The policy's verdict.
    pub assessment: Assessment,
    /// The escalation chain: each level's group and SLA (ms).
    pub chain: Vec<(String, i64)>,
}

/// A route step for the journal, asked by the workflow.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RouteArgs {
    /// The request.
    pub request_id: String,
    /// The step.
    pub step: interlock::approval::RouteStep,
}

/// A person declining a request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// The request declined: a denial of another request (one a repair replaced) is ignored.
    pub request: String,
    /// Who.
    pub approver: String,
    /// Why.
    pub reason: String,
}

/// A stale-premise refusal brought back to the group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Returned {
    /// What moved.
    pub changes: Vec<Change>,
    /// What still fits.
    pub repairs: Vec<Repair>,
}

/// Where the request stands (the workflow's query).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct AskStatus {
    /// The request waiting (the repair's id once one is asked for).
    pub request_id: String,
    /// Waiting for a person.
    pub waiting: bool,
    /// The level it is at.
    pub level: u32,
    /// The group that holds it.
    pub group: String,
    /// Approvals the workflow turned down, with why.
    pub rejected: Vec<String>,
}

/// One escalation, as the workflow saw it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Escalation {
    /// The request.
    pub request_id: String,
    /// The level reached.
    pub level: u32,
    /// The group that holds it now.
    pub group: String,
    /// Why.
    pub reason: String,
}

/// How the request ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// Sent with no person.
    ClearedNoPerson,
    /// Sent after a person approved.
    SentAfterPerson,
    /// A policy rule refused it.
    RefusedByRule,
    /// A person declined it.
    Denied,
    /// The gate refused the send (the facts moved, the approval died) and no repair was
    /// accepted.
    RefusedAtSend,
    /// Sent as a repair a person accepted.
    ClosedByRepair,
    /// The last level's SLA ran out with no decision.
    Expired,
    /// Another delivery of the same request already holds it.
    Duplicate,
    /// The refund step ended otherwise (failed, ambiguous, an error).
    #[default]
    Other,
}

/// The workflow's account of the request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct AskReport {
    /// How it ended.
    pub ending: Ending,
    /// The request first asked for.
    pub request_id: String,
    /// The request finally sent (a repair's id when one was accepted).
    pub sent_as: Option<String>,
    /// The rule that routed or refused it.
    pub rule: Option<String>,
    /// Who approved, with group and level.
    pub approved_by: Option<(String, String, u32)>,
    /// Escalations, in order.
    pub escalations: Vec<Escalation>,
    /// Levels whose SLA ran out.
    pub sla_breaches: u32,
    /// Approvals turned down before one was accepted (forged, expired, wrong group, …).
    pub rejected: Vec<String>,
    /// A refusal that came back to a person.
    pub returned: Option<Returned>,
    /// From the request to the person's decision (workflow time, ms).
    pub decision_ms: Option<i64>,
    /// The refund step's report.
    pub refund: Option<RefundReport>,
    /// The workflow holding the request, when this delivery was a duplicate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<String>,
}

/// The signal that carries an approval.
pub type Offer = SignedApproval;
