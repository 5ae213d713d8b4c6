//! The approvals' scoreboard, counted from the journal alone — the routes, the leases and the
//! effects' records — so the count cannot drift from what happened: a workflow's report is lost
//! with its worker, the journal is not. A request is counted once with its repairs: a refusal
//! that came back as a repair and was then sent is one request closed by repair.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::route::{Route, RouteKind, reason};
use crate::core::record::Event;
use crate::core::state::Resolution;
use crate::core::{RefusalCode, Status};
use crate::effect::EffectKey;
use crate::journal::store::state_of;
use crate::journal::{JournalError, JournalStore};
use crate::lease::{Grant, LeaseError};

/// What the scoreboard needs of one effect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EffectSummary {
    /// Its key (the request's id).
    pub key: String,
    /// The lease it was proposed under.
    pub lease: Option<String>,
    /// Where it stands.
    pub status: Option<Status>,
    /// Why the gate refused it, if it did.
    pub refusal: Option<RefusalCode>,
    /// The target confirmed it (a webhook or a lookup journaled `CONFIRMED`).
    pub confirmed: bool,
    /// Refused or failed, yet the target holds it: a late success or the target's own
    /// confirmation came after the refusal.
    pub landed_late: bool,
}

/// Decision times (ms): the median, the 90th percentile and the slowest, by nearest rank.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Times {
    /// Half the decisions took at most this long.
    pub median: Option<i64>,
    /// Nine in ten took at most this long.
    pub p90: Option<i64>,
    /// The slowest.
    pub max: Option<i64>,
}

impl Times {
    fn of(mut ms: Vec<i64>) -> Self {
        ms.sort_unstable();
        let pick = |q: f64| {
            (!ms.is_empty()).then(|| {
                let rank = (ms.len() as f64 * q).ceil() as usize;
                ms[rank.clamp(1, ms.len()) - 1]
            })
        };
        Self {
            median: pick(0.5),
            p90: pick(0.9),
            max: ms.last().copied(),
        }
    }
}

/// How the requests went.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Scoreboard {
    /// Requests (a repair counts with the request it replaces).
    pub requests: usize,
    /// Sent under the rules' lease, with no person.
    pub cleared_no_person: usize,
    /// Sent under a person's signed approval.
    pub sent_after_person: usize,
    /// Sent as a repair a person accepted.
    pub closed_by_repair: usize,
    /// Requests the rules cleared that a budget sent to a person instead (`over_budget`),
    /// whatever the person then decided; one sent after is counted as sent after a person.
    #[serde(default)]
    pub over_budget: usize,
    /// Closed with nothing sent.
    pub refused: usize,
    /// The refusals by who or what refused: `rule`, `person`, `sla_expired`, `gate: <code>`,
    /// `target: failed`.
    pub refused_by: BTreeMap<String, usize>,
    /// Neither sent nor refused yet (waiting for a person, in flight).
    pub open: usize,
    /// Unknowable from the journal (`AMBIGUOUS`): a person must look at the target.
    pub needs_a_look: usize,
    /// Requests that landed more than once: two of their keys committed (the request and a
    /// repair), or the target holds one key twice (`APPLIED_TWICE`). Counted in the buckets
    /// above as well; it should be 0.
    pub sent_twice: usize,
    /// Escalations, by the reason's leading word.
    pub escalated_by_reason: BTreeMap<String, usize>,
    /// Levels whose SLA ran out (escalated, or closed at the last level).
    pub sla_breaches: usize,
    /// Sends under a person's approval that the gate refused because the facts moved since
    /// the approval (`stale_premise`, at the send or at recovery).
    pub stale_approvals_caught: usize,
    /// From a request's routing to a person's decision (an approval's signing or a denial).
    pub time_to_decision_ms: Times,
    /// Sent requests the target confirmed.
    pub confirmed_by_target: usize,
    /// Effects that ended refused or failed, yet landed at the target after all (a late success
    /// or the target's confirmation came after): a person must reverse or adopt each.
    #[serde(default)]
    pub landed_after_refusal: usize,
    /// Every effect in the journal by where it stands (`COMMITTED`, `REFUSED`, …).
    pub outcomes: BTreeMap<String, usize>,
}

