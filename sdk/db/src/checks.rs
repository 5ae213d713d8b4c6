//! The checks a measured stage must pass before it commits: pure functions of the plan, the
//! measured diff and the operator's policy, so the same stage always gets the same verdict and a
//! receipt can name each check by the digest of its configuration. A check that cannot judge
//! (a capped column holding text) refuses: fail closed.
//!
//! Every refusal comes twice. The operator's version says everything (tables, values, counts).
//! The agent's version names only the check and the plan's own statements: an agent whose plan
//! reached another tenant's rows learns that it was refused and which of its statements did it,
//! never whose rows, how many, or what they held.

use std::collections::{BTreeMap, BTreeSet};

use interlock::effect::{canonical_json, sha256_hex};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diff::{Change, Diff, Op};
use crate::plan::Plan;

/// The operator's rules for every plan a substrate stages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The only tables a stage may change (triggers' tables included). `None`: any table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<BTreeSet<String>>,
    /// At most this many rows changed per table; tables not named are not capped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_rows: BTreeMap<String, u64>,
    /// Tables no stage may delete a row from (a ledger, an audit trail, the orders of record):
    /// a plan whose statements, or the triggers they fire, delete one is refused, and so is one
    /// that empties such a table (`DELETE` without `WHERE`; PostgreSQL's `TRUNCATE` fires no row
    /// trigger, and a role that may truncate an observed table cannot stage at all).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub no_delete: BTreeSet<String>,
    /// Every changed row that has this column holds the plan's own tenant ([`Plan::tenant`]),
    /// before and after; a plan that states none is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_column: Option<String>,
    /// Caps on how much an integer column may change, summed over a table's changed rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delta_caps: Vec<DeltaCap>,
    /// Whether a plan that states its footprint must match the measured one exactly.
    #[serde(default = "yes")]
    pub footprint_must_match: bool,
    /// The calls a plan may ask for once it commits ([`Plan::outbox`]): per target name, the
    /// leases a call to it may run under. A plan asking for any other is refused. Empty: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outbox: BTreeMap<String, BTreeSet<String>>,
    /// Budgets and rate windows over what committed stages changed, as measured: each checked
    /// against every stage committed in its window, read with the window locked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<RowWindow>,
}

/// A limit over a rolling window on what stages changed, as the triggers measured it. With no
/// `column` it is a rate window: at most `max` rows of `table` changed by the stages committed
/// in the last `window_ms`, this one included. With one it is a budget: at most `max` added to
/// `table.column` in that time, a stage using what it added row by row: a row it lowers frees
/// no room and offsets no other row's increase. With `per` the window holds `max` for each value
/// of that column on its own: a customer's credits are bounded whatever another's are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowWindow {
    /// Its name (a plain name): what the substrate records each stage's use under.
    pub id: String,
    /// The table.
    pub table: String,
    /// The integer column a budget sums; none for a rate window (rows changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// A column of `table` naming whom a row's change is for (a customer, a tenant): the window
    /// then counts each value's rows apart ([`RowWindow::uses`]); none: one count for the
    /// whole table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<String>,
    /// The window's length, ms (more than 0).
    pub window_ms: u64,
    /// The most the window may hold.
    pub max: i64,
}

impl RowWindow {
    /// What `diff` uses of this window, by the name each use is recorded under (its id; with
    /// `per`, `<id>@<value>` for each value the stage's rows name: a whole number, or text as
    /// JSON), or why it cannot be judged.
    ///
    /// A row whose `per` value the stage changed left its old value and arrived at the new one
    /// whole: the new value uses all it holds, as for an inserted row. Otherwise moving a row to
    /// a fresh value, crediting it there and moving it back would credit anyone for nothing.
    pub fn uses(&self, diff: &Diff) -> Result<BTreeMap<String, i64>, String> {
        let rows = diff.changes.iter().filter(|c| c.table == self.table);
        let Some(per) = &self.per else {
            return Ok([(self.id.clone(), self.used_by(rows)?)].into());
        };
        let name = |image: &Option<serde_json::Map<String, Value>>| {
            image.as_ref().map(|i| self.use_name(per, i)).transpose()
        };
        let mut by_value: BTreeMap<String, Vec<Change>> = BTreeMap::new();
        for c in rows {
            match (name(&c.before)?, name(&c.after)?) {
                (Some(from), Some(to)) if from != to => {
                    let left = Change {
                        after: None,
                        ..c.clone()
                    };
                    let arrived = Change {
                        before: None,
                        ..c.clone()
                    };
                    by_value.entry(from).or_default().push(left);
                    by_value.entry(to).or_default().push(arrived);
                }
                (Some(n), _) | (None, Some(n)) => by_value.entry(n).or_default().push(c.clone()),
                (None, None) => {}
            }
        }
        by_value
            .into_iter()
            .map(|(name, rows)| Ok((name, self.used_by(rows.iter())?)))
            .collect()
    }

