//! The approval columns of a verification: who approved, whether that approval is genuine —
//! for a person's signed approval, that the signature checks against their public key in the
//! directory and covers exactly what was sent — and the request's route to that person. All of
//! it is re-derived from the `AUTHORIZED` record, which the chain protects, and checked against
//! the lease store and the directory, which it does not trust.

use serde_json::Value;

use crate::approval::{Approvers, Route, RouteKind, SignedApproval};
use crate::effect::canonical_json;
use crate::lease::LeaseStore;
use crate::receipt::Receipt;

use super::{Column, col};

/// The signed approval and the route the journal saw at authorization.
fn journaled(derived: &Receipt) -> (Option<SignedApproval>, Vec<Route>) {
    let approval = derived
        .grant
        .get("approval")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let routes = derived
        .grant
        .get("routes")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    (approval, routes)
}

pub(super) fn approved_by(derived: &Receipt) -> Column {
    let Some(approver) = &derived.approver else {
        return col("approved by", None, "never authorized");
    };
    match journaled(derived).0 {
        Some(a) => col(
            "approved by",
            Some(true),
            format!(
                "{approver} for group {} at level {}",
                a.statement.group, a.statement.level
            ),
        ),
        None => col("approved by", Some(true), approver.clone()),
    }
}

pub(super) fn verified(
    derived: &Receipt,
    leases: Option<&dyn LeaseStore>,
    approvers: Option<&Approvers>,
    last_dispatch: Option<i64>,
) -> Column {
    let verdict = |holds, detail: String| col("approval verified", holds, detail);
    let Some(leases) = leases else {
        return verdict(None, "no lease store given".into());
    };
    if derived.approver.is_none() {
        return verdict(None, "never authorized".into());
    }
    let g = match leases.describe(&derived.lease) {
        Ok(Some(g)) => g,
        Ok(None) => {
            return verdict(
                Some(false),
                format!("no lease {} is on record", derived.lease),
            );
        }
        Err(e) => return verdict(None, format!("the lease store could not answer: {e}")),
    };
    let snapshot = serde_json::to_value(&g).unwrap_or(Value::Null);
    let same = [
        "id",
        "approver",
        "granted_ms",
        "scope",
        "cap",
        "expires_ms",
        "approval",
        "uses",
        "total",
    ]
    .iter()
    .all(|f| snapshot.get(f) == derived.grant.get(f));
    if !same {
        return verdict(
            Some(false),
            "the lease on record differs from the grant the journal saw".into(),
        );
    }
    if let (Some(r), Some(d)) = (g.revoked_ms, last_dispatch)
        && r <= d
    {
        return verdict(
            Some(false),
            "the lease was revoked before the last send".into(),
        );
    }
    let (approval, routes) = journaled(derived);
    let Some(approval) = approval else {
        if let Some(r) = routes.last() {
            return verdict(
                Some(false),
                format!(
                    "the request was with group {} for a person's approval, but lease {} is not \
                     one",
                    r.step.group, g.id
                ),
            );
        }
        return verdict(
            Some(true),
            format!("lease {} by {} is on record as granted", g.id, g.approver),
        );
    };
    signed(derived, &approval, routes.last(), approvers, last_dispatch)
}

/// A person's signed approval, checked against the directory and what was sent.
fn signed(
    derived: &Receipt,
    a: &SignedApproval,
    route: Option<&Route>,
    approvers: Option<&Approvers>,
    last_dispatch: Option<i64>,
) -> Column {
    let verdict = |holds, detail: String| col("approval verified", holds, detail);
    let s = &a.statement;
    let Some(dir) = approvers else {
        return verdict(
            None,
            format!(
                "signed by {}; no approver directory was given to check the signature",
                s.approver
            ),
        );
    };
    let Some(key) = dir.key_of(&s.approver) else {
        return verdict(
            Some(false),
            format!("{} is not in the approver directory", s.approver),
        );
    };
    let amount = |v: &Value| v.get("amount").cloned().unwrap_or(Value::Null);
    let failure = if !a.verifies_with(&key) {
        Some(format!(
            "the signature does not verify with {}'s public key",
            s.approver
        ))
    } else if !dir.is_member(&s.group, &s.approver) {
        Some(format!("{} is not a member of {}", s.approver, s.group))
    } else if let Some(at) = last_dispatch.filter(|at| *at >= s.expires_ms) {
        Some(format!(
            "the approval expired at {}, before the send dispatched at {at}",
            s.expires_ms
        ))
    } else if s.request != derived.key {
        Some(format!("the approval is for request {}", s.request))
    } else if canonical_json(&s.payload) != canonical_json(&derived.payload) {
        Some(format!(
            "the approval covers amount {}; amount {} was sent",
            amount(&s.payload),
            amount(&derived.payload)
        ))
    } else if s.premises != derived.premises_decided {
        Some("the approval was given on other facts than the effect was decided on".into())
    } else if let Some(r) = route.filter(|r| r.step.kind == RouteKind::Closed) {
        Some(format!(
            "the request was closed ({}) when it was authorized",
            r.step.reason
        ))
    } else if route.is_none_or(|r| r.step.group != s.group || r.step.level != s.level) {
        Some(format!(
            "the approval is by group {}, but the request was not with that group when it was \
             authorized",
            s.group
        ))
    } else {
        None
    };
    match failure {
        Some(why) => verdict(Some(false), why),
        None => verdict(
            Some(true),
            format!(
                "{}'s Ed25519 signature verifies and covers amount {}, the amount {}",
                s.approver,
                amount(&s.payload),
                if derived.outcome == crate::core::Status::Committed {
                    "sent"
                } else {
                    "decided (nothing was sent)"
                }
            ),
        ),
    }
}

pub(super) fn escalations(derived: &Receipt) -> Column {
    let (_, routes) = journaled(derived);
    if routes.is_empty() {
        return col("escalations", None, "none recorded: no person was asked");
    }
    let steps: Vec<String> = routes
        .iter()
        .map(|r| match r.step.kind {
            RouteKind::Escalated => format!(
                "escalated to {} (level {}, {})",
                r.step.group, r.step.level, r.step.reason
            ),
            RouteKind::Repair => format!(
                "returned to {} as a repair of {}",
                r.step.group,
                r.step.repair_of.as_deref().unwrap_or("?")
            ),
            _ => format!("routed to {} ({})", r.step.group, r.step.reason),
        })
        .collect();
    let n = derived.escalations.len();
    col(
        "escalations",
        Some(true),
        format!("{n}: {}", steps.join("; ")),
    )
}
