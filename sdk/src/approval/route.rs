//! Where a request waits for a person. Each step — routed to a group, escalated up the chain,
//! reopened as a repair — is appended to the journal's store beside the leases, and the gate
//! reads the latest inside the transaction that writes a send's record: an approval from a group
//! the request has left is refused even if it was signed a moment before the escalation.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a request is where it is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum RouteKind {
    /// A rule sent the request to a person.
    Routed,
    /// Its SLA ran out (or a person passed it up): the next level holds it.
    Escalated,
    /// A refused request came back to its group as a repair to accept.
    Repair,
    /// Closed with no approval: a rule refused it (its first and only step), a person declined
    /// it, or the last level's SLA ran out. Nothing may be approved or sent under it afterwards.
    Closed,
}

/// The words a step's reason starts with, which the scoreboard counts by (the rest of the reason
/// is for people: the rule that fired, who declined and why).
pub mod reason {
    /// A rule routed the request to a person.
    pub const NEEDS_JUDGMENT: &str = "needs_judgment";
    /// A level's SLA ran out and the request went up the chain.
    pub const SLA_BREACH: &str = "sla_breach";
    /// The last level's SLA ran out: closed with no decision.
    pub const SLA_EXPIRED: &str = "sla_expired";
    /// A person declined the request.
    pub const DENIED: &str = "denied";
    /// A rule refused the request before anyone saw it.
    pub const REFUSED_BY_RULE: &str = "refused_by_rule";
    /// The gate refused the send on facts that moved, and the request came back as a repair.
    pub const STALE_PREMISE: &str = "stale_premise";
    /// A budget refused the send the rules had cleared alone, and the request went to a person
    /// under a key of its own (the refused one keeps its refusal).
    pub const OVER_BUDGET: &str = "over_budget";

    /// The leading word of `reason` (up to the first `:` or space).
    pub fn class(reason: &str) -> &str {
        reason.split([':', ' ']).next().unwrap_or(reason)
    }
}

impl RouteKind {
    /// The label, as journaled.
    pub fn label(self) -> &'static str {
        match self {
            Self::Routed => "ROUTED",
            Self::Escalated => "ESCALATED",
            Self::Repair => "REPAIR",
            Self::Closed => "CLOSED",
        }
    }

    /// The kind a label names.
    pub fn from_label(label: &str) -> Option<Self> {
        [Self::Routed, Self::Escalated, Self::Repair, Self::Closed]
            .into_iter()
            .find(|k| k.label() == label)
    }
}

/// One step of a request's route, as asked for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RouteStep {
    /// What happened.
    pub kind: RouteKind,
    /// The level it is at now.
    pub level: u32,
    /// The group that holds it now.
    pub group: String,
    /// Why (the rule that fired, `sla_breach`, …).
    pub reason: String,
    /// The request a repair replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair_of: Option<String>,
    /// What the person is asked to approve, as the inbox shows it (the payload, the facts read,
    /// the rule that fired, where to send the approval).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

/// A step as journaled.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The request.
    pub request: String,
    /// Its position in the request's route, from 0.
    pub n: u32,
    /// The step.
    #[serde(flatten)]
    pub step: RouteStep,
    /// When it was journaled (ms since the epoch).
    pub at_ms: i64,
}

/// Whether `step` may follow `last` (the request's latest step): the first step routes, reopens
/// or (a rule's refusal) closes a request, an escalation moves exactly one level up, a closing step ends it, nothing
/// follows a closing step, and a step already journaled is answered with itself (a retried
/// workflow step). `Ok(Some(r))`: already there; `Ok(None)`: append; `Err`: why not.
pub fn next_step<'a>(
    request: &str,
    last: Option<&'a Route>,
    step: &RouteStep,
) -> Result<Option<&'a Route>, String> {
    match last {
        Some(r)
            if r.step.kind == step.kind
                && r.step.level == step.level
                && r.step.group == step.group =>
        {
            Ok(Some(r))
        }
        Some(r) if r.step.kind == RouteKind::Closed => Err(format!(
            "request {request} is closed ({}); nothing may follow",
            r.step.reason
        )),
        None if step.kind != RouteKind::Escalated => Ok(None),
        None => Err(format!(
            "request {request} was never routed to a person, so it cannot escalate"
        )),
        Some(r) if step.kind == RouteKind::Closed && step.level == r.step.level => Ok(None),
        Some(r)
            if step.kind == RouteKind::Escalated
                && r.step.level.checked_add(1) == Some(step.level) =>
        {
            Ok(None)
        }
        Some(r) => Err(format!(
            "request {request} is at level {} ({}); it cannot go to level {} ({}) by {}",
            r.step.level,
            r.step.group,
            step.level,
            step.group,
            step.kind.label()
        )),
    }
}