    /// The name a use for the row `image`'s value of the `per` column is recorded under: only a
    /// whole number (`10.0` is `10`) or text, so one value has one name. A row without the
    /// column, or with no value in it, would be nobody's and never fill a window.
    fn use_name(
        &self,
        per: &str,
        image: &serde_json::Map<String, Value>,
    ) -> Result<String, String> {
        let value = match image.get(per) {
            None => return Err(format!("{}.{per} is not a column of its rows", self.table)),
            Some(Value::String(text)) => Value::String(text.clone()),
            Some(Value::Number(n)) => match n.as_i64().or_else(|| whole(n.as_f64())) {
                Some(i) => Value::from(i),
                None => {
                    return Err(format!(
                        "{}.{per} holds {n}, not a whole number",
                        self.table
                    ));
                }
            },
            Some(other) => {
                return Err(format!(
                    "{}.{per} holds {other}: a window counts per whole number or text only",
                    self.table
                ));
            }
        };
        Ok(format!(
            "{}@{}",
            self.id,
            String::from_utf8_lossy(&canonical_json(&value))
        ))
    }

    /// What `rows` use of the window: rows changed, or what they added to the column.
    fn used_by<'a>(&self, rows: impl Iterator<Item = &'a Change> + Clone) -> Result<i64, String> {
        match &self.column {
            None => Ok(i64::try_from(rows.count()).unwrap_or(i64::MAX)),
            Some(column)
                if rows.clone().any(|c| {
                    ![&c.before, &c.after]
                        .iter()
                        .any(|i| i.as_ref().is_some_and(|i| i.contains_key(column)))
                }) =>
            {
                // A misspelt column would count as 0 and the budget would never fill.
                Err(format!(
                    "{}.{column} is not a column of its rows",
                    self.table
                ))
            }
            // What the stage added, row by row: a decrease elsewhere frees nothing.
            Some(column) => moved(rows, column)
                .map(|m| m.added)
                .map_err(|v| format!("{}.{column} holds {v}, not an integer", self.table)),
        }
    }

    /// Why the window cannot be kept, if it cannot: a name the substrate cannot record under,
    /// or an empty window.
    pub fn invalid(&self) -> Option<String> {
        if !crate::plan::is_plain_name(&self.id) {
            Some(format!(
                "window {:?} is not a plain name (letters, digits, `_`)",
                self.id
            ))
        } else if self.window_ms == 0 {
            Some(format!("window {} is 0 ms long", self.id))
        } else {
            None
        }
    }
}

/// A float that is a whole number within `i64`, as that number.
fn whole(f: Option<f64>) -> Option<i64> {
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    f.filter(|f| f.fract() == 0.0 && f.abs() < i64::MAX as f64)
        .map(|f| f as i64)
}

/// What the stages committed within each window used of it, by the name each use is recorded
/// under ([`RowWindow::uses`]): read by the substrate with the windows locked, before the checks
/// judge the stage.
pub type Spent = BTreeMap<String, i64>;

fn yes() -> bool {
    true
}

impl Default for Policy {
    /// No table, row, tenant or delta rule; a stated footprint must match; no outbox calls; no
    /// windows.
    fn default() -> Self {
        Self {
            tables: None,
            max_rows: BTreeMap::new(),
            no_delete: BTreeSet::new(),
            tenant_column: None,
            delta_caps: Vec::new(),
            footprint_must_match: true,
            outbox: BTreeMap::new(),
            windows: Vec::new(),
        }
    }
}

/// A cap on how much `column` of `table` may move in one stage: every changed row's after −
/// before (an insert counts its value, a delete minus its value) in absolute value, added up, so
/// rows moving opposite ways do not cancel out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaCap {
    /// The table.
    pub table: String,
    /// The integer column.
    pub column: String,
    /// The largest allowed absolute change.
    pub max: i64,
}

/// One check's judgement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The check's name.
    pub check: String,
    /// The SHA-256 of the check's configuration.
    pub config: String,
    /// Whether the stage passed it.
    pub passed: bool,
    /// For the operator: everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// For the agent: only the check and the plan's own statement names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// Every check's judgement of one stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// One per check, in a fixed order.
    pub findings: Vec<Finding>,
}

