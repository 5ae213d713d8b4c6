//! The MCP server the proxy stands in front of: a child process spoken to over its stdin and
//! stdout, one JSON message per line. Every request it sees carries an id the proxy chose, so the
//! proxy's own requests (premise reads, lookups, the gated sends) and the client's share one id
//! space that no client can reach into. When the server goes away, every request of the proxy's
//! own still waiting learns it at once and nothing is guessed about it: a gated send cut off that
//! way is left in flight for the recovery at the next start.
//!
//! Writes go through one writer thread, so a server that stops reading holds up no caller: a
//! gated send that cannot even be written before its deadline is given up like one that got no
//! answer, and the server is stopped — with every process it started (its process group), so a
//! call it still holds cannot land later.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::frame::Ids;

/// Why a request of the proxy's own got no answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The server exited or closed its output.
    #[error("the MCP server is gone: {0}")]
    Gone(String),
    /// No answer in time (or the request could not even be written in time).
    #[error("the MCP server did not answer {method} within {ms} ms")]
    Timeout {
        /// The request's method.
        method: String,
        /// How long the proxy waited.
        ms: u128,
    },
    /// The request could not be written to the server.
    #[error("writing to the MCP server failed: {0}")]
    Write(std::io::Error),
}

/// Where the server's answer to one request goes.
#[derive(Default)]
struct Routes {
    ids: Ids,
    own: HashMap<u64, SyncSender<Value>>,
    gone: Option<String>,
}

/// A line for the server, and who waits to hear it was written.
struct Line {
    bytes: Vec<u8>,
    written: Option<SyncSender<std::io::Result<()>>>,
}

/// What to do once the server is gone.
type OnGone = Box<dyn Fn(&str) + Send>;

/// The server's side of the proxy.
pub struct Upstream {
    writer: Mutex<Option<Sender<Line>>>,
    routes: Mutex<Routes>,
    child: Mutex<Child>,
    /// The server's process group (its own pid): every process it started.
    group: u32,
    on_gone: Mutex<Option<OnGone>>,
    /// Gated calls whose threads wait for the proxy to end (their effect left in flight).
    parked: AtomicUsize,
}

/// What one message from the server is for.
#[derive(Debug, PartialEq)]
pub enum Routed {
    /// For the client, with the client's own id restored where it answers a client's request.
    ToClient(Value),
    /// An answer to a request of the proxy's own, handed to whoever waits for it.
    Own,
}

