//! The MCP matrix: an agent's refunds through a real MCP client, a real MCP server (the Python
//! payments server, on PyPI package `mcp`) and the payments API, each case judged by the payments
//! API's own records. Three ways to reach the server side by side: straight to it, straight to it
//! with an idempotency key the client derives from the request, and through `interlock
//! mcp-proxy`. Crashes are real: the proxy or the server SIGKILLed while the server holds the
//! refund before or after it reached the payments API, then the client reconnecting (a new
//! process) and repeating the call.

pub mod client;
pub mod raw;
mod report;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use interlock::{SystemClock, Tier};
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use rmcp::model::CallToolResult;
use serde::Serialize;
use serde_json::{Value, json};

pub use report::{markdown, to_json};

use client::{Client, kill9};

/// The payments API's secret in the rig.
/// The payments API's secret key in these rigs.
pub const SECRET: &str = "sk_test_local";
/// Every payment in the matrix, in cents.
const PAID: i64 = 5000;
/// The refund the agent decides on, in the cases where the payment is not fully refunded.
const REFUND: i64 = 2000;
/// The proxy's send timeout in the case that stalls past it.
const SHORT_SEND_TIMEOUT_MS: u64 = 1500;

/// How the agent reaches the payments server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// Straight to the server.
    Plain,
    /// Straight to the server, with an idempotency key derived from the request.
    IdempotencyKey,
    /// Through `interlock mcp-proxy`.
    Gated,
}

impl System {
    /// Every system, in the report's order.
    pub const ALL: [System; 3] = [System::Plain, System::IdempotencyKey, System::Gated];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            System::Plain => "plain",
            System::IdempotencyKey => "idempotency_key",
            System::Gated => "gated",
        }
    }
}

/// What happens around one refund.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    /// One call.
    FirstCall,
    /// The same call twice.
    DuplicateCall,
    /// The agent read the order, then a person refunded part of it by hand, then the agent's
    /// full refund was called.
    HandRefundBeforeCall,
    /// The approval was revoked after the agent decided.
    ApprovalRevoked,
    /// The process the client talks to SIGKILLed while the server holds the refund before it
    /// reached the payments API; the client reconnects and repeats.
    KilledBeforeSend,
    /// The same, after the payments API made the refund and before the answer.
    KilledAfterSend,
    /// The MCP server SIGKILLed after the payments API made the refund; the client reconnects
    /// and repeats.
    ServerKilledMidCall,
    /// The client cancels the call while it is held before the refund is sent.
    CancelledBeforeSend,
    /// The server holds the call before the refund past the proxy's send timeout (1.5 s here):
    /// the proxy stops the server and leaves the call in flight; the client reconnects and
    /// repeats. Through the proxy only.
    StallsPastSendTimeout,
}

impl Case {
    /// Every case, in the report's order.
    pub const ALL: [Case; 9] = [
        Case::FirstCall,
        Case::DuplicateCall,
        Case::HandRefundBeforeCall,
        Case::ApprovalRevoked,
        Case::KilledBeforeSend,
        Case::KilledAfterSend,
        Case::ServerKilledMidCall,
        Case::CancelledBeforeSend,
        Case::StallsPastSendTimeout,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Case::FirstCall => "first_call",
            Case::DuplicateCall => "duplicate_call",
            Case::HandRefundBeforeCall => "hand_refund_before_call",
            Case::ApprovalRevoked => "approval_revoked",
            Case::KilledBeforeSend => "killed_before_send",
            Case::KilledAfterSend => "killed_after_send",
            Case::ServerKilledMidCall => "server_killed_mid_call",
            Case::CancelledBeforeSend => "cancelled_before_send",
            Case::StallsPastSendTimeout => "stalls_past_send_timeout",
        }
    }

    /// What must hold, in words.
    pub fn expected(self) -> &'static str {
        match self {
            Case::FirstCall | Case::DuplicateCall => "one refund of $20",
            Case::HandRefundBeforeCall => {
                "no refund on the stale decision; the repaired refund of $30 (what was left)"
            }
            Case::ApprovalRevoked | Case::CancelledBeforeSend => "no refund",
            Case::KilledBeforeSend
            | Case::KilledAfterSend
            | Case::ServerKilledMidCall
            | Case::StallsPastSendTimeout => "one refund of $20 after the reconnect",
        }
    }

    /// The agent's refunds (in cents) that make the case hold.
    fn holds_with(self) -> Vec<i64> {
        match self {
            Case::ApprovalRevoked | Case::CancelledBeforeSend => vec![],
            Case::HandRefundBeforeCall => vec![PAID - 2000],
            _ => vec![REFUND],
        }
    }

    /// Whether the case applies to `system` (a send timeout is the proxy's).
    pub fn applies_to(self, system: System) -> bool {
        self != Case::StallsPastSendTimeout || system == System::Gated
    }
}

