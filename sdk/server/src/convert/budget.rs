//! Budgets between their messages and the library's types. A budget's rule is checked here field
//! by field, so a caller learns which field is wrong before anything is journaled; the journal
//! checks it again (and whether it may replace the one in force) when it records the change.

use interlock::budget::{Budget, BudgetChange, CalendarUnit, Counter, Limit, MAX_LIMIT, Window};

use super::{Invalid, MAX_PREMISES, invalid, json_field, name};
use crate::pb;

/// The budget a caller asks for, checked field by field.
pub fn budget_from(b: Option<&pb::Budget>) -> Result<Budget, Invalid> {
    let b = b.ok_or_else(|| invalid("budget", "is missing"))?;
    let id = name("budget.id", &b.id)?;
    if b.scope_json.len() + b.per.len() > MAX_PREMISES {
        return Err(invalid(
            "budget.scope_json",
            format!("scope and per name at most {MAX_PREMISES} fields together"),
        ));
    }
    let mut scope = std::collections::BTreeMap::new();
    for (field, text) in &b.scope_json {
        let f = name("budget.scope_json key", field)?;
        let v = json_field(&format!("budget.scope_json[{f}]"), text, false)?;
        scope.insert(f, v);
    }
    let per = b
        .per
        .iter()
        .map(|p| name("budget.per", p))
        .collect::<Result<Vec<_>, _>>()?;
    let window = match &b.window {
        None => {
            return Err(invalid(
                "budget.window",
                "is missing: set rolling_ms or calendar",
            ));
        }
        Some(pb::budget::Window::RollingMs(ms)) if *ms <= 0 => {
            return Err(invalid(
                "budget.rolling_ms",
                format!("{ms}: a rolling window is at least 1 ms long"),
            ));
        }
        Some(pb::budget::Window::RollingMs(ms)) => Window::Rolling { ms: *ms },
        Some(pb::budget::Window::Calendar(c)) => {
            let unit = match pb::CalendarUnit::try_from(c.unit) {
                Ok(pb::CalendarUnit::Day) => CalendarUnit::Day,
                Ok(pb::CalendarUnit::Week) => CalendarUnit::Week,
                Ok(pb::CalendarUnit::Month) => CalendarUnit::Month,
                _ => {
                    return Err(invalid(
                        "budget.calendar.unit",
                        format!("{}: one of CALENDAR_UNIT_DAY, _WEEK, _MONTH", c.unit),
                    ));
                }
            };
            if c.utc_offset_minutes.unsigned_abs() > 14 * 60 {
                return Err(invalid(
                    "budget.calendar.utc_offset_minutes",
                    format!(
                        "{}: at most 840 (14 hours) either way",
                        c.utc_offset_minutes
                    ),
                ));
            }
            Window::Calendar {
                unit,
                utc_offset_minutes: c.utc_offset_minutes,
            }
        }
    };
    let limit = match &b.limit {
        None => {
            return Err(invalid("budget.limit", "is missing: set count_max or sum"));
        }
        Some(pb::budget::Limit::CountMax(max)) if !(0..=MAX_LIMIT).contains(max) => {
            return Err(invalid(
                "budget.count_max",
                format!("{max}: a limit is from 0 to {MAX_LIMIT}"),
            ));
        }
        Some(pb::budget::Limit::CountMax(max)) => Limit::Count { max: *max },
        Some(pb::budget::Limit::Sum(s)) if !(0..=MAX_LIMIT).contains(&s.max) => {
            return Err(invalid(
                "budget.sum.max",
                format!("{}: a limit is from 0 to {MAX_LIMIT}", s.max),
            ));
        }
        Some(pb::budget::Limit::Sum(s)) => Limit::Sum {
            field: name("budget.sum.field", &s.field)?,
            max: s.max,
        },
    };
    let budget = Budget {
        id,
        scope,
        per,
        window,
        limit,
    };
    budget.validate().map_err(|m| invalid("budget", m))?;
    Ok(budget)
}

/// A budget as a message.
pub fn budget_to(b: &Budget) -> pb::Budget {
    pb::Budget {
        id: b.id.clone(),
        scope_json: b
            .scope
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        per: b.per.clone(),
        window: Some(match b.window {
            Window::Rolling { ms } => pb::budget::Window::RollingMs(ms),
            Window::Calendar {
                unit,
                utc_offset_minutes,
            } => pb::budget::Window::Calendar(pb::CalendarWindow {
                unit: match unit {
                    CalendarUnit::Day => pb::CalendarUnit::Day,
                    CalendarUnit::Week => pb::CalendarUnit::Week,
                    CalendarUnit::Month => pb::CalendarUnit::Month,
                }
                .into(),
                utc_offset_minutes,
            }),
        }),
        limit: Some(match &b.limit {
            Limit::Count { max } => pb::budget::Limit::CountMax(*max),
            Limit::Sum { field, max } => pb::budget::Limit::Sum(pb::SumLimit {
                field: field.clone(),
                max: *max,
            }),
        }),
    }
}

