//! "Within budget when fired": every `DISPATCHED` records what each budget the effect matched
//! counted in the dispatch's own transaction; the audit re-checks that arithmetic, that each
//! budget it names is a version on record, and — from the journal's log of budget changes — that
//! no budget in force and matching the effect went unrecorded (a dispatch by a build that did
//! not check budgets shows up here). The log's times come from the clocks of the hosts that made
//! the changes, so a change within [`MARGIN_MS`] of a dispatch is not judged either way.

use crate::budget::{BudgetChange, Subject};
use crate::core::budget::BudgetCheck;
use crate::core::{Dispatched, Event};
use crate::journal::Record;

use super::{Column, col};

/// How far the journal's clocks may disagree: a budget changed this close to a dispatch may or
/// may not have been in force for it.
pub(super) const MARGIN_MS: i64 = 600_000;

/// The column, from the key's `history`, its `dispatches` (each with the time it was written)
/// and the journal's budget `changes` (`None`: not read, so only the recorded arithmetic is
/// checked).
pub(super) fn within_budget(
    history: &[Record],
    dispatches: &[(i64, &Dispatched)],
    changes: Option<&[BudgetChange]>,
) -> Column {
    const NAME: &str = "within budget when fired";
    if dispatches.is_empty() {
        return col(NAME, None, "nothing was sent");
    }
    let Some(first) = history.iter().find_map(|r| match &r.event {
        Event::Proposed(p) => Some(p),
        _ => None,
    }) else {
        return col(NAME, Some(false), "sent with no proposal on record");
    };
    let subject = Subject {
        payload: &first.payload,
        target: &first.target,
        labels: &first.labels,
    };
    let mut wrong = Vec::new();
    let mut counted: Vec<&BudgetCheck> = Vec::new();
    for (at, d) in dispatches {
        for c in &d.recheck.budgets {
            if !c.fits() {
                wrong.push(format!(
                    "budget {} was over at a dispatch: {} used of {}, {} asked",
                    c.budget,
                    c.used,
                    c.max,
                    c.asked
                        .map_or("nothing it can count".to_owned(), |a| a.to_string())
                ));
            }
            if let Some(changes) = changes
                && !on_record(c, changes, &subject, *at)
            {
                wrong.push(format!(
                    "a dispatch counted budget {} (counter {:?}) with a limit of {} from {}, \
                     which no version of it in force then has",
                    c.budget, c.bucket, c.max, c.since_ms
                ));
            }
            counted.push(c);
        }
        for (id, by) in changes
            .map(|c| in_force_and_matching(c, &subject, *at))
            .unwrap_or_default()
        {
            if !d.recheck.budgets.iter().any(|c| c.budget == id) {
                wrong.push(format!(
                    "budget {id} (set by {by}) was in force and matched, but a dispatch recorded \
                     no check of it"
                ));
            }
        }
    }
    if !wrong.is_empty() {
        return col(NAME, Some(false), wrong.join("; "));
    }
    if counted.is_empty() {
        return match changes {
            Some(_) => col(NAME, Some(true), "no budget in force matched it"),
            None => col(
                NAME,
                None,
                "no budget check recorded; the budgets were not read",
            ),
        };
    }
    let mut seen: Vec<String> = Vec::new();
    for c in counted {
        let line = format!(
            "{}{}: {} of {} used{}",
            c.budget,
            if c.bucket.is_empty() {
                String::new()
            } else {
                format!(" {}", c.bucket)
            },
            c.used,
            c.max,
            c.asked
                .filter(|_| !c.own)
                .map_or(String::new(), |a| format!(", {a} asked"))
        );
        if !seen.contains(&line) {
            seen.push(line);
        }
    }
    col(
        NAME,
        Some(true),
        format!(
            "fitted at all {} dispatch(es): {}",
            dispatches.len(),
            seen.join("; ")
        ),
    )
}

