//! The reads the rules stand on — lease, premises, repairs, lookup — each fenced against errors
//! and panics: a source that fails never lets a send through.

use std::panic::{AssertUnwindSafe, catch_unwind};

use serde_json::{Value, json};

use crate::approval::Route;
use crate::core::budget::{self, BudgetCheck, OverBudget, Subject};
use crate::core::decide::diff;
use crate::core::limits::{Use, room};
use crate::core::{LeaseVerdict, LookupAnswer, Premises, Proposed, Recheck};
use crate::effect::EffectKey;
use crate::journal::{ReadsAhead, TxLeases, TxView, Verified};
use crate::lease::{Grant, LeaseError};
use crate::premise::PremiseError;
use crate::target::Looked;

use super::Bound;

/// R4 as of the journal's write transaction: the verdict on the lease and the budgets, and,
/// where it is live, what each budget the effect matched counted (for `DISPATCHED` to record).
pub(super) struct Authorization {
    /// The verdict.
    pub(super) verdict: LeaseVerdict,
    /// What each budget counted, when the verdict is live.
    pub(super) budgets: Vec<BudgetCheck>,
}

impl Bound {
    pub(super) fn lease_verdict(&self, first: &Proposed) -> LeaseVerdict {
        let now = self.now();
        let leases = &self.gate.leases;
        fenced(|| leases.check(&first.lease, &first.payload, now))
    }

