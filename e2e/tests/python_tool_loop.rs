//! The Python decorator (`worker-examples/python/interlock_gate.py`) in its example, a tool loop
//! driven by a scripted model (`tool_loop.py`), against the gate server (`interlock serve`) and
//! the payments API: a refund lands once; a hand refund between the model's read and its call is
//! refused with what changed, and the repaired call lands; and a loop SIGKILLed mid-refund —
//! with the gate server killed too — is started again, recovers on start-up and leaves one
//! refund. Each judged by the payments API's own records.
//!
//! Needs `interlock` beside the test's binaries (`cargo build -p interlock-cli`, which
//! `scripts/test` runs first) and the Python worker's packages (`scripts/setup`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // in tests, a panic is the report

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use interlock::{SystemClock, Tier};
use interlock_testkit::faults::Stall;
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;

struct World {
    dir: tempfile::TempDir,
    api: PaymentsApi,
    interlock: PathBuf,
    server: Option<Child>,
}

impl World {
    fn new() -> Self {
        let interlock = interlock_e2e::mcp::interlock().unwrap();
        let sim = SimPayments::new(
            Tier::One,
            Duration::from_secs(86_400),
            Arc::new(SystemClock),
        );
        let api = PaymentsApi::start(sim, "sk_test_local").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("gate.sock");
        std::fs::write(
            dir.path().join("serve.toml"),
            format!(
                "listen = \"unix:{}\"\njournal = \"{}\"\nmetrics_listen = \"127.0.0.1:0\"\n\n\
                 [targets.refunds]\nkind = \"stripe_refunds\"\ntier = 1\napi_base = \"{}\"\n",
                socket.display(),
                dir.path().join("journal.db").display(),
                api.base_url
            ),
        )
        .unwrap();
        let mut w = Self {
            dir,
            api,
            interlock,
            server: None,
        };
        w.start_server();
        w
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("gate.sock")
    }