impl Verdict {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.findings.iter().all(|f| f.passed)
    }

    /// The refusal as the operator reads it.
    pub fn for_operator(&self) -> String {
        self.refusals(|f| f.operator.as_deref())
    }

    /// The refusal as the agent reads it.
    pub fn for_agent(&self) -> String {
        self.refusals(|f| f.agent.as_deref())
    }

    fn refusals(&self, text: impl Fn(&Finding) -> Option<&str>) -> String {
        self.findings
            .iter()
            .filter(|f| !f.passed)
            .map(|f| format!("{}: {}", f.check, text(f).unwrap_or("refused")))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Judge `diff`, measured while staging `plan`, by `policy`; its windows by what `spent` says
/// committed stages used of them (a window missing from `spent` was not read: refused).
pub fn judge(plan: &Plan, diff: &Diff, policy: &Policy, spent: &Spent) -> Verdict {
    let mut findings = vec![
        tables(diff, policy),
        max_rows(diff, policy),
        no_delete(diff, policy),
        tenant(plan, diff, policy),
        delta_caps(diff, policy),
    ];
    if let Some(stated) = &plan.footprint {
        findings.push(footprint(stated, diff, policy));
    }
    if !plan.outbox.is_empty() {
        findings.push(outbox(plan, policy));
    }
    if !policy.windows.is_empty() {
        findings.push(windows(diff, policy, spent));
    }
    Verdict { findings }
}

/// Every window has room for what the stage uses of it. The agent hears only which window and
/// which of its own statements: never what others used, nor the window's size.
fn windows(diff: &Diff, policy: &Policy, spent: &Spent) -> Finding {
    let mut problems = Vec::new();
    let mut culprits: Vec<&Change> = Vec::new();
    for w in &policy.windows {
        let rows = diff.changes.iter().filter(|c| c.table == w.table);
        if policy.windows.iter().filter(|o| o.id == w.id).count() > 1 {
            problems.push(format!(
                "window {} is named twice: each window needs a name of its own",
                w.id
            ));
            culprits.extend(rows);
            continue;
        }
        if let Some(why) = w.invalid() {
            problems.push(format!("{why}: it cannot be kept"));
            culprits.extend(rows);
            continue;
        }
        let uses = match w.uses(diff) {
            Ok(u) => u,
            Err(why) => {
                problems.push(format!("{}: {why}, so the window cannot judge it", w.id));
                culprits.extend(rows);
                continue;
            }
        };
        for (name, used) in uses {
            let Some(before) = spent.get(&name) else {
                problems.push(format!(
                    "{name}: what earlier stages used of it was not read"
                ));
                culprits.extend(rows.clone());
                continue;
            };
            if used > 0 && before.saturating_add(used) > w.max {
                problems.push(format!(
                    "{name}: {before} used in the last {} ms and this plan adds {used}, at most {}",
                    w.window_ms, w.max
                ));
                // With `per`, the statements that moved this value's rows only.
                culprits.extend(rows.clone().filter(|c| {
                    w.per.as_ref().is_none_or(|per| {
                        [&c.before, &c.after]
                            .into_iter()
                            .flatten()
                            .any(|i| w.use_name(per, i).is_ok_and(|n| n == name))
                    })
                }));
            }
        }
    }
    let refusal = (!problems.is_empty()).then(|| (problems.join(", "), statements(culprits)));
    finding("windows", &policy.windows, refusal)
}

/// Every call the plan asks for goes to a target, under a lease, that the policy allows.
fn outbox(plan: &Plan, policy: &Policy) -> Finding {
    let refused: Vec<_> = plan
        .outbox
        .iter()
        .filter(|c| {
            !policy
                .outbox
                .get(&c.target)
                .is_some_and(|leases| leases.contains(&c.lease))
        })
        .collect();
    let refusal = (!refused.is_empty()).then(|| {
        let operator: Vec<String> = refused
            .iter()
            .map(|c| {
                format!(
                    "call `{}` asks target `{}` under lease `{}`",
                    c.id, c.target, c.lease
                )
            })
            .collect();
        let ids: Vec<String> = refused.iter().map(|c| format!("`{}`", c.id)).collect();
        (
            format!(
                "{}, which the policy's outbox does not allow",
                operator.join("; ")
            ),
            format!("refused; call {}", ids.join(", ")),
        )
    });
    finding("outbox", &policy.outbox, refusal)
}

fn digest(config: &impl Serialize) -> String {
    sha256_hex(&canonical_json(
        &serde_json::to_value(config).unwrap_or(Value::Null),
    ))
}

/// The plan's statements behind `changes`, named for the agent.
fn statements<'a>(changes: impl IntoIterator<Item = &'a Change>) -> String {
    let names: BTreeSet<&str> = changes
        .into_iter()
        .map(|c| c.statement.as_deref().unwrap_or("(no statement)"))
        .collect();
    let names: Vec<String> = names.into_iter().map(|n| format!("`{n}`")).collect();
    format!("refused; statement {}", names.join(", "))
}

