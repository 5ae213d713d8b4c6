//! The MCP matrix: an agent's refunds through a real MCP client and the example MCP server, three
//! ways — straight to the server, with an idempotency key the client derives, and through
//! `interlock mcp-proxy` — each cell judged by the payments API's own records. Writes
//! `results/mcp_matrix.{md,json}`; `--check` writes nothing and fails unless every gated cell
//! held and the Markdown matches the committed one.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use interlock_e2e::mcp::{self, Case, Rig, System};

/// Run the MCP matrix.
#[derive(Parser)]
struct Args {
    /// Write nothing; fail unless every gated cell held and the report matches
    /// results/mcp_matrix.md.
    #[arg(long)]
    check: bool,
    /// Only the gated system (the baselines show nothing new from run to run).
    #[arg(long)]
    gated_only: bool,
    /// The `interlock` binary the proxy runs as (default: beside this one).
    #[arg(long)]
    interlock: Option<PathBuf>,
    /// Where the reports go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

const COMMAND: &str = "target/debug/mcp-matrix";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let interlock = match args.interlock {
        Some(p) => p,
        None => interlock_e2e::mcp::interlock()?,
    };
    let rig = Rig::new(&interlock)?;
    let systems: Vec<System> = if args.gated_only {
        vec![System::Gated]
    } else {
        System::ALL.to_vec()
    };
    let cells = mcp::run_all(&rig, &systems, &Case::ALL)
        .await
        .with_context(|| format!("the processes' logs are in {}", rig.logs().display()))?;
    let md = mcp::markdown(&cells, COMMAND);
    let broke: Vec<String> = cells
        .iter()
        .filter(|c| c.system == System::Gated && !c.held)
        .map(|c| format!("{}: {}", c.case.name(), c.note))
        .collect();
    if args.check {
        if !broke.is_empty() {
            bail!("gated cells broke: {}", broke.join("; "));
        }
        if !args.gated_only {
            let committed = std::fs::read_to_string(args.out.join("mcp_matrix.md"))
                .context("reading the committed results/mcp_matrix.md")?;
            if committed != md {
                bail!(
                    "results/mcp_matrix.md differs from this run's; run {COMMAND} and commit \
                     what it writes\n--- this run ---\n{md}"
                );
            }
        }
        eprintln!("[mcp-matrix] every gated cell held; the report matches");
        return Ok(());
    }
    if args.gated_only {
        eprint!("{md}");
        return Ok(());
    }
    std::fs::write(args.out.join("mcp_matrix.md"), &md)?;
    std::fs::write(
        args.out.join("mcp_matrix.json"),
        serde_json::to_string_pretty(&mcp::to_json(&cells, COMMAND))? + "\n",
    )?;
    eprintln!(
        "[mcp-matrix] wrote {}/mcp_matrix.{{md,json}}",
        args.out.display()
    );
    if !broke.is_empty() {
        bail!("gated cells broke: {}", broke.join("; "));
    }
    Ok(())
}