/// A step's detail as a store keeps it (JSON text): display data, so text that does not parse is
/// kept as text rather than failing the read.
pub fn parse_detail(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// A step as a store keeps it: its columns, as read, so every store decodes them alike.
#[derive(Clone, Debug)]
pub struct StoredRoute {
    /// The request.
    pub request: String,
    /// The step's position.
    pub n: i64,
    /// The kind's label.
    pub kind: String,
    /// The level.
    pub level: i64,
    /// The group.
    pub group: String,
    /// Why.
    pub reason: String,
    /// The request a repair replaces.
    pub repair_of: Option<String>,
    /// The detail as JSON text.
    pub detail: String,
    /// When journaled.
    pub at_ms: i64,
}

impl StoredRoute {
    /// The step these columns hold, or what is wrong with them (an unknown kind, a position or
    /// a level out of range): a damaged row is reported, never read as something else.
    pub fn into_route(self) -> Result<Route, String> {
        let kind = RouteKind::from_label(&self.kind)
            .ok_or_else(|| format!("unknown route kind {:?}", self.kind))?;
        let n = u32::try_from(self.n).map_err(|_| format!("step number {}", self.n))?;
        let level = u32::try_from(self.level).map_err(|_| format!("level {}", self.level))?;
        Ok(Route {
            request: self.request,
            n,
            step: RouteStep {
                kind,
                level,
                group: self.group,
                reason: self.reason,
                repair_of: self.repair_of,
                detail: parse_detail(&self.detail),
            },
            at_ms: self.at_ms,
        })
    }
}

/// The escalations in `routes`.
pub fn escalations(routes: &[Route]) -> impl Iterator<Item = &Route> {
    routes
        .iter()
        .filter(|r| r.step.kind == RouteKind::Escalated)
}

/// Whether a grant of `approval` may be recorded while the request's latest step is `last`:
/// only the group that holds the request now, at its level, may approve it.
pub fn admits(last: Option<&Route>, approval: &super::SignedApproval) -> Result<(), String> {
    let s = &approval.statement;
    match last {
        None => Err(format!(
            "request {} was never routed to a person: group {} cannot approve it",
            s.request, s.group
        )),
        Some(r) if r.step.kind == RouteKind::Closed => Err(format!(
            "request {} is closed ({}): it can no longer be approved",
            s.request, r.step.reason
        )),
        Some(r) if r.step.group == s.group && r.step.level == s.level => Ok(()),
        Some(r) => Err(format!(
            "request {} is with group {} at level {}: group {} (level {}) can no longer \
             approve it",
            s.request, r.step.group, r.step.level, s.group, s.level
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(kind: RouteKind, level: u32, group: &str) -> RouteStep {
        RouteStep {
            kind,
            level,
            group: group.into(),
            reason: "r".into(),
            repair_of: None,
            detail: Value::Null,
        }
    }

    fn at(n: u32, s: RouteStep) -> Route {
        Route {
            request: "q".into(),
            n,
            step: s,
            at_ms: 0,
        }
    }

    #[test]
    fn a_route_starts_once_climbs_one_level_at_a_time_and_answers_a_retry_with_itself() {
        let routed = at(0, step(RouteKind::Routed, 0, "support"));
        assert_eq!(next_step("q", None, &routed.step), Ok(None));
        assert!(next_step("q", None, &step(RouteKind::Escalated, 1, "managers")).is_err());
        assert_eq!(
            next_step("q", Some(&routed), &routed.step),
            Ok(Some(&routed)),
            "a retried step is already there"
        );
        assert_eq!(
            next_step(
                "q",
                Some(&routed),
                &step(RouteKind::Escalated, 1, "managers")
            ),
            Ok(None)
        );
        assert!(next_step("q", Some(&routed), &step(RouteKind::Escalated, 2, "cfo")).is_err());
        assert!(next_step("q", Some(&routed), &step(RouteKind::Routed, 0, "ops")).is_err());
        let top = at(0, step(RouteKind::Routed, u32::MAX, "support"));
        assert!(next_step("q", Some(&top), &step(RouteKind::Escalated, 0, "x")).is_err());
    }

    #[test]
    fn a_closed_request_takes_no_further_step() {
        let routed = at(0, step(RouteKind::Routed, 0, "support"));
        let close = step(RouteKind::Closed, 0, "support");
        assert_eq!(next_step("q", Some(&routed), &close), Ok(None));
        assert_eq!(
            next_step("q", None, &close),
            Ok(None),
            "a rule's refusal closes a request no person saw"
        );
        let closed = at(1, close.clone());
        assert_eq!(next_step("q", Some(&closed), &close), Ok(Some(&closed)));
        for later in [
            step(RouteKind::Escalated, 1, "managers"),
            step(RouteKind::Routed, 0, "support"),
            step(RouteKind::Repair, 0, "support"),
        ] {
            assert!(next_step("q", Some(&closed), &later).is_err(), "{later:?}");
        }
    }

    #[test]
    fn a_reason_is_counted_by_its_leading_word() {
        assert_eq!(reason::class("denied by ana: duplicate"), reason::DENIED);
        assert_eq!(reason::class("sla_expired at level 1"), reason::SLA_EXPIRED);
        assert_eq!(
            reason::class("needs_judgment: over_limit"),
            reason::NEEDS_JUDGMENT
        );
        assert_eq!(reason::class("sla_breach"), reason::SLA_BREACH);
        assert_eq!(reason::class(""), "");
    }
}
