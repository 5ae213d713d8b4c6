//! The MCP server the proxy stands in front of: a child process spoken to over its stdin and
//! stdout, one JSON message per line. Every request it sees carries an id the proxy chose, so the
//! proxy's own requests (premise reads, lookups, the gated sends) and the client's share one id
//! space that no client can reach into. When the server goes away, every request of the proxy's
//! own still waiting learns it at once and nothing is guessed about it: a gated send cut off that
//! way is left in flight for the recovery at the next start.

use std::collections::HashMap;
use std::io::Write as _;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use crate::frame::Ids;

/// Why a request of the proxy's own got no answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The server exited or closed its output.
    #[error("the MCP server is gone: {0}")]
    Gone(String),
    /// No answer in time.
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

/// The server's side of the proxy.
pub struct Upstream {
    stdin: Mutex<Option<ChildStdin>>,
    routes: Mutex<Routes>,
    child: Mutex<Child>,
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
        Ok((
            Self {
                stdin: Mutex::new(Some(stdin)),
                routes: Mutex::default(),
                child: Mutex::new(child),
            },
            stdout,
        ))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        lock(&self.child).id()
    }

    fn write(&self, message: &Value) -> Result<(), UpstreamError> {
        let mut line = serde_json::to_vec(message)
            .map_err(|e| UpstreamError::Write(std::io::Error::other(e)))?;
        line.push(b'\n');
        let mut stdin = lock(&self.stdin);
        let Some(pipe) = stdin.as_mut() else {
            return Err(UpstreamError::Gone("its input was closed".into()));
        };
        pipe.write_all(&line)
            .and_then(|()| pipe.flush())
            .map_err(UpstreamError::Write)
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
        self.write(&message)
    }

    /// Forward a message as it came (a notification, an answer to the server's request).
    pub fn forward(&self, message: &Value) -> Result<(), UpstreamError> {
        self.write(message)
    }

    /// Forward a client's cancellation of a request passed through, under the id the server
    /// saw; one for a request the server never saw (already answered) is dropped.
    pub fn cancel(&self, client_id: &Value, mut message: Value) -> Result<(), UpstreamError> {
        let upstream = lock(&self.routes).ids.upstream_of(client_id);
        match upstream {
            Some(u) => {
                message["params"]["requestId"] = json!(u);
                self.write(&message)
            }
            None => Ok(()),
        }
    }

    /// A request of the proxy's own: its answer (the whole response, `result` or `error`), or
    /// why there is none.
    pub fn call(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, UpstreamError> {
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
        let sent =
            self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if let Err(e) = sent {
            lock(&self.routes).own.remove(&id);
            return Err(e);
        }
        match rx.recv_timeout(timeout) {
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
    /// new one is sent, and the server is killed (it may still be working on a call, which must
    /// not land later; its output then closes, and the proxy ends).
    pub fn gone(&self, why: String) {
        {
            let mut routes = lock(&self.routes);
            routes.gone.get_or_insert(why);
            routes.own.clear();
        }
        let _ = lock(&self.child).kill();
    }

    /// Close the server's input (it should exit, as MCP's stdio transport says) and wait up to
    /// `grace` for it, then kill it. Returns how it ended.
    pub fn shut_down(&self, grace: Duration) -> String {
        lock(&self.stdin).take();
        let deadline = std::time::Instant::now() + grace;
        let mut child = lock(&self.child);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => {
                    let _ = child.kill();
                    return child
                        .wait()
                        .map_or_else(|e| e.to_string(), |s| format!("killed ({s})"));
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
