//! `interlock serve`: the gate as a gRPC service (`interlock.v1.GateService`), configured by a
//! file so the targets, the listen address and where the secrets come from are reviewed in one
//! place. Logs go to stderr; secrets never do.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use interlock::SystemClock;
use interlock_server::{Listen, Server, ServerConfig};

/// Serve the gate over gRPC.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// The server's configuration (TOML): listen address, targets, token, TLS, limits.
    #[arg(long, default_value = "interlock-serve.toml")]
    config: PathBuf,
    /// Listen here instead of the configuration's `listen` (IP:PORT or unix:/path).
    #[arg(long)]
    listen: Option<String>,
    /// Serve Prometheus metrics at /metrics on this address (HOST:PORT), instead of the
    /// configuration's `metrics_listen`.
    #[arg(long, env = "INTERLOCK_METRICS_LISTEN")]
    metrics_listen: Option<String>,
}

pub(crate) fn run(args: ServeArgs, journal: &str) -> anyhow::Result<()> {
    let mut cfg = ServerConfig::load(&args.config)?;
    if let Some(listen) = args.listen {
        cfg.listen = listen;
    }
    let listen = Listen::parse(&cfg.listen)
        .map_err(anyhow::Error::msg)
        .context("--listen")?;
    let server = Server::from_config(&cfg, journal, Arc::new(SystemClock), |gate| gate)
        .context("starting the gate server")?;
    let listen_metrics = args
        .metrics_listen
        .filter(|a| !a.trim().is_empty())
        .or(cfg.metrics_listen.clone());
    let _metrics = match listen_metrics {
        Some(at) => {
            let m = crate::metrics_cmd::start(&at, server.api().journal().clone())?;
            eprintln!("interlock serve: metrics at http://{}/metrics", m.addr());
            Some(m)
        }
        None => None,
    };
    interlock_server::run_until_signalled(server, &listen, |address| {
        eprintln!("interlock serve: listening on {address}");
    })?;
    Ok(())
}
