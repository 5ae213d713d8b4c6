//! A tool the proxy offers itself, sent to an HTTP service through the same table the gate
//! server reads (`kind = "http"`): a team with an HTTP API and no MCP server of its own gives an
//! agent a gated action by configuration alone. The MCP server never sees these calls; the proxy
//! lists the tool beside the server's, with an input schema made from the table's payload.
//!
//! The facts such a call stands on are read by the table's `GET`s when the call arrives (the
//! agent's own reads go to other tools, which the proxy cannot match to them): the premise check
//! then covers the time from the call to its send, and every resend after a crash.

use std::sync::Arc;

use interlock::core::Tier;
use interlock::{Bound, Gate, PremiseReader, Target};
use interlock_http::{FieldKind, HttpTarget, HttpTargetConfig, HttpTargetError};
use serde_json::{Map, Value, json};

use crate::config::GatedTool;

/// The tool `name` bound to `gate` through its table: the binding, the reader the facts at the
/// call's arrival are read with, and the tier the table gives.
pub fn bind(
    gate: &Gate,
    name: &str,
    cfg: &GatedTool,
    table: &HttpTargetConfig,
) -> Result<(Bound, Arc<dyn PremiseReader>, Tier), HttpTargetError> {
    let target = HttpTarget::from_config(&cfg.target_name(name), table)?;
    let bound = target.bind(gate, &table.rules)?;
    Ok((bound, Arc::new(target.premises()), target.tier()))
}

/// The call's payload as the table takes it: its arguments without the lease argument, which
/// names the approval and is not sent.
pub fn payload(cfg: &GatedTool, arguments: &Value) -> Value {
    let mut args = arguments.as_object().cloned().unwrap_or_default();
    args.remove(&cfg.lease);
    Value::Object(args)
}

/// The tool as `tools/list` shows it: its description and an input schema with the table's
/// payload fields (every field, when the table declares none) and the lease argument.
pub fn listing(name: &str, cfg: &GatedTool, table: &HttpTargetConfig) -> Value {
    let mut properties = Map::new();
    let mut required = vec![json!(cfg.lease)];
    for (field, ty) in &table.payload {
        let kind = match ty.kind {
            FieldKind::String => "string",
            FieldKind::Integer => "integer",
            FieldKind::Boolean => "boolean",
        };
        let schema = if ty.optional {
            json!({"type": [kind, "null"]})
        } else {
            required.push(json!(field));
            json!({"type": kind})
        };
        properties.insert(field.clone(), schema);
    }
    properties.insert(
        cfg.lease.clone(),
        json!({"type": "string", "description": "The approval (lease id) this call runs under."}),
    );
    let mut schema = json!({"type": "object", "properties": properties, "required": required});
    if !table.payload.is_empty() {
        schema["additionalProperties"] = json!(false);
    }
    json!({
        "name": name,
        "description": cfg.description.clone().unwrap_or_default(),
        "inputSchema": schema,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_listing_takes_its_schema_from_the_table_and_the_payload_leaves_the_lease_out() {
        let cfg: crate::ProxyConfig = toml::from_str(
            r#"
            [tools.credit]
            key = ["request_id"]
            lease = "approval"
            description = "Credit an account."
            [tools.credit.http]
            payload = { request_id = "string", amount = "integer", note = "string?" }
            send = { url = "http://ledger.internal/credits", key_field = "key" }
            "#,
        )
        .unwrap();
        let tool = &cfg.tools["credit"];
        let table = tool.http.as_deref().unwrap();
        let listed = listing("credit", tool, table);
        assert_eq!(listed["description"], "Credit an account.");
        let schema = &listed["inputSchema"];
        assert_eq!(schema["properties"]["amount"], json!({"type": "integer"}));
        assert_eq!(
            schema["properties"]["note"],
            json!({"type": ["string", "null"]})
        );
        assert_eq!(
            schema["required"],
            json!(["approval", "amount", "request_id"])
        );
        assert_eq!(schema["additionalProperties"], false);
        let call = json!({"request_id": "r1", "amount": 5, "approval": "lease-1"});
        assert_eq!(
            payload(tool, &call),
            json!({"request_id": "r1", "amount": 5})
        );
    }
}
