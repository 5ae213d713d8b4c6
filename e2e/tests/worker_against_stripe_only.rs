//! The example worker as a new user runs it against Stripe: no shop order service anywhere, a
//! server that shows only Stripe's endpoints. On a real Temporal dev server, a gated refund is
//! SIGKILLed while the server holds its applied request's answer, a fresh worker recovers it,
//! and the server's own records show one refund.
//!
//! Needs the worker binaries beside the harness (`cargo build -p interlock-cli -p e2e-worker
//! -p interlock-e2e`, which `scripts/test` runs first) and the `temporal` CLI (`scripts/setup`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[test]
fn the_worker_refunds_once_through_a_sigkill_against_a_server_with_only_stripe_s_endpoints() {
    let harness = Path::new(env!("CARGO_BIN_EXE_kill-matrix"));
    let bins = harness.parent().unwrap();
    for b in ["harness-worker", "harness-starter", "interlock"] {
        assert!(
            bins.join(b).exists(),
            "{} is missing: run `cargo build -p interlock-cli -p e2e-worker -p interlock-e2e` first",
            bins.join(b).display()
        );
    }
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(harness)
        .args([
            "--no-shop",
            "--cases",
            "crash_in_flight,crash_after_response",
            "--systems",
            "gated_t1,gated_t2",
            "--repeat",
            "1",
            "--port",
            "7344",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "the harness failed:\n{log}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("e2e_matrix.json")).unwrap())
            .unwrap();
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "{log}");
    for c in cells {
        assert_eq!(c["held"], true, "{c}");
        assert_eq!(c["tagged"], 1, "one refund carries the key: {c}");
        assert_eq!(c["refunded_cents"], 2000, "{c}");
        assert!(
            c["outcome"].as_str().unwrap().starts_with("COMMITTED"),
            "{c}"
        );
    }
}
