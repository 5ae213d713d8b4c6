//! Authority, checked live. A lease is looked up at submit, at dispatch and before every resend,
//! so revoking it stops every send that has not yet gone out — including resends after a crash.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::{Route, RouteStep, SignedApproval};
use crate::core::LeaseVerdict;
use crate::core::limits::UseLimit;

/// One grant of authority.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Grant {
    /// Lease id.
    pub id: String,
    /// Who approved it.
    pub approver: String,
    /// Fields the payload must carry with exactly these values (e.g. the payment intent).
    pub scope: serde_json::Map<String, Value>,
    /// A numeric payload field the lease caps, and the cap (e.g. `amount` ≤ 2000).
    pub cap: Option<(String, i64)>,
    /// When granted (ms since the epoch).
    pub granted_ms: i64,
    /// When it lapses, if ever.
    pub expires_ms: Option<i64>,
    /// When revoked, if it was.
    pub revoked_ms: Option<i64>,
    /// The signed approval this lease is, when a person approved it
    /// ([`crate::approval`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<SignedApproval>,
    /// How many effect keys may be dispatched under it; `None` for any number (every lease
    /// granted before uses were counted, and one granted with [`Grant::unlimited`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u32>,
    /// A payload field whose values, over every key dispatched under it, add up to at most
    /// this much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<(String, i64)>,
    /// The principals who may spend it ([`crate::core::Proposed::by`]); empty: whoever holds
    /// its id, as before principals were journaled. A spend proposed by anyone else is refused
    /// `lease_caller`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spenders: Vec<String>,
    /// The targets it may be spent on ([`crate::core::Proposed::target`]); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

