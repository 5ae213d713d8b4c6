//! A gated tool as the gate sees it: a target whose send is the `tools/call` itself (with the
//! effect's id in the argument the server deduplicates or records it under), whose lookup is
//! another tool of the same server, and whose premises are read from a third. What the server
//! answers is mapped onto the core's answers here, and only here; where an answer cannot say
//! whether the call acted, it is unknown, never a failure.

use std::sync::Arc;
use std::time::Duration;

use interlock::core::{LookupAnswer, Premises, Repair, SendAnswer, Tier};
use interlock::premise::{PremiseError, PremiseReader};
use interlock::target::{SendRequest, Target, by_key};
use interlock::{EffectKey, effect::canonical_json};
use serde_json::{Map, Value, json};

use crate::config::{GatedTool, PremiseRead, field_path};
use crate::upstream::{Upstream, UpstreamError};

/// How long a read of the proxy's own (a premise read, a lookup) may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One gated tool, bound to the server.
pub struct ToolTarget {
    tool: String,
    name: String,
    cfg: GatedTool,
    upstream: Arc<Upstream>,
}

impl ToolTarget {
    /// The gated tool `tool`, configured by `cfg`, called on `upstream`.
    pub fn new(tool: &str, cfg: &GatedTool, upstream: Arc<Upstream>) -> Self {
        Self {
            tool: tool.to_owned(),
            name: cfg.target_name(tool),
            cfg: cfg.clone(),
            upstream,
        }
    }

    /// The call's arguments as sent: the effect's payload with its id filled in.
    pub fn arguments(&self, key: &EffectKey, payload: &Value) -> Value {
        let mut args = payload.as_object().cloned().unwrap_or_default();
        if let Some(a) = &self.cfg.idempotency_argument {
            args.insert(a.clone(), json!(key.as_str()));
        }
        Value::Object(args)
    }
}

/// The server went away with a send or a lookup under way, or did not answer a send in time.
/// Nothing may be concluded about the effect — not failed, not unknown, not found — so the
/// server is stopped (a call it is still working on must not land later, outside any claim),
/// this thread waits for the process to end (the proxy exits when the server does), and the
/// effect is left in flight, exactly as a crash at this point would, for the next start.
fn left_in_flight(upstream: &Upstream, why: &UpstreamError) -> ! {
    tracing::warn!(%why, "a gated call was cut off at the MCP server; the server is stopped and the effect left in flight for recovery");
    upstream.park();
    upstream.gone(why.to_string());
    loop {
        std::thread::park();
    }
}

impl Target for ToolTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn tier(&self) -> Tier {
        self.cfg.tier()
    }

    fn dedupe_window(&self) -> Option<Duration> {
        self.cfg
            .dedupe_window_hours
            .filter(|_| self.cfg.dedupes)
            .map(|h| Duration::from_secs(h.saturating_mul(3600)))
    }

    fn has_lookup(&self) -> bool {
        self.cfg.lookup.is_some() && self.cfg.idempotency_argument.is_some()
    }

    fn send(&self, req: &SendRequest<'_>) -> SendAnswer {
        let params = json!({"name": self.tool, "arguments": self.arguments(req.key, req.payload)});
        match self.upstream.call("tools/call", params, req.timeout) {
            Ok(answer) => send_answer(&answer, &self.cfg),
            // The server may still be working on the call, and would land it after the gate's
            // claim on it ran out: it is stopped, and the call left in flight as after a crash.
            Err(e) => left_in_flight(&self.upstream, &e),
        }
    }

    fn lookup(&self, key: &EffectKey, _payload: &Value) -> LookupAnswer {
        let Some(lookup) = &self.cfg.lookup else {
            return LookupAnswer::Unknown(format!("tool {} has no lookup", self.tool));
        };
        let params =
            json!({"name": lookup.tool, "arguments": {lookup.argument.clone(): key.as_str()}});
        match self.upstream.call("tools/call", params, READ_TIMEOUT) {
            Ok(answer) => lookup_answer(&lookup.tool, &answer),
            Err(e @ UpstreamError::Timeout { .. }) => LookupAnswer::Unknown(e.to_string()),
            Err(e) => left_in_flight(&self.upstream, &e),
        }
    }
}

/// What a tool's answer holds: its structured content, or else its first text block read as
/// JSON (servers that predate structured content), or else that text as a string.
pub fn content_value(result: &Value) -> Option<Value> {
    if let Some(s) = result.get("structuredContent") {
        return Some(s.clone());
    }
    let text = result
        .get("content")?
        .as_array()?
        .iter()
        .find(|c| c.get("type") == Some(&json!("text")))?
        .get("text")?
        .as_str()?;
    Some(serde_json::from_str(text).unwrap_or_else(|_| json!(text)))
}

