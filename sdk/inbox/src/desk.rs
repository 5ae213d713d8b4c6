//! What the inbox shows, read from the journal each time: where every request routed to a person
//! is now (its latest route step), whether a person's approval for it is on record, and how its
//! effect ended if it was sent. Nothing here is cached, so an escalation or a refusal shows up on
//! the next page load.

use std::collections::HashMap;

use interlock::approval::{Approvers, Route, RouteKind};
use interlock::core::Status;
use interlock::lease::LeaseError;
use interlock::{EffectKey, JournalStore};

use crate::auth::Auth;

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Waiting for a person of its group.
    Waiting,
    /// A person's approval was delivered to its workflow (by this inbox) and is not yet granted.
    Sent(String),
    /// A person's approval is on record (granted by the workflow).
    Approved(String),
    /// Its effect ended (or is under way).
    Effect(Status),
    /// Declined through this inbox.
    Denied,
    /// Closed with no approval (declined, or the last level's SLA ran out), as journaled.
    Closed(String),
}

impl Standing {
    /// For people.
    pub fn label(&self) -> String {
        match self {
            Self::Waiting => "waiting for a person".into(),
            Self::Sent(by) => format!("approved by {by}; the workflow is checking it"),
            Self::Approved(by) => format!("approved by {by}"),
            Self::Effect(s) => format!("sent: {s}"),
            Self::Denied => "declined".into(),
            Self::Closed(why) => format!("closed: {why}"),
        }
    }
}

/// One request as the inbox shows it.
#[derive(Clone, Debug)]
pub struct Item {
    /// Its latest route step.
    pub route: Route,
    /// Where it stands.
    pub standing: Standing,
    /// The group's SLA left at this level (ms; negative once breached).
    pub sla_left_ms: Option<i64>,
}

impl Item {
    /// What the request refunds, read from the payload a person signs (never from display
    /// fields beside it).
    pub fn summary(&self) -> String {
        let p = &self.route.step.detail["payload"];
        let on = p["payment_intent"]
            .as_str()
            .or_else(|| p["charge"].as_str())
            .unwrap_or("?");
        format!(
            "{} {} on {on}",
            p["amount"],
            p["currency"].as_str().unwrap_or("")
        )
    }

    /// Whether it is a repair to accept.
    pub fn is_repair(&self) -> bool {
        self.route.step.kind == RouteKind::Repair
    }
}

/// Every request ever routed to a person, where it stands now.
pub fn items(
    journal: &dyn JournalStore,
    dir: &Approvers,
    auth: &Auth,
    now_ms: i64,
) -> Result<Vec<Item>, LeaseError> {
    let mut approved: HashMap<String, String> = HashMap::new();
    for g in journal.leases()? {
        if let Some(a) = g.approval {
            approved.insert(a.statement.request, a.statement.approver);
        }
    }
    let mut out = Vec::new();
    for route in journal.route_heads()? {
        let history = EffectKey::fixed(route.request.clone())
            .ok()
            .map(|k| journal.history(&k))
            .transpose()?
            .unwrap_or_default();
        let standing = if route.step.kind == RouteKind::Closed {
            Standing::Closed(route.step.reason.clone())
        } else if let Some(r) = interlock::receipt::build(&history) {
            Standing::Effect(r.outcome)
        } else if let Some(by) = approved.get(&route.request) {
            Standing::Approved(by.clone())
        } else if auth.was_denied(&route.request) {
            Standing::Denied
        } else if let Some(by) = auth.decided(&route.request, route.n, now_ms) {
            Standing::Sent(by)
        } else {
            Standing::Waiting
        };
        let sla_left_ms = dir
            .level(route.step.level)
            .map(|l| route.at_ms.saturating_add(l.sla_ms).saturating_sub(now_ms));
        out.push(Item {
            route,
            standing,
            sla_left_ms,
        });
    }
    Ok(out)
}

/// The requests waiting for `approver`: held by one of their groups, not yet decided.
pub fn waiting_for<'a>(items: &'a [Item], dir: &Approvers, approver: &str) -> Vec<&'a Item> {
    items
        .iter()
        .filter(|i| i.standing == Standing::Waiting && dir.is_member(&i.route.step.group, approver))
        .collect()
}

