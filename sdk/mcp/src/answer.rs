//! What the agent hears back from a gated call. A committed call answers with the server's own
//! result and the receipt beside it in `_meta`; anything else is a tool error (`isError`) whose
//! text a model can act on — what changed, what would still fit, whether calling again helps —
//! with the same facts structured in `_meta` for code. Nothing here retries: an unknown outcome
//! is said to be unknown.

use interlock::Outcome;
use interlock::core::{Change, RefusalCode, Repair};
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Map, Value, json};

/// The `_meta` key of the gate's outcome.
pub const META_OUTCOME: &str = "interlock/outcome";
/// The `_meta` key of the receipt, on a committed call.
pub const META_RECEIPT: &str = "interlock/receipt";

/// What a gated call was, for its answer.
pub struct Call<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The effect's key (also the id the server saw).
    pub key: &'a str,
    /// The tier the gate acted on.
    pub tier: u8,
}

fn outcome_meta(call: &Call<'_>, outcome: &Outcome) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("label".into(), json!(outcome.label()));
    m.insert("key".into(), json!(call.key));
    m.insert("tier".into(), json!(call.tier));
    m.insert("final".into(), json!(outcome.is_final()));
    m
}

fn tool_error(text: String, meta: Map<String, Value>) -> Value {
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    // Older clients know no `resultType`; the server's own answers carry it only when the
    // protocol version asks for it.
    r.result_type = None;
    r.meta = Some(MetaObject(Map::from_iter([(
        META_OUTCOME.to_owned(),
        Value::Object(meta),
    )])));
    serde_json::to_value(r).unwrap_or_else(|_| json!({"isError": true, "content": []}))
}

fn changes_text(changes: &[Change]) -> String {
    changes
        .iter()
        .map(|c| {
            format!(
                "\n- {} was {} when the call was decided and is {} now.",
                c.field, c.was, c.now
            )
        })
        .collect()
}

fn repairs_text(tool: &str, repairs: &[Repair]) -> String {
    repairs
        .iter()
        .map(|r| {
            format!(
                "\n- What would still fit ({}): call {tool} with arguments {}. That is a new \
                 decision: make it only if it is still right.",
                r.summary, r.payload
            )
        })
        .collect()
}

