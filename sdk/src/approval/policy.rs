//! Which requests need a person. A policy is a list of rules over the request's payload and the
//! premises read for it; each rule that fires either refuses the request outright or routes it to
//! a person with its name as the reason. A request no rule fires on is cleared with no person —
//! and is still sent through the gate, which re-reads the same premises before the send.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::Premises;

/// What a rule looks at.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Condition {
    /// The payload's integer `field` is over `max` (a field that is missing or not an integer
    /// fires too: the rule cannot vouch for it).
    Over {
        /// The payload field.
        field: String,
        /// The largest value that does not fire.
        max: i64,
    },
    /// The premise `premise` equals `value` (a premise that was not read fires too).
    Premise {
        /// The premise's name.
        premise: String,
        /// The value that fires.
        equals: Value,
    },
    /// The integer premise `premise` is at least the payload's integer `field` — such as
    /// refunds by others already covering the amount asked (either one missing or not an
    /// integer fires too).
    AtLeast {
        /// The premise's name.
        premise: String,
        /// The payload field it is compared with.
        field: String,
    },
}

/// What a rule does when it fires.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Send the request to a person.
    Route,
    /// Refuse it with no person.
    Refuse,
}

/// One rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Its name, shown as the reason.
    pub name: String,
    /// When it fires.
    pub when: Condition,
    /// What it does then.
    pub then: Action,
}

/// The rules, in order.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The rules.
    pub rules: Vec<Rule>,
}

/// What the policy says about one request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "verdict", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Assessment {
    /// No rule fired: send it with no person.
    Cleared,
    /// A refusing rule fired: nothing is sent.
    Refused {
        /// The rule.
        rule: String,
    },
    /// It needs judgment: the first routing rule that fired, and every one that did.
    NeedsJudgment {
        /// The first routing rule that fired.
        rule: String,
        /// Every routing rule that fired.
        fired: Vec<String>,
    },
}

impl Condition {
    fn fires(&self, payload: &Value, premises: &Premises) -> bool {
        match self {
            Self::Over { field, max } => payload
                .get(field)
                .and_then(Value::as_i64)
                .is_none_or(|v| v > *max),
            Self::Premise { premise, equals } => premises.get(premise).is_none_or(|v| v == equals),
            Self::AtLeast { premise, field } => {
                match (
                    premises.get(premise).and_then(Value::as_i64),
                    payload.get(field).and_then(Value::as_i64),
                ) {
                    (Some(p), Some(f)) => p >= f,
                    _ => true,
                }
            }
        }
    }
}

impl Policy {
    /// The policy's verdict on `payload` decided on `premises`. A refusal outranks a route.
    pub fn assess(&self, payload: &Value, premises: &Premises) -> Assessment {
        let fired: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| r.when.fires(payload, premises))
            .collect();
        if let Some(r) = fired.iter().find(|r| r.then == Action::Refuse) {
            return Assessment::Refused {
                rule: r.name.clone(),
            };
        }
        let routed: Vec<String> = fired.iter().map(|r| r.name.clone()).collect();
        match routed.first() {
            Some(first) => Assessment::NeedsJudgment {
                rule: first.clone(),
                fired: routed,
            },
            None => Assessment::Cleared,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy() -> Policy {
        serde_json::from_value(json!({"rules": [
            {"name": "over_limit", "when": {"over": {"field": "amount", "max": 5000}}, "then": "route"},
            {"name": "flagged_customer", "when": {"premise": {"premise": "customer_flagged", "equals": true}}, "then": "route"},
            {"name": "ineligible_order", "when": {"premise": {"premise": "order_eligible", "equals": false}}, "then": "refuse"},
        ]}))
        .unwrap()
    }

    fn premises(flagged: bool, eligible: bool) -> Premises {
        [
            ("customer_flagged".to_owned(), json!(flagged)),
            ("order_eligible".to_owned(), json!(eligible)),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn routine_requests_clear_and_the_rules_that_fire_route_or_refuse_them() {
        let p = policy();
        let small = json!({"amount": 2000});
        assert_eq!(
            p.assess(&small, &premises(false, true)),
            Assessment::Cleared
        );
        assert_eq!(
            p.assess(&json!({"amount": 9000}), &premises(true, true)),
            Assessment::NeedsJudgment {
                rule: "over_limit".into(),
                fired: vec!["over_limit".into(), "flagged_customer".into()],
            }
        );
        assert_eq!(
            p.assess(&json!({"amount": 9000}), &premises(true, false)),
            Assessment::Refused {
                rule: "ineligible_order".into()
            }
        );
    }

    #[test]
    fn a_fact_the_rule_cannot_see_fires_it() {
        let p = policy();
        assert!(matches!(
            p.assess(&json!({}), &premises(false, true)),
            Assessment::NeedsJudgment { rule, .. } if rule == "over_limit"
        ));
        assert!(matches!(
            p.assess(&json!({"amount": 1}), &Premises::new()),
            Assessment::Refused { rule } if rule == "ineligible_order"
        ));
    }

    #[test]
    fn refunds_by_others_that_cover_the_amount_refuse_it() {
        let p: Policy = serde_json::from_value(json!({"rules": [
            {"name": "already_refunded", "when": {"at_least": {"premise": "refunded_by_others", "field": "amount"}}, "then": "refuse"},
        ]}))
        .unwrap();
        let others = |c: i64| -> Premises {
            [("refunded_by_others".to_owned(), json!(c))]
                .into_iter()
                .collect()
        };
        let asked = json!({"amount": 2000});
        assert_eq!(p.assess(&asked, &others(500)), Assessment::Cleared);
        assert!(matches!(
            p.assess(&asked, &others(2000)),
            Assessment::Refused { .. }
        ));
        assert!(
            matches!(
                p.assess(&asked, &Premises::new()),
                Assessment::Refused { .. }
            ),
            "unread, it cannot vouch"
        );
        assert!(matches!(
            p.assess(&json!({}), &others(0)),
            Assessment::Refused { .. }
        ));
    }
}