/// One cell: a system through a case.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// The system.
    pub system: System,
    /// The case.
    pub case: Case,
    /// Whether it held.
    pub held: bool,
    /// The agent's refunds at the payments API, in cents.
    pub refunds: Vec<i64>,
    /// What the agent heard, in order (the gate's outcome, or the server's answer).
    pub answer: String,
    /// Why it did not hold, or what else was seen.
    pub note: String,
    /// Seconds the cell took (not in the markdown: it varies).
    pub seconds: f64,
}

/// The world the cells run in: the payments API in this process, the journal and the proxy's
/// configuration in a directory of their own.
pub struct Rig {
    _dir: tempfile::TempDir,
    api: PaymentsApi,
    interlock: PathBuf,
    server: PathBuf,
    config: PathBuf,
    /// The same configuration with a short send timeout.
    slow_config: PathBuf,
    journal: PathBuf,
    holds: PathBuf,
    logs: PathBuf,
}

/// The `interlock` binary beside the running one (the CLI, which runs the proxy).
pub fn interlock() -> anyhow::Result<PathBuf> {
    crate::stack::sibling("interlock")
}

/// The configuration shipped beside the example server, with `journal` as its journal.
pub fn example_config(journal: &Path) -> anyhow::Result<String> {
    let shipped = std::fs::read_to_string(example("interlock.mcp.toml"))?;
    if shipped.lines().any(|l| l.starts_with("journal")) {
        bail!(
            "worker-examples/mcp/interlock.mcp.toml names a journal; the README's steps expect none"
        );
    }
    Ok(format!(
        "journal = {:?}\n{shipped}",
        journal.display().to_string()
    ))
}

/// The repository's example MCP server and its proxy configuration.
pub fn example(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../worker-examples/mcp")
        .join(file)
}