/// Whether a version of the budget `c` names that may have been in force at `at_ms` (its time
/// in force, by the log, reaches within [`MARGIN_MS`] of it) matches the effect and has the
/// counter, limit and window start `c` records. A budget the log knows nothing of is not judged:
/// a journal moved by export and import carries its records, not its budgets' changes.
fn on_record(c: &BudgetCheck, changes: &[BudgetChange], s: &Subject<'_>, at_ms: i64) -> bool {
    let mut of: Vec<&BudgetChange> = changes.iter().filter(|ch| ch.id == c.budget).collect();
    if of.is_empty() {
        return true;
    }
    of.sort_by_key(|ch| ch.n);
    of.iter().enumerate().any(|(i, ch)| {
        let until = of.get(i + 1).map_or(i64::MAX, |next| next.at_ms);
        let may_be_in_force =
            ch.at_ms <= at_ms.saturating_add(MARGIN_MS) && until > at_ms.saturating_sub(MARGIN_MS);
        ch.budget.as_ref().is_some_and(|b| {
            may_be_in_force
                && b.max() == c.max
                && b.window.since(at_ms) == c.since_ms
                && b.counter_named(b.bucket(s)) == c.bucket
                && b.matches(s)
        })
    })
}

/// The budgets certainly in force at `at_ms` (their version set at least [`MARGIN_MS`] before,
/// and no change to them within [`MARGIN_MS`] either side) that match the effect, with who set
/// them.
fn in_force_and_matching(
    changes: &[BudgetChange],
    s: &Subject<'_>,
    at_ms: i64,
) -> Vec<(String, String)> {
    let mut ids: Vec<&str> = changes.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let near = |t: i64| t.abs_diff(at_ms) < MARGIN_MS.unsigned_abs();
    ids.into_iter()
        .filter_map(|id| {
            let of: Vec<&BudgetChange> = changes.iter().filter(|c| c.id == id).collect();
            if of.iter().any(|c| near(c.at_ms)) {
                return None;
            }
            let latest = of.iter().filter(|c| c.at_ms <= at_ms).max_by_key(|c| c.n)?;
            let b = latest.budget.as_ref()?;
            b.matches(s).then(|| (id.to_owned(), latest.by.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::budget::{Budget, Limit, Window};
    use crate::core::budget::Tally;

    const HOUR: i64 = 3_600_000;

    fn column(history: &[Record], changes: Option<&[BudgetChange]>) -> Column {
        within_budget(history, &super::super::dispatches(history), changes)
    }

    fn budget(max: i64) -> Budget {
        Budget {
            id: "daily".into(),
            scope: BTreeMap::new(),
            per: Vec::new(),
            window: Window::Rolling { ms: HOUR },
            limit: Limit::Sum {
                field: "amount".into(),
                max,
            },
        }
    }

    fn change(b: Option<Budget>, n: u32, at_ms: i64) -> BudgetChange {
        BudgetChange {
            id: "daily".into(),
            n,
            budget: b,
            at_ms,
            by: "cfo".into(),
        }
    }

    fn check(b: &Budget, used: i64, asked: i64, at_ms: i64) -> BudgetCheck {
        let tally = Tally {
            used,
            own_in_window: false,
        };
        BudgetCheck::of(b, String::new(), b.window.since(at_ms), Some(asked), &tally)
    }

    /// A key's history: proposed, then dispatched at `at_ms` with `budgets` recorded.
    fn history(at_ms: i64, budgets: Vec<BudgetCheck>) -> Vec<Record> {
        let proposed = crate::core::Proposed {
            given_hash: None,
            rules: Vec::new(),
            by: None,
            payload: json!({"amount": 500}),
            payload_hash: "h".into(),
            premises: Default::default(),
            lease: "l".into(),
            target: "t".into(),
            tier: 2,
            window_ms: None,
            labels: BTreeMap::new(),
        };
        let dispatched = Dispatched {
            token: 1,
            holder: crate::core::Holder {
                caller: None,
                host: "h".into(),
                pid: 1,
                attempt: "a".into(),
            },
            deadline_ms: at_ms + 1_000,
            payload_hash: "h".into(),
            recheck: crate::core::Recheck {
                broken: Vec::new(),
                lease: crate::core::LeaseVerdict::Live,
                premises_now: Default::default(),
                changes: Vec::new(),
                premise_error: None,
                read_at_ms: Some(at_ms),
                budgets,
            },
            resend: false,
        };
        [Event::Proposed(proposed), Event::Dispatched(dispatched)]
            .into_iter()
            .enumerate()
            .map(|(n, event)| Record {
                seq: n as i64 + 1,
                key: "k".into(),
                n: n as u32,
                at_ms,
                prev: None,
                hash: String::new(),
                event,
            })
            .collect()
    }

    #[test]
    fn a_dispatch_that_fitted_a_budget_on_record_holds_and_says_what_was_used() {
        let t = 10 * HOUR;
        let b = budget(2_000);
        let changes = [change(Some(b.clone()), 0, t - 2 * HOUR)];
        let c = column(&history(t, vec![check(&b, 1_000, 500, t)]), Some(&changes));
        assert_eq!(c.holds, Some(true), "{c:?}");
        assert!(
            c.detail.contains("daily: 1000 of 2000 used, 500 asked"),
            "{c:?}"
        );
    }

    #[test]
    fn a_recorded_check_that_did_not_fit_fails() {
        let t = 10 * HOUR;
        let b = budget(2_000);
        let c = column(&history(t, vec![check(&b, 1_800, 500, t)]), None);
        assert_eq!(c.holds, Some(false), "{c:?}");
        assert!(c.detail.contains("over at a dispatch"), "{c:?}");
    }

    #[test]
    fn a_check_against_a_limit_no_version_in_force_had_fails() {
        let t = 10 * HOUR;
        let changes = [change(Some(budget(2_000)), 0, t - 2 * HOUR)];
        let forged = check(&budget(9_000), 1_000, 500, t);
        let c = column(&history(t, vec![forged.clone()]), Some(&changes));
        assert_eq!(c.holds, Some(false), "{c:?}");
        assert!(c.detail.contains("which no version"), "{c:?}");
        // A limit that was lowered long before the dispatch no longer counts.
        let lowered = [
            change(Some(budget(9_000)), 0, t - 3 * HOUR),
            change(Some(budget(2_000)), 1, t - 2 * HOUR),
        ];
        let c = column(&history(t, vec![forged.clone()]), Some(&lowered));
        assert_eq!(c.holds, Some(false), "{c:?}");
        // Lowered within the clocks' margin: either may have been in force.
        let just_lowered = [
            change(Some(budget(9_000)), 0, t - 3 * HOUR),
            change(Some(budget(2_000)), 1, t - 1_000),
        ];
        let c = column(&history(t, vec![forged.clone()]), Some(&just_lowered));
        assert_eq!(c.holds, Some(true), "{c:?}");
        // A journal moved without its budgets' changes: not judged.
        let c = column(&history(t, vec![forged]), Some(&[]));
        assert_eq!(c.holds, Some(true), "{c:?}");
    }

    #[test]
    fn a_budget_in_force_that_the_dispatch_did_not_check_fails_unless_changed_near_it() {
        let t = 10 * HOUR;
        let b = budget(2_000);
        let unchecked = history(t, Vec::new());
        let long_before = [change(Some(b.clone()), 0, t - 2 * HOUR)];
        let c = column(&unchecked, Some(&long_before));
        assert_eq!(c.holds, Some(false), "{c:?}");
        assert!(c.detail.contains("budget daily (set by cfo)"), "{c:?}");
        // Set within the clocks' margin of the dispatch: not judged.
        let just_before = [change(Some(b.clone()), 0, t - 1_000)];
        assert_eq!(column(&unchecked, Some(&just_before)).holds, Some(true));
        // Removed long before: nothing was in force.
        let removed = [
            change(Some(b), 0, t - 3 * HOUR),
            change(None, 1, t - 2 * HOUR),
        ];
        let c = column(&unchecked, Some(&removed));
        assert_eq!(c.holds, Some(true), "{c:?}");
        assert_eq!(c.detail, "no budget in force matched it");
    }

    #[test]
    fn nothing_sent_is_not_judged() {
        let mut h = history(0, Vec::new());
        h.pop();
        assert_eq!(column(&h, Some(&[])).holds, None);
    }
}
