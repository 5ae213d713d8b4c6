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

use crate::diff::{Change, Diff};
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
}

fn yes() -> bool {
    true
}

impl Default for Policy {
    /// No table, row, tenant or delta rule; a stated footprint must match; no outbox calls.
    fn default() -> Self {
        Self {
            tables: None,
            max_rows: BTreeMap::new(),
            tenant_column: None,
            delta_caps: Vec::new(),
            footprint_must_match: true,
            outbox: BTreeMap::new(),
        }
    }
}

/// A cap on how much `column` of `table` may change in one stage: the sum over its changed rows
/// of after − before (an insert counts its value, a delete minus its value), in absolute value.
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

/// Judge `diff`, measured while staging `plan`, by `policy`.
pub fn judge(plan: &Plan, diff: &Diff, policy: &Policy) -> Verdict {
    let mut findings = vec![
        tables(diff, policy),
        max_rows(diff, policy),
        tenant(plan, diff, policy),
        delta_caps(diff, policy),
    ];
    if let Some(stated) = &plan.footprint {
        findings.push(footprint(stated, diff, policy));
    }
    if !plan.outbox.is_empty() {
        findings.push(outbox(plan, policy));
    }
    Verdict { findings }
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

fn delta_caps(diff: &Diff, policy: &Policy) -> Finding {
    let mut problems = Vec::new();
    let mut culprits: Vec<&Change> = Vec::new();
    for cap in &policy.delta_caps {
        let mut sum: i64 = 0;
        let mut unreadable = None;
        let rows: Vec<&Change> = diff
            .changes
            .iter()
            .filter(|c| c.table == cap.table)
            .collect();
        for c in &rows {
            let read = |image: &Option<serde_json::Map<String, Value>>| -> Result<i64, String> {
                match image.as_ref().and_then(|i| i.get(&cap.column)) {
                    None | Some(Value::Null) => Ok(0),
                    Some(v) => v.as_i64().ok_or_else(|| format!("{v}")),
                }
            };
            match (read(&c.after), read(&c.before)) {
                (Ok(a), Ok(b)) => sum = sum.saturating_add(a.saturating_sub(b)),
                (Err(v), _) | (_, Err(v)) => unreadable = Some(v),
            }
        }
        if let Some(v) = unreadable {
            problems.push(format!(
                "{}.{} holds {v}, not an integer: the cap cannot judge it",
                cap.table, cap.column
            ));
            culprits.extend(rows);
        } else if sum.unsigned_abs() > cap.max.unsigned_abs() {
            problems.push(format!(
                "{}.{} changed by {sum}, at most ±{}",
                cap.table, cap.column, cap.max
            ));
            culprits.extend(rows);
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
    use crate::diff::Op;
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
            tenant_column: Some("tenant".into()),
            delta_caps: vec![DeltaCap {
                table: "accounts".into(),
                column: "balance".into(),
                max: 5,
            }],
            footprint_must_match: true,
            outbox: BTreeMap::new(),
        };
        let v = judge(
            &plan().footprint([("accounts".to_owned(), 1)].into()),
            &diff,
            &policy,
        );
        assert!(v.passed(), "{}", v.for_operator());
        assert_eq!(v.findings.len(), 5);
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
        let v = judge(&plan(), &diff, &policy);
        assert!(!v.passed());
        assert!(v.for_operator().contains("secret-co"));
        assert_eq!(v.for_agent(), "tenant: refused; statement `credit`");
        // Rows of one tenant only, but not the plan's own: refused too.
        let only_other = Diff {
            changes: diff.changes[1..].to_vec(),
        };
        assert!(!judge(&plan(), &only_other, &policy).passed());
        let mut unstated = plan();
        unstated.tenant = None;
        let v = judge(&unstated, &Diff::default(), &policy);
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
        let v = judge(&plan(), &diff, &policy);
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
        );
        assert!(!v.passed());
        assert!(v.for_operator().contains("audit"));
        assert!(!v.for_agent().contains("audit"), "{}", v.for_agent());
    }
}
