//! A tool the MCP proxy offers itself from an HTTP target table (`[tools.NAME.http]`): the agent
//! sees it in `tools/list` with a schema made from the table, and its calls go through the gate to
//! the payments API over HTTP, never to the MCP server. Judged by the payments API's records: one
//! refund per request, a repeat replayed, a dead approval and a broken rule send nothing (and the
//! request made again under a live approval is sent), and a proxy SIGKILLed with the refund on
//! the wire is recovered at its next start without a second.
//!
//! Needs `interlock` beside the test's binaries (`cargo build -p interlock-cli`, which
//! `scripts/test` runs first) and the example server's Python package (`scripts/setup`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::path::Path;

use interlock_e2e::mcp::client::kill9;
use interlock_e2e::mcp::raw::RawRig;
use interlock_testkit::faults::Stall;
use interlock_testkit::payments_api::refunds_table;
use serde_json::{Value, json};

/// The proxy's file: the payments API's refunds as an HTTP table, tier 1 (the API dedupes
/// `Idempotency-Key` for 24 h) with a lookup by the refunds' listing.
fn config(journal: &Path) -> anyhow::Result<String> {
    let mut http = refunds_table("${STRIPE_API_BASE}", "STRIPE_SECRET_KEY", 1)?;
    http.insert("rules".into(), vec!["amount_paid >= payload.amount"].into());
    let mut tool = toml::Table::new();
    tool.insert("description".into(), "Refund part of a payment.".into());
    tool.insert("key".into(), vec!["payment_intent"].into());
    tool.insert("lease".into(), "approval".into());
    tool.insert("http".into(), http.into());
    let mut tools = toml::Table::new();
    tools.insert("refund_by_http".into(), tool.into());
    let mut file = toml::Table::new();
    file.insert("journal".into(), journal.display().to_string().into());
    file.insert("tools".into(), tools.into());
    Ok(toml::to_string(&file)?)
}

fn refund(pi: &str, amount: i64, approval: &str) -> Value {
    json!({"payment_intent": pi, "amount": amount, "currency": "usd", "approval": approval})
}

fn label(answer: &Value) -> String {
    answer["result"]["_meta"]["interlock/outcome"]["label"]
        .as_str()
        .unwrap_or_else(|| panic!("no outcome: {answer}"))
        .to_owned()
}

#[test]
fn an_http_tool_of_the_proxy_refunds_once_and_survives_a_sigkill_mid_send() {
    let payments = ["pi_h1", "pi_h2", "pi_h3", "pi_kill"].map(|pi| (pi, 5000));
    let rig = RawRig::new(&payments, config).unwrap();
    rig.grant("lease-1", 10).unwrap();
    let api = &rig.api;
    let logs = || rig.logs();
    let mut p = rig.start().unwrap();
    p.handshake().unwrap();

    // Listed beside the server's own tools, with the table's payload as its schema.
    p.send(&json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}))
        .unwrap();
    let listed = p.next().unwrap();
    let tools = listed["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        names.contains(&"create_refund") && names.contains(&"refund_by_http"),
        "{names:?}"
    );
    let ours = tools
        .iter()
        .find(|t| t["name"] == "refund_by_http")
        .unwrap();
    assert_eq!(
        ours["inputSchema"]["required"],
        json!(["approval", "amount", "currency", "payment_intent"])
    );
    assert!(
        ours["description"]
            .as_str()
            .unwrap()
            .contains("Gated by Interlock (tier 1)")
    );

    // One refund, and the same request again answered from the journal.
    let first = p
        .call("1", "refund_by_http", refund("pi_h1", 1500, "lease-1"))
        .unwrap();
    assert_eq!(label(&first), "COMMITTED/first_send", "{first}");
    let again = p
        .call("2", "refund_by_http", refund("pi_h1", 1500, "lease-1"))
        .unwrap();
    assert!(label(&again).starts_with("COMMITTED"), "{again}");
    assert_eq!(
        again["result"]["_meta"]["interlock/outcome"]["replayed"],
        true
    );
    let landed = api.sim.refunds("pi_h1");
    assert_eq!(landed.len(), 1, "{landed:?}");
    assert!(landed[0].idempotency_key.is_some());

    // A dead approval, and an amount the payment's facts do not allow: nothing sent.
    let unapproved = p
        .call("3", "refund_by_http", refund("pi_h2", 500, "no-such-lease"))
        .unwrap();
    assert_eq!(unapproved["result"]["isError"], true, "{unapproved}");
    assert!(label(&unapproved).starts_with("REFUSED"), "{unapproved}");
    let over = p
        .call("4", "refund_by_http", refund("pi_h3", 9000, "lease-1"))
        .unwrap();
    assert_eq!(label(&over), "REFUSED:premise_rule", "{over}");
    assert!(api.sim.refunds("pi_h2").is_empty() && api.sim.refunds("pi_h3").is_empty());
    // The lease is not part of the payload, yet the same request under a live approval is a
    // new decision, not the refusal replayed.
    rig.grant("lease-2", 1).unwrap();
    let approved = p
        .call("5", "refund_by_http", refund("pi_h2", 500, "lease-2"))
        .unwrap();
    assert_eq!(label(&approved), "COMMITTED/first_send", "{approved}");
    assert_eq!(api.sim.refunds("pi_h2").len(), 1);

    // SIGKILL with the refund applied and its answer on the wire; the next start recovers it.
    let stall = Stall::new();
    api.sim.hold_response_on("pi_kill", stall.clone());
    p.send(&interlock_e2e::mcp::raw::call(
        json!("k"),
        "refund_by_http",
        refund("pi_kill", 2000, "lease-1"),
    ))
    .unwrap();
    stall.wait_reached();
    kill9(p.child.id());
    drop(p);
    stall.release();
    let mut p = rig.start().unwrap();
    p.handshake().unwrap();
    let after = p
        .call("k2", "refund_by_http", refund("pi_kill", 2000, "lease-1"))
        .unwrap();
    assert!(
        label(&after).starts_with("COMMITTED"),
        "{after}\n{}",
        logs()
    );
    let landed = api.sim.refunds("pi_kill");
    assert_eq!(
        landed.iter().map(|r| r.amount).collect::<Vec<_>>(),
        [2000],
        "one refund through the kill; the proxy's log: {}",
        logs()
    );
    assert!(
        logs().contains("recovered an effect left in flight"),
        "the start's recovery settled it: {}",
        logs()
    );
}