/// The journal could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    /// The effects' records.
    #[error("reading the journal's records: {0}")]
    Journal(#[from] JournalError),
    /// The routes or the leases.
    #[error("reading the journal's routes and leases: {0}")]
    Leases(#[from] LeaseError),
    /// A key no effect could have.
    #[error("the journal holds {key:?}, which is not an effect key ({why}); inspect the journal")]
    BadKey {
        /// The key.
        key: String,
        /// What is wrong with it.
        why: String,
    },
}

/// How far back a repair may point (a chain longer than this is cut there).
const MAX_REPAIRS: usize = 64;

impl Scoreboard {
    /// The scoreboard of the requests in `journal` whose id starts with `prefix` (`""`: all).
    pub fn read(journal: &dyn JournalStore, prefix: &str) -> Result<Self, ScoreError> {
        let mut effects = Vec::new();
        for key in journal.keys()? {
            if !key.starts_with(prefix) {
                continue;
            }
            let k = EffectKey::fixed(key.clone()).map_err(|e| ScoreError::BadKey {
                key: key.clone(),
                why: e.to_string(),
            })?;
            let records = journal.history(&k)?;
            let state = state_of(journal.location(), &key, &records)?;
            effects.push(EffectSummary {
                lease: records.iter().find_map(|r| match &r.event {
                    Event::Proposed(p) => Some(p.lease.clone()),
                    _ => None,
                }),
                status: state.status(),
                refusal: match &state {
                    crate::core::state::EffectState::Resolved {
                        resolution: Resolution::Refused(r),
                        ..
                    } => Some(r.code),
                    _ => None,
                },
                confirmed: records
                    .iter()
                    .any(|r| matches!(r.event, Event::Confirmed(_))),
                landed_late: !crate::core::state::landed_late(
                    &state,
                    records.iter().map(|r| &r.event),
                )
                .is_empty(),
                key,
            });
        }
        let mut routes = BTreeMap::new();
        for head in journal.route_heads()? {
            if head.request.starts_with(prefix) {
                let all = journal.routes(&head.request)?;
                routes.insert(head.request, all);
            }
        }
        let leases: HashMap<String, Grant> = journal
            .leases()?
            .into_iter()
            .map(|g| (g.id.clone(), g))
            .collect();
        Ok(Self::count(&effects, &routes, &leases))
    }

    /// Count `effects` and `routes` (every step of each routed request) against `leases`.
    pub fn count(
        effects: &[EffectSummary],
        routes: &BTreeMap<String, Vec<Route>>,
        leases: &HashMap<String, Grant>,
    ) -> Self {
        let mut board = Self::default();
        let by_key: HashMap<&str, &EffectSummary> =
            effects.iter().map(|e| (e.key.as_str(), e)).collect();
        let parent = |req: &str| {
            routes
                .get(req)
                .and_then(|r| r.first())
                .and_then(|r| r.step.repair_of.clone())
        };
        let root = |req: &str| {
            let mut at = req.to_owned();
            for _ in 0..MAX_REPAIRS {
                match parent(&at) {
                    Some(p) if p != at => at = p,
                    _ => break,
                }
            }
            at
        };
        // How many repairs deep a request is (0: the request itself).
        let depth = |req: &str| {
            let mut at = req.to_owned();
            let mut n = 0;
            while let Some(p) = parent(&at).filter(|p| *p != at && n < MAX_REPAIRS) {
                at = p;
                n += 1;
            }
            n
        };
        let mut chains: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        for req in effects
            .iter()
            .map(|e| e.key.as_str())
            .chain(routes.keys().map(String::as_str))
        {
            chains.entry(root(req)).or_default().insert(req);
        }
        let person = |e: &EffectSummary| {
            e.lease
                .as_ref()
                .and_then(|id| leases.get(id))
                .is_some_and(|g| g.approval.is_some())
        };
        let mut decisions = Vec::new();
        for e in effects {
            if let Some(s) = e.status {
                *board.outcomes.entry(s.label().to_owned()).or_default() += 1;
            }
            let stale = matches!(
                e.refusal,
                Some(RefusalCode::StalePremise | RefusalCode::StalePremiseAtRecovery)
            );
            if stale && person(e) {
                board.stale_approvals_caught += 1;
            }
            board.landed_after_refusal += usize::from(e.landed_late);
        }
        for (root, chain) in &chains {
            board.requests += 1;
            let steps: Vec<&Route> = chain
                .iter()
                .filter_map(|r| routes.get(*r))
                .flatten()
                .collect();
            // The member a budget brought to a person, if one did.
            let over_budget = steps
                .iter()
                .find(|s| {
                    s.step.kind == RouteKind::Repair
                        && reason::class(&s.step.reason) == reason::OVER_BUDGET
                })
                .map(|s| s.request.as_str());
            board.over_budget += usize::from(over_budget.is_some());
            for s in &steps {
                let class = reason::class(&s.step.reason);
                match s.step.kind {
                    RouteKind::Escalated => {
                        *board
                            .escalated_by_reason
                            .entry(class.to_owned())
                            .or_default() += 1;
                        board.sla_breaches += usize::from(class == reason::SLA_BREACH);
                    }
                    RouteKind::Closed => {
                        board.sla_breaches += usize::from(class == reason::SLA_EXPIRED);
                    }
                    _ => {}
                }
            }
            // When a person was first asked: the routing, or the repair of a request the rules
            // had cleared.
            let first = steps
                .iter()
                .filter(|r| r.step.kind != RouteKind::Closed)
                .min_by_key(|r| (r.at_ms, r.n))
                .copied();
            if let Some(first) = first {
                let approved = leases
                    .values()
                    .filter_map(|g| g.approval.as_ref())
                    .filter(|a| chain.contains(a.statement.request.as_str()))
                    .map(|a| a.statement.issued_ms);
                let denied = steps
                    .iter()
                    .filter(|s| {
                        s.step.kind == RouteKind::Closed
                            && reason::class(&s.step.reason) == reason::DENIED
                    })
                    .map(|s| s.at_ms);
                if let Some(at) = approved.chain(denied).min() {
                    decisions.push((at - first.at_ms).max(0));
                }
            }
            let effects_of: Vec<&EffectSummary> = chain
                .iter()
                .filter_map(|k| by_key.get(k).copied())
                .collect();
            let landed: Vec<&EffectSummary> = effects_of
                .iter()
                .copied()
                .filter(|e| matches!(e.status, Some(Status::Committed | Status::AppliedTwice)))
                .collect();
            board.sent_twice += usize::from(
                landed.len() > 1
                    || landed
                        .iter()
                        .any(|e| e.status == Some(Status::AppliedTwice)),
            );
            if let Some(e) = landed.first() {
                board.confirmed_by_target += usize::from(e.confirmed);
                if e.key != *root && over_budget != Some(e.key.as_str()) {
                    board.closed_by_repair += 1;
                } else if person(e) || first.is_some() {
                    board.sent_after_person += 1;
                } else {
                    board.cleared_no_person += 1;
                }
                continue;
            }
            // Nothing landed: the request stands where its newest member (its latest repair, or
            // the request itself) stands.
            let newest = chain
                .iter()
                .copied()
                .max_by_key(|r| (depth(r), *r))
                .unwrap_or(root.as_str());
            let closed = routes
                .get(newest)
                .and_then(|r| r.last())
                .filter(|r| r.step.kind == RouteKind::Closed);
            let effect = by_key.get(newest);
            let refused_by = match (closed, effect.and_then(|e| e.status)) {
                (Some(r), _) => Some(match reason::class(&r.step.reason) {
                    reason::REFUSED_BY_RULE => "rule".to_owned(),
                    reason::DENIED => "person".to_owned(),
                    other => other.to_owned(),
                }),
                (None, Some(Status::Refused)) => effect
                    .and_then(|e| e.refusal.as_ref())
                    .map(|code| format!("gate: {code}")),
                (None, Some(Status::Failed)) => Some("target: failed".to_owned()),
                _ => None,
            };
            match refused_by {
                Some(by) => {
                    board.refused += 1;
                    *board.refused_by.entry(by).or_default() += 1;
                }
                None if effect.and_then(|e| e.status) == Some(Status::Ambiguous) => {
                    board.needs_a_look += 1;
                }
                None => board.open += 1,
            }
        }
        board.time_to_decision_ms = Times::of(decisions);
        board
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::{ApproverKey, RouteStep, Statement};
    use serde_json::Value;

    fn step(request: &str, n: u32, kind: RouteKind, why: &str, at_ms: i64) -> Route {
        Route {
            request: request.into(),
            n,
            step: RouteStep {
                kind,
                level: u32::from(kind == RouteKind::Escalated),
                group: "support".into(),
                reason: why.into(),
                repair_of: (kind == RouteKind::Repair)
                    .then(|| request.trim_end_matches("-repair1").to_owned()),
                detail: Value::Null,
            },
            at_ms,
        }
    }

    /// Request `a`'s one repair, `a-repair1`, waiting for a person.
    fn repair_of_a() -> BTreeMap<String, Vec<Route>> {
        let repair = step(
            "a-repair1",
            0,
            RouteKind::Repair,
            "stale_premise: still_fits",
            5,
        );
        [("a-repair1".to_owned(), vec![repair])]
            .into_iter()
            .collect()
    }

    fn effect(key: &str, lease: &str, status: Status) -> EffectSummary {
        EffectSummary {
            key: key.into(),
            lease: Some(lease.into()),
            status: Some(status),
            refusal: (status == Status::Refused).then_some(RefusalCode::StalePremise),
            confirmed: status == Status::Committed,
            landed_late: false,
        }
    }

    fn approval(request: &str, issued_ms: i64) -> Grant {
        let key = ApproverKey::from_seed("ana", [7; 32]);
        let signed = key
            .sign(Statement {
                request: request.into(),
                group: "support".into(),
                level: 0,
                approver: "ana".into(),
                payload: Value::Null,
                premises: crate::core::Premises::new(),
                issued_ms,
                expires_ms: issued_ms + 1,
                repair_of: None,
            })
            .unwrap_or_else(|e| panic!("{e}"));
        Grant::approved(signed, issued_ms)
    }

    #[test]
    fn each_request_counts_once_with_its_repairs_by_how_it_ended() {
        let (a, a_fix) = (approval("a", 1_500), approval("a-repair1", 9_000));
        let b = approval("b", 4_000);
        let leases: HashMap<String, Grant> = [
            (a.id.clone(), a.clone()),
            (a_fix.id.clone(), a_fix.clone()),
            (b.id.clone(), b.clone()),
            ("rules-c".to_owned(), Grant::new("rules-c", "rules", 0)),
        ]
        .into_iter()
        .collect();
        let effects = vec![
            effect("a", &a.id, Status::Refused),
            effect("a-repair1", &a_fix.id, Status::Committed),
            effect("b", &b.id, Status::Committed),
            effect("c", "rules-c", Status::Committed),
            effect("e", "rules-e", Status::Refused),
        ];
        let routes: BTreeMap<String, Vec<Route>> = [
            (
                "a",
                vec![step(
                    "a",
                    0,
                    RouteKind::Routed,
                    "needs_judgment: over_limit",
                    1_000,
                )],
            ),
            (
                "a-repair1",
                vec![step(
                    "a-repair1",
                    0,
                    RouteKind::Repair,
                    "stale_premise: still_fits",
                    5_000,
                )],
            ),
            (
                "b",
                vec![
                    step("b", 0, RouteKind::Routed, "needs_judgment", 1_000),
                    step("b", 1, RouteKind::Escalated, "sla_breach", 3_000),
                ],
            ),
            (
                "d",
                vec![step(
                    "d",
                    0,
                    RouteKind::Closed,
                    "refused_by_rule: ineligible",
                    0,
                )],
            ),
            (
                "f",
                vec![
                    step("f", 0, RouteKind::Routed, "needs_judgment", 1_000),
                    step("f", 1, RouteKind::Closed, "denied by ana: duplicate", 3_000),
                ],
            ),
            (
                "g",
                vec![step("g", 0, RouteKind::Routed, "needs_judgment", 1_000)],
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let board = Scoreboard::count(&effects, &routes, &leases);
        assert_eq!(board.requests, 7, "a (with its repair), b, c, d, e, f, g");
        assert_eq!(board.cleared_no_person, 1, "c");
        assert_eq!(board.sent_after_person, 1, "b");
        assert_eq!(board.closed_by_repair, 1, "a");
        assert_eq!(board.refused, 3, "d by rule, e by the gate, f by a person");
        assert_eq!(board.refused_by.get("rule"), Some(&1));
        assert_eq!(board.refused_by.get("person"), Some(&1));
        assert_eq!(board.refused_by.get("gate: stale_premise"), Some(&1));
        assert_eq!(board.open, 1, "g waits");
        assert_eq!(board.escalated_by_reason.get("sla_breach"), Some(&1));
        assert_eq!(board.sla_breaches, 1);
        assert_eq!(board.stale_approvals_caught, 1, "a's first approval");
        assert_eq!(
            board.time_to_decision_ms,
            Times {
                median: Some(2_000),
                p90: Some(3_000),
                max: Some(3_000)
            },
            "a 500, f 2000, b 3000"
        );
        assert_eq!(board.confirmed_by_target, 3);
        assert_eq!(board.outcomes.get("COMMITTED"), Some(&3));
        assert_eq!((board.sent_twice, board.needs_a_look), (0, 0));
    }

    #[test]
    fn a_request_stands_where_its_latest_repair_stands() {
        let leases = HashMap::new();
        let routes = repair_of_a();
        let refused = effect("a", "rules-a", Status::Refused);
        let waiting = Scoreboard::count(std::slice::from_ref(&refused), &routes, &leases);
        assert_eq!((waiting.open, waiting.refused), (1, 0), "the repair waits");
        for (status, open, refused_by, look) in [
            (Status::InFlight, 1, None, 0),
            (Status::Ambiguous, 0, None, 1),
            (Status::Failed, 0, Some("target: failed"), 0),
        ] {
            let effects = vec![refused.clone(), effect("a-repair1", "x", status)];
            let b = Scoreboard::count(&effects, &routes, &leases);
            assert_eq!((b.open, b.needs_a_look), (open, look), "{status:?}");
            assert_eq!(
                b.refused_by.keys().next().map(String::as_str),
                refused_by,
                "{status:?}"
            );
        }
    }

    #[test]
    fn a_request_that_landed_twice_or_is_unknowable_is_called_out() {
        let leases = HashMap::new();
        let routes = repair_of_a();
        let effects = vec![
            effect("a", "rules-a", Status::Committed),
            effect("a-repair1", "x", Status::Committed),
            effect("b", "rules-b", Status::AppliedTwice),
            effect("c", "rules-c", Status::Ambiguous),
            effect("d", "rules-d", Status::Failed),
        ];
        let board = Scoreboard::count(&effects, &routes, &leases);
        assert_eq!(board.requests, 4, "{board:?}");
        assert_eq!(board.sent_twice, 2, "a and its repair both landed; b twice");
        assert_eq!(board.needs_a_look, 1, "c");
        assert_eq!(board.refused_by.get("target: failed"), Some(&1), "d");
        assert_eq!(board.open, 0);
    }

    #[test]
    fn a_request_a_budget_sent_to_a_person_counts_as_sent_after_one() {
        let person = approval("h-over-budget", 2_000);
        let leases: HashMap<String, Grant> = [(person.id.clone(), person.clone())].into();
        let mut refused = effect("h", "rules-h", Status::Refused);
        refused.refusal = Some(RefusalCode::Budget);
        let mut asked = step(
            "h-over-budget",
            0,
            RouteKind::Repair,
            "over_budget: rules-day",
            1_000,
        );
        asked.step.repair_of = Some("h".into());
        let routes: BTreeMap<String, Vec<Route>> =
            [("h-over-budget".to_owned(), vec![asked])].into();
        let waiting = Scoreboard::count(std::slice::from_ref(&refused), &routes, &leases);
        assert_eq!((waiting.requests, waiting.open), (1, 1), "{waiting:?}");
        assert_eq!(waiting.over_budget, 1);
        let effects = vec![
            refused,
            effect("h-over-budget", &person.id, Status::Committed),
        ];
        let board = Scoreboard::count(&effects, &routes, &leases);
        assert_eq!(board.requests, 1, "{board:?}");
        assert_eq!(board.over_budget, 1);
        assert_eq!(
            (
                board.sent_after_person,
                board.closed_by_repair,
                board.refused
            ),
            (1, 0, 0),
            "{board:?}"
        );
        assert_eq!(board.time_to_decision_ms.max, Some(1_000));
    }
}
