//! `interlock mcp-proxy`: the MCP proxy in front of an MCP server started as its child. The
//! agent's MCP client runs this command where it ran the server's; the protocol is on stdin and
//! stdout, so the proxy's logs go to stderr only.

use std::path::PathBuf;

use anyhow::Context;
use interlock_mcp::config::ConfigError;
use interlock_mcp::{ProxyConfig, ProxyError};

/// Run the MCP proxy.
#[derive(clap::Args)]
pub(crate) struct McpProxyArgs {
    /// The proxy's configuration (TOML): the gated tools, their keys, leases, premises, lookups.
    #[arg(long, default_value = "interlock.mcp.toml")]
    config: PathBuf,
    /// The MCP server's command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "SERVER COMMAND")]
    command: Vec<String>,
}

pub(crate) fn run(args: McpProxyArgs, journal: &str) -> anyhow::Result<()> {
    let cfg = ProxyConfig::load(&args.config)?;
    interlock_mcp::run(cfg, journal, &args.command)
        .with_context(|| format!("interlock mcp-proxy -- {}", args.command.join(" ")))
}

/// Whether `e` is the proxy's configuration being unusable (the file, a tool's table, a `${VAR}`
/// it names, a binding the gate refuses): exit 2, not the 3 a host restarts the proxy on.
pub(crate) fn is_configuration(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.is::<ConfigError>()
            || match c.downcast_ref::<ProxyError>() {
                Some(ProxyError::Http { .. }) => true,
                // A tool's binding refused (a window too short); the gate itself may fail on the
                // journal, which a restart can mend.
                Some(ProxyError::Gate { tool, .. }) => !tool.is_empty(),
                _ => false,
            }
    })
}