    fn start_server(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let n = std::fs::read_dir(self.dir.path()).unwrap().count();
        let child = Command::new(&self.interlock)
            .args(["serve", "--config"])
            .arg(self.dir.path().join("serve.toml"))
            .env("STRIPE_SECRET_KEY", "sk_test_local")
            // The journal's gauges read at every scrape, so the test sees its own effects.
            .env("INTERLOCK_METRICS_REFRESH_MS", "0")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join(format!("serve-{n}.log"))).unwrap())
            .spawn()
            .unwrap();
        self.server = Some(child);
        let t0 = Instant::now();
        while !self.socket().exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the gate server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The gate server's `/metrics`, scraped at the address its log names.
    fn metrics(&self) -> String {
        let n = std::fs::read_dir(self.dir.path()).unwrap().count();
        let t0 = Instant::now();
        let url = loop {
            let logs = std::fs::read_dir(self.dir.path())
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("serve-"));
            let found = logs
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .find_map(|log| {
                    log.lines().find_map(|l| {
                        l.split("metrics at http")
                            .nth(1)
                            .map(|u| format!("http{u}"))
                    })
                });
            if let Some(url) = found {
                break url;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no metrics address in the logs ({n})"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        ureq::get(url.trim())
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    }

    fn kill_server(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill().unwrap();
            s.wait().unwrap();
        }
    }

    fn grant(&self, lease: &str) {
        let out = Command::new(&self.interlock)
            .arg("--journal")
            .arg(self.dir.path().join("journal.db"))
            .args(["lease", "grant", lease, "--approver", "ops@example.com"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    fn tool_loop(&self, payment: &str, request: &str, extra: &[&str]) -> Command {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../worker-examples/python/tool_loop.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script)
            .arg("--gate")
            .arg(format!("unix:{}", self.socket().display()))
            .args(["--payments", &self.api.base_url, "--payment", payment])
            .args(["--amount", "2000", "--request", request, "--approval"])
            .arg(format!("lease-{request}"))
            .args(extra);
        cmd
    }

    fn run(&self, payment: &str, request: &str, extra: &[&str]) -> (Output, String) {
        let out = self.tool_loop(payment, request, extra).output().unwrap();
        let transcript = String::from_utf8_lossy(&out.stdout).into_owned();
        (out, transcript)
    }

    /// The agent's refunds on a payment (those the gate sent, carrying its key), in cents.
    fn agent_refunds(&self, payment: &str) -> Vec<i64> {
        self.api
            .sim
            .refunds(payment)
            .iter()
            .filter(|r| r.metadata.contains_key("interlock_key"))
            .map(|r| r.amount)
            .collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.kill_server();
    }
}

#[test]
fn the_tool_loop_refunds_once_and_takes_the_repair_a_refusal_offers() {
    let w = World::new();
    w.api.sim.add_payment("pi_loop", 10_000);
    w.grant("lease-req-1");
    let (out, transcript) = w.run("pi_loop", "req-1", &[]);
    assert!(out.status.success(), "{out:?}");
    assert!(transcript.contains("Refunded 2000"), "{transcript}");
    // The same request again (a retry of the whole loop) is answered from the journal.
    let (out, transcript) = w.run("pi_loop", "req-1", &["--shape", "anthropic"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        transcript.contains("\\\"replayed\\\": true"),
        "{transcript}"
    );
    assert_eq!(w.agent_refunds("pi_loop"), vec![2000]);

    // A person refunds $10 by hand after the model read the order: the model's refund is
    // refused with the change and a repair, and the repaired call (a new decision) lands.
    w.api.sim.add_payment("pi_hand", 10_000);
    w.grant("lease-req-2");
    let (out, transcript) = w.run("pi_hand", "req-2", &["--hand-refund", "1000"]);
    assert!(out.status.success(), "{out:?} {transcript}");
    assert!(transcript.contains("stale_premise"), "{transcript}");
    assert!(transcript.contains("refunded_by_others"), "{transcript}");
    assert!(
        transcript.contains("req-2.2"),
        "the repaired call is the request's next effect: {transcript}"
    );
    assert_eq!(w.agent_refunds("pi_hand"), vec![2000]);
    assert_eq!(w.api.sim.refunded("pi_hand"), 3000);

    // The gate server's metrics count what it did, and the journal's effects.
    let text = w.metrics();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{series} missing from\n{text}"))
    };
    let attempts = |outcome: &str, code: &str, replayed: &str| {
        value(&format!(
            "interlock_attempts_total{{target=\"refunds\",outcome=\"{outcome}\",\
             refusal_code=\"{code}\",replayed=\"{replayed}\"}}"
        ))
    };
    assert_eq!(attempts("committed", "", "false"), 2.0, "{text}");
    assert!(attempts("committed", "", "true") >= 1.0, "{text}");
    assert_eq!(attempts("refused", "stale_premise", "false"), 1.0, "{text}");
    assert_eq!(
        value("interlock_send_duration_seconds_count{target=\"refunds\"}"),
        2.0
    );
    assert!(value("interlock_journal_append_duration_seconds_count") >= 4.0);
    assert_eq!(
        value("interlock_journal_effects{status=\"committed\"}"),
        2.0
    );
    assert_eq!(value("interlock_journal_effects{status=\"refused\"}"), 1.0);
    assert_eq!(
        value("interlock_journal_effects{status=\"in_flight\"}"),
        0.0
    );
}

#[test]
fn a_loop_killed_mid_refund_recovers_on_start_up_and_refunds_once() {
    let mut w = World::new();
    w.api.sim.add_payment("pi_kill", 10_000);
    w.grant("lease-req-k");
    // The payments API holds the refund's request before applying it; the loop and the gate
    // server are SIGKILLed there; then the request goes on and applies.
    let stall = Stall::new();
    w.api.sim.hold_next(stall.clone());
    let mut first = w
        .tool_loop("pi_kill", "req-k", &[])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !w.api.sim.held_reached() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the refund never reached the payments API"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    w.kill_server();
    stall.release();
    let t0 = Instant::now();
    while w.agent_refunds("pi_kill").is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the held refund never applied"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Started again: recovery settles the effect left in flight before the model decides.
    w.start_server();
    let (out, transcript) = w.run("pi_kill", "req-k", &[]);
    assert!(out.status.success(), "{out:?} {transcript}");
    assert!(
        transcript.contains("recovered req-k: COMMITTED"),
        "{transcript}"
    );
    assert_eq!(w.agent_refunds("pi_kill"), vec![2000], "{transcript}");
}