impl Grant {
    /// A grant with no scope, no cap and no expiry, made now (`granted_ms`), spent by the first
    /// effect key dispatched under it ([`Grant::uses`] and [`Grant::unlimited`] say otherwise).
    pub fn new(id: impl Into<String>, approver: impl Into<String>, granted_ms: i64) -> Self {
        Self {
            id: id.into(),
            approver: approver.into(),
            scope: serde_json::Map::new(),
            cap: None,
            granted_ms,
            expires_ms: None,
            revoked_ms: None,
            approval: None,
            uses: Some(1),
            total: None,
            spenders: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// Allow `n` effect keys (at least one) to be dispatched under it.
    pub fn uses(mut self, n: u32) -> Self {
        self.uses = Some(n);
        self
    }

    /// Allow any number of effect keys: the lease stands for a standing rule, not one decision.
    pub fn unlimited(mut self) -> Self {
        self.uses = None;
        self
    }

    /// Let the payload's integer `field` add up to at most `max` over every key dispatched
    /// under it. With no number of uses stated ([`Grant::unlimited`]), the total alone limits it.
    pub fn total(mut self, field: impl Into<String>, max: i64) -> Self {
        self.total = Some((field.into(), max));
        self
    }

    /// What it allows across keys.
    pub fn limit(&self) -> UseLimit {
        UseLimit {
            uses: self.uses,
            total: self.total.clone(),
        }
    }

    /// The lease a signed approval is: named by the approval's id, in its approver's name,
    /// lapsing when it does. Everything else it stands for is checked by
    /// [`crate::approval::verdict`].
    pub fn approved(approval: SignedApproval, granted_ms: i64) -> Self {
        Self {
            id: approval.id(),
            approver: approval.statement.approver.clone(),
            scope: serde_json::Map::new(),
            cap: None,
            granted_ms,
            expires_ms: Some(approval.statement.expires_ms),
            revoked_ms: None,
            approval: Some(approval),
            // An approval is bound to its request: one key, however it is counted.
            uses: None,
            total: None,
            spenders: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// Bind the lease to one request: it authorizes the effect with key `request` and no other.
    /// Judged where the key is known (a gate whose leases are in its journal); anywhere else the
    /// lease cannot be judged and lets nothing through.
    pub fn for_request(mut self, request: impl Into<String>) -> Self {
        self.scope
            .insert(REQUEST_SCOPE.into(), Value::String(request.into()));
        self
    }

    /// The request the lease is bound to, if it is ([`Grant::for_request`]).
    pub fn request(&self) -> Option<&str> {
        self.scope.get(REQUEST_SCOPE).and_then(Value::as_str)
    }

    /// Require the payload's `field` to equal `value`.
    pub fn scope(mut self, field: impl Into<String>, value: impl Into<Value>) -> Self {
        self.scope.insert(field.into(), value.into());
        self
    }

    /// Cap the payload's integer `field` at `max`.
    pub fn cap(mut self, field: impl Into<String>, max: i64) -> Self {
        self.cap = Some((field.into(), max));
        self
    }

    /// Lapse at `expires_ms`.
    pub fn expires(mut self, expires_ms: i64) -> Self {
        self.expires_ms = Some(expires_ms);
        self
    }

    /// Let only `principal` (and any other spender named) spend it: an effect proposed by
    /// anyone else is refused `lease_caller`, whoever learned the lease's id. Judged where the
    /// proposer is known (a gate whose leases are in its journal).
    pub fn spender(mut self, principal: impl Into<String>) -> Self {
        let p = principal.into();
        if !self.spenders.contains(&p) {
            self.spenders.push(p);
        }
        self
    }

    /// Let it be spent on `target` only (and any other target named): an effect proposed for
    /// another target is refused `lease`. Judged where the effect's target is known (a gate
    /// whose leases are in its journal).
    pub fn on_target(mut self, target: impl Into<String>) -> Self {
        let t = target.into();
        if !self.targets.contains(&t) {
            self.targets.push(t);
        }
        self
    }

    /// Whether it may be spent on `target`: any target when it names none.
    pub fn covers_target(&self, target: &str) -> bool {
        self.targets.is_empty() || self.targets.iter().any(|t| t == target)
    }

    /// Whether `proposer` may spend it: any proposer when it names no spender, else only one
    /// it names.
    pub fn spendable_by(&self, proposer: Option<&str>) -> bool {
        self.spenders.is_empty() || proposer.is_some_and(|p| self.spenders.iter().any(|s| s == p))
    }

    /// Whether this grant allows `payload` at `now_ms`, and if not, why.
    pub fn verdict(&self, payload: &Value, now_ms: i64) -> LeaseVerdict {
        let dead = |reason: String| LeaseVerdict::Dead { reason };
        if let Some(at) = self.revoked_ms {
            return dead(format!("lease {} was revoked at {at}", self.id));
        }
        if let Some(at) = self.expires_ms.filter(|at| now_ms >= *at) {
            return dead(format!("lease {} expired at {at}", self.id));
        }
        // The request binding is judged with the key, by `approval::verdict`.
        for (field, want) in self.scope.iter().filter(|(f, _)| *f != REQUEST_SCOPE) {
            let got = payload.get(field).unwrap_or(&Value::Null);
            if got != want {
                return dead(format!(
                    "lease {} covers {field} = {want}, not {got}",
                    self.id
                ));
            }
        }
        if let Some((field, cap)) = &self.cap {
            match payload.get(field).and_then(Value::as_i64) {
                Some(v) if v <= *cap => {}
                Some(v) => {
                    return dead(format!(
                        "lease {} caps {field} at {cap}; asked {v}",
                        self.id
                    ));
                }
                None => {
                    return dead(format!(
                        "lease {} caps {field}, but the payload has no integer {field}",
                        self.id
                    ));
                }
            }
        }
        LeaseVerdict::Live
    }
}

/// The scope field that binds a lease to one request (one effect key). A reader that does not
/// know it compares it with a payload field, which a caller's payload could carry; a grant made
/// with [`Grant::new`] also allows one use, and is stored in a form such a reader cannot parse
/// ([`LIMITED_SCOPE`]), so only a request-bound grant made `unlimited` relies on the comparison.
pub const REQUEST_SCOPE: &str = "interlock_request";

/// What a signed approval's `scope` column holds: not JSON, so a reader that does not know the
/// `approval` column fails to read the lease (an error: it retries, sending and refusing
/// nothing) rather than judging it.
const APPROVAL_SCOPE: &str = "(a signed approval: read it with a release that knows approvals)";

/// How the `scope` column of a lease that counts its uses begins: not JSON, so a reader that does
/// not know limits (a worker of the previous release) fails to read the lease (an error: it
/// retries, sending and refusing nothing) rather than judging it by its scope alone. A field in
/// the scope would not do: the payload is the caller's, and a caller could carry that field.
pub const LIMITED_SCOPE: &str =
    "(a lease that counts its uses: read it with a release that knows limits) ";

/// How the `scope` column of a lease that names its spenders or its targets begins: not JSON,
/// and not [`LIMITED_SCOPE`], so a reader that does not know them fails to read the lease (an
/// error: it retries, sending and refusing nothing) rather than letting anyone spend it
/// anywhere.
pub const SPENDERS_SCOPE: &str =
    "(a lease that names who may spend it: read it with a release that knows spenders) ";

/// How the `scope` column of a lease that names the targets it may be spent on begins (with its
/// spenders too, if it names any): not [`SPENDERS_SCOPE`], so no reader that knows spenders but
/// not targets reads it and lets it be spent on any target.
pub const TARGETS_SCOPE: &str =
    "(a lease that names where it may be spent: read it with a release that knows targets) ";

/// The cap a signed approval is stored with, on a field no payload has: a reader that does not
/// know the `approval` column (a worker of the previous release, after the journal's schema was
/// upgraded under it) sees a lease that allows nothing, never an unlimited one.
pub const APPROVAL_SENTINEL: &str = "interlock_signed_approval_only";

/// A grant as a store keeps it: the scope as JSON text, the cap as two columns.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredGrant {
    /// Lease id.
    pub id: String,
    /// Who approved it.
    pub approver: String,
    /// The scope as a JSON object.
    pub scope: String,
    /// The capped field, if any.
    pub cap_field: Option<String>,
    /// The cap, if any.
    pub cap: Option<i64>,
    /// When granted.
    pub granted_ms: i64,
    /// When it lapses.
    pub expires_ms: Option<i64>,
    /// When revoked.
    pub revoked_ms: Option<i64>,
    /// The signed approval as JSON, if a person approved.
    pub approval: Option<String>,
}

impl StoredGrant {
    /// The columns for `grant`, if it can be stored (it needs an id).
    pub fn of(grant: &Grant) -> Result<Self, LeaseError> {
        if grant.id.is_empty() {
            return Err(LeaseError::Invalid("a lease needs a non-empty id".into()));
        }
        if let Some(a) = grant.approval.as_ref().filter(|a| a.id() != grant.id) {
            return Err(LeaseError::Invalid(format!(
                "lease {} carries approval {}: an approval is granted under its own id",
                grant.id,
                a.id()
            )));
        }
        check_limit(grant)?;
        let invalid =
            |e: serde_json::Error| LeaseError::Invalid(format!("lease {}: {e}", grant.id));
        let scope = if grant.approval.is_some() {
            APPROVAL_SCOPE.to_owned()
        } else if !grant.spenders.is_empty() || !grant.targets.is_empty() {
            let mut all = serde_json::json!({
                "scope": grant.scope,
                "spenders": grant.spenders,
                "targets": grant.targets,
            });
            if grant.limit().limits() {
                all["limit"] = limit_json(grant);
            }
            let prefix = if grant.targets.is_empty() {
                SPENDERS_SCOPE
            } else {
                TARGETS_SCOPE
            };
            format!("{prefix}{}", serde_json::to_string(&all).map_err(invalid)?)
        } else if grant.limit().limits() {
            let both = serde_json::json!({ "scope": grant.scope, "limit": limit_json(grant) });
            format!(
                "{LIMITED_SCOPE}{}",
                serde_json::to_string(&both).map_err(invalid)?
            )
        } else {
            serde_json::to_string(&grant.scope).map_err(invalid)?
        };
        let (cap_field, cap) = match (&grant.cap, &grant.approval) {
            (_, Some(_)) => (Some(APPROVAL_SENTINEL.to_owned()), Some(0)),
            (Some((f, c)), None) => (Some(f.clone()), Some(*c)),
            (None, None) => (None, None),
        };
        let approval = grant
            .approval
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| LeaseError::Invalid(format!("lease {}: {e}", grant.id)))?;
        Ok(Self {
            id: grant.id.clone(),
            approver: grant.approver.clone(),
            scope,
            cap_field,
            cap,
            granted_ms: grant.granted_ms,
            expires_ms: grant.expires_ms,
            revoked_ms: grant.revoked_ms,
            approval,
        })
    }

    /// The grant these columns hold; an unreadable scope is a store error naming the lease.
    pub fn into_grant(self) -> Result<Grant, LeaseError> {
        let unreadable =
            |what: String| LeaseError::Store(format!("lease {} has an unreadable {what}", self.id));
        let (mut spenders, mut targets) = (Vec::new(), Vec::new());
        let (scope, (uses, total)): (serde_json::Map<String, Value>, Limit) =
            if self.approval.is_some() {
                (serde_json::Map::new(), (None, None))
            } else if let Some(all) = self
                .scope
                .strip_prefix(SPENDERS_SCOPE)
                .or_else(|| self.scope.strip_prefix(TARGETS_SCOPE))
            {
                let v: Value =
                    serde_json::from_str(all).map_err(|e| unreadable(format!("scope: {e}")))?;
                // A part this release does not know could only be under-enforced: unreadable.
                if v.as_object().is_none_or(|o| {
                    o.keys()
                        .any(|k| !matches!(k.as_str(), "scope" | "spenders" | "targets" | "limit"))
                }) {
                    return Err(unreadable(format!("scope: {v}")));
                }
                let scope = v
                    .get("scope")
                    .and_then(Value::as_object)
                    .cloned()
                    .ok_or_else(|| unreadable(format!("scope: {v}")))?;
                // A part left out names nothing; one that is there must be a list of names.
                let names = |key: &str| -> Result<Vec<String>, LeaseError> {
                    match v.get(key) {
                        None => Ok(Vec::new()),
                        Some(list) => list
                            .as_array()
                            .and_then(|a| {
                                a.iter()
                                    .map(|p| p.as_str().map(str::to_owned))
                                    .collect::<Option<Vec<_>>>()
                            })
                            .ok_or_else(|| unreadable(format!("{key}: {v}"))),
                    }
                };
                spenders = names("spenders")?;
                targets = names("targets")?;
                if spenders.is_empty() && targets.is_empty() {
                    return Err(unreadable(format!("spenders: {v}")));
                }
                let limit = match v.get("limit") {
                    None => (None, None),
                    Some(l) => read_limit(l).ok_or_else(|| unreadable(format!("limit: {v}")))?,
                };
                (scope, limit)
            } else if let Some(both) = self.scope.strip_prefix(LIMITED_SCOPE) {
                let v: Value =
                    serde_json::from_str(both).map_err(|e| unreadable(format!("scope: {e}")))?;
                let scope = v
                    .get("scope")
                    .and_then(Value::as_object)
                    .cloned()
                    .ok_or_else(|| unreadable(format!("scope: {v}")))?;
                let limit = v
                    .get("limit")
                    .and_then(read_limit)
                    .ok_or_else(|| unreadable(format!("limit: {v}")))?;
                (scope, limit)
            } else {
                let scope = serde_json::from_str(&self.scope)
                    .map_err(|e| unreadable(format!("scope: {e}")))?;
                (scope, (None, None))
            };
        let approval: Option<SignedApproval> = self
            .approval
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| {
                LeaseError::Store(format!("lease {} has an unreadable approval: {e}", self.id))
            })?;
        let cap = match (self.cap_field, self.cap) {
            (Some(f), Some(_)) if f == APPROVAL_SENTINEL && approval.is_some() => None,
            (Some(f), Some(c)) => Some((f, c)),
            _ => None,
        };
        Ok(Grant {
            id: self.id,
            approver: self.approver,
            scope,
            cap,
            granted_ms: self.granted_ms,
            expires_ms: self.expires_ms,
            revoked_ms: self.revoked_ms,
            approval,
            uses,
            total,
            spenders,
            targets,
        })
    }

    /// The error for granting an id that exists.
    pub fn exists(id: &str) -> LeaseError {
        LeaseError::Invalid(format!(
            "lease {id} already exists: revoke it and grant a new id"
        ))
    }
}

/// A limit that can be kept: at least one use, a total over a named field that is not negative,
/// and none on a signed approval (bound to its one request already).
fn check_limit(grant: &Grant) -> Result<(), LeaseError> {
    let bad = |what: &str| Err(LeaseError::Invalid(format!("lease {}: {what}", grant.id)));
    if grant.uses == Some(0) {
        return bad("a lease allows at least one use (revoke it to allow none)");
    }
    match &grant.total {
        Some((field, _)) if field.is_empty() => return bad("a total needs a payload field"),
        Some((field, max)) if *max < 0 => {
            return bad(&format!("the total over {field} cannot be negative"));
        }
        _ => {}
    }
    if grant.approval.is_some() && grant.limit().limits() {
        return bad("a signed approval is bound to its request; it takes no uses or total");
    }
    if grant.approval.is_some() && !grant.spenders.is_empty() {
        return bad("a signed approval is bound to its request; it names no spenders");
    }
    if grant.spenders.iter().any(|p| p.trim().is_empty()) {
        return bad("a spender is a principal's name, not empty");
    }
    if grant.approval.is_some() && !grant.targets.is_empty() {
        return bad("a signed approval is bound to its request; it names no targets");
    }
    if grant.targets.iter().any(|t| t.trim().is_empty()) {
        return bad("a target is a target's name, not empty");
    }
    Ok(())
}

/// A grant's limit as [`LIMITED_SCOPE`] stores it.
fn limit_json(grant: &Grant) -> Value {
    let mut m = serde_json::Map::new();
    if let Some(n) = grant.uses {
        m.insert("uses".into(), n.into());
    }
    if let Some((field, max)) = &grant.total {
        m.insert("total_field".into(), field.clone().into());
        m.insert("total".into(), (*max).into());
    }
    Value::Object(m)
}

type Limit = (Option<u32>, Option<(String, i64)>);

/// [`limit_json`] read back; `None` when it is not one, or carries a limit this release does not
/// know (which it could only under-enforce).
fn read_limit(v: &Value) -> Option<Limit> {
    let m = v.as_object()?;
    if m.keys()
        .any(|k| !matches!(k.as_str(), "uses" | "total_field" | "total"))
    {
        return None;
    }
    let uses = match m.get("uses") {
        None => None,
        Some(n) => Some(u32::try_from(n.as_u64()?).ok()?),
    };
    let total = match (m.get("total_field"), m.get("total")) {
        (None, None) => None,
        (Some(f), Some(t)) => Some((f.as_str()?.to_owned(), t.as_i64()?)),
        _ => return None,
    };
    (uses.is_some() || total.is_some()).then_some((uses, total))
}

/// Errors from a lease store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The store could not be read or written.
    #[error("lease store failed: {0}")]
    Store(String),
    /// A grant that cannot be made (bad scope, bad cap).
    #[error("invalid lease: {0}")]
    Invalid(String),
    /// The journal that keeps the leases failed; whether trying again may help is its to say
    /// ([`crate::journal::JournalError::is_transient`]).
    #[error("lease store failed: {0}")]
    Journal(crate::journal::JournalError),
}