/// A journaled change as a message.
pub fn change_to(c: &BudgetChange) -> pb::BudgetChange {
    pb::BudgetChange {
        n: c.n,
        at_ms: c.at_ms,
        by: c.by.clone(),
        budget: c.budget.as_ref().map(budget_to),
    }
}

/// A budget in force, its current window's counters and its changes, as a message.
pub fn in_force_to(
    b: &Budget,
    now_ms: i64,
    counters: &[Counter],
    changes: &[BudgetChange],
) -> pb::BudgetInForce {
    pb::BudgetInForce {
        budget: Some(budget_to(b)),
        rule: b.describe(),
        window_since_ms: b.window.since(now_ms),
        counters: counters
            .iter()
            .map(|c| pb::BudgetCounter {
                bucket_json: c.bucket.clone(),
                used: c.used,
                reserved: c.reserved,
                left: c.left,
            })
            .collect(),
        changes: changes
            .iter()
            .filter(|c| c.id == b.id)
            .map(change_to)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rolling_count() -> pb::Budget {
        pb::Budget {
            id: "b-1".into(),
            scope_json: [("target".to_owned(), "\"stripe-refunds\"".to_owned())].into(),
            per: vec!["customer".into()],
            window: Some(pb::budget::Window::RollingMs(3_600_000)),
            limit: Some(pb::budget::Limit::CountMax(30)),
        }
    }

    #[test]
    fn a_budget_survives_the_round_trip() {
        let mut calendar = rolling_count();
        calendar.window = Some(pb::budget::Window::Calendar(pb::CalendarWindow {
            unit: pb::CalendarUnit::Week.into(),
            utc_offset_minutes: -330,
        }));
        calendar.limit = Some(pb::budget::Limit::Sum(pb::SumLimit {
            field: "amount".into(),
            max: 50_000,
        }));
        for m in [rolling_count(), calendar] {
            let b = budget_from(Some(&m)).expect("valid");
            assert_eq!(budget_to(&b), m);
        }
    }

    type Spoil = Box<dyn Fn(&mut pb::Budget)>;

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(&str, Spoil)> = vec![
            ("budget.id", Box::new(|b| b.id.clear())),
            ("budget.window", Box::new(|b| b.window = None)),
            (
                "budget.rolling_ms",
                Box::new(|b| b.window = Some(pb::budget::Window::RollingMs(0))),
            ),
            (
                "budget.calendar.unit",
                Box::new(|b| {
                    b.window = Some(pb::budget::Window::Calendar(pb::CalendarWindow {
                        unit: 0,
                        utc_offset_minutes: 0,
                    }));
                }),
            ),
            (
                "budget.calendar.utc_offset_minutes",
                Box::new(|b| {
                    b.window = Some(pb::budget::Window::Calendar(pb::CalendarWindow {
                        unit: 1,
                        utc_offset_minutes: 900,
                    }));
                }),
            ),
            (
                "budget.calendar.utc_offset_minutes",
                Box::new(|b| {
                    b.window = Some(pb::budget::Window::Calendar(pb::CalendarWindow {
                        unit: 1,
                        utc_offset_minutes: i32::MIN,
                    }));
                }),
            ),
            (
                "budget.count_max",
                Box::new(|b| b.limit = Some(pb::budget::Limit::CountMax(i64::MAX))),
            ),
            ("budget.limit", Box::new(|b| b.limit = None)),
            (
                "budget.count_max",
                Box::new(|b| b.limit = Some(pb::budget::Limit::CountMax(-1))),
            ),
            (
                "budget.sum.field",
                Box::new(|b| {
                    b.limit = Some(pb::budget::Limit::Sum(pb::SumLimit {
                        field: String::new(),
                        max: 1,
                    }));
                }),
            ),
            (
                "budget.scope_json[target]",
                Box::new(|b| {
                    b.scope_json
                        .insert("target".into(), "stripe-refunds".into());
                }),
            ),
            ("budget.per", Box::new(|b| b.per.push(String::new()))),
        ];
        for (field, spoil) in cases {
            let mut m = rolling_count();
            spoil(&mut m);
            let e = budget_from(Some(&m)).expect_err(field);
            assert_eq!(e.field, field, "{e}");
        }
        assert_eq!(budget_from(None).expect_err("missing").field, "budget");
    }
}
