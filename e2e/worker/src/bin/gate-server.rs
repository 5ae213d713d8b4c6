//! `interlock serve` with the kill matrix's hooks: the gate's named pause points
//! (`INTERLOCK_PAUSE_AT`, comma-separated, see `src/pause.rs`) and the harness's shared clock
//! (`INTERLOCK_CLOCK_SKEW_FILE`). The e2e harness runs the Python worker against it; everything
//! else — the configuration file, the service, the transport — is the real server's.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use e2e_worker::clock::SkewClock;
use e2e_worker::pause::Pause;
use interlock::{Clock, SystemClock};
use interlock_server::{Listen, Server, ServerConfig};

/// The gate server, with the kill matrix's pause points and clock.
#[derive(clap::Parser)]
struct Args {
    /// The server's configuration (TOML), as `interlock serve --config` reads it.
    #[arg(long)]
    config: PathBuf,
    /// The journal, when the configuration names none.
    #[arg(
        long,
        env = "INTERLOCK_JOURNAL",
        default_value = "interlock-journal.db"
    )]
    journal: String,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let _telemetry = e2e_worker::init_logs("gate-server")?;
    let cfg = ServerConfig::load(&args.config)?;
    let listen = Listen::parse(&cfg.listen).map_err(anyhow::Error::msg)?;
    let clock: Arc<dyn Clock> = match SkewClock::from_env() {
        Some(c) => Arc::new(c),
        None => Arc::new(SystemClock),
    };
    let pause = Pause::from_env().map(Arc::new);
    let server = Server::from_config(&cfg, &args.journal, clock, |gate| match pause {
        Some(p) => gate.with_faults(p),
        None => gate,
    })
    .context("starting the gate server")?;
    interlock_server::run_until_signalled(server, &listen, |address| {
        tracing::info!(%address, pid = std::process::id(), "gate server listening");
    })?;
    Ok(())
}
