//! What one message from the client is, before anything is sent: a request for the server, a
//! gated tool call, a cancellation, something to forward as it is, or something to refuse with a
//! JSON-RPC error. Pure: no I/O, so every frame a hostile client can write is judged here, and a
//! refused frame never reaches the server.
//!
//! Ids: every request the server sees carries an id the proxy chose (a number from one counter),
//! and the client's own id — of any JSON type — is kept beside it and restored on the answer. So
//! the proxy's own requests to the server (premise reads, lookups) can never collide with a
//! client's, whatever ids the client picks.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::config::{GatedTool, ProxyConfig};

/// JSON-RPC's error codes, as the proxy answers with them.
pub mod code {
    /// The frame is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The frame is JSON but not a JSON-RPC message.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method's parameters are wrong (a gated call without its key arguments).
    pub const INVALID_PARAMS: i64 = -32602;
    /// The proxy itself failed (the gate could not finish a call).
    pub const INTERNAL_ERROR: i64 = -32603;
}

/// One message from the client, judged.
#[derive(Debug, Clone, PartialEq)]
pub enum FromClient {
    /// A request for the server, its id to be replaced by one the proxy chooses.
    Request {
        /// The client's id.
        id: Value,
        /// The message as it came.
        message: Value,
    },
    /// A `tools/call` for a gated tool, with its arguments checked against the configuration.
    Gated {
        /// The client's id.
        id: Value,
        /// The tool.
        tool: String,
        /// Its arguments.
        arguments: Map<String, Value>,
        /// The values of its key arguments, in the configuration's order.
        key: Vec<Value>,
        /// The lease id it names.
        lease: String,
    },
    /// `notifications/cancelled` for one of the client's requests.
    Cancelled {
        /// The client's id of the request cancelled.
        id: Value,
        /// The notification as it came.
        message: Value,
    },
    /// Forward as it came: a notification, or an answer to a request of the server's.
    Forward(Value),
    /// Dropped unanswered: a message without an id that is not a notification (a `tools/call`
    /// without an id would be carried out by a lenient server with no one to answer, and past
    /// the gate). Why, for the log.
    Dropped(String),
    /// Refused: answer the client with this error response, send nothing.
    Refused(Value),
}

/// A JSON-RPC error response.
pub fn error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// Judge one frame (a line) from the client: a message, or a batch of them (each judged on its
/// own; an empty batch is refused). A frame over `max_bytes` is refused unread.
pub fn classify(frame: &[u8], config: &ProxyConfig, max_bytes: usize) -> Vec<FromClient> {
    if frame.len() > max_bytes {
        return vec![FromClient::Refused(error(
            Value::Null,
            code::INVALID_REQUEST,
            format!(
                "the message is {} bytes, over the proxy's limit of {max_bytes}",
                frame.len()
            ),
        ))];
    }
    let value: Value = match serde_json::from_slice(frame) {
        Ok(v) => v,
        Err(e) => {
            return vec![FromClient::Refused(error(
                Value::Null,
                code::PARSE_ERROR,
                format!("the message is not JSON: {e}"),
            ))];
        }
    };
    match value {
        Value::Array(items) if items.is_empty() => vec![FromClient::Refused(error(
            Value::Null,
            code::INVALID_REQUEST,
            "an empty batch",
        ))],
        Value::Array(items) => items.into_iter().map(|m| one(m, config)).collect(),
        message => vec![one(message, config)],
    }
}

/// Whether a JSON-RPC id is one: a string, a number, or null.
fn is_id(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Null)
}

fn one(message: Value, config: &ProxyConfig) -> FromClient {
    let Value::Object(m) = &message else {
        return FromClient::Refused(error(
            Value::Null,
            code::INVALID_REQUEST,
            "a message must be a JSON object",
        ));
    };
    let id = m.get("id").cloned();
    let answer_to = id.clone().unwrap_or(Value::Null);
    let refuse = |code: i64, why: String| FromClient::Refused(error(answer_to.clone(), code, why));
    if m.get("jsonrpc") != Some(&json!("2.0")) {
        return refuse(code::INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\"".into());
    }
    if let Some(i) = &id
        && !is_id(i)
    {
        return FromClient::Refused(error(
            Value::Null,
            code::INVALID_REQUEST,
            "an id must be a string, a number or null",
        ));
    }
    let Some(method) = m.get("method") else {
        // An answer to one of the server's requests (sampling, roots, elicitation).
        return if id.is_some() && (m.contains_key("result") || m.contains_key("error")) {
            FromClient::Forward(message)
        } else {
            refuse(
                code::INVALID_REQUEST,
                "a message needs a method, or an id with a result or an error".into(),
            )
        };
    };
    let Some(method) = method.as_str() else {
        return refuse(code::INVALID_REQUEST, "\"method\" must be a string".into());
    };
    let Some(id) = id else {
        if !method.starts_with("notifications/") {
            return FromClient::Dropped(format!(
                "a {method:?} without an id is not a notification: dropped, nothing sent"
            ));
        }
        if method == "notifications/cancelled" {
            return match m.get("params").and_then(|p| p.get("requestId")) {
                Some(r) if is_id(r) => FromClient::Cancelled {
                    id: r.clone(),
                    message,
                },
                // Nothing of the client's to cancel: the server would ignore it too.
                _ => FromClient::Forward(message),
            };
        }
        return FromClient::Forward(message);
    };
    if method.starts_with("notifications/") {
        return refuse(
            code::INVALID_REQUEST,
            format!("{method} is a notification and must not carry an id"),
        );
    }
    if method != "tools/call" {
        return FromClient::Request { id, message };
    }
    let params = m.get("params");
    let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return refuse(
            code::INVALID_PARAMS,
            "tools/call needs params.name, the tool's name".into(),
        );
    };
    let Some(gated) = config.tools.get(tool) else {
        return FromClient::Request { id, message };
    };
    if id.is_null() {
        // MCP forbids a null id; a gated call's answer, and its cancellation, need one.
        return refuse(
            code::INVALID_REQUEST,
            format!(
                "tools/call {tool}: a gated call needs an id (a string or a number, not null); nothing was sent"
            ),
        );
    }
    let arguments = match params.and_then(|p| p.get("arguments")) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => {
            return refuse(
                code::INVALID_PARAMS,
                format!("tools/call {tool}: params.arguments must be an object"),
            );
        }
    };
    match gated_call(tool, gated, &arguments) {
        Ok((key, lease)) => FromClient::Gated {
            id,
            tool: tool.to_owned(),
            arguments,
            key,
            lease,
        },
        Err(why) => refuse(code::INVALID_PARAMS, why),
    }
}

