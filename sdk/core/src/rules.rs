//! Rules over premises: what the facts must say for an effect to be sent, not only that they
//! did not move. A premise that held still can still forbid the effect — a credit decided on
//! `within_cap = false` is wrong however long that stays true — so a binding states its rules
//! (`amount_paid - refunded_by_others >= payload.amount`, `within_cap == true`,
//! `status in ["paid", "partially_refunded"]`) and the gate judges them on the premises it reads
//! at decide, at every dispatch and at recovery. A rule that cannot be judged (a premise not
//! read, a value of the wrong kind, an overflow) does not hold: fail closed.
//!
//! A rule is `SIDE OP SIDE`. A side is a literal (an integer, a JSON string, `true`, `false`,
//! `null`), a premise by its name, a payload field as `payload.NAME`, or integers added and
//! subtracted (`a - b + 5`). `OP` is one of `==` `!=` `<` `<=` `>` `>=` (the last four on
//! integers only), `in` or `not in` with a list of literals on the right.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::record::Premises;

/// A rule, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    text: String,
    left: Side,
    op: Op,
    right: Right,
}

#[derive(Clone, Debug, PartialEq)]
enum Term {
    Premise(String),
    Payload(String),
    Literal(Value),
}

/// Terms added (`true`) or subtracted (`false`).
#[derive(Clone, Debug, PartialEq)]
struct Side(Vec<(bool, Term)>);