    /// What [`Bound::authorization_in`] and [`Bound::lease_in`] read as of the journal's
    /// transaction: the lease and the key's route where the leases live in the journal's store
    /// ([`read_in`]), and the budgets, which always do.
    pub(super) fn reads_ahead<'a>(&self, first: &'a Proposed) -> ReadsAhead<'a> {
        let in_journal = self.gate.leases_in_journal;
        ReadsAhead {
            lease: in_journal.then_some(first.lease.as_str()),
            routes: in_journal,
            budgets: true,
        }
    }

    /// R4 as `AUTHORIZED` records it: the verdict on the lease and the grant it stands on (with
    /// the request's route, where a person was asked), both as of the journal's write
    /// transaction `tx` where the leases live in the journal's store (one read), else from the
    /// lease store while `tx` holds the journal's write lock; then the budgets, as of `tx`.
    pub(super) fn authorization_in(
        &self,
        tx: &TxView<'_>,
        key: &EffectKey,
        first: &Proposed,
    ) -> (Authorization, Value) {
        let (verdict, grant) = self.authorization_of(tx, key, first);
        (self.within_budgets(tx, key, first, verdict), grant)
    }

    fn authorization_of(
        &self,
        tx: &TxView<'_>,
        key: &EffectKey,
        first: &Proposed,
    ) -> (LeaseVerdict, Value) {
        let Some(leases) = tx.leases.filter(|_| self.gate.leases_in_journal) else {
            let store = &self.gate.leases;
            let grant = catch_unwind(AssertUnwindSafe(|| store.describe(&first.lease)));
            return (self.lease_of(tx, key, first), describe(grant, &[]));
        };
        let read = read_in(leases, key, first);
        let verdict = self.judge(key, first, &read);
        let routes = match &read {
            Ok(Ok(r)) => r.routes.clone(),
            _ => Vec::new(),
        };
        (verdict, describe(read.map(|r| r.map(|r| r.grant)), &routes))
    }

    /// The lease as of the journal's write transaction `tx`: read in it where the leases live
    /// in the journal's store, else from the lease store while the transaction holds the
    /// journal's write lock. Either way nothing after this read can precede the record. Then the
    /// budgets, as of `tx`.
    pub(super) fn lease_in(
        &self,
        tx: &TxView<'_>,
        key: &EffectKey,
        first: &Proposed,
    ) -> Authorization {
        let verdict = self.lease_of(tx, key, first);
        self.within_budgets(tx, key, first, verdict)
    }

    /// A live `verdict`, unless the effect would take a budget in force past its limit, as of
    /// the journal's write transaction `tx` (budgets live in the journal's store, wherever the
    /// leases are), with what each budget it matched counted. A budget that cannot be read is a
    /// verdict of its own: fail closed.
    fn within_budgets(
        &self,
        tx: &TxView<'_>,
        key: &EffectKey,
        first: &Proposed,
        verdict: LeaseVerdict,
    ) -> Authorization {
        let Some(leases) = tx.leases.filter(|_| verdict == LeaseVerdict::Live) else {
            return Authorization {
                verdict,
                budgets: Vec::new(),
            };
        };
        let mut checks = Vec::new();
        // The time the dispatch's records (and so its place) are written at: the window it is
        // checked in is the one it is counted in.
        let now = tx.now_ms;
        let read = catch_unwind(AssertUnwindSafe(
            || -> Result<Option<OverBudget>, LeaseError> {
                let subject = Subject {
                    payload: &first.payload,
                    target: &first.target,
                    labels: &first.labels,
                };
                for b in leases.budgets()? {
                    if !b.matches(&subject) {
                        continue;
                    }
                    let (bucket, since) = (b.bucket(&subject), b.window.since(now));
                    let asked = b.amount(&first.payload);
                    let tally = leases.budget_tally(&b.id, &bucket, since, key.as_str())?;
                    let check = BudgetCheck::of(&b, bucket.clone(), since, asked, &tally);
                    if check.fits() {
                        checks.push(check);
                        continue;
                    }
                    // It does not fit: the places themselves say when room frees up.
                    let holds = leases.budget_holds(&b.id, &bucket, since)?;
                    // Both reads are made under the counter's lock, which every change to its
                    // places and total takes, so they agree. Were a place given back between
                    // them anyway, the places read second would be the counter's truth: nothing
                    // can be added without the lock.
                    if let Err(over) = budget::room(&b, key.as_str(), asked, &holds, now) {
                        return Ok(Some(over));
                    }
                    let tally = budget::Tally::of(&holds, key.as_str(), since);
                    checks.push(BudgetCheck::of(&b, bucket, since, asked, &tally));
                }
                Ok(None)
            },
        ));
        let verdict = match read {
            Ok(Ok(None)) => {
                return Authorization {
                    verdict: LeaseVerdict::Live,
                    budgets: checks,
                };
            }
            Ok(Ok(Some(over))) => LeaseVerdict::OverBudget {
                reason: over.to_string(),
            },
            Ok(Err(e)) => LeaseVerdict::Error {
                message: format!("the budgets could not be read: {e}"),
            },
            Err(_) => LeaseVerdict::Error {
                message: "reading the budgets panicked".into(),
            },
        };
        Authorization {
            verdict,
            budgets: Vec::new(),
        }
    }

    fn lease_of(&self, tx: &TxView<'_>, key: &EffectKey, first: &Proposed) -> LeaseVerdict {
        if !self.gate.leases_in_journal {
            return self.lease_verdict(first);
        }
        let Some(leases) = tx.leases else {
            return LeaseVerdict::Error {
                message: "the journal keeps the leases but cannot read them inside its \
                          transaction"
                    .into(),
            };
        };
        self.judge(key, first, &read_in(leases, key, first))
    }

    /// The verdict on a grant and route read in the journal's transaction: a plain lease by its
    /// own terms, a signed approval by everything it stands for ([`crate::approval::verdict`]),
    /// and a lease that counts its uses by the uses its other keys hold as of the same
    /// transaction ([`crate::core::limits::room`]). A read that failed or panicked is a verdict
    /// of its own: fail closed.
    fn judge(&self, key: &EffectKey, first: &Proposed, read: &GrantRead) -> LeaseVerdict {
        match read {
            Ok(Ok(InTx {
                grant,
                routes,
                uses,
            })) => {
                // The directory as of now, where a person's approval is to be judged: one that
                // cannot be read judges nothing.
                let directory = match (&self.gate.approvers, grant.as_ref()) {
                    (Some(source), Some(g)) if g.approval.is_some() => {
                        match catch_unwind(AssertUnwindSafe(|| source.current())) {
                            Ok(Ok(d)) => Some(d),
                            Ok(Err(e)) => {
                                return LeaseVerdict::Error {
                                    message: format!("the approver directory: {e}"),
                                };
                            }
                            Err(_) => {
                                return LeaseVerdict::Error {
                                    message: "reading the approver directory panicked".into(),
                                };
                            }
                        }
                    }
                    _ => None,
                };
                let own = crate::approval::verdict(
                    &first.lease,
                    grant.as_ref(),
                    &crate::approval::Against {
                        directory: directory.as_deref(),
                        key: key.as_str(),
                        proposer: first.by.as_deref(),
                        target: Some(first.target.as_str()),
                        payload: &first.payload,
                        premises: &first.premises,
                        route: routes.last(),
                        now_ms: self.now(),
                    },
                );
                let limit = grant.as_ref().map(Grant::limit).unwrap_or_default();
                if own != LeaseVerdict::Live || !limit.limits() {
                    return own;
                }
                match room(
                    &first.lease,
                    &limit,
                    key.as_str(),
                    limit.amount(&first.payload),
                    uses,
                ) {
                    Ok(()) => LeaseVerdict::Live,
                    Err(reason) => LeaseVerdict::Spent { reason },
                }
            }
            Ok(Err(e)) => LeaseVerdict::Error {
                message: e.to_string(),
            },
            Err(_) => LeaseVerdict::Error {
                message: "the lease store panicked".into(),
            },
        }
    }

    /// R5 as of now: the premises read again and compared with the decision, with the time the
    /// read began (a dispatch is written only while that read is young enough) and how long it
    /// took.
    pub(super) fn read_premises(&self, key: &EffectKey, first: &Proposed) -> PremiseCheck {
        let premises = &self.premises;
        let read_at_ms = self.now();
        let began = std::time::Instant::now();
        let span = tracing::info_span!(
            "interlock.premises.read",
            moved = tracing::field::Empty,
            error = tracing::field::Empty
        );
        let read =
            span.in_scope(|| catch_unwind(AssertUnwindSafe(|| premises.read(key, &first.payload))));
        let took = began.elapsed();
        let (premises_now, error, unavailable) = match read {
            Ok(Ok(p)) => (p, None, false),
            Ok(Err(e)) => (
                Premises::new(),
                Some(e.to_string()),
                matches!(e, PremiseError::Unavailable(_)),
            ),
            Err(_) => (
                Premises::new(),
                Some("the premise reader panicked".to_owned()),
                false,
            ),
        };
        let (changes, broken) = if error.is_none() {
            (
                diff(&first.premises, &premises_now),
                self.broken_rules(first, &premises_now),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        span.record("moved", changes.len());
        if let Some(e) = &error {
            span.record("error", e.as_str());
        }
        PremiseCheck {
            premises_now,
            changes,
            broken,
            error,
            unavailable,
            read_at_ms,
            began,
            took,
        }
    }

    /// The last look a target takes just before its point of no return
    /// ([`crate::target::SendRequest::last_look`]): the lease judged as a dispatch judges it —
    /// where the journal keeps the leases, inside a journal transaction (that writes nothing),
    /// a signed approval by everything it stands for, the request's route included; else by the
    /// lease store's own check — then the premises against those decided. The key's own use of
    /// a limited lease was counted at its dispatch and stands; budgets are not counted again. A
    /// read that fails or panics is unreadable: the target must not land.
    pub(super) fn last_look(&self, key: &EffectKey, first: &Proposed, seen: &Verified) -> Looked {
        let lease = if self.gate.leases_in_journal {
            let mut verdict = None;
            let read = self.gate.append_after(key, seen, &mut |tx| {
                verdict = Some(self.lease_of(tx, key, first));
                Vec::new()
            });
            match (read, verdict) {
                (Ok(_), Some(v)) => v,
                (Err(e), _) => {
                    return Looked::Unreadable(format!("the journal could not be read: {e}"));
                }
                (Ok(_), None) => {
                    return Looked::Unreadable("the journal's transaction did not run".into());
                }
            }
        } else {
            self.lease_verdict(first)
        };
        match lease {
            LeaseVerdict::Live => {}
            LeaseVerdict::Dead { reason }
            | LeaseVerdict::Spent { reason }
            | LeaseVerdict::NotSpender { reason }
            | LeaseVerdict::OverBudget { reason } => {
                return Looked::Lapsed {
                    code: "lease_dead",
                    why: reason,
                };
            }
            LeaseVerdict::Error { message } => return Looked::Unreadable(message),
        }
        let check = self.read_premises(key, first);
        if let Some(e) = check.error {
            return Looked::Unreadable(format!("the premises could not be read: {e}"));
        }
        if !check.changes.is_empty() {
            let moved: Vec<&str> = check.changes.iter().map(|c| c.field.as_str()).collect();
            return Looked::Lapsed {
                code: "premise_moved",
                why: format!("premises moved since the dispatch: {}", moved.join(", ")),
            };
        }
        if !check.broken.is_empty() {
            return Looked::Lapsed {
                code: "premise_rule",
                why: crate::core::rules::describe(&check.broken),
            };
        }
        Looked::Holds
    }

    /// The rules `first` was proposed under and this binding's own, each judged once, that do
    /// not hold on `premises`. A journaled rule this build cannot read does not hold.
    fn broken_rules(
        &self,
        first: &Proposed,
        premises: &Premises,
    ) -> Vec<crate::core::rules::Broken> {
        let own = self.rules.iter().map(crate::core::rules::Rule::text);
        let journaled = first
            .rules
            .iter()
            .map(String::as_str)
            .filter(|t| !self.rules.iter().any(|r| r.text() == *t));
        crate::core::rules::judge_all(own.chain(journaled), premises, &first.payload)
    }

    /// Repairs the premise reader suggests for moved premises; the core keeps them only on a
    /// refusal with a live lease.
    pub(super) fn repair_candidates(
        &self,
        first: &Proposed,
        check: &PremiseCheck,
    ) -> Vec<crate::core::Repair> {
        if check.changes.is_empty() {
            return Vec::new();
        }
        let premises = &self.premises;
        catch_unwind(AssertUnwindSafe(|| {
            premises.repairs(&first.payload, &check.premises_now)
        }))
        .unwrap_or_default()
    }

    pub(super) fn lookup(&self, key: &EffectKey, payload: &Value) -> LookupAnswer {
        let target = &self.target;
        let span = tracing::info_span!("interlock.lookup", found = tracing::field::Empty);
        let answer = span.in_scope(|| {
            catch_unwind(AssertUnwindSafe(|| target.lookup(key, payload)))
                .unwrap_or_else(|_| LookupAnswer::Unknown("the target panicked in lookup".into()))
        });
        span.record(
            "found",
            match &answer {
                LookupAnswer::Found(_) => "found",
                LookupAnswer::Several(_) => "several",
                LookupAnswer::NotFound => "not_found",
                LookupAnswer::Unknown(_) => "unknown",
            },
        );
        answer
    }
}

/// What a decision on a lease reads in the journal's transaction.
struct InTx {
    /// The grant, if there is one.
    grant: Option<Grant>,
    /// The request's route.
    routes: Vec<Route>,
    /// The uses the lease's keys hold, when it counts them.
    uses: Vec<Use>,
}

/// A grant, the request's route and the lease's uses, read in the journal's transaction.
type GrantRead = std::thread::Result<Result<InTx, LeaseError>>;

/// `first`'s lease, `key`'s route and (when the lease counts them) the lease's uses as of the
/// transaction `leases` reads in; a panic is kept as one, for [`Bound::judge`] to fail closed on.
fn read_in(leases: &dyn TxLeases, key: &EffectKey, first: &Proposed) -> GrantRead {
    catch_unwind(AssertUnwindSafe(|| {
        let grant = leases.grant(&first.lease)?;
        let routes = leases.routes(key.as_str())?;
        let uses = match &grant {
            Some(g) if g.limit().limits() => leases.uses(&first.lease)?,
            _ => Vec::new(),
        };
        Ok(InTx {
            grant,
            routes,
            uses,
        })
    }))
}

/// The grant as `AUTHORIZED` records it, with the request's route when a person was asked:
/// evidence only, so a read that failed is recorded as such.
fn describe(
    read: std::thread::Result<Result<Option<Grant>, LeaseError>>,
    routes: &[Route],
) -> Value {
    match read {
        Ok(Ok(Some(g))) => {
            let mut v = serde_json::to_value(g).unwrap_or(Value::Null);
            if let (Some(obj), false) = (v.as_object_mut(), routes.is_empty()) {
                obj.insert(
                    "routes".into(),
                    serde_json::to_value(routes).unwrap_or(Value::Null),
                );
            }
            v
        }
        Ok(Ok(None)) => Value::Null,
        Ok(Err(LeaseError::Store(e) | LeaseError::Invalid(e))) => json!({ "error": e }),
        Ok(Err(e @ LeaseError::Journal(_))) => json!({ "error": e.to_string() }),
        Err(_) => json!({ "error": "the lease store panicked" }),
    }
}

/// A lease check whose error or panic is a verdict of its own: fail closed.
fn fenced(check: impl FnOnce() -> Result<LeaseVerdict, LeaseError>) -> LeaseVerdict {
    match catch_unwind(AssertUnwindSafe(check)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => LeaseVerdict::Error {
            message: e.to_string(),
        },
        Err(_) => LeaseVerdict::Error {
            message: "the lease store panicked".into(),
        },
    }
}

/// What a premise read found, before the lease is read in the transaction.
pub(super) struct PremiseCheck {
    premises_now: Premises,
    changes: Vec<crate::core::Change>,
    /// The rules that do not hold on `premises_now`.
    broken: Vec<crate::core::rules::Broken>,
    error: Option<String>,
    unavailable: bool,
    /// When the read began, by the gate's clock.
    read_at_ms: i64,
    /// When the read began, by the monotonic clock.
    began: std::time::Instant,
    /// How long the read took, by the monotonic clock.
    took: std::time::Duration,
}

impl PremiseCheck {
    /// R4 and R5 together, once the lease is known, as written at `now_ms` (the wall clock read
    /// inside the write transaction). The read's time is journaled as the earlier of the wall
    /// clock's reading before it and `now_ms` less the time since by the monotonic clock, so a
    /// wall clock stepped back during a stall does not make an old read look young.
    pub(super) fn with_lease(&self, lease: Authorization, now_ms: i64) -> Recheck {
        let since = i64::try_from(self.began.elapsed().as_millis()).unwrap_or(i64::MAX);
        Recheck {
            lease: lease.verdict,
            budgets: lease.budgets,
            premises_now: self.premises_now.clone(),
            changes: self.changes.clone(),
            broken: self.broken.clone(),
            premise_error: self.error.clone(),
            read_at_ms: Some(self.read_at_ms.min(now_ms.saturating_sub(since))),
        }
    }

    /// How long the read took.
    pub(super) fn took(&self) -> std::time::Duration {
        self.took
    }

    /// The premise source's error when it may pass (unreachable, not wrong).
    pub(super) fn unavailable(&self) -> Option<&str> {
        self.error.as_deref().filter(|_| self.unavailable)
    }
}
