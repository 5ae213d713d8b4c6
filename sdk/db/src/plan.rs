//! A plan: the whole of one database effect, as data. It travels as the effect's payload, so the
//! gate journals it, hashes it (the same key with another plan is a conflict, never a second
//! write) and hands it to the substrate unchanged after a crash. Everything a plan says is
//! checked when it is built and again when it is read back from a payload: an agent or a stale
//! journal row gets the same refusal as a typo.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sql_shape::{self, Place, ShapeError};

/// Why a plan was refused before it reached a database.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A statement's text.
    #[error("{place} `{name}`: {error}")]
    Shape {
        /// "statement" or "premise".
        place: &'static str,
        /// Its name in the plan.
        name: String,
        /// What is wrong with it.
        error: ShapeError,
    },
    /// A parameter the SQL uses was not given, or one given is not used.
    #[error("{place} `{name}`: {what}")]
    Parameters {
        /// "statement" or "premise".
        place: &'static str,
        /// Its name in the plan.
        name: String,
        /// Which parameter, and how.
        what: String,
    },
    /// A parameter's value that no column can hold.
    #[error(
        "{place} `{name}`, parameter `{param}`: {what}; give a string, a number, a boolean or null"
    )]
    Value {
        /// "statement" or "premise".
        place: &'static str,
        /// Its name in the plan.
        name: String,
        /// The parameter.
        param: String,
        /// What it was.
        what: &'static str,
    },
    /// Two entries with one name, or a name that is not a plain word.
    #[error("{0}")]
    Names(String),
    /// No statement at all.
    #[error("the plan changes nothing: give it at least one statement")]
    Empty,
    /// The payload is not a plan.
    #[error("the payload is not a database plan: {0}")]
    Payload(String),
}

/// One statement a plan runs: row changes, with named parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// Its name in messages and in the measured changes (`cancel_order`).
    pub name: String,
    /// One `INSERT`, `UPDATE` or `DELETE`, parameters written `:name`.
    pub sql: String,
    /// Each parameter's value, by name (without the colon).
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
}

/// A fact the plan was decided on: a query whose answer must still be the same inside the stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Premise {
    /// Its name in messages.
    pub name: String,
    /// One `SELECT`, parameters written `:name`.
    pub sql: String,
    /// Each parameter's value, by name.
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
    /// The rows it answered when the plan was decided: each row an object of column → value,
    /// in the query's order.
    pub expect: Vec<BTreeMap<String, Value>>,
}

/// How many rows the plan says it changes, per table: compared with what the database measured.
pub type Footprint = BTreeMap<String, u64>;

/// A call the plan asks to be made once its rows have committed (a refund, an email): written to
/// the outbox in the stage's transaction, so it exists if and only if the rows do, and delivered
/// afterwards through the gate by a relay ([`crate::outbox`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outgoing {
    /// Its name in the plan (a plain name): with the plan's effect key, it names the delivery's
    /// own effect key.
    pub id: String,
    /// The name of the gate target that delivers it.
    pub target: String,
    /// The lease the delivery runs under.
    pub lease: String,
    /// The request: the delivery's payload, as that target reads it.
    pub payload: Value,
}

/// A database effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The statements, run in this order in one transaction.
    pub statements: Vec<Statement>,
    /// The facts that must still hold, read in the same transaction before the statements run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub premises: Vec<Premise>,
    /// The rows the plan says it changes, per table (every row the database reports, triggers'
    /// rows included). `None`: not stated, not compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footprint: Option<Footprint>,
    /// The tenant the plan acts for: with a policy's tenant column, every row it changes must
    /// hold this value. It is a field of the payload, so a lease scoped to a tenant
    /// (`{"tenant": "t1"}`) binds a plan to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<Value>,
    /// Calls to make once the rows have committed, and only then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<Outgoing>,
}

impl Plan {
    /// A plan of `statements`, checked.
    pub fn new(statements: Vec<Statement>) -> Result<Self, PlanError> {
        let plan = Self {
            statements,
            premises: Vec::new(),
            footprint: None,
            tenant: None,
            outbox: Vec::new(),
        };
        plan.check()?;
        Ok(plan)
    }

    /// The same plan with a premise, checked.
    pub fn premise(mut self, premise: Premise) -> Result<Self, PlanError> {
        self.premises.push(premise);
        self.check()?;
        Ok(self)
    }

    /// The same plan stating how many rows it changes per table.
    #[must_use]
    pub fn footprint(mut self, footprint: Footprint) -> Self {
        self.footprint = Some(footprint);
        self
    }

    /// The plan, also asking for `call` once its rows have committed.
    pub fn then_send(mut self, call: Outgoing) -> Result<Self, PlanError> {
        self.outbox.push(call);
        self.check()?;
        Ok(self)
    }

