//! The proxy driven frame by frame, as a hostile or hand-written client would: each line written
//! as given, each answer read back as JSON, the process at hand to SIGKILL.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use interlock::{SystemClock, Tier};
use interlock_testkit::payments_api::PaymentsApi;
use interlock_testkit::sim::SimPayments;
use serde_json::{Value, json};

/// What a proxy runs against: the payments API (tier 1, keys kept 24 h) holding `payments`, a
/// journal, the proxy's file, and its log, in a directory of their own.
pub struct RawRig {
    /// The `interlock` binary.
    pub interlock: PathBuf,
    /// The payments API.
    pub api: PaymentsApi,
    /// The journal file.
    pub journal: PathBuf,
    /// The proxy's configuration file.
    pub config: PathBuf,
    /// The proxy's stderr.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl RawRig {
    /// The rig with `payments` (id, amount in cents) and the file `config` writes for the journal
    /// it is given.
    pub fn new(
        payments: &[(&str, i64)],
        config: impl FnOnce(&Path) -> anyhow::Result<String>,
    ) -> anyhow::Result<Self> {
        let interlock = super::interlock()?;
        let dir = tempfile::tempdir()?;
        let sim = SimPayments::new(
            Tier::One,
            Duration::from_secs(86_400),
            Arc::new(SystemClock),
        );
        for (id, amount) in payments {
            sim.add_payment(id, *amount);
        }
        let api = PaymentsApi::start(sim, super::SECRET)?;
        let journal = dir.path().join("journal.db");
        let file = dir.path().join("interlock.mcp.toml");
        std::fs::write(&file, config(&journal)?)?;
        Ok(Self {
            interlock,
            api,
            journal,
            config: file,
            log: dir.path().join("proxy.log"),
            _dir: dir,
        })
    }

    /// Grant approval `lease`, good for `uses` effects, with `interlock lease grant`.
    pub fn grant(&self, lease: &str, uses: u32) -> anyhow::Result<()> {
        let out = Command::new(&self.interlock)
            .arg("--journal")
            .arg(&self.journal)
            .args(["lease", "grant", lease, "--approver", "ops@example.com"])
            .args(["--uses", &uses.to_string()])
            .output()?;
        ensure!(out.status.success(), "interlock lease grant: {out:?}");
        Ok(())
    }

    /// Start the proxy (again: the journal and the log are kept).
    pub fn start(&self) -> anyhow::Result<RawProxy> {
        RawProxy::start(&self.interlock, &self.config, &self.api.base_url, &self.log)
    }

    /// The proxy's log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `interlock mcp-proxy` in front of the example MCP server.
pub struct RawProxy {
    /// The proxy's process.
    pub child: Child,
    /// Its stdin; taken to close the client's side.
    pub stdin: Option<ChildStdin>,
    answers: Receiver<Value>,
}

impl RawProxy {
    /// Start `interlock mcp-proxy --config config -- python3 payments_server.py` with the
    /// payments API at `api_base`, the proxy's stderr in `log`.
    pub fn start(
        interlock: &Path,
        config: &Path,
        api_base: &str,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let server = super::example("payments_server.py");
        let mut child = Command::new(interlock)
            .args(["mcp-proxy", "--config"])
            .arg(config)
            .arg("--")
            .arg("python3")
            .arg(server)
            .env("STRIPE_API_BASE", api_base)
            .env("STRIPE_SECRET_KEY", super::SECRET)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)?,
            )
            .spawn()
            .context("starting interlock mcp-proxy")?;
        let stdout = child.stdout.take().context("the proxy's stdout")?;
        let (tx, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line)
                    .unwrap_or_else(|e| json!({"not_json": line, "why": e.to_string()}));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            stdin: child.stdin.take(),
            child,
            answers,
        })
    }

    /// Write one line as given.
    pub fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("the client's side is closed")?;
        stdin.write_all(bytes)?;
        stdin.write_all(b"\n")?;
        Ok(stdin.flush()?)
    }

    /// Write one message.
    pub fn send(&mut self, v: &Value) -> anyhow::Result<()> {
        self.write(v.to_string().as_bytes())
    }

    /// The next answer, within 30 s.
    pub fn next(&self) -> anyhow::Result<Value> {
        match self.answers.recv_timeout(Duration::from_secs(30)) {
            Ok(v) if v.get("not_json").is_some() => {
                bail!("the proxy wrote a line that is not JSON: {v}")
            }
            Ok(v) => Ok(v),
            Err(RecvTimeoutError::Timeout) => bail!("the proxy did not answer in 30 s"),
            Err(RecvTimeoutError::Disconnected) => bail!("the proxy closed its output"),
        }
    }

    /// MCP's handshake, as a client does it.
    pub fn handshake(&mut self) -> anyhow::Result<Value> {
        self.send(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        )?;
        let init = self.next()?;
        if init["id"] != "init" || !init["result"]["serverInfo"].is_object() {
            bail!("not the handshake's answer: {init}");
        }
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(init)
    }

    /// A `tools/call` and its answer (the next message, which must carry `id`).
    pub fn call(&mut self, id: &str, tool: &str, arguments: Value) -> anyhow::Result<Value> {
        self.send(&call(json!(id), tool, arguments))?;
        let answer = self.next()?;
        if answer["id"] != id {
            bail!("an answer to another request: {answer}");
        }
        Ok(answer)
    }
}

impl Drop for RawProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `tools/call` request.
pub fn call(id: Value, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}
