//! What an answer means, as a pure table: a status and a body in, the gate's [`SendAnswer`] out.
//! The defaults are the conventions most services keep (2xx done, 4xx not done, 5xx and lost
//! connections unknown), except the 4xx a resend can meet after a first send that landed (the
//! credentials or route changed, the request was cut short, the first request under the key is
//! still running): those are unknown, since a failure is never looked up again. A configured
//! rule comes first, and may not call an uncertain answer a failure or a success.

use interlock::target::SendAnswer;
use serde_json::Value;

use crate::config::{AnswerOutcome, AnswerRule, ErrorFields};

/// A status class or one status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatusMatch {
    Class(u16),
    Exact(u16),
}

impl StatusMatch {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not \"2xx\", \"3xx\", \"4xx\", \"5xx\" or a status");
        match s.as_bytes() {
            [c @ b'2'..=b'5', b'x', b'x'] => Ok(Self::Class(u16::from(c - b'0'))),
            _ => match s.parse::<u16>() {
                Ok(n) if (200..600).contains(&n) => Ok(Self::Exact(n)),
                _ => Err(bad()),
            },
        }
    }

    fn matches(self, status: u16) -> bool {
        match self {
            Self::Class(c) => status / 100 == c,
            Self::Exact(n) => status == n,
        }
    }
}

/// An answer as read off the wire.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reply {
    pub status: u16,
    /// The body as JSON; `Null` when empty or not JSON.
    pub body: Value,
    /// The replay header said `true`.
    pub replayed: bool,
}

fn rule_matches(rule: &AnswerRule, reply: &Reply) -> bool {
    let status_ok = StatusMatch::parse(&rule.status).is_ok_and(|m| m.matches(reply.status));
    let found = rule.pointer.as_deref().map(|p| reply.body.pointer(p));
    status_ok
        && match (found, &rule.equals) {
            (None, _) => true,
            (Some(None), _) => false,
            (Some(Some(_)), None) => true,
            (Some(Some(v)), Some(want)) => v == want,
        }
}

/// 4xx statuses that say nothing certain about a resend: the credentials or the route changed
/// since the first send (401, 403, 404, 405, 407, 421), the request was cut short (408, 431) or
/// the first request under the key may still run (409, 425, 429). A resend answered so may
/// follow a first send that landed, so it is unknown, never a failure.
pub(crate) const UNCERTAIN_4XX: [u16; 11] = [401, 403, 404, 405, 407, 408, 409, 421, 425, 429, 431];

fn default_outcome(reply: &Reply) -> AnswerOutcome {
    match reply.status {
        200..=299 if reply.replayed => AnswerOutcome::Replayed,
        200..=299 => AnswerOutcome::Done,
        s if UNCERTAIN_4XX.contains(&s) => AnswerOutcome::Unknown,
        400..=499 => AnswerOutcome::Failed,
        _ => AnswerOutcome::Unknown,
    }
}

/// Whether `outcome` may be configured for answers `status` matches: a failure or a conflict
/// only for a 4xx that is certain (or a 2xx whose body says so), "done" only for a 2xx,
/// "replayed" for a 2xx or a 4xx. Anything may be unknown.
pub(crate) fn allowed(status: StatusMatch, outcome: AnswerOutcome) -> Result<(), String> {
    let certain_4xx = |n: u16| (400..500).contains(&n) && !UNCERTAIN_4XX.contains(&n);
    let ok = match (outcome, status) {
        (AnswerOutcome::Unknown, _) => true,
        (AnswerOutcome::Done, StatusMatch::Class(c)) => c == 2,
        (AnswerOutcome::Done, StatusMatch::Exact(n)) => (200..300).contains(&n),
        (AnswerOutcome::Replayed, StatusMatch::Class(c)) => c == 2,
        (AnswerOutcome::Replayed, StatusMatch::Exact(n)) => {
            (200..300).contains(&n) || (400..500).contains(&n)
        }
        (AnswerOutcome::Failed, StatusMatch::Class(c)) => c == 2,
        (AnswerOutcome::Failed, StatusMatch::Exact(n)) => (200..300).contains(&n) || certain_4xx(n),
        (AnswerOutcome::Conflict, StatusMatch::Class(_)) => false,
        (AnswerOutcome::Conflict, StatusMatch::Exact(n)) => certain_4xx(n) || n == 409,
    };
    if ok {
        Ok(())
    } else {
        Err(
            "this outcome cannot be configured for this status: a failure or a conflict only for \
             one certain 4xx status (not 401, 403, 404, 405, 407, 408, 421, 425, 429 or 431, \
             which may follow a send that landed) or a 2xx with a body field; done for a 2xx; \
             replayed for a 2xx or one 4xx status"
                .to_owned(),
        )
    }
}