/// The key values and the lease of a gated call, or why it cannot be gated (and so is not sent).
fn gated_call(
    tool: &str,
    gated: &GatedTool,
    arguments: &Map<String, Value>,
) -> Result<(Vec<Value>, String), String> {
    let mut key = Vec::with_capacity(gated.key.len());
    for k in &gated.key {
        match arguments.get(k) {
            Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => key.push(v.clone()),
            Some(other) => {
                return Err(format!(
                    "tools/call {tool}: argument {k:?} names the request and must be a string, \
                     a number or a boolean, not {other}"
                ));
            }
            None => {
                return Err(format!(
                    "tools/call {tool}: argument {k:?} is missing; the gate needs it to know \
                     which request this is, so nothing was sent"
                ));
            }
        }
    }
    let lease = match arguments.get(&gated.lease) {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => {
            return Err(format!(
                "tools/call {tool}: argument {:?} must name the approval (a lease id) this call \
                 runs under; nothing was sent",
                gated.lease
            ));
        }
    };
    if let Some(a) = gated.idempotency_argument.as_deref()
        && arguments.contains_key(a)
    {
        return Err(format!(
            "tools/call {tool}: argument {a:?} is the proxy's to fill with the effect's id; \
             leave it out"
        ));
    }
    Ok((key, lease))
}

/// The ids of the client's requests under way, by the id the server saw.
#[derive(Debug, Default)]
pub struct Ids {
    next: u64,
    upstream: HashMap<u64, Value>,
}

impl Ids {
    /// A fresh id for the server, standing for the client's `id` (`None`: the proxy's own).
    pub fn issue(&mut self, id: Option<Value>) -> u64 {
        self.next += 1;
        if let Some(id) = id {
            self.upstream.insert(self.next, id);
        }
        self.next
    }

    /// The client's id for the server's answer to `upstream`, once (`None`: the proxy's own
    /// request, or one already answered).
    pub fn answered(&mut self, upstream: u64) -> Option<Value> {
        self.upstream.remove(&upstream)
    }

