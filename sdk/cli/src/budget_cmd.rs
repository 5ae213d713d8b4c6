//! `budget set`, `budget list`, `budget show`, `budget remove`: the limits on every effect that
//! matches a scope, per window, kept in the journal with who changed them.

use std::collections::BTreeMap;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use interlock::budget::{Budget, BudgetChange, CalendarUnit, Counter, Limit, Window};
use interlock::lease::in_force;
use interlock::{Clock, JournalStore, SystemClock};
use serde_json::{Value, json};

#[derive(Subcommand)]
pub(crate) enum BudgetCmd {
    /// Set a budget (a new one, or a new version of one): from then on, every effect it matches
    /// is dispatched only if it fits.
    Set(SetArgs),
    /// Every budget in force, with what its current window holds.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// One budget: its rule, every change to it, and each place its current window holds.
    Show {
        /// Its id.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Remove a budget: effects it matched are no longer counted against it.
    Remove {
        /// Its id.
        id: String,
        /// Who removes it (journaled with the change).
        #[arg(long)]
        by: String,
    },
}

#[derive(Args)]
pub(crate) struct SetArgs {
    /// Its id.
    id: String,
    /// Who sets it (journaled with the change).
    #[arg(long)]
    by: String,
    /// What an effect must match to count, as name=value (repeatable): a payload field, `target`
    /// (the target's name) or `label.NAME` (one of the effect's labels, such as
    /// `label.workflow_type`). None: every effect.
    #[arg(long = "scope", value_name = "NAME=VALUE")]
    scope: Vec<String>,
    /// Count separately for each value of this name (repeatable): `--per customer`.
    #[arg(long, value_name = "NAME")]
    per: Vec<String>,
    /// A rolling window of this length: 90s, 30m, 1h, 7d.
    #[arg(long, value_name = "LENGTH", value_parser = duration_ms, conflicts_with = "calendar", required_unless_present = "calendar")]
    rolling: Option<i64>,
    /// A calendar window: the day, week (from Monday) or month holding each dispatch.
    #[arg(long, value_enum)]
    calendar: Option<Unit>,
    /// The calendar window's fixed offset from UTC: UTC, +02:00, -05:30.
    #[arg(long, value_name = "OFFSET", value_parser = offset_minutes, default_value = "UTC", requires = "calendar")]
    utc_offset: i32,
    /// At most this many effects per window.
    #[arg(
        long,
        value_name = "N",
        conflicts_with = "sum",
        required_unless_present = "sum"
    )]
    count: Option<i64>,
    /// At most this much of an integer payload field per window, as field=max.
    #[arg(long, value_name = "FIELD=MAX", value_parser = field_max)]
    sum: Option<(String, i64)>,
}

/// A calendar unit.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Unit {
    /// Midnight to midnight.
    Day,
    /// Monday to Monday.
    Week,
    /// The first of the month to the next.
    Month,
}

fn duration_ms(s: &str) -> Result<i64, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = n
        .parse()
        .map_err(|_| format!("{s:?}: a length looks like 90s, 30m, 1h or 7d"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{s:?}: the unit is one of ms, s, m, h, d")),
    };
    n.checked_mul(ms)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("{s:?}: a window is longer than nothing and shorter than forever"))
}

fn offset_minutes(s: &str) -> Result<i32, String> {
    if s.eq_ignore_ascii_case("utc") || s == "0" {
        return Ok(0);
    }
    let bad = || format!("{s:?}: an offset looks like UTC, +02:00 or -05:30");
    let s = s.strip_prefix("UTC").unwrap_or(s);
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    let digits = |t: &str| !t.is_empty() && t.len() <= 2 && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(h) || !digits(m) {
        return Err(bad());
    }
    let h: i32 = h.parse().map_err(|_| bad())?;
    let m: i32 = m.parse().map_err(|_| bad())?;
    if h > 14 || m >= 60 {
        return Err(bad());
    }
    Ok(sign * (h * 60 + m))
}

fn field_max(s: &str) -> Result<(String, i64), String> {
    let (f, max) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected field=max"))?;
    let max = max
        .parse()
        .map_err(|_| format!("{s:?}: the maximum must be an integer"))?;
    Ok((f.to_owned(), max))
}

/// The budget `set` describes.
fn budget_of(a: SetArgs) -> anyhow::Result<(Budget, String)> {
    let mut scope = BTreeMap::new();
    for pair in &a.scope {
        let (name, v) = pair
            .split_once('=')
            .with_context(|| format!("--scope must look like name=value, got {pair:?}"))?;
        // The target's name and labels are text; a payload field's numbers and booleans match
        // as themselves, anything else as text.
        let text = name == "target" || name.starts_with("label.");
        let v = serde_json::from_str::<Value>(v)
            .ok()
            .filter(|v| !text && !v.is_string())
            .unwrap_or_else(|| Value::String(v.to_owned()));
        scope.insert(name.to_owned(), v);
    }
    let window = match (a.rolling, a.calendar) {
        (Some(ms), _) => Window::Rolling { ms },
        (None, Some(unit)) => Window::Calendar {
            unit: match unit {
                Unit::Day => CalendarUnit::Day,
                Unit::Week => CalendarUnit::Week,
                Unit::Month => CalendarUnit::Month,
            },
            utc_offset_minutes: a.utc_offset,
        },
        (None, None) => anyhow::bail!("give --rolling LENGTH or --calendar day|week|month"),
    };
    let limit = match (a.count, a.sum) {
        (Some(max), _) => Limit::Count { max },
        (None, Some((field, max))) => Limit::Sum { field, max },
        (None, None) => anyhow::bail!("give --count N or --sum FIELD=MAX"),
    };
    Ok((
        Budget {
            id: a.id,
            scope,
            per: a.per,
            window,
            limit,
        },
        a.by,
    ))
}

