//! One refund, one trace: a collector in the test's process (OTLP's trace service over gRPC)
//! receives what the processes export when `OTEL_EXPORTER_OTLP_ENDPOINT` names it, and each
//! refund's spans nest from its activity down to the send, with the fields an operator searches
//! by. Twice: the template's Rust worker on the Temporal dev server, and the Python worker whose
//! calls carry their activity's `traceparent` to `interlock serve`.
//!
//! Needs the binaries built (`cargo build -p interlock-cli -p e2e-worker -p refund-template`,
//! which `scripts/test` runs first), the `temporal` CLI and the Python worker's packages
//! (`scripts/setup`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock::{SystemClock, Tier};
use interlock_e2e::procs::DevServer;
use interlock_testkit::otlp::{self, Receiver, Span};
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;

const PORT: u16 = 7474;

fn bin(name: &str) -> PathBuf {
    interlock_e2e::stack::sibling(name).unwrap()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The payments API with one payment to refund.
fn payments() -> (Arc<SimPayments>, PaymentsApi) {
    let sim = SimPayments::new(
        Tier::One,
        Duration::from_secs(24 * 3600),
        Arc::new(SystemClock),
    );
    sim.add_payment("pi_881", 10_000);
    let api = PaymentsApi::start(sim.clone(), "sk_test_local").unwrap();
    (sim, api)
}

/// The variables that point a process's export at `receiver`, sending every 100 ms.
fn export_to(receiver: &Receiver, service: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_SERVICE_NAME", service.to_owned()),
    ]
}

fn succeeded(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Grant the lease that approves refunding 2000 of `pi_881`, in `journal`.
fn grant(journal: &Path, lease: &str) {
    let out = Command::new(bin("interlock"))
        .args(["lease", "grant", lease, "--approver", "ana@support"])
        .args(["--scope", "payment_intent=pi_881", "--cap", "amount=2000"])
        .env("INTERLOCK_JOURNAL", journal)
        .output()
        .unwrap();
    succeeded("interlock lease grant", &out);
}

/// The send of the refund keyed `key`, once the receiver has it and its ancestors up to a span
/// named `root` (whose service is `root_service`).
fn trace_of(receiver: &Receiver, key: &str, root: &str, root_service: &str) -> Vec<Span> {
    let spans = receiver
        .wait_for(Duration::from_secs(30), |spans| {
            spans
                .iter()
                .filter(|s| s.name == "interlock.send")
                .any(|send| {
                    otlp::ancestry(spans, send)
                        .iter()
                        .any(|a| a.name == root && a.service == root_service)
                        && otlp::ancestry(spans, send)
                            .iter()
                            .any(|a| a.name == "interlock.attempt" && a.attr("key") == key)
                })
        })
        .unwrap_or_else(|e| panic!("{e}: {:#?}", receiver.spans()));
    let send = spans
        .iter()
        .find(|s| {
            s.name == "interlock.send"
                && otlp::ancestry(&spans, s)
                    .iter()
                    .any(|a| a.attr("key") == key)
        })
        .unwrap();
    otlp::ancestry(&spans, send).into_iter().cloned().collect()
}

fn named<'a>(chain: &'a [Span], name: &str) -> &'a Span {
    chain
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} in {chain:#?}"))
}

/// What every gated refund's chain shows, whichever worker ran it.
fn check_attempt_and_send(chain: &[Span], key: &str, target: &str) {
    let trace = &chain[0].trace_id;
    assert!(
        chain.iter().all(|s| &s.trace_id == trace),
        "one trace: {chain:#?}"
    );
    let send = named(chain, "interlock.send");
    assert_eq!(send.attr("answer"), "done", "{send:?}");
    assert!(!send.attr("token").is_empty(), "{send:?}");
    assert_eq!(send.attr("via"), "first_send", "{send:?}");
    let attempt = named(chain, "interlock.attempt");
    assert_eq!(attempt.attr("key"), key);
    assert_eq!(attempt.attr("target"), target);
    assert_eq!(attempt.attr("tier"), "1");
    assert_eq!(attempt.attr("outcome"), "committed", "{attempt:?}");
    assert_eq!(attempt.attr("via"), "first_send", "{attempt:?}");
    assert_eq!(
        send.parent_span_id, attempt.span_id,
        "the send is the attempt's"
    );
}