/// `ms` as hours and minutes, for SLA columns.
pub fn duration(ms: i64) -> String {
    let (sign, ms) = if ms < 0 {
        ("over by ", ms.saturating_neg())
    } else {
        ("", ms)
    };
    let min = ms / 60_000;
    if min >= 60 {
        format!("{sign}{} h {:02} min", min / 60, min % 60)
    } else if min > 0 {
        format!("{sign}{min} min")
    } else {
        format!("{sign}{} s", ms / 1000)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use interlock::approval::RouteStep;
    use interlock::{ManualClock, SqliteJournal};
    use serde_json::json;

    use super::*;

    fn step(kind: RouteKind, reason: &str) -> RouteStep {
        RouteStep {
            kind,
            level: 0,
            group: "support".into(),
            reason: reason.into(),
            repair_of: None,
            detail: json!({"payload": {"payment_intent": "pi_1", "amount": 2000, "currency": "usd"}}),
        }
    }

    use crate::testing::directory;

    #[test]
    fn a_closed_request_waits_for_nobody_and_an_open_one_waits_for_its_group() {
        let j = SqliteJournal::in_memory(Arc::new(ManualClock::at(0))).unwrap();
        j.route("r1", &step(RouteKind::Routed, "needs_judgment"))
            .unwrap();
        j.route("r2", &step(RouteKind::Routed, "needs_judgment"))
            .unwrap();
        j.route("r2", &step(RouteKind::Closed, "denied by ana: duplicate"))
            .unwrap();
        let (dir, auth) = (directory(), Auth::default());
        let all = items(&j, &dir, &auth, 5_000).unwrap();
        let r2 = all.iter().find(|i| i.route.request == "r2").unwrap();
        assert_eq!(
            r2.standing,
            Standing::Closed("denied by ana: duplicate".into())
        );
        let waiting: Vec<_> = waiting_for(&all, &dir, "ana")
            .into_iter()
            .map(|i| i.route.request.clone())
            .collect();
        assert_eq!(waiting, vec!["r1".to_owned()]);
        assert!(waiting_for(&all, &dir, "zed").is_empty());
        assert_eq!(all[0].summary(), "2000 usd on pi_1");
        assert_eq!(all[0].sla_left_ms, Some(-4_000));
        assert_eq!(duration(-4_000), "over by 4 s");
        assert!(duration(i64::MIN).starts_with("over by "), "no overflow");
    }
}

/// One budget a request's refund may count against, as its page shows it.
#[derive(Clone, Debug)]
pub struct BudgetRow {
    /// The budget's id.
    pub id: String,
    /// Its rule in words.
    pub rule: String,
    /// Its limit.
    pub max: i64,
    /// Committed in the request's counter this window.
    pub used: i64,
    /// Held by effects in flight, ambiguous or otherwise not known not to have applied.
    pub reserved: i64,
    /// Left under the limit.
    pub left: i64,
    /// Whether the refund fits it now.
    pub fits: bool,
    /// What that means for the refund, for people.
    pub verdict: String,
}

/// The budgets in force that a refund of `payload` under key `request` may count against, and
/// whether it fits each now. The labels its send will carry are read from its journaled proposal
/// where there is one; a budget scoped on a label not known yet is shown with that said.
pub fn budgets(
    journal: &dyn JournalStore,
    request: &str,
    payload: &serde_json::Value,
    target: &str,
    now_ms: i64,
) -> Result<Vec<BudgetRow>, LeaseError> {
    let labels = match EffectKey::fixed(request) {
        Ok(k) => journal
            .state(&k)?
            .first()
            .map(|f| f.labels.clone())
            .unwrap_or_default(),
        Err(_) => Default::default(),
    };
    let rows = interlock::budget::standing(journal, request, payload, target, &labels, now_ms)?;
    Ok(rows
        .into_iter()
        .map(|s| {
            let mut verdict = match (&s.fits, s.asked) {
                (Ok(()), Some(a)) => format!("fits (counts {a})"),
                (Ok(()), None) => "fits".to_owned(),
                (Err(over), _) => format!("would be refused: {over}"),
            };
            if !s.unknown_labels.is_empty() {
                verdict.push_str(&format!(
                    "; applies if the sending activity's {} match{}",
                    s.unknown_labels.join(", "),
                    if s.unknown_labels.len() == 1 {
                        "es"
                    } else {
                        ""
                    }
                ));
            }
            BudgetRow {
                id: s.budget.id.clone(),
                rule: s.budget.describe(),
                max: s.budget.max(),
                used: s.counter.used,
                reserved: s.counter.reserved,
                left: s.counter.left,
                fits: s.fits.is_ok(),
                verdict,
            }
        })
        .collect())
}
