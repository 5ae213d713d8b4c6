//! The agent's side: a real MCP client (rmcp's) that starts the server command it is given — the
//! payments server itself, or `interlock mcp-proxy` in front of it — as its child, over stdio, as
//! an agent's MCP host does.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestHandle, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::process::Command;

/// How long one call may take before the case fails.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A connected client.
pub struct Client {
    service: RunningService<RoleClient, ()>,
    pid: u32,
}

/// A call under way, which may be cancelled.
pub struct Pending(RequestHandle<RoleClient>);

fn params(tool: &str, args: &Value) -> anyhow::Result<CallToolRequestParams> {
    let Value::Object(a) = args else {
        bail!("a tool's arguments must be an object");
    };
    let mut p = CallToolRequestParams::new(tool.to_owned());
    p.arguments = Some(a.clone());
    Ok(p)
}

impl Client {
    /// Start `program args…` with `env`, its stderr appended to `log`, and do MCP's handshake.
    pub async fn connect(
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let pid = transport.id().context("the server's process id")?;
        let service = tokio::time::timeout(CALL_TIMEOUT, ().serve(transport))
            .await
            .context("the MCP handshake timed out")?
            .context("the MCP handshake")?;
        Ok(Self { service, pid })
    }

    /// The process the client started (the proxy, or the server itself).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Call a tool and wait for its answer.
    pub async fn call(&self, tool: &str, args: &Value) -> anyhow::Result<CallToolResult> {
        let call = self.service.peer().call_tool(params(tool, args)?);
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .with_context(|| format!("{tool} did not answer in {CALL_TIMEOUT:?}"))?
            .with_context(|| format!("calling {tool}"))
    }

    /// Start a call that may be cancelled.
    pub async fn start(&self, tool: &str, args: &Value) -> anyhow::Result<Pending> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params(tool, args)?));
        let handle = self
            .service
            .peer()
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .with_context(|| format!("sending {tool}"))?;
        Ok(Pending(handle))
    }

    /// The tools the server lists.
    pub async fn tools(&self) -> anyhow::Result<Vec<rmcp::model::Tool>> {
        Ok(self.service.peer().list_all_tools().await?)
    }

    /// Close the connection (the server's stdin), as a host does when it is done.
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

impl Pending {
    /// Send `notifications/cancelled` for the call.
    pub async fn cancel(self) -> anyhow::Result<()> {
        Ok(self
            .0
            .cancel(Some("the agent changed its mind".into()))
            .await?)
    }

    /// Wait for the call's answer.
    pub async fn answer(self) -> anyhow::Result<CallToolResult> {
        match tokio::time::timeout(CALL_TIMEOUT, self.0.await_response()).await?? {
            ServerResult::CallToolResult(r) => Ok(r),
            other => bail!("not a tool result: {other:?}"),
        }
    }
}

/// SIGKILL a process by id (it may be gone already).
pub fn kill9(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}