impl From<crate::journal::JournalError> for LeaseError {
    fn from(e: crate::journal::JournalError) -> Self {
        Self::Journal(e)
    }
}

/// The verdict on lease `id` (as recorded, if ever granted) for `payload` at `now_ms`.
///
/// A signed approval cannot be judged here (only [`crate::approval::verdict`], with the approver
/// directory and the request's route, can say it holds): an error, so nothing is sent.
pub fn verdict_of(grant: Option<&Grant>, id: &str, payload: &Value, now_ms: i64) -> LeaseVerdict {
    match grant {
        Some(g) if g.approval.is_some() => LeaseVerdict::Error {
            message: format!(
                "lease {id} is a signed approval; it holds only for a gate that checks it \
                 against the approver directory (Gate::with_approvers)"
            ),
        },
        Some(g) if g.limit().limits() => LeaseVerdict::Error {
            message: format!(
                "lease {id} limits its uses across keys; it holds only for a gate that keeps \
                 its leases in the journal, where the uses are counted"
            ),
        },
        Some(g) if !g.spenders.is_empty() || !g.targets.is_empty() => LeaseVerdict::Error {
            message: format!(
                "lease {id} names who may spend it or where; it holds only for a gate that \
                 knows who proposed the effect and for which target (keep the leases in the \
                 journal)"
            ),
        },
        Some(g) if g.request().is_some() => LeaseVerdict::Error {
            message: format!(
                "lease {id} is bound to one request; it holds only for a gate that knows the \
                 effect's key (keep the leases in the journal)"
            ),
        },
        Some(g) => g.verdict(payload, now_ms),
        None => LeaseVerdict::Dead {
            reason: format!("no lease named {id} was ever granted"),
        },
    }
}