/// The text a tool's answer shows, for messages.
pub fn content_text(result: &Value) -> String {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if texts.is_empty() {
        "(no text)".into()
    } else {
        texts.join(" ").chars().take(500).collect()
    }
}

/// The value at a field path (`a.b`) in `v`.
pub fn at_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    field_path(path)?
        .into_iter()
        .try_fold(v, |v, name| v.get(name))
}

/// Set the value at a field path (`a.b`) in `v`, where the path exists.
pub fn set_path(v: &mut Value, path: &str, new: Value) {
    let Some(names) = field_path(path) else {
        return;
    };
    let mut at = v;
    for name in names {
        match at.get_mut(name) {
            Some(next) => at = next,
            None => return,
        }
    }
    *at = new;
}

/// A JSON-RPC error the server answers before running the tool (the request is malformed, the
/// method or tool unknown, its parameters invalid: MCP's protocol errors) means it was not
/// carried out; any other error may come after the tool acted.
fn not_carried_out(code: i64) -> bool {
    (-32602..=-32600).contains(&code)
}

/// Whether a result is complete: without `resultType` (older protocol versions), or
/// `"complete"`. Anything else (a server asking for input first) says nothing about the effect.
fn complete(result: &Value) -> bool {
    matches!(result.get("resultType"), None | Some(Value::Null))
        || result.get("resultType") == Some(&json!("complete"))
}

/// The server's answer to the gated `tools/call`, on the core's table.
pub fn send_answer(answer: &Value, cfg: &GatedTool) -> SendAnswer {
    if let Some(err) = answer.get("error") {
        let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("(no message)")
            .to_owned();
        return if cfg.protocol_errors_definite && not_carried_out(code) {
            SendAnswer::Definite {
                code: format!("jsonrpc_{code}"),
                message,
            }
        } else {
            SendAnswer::Unknown(format!(
                "the server answered JSON-RPC error {code}: {message}"
            ))
        };
    }
    let Some(result) = answer.get("result") else {
        return SendAnswer::Unknown("the server's answer has neither a result nor an error".into());
    };
    if !complete(result) {
        return SendAnswer::Unknown(format!(
            "the server answered a result that is not complete ({}); the proxy cannot take part \
             in what it asks for",
            result["resultType"]
        ));
    }
    if result.get("isError") != Some(&json!(true)) {
        return SendAnswer::Done(result.clone());
    }
    let text = content_text(result);
    let definite = cfg.definite_error_field.as_deref().is_some_and(|f| {
        result.get("structuredContent").and_then(|s| at_path(s, f)) == Some(&json!(true))
    });
    if definite {
        SendAnswer::Definite {
            code: "tool_error".into(),
            message: text,
        }
    } else {
        SendAnswer::Unknown(format!(
            "the tool answered an error that does not say it did not act: {text}"
        ))
    }
}

/// A lookup tool's answer: a list of the effects found under the id (each with an `id`), one
/// effect as an object, or null for none; a lone `result` field (how some servers wrap a value
/// that is not an object) is looked into.
pub fn lookup_answer(tool: &str, answer: &Value) -> LookupAnswer {
    let Some(result) = answer.get("result") else {
        return LookupAnswer::Unknown(format!(
            "lookup {tool} failed: {}",
            answer
                .get("error")
                .map_or_else(String::new, Value::to_string)
        ));
    };
    if result.get("isError") == Some(&json!(true)) {
        return LookupAnswer::Unknown(format!("lookup {tool} failed: {}", content_text(result)));
    }
    if !complete(result) {
        return LookupAnswer::Unknown(format!(
            "lookup {tool} answered a result that is not complete"
        ));
    }
    // No content is no answer, never "not found".
    let Some(mut found) = content_value(result) else {
        return LookupAnswer::Unknown(format!("lookup {tool} answered no content"));
    };
    if let Value::Object(m) = &found
        && m.len() == 1
        && let Some(inner) = m.get("result")
    {
        found = inner.clone();
    }
    match found {
        Value::Null => LookupAnswer::NotFound,
        Value::Array(all) => by_key(all),
        // An object is an effect only with an id (`{"found": false}` is not a refund).
        v @ Value::Object(_) => by_key([v]),
        other => LookupAnswer::Unknown(format!(
            "lookup {tool} answered {other}, not a list of effects, an effect or null"
        )),
    }
}

/// Reads a gated tool's premises from the read tool its configuration names.
pub struct ToolPremises {
    read: PremiseRead,
    upstream: Arc<Upstream>,
}

impl ToolPremises {
    /// The read `read`, on `upstream`.
    pub fn new(read: &PremiseRead, upstream: Arc<Upstream>) -> Self {
        Self {
            read: read.clone(),
            upstream,
        }
    }