fn finding(check: &str, config: &impl Serialize, refusal: Option<(String, String)>) -> Finding {
    let passed = refusal.is_none();
    let (operator, agent) = refusal.unzip();
    Finding {
        check: check.to_owned(),
        config: digest(config),
        passed,
        operator,
        agent,
    }
}

fn tables(diff: &Diff, policy: &Policy) -> Finding {
    let refusal = policy.tables.as_ref().and_then(|allowed| {
        let outside: Vec<&Change> = diff
            .changes
            .iter()
            .filter(|c| !allowed.contains(&c.table))
            .collect();
        let names: BTreeSet<&str> = outside.iter().map(|c| c.table.as_str()).collect();
        (!outside.is_empty()).then(|| {
            (
                format!("changed rows in tables outside the policy: {names:?}"),
                statements(outside),
            )
        })
    });
    finding("tables", &policy.tables, refusal)
}

fn max_rows(diff: &Diff, policy: &Policy) -> Finding {
    let counts = diff.rows_per_table();
    let over: Vec<String> = policy
        .max_rows
        .iter()
        .filter_map(|(t, &max)| {
            let n = counts.get(t).copied().unwrap_or(0);
            (n > max).then(|| format!("{t}: {n} rows changed, at most {max}"))
        })
        .collect();
    let refusal = (!over.is_empty()).then(|| {
        let tables: Vec<&String> = policy
            .max_rows
            .iter()
            .filter(|(t, max)| counts.get(*t).copied().unwrap_or(0) > **max)
            .map(|(t, _)| t)
            .collect();
        (
            over.join(", "),
            statements(diff.changes.iter().filter(|c| tables.contains(&&c.table))),
        )
    });
    finding("max_rows", &policy.max_rows, refusal)
}

fn no_delete(diff: &Diff, policy: &Policy) -> Finding {
    let deleted: Vec<&Change> = diff
        .changes
        .iter()
        .filter(|c| c.op == Op::Delete && policy.no_delete.contains(&c.table))
        .collect();
    let refusal = (!deleted.is_empty()).then(|| {
        let tables: BTreeSet<&str> = deleted.iter().map(|c| c.table.as_str()).collect();
        let tables: Vec<&str> = tables.into_iter().collect();
        (
            format!(
                "{} row(s) deleted from {}, where no row may be deleted",
                deleted.len(),
                tables.join(", ")
            ),
            statements(deleted.iter().copied()),
        )
    });
    finding("no_delete", &policy.no_delete, refusal)
}

fn tenant(plan: &Plan, diff: &Diff, policy: &Policy) -> Finding {
    let refusal = policy.tenant_column.as_ref().and_then(|column| {
        let Some(own) = &plan.tenant else {
            return Some((
                format!("the policy binds plans to `{column}`, and the plan states no tenant"),
                "refused; the plan must state the tenant it acts for".to_owned(),
            ));
        };
        // Every image of every changed row that has the column holds the plan's own value.
        let others: Vec<&Change> = diff
            .changes
            .iter()
            .filter(|c| c.images().any(|i| i.get(column).is_some_and(|v| v != own)))
            .collect();
        (!others.is_empty()).then(|| {
            let seen: std::collections::BTreeSet<String> = others
                .iter()
                .flat_map(|c| c.images())
                .filter_map(|i| i.get(column))
                .map(Value::to_string)
                .collect();
            (
                format!("the plan acts for {own}, and changed rows whose `{column}` is {seen:?}"),
                statements(others),
            )
        })
    });
    finding("tenant", &policy.tenant_column, refusal)
}

/// The sum over `table`'s changed rows of after − before in `column` (a missing or null value
/// counts as 0), or the first value that is not an integer.
/// How `table.column` moved over the diff's rows: the net change, every row's change in absolute
/// value added up, and the increases alone added up. A limit judged on the net alone is blind
/// to a plan that adds to one row what it takes from another.
struct Moved {
    net: i64,
    gross: i64,
    added: i64,
}

fn column_moved(diff: &Diff, table: &str, column: &str) -> Result<Moved, Value> {
    moved(diff.changes.iter().filter(|c| c.table == table), column)
}