impl Rig {
    /// A rig whose proxy is `interlock` (the CLI binary).
    pub fn new(interlock: &Path) -> anyhow::Result<Self> {
        if !interlock.exists() {
            bail!(
                "no interlock binary at {}: build it with `cargo build -p interlock-cli`",
                interlock.display()
            );
        }
        let dir = tempfile::tempdir()?;
        let sim = SimPayments::new(
            Tier::One,
            Duration::from_secs(24 * 3600),
            Arc::new(SystemClock),
        );
        let api = PaymentsApi::start(sim, SECRET)?;
        let journal = dir.path().join("journal.db");
        let config = dir.path().join("interlock.mcp.toml");
        std::fs::write(&config, example_config(&journal)?)?;
        let slow_config = dir.path().join("interlock.mcp.short-timeout.toml");
        std::fs::write(
            &slow_config,
            format!(
                "send_timeout_ms = {SHORT_SEND_TIMEOUT_MS}\n{}",
                example_config(&journal)?
            ),
        )?;
        let holds = dir.path().join("holds");
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&holds)?;
        std::fs::create_dir_all(&logs)?;
        Ok(Self {
            _dir: dir,
            api,
            interlock: interlock.to_owned(),
            server: example("payments_server.py"),
            config,
            slow_config,
            journal,
            holds,
            logs,
        })
    }

    /// Where the processes' stderr goes.
    pub fn logs(&self) -> &Path {
        &self.logs
    }

    async fn connect(&self, system: System, log: &Path) -> anyhow::Result<Client> {
        self.connect_with(system, log, &self.config).await
    }

    async fn connect_with(
        &self,
        system: System,
        log: &Path,
        config: &Path,
    ) -> anyhow::Result<Client> {
        let env = vec![
            ("STRIPE_API_BASE".to_owned(), self.api.base_url.clone()),
            ("STRIPE_SECRET_KEY".to_owned(), SECRET.to_owned()),
            (
                "MCP_PAYMENTS_HOLD_DIR".to_owned(),
                self.holds.display().to_string(),
            ),
        ];
        let server = self.server.display().to_string();
        match system {
            System::Gated => {
                let args = [
                    "mcp-proxy",
                    "--config",
                    &config.display().to_string(),
                    "--",
                    "python3",
                    &server,
                ]
                .map(str::to_owned);
                Client::connect(&self.interlock, &args, &env, log).await
            }
            _ => Client::connect(Path::new("python3"), &[server], &env, log).await,
        }
    }

    fn interlock(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = std::process::Command::new(&self.interlock)
            .arg("--journal")
            .arg(&self.journal)
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "interlock {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    fn hold(&self, point: &str) -> anyhow::Result<()> {
        let _ = std::fs::remove_file(self.holds.join(format!("at_{point}")));
        std::fs::write(self.holds.join(format!("hold_{point}")), b"")?;
        Ok(())
    }

    fn release(&self, point: &str) {
        let _ = std::fs::remove_file(self.holds.join(format!("hold_{point}")));
    }

    /// Wait until the server holds at `point`; its process id.
    async fn wait_at(&self, point: &str) -> anyhow::Result<u32> {
        let at = self.holds.join(format!("at_{point}"));
        let t0 = Instant::now();
        loop {
            if let Some(pid) = std::fs::read_to_string(&at)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return Ok(pid);
            }
            if t0.elapsed() > Duration::from_secs(30) {
                bail!("the server never held at {point}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The refunds the agent made on `payment_intent` (those carrying its request id), in
    /// cents, as the payments API records them.
    fn agent_refunds(&self, payment_intent: &str) -> Vec<i64> {
        self.api
            .sim
            .refunds(payment_intent)
            .iter()
            .filter(|r| r.metadata.contains_key("request_id"))
            .map(|r| r.amount)
            .collect()
    }

    /// Run one cell.
    pub async fn run(&self, system: System, case: Case) -> anyhow::Result<Cell> {
        let t0 = Instant::now();
        let name = format!("{}-{}", system.name(), case.name());
        let pi = format!("pi_{}", name.replace('-', "_"));
        let lease = format!("lease-{name}");
        self.api.sim.add_payment(&pi, PAID);
        self.interlock(&["lease", "grant", &lease, "--approver", "ops@example.com"])?;
        let log = self.logs.join(format!("{name}.log"));
        let agent = Agent {
            system,
            payment_intent: pi.clone(),
            request: format!("req-{name}"),
            lease: lease.clone(),
        };
        let mut checks = Vec::new();
        let mut said = Vec::new();
        let client = self.connect(system, &log).await?;
        // The agent reads the order first: its refund is decided on what it read.
        let read = client
            .call("get_order", &json!({"payment_intent": pi}))
            .await?;
        if read
            .structured_content
            .as_ref()
            .and_then(|v| v.get("refundable"))
            != Some(&json!(PAID))
        {
            bail!("get_order answered {read:?}");
        }
        let last = match case {
            Case::FirstCall => {
                let a = client.call("create_refund", &agent.refund(REFUND)).await?;
                checks.push(receipt_on_commit(system, &a));
                a
            }
            Case::DuplicateCall => {
                client.call("create_refund", &agent.refund(REFUND)).await?;
                client.call("create_refund", &agent.refund(REFUND)).await?
            }
            Case::HandRefundBeforeCall => {
                self.api.sim.hand_refund(&pi, 2000);
                let first = client.call("create_refund", &agent.refund(PAID)).await?;
                said.push(heard(&first));
                match repair_of(&first) {
                    // The agent takes the repair the refusal offered: a new decision.
                    Some(repaired) => client.call("create_refund", &repaired).await?,
                    None => {
                        said.pop();
                        if system == System::Gated {
                            checks.push(Err("the refusal offered no repair".into()));
                        }
                        first
                    }
                }
            }
            Case::ApprovalRevoked => {
                self.interlock(&["lease", "revoke", &lease])?;
                client.call("create_refund", &agent.refund(REFUND)).await?
            }
            Case::KilledBeforeSend | Case::KilledAfterSend | Case::ServerKilledMidCall => {
                let point = if case == Case::KilledBeforeSend {
                    "before_send"
                } else {
                    "after_send"
                };
                self.hold(point)?;
                let pending = client.start("create_refund", &agent.refund(REFUND)).await?;
                let server_pid = self.wait_at(point).await?;
                let victim = if case == Case::ServerKilledMidCall {
                    server_pid
                } else {
                    client.pid()
                };
                kill9(victim);
                self.release(point);
                // What the first connection heard: nothing, or that the connection closed.
                match tokio::time::timeout(Duration::from_secs(5), pending.answer()).await {
                    Ok(Ok(a)) => {
                        said.push(heard(&a));
                        checks.push(Err(format!("the call was answered: {}", heard(&a))));
                    }
                    _ => said.push("connection lost".into()),
                }
                kill9(client.pid());
                client.close().await;
                if system == System::Gated {
                    checks.push(self.left_in_flight(&agent.request));
                    // The server dies with the proxy (it is started under a parent-death
                    // signal): nothing it was holding can land after the proxy gave it up.
                    checks.push(gone_within(server_pid, Duration::from_secs(5)).await);
                }
                kill9(server_pid);
                let again = self.connect(system, &log).await?;
                let a = again.call("create_refund", &agent.refund(REFUND)).await?;
                again.close().await;
                said.push(heard(&a));
                return Ok(self.cell(system, case, &agent, said, checks, t0));
            }
            Case::StallsPastSendTimeout => {
                // This cell's connection goes through a proxy with the short send timeout.
                client.close().await;
                let client = self.connect_with(system, &log, &self.slow_config).await?;
                client
                    .call("get_order", &json!({"payment_intent": pi}))
                    .await?;
                self.hold("before_send")?;
                let pending = client.start("create_refund", &agent.refund(REFUND)).await?;
                let server_pid = self.wait_at("before_send").await?;
                // Past the send timeout the proxy stops the server and ends: the call is cut off.
                match tokio::time::timeout(Duration::from_secs(20), pending.answer()).await {
                    Ok(Ok(a)) => checks.push(Err(format!("the call was answered: {}", heard(&a)))),
                    Ok(Err(_)) => said.push("connection lost".into()),
                    Err(_) => checks.push(Err("the proxy never gave up on the call".into())),
                }
                checks.push(self.left_in_flight(&agent.request));
                checks.push(gone_within(server_pid, Duration::from_secs(5)).await);
                self.release("before_send");
                // Nothing the stopped server held may land now.
                tokio::time::sleep(Duration::from_millis(500)).await;
                if !self.agent_refunds(&pi).is_empty() {
                    checks.push(Err(
                        "a refund landed after the proxy gave the call up".into()
                    ));
                }
                client.close().await;
                let again = self.connect(system, &log).await?;
                let a = again.call("create_refund", &agent.refund(REFUND)).await?;
                again.close().await;
                said.push(heard(&a));
                return Ok(self.cell(system, case, &agent, said, checks, t0));
            }
            Case::CancelledBeforeSend => {
                // Gated, the hold is the proxy's premise read before the send; straight to the
                // server, the tool's own start.
                let point = if system == System::Gated {
                    "read"
                } else {
                    "before_send"
                };
                self.hold(point)?;
                let pending = client.start("create_refund", &agent.refund(REFUND)).await?;
                self.wait_at(point).await?;
                pending.cancel().await?;
                self.release(point);
                tokio::time::sleep(Duration::from_millis(500)).await;
                CallToolResult::success(vec![])
            }
        };
        client.close().await;
        said.push(heard(&last));
        Ok(self.cell(system, case, &agent, said, checks, t0))
    }

    /// Through the proxy, a call cut off by a kill is in flight in the journal (for the
    /// recovery at the next start), never resolved as failed.
    fn left_in_flight(&self, request: &str) -> Result<(), String> {
        let journal =
            interlock::SqliteJournal::open_read_only(&self.journal, Arc::new(SystemClock))
                .map_err(|e| e.to_string())?;
        let key = interlock::EffectKey::fixed(format!("mcp:create_refund:{request}"))
            .map_err(|e| e.to_string())?;
        match interlock::Journal::state(&journal, &key).map_err(|e| e.to_string())? {
            interlock::core::EffectState::InFlight { .. } => Ok(()),
            other => Err(format!(
                "after the kill the journal holds {}, not in flight",
                other.status().map_or("nothing", |s| s.label())
            )),
        }
    }

    /// Judge a cell by the payments API's records (and, through the proxy, by what the agent
    /// was told: a receipt on a commit, a repair on a refusal).
    fn cell(
        &self,
        system: System,
        case: Case,
        agent: &Agent,
        said: Vec<String>,
        checks: Vec<Result<(), String>>,
        t0: Instant,
    ) -> Cell {
        let refunds = self.agent_refunds(&agent.payment_intent);
        let mut notes: Vec<String> = checks.into_iter().filter_map(Result::err).collect();
        let want = case.holds_with();
        if refunds != want {
            notes.insert(
                0,
                format!("the payments API holds refunds {refunds:?}, not {want:?}"),
            );
        }
        Cell {
            system,
            case,
            held: notes.is_empty(),
            refunds,
            answer: said.join(" → "),
            note: notes.join("; "),
            seconds: t0.elapsed().as_secs_f64(),
        }
    }
}

/// Whether process `pid` ended within `limit`.
async fn gone_within(pid: u32, limit: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid) {
        if t0.elapsed() > limit {
            return Err(format!("the server (pid {pid}) outlived the killed proxy"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// A process that ended and waits to be reaped.
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

/// The agent's side of one cell.
struct Agent {
    system: System,
    payment_intent: String,
    request: String,
    lease: String,
}

impl Agent {
    fn refund(&self, amount: i64) -> Value {
        let mut args = json!({
            "payment_intent": self.payment_intent,
            "amount": amount,
            "request_id": self.request,
            "approval": self.lease,
        });
        if self.system == System::IdempotencyKey {
            args["idempotency_key"] = json!(format!("refund-{}", self.request));
        }
        args
    }
}

/// The gate's outcome in an answer's `_meta`.
fn outcome(a: &CallToolResult) -> Option<&Value> {
    a.meta.as_ref()?.0.get(interlock_mcp_meta::OUTCOME)
}

/// The repaired call a refusal offers, if any.
fn repair_of(a: &CallToolResult) -> Option<Value> {
    outcome(a)?
        .get("repairs")?
        .as_array()?
        .first()?
        .get("payload")
        .cloned()
}

fn receipt_on_commit(system: System, a: &CallToolResult) -> Result<(), String> {
    if system != System::Gated {
        return Ok(());
    }
    match a
        .meta
        .as_ref()
        .and_then(|m| m.0.get(interlock_mcp_meta::RECEIPT))
    {
        Some(r) if r.get("key").is_some() => Ok(()),
        _ => Err("the committed answer carries no receipt".into()),
    }
}

/// What the agent heard, in a few words.
fn heard(a: &CallToolResult) -> String {
    if let Some(label) = outcome(a)
        .and_then(|o| o.get("label"))
        .and_then(Value::as_str)
    {
        return label.to_owned();
    }
    if a.content.is_empty() && a.structured_content.is_none() {
        return "no answer (cancelled)".into();
    }
    if a.is_error == Some(true) {
        let code = a
            .structured_content
            .as_ref()
            .and_then(|s| {
                s.pointer("/error/code")
                    .or_else(|| s.pointer("/error/type"))
            })
            .and_then(Value::as_str)
            .unwrap_or("error");
        return format!("tool error ({code})");
    }
    "refund made".into()
}

/// The `_meta` keys the proxy writes (kept here as text: the harness reads the wire).
mod interlock_mcp_meta {
    pub(super) const OUTCOME: &str = "interlock/outcome";
    pub(super) const RECEIPT: &str = "interlock/receipt";
}

/// Run the cells in order, printing each as it ends.
pub async fn run_all(rig: &Rig, systems: &[System], cases: &[Case]) -> anyhow::Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for &case in cases {
        for &system in systems.iter().filter(|s| case.applies_to(**s)) {
            let cell = rig
                .run(system, case)
                .await
                .with_context(|| format!("cell {} / {}", system.name(), case.name()))?;
            eprintln!(
                "[mcp-matrix] {:<16} {:<24} {:<5} refunds {:?}  {} ({:.1} s)",
                system.name(),
                case.name(),
                if cell.held { "held" } else { "BROKE" },
                cell.refunds,
                cell.answer,
                cell.seconds
            );
            cells.push(cell);
        }
    }
    Ok(cells)
}
