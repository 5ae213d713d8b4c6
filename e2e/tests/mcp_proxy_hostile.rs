//! `interlock mcp-proxy` under a hostile client, in front of the real example MCP server and the
//! payments API: frames that are not JSON, not JSON-RPC, of the wrong types, ten megabytes long,
//! gated calls missing what the gate needs or carrying the id the proxy fills, a gated call before
//! `initialize`, and client ids chosen to collide with the proxy's own. Every one is answered,
//! the proxy stays up, and the payments API's records show only the one refund a valid call made.
//!
//! Needs `interlock` beside the test's binaries (`cargo build -p interlock-cli`, which
//! `scripts/test` runs first) and the example server's Python package (`scripts/setup`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use interlock_e2e::mcp::raw::{RawProxy, RawRig, call};
use serde_json::{Value, json};

/// The error code of the next answer, which must be an error for `id`.
fn error_code(p: &RawProxy, id: &Value) -> i64 {
    let a = p.next().unwrap();
    assert_eq!(&a["id"], id, "{a}");
    a["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {a}"))
}

#[test]
fn a_hostile_client_is_answered_and_nothing_it_sends_refunds() {
    let rig = RawRig::new(&[("pi_hostile", 5000)], |j| {
        interlock_e2e::mcp::example_config(j)
    })
    .unwrap();
    rig.grant("lease-1", 1).unwrap();
    let mut p = rig.start().unwrap();
    let refund = |amount: i64| json!({"payment_intent": "pi_hostile", "amount": amount, "request_id": "r-1", "approval": "lease-1"});

    // A gated call before `initialize`: the server will not serve the proxy's reads before its
    // handshake, so the call is answered with nothing sent.
    p.send(&call(json!("early"), "create_refund", refund(1000)))
        .unwrap();
    let early = p.next().unwrap();
    assert_eq!(early["id"], "early", "{early}");
    assert!(
        early["error"].is_object() || early["result"]["isError"] == true,
        "a call before initialize must not succeed: {early}"
    );

    // Frames that are not messages.
    p.write(b"this is not json").unwrap();
    assert_eq!(error_code(&p, &Value::Null), -32700);
    p.write(b"[]").unwrap();
    assert_eq!(error_code(&p, &Value::Null), -32600);
    p.write(b"42").unwrap();
    assert_eq!(error_code(&p, &Value::Null), -32600);
    p.send(&json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}))
        .unwrap();
    assert_eq!(error_code(&p, &json!(1)), -32600);
    p.send(&json!({"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"}))
        .unwrap();
    assert_eq!(error_code(&p, &Value::Null), -32600);
    p.send(&json!({"jsonrpc": "2.0", "id": 2, "method": 7}))
        .unwrap();
    assert_eq!(error_code(&p, &json!(2)), -32600);
    // Ten megabytes on one line: refused unread, and the next line is read as usual.
    let mut huge = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"create_refund\",\"arguments\":{\"pad\":\"".to_vec();
    huge.extend(std::iter::repeat_n(b'x', 10 << 20));
    huge.extend(b"\"}}}");
    p.write(&huge).unwrap();
    let too_long = p.next().unwrap();
    assert_eq!(too_long["error"]["code"], -32600, "{too_long}");
    assert!(
        too_long["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over the proxy's limit")
    );

    // The handshake, passed through.
    p.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "0"}}})).unwrap();
    let init = p.next().unwrap();
    assert_eq!(init["id"], 0, "{init}");
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    p.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .unwrap();

    // Gated calls missing what the gate needs, or carrying what the proxy fills.
    let mut missing = refund(1000);
    missing.as_object_mut().unwrap().remove("request_id");
    p.send(&call(json!(10), "create_refund", missing)).unwrap();
    assert_eq!(error_code(&p, &json!(10)), -32602);
    let mut no_lease = refund(1000);
    no_lease["approval"] = json!("");
    p.send(&call(json!(11), "create_refund", no_lease)).unwrap();
    assert_eq!(error_code(&p, &json!(11)), -32602);
    let mut own_key = refund(1000);
    own_key["idempotency_key"] = json!("mine");
    p.send(&call(json!(12), "create_refund", own_key)).unwrap();
    assert_eq!(error_code(&p, &json!(12)), -32602);
    p.send(&call(
        json!(13),
        "create_refund",
        json!(["not", "an", "object"]),
    ))
    .unwrap();
    assert_eq!(error_code(&p, &json!(13)), -32602);
    let mut wrong_type = refund(1000);
    wrong_type["request_id"] = json!({"nested": true});
    p.send(&call(json!(14), "create_refund", wrong_type))
        .unwrap();
    assert_eq!(error_code(&p, &json!(14)), -32602);
    // An unknown method goes to the server, whose own error comes back under the client's id.
    p.send(&json!({"jsonrpc": "2.0", "id": "u", "method": "no/such/method"}))
        .unwrap();
    assert_eq!(error_code(&p, &json!("u")), -32601);

    // Ids chosen to collide with the proxy's own (it numbers its requests to the server from
    // 1): a gated call — whose premise read and send are the proxy's own requests — beside
    // requests numbered as the proxy numbers, and the same numbers as strings. Each answer comes
    // back once, to its own id.
    p.send(&call(json!(1), "create_refund", refund(1000)))
        .unwrap();
    for id in [json!(2), json!(3), json!("1"), json!("2")] {
        p.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .unwrap();
    }
    p.send(&call(
        json!(4),
        "get_order",
        json!({"payment_intent": "pi_hostile"}),
    ))
    .unwrap();
    let mut seen = Vec::new();
    for _ in 0..6 {
        let a = p.next().unwrap();
        assert!(a.get("result").is_some(), "{a}");
        seen.push(a["id"].clone());
        if a["id"] == 1 {
            assert_ne!(a["result"]["isError"], true, "{a}");
            assert_eq!(
                a["result"]["_meta"]["interlock/outcome"]["label"],
                "COMMITTED/first_send"
            );
        }
    }
    seen.sort_by_key(Value::to_string);
    let mut want = vec![
        json!(1),
        json!(2),
        json!(3),
        json!(4),
        json!("1"),
        json!("2"),
    ];
    want.sort_by_key(Value::to_string);
    assert_eq!(seen, want, "each id answered once");

    // Still up, and the payments API saw exactly the one valid refund.
    p.send(&json!({"jsonrpc": "2.0", "id": "last", "method": "ping"}))
        .unwrap();
    assert_eq!(p.next().unwrap()["id"], "last");
    let refunds = rig.api.sim.refunds("pi_hostile");
    assert_eq!(
        refunds.iter().map(|r| r.amount).collect::<Vec<_>>(),
        vec![1000],
        "only the valid call refunded; the proxy's log: {}",
        rig.logs()
    );
    // The client closing its side ends the proxy cleanly.
    p.stdin.take();
    let status = p.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// Clients in strict function-calling modes send optional arguments as null: the agent's read
