//! `interlock metrics`: Prometheus' `/metrics` for a host's journal, from a process of its own —
//! what a team scrapes beside workers whose own counters die with them.

use std::sync::Arc;
use std::time::Duration;

use interlock::JournalStore;
use interlock::metrics::Endpoint;

/// How often the journal is read for the gauges, unless told otherwise.
pub(crate) const DEFAULT_REFRESH_MS: u64 = 10_000;

/// Serve the journal's metrics.
#[derive(clap::Args)]
pub(crate) struct MetricsArgs {
    /// Where to listen (HOST:PORT; port 0 picks a free one, printed on stderr). Loopback only,
    /// unless --behind-proxy names the TLS proxy scrapers come through.
    #[arg(long, default_value = "127.0.0.1:9464")]
    listen: String,
    /// The TLS proxies (comma-separated IP addresses) that scrapers come through and that
    /// authenticate them: with them, an address other hosts reach may be listened on, and only
    /// they and loopback peers are answered.
    #[arg(long, env = "INTERLOCK_METRICS_BEHIND_PROXY")]
    behind_proxy: Option<String>,
    /// Read the journal for the gauges at most this often (ms); 0 reads it at every scrape.
    #[arg(long, default_value_t = DEFAULT_REFRESH_MS)]
    refresh_ms: u64,
}

/// Start `/metrics` on `at` over `journal`, refreshed as `INTERLOCK_METRICS_REFRESH_MS` says.
pub(crate) fn start(at: &str, journal: Arc<dyn JournalStore>) -> anyhow::Result<Endpoint> {
    Ok(Endpoint::start_with_env_refresh(at, journal)?)
}

pub(crate) fn run(journal: Arc<dyn JournalStore>, args: MetricsArgs) -> anyhow::Result<()> {
    let endpoint = Endpoint::start_behind(
        &args.listen,
        Some(journal),
        Duration::from_millis(args.refresh_ms),
        crate::behind_proxy(args.behind_proxy.as_deref())?,
    )?;
    eprintln!(
        "interlock metrics: serving http://{}/metrics",
        endpoint.addr()
    );
    loop {
        std::thread::park();
    }
}