#[test]
fn a_refund_through_the_rust_worker_is_one_trace_from_its_activity_to_the_send() {
    let dir = tempfile::tempdir().unwrap();
    let server = DevServer::start(dir.path(), PORT).unwrap();
    let (sim, api) = payments();
    let receiver = Receiver::start().unwrap();
    let journal = dir.path().join("refunds.db");
    grant(&journal, "case-4471");
    let mut env: Vec<(&str, String)> = vec![
        ("TEMPORAL_ADDRESS", server.address.clone()),
        (
            "TEMPORAL_CONFIG_FILE",
            dir.path().join("none.toml").display().to_string(),
        ),
        ("TASK_QUEUE", "refunds".to_owned()),
        ("INTERLOCK_JOURNAL", journal.display().to_string()),
        ("STRIPE_API_BASE", api.base_url.clone()),
        ("STRIPE_SECRET_KEY", "sk_test_local".to_owned()),
        ("INTERLOCK_STRIPE_TIER", "1".to_owned()),
    ];
    env.extend(export_to(&receiver, "refund-worker"));
    let run = |name: &str, args: &[&str]| {
        let mut c = Command::new(bin(name));
        c.args(args).envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        c
    };
    let _worker = Killed(
        run("refund-worker", &[])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = run(
        "refund-start",
        &["case-4471", "pi_881", "2000", "case-4471"],
    )
    .output()
    .unwrap();
    succeeded("refund-start", &out);
    assert_eq!(sim.refunds("pi_881").len(), 1);

    let chain = trace_of(
        &receiver,
        "case-4471",
        "interlock.activity",
        "refund-worker",
    );
    check_attempt_and_send(&chain, "case-4471", "stripe-refunds");
    assert!(chain.iter().all(|s| s.service == "refund-worker"));
    let names: Vec<&str> = chain.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["interlock.send", "interlock.attempt", "interlock.activity"],
        "the send nests in the attempt, the attempt in the activity"
    );
    let activity = named(&chain, "interlock.activity");
    assert_eq!(activity.attr("workflow_id"), "case-4471");
    assert!(!activity.attr("run_id").is_empty(), "{activity:?}");
    assert!(!activity.attr("activity_id").is_empty(), "{activity:?}");
    assert_eq!(activity.attr("attempt"), "1");
    assert_eq!(activity.attr("key"), "case-4471");
    assert!(
        activity.parent_span_id.is_empty(),
        "the activity is the root"
    );

    // The attempt's other steps are in the same trace, under the same attempt.
    let spans = receiver.spans();
    let attempt = named(&chain, "interlock.attempt");
    let steps: Vec<&str> = spans
        .iter()
        .filter(|s| s.parent_span_id == attempt.span_id)
        .map(|s| s.name.as_str())
        .collect();
    for step in ["interlock.premises.read", "interlock.journal.append"] {
        assert!(steps.contains(&step), "{step} under the attempt: {steps:?}");
    }
}

#[test]
fn a_refund_through_the_python_worker_continues_its_activitys_trace_in_the_gate_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = DevServer::start(dir.path(), PORT + 10).unwrap();
    let (sim, api) = payments();
    let receiver = Receiver::start().unwrap();
    let journal = dir.path().join("journal.db");
    grant(&journal, "case-5120");
    let socket = dir.path().join("gate.sock");
    std::fs::write(
        dir.path().join("serve.toml"),
        format!(
            "listen = \"unix:{}\"\njournal = \"{}\"\n\n\
             [targets.refunds]\nkind = \"stripe_refunds\"\ntier = 1\napi_base = \"{}\"\n",
            socket.display(),
            journal.display(),
            api.base_url
        ),
    )
    .unwrap();
    let _gate = Killed(
        Command::new(bin("interlock"))
            .args(["serve", "--config"])
            .arg(dir.path().join("serve.toml"))
            .env("STRIPE_SECRET_KEY", "sk_test_local")
            .envs(export_to(&receiver, "interlock-serve"))
            .stderr(std::fs::File::create(dir.path().join("serve.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "serve never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../worker-examples/python/refund_worker.py");
    let temporal = format!("http://{}", server.address);
    let _worker = Killed(
        Command::new("python3")
            .arg(script)
            .env("TEMPORAL_ADDRESS", &temporal)
            .env("TASK_QUEUE", "refunds-py")
            .env(
                "INTERLOCK_GATE_ADDRESS",
                format!("unix://{}", socket.display()),
            )
            .envs(export_to(&receiver, "refund-worker-py"))
            .stderr(std::fs::File::create(dir.path().join("worker.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let out = Command::new(bin("harness-starter"))
        .args(["wf-5120", "pi_881", "2000", "case-5120", "case-5120"])
        .arg("gated_py_t1")
        .env("TEMPORAL_ADDRESS", &temporal)
        .env("TASK_QUEUE", "refunds-py")
        .output()
        .unwrap();
    succeeded("harness-starter", &out);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("\"error\""),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(sim.refunds("pi_881").len(), 1);

    let chain = trace_of(
        &receiver,
        "case-5120",
        "RunActivity:refund_gated",
        "refund-worker-py",
    );
    check_attempt_and_send(&chain, "case-5120", "refunds");
    let names: Vec<(&str, &str)> = chain
        .iter()
        .map(|s| (s.service.as_str(), s.name.as_str()))
        .collect();
    assert_eq!(
        &names[..4],
        [
            ("interlock-serve", "interlock.send"),
            ("interlock-serve", "interlock.attempt"),
            ("interlock-serve", "interlock.rpc"),
            ("refund-worker-py", "RunActivity:refund_gated"),
        ],
        "the server's call is a child of the Python activity's span"
    );
    let rpc = named(&chain, "interlock.rpc");
    assert_eq!(rpc.attr("rpc"), "Submit");
    assert_eq!(rpc.attr("target"), "refunds");
}