fn moved<'a>(mut rows: impl Iterator<Item = &'a Change>, column: &str) -> Result<Moved, Value> {
    let read = |image: &Option<serde_json::Map<String, Value>>| match image
        .as_ref()
        .and_then(|i| i.get(column))
    {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_i64().ok_or_else(|| v.clone()),
    };
    rows.try_fold(
        Moved {
            net: 0,
            gross: 0,
            added: 0,
        },
        |m, c| {
            let d = read(&c.after)?.saturating_sub(read(&c.before)?);
            Ok(Moved {
                net: m.net.saturating_add(d),
                gross: m
                    .gross
                    .saturating_add(i64::try_from(d.unsigned_abs()).unwrap_or(i64::MAX)),
                added: m.added.saturating_add(d.max(0)),
            })
        },
    )
}

fn delta_caps(diff: &Diff, policy: &Policy) -> Finding {
    let mut problems = Vec::new();
    let mut culprits: Vec<&Change> = Vec::new();
    for cap in &policy.delta_caps {
        let rows = diff.changes.iter().filter(|c| c.table == cap.table);
        // Every row's change counts, whichever way: +99,900 to one row and -99,900 from another
        // moved 199,800, whatever they net to.
        match column_moved(diff, &cap.table, &cap.column) {
            Err(v) => {
                problems.push(format!(
                    "{}.{} holds {v}, not an integer: the cap cannot judge it",
                    cap.table, cap.column
                ));
                culprits.extend(rows);
            }
            Ok(m) if m.gross.unsigned_abs() > cap.max.unsigned_abs() => {
                problems.push(format!(
                    "{}.{} moved by {} over its rows (net {}), at most ±{} in all",
                    cap.table, cap.column, m.gross, m.net, cap.max
                ));
                culprits.extend(rows);
            }
            Ok(_) => {}
        }
    }
    let refusal = (!problems.is_empty()).then(|| (problems.join(", "), statements(culprits)));
    finding("delta_caps", &policy.delta_caps, refusal)
}