fn text_at(body: &Value, pointer: Option<&str>) -> Option<String> {
    match body.pointer(pointer?)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// The result a receipt keeps for a success: the body, or the status when it has none.
fn result(reply: &Reply) -> Value {
    match &reply.body {
        Value::Null => serde_json::json!({ "http_status": reply.status }),
        body => body.clone(),
    }
}

/// The gate's answer for `reply` (`Err`: no answer came, or it could not be read).
pub(crate) fn classify(
    reply: Result<Reply, String>,
    rules: &[AnswerRule],
    errors: &ErrorFields,
) -> SendAnswer {
    let reply = match reply {
        Ok(r) => r,
        Err(why) => return SendAnswer::Unknown(why),
    };
    let outcome = rules
        .iter()
        .find(|r| rule_matches(r, &reply))
        .map_or_else(|| default_outcome(&reply), |r| r.outcome);
    let status = reply.status;
    let message = || {
        text_at(&reply.body, errors.message.as_deref()).unwrap_or_else(|| format!("HTTP {status}"))
    };
    match outcome {
        AnswerOutcome::Done => SendAnswer::Done(result(&reply)),
        AnswerOutcome::Replayed => SendAnswer::Replayed(result(&reply)),
        AnswerOutcome::Failed => SendAnswer::Definite {
            code: text_at(&reply.body, errors.code.as_deref())
                .unwrap_or_else(|| format!("http_{status}")),
            message: message(),
        },
        AnswerOutcome::Conflict => SendAnswer::Conflict(message()),
        AnswerOutcome::Unknown if reply.replayed && status >= 500 => SendAnswer::SavedError(
            format!("HTTP {status}, replayed from the first request under the key"),
        ),
        AnswerOutcome::Unknown => SendAnswer::Unknown(format!("HTTP {status}: {}", message())),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reply(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body,
            replayed: false,
        }
    }

    fn none() -> ErrorFields {
        ErrorFields::default()
    }

    #[test]
    fn the_defaults_map_status_classes_onto_the_core_table() {
        let done = classify(Ok(reply(201, json!({"id": "c1"}))), &[], &none());
        assert_eq!(done, SendAnswer::Done(json!({"id": "c1"})));
        let empty = classify(Ok(reply(204, Value::Null)), &[], &none());
        assert_eq!(empty, SendAnswer::Done(json!({"http_status": 204})));
        for s in [401, 403, 404, 408, 409, 429, 431, 500, 502, 503, 301] {
            assert!(
                matches!(
                    classify(Ok(reply(s, Value::Null)), &[], &none()),
                    SendAnswer::Unknown(_)
                ),
                "{s} must be unknown"
            );
        }
        for s in [400, 402, 410, 422] {
            assert!(
                matches!(
                    classify(Ok(reply(s, Value::Null)), &[], &none()),
                    SendAnswer::Definite { .. }
                ),
                "{s} must be a definite failure"
            );
        }
        assert!(matches!(
            classify(Err("connection reset".into()), &[], &none()),
            SendAnswer::Unknown(_)
        ));
    }

    #[test]
    fn a_replayed_answer_is_told_apart_from_a_fresh_one() {
        let mut r = reply(200, json!({"id": "c1"}));
        r.replayed = true;
        assert_eq!(
            classify(Ok(r.clone()), &[], &none()),
            SendAnswer::Replayed(json!({"id": "c1"}))
        );
        r.status = 500;
        assert!(matches!(
            classify(Ok(r), &[], &none()),
            SendAnswer::SavedError(_)
        ));
    }

    #[test]
    fn a_rule_cannot_call_an_uncertain_answer_a_failure_or_a_success() {
        let bad = |status: &str, outcome| {
            StatusMatch::parse(status).is_ok_and(|m| allowed(m, outcome).is_err())
        };
        assert!(bad("5xx", AnswerOutcome::Failed));
        assert!(bad("503", AnswerOutcome::Failed));
        assert!(bad("401", AnswerOutcome::Failed));
        assert!(bad("429", AnswerOutcome::Conflict));
        assert!(bad("4xx", AnswerOutcome::Failed));
        assert!(bad("409", AnswerOutcome::Done));
        assert!(bad("3xx", AnswerOutcome::Replayed));
        let good = |status: &str, outcome| {
            StatusMatch::parse(status).is_ok_and(|m| allowed(m, outcome).is_ok())
        };
        assert!(good("422", AnswerOutcome::Failed));
        assert!(good("2xx", AnswerOutcome::Failed));
        assert!(good("409", AnswerOutcome::Replayed));
        assert!(good("400", AnswerOutcome::Conflict));
        assert!(good("5xx", AnswerOutcome::Unknown));
    }

    #[test]
    fn configured_rules_come_first_and_read_the_body() {
        let rules = vec![
            AnswerRule {
                status: "400".into(),
                pointer: Some("/error/type".into()),
                equals: Some(json!("idempotency_error")),
                outcome: AnswerOutcome::Conflict,
            },
            AnswerRule {
                status: "409".into(),
                pointer: None,
                equals: None,
                outcome: AnswerOutcome::Replayed,
            },
        ];
        let errors = ErrorFields {
            code: Some("/error/code".into()),
            message: Some("/error/message".into()),
        };
        let conflict = reply(
            400,
            json!({"error": {"type": "idempotency_error", "message": "m"}}),
        );
        assert_eq!(
            classify(Ok(conflict), &rules, &errors),
            SendAnswer::Conflict("m".into())
        );
        let other = reply(
            400,
            json!({"error": {"code": "amount_too_large", "message": "big"}}),
        );
        assert_eq!(
            classify(Ok(other), &rules, &errors),
            SendAnswer::Definite {
                code: "amount_too_large".into(),
                message: "big".into()
            }
        );
        assert_eq!(
            classify(Ok(reply(409, json!({"id": "c1"}))), &rules, &errors),
            SendAnswer::Replayed(json!({"id": "c1"}))
        );
    }
}