/// The answer to a gated call that ended with `outcome`; `receipt` for a committed one.
pub fn for_outcome(call: &Call<'_>, outcome: &Outcome, receipt: Option<Value>) -> Value {
    let mut meta = outcome_meta(call, outcome);
    let tool = call.tool;
    match outcome {
        Outcome::Committed {
            result, replayed, ..
        } => {
            // The server's own tool result; or, where a lookup found the effect, the record it
            // found, shown as a tool result holding it.
            let mut result = match result {
                Value::Object(o) if o.get("content").is_some_and(Value::is_array) => o.clone(),
                other => Map::from_iter([
                    (
                        "content".to_owned(),
                        json!([{"type": "text", "text": other.to_string()}]),
                    ),
                    ("structuredContent".to_owned(), other.clone()),
                ]),
            };
            meta.insert("replayed".into(), json!(replayed));
            let m = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = m {
                m.insert(META_OUTCOME.into(), Value::Object(meta));
                if let Some(r) = receipt {
                    m.insert(META_RECEIPT.into(), r);
                }
            }
            Value::Object(result)
        }
        Outcome::Refused(r) => {
            meta.insert("code".into(), json!(r.code));
            meta.insert("reason".into(), json!(r.reason));
            meta.insert("changes".into(), json!(r.changes));
            meta.insert("repairs".into(), json!(r.repairs));
            let again = if !r.changes.is_empty() {
                "A call made now is taken as decided on the facts as they are above."
            } else if r.code == RefusalCode::ConflictingPayload {
                "The request already stands with other arguments; that call is its answer."
            } else {
                "Calling again with the same arguments and facts gets the same refusal."
            };
            tool_error(
                format!(
                    "Not sent: {tool} was refused ({}): {}.{}{}\nNothing was sent. {again}",
                    r.code,
                    r.reason,
                    changes_text(&r.changes),
                    repairs_text(tool, &r.repairs)
                ),
                meta,
            )
        }
        Outcome::Failed(f) => {
            meta.insert("code".into(), json!(f.code));
            meta.insert("message".into(), json!(f.message));
            tool_error(
                format!(
                    "{tool} failed: the server said it did not carry the call out ({}: {}). \
                     Calling again with the same arguments gets the same answer.",
                    f.code, f.message
                ),
                meta,
            )
        }
        Outcome::Ambiguous(a) => {
            meta.insert("reason".into(), json!(a.reason));
            meta.insert("changes".into(), json!(a.changes));
            tool_error(
                format!(
                    "Unknown whether {tool} took effect: {}.{}\nDo not call it again or work \
                     around it: a person must check the service and settle effect {}.",
                    a.reason,
                    changes_text(&a.changes),
                    call.key
                ),
                meta,
            )
        }
        Outcome::AppliedTwice(a) => {
            meta.insert("found".into(), json!(a.found));
            tool_error(
                format!(
                    "{tool} took effect more than once under effect {} ({} found). Nothing more \
                     will be sent under it; a person must reverse the extra ones.",
                    call.key,
                    a.found.len()
                ),
                meta,
            )
        }
        Outcome::InFlight {
            retry_after,
            reason,
        }
        | Outcome::Retry {
            retry_after,
            reason,
        } => {
            meta.insert("reason".into(), json!(reason));
            meta.insert("retry_after_ms".into(), json!(retry_after.as_millis()));
            let sent = if matches!(outcome, Outcome::Retry { .. }) {
                "Nothing was sent."
            } else {
                "It may be under way."
            };
            tool_error(
                format!(
                    "{tool} is not finished: {reason}. {sent} Call again with the same \
                     arguments in {} s: it will not be sent twice.",
                    retry_after.as_secs().max(1)
                ),
                meta,
            )
        }
        other => {
            meta.insert("reason".into(), json!(format!("{other:?}")));
            tool_error(
                format!(
                    "{tool} was not sent on this attempt ({}). Call again with the same \
                     arguments: it will not be sent twice.",
                    other.label()
                ),
                meta,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use interlock::Via;
    use interlock::core::Refused;

    use super::*;

    const CALL: Call<'static> = Call {
        tool: "create_refund",
        key: "mcp:create_refund:r-1",
        tier: 1,
    };

    #[test]
    fn a_commit_is_the_servers_result_with_the_receipt_beside_it() {
        let result = json!({"content": [{"type": "text", "text": "re_1"}], "_meta": {"server": 1}});
        let outcome = Outcome::Committed {
            via: Via::FirstSend,
            result: result.clone(),
            replayed: false,
        };
        let a = for_outcome(&CALL, &outcome, Some(json!({"key": "k"})));
        assert_eq!(a["content"], result["content"]);
        assert_eq!(a["_meta"]["server"], 1, "the server's own _meta is kept");
        assert_eq!(a["_meta"][META_RECEIPT]["key"], "k");
        assert_eq!(a["_meta"][META_OUTCOME]["label"], "COMMITTED/first_send");
        assert!(a.get("isError").is_none());
    }

    #[test]
    fn an_effect_found_by_a_lookup_is_answered_as_a_tool_result() {
        let found = json!({"id": "re_1", "amount": 2000});
        let outcome = Outcome::Committed {
            via: Via::FoundByLookup,
            result: found.clone(),
            replayed: false,
        };
        let a = for_outcome(&CALL, &outcome, None);
        assert_eq!(a["structuredContent"], found);
        assert_eq!(a["content"][0]["type"], "text");
        assert_eq!(
            a["_meta"][META_OUTCOME]["label"],
            "COMMITTED/found_by_lookup"
        );
    }

    #[test]
    fn a_refusal_says_what_changed_and_what_would_still_fit() {
        let refused = Refused {
            code: RefusalCode::StalePremise,
            reason: "premises moved".into(),
            changes: vec![Change {
                field: "refundable".into(),
                was: json!(5000),
                now: json!(3000),
            }],
            repairs: vec![Repair {
                kind: "at_most".into(),
                summary: "amount lowered".into(),
                payload: json!({"amount": 3000}),
            }],
            is_final: true,
            payload_hash: String::new(),
        };
        let a = for_outcome(&CALL, &Outcome::Refused(refused), None);
        assert_eq!(a["isError"], true);
        let text = a["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("refundable was 5000"), "{text}");
        assert!(text.contains("{\"amount\":3000}"), "{text}");
        assert!(text.contains("Nothing was sent"), "{text}");
        assert!(
            text.contains("decided on the facts as they are above"),
            "{text}"
        );
        assert_eq!(
            a["_meta"][META_OUTCOME]["repairs"][0]["payload"]["amount"],
            3000
        );
        assert_eq!(a["_meta"][META_OUTCOME]["code"], "stale_premise");
    }
}