/// Where leases live.
pub trait LeaseStore: Send + Sync {
    /// Whether lease `id` is live at `now_ms` and covers `payload`. Unknown ids are dead.
    fn check(&self, id: &str, payload: &Value, now_ms: i64) -> Result<LeaseVerdict, LeaseError>;

    /// The grant as recorded, for the journal's `AUTHORIZED` record.
    fn describe(&self, id: &str) -> Result<Option<Grant>, LeaseError>;

    /// The journal store that keeps these leases ([`crate::journal::Journal::store_id`]), if
    /// any: the gate then reads the lease inside the transaction that writes the send's record.
    fn kept_in(&self) -> Option<&str> {
        None
    }
}

/// A lease store that grants and revokes too: the journal's own leases, on whichever store.
pub trait LeaseAdmin: LeaseStore {
    /// Record a new grant. Granting an id twice is an error: revoke and grant a new id instead.
    fn grant_lease(&self, grant: &Grant) -> Result<(), LeaseError>;

    /// Revoke a lease now. Returns false when no live lease has that id. Once this returns, no
    /// send under the lease is dispatched.
    fn revoke_lease(&self, id: &str) -> Result<bool, LeaseError>;

    /// Every grant, oldest first.
    fn leases(&self) -> Result<Vec<Grant>, LeaseError>;