/// `get_order {payment_intent, excluding: null}` is still the read its refund was decided on, so
/// a refund made by hand after it refuses the call instead of passing on facts read at call time.
#[test]
fn a_read_with_null_arguments_is_what_the_next_call_is_decided_on() {
    let rig = RawRig::new(&[("pi_strict", 5000)], |j| {
        interlock_e2e::mcp::example_config(j)
    })
    .unwrap();
    rig.grant("lease-1", 1).unwrap();
    let mut p = rig.start().unwrap();
    p.handshake().unwrap();
    let read = p
        .call(
            "read",
            "get_order",
            json!({"payment_intent": "pi_strict", "excluding": null}),
        )
        .unwrap();
    assert_ne!(read["result"]["isError"], true, "{read}");
    // A person refunds $30 by hand after the agent read $50 refundable.
    rig.api.sim.hand_refund("pi_strict", 3000);
    let refund = p
        .call(
            "refund",
            "create_refund",
            json!({"payment_intent": "pi_strict", "amount": 1000, "request_id": "r-strict",
                   "approval": "lease-1"}),
        )
        .unwrap();
    let outcome = &refund["result"]["_meta"]["interlock/outcome"];
    assert_eq!(outcome["label"], "REFUSED:stale_premise", "{refund}");
    assert_eq!(outcome["changes"][0]["field"], "refundable", "{refund}");
    assert_eq!(
        rig.api.sim.refunds("pi_strict").len(),
        1,
        "only the hand refund; the proxy's log: {}",
        rig.logs()
    );
}