    /// The same plan acting for `tenant`.
    #[must_use]
    pub fn tenant(mut self, tenant: Value) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// The plan as an effect's payload.
    pub fn to_payload(&self) -> Value {
        // A plan holds strings, numbers and maps only: it always serializes.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The plan an effect's payload holds, checked.
    pub fn from_payload(payload: &Value) -> Result<Self, PlanError> {
        let plan: Plan = serde_json::from_value(payload.clone())
            .map_err(|e| PlanError::Payload(e.to_string()))?;
        plan.check()?;
        Ok(plan)
    }

    /// Every rule of the module's doc.
    pub fn check(&self) -> Result<(), PlanError> {
        if self.statements.is_empty() {
            return Err(PlanError::Empty);
        }
        let mut names = std::collections::BTreeSet::new();
        for s in &self.statements {
            check_one("statement", &s.name, &s.sql, &s.params, Place::Change)?;
            if !names.insert(("statement", s.name.as_str())) {
                return Err(PlanError::Names(format!(
                    "two statements are named `{}`",
                    s.name
                )));
            }
        }
        for p in &self.premises {
            check_one("premise", &p.name, &p.sql, &p.params, Place::Premise)?;
            if !names.insert(("premise", p.name.as_str())) {
                return Err(PlanError::Names(format!(
                    "two premises are named `{}`",
                    p.name
                )));
            }
        }
        let mut ids = std::collections::BTreeSet::new();
        for call in &self.outbox {
            if !is_plain_name(&call.id) {
                return Err(PlanError::Names(format!(
                    "outbox id `{}` is not a plain name (letters, digits, `_`)",
                    call.id
                )));
            }
            if !ids.insert(call.id.as_str()) {
                return Err(PlanError::Names(format!(
                    "two outbox calls are named `{}`",
                    call.id
                )));
            }
            if call.target.trim().is_empty() || call.lease.trim().is_empty() {
                return Err(PlanError::Names(format!(
                    "outbox call `{}` names no target or no lease",
                    call.id
                )));
            }
        }
        if let Some(t) = self
            .footprint
            .iter()
            .flat_map(|f| f.keys())
            .find(|t| !is_plain_name(t))
        {
            return Err(PlanError::Names(format!(
                "footprint table `{t}` is not a plain name (letters, digits, `_`)"
            )));
        }
        Ok(())
    }
}

fn check_one(
    place: &'static str,
    name: &str,
    sql: &str,
    params: &BTreeMap<String, Value>,
    kind: Place,
) -> Result<(), PlanError> {
    if !is_plain_name(name) {
        return Err(PlanError::Names(format!(
            "{place} name `{name}` is not a plain name (letters, digits, `_`)"
        )));
    }
    let used = sql_shape::check(sql, kind).map_err(|error| PlanError::Shape {
        place,
        name: name.to_owned(),
        error,
    })?;
    let parameters = |what: String| PlanError::Parameters {
        place,
        name: name.to_owned(),
        what,
    };
    if let Some(missing) = used.iter().find(|u| !params.contains_key(*u)) {
        return Err(parameters(format!("`:{missing}` is used but has no value")));
    }
    if let Some(unused) = params.keys().find(|p| !used.contains(p)) {
        return Err(parameters(format!(
            "`{unused}` has a value but the SQL never uses `:{unused}`"
        )));
    }
    for (param, v) in params {
        let what = match v {
            Value::Array(_) => "a list",
            Value::Object(_) => "an object",
            _ => continue,
        };
        return Err(PlanError::Value {
            place,
            name: name.to_owned(),
            param: param.clone(),
            what,
        });
    }
    Ok(())
}

/// Letters, digits and `_`, not starting with a digit: safe to name a table or a trigger.
pub fn is_plain_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stmt(name: &str, sql: &str, params: Value) -> Statement {
        Statement {
            name: name.into(),
            sql: sql.into(),
            params: serde_json::from_value(params).unwrap(),
        }
    }

    #[test]
    fn a_plan_round_trips_through_its_payload() {
        let plan = Plan::new(vec![stmt(
            "cancel",
            "UPDATE orders SET status = 'cancelled' WHERE id = :id",
            json!({"id": 7}),
        )])
        .unwrap()
        .footprint([("orders".to_owned(), 1)].into());
        assert_eq!(Plan::from_payload(&plan.to_payload()).unwrap(), plan);
    }

    #[test]
    fn missing_unused_and_unbindable_parameters_are_refused() {
        let missing = Plan::new(vec![stmt("a", "DELETE FROM t WHERE id = :id", json!({}))]);
        assert!(matches!(missing, Err(PlanError::Parameters { .. })));
        let unused = Plan::new(vec![stmt(
            "a",
            "DELETE FROM t WHERE id = :id",
            json!({"id": 1, "idd": 2}),
        )]);
        assert!(matches!(unused, Err(PlanError::Parameters { .. })));
        let list = Plan::new(vec![stmt(
            "a",
            "DELETE FROM t WHERE id = :id",
            json!({"id": [1, 2]}),
        )]);
        assert!(matches!(list, Err(PlanError::Value { .. })));
    }

    #[test]
    fn a_payload_that_smuggles_a_second_statement_is_refused_like_a_built_plan() {
        let payload = json!({"statements": [{
            "name": "a", "sql": "UPDATE t SET a = 1 WHERE id = :id; COMMIT", "params": {"id": 1}
        }]});
        let err = Plan::from_payload(&payload).unwrap_err();
        assert!(err.to_string().contains("more than one statement"), "{err}");
        let unknown = json!({"statements": [], "commit": true});
        assert!(matches!(
            Plan::from_payload(&unknown),
            Err(PlanError::Payload(_))
        ));
        assert!(matches!(
            Plan::from_payload(&json!({"statements": []})),
            Err(PlanError::Empty)
        ));
    }

    #[test]
    fn names_must_be_plain_and_unique() {
        let twice = Plan::new(vec![
            stmt("a", "DELETE FROM t WHERE id = 1", json!({})),
            stmt("a", "DELETE FROM t WHERE id = 2", json!({})),
        ]);
        assert!(matches!(twice, Err(PlanError::Names(_))));
        let odd = Plan::new(vec![stmt("a b", "DELETE FROM t", json!({}))]);
        assert!(matches!(odd, Err(PlanError::Names(_))));
    }
}
