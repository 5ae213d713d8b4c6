//! The verdict on an approval at send and at recovery. A grant's own checks (revoked, expired,
//! scope, cap) come first; then, where a person approved, everything the signature stands for
//! is checked again against the directory and the request's route as of the send's transaction.
//! Each refusal says which fact failed, for the person who has to act on it.

use serde_json::Value;

use crate::core::{LeaseVerdict, Premises};
use crate::effect::canonical_json;
use crate::lease::Grant;

use super::{Approvers, Route};

/// What an approval is checked against.
pub struct Against<'a> {
    /// The approver directory, if this gate has one.
    pub directory: Option<&'a Approvers>,
    /// The effect's key.
    pub key: &'a str,
    /// Who proposed the effect ([`crate::core::Proposed::by`]).
    pub proposer: Option<&'a str>,
    /// The target the effect was proposed for ([`crate::core::Proposed::target`]).
    pub target: Option<&'a str>,
    /// The payload to be sent.
    pub payload: &'a Value,
    /// The premises the effect was decided on.
    pub premises: &'a Premises,
    /// The request's latest route step, if it was ever routed to a person.
    pub route: Option<&'a Route>,
    /// Now (ms since the epoch).
    pub now_ms: i64,
}

/// The verdict on lease `id` (as recorded in `grant`, if ever granted).
pub fn verdict(id: &str, grant: Option<&Grant>, at: &Against<'_>) -> LeaseVerdict {
    let dead = |reason: String| LeaseVerdict::Dead { reason };
    let Some(grant) = grant else {
        return crate::lease::verdict_of(None, id, at.payload, at.now_ms);
    };
    // First, and in words that name no spender: one who may not spend it learns nothing of
    // its terms (scope, cap, expiry) or of who may.
    if !grant.spendable_by(at.proposer) {
        return LeaseVerdict::NotSpender {
            reason: format!(
                "lease {id} does not name {} among those who may spend it",
                at.proposer.unwrap_or("an effect with no known proposer")
            ),
        };
    }
    let own = grant.verdict(at.payload, at.now_ms);
    if own != LeaseVerdict::Live {
        return own;
    }
    if !grant.targets.is_empty() && !at.target.is_some_and(|t| grant.covers_target(t)) {
        return dead(format!(
            "lease {id} may be spent on {} only, not on {}",
            grant.targets.join(", "),
            at.target.unwrap_or("an effect of no known target")
        ));
    }
    if let Some(bound) = grant.request().filter(|r| *r != at.key) {
        return dead(format!(
            "lease {id} is bound to request {bound}, not {}",
            at.key
        ));
    }
    if let Some(r) = at.route.filter(|r| r.step.kind == super::RouteKind::Closed) {
        return dead(format!(
            "request {} was closed ({}): nothing may be sent for it",
            at.key, r.step.reason
        ));
    }
    let Some(approval) = &grant.approval else {
        return match at.route {
            Some(r) => dead(format!(
                "request {} waits for a signed approval from group {} (level {}); lease {id} \
                 is not one",
                at.key, r.step.group, r.step.level
            )),
            None => LeaseVerdict::Live,
        };
    };
    // Not a verdict on the approval: this gate cannot judge it. Nothing is sent, and nothing
    // final is written either, so a binding with the directory can still send it.
    let Some(dir) = at.directory else {
        return LeaseVerdict::Error {
            message: format!(
                "lease {id} is a signed approval, but this gate has no approver directory to \
                 check it against: give it one (Gate::with_approvers, --approvers)"
            ),
        };
    };
    let s = &approval.statement;
    if s.request != at.key {
        return dead(format!(
            "approval {id} was given for request {}, not {}: an approval is not reusable",
            s.request, at.key
        ));
    }
    let Some(key) = dir.key_of(&s.approver) else {
        return dead(format!(
            "approval {id} is signed in the name of {}, who is not in the approver directory",
            s.approver
        ));
    };
    if !approval.verifies_with(&key) {
        return dead(format!(
            "approval {id}'s signature does not verify with {}'s key: forged or altered",
            s.approver
        ));
    }
    if !dir.is_member(&s.group, &s.approver) {
        return dead(format!(
            "approval {id}: {} is not a member of group {}",
            s.approver, s.group
        ));
    }
    if at.now_ms >= s.expires_ms {
        return dead(format!(
            "approval {id} by {} expired at {}",
            s.approver, s.expires_ms
        ));
    }
    if canonical_json(&s.payload) != canonical_json(at.payload) {
        let amount = |v: &Value| v.get("amount").cloned().unwrap_or(Value::Null);
        let (signed, asked) = (amount(&s.payload), amount(at.payload));
        return dead(if signed == asked {
            format!("approval {id} by {} covers another payload", s.approver)
        } else {
            format!(
                "approval {id} by {} covers amount {signed}; the effect asks {asked}",
                s.approver
            )
        });
    }
    if &s.premises != at.premises {
        return dead(format!(
            "approval {id} by {} was given on other facts than the effect was decided on",
            s.approver
        ));
    }
    let Some(route) = at.route else {
        return dead(format!(
            "approval {id} is for request {}, which was never routed to group {}",
            at.key, s.group
        ));
    };
    if route.step.group != s.group || route.step.level != s.level {
        return dead(format!(
            "approval {id} is by group {} at level {}, but request {} is now with group {} at \
             level {}: {} can no longer approve it",
            s.group, s.level, at.key, route.step.group, route.step.level, s.group
        ));
    }
    if grant.approver != s.approver || grant.id != approval.id() {
        return dead(format!(
            "lease {id} does not match the approval it carries (approver {} signed, the lease \
             names {}): altered",
            s.approver, grant.approver
        ));
    }
    LeaseVerdict::Live
}