/// util-linux's `setpriv`, if it is on PATH.
fn setpriv() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join("setpriv"))
        .find(|p| p.is_file())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Upstream {
    /// Start the server: `command[0]` with the rest as its arguments, its stderr the proxy's.
    /// Returns its stdout, for the one thread that reads it.
    ///
    /// The server must not outlive the proxy: a call it is still working on would land after the
    /// proxy's journal gave it up, where no claim covers it. On Linux the server is started
    /// through util-linux's `setpriv --pdeathsig KILL`, so the kernel kills it when the thread
    /// that started it (the proxy's main thread, which lives as long as the proxy) ends, SIGKILL
    /// included. Without `setpriv` a warning says the guarantee is missing.
    pub fn spawn(command: &[String]) -> std::io::Result<(Self, ChildStdout)> {
        let Some((program, args)) = command.split_first() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no MCP server command: give it after `--`",
            ));
        };
        let mut cmd = match setpriv() {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(program);
                c
            }
            None => {
                tracing::warn!(
                    "setpriv (util-linux) is not on PATH: the MCP server is not killed with the \
                     proxy, so a call it is working on when the proxy dies could land late"
                );
                Command::new(program)
            }
        };
        let mut child = cmd
            .args(args)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("starting the MCP server {program:?}: {e}"),
                )
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other(
                "the MCP server's pipes were not opened",
            ));
        };
        let (writer, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name("mcp-server-writer".into())
            .spawn(move || write_lines(stdin, &lines))?;
        let group = child.id();
        Ok((
            Self {
                writer: Mutex::new(Some(writer)),
                routes: Mutex::default(),
                child: Mutex::new(child),
                group,
                on_gone: Mutex::new(None),
                parked: AtomicUsize::new(0),
            },
            stdout,
        ))
    }

    /// Call `f` with the reason once the server is gone (the proxy ends then).
    pub fn on_gone(&self, f: OnGone) {
        *lock(&self.on_gone) = Some(f);
    }

    /// A gated call's thread will wait for the proxy to end, its effect left in flight.
    pub fn park(&self) {
        self.parked.fetch_add(1, Ordering::SeqCst);
    }

    /// How many gated calls wait for the proxy to end.
    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Write a message; with a `deadline`, wait until it was written (or give up then).
    fn write(&self, message: &Value, deadline: Option<Instant>) -> Result<(), UpstreamError> {
        let mut bytes = serde_json::to_vec(message)
            .map_err(|e| UpstreamError::Write(std::io::Error::other(e)))?;
        bytes.push(b'\n');
        let (written, heard) = match deadline {
            Some(_) => {
                let (tx, rx) = mpsc::sync_channel(1);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let queued = lock(&self.writer)
            .as_ref()
            .is_some_and(|w| w.send(Line { bytes, written }).is_ok());
        if !queued {
            return Err(UpstreamError::Gone("its input was closed".into()));
        }
        let (Some(heard), Some(deadline)) = (heard, deadline) else {
            return Ok(());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match heard.recv_timeout(left) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(UpstreamError::Write(e)),
            Err(RecvTimeoutError::Timeout) => Err(UpstreamError::Timeout {
                method: "a write".into(),
                ms: left.as_millis(),
            }),
            Err(RecvTimeoutError::Disconnected) => {
                Err(UpstreamError::Gone("its input was closed".into()))
            }
        }
    }

    /// Forward a client's request, or a batch of messages, each request's id replaced by one of
    /// the proxy's (the client's is restored on its answer).
    pub fn forward_requests(&self, mut message: Value) -> Result<(), UpstreamError> {
        {
            let mut routes = lock(&self.routes);
            let mut rewrite = |m: &mut Value| {
                if let Some(id) = m.get("id").cloned()
                    && m.get("method").is_some()
                {
                    m["id"] = json!(routes.ids.issue(Some(id)));
                }
            };
            match &mut message {
                Value::Array(items) => items.iter_mut().for_each(&mut rewrite),
                m => rewrite(m),
            }
        }
        self.write(&message, None)
    }

    /// Forward a message as it came (a notification, an answer to the server's request).
    pub fn forward(&self, message: &Value) -> Result<(), UpstreamError> {
        self.write(message, None)
    }

    /// Forward a client's cancellation of a request passed through, under the id the server
    /// saw; one for a request the server never saw (already answered) is dropped.
    pub fn cancel(&self, client_id: &Value, mut message: Value) -> Result<(), UpstreamError> {
        let upstream = lock(&self.routes).ids.upstream_of(client_id);
        match upstream {
            Some(u) => {
                message["params"]["requestId"] = json!(u);
                self.write(&message, None)
            }
            None => Ok(()),
        }
    }

    /// A request of the proxy's own: its answer (the whole response, `result` or `error`), or
    /// why there is none. `timeout` covers writing the request and its answer.
    pub fn call(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, UpstreamError> {
        let deadline = Instant::now() + timeout;
        let (tx, rx) = mpsc::sync_channel(1);
        let id = {
            let mut routes = lock(&self.routes);
            if let Some(why) = &routes.gone {
                return Err(UpstreamError::Gone(why.clone()));
            }
            let id = routes.ids.issue(None);
            routes.own.insert(id, tx);
            id
        };
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = self.write(&request, Some(deadline)) {
            lock(&self.routes).own.remove(&id);
            return Err(e);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(answer) => Ok(answer),
            Err(RecvTimeoutError::Timeout) => {
                lock(&self.routes).own.remove(&id);
                // An answer that arrived as the wait ran out is still the answer.
                if let Ok(answer) = rx.try_recv() {
                    return Ok(answer);
                }
                Err(UpstreamError::Timeout {
                    method: method.to_owned(),
                    ms: timeout.as_millis(),
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(UpstreamError::Gone(
                lock(&self.routes)
                    .gone
                    .clone()
                    .unwrap_or_else(|| "its output closed".into()),
            )),
        }
    }

    /// Route one message from the server.
    pub fn route(&self, mut message: Value) -> Routed {
        let is_answer = message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some());
        let Some(id) = message
            .get("id")
            .and_then(Value::as_u64)
            .filter(|_| is_answer)
        else {
            // The server's own requests and notifications go to the client as they are.
            return Routed::ToClient(message);
        };
        let mut routes = lock(&self.routes);
        if let Some(waiter) = routes.own.remove(&id) {
            // The waiter may have timed out and gone: then no one wants the answer.
            let _ = waiter.try_send(message);
            return Routed::Own;
        }
        match routes.ids.answered(id) {
            Some(client_id) => {
                message["id"] = client_id;
                Routed::ToClient(message)
            }
            // An answer to nothing under way (a late answer to a timed-out read): dropped.
            None => Routed::Own,
        }
    }

    /// The server is done with: every request of the proxy's own still waiting learns it, no
    /// new one is sent, and the server is killed with every process it started (it may still be
    /// working on a call, which must not land later); the proxy is told, and ends.
    pub fn gone(&self, why: String) {
        let first = {
            let mut routes = lock(&self.routes);
            let first = routes.gone.is_none();
            routes.gone.get_or_insert(why.clone());
            routes.own.clear();
            first
        };
        self.kill_group();
        if first && let Some(f) = lock(&self.on_gone).as_ref() {
            f(&why);
        }
    }

    /// SIGKILL the server's process group (the server and whatever it started).
    fn kill_group(&self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.group)])
            .stderr(Stdio::null())
            .status();
        let _ = lock(&self.child).kill();
    }

    /// Close the server's input (it should exit, as MCP's stdio transport says) and wait up to
    /// `grace` for it, then kill it with its process group. Returns how it ended.
    pub fn shut_down(&self, grace: Duration) -> String {
        lock(&self.writer).take();
        let deadline = Instant::now() + grace;
        loop {
            match lock(&self.child).try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => {
                    self.kill_group();
                    return format!("killed after {} ms", grace.as_millis());
                }
                Err(e) => return e.to_string(),
            }
        }
    }

    /// How the server ended, once it has (waits for it without holding it, so `gone` can
    /// always kill it meanwhile).
    pub fn exit_status(&self) -> String {
        loop {
            match lock(&self.child).try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) => {}
                Err(e) => return e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The writer thread: each line in order, each writer told how it went. Ends when the proxy
/// closes the server's input (dropping the channel), which the server sees as its end of input.
fn write_lines(mut stdin: ChildStdin, lines: &mpsc::Receiver<Line>) {
    for line in lines {
        let done = stdin.write_all(&line.bytes).and_then(|()| stdin.flush());
        if let Err(e) = &done {
            tracing::warn!(%e, "writing to the MCP server failed");
        }
        if let Some(w) = line.written {
            let _ = w.send(done);
        }
    }
}