    /// The read's arguments filled from a call's (without the effect's id): also what a client's
    /// own read of the same facts is recognised by.
    pub fn arguments(&self, call: &Value) -> Result<Map<String, Value>, PremiseError> {
        self.read
            .arguments
            .iter()
            .map(|(read_arg, call_arg)| match call.get(call_arg) {
                Some(v) => Ok((read_arg.clone(), v.clone())),
                None => Err(PremiseError::Invalid(format!(
                    "the call has no argument {call_arg:?} for {}'s {read_arg:?}",
                    self.read.tool
                ))),
            })
            .collect()
    }

    /// The read tool's name.
    pub fn tool(&self) -> &str {
        &self.read.tool
    }

    /// The premises in a read's answer (`result` of a `tools/call`).
    pub fn premises_in(&self, result: &Value) -> Result<Premises, PremiseError> {
        if result.get("isError") == Some(&json!(true)) {
            return Err(PremiseError::Unavailable(format!(
                "{} answered an error: {}",
                self.read.tool,
                content_text(result)
            )));
        }
        let value = content_value(result).ok_or_else(|| {
            PremiseError::Invalid(format!("{} answered no content", self.read.tool))
        })?;
        self.fields_of(&value)
    }

    /// The premises in a read's content.
    pub fn fields_of(&self, value: &Value) -> Result<Premises, PremiseError> {
        self.read
            .fields
            .iter()
            .map(|f| match at_path(value, f) {
                Some(v) => Ok((f.clone(), v.clone())),
                None => Err(PremiseError::Invalid(format!(
                    "{}'s answer has no field {f:?}",
                    self.read.tool
                ))),
            })
            .collect()
    }

    /// Whether a client's `tools/call` of `tool` with `arguments` reads the same facts as the
    /// gate would for the call `call`.
    pub fn same_read(&self, tool: &str, arguments: &Value, call: &Value) -> bool {
        tool == self.read.tool
            && self
                .arguments(call)
                .is_ok_and(|mine| canonical_json(&Value::Object(mine)) == canonical_json(arguments))
    }
}

impl PremiseReader for ToolPremises {
    fn read(&self, key: &EffectKey, payload: &Value) -> Result<Premises, PremiseError> {
        let mut args = self.arguments(payload)?;
        if let Some(e) = &self.read.effect_id_argument {
            args.insert(e.clone(), json!(key.as_str()));
        }
        let params = json!({"name": self.read.tool, "arguments": args});
        // Any failure here leaves nothing sent (fail closed); a server that is gone is noticed
        // by the proxy, which ends.
        let answer = self
            .upstream
            .call("tools/call", params, READ_TIMEOUT)
            .map_err(|e| PremiseError::Unavailable(e.to_string()))?;
        match answer.get("result") {
            Some(result) => self.premises_in(result),
            None => Err(PremiseError::Unavailable(format!(
                "{} failed: {}",
                self.read.tool,
                answer
                    .get("error")
                    .map_or_else(String::new, Value::to_string)
            ))),
        }
    }

    fn repairs(&self, payload: &Value, now: &Premises) -> Vec<Repair> {
        repairs(&self.read, payload, now)
    }
}