fn footprint(stated: &BTreeMap<String, u64>, diff: &Diff, policy: &Policy) -> Finding {
    let measured = diff.rows_per_table();
    let differs = policy.footprint_must_match && *stated != measured;
    let refusal = differs.then(|| {
        (
            format!("stated {stated:?}, measured {measured:?}"),
            format!(
                "refused; the rows changed differ from the plan's stated footprint {}",
                serde_json::to_string(stated).unwrap_or_default()
            ),
        )
    });
    finding("footprint", stated, refusal)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::Statement;

    fn change(statement: &str, table: &str, before: Value, after: Value) -> Change {
        let image = |v: Value| v.as_object().cloned();
        Change {
            statement: Some(statement.into()),
            table: table.into(),
            op: Op::Update,
            before: image(before),
            after: image(after),
        }
    }

    fn plan() -> Plan {
        Plan::new(vec![Statement {
            name: "credit".into(),
            sql: "UPDATE accounts SET balance = balance + 5 WHERE tenant = 't1'".into(),
            params: BTreeMap::new(),
        }])
        .unwrap()
        .tenant(json!("t1"))
    }

    #[test]
    fn a_stage_within_every_rule_passes() {
        let diff = Diff {
            changes: vec![change(
                "credit",
                "accounts",
                json!({"tenant": "t1", "balance": 10}),
                json!({"tenant": "t1", "balance": 15}),
            )],
        };
        let policy = Policy {
            tables: Some(["accounts".to_owned()].into()),
            max_rows: [("accounts".to_owned(), 1)].into(),
            no_delete: ["accounts".to_owned()].into(),
            tenant_column: Some("tenant".into()),
            delta_caps: vec![DeltaCap {
                table: "accounts".into(),
                column: "balance".into(),
                max: 5,
            }],
            footprint_must_match: true,
            outbox: BTreeMap::new(),
            windows: Vec::new(),
        };
        let v = judge(
            &plan().footprint([("accounts".to_owned(), 1)].into()),
            &diff,
            &policy,
            &Spent::new(),
        );
        assert!(v.passed(), "{}", v.for_operator());
        assert_eq!(v.findings.len(), 6);
    }

    #[test]
    fn a_row_deleted_from_a_table_of_record_is_refused_naming_its_statement() {
        let deleted = Change {
            statement: Some("purge".into()),
            table: "ledger".into(),
            op: Op::Delete,
            before: json!({"id": 7, "amount": 500}).as_object().cloned(),
            after: None,
        };
        let updated = change(
            "credit",
            "accounts",
            json!({"tenant": "t1", "balance": 10}),
            json!({"tenant": "t1", "balance": 15}),
        );
        let policy = Policy {
            no_delete: ["ledger".to_owned()].into(),
            ..Policy::default()
        };
        let v = judge(
            &plan(),
            &Diff {
                changes: vec![updated.clone(), deleted],
            },
            &policy,
            &Spent::new(),
        );
        assert!(!v.passed());
        assert!(
            v.for_operator()
                .contains("no_delete: 1 row(s) deleted from ledger"),
            "{}",
            v.for_operator()
        );
        assert_eq!(
            v.for_agent(),
            "no_delete: refused; statement `purge`",
            "the agent hears its own statement only"
        );
        let only_updates = judge(
            &plan(),
            &Diff {
                changes: vec![updated],
            },
            &policy,
            &Spent::new(),
        );
        assert!(only_updates.passed(), "{}", only_updates.for_operator());
    }

    #[test]
    fn a_second_tenant_is_refused_and_the_agent_hears_only_its_own_statement() {
        let diff = Diff {
            changes: vec![
                change(
                    "credit",
                    "accounts",
                    json!({"tenant": "t1", "balance": 10}),
                    json!({"tenant": "t1", "balance": 15}),
                ),
                change(
                    "credit",
                    "accounts",
                    json!({"tenant": "secret-co", "balance": 999_999}),
                    json!({"tenant": "secret-co", "balance": 1_000_004}),
                ),
            ],
        };
        let policy = Policy {
            tenant_column: Some("tenant".into()),
            ..Policy::default()
        };
        let v = judge(&plan(), &diff, &policy, &Spent::new());
        assert!(!v.passed());
        assert!(v.for_operator().contains("secret-co"));
        assert_eq!(v.for_agent(), "tenant: refused; statement `credit`");
        // Rows of one tenant only, but not the plan's own: refused too.
        let only_other = Diff {
            changes: diff.changes[1..].to_vec(),
        };
        assert!(!judge(&plan(), &only_other, &policy, &Spent::new()).passed());
        let mut unstated = plan();
        unstated.tenant = None;
        let v = judge(&unstated, &Diff::default(), &policy, &Spent::new());
        assert_eq!(
            v.for_agent(),
            "tenant: refused; the plan must state the tenant it acts for"
        );
    }

    #[test]
    fn a_cap_over_a_column_that_holds_text_refuses() {
        let diff = Diff {
            changes: vec![change(
                "credit",
                "accounts",
                json!({"balance": "ten"}),
                json!({"balance": 15}),
            )],
        };
        let policy = Policy {
            delta_caps: vec![DeltaCap {
                table: "accounts".into(),
                column: "balance".into(),
                max: 100,
            }],
            ..Policy::default()
        };
        let v = judge(&plan(), &diff, &policy, &Spent::new());
        assert!(!v.passed());
        assert!(v.for_operator().contains("not an integer"));
    }

    #[test]
    fn a_stated_footprint_the_database_did_not_match_is_refused() {
        let diff = Diff {
            changes: vec![
                change("credit", "accounts", json!({"a": 1}), json!({"a": 2})),
                change("credit", "audit", Value::Null, json!({"a": 2})),
            ],
        };
        let v = judge(
            &plan().footprint([("accounts".to_owned(), 1)].into()),
            &diff,
            &Policy {
                footprint_must_match: true,
                ..Policy::default()
            },
            &Spent::new(),
        );
        assert!(!v.passed());
        assert!(v.for_operator().contains("audit"));
        assert!(!v.for_agent().contains("audit"), "{}", v.for_agent());
    }

    fn budget(max: i64) -> Policy {
        Policy {
            windows: vec![RowWindow {
                id: "credit_hour".into(),
                table: "accounts".into(),
                column: Some("balance".into()),
                per: None,
                window_ms: 3_600_000,
                max,
            }],
            ..Policy::default()
        }
    }

    fn credited(by: i64) -> Diff {
        Diff {
            changes: vec![change(
                "credit",
                "accounts",
                json!({"tenant": "t1", "balance": 10}),
                json!({"tenant": "t1", "balance": 10 + by}),
            )],
        }
    }

    #[test]
    fn a_budget_refuses_the_plan_that_would_overrun_it_and_tells_the_agent_no_totals() {
        let spent: Spent = [("credit_hour".to_owned(), 7_300)].into();
        let fits = judge(&plan(), &credited(2_700), &budget(10_000), &spent);
        assert!(fits.passed(), "{}", fits.for_operator());
        let over = judge(&plan(), &credited(2_701), &budget(10_000), &spent);
        assert!(!over.passed());
        assert!(
            over.for_operator().contains("7300 used"),
            "{}",
            over.for_operator()
        );
        let agent = over.for_agent();
        assert_eq!(agent, "windows: refused; statement `credit`");
        assert_eq!(
            judge(
                &plan(),
                &credited(2),
                &budget(10_000),
                &[("credit_hour".to_owned(), 9_999)].into()
            )
            .for_agent(),
            agent,
            "what others used changes nothing the agent hears"
        );
    }

    #[test]
    fn a_window_whose_use_was_not_read_or_cannot_be_kept_refuses() {
        let unread = judge(&plan(), &credited(1), &budget(10_000), &Spent::new());
        assert!(!unread.passed(), "fail closed: {}", unread.for_operator());
        let mut empty = budget(10_000);
        empty.windows[0].window_ms = 0;
        let spent: Spent = [("credit_hour".to_owned(), 0)].into();
        assert!(!judge(&plan(), &credited(1), &empty, &spent).passed());
        let mut text = credited(1);
        text.changes[0].after = json!({"balance": "lots"}).as_object().cloned();
        assert!(!judge(&plan(), &text, &budget(10_000), &spent).passed());
        let mut misspelt = budget(10_000);
        misspelt.windows[0].column = Some("balanse".into());
        let refused = judge(&plan(), &credited(1), &misspelt, &spent);
        assert!(
            refused.for_operator().contains("not a column"),
            "{}",
            refused.for_operator()
        );
        let mut twice = budget(10_000);
        twice.windows.push(RowWindow {
            column: None,
            ..twice.windows[0].clone()
        });
        let refused = judge(&plan(), &credited(1), &twice, &spent);
        assert!(
            refused.for_operator().contains("named twice"),
            "{}",
            refused.for_operator()
        );
    }

    /// +`by` to one account and -`by` from another: nets to nothing.
    fn moved_between_two(by: i64) -> Diff {
        let mut d = credited(by);
        d.changes.push(change(
            "credit",
            "accounts",
            json!({"tenant": "t1", "balance": 200_000}),
            json!({"tenant": "t1", "balance": 200_000 - by}),
        ));
        d
    }

    #[test]
    fn a_cap_and_a_budget_count_every_rows_movement_not_what_the_rows_net_to() {
        let capped = Policy {
            delta_caps: vec![DeltaCap {
                table: "accounts".into(),
                column: "balance".into(),
                max: 500,
            }],
            ..Policy::default()
        };
        let none = Spent::new();
        assert!(judge(&plan(), &moved_between_two(200), &capped, &none).passed());
        let swung = judge(&plan(), &moved_between_two(99_900), &capped, &none);
        assert!(!swung.passed(), "+99,900 / -99,900 under a ±500 cap");
        assert!(
            swung.for_operator().contains("moved by 199800"),
            "{}",
            swung.for_operator()
        );
        // A full budget refuses a plan that adds 100,000 to one row, whatever it takes from
        // another, and the stage's use is what it added.
        let full: Spent = [("credit_hour".to_owned(), 1_000)].into();
        assert!(!judge(&plan(), &moved_between_two(100_000), &budget(1_000), &full).passed());
        assert_eq!(
            budget(0).windows[0]
                .uses(&moved_between_two(100_000))
                .unwrap(),
            [("credit_hour".to_owned(), 100_000)].into()
        );
    }

    #[test]
    fn a_plan_that_lowers_the_column_uses_nothing_and_a_rate_window_counts_rows() {
        let w = &budget(0).windows[0];
        assert_eq!(w.uses(&credited(-50)).unwrap()["credit_hour"], 0);
        let full: Spent = [("credit_hour".to_owned(), 0)].into();
        assert!(judge(&plan(), &credited(-50), &budget(0), &full).passed());
        let rate = RowWindow {
            column: None,
            ..w.clone()
        };
        let mut two = credited(1);
        two.changes.push(two.changes[0].clone());
        assert_eq!(rate.uses(&two).unwrap()["credit_hour"], 2);
    }

    fn credit(customer: i64, from: i64, by: i64) -> Change {
        change(
            "credit",
            "accounts",
            json!({"customer": customer, "balance": from}),
            json!({"customer": customer, "balance": from + by}),
        )
    }

    #[test]
    fn a_window_per_customer_bounds_each_customers_credits_whatever_anothers_are() {
        let mut per_customer = budget(1_000);
        per_customer.windows[0].per = Some("customer".into());
        let w = &per_customer.windows[0];
        let two = Diff {
            changes: vec![credit(10, 0, 600), credit(20, 0, 300), credit(10, 600, 100)],
        };
        assert_eq!(
            w.uses(&two).unwrap(),
            [
                ("credit_hour@10".to_owned(), 700),
                ("credit_hour@20".to_owned(), 300)
            ]
            .into(),
            "each customer's use under a name of its own"
        );
        // Customer 10 has 400 left and asks 700: refused; customer 20 alone fits.
        let spent: Spent = [
            ("credit_hour@10".to_owned(), 600),
            ("credit_hour@20".to_owned(), 0),
        ]
        .into();
        let v = judge(&plan(), &two, &per_customer, &spent);
        assert!(!v.passed());
        assert!(
            v.for_operator()
                .contains("credit_hour@10: 600 used in the last 3600000 ms and this plan adds 700"),
            "{}",
            v.for_operator()
        );
        let alone = Diff {
            changes: vec![credit(20, 0, 300)],
        };
        assert!(judge(&plan(), &alone, &per_customer, &spent).passed());
        // A use nobody read, or a row that names no customer, is refused.
        let unread: Spent = [("credit_hour@10".to_owned(), 0)].into();
        let v = judge(&plan(), &two, &per_customer, &unread);
        assert!(
            v.for_operator()
                .contains("credit_hour@20: what earlier stages used of it was not read")
        );
        let nobody = Diff {
            changes: vec![change(
                "credit",
                "accounts",
                json!({"balance": 0}),
                json!({"balance": 5}),
            )],
        };
        assert!(w.uses(&nobody).is_err());
        assert!(!judge(&plan(), &nobody, &per_customer, &spent).passed());
    }

    #[test]
    fn a_row_moved_to_another_customer_arrives_whole_so_a_round_trip_is_charged() {
        let mut per_customer = budget(1_000);
        per_customer.windows[0].per = Some("customer".into());
        let moved = Diff {
            changes: vec![change(
                "credit",
                "accounts",
                json!({"customer": 10, "balance": 0}),
                json!({"customer": 20, "balance": 50}),
            )],
        };
        assert_eq!(
            per_customer.windows[0].uses(&moved).unwrap(),
            [
                ("credit_hour@10".to_owned(), 0),
                ("credit_hour@20".to_owned(), 50)
            ]
            .into()
        );
        // Moved to a fresh customer, credited there, moved back: the customer it came back to
        // uses all it arrived with.
        let round_trip = Diff {
            changes: vec![
                change(
                    "hide",
                    "accounts",
                    json!({"customer": 10, "balance": 0}),
                    json!({"customer": 999, "balance": 0}),
                ),
                change(
                    "credit",
                    "accounts",
                    json!({"customer": 999, "balance": 0}),
                    json!({"customer": 999, "balance": 1_000}),
                ),
                change(
                    "unhide",
                    "accounts",
                    json!({"customer": 999, "balance": 1_000}),
                    json!({"customer": 10, "balance": 1_000}),
                ),
            ],
        };
        let uses = per_customer.windows[0].uses(&round_trip).unwrap();
        assert_eq!(uses["credit_hour@10"], 1_000, "{uses:?}");
        let spent: Spent = [
            ("credit_hour@10".to_owned(), 500),
            ("credit_hour@999".to_owned(), 0),
        ]
        .into();
        assert!(!judge(&plan(), &round_trip, &per_customer, &spent).passed());
    }

    #[test]
    fn one_customer_has_one_name_and_a_value_that_is_no_name_refuses() {
        let mut per_customer = budget(1_000);
        per_customer.windows[0].per = Some("customer".into());
        let w = &per_customer.windows[0];
        let credited_as = |customer: Value| Diff {
            changes: vec![change(
                "credit",
                "accounts",
                json!({"customer": customer.clone(), "balance": 0}),
                json!({"customer": customer, "balance": 5}),
            )],
        };
        for same in [json!(10), json!(10.0)] {
            let uses = w.uses(&credited_as(same)).unwrap();
            assert_eq!(uses.keys().collect::<Vec<_>>(), ["credit_hour@10"]);
        }
        assert_eq!(
            w.uses(&credited_as(json!("c_10")))
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["credit_hour@\"c_10\""]
        );
        for nobody in [json!(null), json!(10.5), json!(true), json!({"id": 10})] {
            let refused = judge(
                &plan(),
                &credited_as(nobody.clone()),
                &per_customer,
                &Spent::new(),
            );
            assert!(!refused.passed(), "{nobody}");
        }
    }
}
