//! The refund template (`worker-examples/refund`) as a team runs it: its own worker and starter,
//! configured only by Temporal's and Stripe's usual variables (`TEMPORAL_ADDRESS` as
//! `host:port`, a namespace other than `default`), a lease granted with the command line into the
//! same journal. The worker is SIGKILLed while the payments API holds the answer to a refund it
//! has applied; a fresh worker finishes the workflow, and the payments API's own records show
//! exactly one refund.
//!
//! Needs the binaries built (`cargo build -p interlock-cli -p refund-template`, which
//! `scripts/test` runs first) and the `temporal` CLI (`scripts/setup`). With
//! `INTERLOCK_TEMPLATE_BIN` naming a directory, the template's binaries are taken from there: CI
//! runs it on the template copied out of the repository and built on its own.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock::{SystemClock, Tier};
use interlock_e2e::procs::DevServer;
use interlock_testkit::faults::Stall;
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use serde_json::Value;

const NAMESPACE: &str = "payments-team";
const PORT: u16 = 7444;

/// A binary of the workspace's, or, for the template's own (`refund-worker`, `refund-start`), the
/// directory `INTERLOCK_TEMPLATE_BIN` names: the template built as a copy outside the repository
/// (`scripts/template-copy`).
fn bin(name: &str) -> PathBuf {
    match std::env::var_os("INTERLOCK_TEMPLATE_BIN") {
        Some(dir) if name.starts_with("refund-") => {
            let path = PathBuf::from(dir).join(name);
            assert!(path.exists(), "{} is missing", path.display());
            path
        }
        _ => interlock_e2e::stack::sibling(name).unwrap(),
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The payments API with one payment of $100 (`pi_881`), and the template's environment: the
/// dev server at `address` (in `namespace`, where not `default`), a journal in `dir`, the API.
fn payments_and_env(
    dir: &std::path::Path,
    address: &str,
    namespace: Option<&str>,
) -> (Arc<SimPayments>, PaymentsApi, Vec<(&'static str, String)>) {
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(24 * 3600),
        Arc::new(SystemClock),
    );
    sim.add_payment("pi_881", 10_000);
    let api = PaymentsApi::start(sim.clone(), "sk_test_local").unwrap();
    let mut env: Vec<(&'static str, String)> = vec![
        ("TEMPORAL_ADDRESS", address.to_owned()),
        (
            "TEMPORAL_CONFIG_FILE",
            dir.join("none.toml").display().to_string(),
        ),
        ("TASK_QUEUE", "refunds".to_owned()),
        (
            "INTERLOCK_JOURNAL",
            dir.join("refunds.db").display().to_string(),
        ),
        ("STRIPE_API_BASE", api.base_url.clone()),
        ("STRIPE_SECRET_KEY", "sk_test_local".to_owned()),
        ("INTERLOCK_STRIPE_TIER", "1".to_owned()),
    ];
    if let Some(ns) = namespace {
        env.push(("TEMPORAL_NAMESPACE", ns.to_owned()));
    }
    (sim, api, env)
}

#[test]
fn the_template_worker_refunds_once_through_a_sigkill_in_its_own_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let server = DevServer::start_with(dir.path(), PORT, &[NAMESPACE]).unwrap();
    let (sim, _api, env) = payments_and_env(dir.path(), &server.address, Some(NAMESPACE));
    let run = |name: &str, args: &[&str]| {
        let mut c = Command::new(bin(name));
        c.args(args).envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        c
    };

    let grant = run(
        "interlock",
        &[
            "lease",
            "grant",
            "case-4471",
            "--approver",
            "ana@support",
            "--scope",
            "payment_intent=pi_881",
            "--cap",
            "amount=2000",
        ],
    )
    .output()
    .unwrap();
    assert!(
        grant.status.success(),
        "{}",
        String::from_utf8_lossy(&grant.stderr)
    );

    // The payments API applies the refund and holds its answer: the worker dies mid-refund.
    let stall = Stall::new();
    sim.hold_next_response(stall.clone());
    let worker = Killed(
        run("refund-worker", &[])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let starter = run(
        "refund-start",
        &["case-4471", "pi_881", "2000", "case-4471"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let t0 = Instant::now();
    while !stall.reached() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the refund never reached the payments API"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(worker); // SIGKILL
    stall.release();
    assert_eq!(sim.refunds("pi_881").len(), 1, "applied before the kill");

    let _second = Killed(
        run("refund-worker", &[])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = starter.wait_with_output().unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "refund-start: {line} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_str(line.trim()).unwrap();
    let refunds = sim.refunds("pi_881");
    assert_eq!(
        refunds.len(),
        1,
        "exactly one refund at the payments API: {refunds:?}"
    );
    assert_eq!(refunds[0].amount, 2000);
    assert_eq!(
        answer["refunded"]["refund_id"].as_str(),
        Some(refunds[0].id.as_str()),
        "{answer}"
    );

    // The workflow ran in the team's namespace, not in `default`.
    let describe = |ns: &str| {
        Command::new(server.cli())
            .args(["workflow", "describe", "--address", &server.address])
            .args(["--namespace", ns, "--workflow-id", "case-4471"])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(describe(NAMESPACE));
    assert!(!describe("default"));
}

#[test]
fn a_namespace_the_server_does_not_have_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let server = DevServer::start(dir.path(), PORT + 10).unwrap();
    let out = Command::new(bin("refund-start"))
        .args(["case-1", "pi_1", "100", "case-1"])
        .env("TEMPORAL_ADDRESS", &server.address)
        .env("TEMPORAL_NAMESPACE", "nowhere")
        .env("TEMPORAL_CONFIG_FILE", dir.path().join("none.toml"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no namespace \"nowhere\""), "{err}");
    assert!(err.contains("TEMPORAL_NAMESPACE"), "{err}");
}

#[test]
fn the_starter_prints_the_gates_refusal_and_a_request_no_retry_can_change_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = DevServer::start(dir.path(), PORT + 20).unwrap();
    let (sim, _api, env) = payments_and_env(dir.path(), &server.address, None);
    let run = |name: &str, args: &[&str]| {
        let out = Command::new(bin(name))
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    for lease in ["case-1", "case-2"] {
        let (ok, out) = run(
            "interlock",
            &[
                "lease",
                "grant",
                lease,
                "--approver",
                "ana@support",
                "--scope",
                "payment_intent=pi_881",
            ],
        );
        assert!(ok, "{out}");
    }
    let (ok, out) = run("interlock", &["lease", "revoke", "case-1"]);
    assert!(ok, "{out}");
    let _worker = Killed(
        Command::new(bin("refund-worker"))
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The approval was revoked: the person who started the refund reads the gate's answer.
    let (ok, line) = run("refund-start", &["case-1", "pi_881", "2000", "case-1"]);
    assert!(!ok, "{line}");
    let answer: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(answer["failed"]["type"], "InterlockRefused", "{answer}");
    assert_eq!(answer["failed"]["outcome"], "REFUSED", "{answer}");
    assert_eq!(answer["failed"]["refusal"], "lease", "{answer}");
    // A refund in a currency the payment was not made in: no retry can change that, so the
    // decision fails once, typed, and nothing is sent.
    let (ok, line) = run(
        "refund-start",
        &["case-2", "pi_881", "2000", "case-2", "eur"],
    );
    assert!(!ok, "{line}");
    let answer: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(answer["failed"]["type"], "InterlockRefused", "{answer}");
    assert_eq!(answer["failed"]["refusal"], "premise_error", "{answer}");
    assert!(
        answer["failed"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("eur"),
        "{answer}"
    );
    assert_eq!(
        server.refund_attempts("case-2"),
        Some(1),
        "decided once, not retried"
    );
    assert!(sim.refunds("pi_881").is_empty(), "nothing was refunded");
}
