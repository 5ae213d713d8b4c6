//! `interlock mcp-proxy`: the MCP proxy in front of an MCP server started as its child. The
//! agent's MCP client runs this command where it ran the server's; the protocol is on stdin and
//! stdout, so the proxy's logs go to stderr only.

use std::path::PathBuf;

use anyhow::Context;
use interlock_mcp::ProxyConfig;

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