    /// Append `step` to `request`'s route ([`crate::approval::next_step`]): a step already
    /// journaled is answered with itself, so a retried workflow step records nothing twice.
    fn route(&self, request: &str, step: &RouteStep) -> Result<Route, LeaseError>;

    /// `request`'s route, first step first.
    fn routes(&self, request: &str) -> Result<Vec<Route>, LeaseError>;

    /// The latest step of every request ever routed to a person, oldest request first: where
    /// each one is now.
    fn route_heads(&self) -> Result<Vec<Route>, LeaseError>;

    /// The uses lease `id`'s keys hold now ([`Grant::uses`], [`Grant::total`]), oldest first.
    fn lease_uses(&self, id: &str) -> Result<Vec<crate::core::limits::Use>, LeaseError>;

    /// Set a budget (a new one, or a new version of one), journaled with who set it.
    fn set_budget(
        &self,
        budget: &crate::budget::Budget,
        by: &str,
    ) -> Result<crate::budget::BudgetChange, LeaseError>;

    /// Remove budget `id`, journaled with who removed it; `None` when none by that id is in
    /// force.
    fn remove_budget(
        &self,
        id: &str,
        by: &str,
    ) -> Result<Option<crate::budget::BudgetChange>, LeaseError>;

    /// Every change to every budget, by id, oldest first.
    fn budget_changes(&self) -> Result<Vec<crate::budget::BudgetChange>, LeaseError>;