/// What would still fit when the premises moved: the call with its repair argument lowered to
/// what the premise allows now (or the call as it was, when it still fits). Never applied: a
/// repair is a new decision, for the agent to make.
pub fn repairs(read: &PremiseRead, payload: &Value, now: &Premises) -> Vec<Repair> {
    let Some(r) = &read.repair else {
        return Vec::new();
    };
    let limit_value = now.get(&r.at_most);
    let (Some(asked), Some(limit)) = (
        payload.get(&r.argument).and_then(Value::as_f64),
        limit_value.and_then(Value::as_f64),
    ) else {
        return Vec::new();
    };
    if limit <= 0.0 {
        return Vec::new();
    }
    let mut repaired = payload.clone();
    let fits = asked <= limit;
    let summary = if fits {
        format!(
            "{} = {asked} still fits: {} is {limit} now",
            r.argument, r.at_most
        )
    } else {
        if let (Some(obj), Some(v)) = (repaired.as_object_mut(), limit_value) {
            obj.insert(r.argument.clone(), v.clone());
        }
        format!(
            "{} lowered from {asked} to {limit}, what {} allows now",
            r.argument, r.at_most
        )
    };
    vec![Repair {
        kind: if fits { "still_fits" } else { "at_most" }.into(),
        summary,
        payload: repaired,
    }]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn ok(result: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "result": result})
    }

    fn tool(definite_error_field: Option<&str>) -> GatedTool {
        let mut t: GatedTool = toml::from_str("key = [\"k\"]\nlease = \"l\"").unwrap();
        t.definite_error_field = definite_error_field.map(str::to_owned);
        t
    }

    #[test]
    fn a_tool_error_is_unknown_unless_the_server_says_it_did_not_act() {
        let (none, definite) = (tool(None), tool(Some("definite")));
        let done = ok(json!({"content": [{"type": "text", "text": "re_1"}]}));
        assert!(matches!(send_answer(&done, &none), SendAnswer::Done(_)));
        let asks = ok(json!({"resultType": "input_required", "content": []}));
        assert!(matches!(send_answer(&asks, &none), SendAnswer::Unknown(_)));
        let declined = ok(
            json!({"isError": true, "content": [{"type": "text", "text": "card declined"}],
            "structuredContent": {"definite": true}}),
        );
        assert!(matches!(
            send_answer(&declined, &none),
            SendAnswer::Unknown(_)
        ));
        assert!(matches!(
            send_answer(&declined, &definite),
            SendAnswer::Definite { .. }
        ));
        let server_down = ok(
            json!({"isError": true, "content": [{"type": "text", "text": "502"}],
            "structuredContent": {"definite": false}}),
        );
        assert!(matches!(
            send_answer(&server_down, &definite),
            SendAnswer::Unknown(_)
        ));
        let bad_params =
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "no"}});
        assert!(matches!(
            send_answer(&bad_params, &none),
            SendAnswer::Definite { .. }
        ));
        let mut distrusted = tool(None);
        distrusted.protocol_errors_definite = false;
        assert!(matches!(
            send_answer(&bad_params, &distrusted),
            SendAnswer::Unknown(_)
        ));
        let internal =
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}});
        assert!(matches!(
            send_answer(&internal, &none),
            SendAnswer::Unknown(_)
        ));
    }

    #[test]
    fn a_lookup_answers_by_what_the_tool_found() {
        let found = |v: Value| lookup_answer("find", &ok(json!({"structuredContent": v})));
        assert_eq!(found(json!({"result": null})), LookupAnswer::NotFound);
        assert_eq!(found(json!({"result": []})), LookupAnswer::NotFound);
        assert!(matches!(
            found(json!({"result": [{"id": "re_1"}]})),
            LookupAnswer::Found(_)
        ));
        assert!(matches!(
            found(json!({"result": [{"id": "re_1"}, {"id": "re_2"}]})),
            LookupAnswer::Several(_)
        ));
        assert!(matches!(
            found(json!({"id": "re_1", "amount": 5})),
            LookupAnswer::Found(_)
        ));
        assert!(matches!(
            found(json!({"found": false})),
            LookupAnswer::Unknown(_)
        ));
        let empty = ok(json!({"content": []}));
        assert!(matches!(
            lookup_answer("find", &empty),
            LookupAnswer::Unknown(_)
        ));
        assert!(matches!(
            found(json!({"result": 5})),
            LookupAnswer::Unknown(_)
        ));
        let text = ok(json!({"content": [{"type": "text", "text": "[]"}]}));
        assert_eq!(lookup_answer("find", &text), LookupAnswer::NotFound);
        let failed = ok(json!({"isError": true, "content": [{"type": "text", "text": "503"}]}));
        assert!(matches!(
            lookup_answer("find", &failed),
            LookupAnswer::Unknown(_)
        ));
    }

    #[test]
    fn a_repair_lowers_the_argument_to_what_the_premise_allows_now() {
        let read: PremiseRead = toml::from_str(
            r#"
tool = "get_order"
fields = ["refundable"]
repair = { argument = "amount", at_most = "refundable" }
"#,
        )
        .unwrap();
        let now = |v: i64| Premises::from([("refundable".to_owned(), json!(v))]);
        let call = json!({"order": "o-1", "amount": 5000});
        let lowered = repairs(&read, &call, &now(3000));
        assert_eq!(lowered[0].kind, "at_most");
        assert_eq!(lowered[0].payload, json!({"order": "o-1", "amount": 3000}));
        let fits = repairs(&read, &call, &now(6000));
        assert_eq!(fits[0].kind, "still_fits");
        assert_eq!(fits[0].payload, call);
        assert!(
            repairs(&read, &call, &now(0)).is_empty(),
            "nothing left: no repair"
        );
        assert!(repairs(&read, &json!({"amount": "x"}), &now(10)).is_empty());
    }

    #[test]
    fn a_field_path_reaches_into_objects() {
        let v = json!({"a": {"b": 3}});
        assert_eq!(at_path(&v, "a.b"), Some(&json!(3)));
        assert_eq!(at_path(&v, "a.c"), None);
        assert_eq!(at_path(&v, "a..b"), None);
    }
}