    /// The id the server saw for the client's request `id`, if it is under way.
    pub fn upstream_of(&self, id: &Value) -> Option<u64> {
        self.upstream
            .iter()
            .find_map(|(u, c)| (c == id).then_some(*u))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::path::Path;

    use super::*;

    fn config() -> ProxyConfig {
        ProxyConfig::parse(
            r#"
journal = "j.db"
[tools.create_refund]
key = ["request_id"]
lease = "approval"
idempotency_argument = "idempotency_key"
dedupes = true
dedupe_window_hours = 24
"#,
            Path::new("t.toml"),
        )
        .unwrap()
    }

    fn judge(frame: &str) -> Vec<FromClient> {
        classify(frame.as_bytes(), &config(), 1 << 20)
    }

    fn refused_code(frame: &str) -> (Value, i64) {
        match judge(frame).as_slice() {
            [FromClient::Refused(e)] => (e["id"].clone(), e["error"]["code"].as_i64().unwrap()),
            other => panic!("{frame}: not refused: {other:?}"),
        }
    }

    #[test]
    fn a_gated_call_is_taken_with_its_key_and_lease_and_other_calls_pass() {
        let call = r#"{"jsonrpc":"2.0","id":7.5,"method":"tools/call","params":{"name":"create_refund","arguments":{"request_id":"r-1","approval":"lease-1","amount":500}}}"#;
        match judge(call).as_slice() {
            [
                FromClient::Gated {
                    id,
                    tool,
                    key,
                    lease,
                    arguments,
                },
            ] => {
                assert_eq!(id, &json!(7.5), "an id of any JSON number survives");
                assert_eq!(tool, "create_refund");
                assert_eq!(key, &[json!("r-1")]);
                assert_eq!(lease, "lease-1");
                assert_eq!(arguments["amount"], 500);
            }
            other => panic!("{other:?}"),
        }
        let other_tool = call.replace("create_refund", "get_order");
        assert!(matches!(
            judge(&other_tool).as_slice(),
            [FromClient::Request { .. }]
        ));
        let list = r#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#;
        assert!(matches!(judge(list).as_slice(), [FromClient::Request { id, .. }] if id == "x"));
    }

    #[test]
    fn a_gated_call_missing_what_the_gate_needs_is_refused_and_not_sent() {
        for (args, says) in [
            (r#"{"approval":"lease-1"}"#, "\"request_id\" is missing"),
            (
                r#"{"request_id":{"a":1},"approval":"lease-1"}"#,
                "must be a string",
            ),
            (r#"{"request_id":"r-1"}"#, "must name the approval"),
            (
                r#"{"request_id":"r-1","approval":"lease-1","idempotency_key":"mine"}"#,
                "the proxy's to fill",
            ),
        ] {
            let frame = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"create_refund","arguments":{args}}}}}"#
            );
            match judge(&frame).as_slice() {
                [FromClient::Refused(e)] => {
                    assert_eq!(e["id"], 1);
                    assert_eq!(e["error"]["code"], code::INVALID_PARAMS);
                    let m = e["error"]["message"].as_str().unwrap();
                    assert!(m.contains(says), "{m}");
                }
                other => panic!("{args}: {other:?}"),
            }
        }
        // A null id: nothing to answer a gated call to, or to cancel it by.
        let null_id = r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"create_refund","arguments":{"request_id":"r-1","approval":"lease-1"}}}"#;
        assert_eq!(refused_code(null_id), (Value::Null, code::INVALID_REQUEST));
    }

    #[test]
    fn malformed_frames_are_answered_with_json_rpc_errors() {
        assert_eq!(refused_code("{not json"), (Value::Null, code::PARSE_ERROR));
        assert_eq!(refused_code("[]"), (Value::Null, code::INVALID_REQUEST));
        assert_eq!(refused_code("42"), (Value::Null, code::INVALID_REQUEST));
        assert_eq!(
            refused_code(r#"{"id":1,"method":"ping"}"#),
            (json!(1), code::INVALID_REQUEST),
            "no jsonrpc version"
        );
        assert_eq!(
            refused_code(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#),
            (Value::Null, code::INVALID_REQUEST)
        );
        assert_eq!(
            refused_code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#),
            (json!(1), code::INVALID_REQUEST)
        );
        assert_eq!(
            refused_code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#),
            (json!(1), code::INVALID_PARAMS)
        );
        let huge = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","x":"{}"}}"#,
            "a".repeat(64)
        );
        match classify(huge.as_bytes(), &config(), 32).as_slice() {
            [FromClient::Refused(e)] => {
                assert!(
                    e["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("over the proxy's limit")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn notifications_answers_and_batches_are_judged_each_on_its_own() {
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r9"}}"#;
        assert!(
            matches!(judge(cancel).as_slice(), [FromClient::Cancelled { id, .. }] if id == "r9")
        );
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert!(matches!(judge(note).as_slice(), [FromClient::Forward(_)]));
        let answer = r#"{"jsonrpc":"2.0","id":3,"result":{"roots":[]}}"#;
        assert!(matches!(judge(answer).as_slice(), [FromClient::Forward(_)]));
        // A call without an id would run past the gate on a lenient server, unanswered.
        let idless = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"create_refund","arguments":{}}}"#;
        assert!(matches!(judge(idless).as_slice(), [FromClient::Dropped(_)]));
        let with_id = r#"{"jsonrpc":"2.0","id":1,"method":"notifications/cancelled","params":{"requestId":1}}"#;
        assert_eq!(refused_code(with_id), (json!(1), code::INVALID_REQUEST));
        let batch = format!("[{note},{{}},{answer}]");
        let judged = judge(&batch);
        assert!(matches!(
            judged.as_slice(),
            [
                FromClient::Forward(_),
                FromClient::Refused(_),
                FromClient::Forward(_)
            ]
        ));
    }

    #[test]
    fn the_servers_ids_are_the_proxys_and_each_answer_finds_its_client_id_once() {
        let mut ids = Ids::default();
        let a = ids.issue(Some(json!("same")));
        let own = ids.issue(None);
        let b = ids.issue(Some(json!(1e3)));
        assert!(a != own && own != b && a != b);
        assert_eq!(ids.upstream_of(&json!("same")), Some(a));
        assert_eq!(ids.answered(own), None, "the proxy's own request");
        assert_eq!(ids.answered(b), Some(json!(1e3)));
        assert_eq!(ids.answered(b), None, "answered once");
        assert_eq!(ids.answered(a), Some(json!("same")));
        assert_eq!(ids.upstream_of(&json!("same")), None);
    }
}