    /// The places budget `id` holds from `since_ms` on, each with its counter's bucket.
    fn budget_places(
        &self,
        id: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, crate::budget::Hold)>, LeaseError>;
}

/// The budgets in force: each id's latest change, unless it removed the budget.
pub fn in_force(changes: &[crate::budget::BudgetChange]) -> Vec<crate::budget::Budget> {
    let mut latest: std::collections::BTreeMap<&str, &crate::budget::BudgetChange> =
        std::collections::BTreeMap::new();
    for c in changes {
        let e = latest.entry(c.id.as_str()).or_insert(c);
        if c.n >= e.n {
            *e = c;
        }
    }
    latest
        .into_values()
        .filter_map(|c| c.budget.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn grant() -> Grant {
        Grant {
            targets: Vec::new(),
            spenders: Vec::new(),
            id: "case-4471".into(),
            approver: "ana@support".into(),
            scope: json!({"payment_intent": "pi_1"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            cap: Some(("amount".into(), 2000)),
            granted_ms: 0,
            expires_ms: Some(100),
            revoked_ms: None,
            approval: None,
            uses: Some(1),
            total: None,
        }
    }

    #[test]
    fn a_signed_approval_read_without_its_approval_column_allows_nothing() {
        let statement = crate::approval::Statement {
            request: "req-1".into(),
            group: "support".into(),
            level: 0,
            approver: "ana".into(),
            payload: json!({"payment_intent": "pi_1", "amount": 2000}),
            premises: crate::core::Premises::new(),
            issued_ms: 0,
            expires_ms: 100,
            repair_of: None,
        };
        let approval = crate::approval::ApproverKey::from_seed("ana", [1; 32])
            .sign(statement)
            .unwrap();
        let stored = StoredGrant::of(&Grant::approved(approval, 0)).unwrap();
        // Read back in full: the sentinel is the store's, not the grant's.
        assert_eq!(stored.clone().into_grant().unwrap().cap, None);
        // Read as the previous release did, without the column: the lease cannot be read, so
        // that reader retries, sending and refusing nothing.
        let old = StoredGrant {
            approval: None,
            ..stored
        }
        .into_grant();
        assert!(matches!(old, Err(LeaseError::Store(_))), "{old:?}");
    }

    #[test]
    fn a_limited_lease_round_trips_and_a_reader_without_limits_cannot_read_it() {
        let g = grant().uses(3).total("amount", 6000);
        let stored = StoredGrant::of(&g).unwrap();
        assert_eq!(stored.clone().into_grant().unwrap(), g);
        // The previous release parses the scope column as JSON: it fails, so that reader
        // retries and sends nothing, whatever the payload carries.
        assert!(serde_json::from_str::<Value>(&stored.scope).is_err());
        // A limit this release does not know is not read as no limit.
        let unknown = stored
            .scope
            .replace("\"uses\":3", "\"uses\":3,\"per_day\":1");
        let read = StoredGrant {
            scope: unknown,
            ..stored
        }
        .into_grant();
        assert!(matches!(read, Err(LeaseError::Store(_))), "{read:?}");
        // A standing lease is stored as before.
        let plain = StoredGrant::of(&grant().unlimited()).unwrap();
        assert!(serde_json::from_str::<Value>(&plain.scope).is_ok());
        assert!(StoredGrant::of(&grant().uses(0)).is_err());
    }

    #[test]
    fn a_lease_naming_its_spenders_round_trips_and_no_earlier_reader_lets_anyone_spend_it() {
        for g in [
            grant().unlimited().spender("alice").spender("bob"),
            grant().uses(2).total("amount", 900).spender("alice"),
        ] {
            let stored = StoredGrant::of(&g).unwrap();
            assert_eq!(stored.clone().into_grant().unwrap(), g);
            // Neither a reader of plain scopes nor one that knows limits can read it: each
            // fails, retries and sends nothing, rather than letting any caller spend it.
            assert!(serde_json::from_str::<Value>(&stored.scope).is_err());
            assert!(!stored.scope.starts_with(LIMITED_SCOPE));
        }
        let g = grant().unlimited().spender("alice");
        assert!(g.spendable_by(Some("alice")));
        assert!(!g.spendable_by(Some("mallory")));
        assert!(!g.spendable_by(None), "no principal is not every principal");
        assert!(
            grant().spendable_by(None),
            "a lease naming none is anyone's"
        );
        // Where the proposer is not known, the lease cannot be judged: nothing is sent.
        let ok = json!({"payment_intent": "pi_1", "amount": 5});
        assert!(matches!(
            verdict_of(Some(&g), "case-4471", &ok, 0),
            LeaseVerdict::Error { .. }
        ));
        assert!(StoredGrant::of(&grant().spender(" ")).is_err());
        // A lease naming targets alone round-trips the same way, and says where it holds.
        let on = grant().unlimited().on_target("refunds");
        let stored = StoredGrant::of(&on).unwrap();
        // Under a prefix of its own: a reader that knows spenders but not targets fails on it.
        assert!(stored.scope.starts_with(TARGETS_SCOPE));
        assert_eq!(stored.clone().into_grant().unwrap(), on);
        assert!(on.covers_target("refunds") && !on.covers_target("payouts"));
        // A part a later release adds is not ignored here: the lease is unreadable.
        let later = StoredGrant {
            scope: stored
                .scope
                .replace("\"targets\"", "\"per_hour\":1,\"targets\""),
            ..stored
        };
        assert!(matches!(later.into_grant(), Err(LeaseError::Store(_))));
    }

    #[test]
    fn a_lease_bound_to_a_request_is_judged_only_where_the_key_is_known() {
        let g = Grant::new("rules-r1", "rules", 0)
            .scope("payment_intent", "pi_1")
            .for_request("r1");
        assert_eq!(g.request(), Some("r1"));
        let payload = json!({"payment_intent": "pi_1", "amount": 5});
        assert_eq!(g.verdict(&payload, 0), LeaseVerdict::Live);
        assert!(matches!(
            verdict_of(Some(&g), "rules-r1", &payload, 0),
            LeaseVerdict::Error { .. }
        ));
    }

    #[test]
    fn a_grant_covers_only_its_scope_up_to_its_cap_until_it_lapses() {
        let g = grant();
        let ok = json!({"payment_intent": "pi_1", "amount": 2000});
        assert_eq!(g.verdict(&ok, 0), LeaseVerdict::Live);
        assert!(matches!(g.verdict(&ok, 100), LeaseVerdict::Dead { .. }));
        assert!(matches!(
            g.verdict(&json!({"payment_intent": "pi_2", "amount": 1}), 0),
            LeaseVerdict::Dead { .. }
        ));
        assert!(matches!(
            g.verdict(&json!({"payment_intent": "pi_1", "amount": 3000}), 0),
            LeaseVerdict::Dead { .. }
        ));
        assert!(matches!(
            g.verdict(&json!({"payment_intent": "pi_1"}), 0),
            LeaseVerdict::Dead { .. }
        ));
        let revoked = Grant {
            revoked_ms: Some(5),
            ..g
        };
        assert!(matches!(revoked.verdict(&ok, 0), LeaseVerdict::Dead { .. }));
    }
}