#[derive(Clone, Debug, PartialEq)]
enum Right {
    Side(Side),
    List(Vec<Value>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
}

/// A rule that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rule {text:?} cannot be read: {why}")]
pub struct RuleError {
    /// The rule as written.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

/// A rule that does not hold, with the values it was judged on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Broken {
    /// The rule as written.
    pub rule: String,
    /// Each name the rule read, with its value (`null` where it was not there).
    pub values: BTreeMap<String, Value>,
    /// Why it does not hold, when it could not be judged at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rule `{}` does not hold", self.rule)?;
        if !self.values.is_empty() {
            let values: Vec<String> = self
                .values
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            write!(f, " ({})", values.join(", "))?;
        }
        if let Some(why) = &self.why {
            write!(f, ": {why}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Rule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Self, RuleError> {
        let err = |why: String| RuleError {
            text: text.to_owned(),
            why,
        };
        let tokens = tokens(text).map_err(err)?;
        let mut at = 0;
        let left = side(&tokens, &mut at).map_err(err)?;
        let op = match tokens.get(at) {
            Some(Token::Op(op)) => *op,
            Some(t) => return Err(err(format!("expected a comparison, found {t}"))),
            None => {
                return Err(err(
                    "expected a comparison (==, !=, <, <=, >, >=, in)".into()
                ));
            }
        };
        at += 1;
        let right = if matches!(op, Op::In | Op::NotIn) {
            Right::List(list(&tokens, &mut at).map_err(err)?)
        } else {
            Right::Side(side(&tokens, &mut at).map_err(err)?)
        };
        if let Some(t) = tokens.get(at) {
            return Err(err(format!("unexpected {t} after the rule")));
        }
        let ordered = matches!(op, Op::Lt | Op::Le | Op::Gt | Op::Ge);
        if ordered {
            for s in std::iter::once(&left).chain(match &right {
                Right::Side(s) => Some(s),
                Right::List(_) => None,
            }) {
                if s.0
                    .iter()
                    .any(|(_, t)| matches!(t, Term::Literal(v) if !v.is_i64()))
                {
                    return Err(err("<, <=, > and >= compare integers".into()));
                }
            }
        }
        Ok(Self {
            text: text.trim().to_owned(),
            left,
            op,
            right,
        })
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Rule {
    /// The rule as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Judge the rule on the premises read and the payload: `Ok` when it holds.
    pub fn judge(&self, premises: &Premises, payload: &Value) -> Result<(), Broken> {
        let mut values = BTreeMap::new();
        let left = self.left.value(premises, payload, &mut values);
        let holds = match (&self.right, left) {
            (_, Err(why)) => Err(why),
            (Right::List(items), Ok(v)) => {
                let found = items.contains(&v);
                Ok(found == (self.op == Op::In))
            }
            (Right::Side(s), Ok(l)) => s
                .value(premises, payload, &mut values)
                .and_then(|r| compare(self.op, &l, &r)),
        };
        match holds {
            Ok(true) => Ok(()),
            Ok(false) => Err(Broken {
                rule: self.text.clone(),
                values,
                why: None,
            }),
            Err(why) => Err(Broken {
                rule: self.text.clone(),
                values,
                why: Some(why),
            }),
        }
    }
}

/// Every rule in `rules` that does not hold; a rule text that cannot be read does not hold.
pub fn judge_all<'a>(
    rules: impl IntoIterator<Item = &'a str>,
    premises: &Premises,
    payload: &Value,
) -> Vec<Broken> {
    rules
        .into_iter()
        .filter_map(|text| match text.parse::<Rule>() {
            Ok(rule) => rule.judge(premises, payload).err(),
            Err(e) => Some(Broken {
                rule: text.to_owned(),
                values: BTreeMap::new(),
                why: Some(e.why),
            }),
        })
        .collect()
}

/// Each broken rule in words, joined.
pub fn describe(broken: &[Broken]) -> String {
    broken
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn compare(op: Op, l: &Value, r: &Value) -> Result<bool, String> {
    match op {
        Op::Eq => Ok(l == r),
        Op::Ne => Ok(l != r),
        Op::In | Op::NotIn => Err("in needs a list".into()),
        Op::Lt | Op::Le | Op::Gt | Op::Ge => {
            let (Some(a), Some(b)) = (l.as_i64(), r.as_i64()) else {
                return Err(format!("{l} and {r} are not both integers"));
            };
            Ok(match op {
                Op::Lt => a < b,
                Op::Le => a <= b,
                Op::Gt => a > b,
                _ => a >= b,
            })
        }
    }
}

impl Side {
    fn value(
        &self,
        premises: &Premises,
        payload: &Value,
        seen: &mut BTreeMap<String, Value>,
    ) -> Result<Value, String> {
        let mut read = |t: &Term| -> Result<Value, String> {
            let (name, v) = match t {
                Term::Literal(v) => return Ok(v.clone()),
                Term::Premise(n) => (n.clone(), premises.get(n)),
                Term::Payload(n) => (format!("payload.{n}"), payload.get(n)),
            };
            seen.insert(name.clone(), v.cloned().unwrap_or(Value::Null));
            v.cloned().ok_or_else(|| format!("{name} was not read"))
        };
        if let [(true, only)] = self.0.as_slice() {
            return read(only);
        }
        let mut total: i64 = 0;
        for (plus, t) in &self.0 {
            let v = read(t)?;
            let n = v
                .as_i64()
                .ok_or_else(|| format!("{v} is not an integer, so it cannot be added"))?;
            total = if *plus {
                total.checked_add(n)
            } else {
                total.checked_sub(n)
            }
            .ok_or("the sum overflows")?;
        }
        Ok(Value::from(total))
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Term(Term),
    Plus,
    Minus,
    Op(Op),
    Open,
    Close,
    Comma,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Term(Term::Premise(n)) => write!(f, "{n}"),
            Token::Term(Term::Payload(n)) => write!(f, "payload.{n}"),
            Token::Term(Term::Literal(v)) => write!(f, "{v}"),
            Token::Plus => f.write_str("+"),
            Token::Minus => f.write_str("-"),
            Token::Op(op) => write!(f, "{op:?}"),
            Token::Open => f.write_str("["),
            Token::Close => f.write_str("]"),
            Token::Comma => f.write_str(","),
        }
    }
}

fn side(tokens: &[Token], at: &mut usize) -> Result<Side, String> {
    let mut terms = Vec::new();
    let mut plus = true;
    loop {
        match tokens.get(*at) {
            Some(Token::Term(t)) => terms.push((plus, t.clone())),
            Some(t) => return Err(format!("expected a name or a value, found {t}")),
            None => return Err("expected a name or a value".into()),
        }
        *at += 1;
        plus = match tokens.get(*at) {
            Some(Token::Plus) => true,
            Some(Token::Minus) => false,
            _ => return Ok(Side(terms)),
        };
        *at += 1;
    }
}

fn list(tokens: &[Token], at: &mut usize) -> Result<Vec<Value>, String> {
    if tokens.get(*at) != Some(&Token::Open) {
        return Err("in and not in take a list: [\"a\", \"b\"]".into());
    }
    *at += 1;
    let mut items = Vec::new();
    loop {
        match tokens.get(*at) {
            Some(Token::Term(Term::Literal(v))) => items.push(v.clone()),
            Some(Token::Close) if items.is_empty() => {
                *at += 1;
                return Ok(items);
            }
            Some(t) => return Err(format!("a list holds values, found {t}")),
            None => return Err("the list is not closed with ]".into()),
        }
        *at += 1;
        match tokens.get(*at) {
            Some(Token::Comma) => *at += 1,
            Some(Token::Close) => {
                *at += 1;
                return Ok(items);
            }
            _ => return Err("the list is not closed with ]".into()),
        }
    }
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let b = text.as_bytes();
    let mut out: Vec<Token> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let after_operand = matches!(out.last(), Some(Token::Term(_) | Token::Close));
        let single = match c {
            b'[' => Some(Token::Open),
            b']' => Some(Token::Close),
            b',' => Some(Token::Comma),
            b'+' => Some(Token::Plus),
            b'-' if after_operand => Some(Token::Minus),
            _ => None,
        };
        if let Some(token) = single {
            out.push(token);
            i += 1;
            continue;
        }
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'=' | b'!' | b'<' | b'>' => {
                let two = b.get(i + 1) == Some(&b'=');
                let op = match (c, two) {
                    (b'=', true) => Op::Eq,
                    (b'!', true) => Op::Ne,
                    (b'<', true) => Op::Le,
                    (b'>', true) => Op::Ge,
                    (b'<', false) => Op::Lt,
                    (b'>', false) => Op::Gt,
                    _ => return Err(format!("{:?} is not a comparison", char::from(c))),
                };
                out.push(Token::Op(op));
                i += if two { 2 } else { 1 };
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let lit = text.get(i..=j).ok_or("a string is not closed with \"")?;
                let v: Value =
                    serde_json::from_str(lit).map_err(|e| format!("string {lit}: {e}"))?;
                out.push(Token::Term(Term::Literal(v)));
                i = j + 1;
            }
            b'-' | b'0'..=b'9' => {
                let mut j = i + 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                let lit = &text[i..j];
                let n: i64 = lit
                    .parse()
                    .map_err(|_| format!("{lit} is not an integer that fits 64 bits"))?;
                out.push(Token::Term(Term::Literal(Value::from(n))));
                i = j;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let mut j = i + 1;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || matches!(b[j], b'_' | b'.')) {
                    j += 1;
                }
                let word = &text[i..j];
                let token = match word {
                    "true" => Token::Term(Term::Literal(Value::Bool(true))),
                    "false" => Token::Term(Term::Literal(Value::Bool(false))),
                    "null" => Token::Term(Term::Literal(Value::Null)),
                    "in" => Token::Op(Op::In),
                    "not" => {
                        let rest = text[j..].trim_start();
                        if !rest.starts_with("in") {
                            return Err("not must be followed by in".into());
                        }
                        j = text.len() - rest.len() + 2;
                        Token::Op(Op::NotIn)
                    }
                    w => match w.strip_prefix("payload.") {
                        Some(field) if !field.is_empty() && !field.contains('.') => {
                            Token::Term(Term::Payload(field.to_owned()))
                        }
                        Some(_) => return Err(format!("{w} is not a payload field")),
                        None if w.contains('.') => {
                            return Err(format!(
                                "{w}: a name is a premise, or payload.FIELD for a payload field"
                            ));
                        }
                        None => Token::Term(Term::Premise(w.to_owned())),
                    },
                };
                out.push(token);
                i = j;
            }
            other => {
                return Err(format!("{:?} has no meaning in a rule", char::from(other)));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn premises(v: Value) -> Premises {
        serde_json::from_value(v).unwrap_or_default()
    }

    fn judge(rule: &str, p: Value, payload: Value) -> Result<(), Broken> {
        let rule: Rule = rule.parse().map_err(|e: RuleError| Broken {
            rule: rule.into(),
            values: BTreeMap::new(),
            why: Some(e.why),
        })?;
        rule.judge(&premises(p), &payload)
    }

    #[test]
    fn what_is_left_to_refund_must_cover_the_amount() {
        let rule = "amount_paid - refunded_by_others >= payload.amount";
        let paid = json!({"amount_paid": 1000, "refunded_by_others": 400});
        assert_eq!(judge(rule, paid.clone(), json!({"amount": 600})), Ok(()));
        let broken = judge(rule, paid, json!({"amount": 601})).err();
        let broken = broken.map(|b| b.to_string()).unwrap_or_default();
        assert_eq!(
            broken,
            "rule `amount_paid - refunded_by_others >= payload.amount` does not hold \
             (amount_paid = 1000, payload.amount = 601, refunded_by_others = 400)"
        );
    }

    #[test]
    fn a_flag_decided_false_breaks_a_rule_that_wants_it_true() {
        let rule = "within_cap == true";
        assert_eq!(judge(rule, json!({"within_cap": true}), json!({})), Ok(()));
        assert!(judge(rule, json!({"within_cap": false}), json!({})).is_err());
    }

    #[test]
    fn membership_and_its_negation() {
        let rule = r#"status in ["paid", "partially_refunded"]"#;
        assert_eq!(judge(rule, json!({"status": "paid"}), json!({})), Ok(()));
        assert!(judge(rule, json!({"status": "disputed"}), json!({})).is_err());
        let not = r#"status not in ["disputed"]"#;
        assert_eq!(judge(not, json!({"status": "paid"}), json!({})), Ok(()));
        assert!(judge(not, json!({"status": "disputed"}), json!({})).is_err());
    }

    #[test]
    fn a_rule_that_cannot_be_judged_does_not_hold() {
        // A premise not read, a value of the wrong kind, an overflow.
        for (rule, p) in [
            ("within_cap == true", json!({})),
            ("amount_paid >= 5", json!({"amount_paid": "5"})),
            ("a + b > 0", json!({"a": i64::MAX, "b": 1})),
            ("a - 1 > 0", json!({"a": 1.5})),
        ] {
            let b = judge(rule, p, json!({})).err();
            assert!(b.as_ref().is_some_and(|b| b.why.is_some()), "{rule}: {b:?}");
        }
    }

    #[test]
    fn rules_that_cannot_be_read_name_what_is_wrong() {
        for (rule, says) in [
            ("", "expected a name"),
            ("a >", "expected a name"),
            ("a", "expected a comparison"),
            ("a = 1", "not a comparison"),
            ("a in 1", "take a list"),
            ("a in [1, b]", "a list holds values"),
            ("a < \"x\"", "compare integers"),
            ("a == 1 b", "unexpected"),
            ("x.y == 1", "payload.FIELD"),
            ("a == 99999999999999999999", "fits 64 bits"),
            ("a == 1 ; drop", "no meaning"),
        ] {
            let err = rule.parse::<Rule>().err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(says)),
                "{rule}: {err:?}"
            );
        }
    }

    #[test]
    fn negative_literals_and_subtraction_are_told_apart() {
        assert_eq!(judge("a - 1 == -1", json!({"a": 0}), json!({})), Ok(()));
        assert_eq!(judge("a-1 >= -5", json!({"a": -4}), json!({})), Ok(()));
    }

    #[test]
    fn a_judged_list_of_texts_fails_closed_on_one_it_cannot_read() {
        let broken = judge_all(["a == 1", "a ==="], &premises(json!({"a": 1})), &json!({}));
        assert_eq!(broken.len(), 1);
        assert_eq!(broken[0].rule, "a ===");
    }
}