/// A budget's counters in the window holding `now`.
fn counters(j: &dyn JournalStore, b: &Budget, now: i64) -> anyhow::Result<Vec<Counter>> {
    Ok(interlock::budget::counters(j, b, now)?)
}

fn counter_json(c: &Counter) -> Value {
    json!({
        "bucket": c.bucket,
        "used": c.used,
        "reserved": c.reserved,
        "left": c.left,
    })
}

fn budget_json(b: &Budget, counters: &[Counter]) -> Value {
    json!({
        "budget": b,
        "rule": b.describe(),
        "max": b.max(),
        "counters": counters.iter().map(counter_json).collect::<Vec<_>>(),
    })
}

fn change_line(c: &BudgetChange) -> String {
    match &c.budget {
        Some(b) => format!(
            "#{} at {} by {}: set, {} ≤ {}",
            c.n,
            c.at_ms,
            c.by,
            b.describe(),
            b.max()
        ),
        None => format!("#{} at {} by {}: removed", c.n, c.at_ms, c.by),
    }
}

pub(crate) fn run(j: &dyn JournalStore, cmd: BudgetCmd) -> anyhow::Result<()> {
    let now = SystemClock.now_ms();
    match cmd {
        BudgetCmd::Set(args) => {
            let (budget, by) = budget_of(args)?;
            let change = j.set_budget(&budget, &by)?;
            println!(
                "set budget {} (change #{}): at most {} {}",
                budget.id,
                change.n,
                budget.max(),
                budget.describe()
            );
        }
        BudgetCmd::Remove { id, by } => match j.remove_budget(&id, &by)? {
            Some(c) => println!("removed budget {id} (change #{})", c.n),
            None => anyhow::bail!("no budget {id} is in force: `interlock budget list` shows them"),
        },
        BudgetCmd::List { json } => {
            let budgets = in_force(&j.budget_changes()?);
            let mut out = Vec::new();
            for b in &budgets {
                out.push((b, counters(j, b, now)?));
            }
            if json {
                let v: Vec<Value> = out.iter().map(|(b, c)| budget_json(b, c)).collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            println!(
                "{:<24} {:>10} {:>10} {:>10} {:>10}  RULE",
                "ID", "MAX", "USED", "RESERVED", "LEFT"
            );
            for (b, counters) in &out {
                let mut shown = false;
                for c in counters {
                    let v = counter_json(c);
                    let id = if c.bucket == "[]" {
                        b.id.clone()
                    } else {
                        format!("{} {}", b.id, c.bucket)
                    };
                    println!(
                        "{:<24} {:>10} {:>10} {:>10} {:>10}  {}",
                        id,
                        b.max(),
                        v["used"],
                        v["reserved"],
                        v["left"],
                        b.describe()
                    );
                    shown = true;
                }
                if !shown {
                    println!(
                        "{:<24} {:>10} {:>10} {:>10} {:>10}  {}",
                        b.id,
                        b.max(),
                        0,
                        0,
                        b.max(),
                        b.describe()
                    );
                }
            }
        }
        BudgetCmd::Show { id, json } => {
            let changes: Vec<BudgetChange> = j
                .budget_changes()?
                .into_iter()
                .filter(|c| c.id == id)
                .collect();
            if changes.is_empty() {
                anyhow::bail!("no budget {id} was ever set: `interlock budget list` shows them");
            }
            let current = in_force(&changes).into_iter().next();
            let counters = match &current {
                Some(b) => counters(j, b, now)?,
                None => Vec::new(),
            };
            if json {
                let places: Vec<Value> = counters
                    .iter()
                    .flat_map(|c| {
                        c.places.iter().map(|(h, class)| {
                            json!({"bucket": c.bucket, "key": h.key, "amount": h.amount, "at_ms": h.at_ms, "until_ms": h.until_ms, "state": class.as_str()})
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "id": id,
                        "in_force": current.as_ref().map(|b| budget_json(b, &counters)),
                        "changes": changes,
                        "places": places,
                    }))?
                );
                return Ok(());
            }
            match &current {
                Some(b) => println!("budget {id}: at most {} {}", b.max(), b.describe()),
                None => println!("budget {id}: removed"),
            }
            for c in &changes {
                println!("  {}", change_line(c));
            }
            for c in &counters {
                let v = counter_json(c);
                println!(
                    "  counter {}: {} used, {} reserved, {} left",
                    c.bucket, v["used"], v["reserved"], v["left"]
                );
                for (h, class) in &c.places {
                    println!(
                        "    {} {} from {} to {} ({})",
                        h.key,
                        h.amount,
                        h.at_ms,
                        h.until_ms,
                        class.as_str()
                    );
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_offsets_read_as_people_write_them() {
        assert_eq!(duration_ms("90s"), Ok(90_000));
        assert_eq!(duration_ms("1h"), Ok(3_600_000));
        assert!(duration_ms("1y").is_err());
        assert!(duration_ms("0s").is_err());
        assert_eq!(offset_minutes("UTC"), Ok(0));
        assert_eq!(offset_minutes("+02:00"), Ok(120));
        assert_eq!(offset_minutes("UTC-05:30"), Ok(-330));
        assert!(offset_minutes("Europe/Paris").is_err());
        assert!(offset_minutes("+-05:00").is_err());
        assert!(offset_minutes("+02:-30").is_err());
        assert!(offset_minutes("+15:00").is_err());
        assert_eq!(field_max("amount=500"), Ok(("amount".into(), 500)));
    }
}
