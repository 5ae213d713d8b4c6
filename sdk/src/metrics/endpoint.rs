//! `/metrics` over HTTP, for a worker or a server to expose: one thread answering scrapes one at a
//! time (a scrape every few seconds needs no more), and another reading the journal for the
//! gauges once per refresh interval, so a scrape never waits on a journal read (except the first,
//! before any read has finished, and with a refresh of 0, which reads at every scrape).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use super::{JournalCounts, budget_gauges, journal_counts, registry, render};
use crate::JournalStore;
use crate::clock::{Clock, SystemClock};
use crate::reach::Reach;

/// How often the journal is read for the gauges unless told otherwise.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(10);

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {listen}: {what}")]
pub struct EndpointError {
    /// The address asked for.
    pub listen: String,
    /// What went wrong, and the fix.
    pub what: String,
}

/// A running `/metrics` endpoint; dropping it stops it.
pub struct Endpoint {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    gauges: Arc<Gauges>,
    refresher: Option<Thread>,
}

/// What an endpoint asked to listen where other hosts reach it is told to do.
const EXPOSED_FIX: &str = "listen on loopback (127.0.0.1:9464) and scrape through a TLS proxy \
     that authenticates the scraper, named by address in INTERLOCK_METRICS_BEHIND_PROXY (or \
     `interlock metrics --behind-proxy`); the endpoint then answers that proxy and loopback only";

/// How `/metrics` may be reached with `proxies` named: the endpoint has no TLS and no tokens of
/// its own, so off loopback it stands behind a proxy that provides both, and answers no one else.
fn metrics_reach(proxies: Vec<std::net::IpAddr>) -> Reach {
    Reach {
        authenticated: !proxies.is_empty(),
        ..Reach::behind(proxies)
    }
}

/// The journal's counts as last read: `None` before the first read, `Some(None)` when it failed.
struct Gauges {
    journal: Option<Arc<dyn JournalStore>>,
    last: Mutex<Option<Option<JournalCounts>>>,
    stop: AtomicBool,
}

impl Gauges {
    fn read(&self) -> Option<JournalCounts> {
        let journal = self.journal.as_ref()?;
        let mut counts = match journal_counts(journal.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "reading the journal for the metrics' gauges");
                return None;
            }
        };
        // The effects' gauges stand without the budgets': those are left out until they read.
        match budget_gauges(journal.as_ref(), SystemClock.now_ms()) {
            Ok(b) => counts.budgets = b,
            Err(e) => tracing::warn!(error = %e, "reading the budgets for the metrics' gauges"),
        }
        Some(counts)
    }

    fn refresh(&self) -> Option<JournalCounts> {
        let counts = self.read();
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(counts.clone());
        counts
    }

    /// What a scrape shows: `None` without a journal.
    fn for_scrape(&self, every_scrape: bool) -> Option<Option<JournalCounts>> {
        self.journal.as_ref()?;
        let last = self
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match last {
            Some(counts) if !every_scrape => Some(counts),
            _ => Some(self.refresh()),
        }
    }
}

impl Endpoint {
    /// Serve `/metrics` on `listen` (`host:port`; port 0 picks a free one): this process's
    /// counters and histograms, and — given a journal — its effects, read every `refresh` (a
    /// refresh of 0 reads the journal at every scrape).
    /// Only loopback addresses: see [`Endpoint::start_behind`] for another.
    pub fn start(
        listen: &str,
        journal: Option<Arc<dyn JournalStore>>,
        refresh: Duration,
    ) -> Result<Self, EndpointError> {
        Self::start_behind(listen, journal, refresh, Vec::new())
    }

    /// [`Endpoint::start`] behind the TLS proxies at `proxies`, which authenticate the scrapers:
    /// an address other hosts reach is refused without one ([`crate::reach`]), and with them only
    /// they and loopback peers are answered.
    pub fn start_behind(
        listen: &str,
        journal: Option<Arc<dyn JournalStore>>,
        refresh: Duration,
        proxies: Vec<std::net::IpAddr>,
    ) -> Result<Self, EndpointError> {
        let err = |what: String| EndpointError {
            listen: listen.to_owned(),
            what,
        };
        let reach = metrics_reach(proxies);
        let check = |addr: SocketAddr| {
            reach
                .check("the metrics endpoint", addr, EXPOSED_FIX)
                .map_err(|e| err(e.to_string()))
        };
        // Every address the name stands for is checked before any is bound, and the socket
        // bound is checked again.
        if let Ok(addrs) = listen.to_socket_addrs() {
            addrs.into_iter().try_for_each(check)?;
        }
        let server = Arc::new(tiny_http::Server::http(listen).map_err(|e| {
            err(format!(
                "{e} (name a free address, such as 127.0.0.1:9464, or port 0 for any)"
            ))
        })?);
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| err("not an IP address".into()))?;
        check(addr)?;
        let reach = Arc::new(reach);
        let gauges = Arc::new(Gauges {
            journal,
            last: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let every_scrape = refresh.is_zero();
        let refresher = if gauges.journal.is_some() && !every_scrape {
            let g = gauges.clone();
            let t = std::thread::Builder::new()
                .name("interlock-metrics-journal".into())
                .spawn(move || {
                    while !g.stop.load(Ordering::SeqCst) {
                        g.refresh();
                        std::thread::park_timeout(refresh);
                    }
                })
                .map_err(|e| err(e.to_string()))?;
            Some(t.thread().clone())
        } else {
            None
        };
        let serving = server.clone();
        let shown = gauges.clone();
        let thread = std::thread::Builder::new()
            .name("interlock-metrics".into())
            .spawn(move || {
                for request in serving.incoming_requests() {
                    answer(request, &shown, every_scrape, &reach);
                }
                tracing::info!("the metrics endpoint stopped accepting scrapes");
            })
            .map_err(|e| err(e.to_string()))?;
        tracing::info!(%addr, "serving metrics at /metrics");
        Ok(Self {
            addr,
            server,
            thread: Some(thread),
            gauges,
            refresher,
        })
    }

    /// The variable that names where a worker or `interlock serve` serves its metrics.
    pub const LISTEN_ENV: &'static str = "INTERLOCK_METRICS_LISTEN";

    /// The variable that sets how often the journal is read for the gauges, in ms (default
    /// 10,000; `off` serves no journal gauges, for workers that share a journal another process
    /// already reports on).
    pub const REFRESH_ENV: &'static str = "INTERLOCK_METRICS_REFRESH_MS";

    /// The refresh [`Endpoint::REFRESH_ENV`] asks for: `None` for `off`.
    pub fn refresh_from_env() -> Result<Option<Duration>, EndpointError> {
        match std::env::var(Self::REFRESH_ENV) {
            Err(_) => Ok(Some(DEFAULT_REFRESH)),
            Ok(v) if v.trim().is_empty() => Ok(Some(DEFAULT_REFRESH)),
            Ok(v) if v.trim() == "off" => Ok(None),
            Ok(v) => v
                .trim()
                .parse()
                .map(|ms| Some(Duration::from_millis(ms)))
                .map_err(|_| EndpointError {
                    listen: String::new(),
                    what: format!(
                        "{}={v}: give a number of milliseconds, or `off`",
                        Self::REFRESH_ENV
                    ),
                }),
        }
    }

    /// The variable that names the TLS proxies `/metrics` stands behind (comma-separated IP
    /// addresses): without it, only loopback addresses may be listened on.
    pub const BEHIND_PROXY_ENV: &'static str = "INTERLOCK_METRICS_BEHIND_PROXY";

    /// The proxies [`Endpoint::BEHIND_PROXY_ENV`] names.
    pub fn proxies_from_env() -> Result<Vec<std::net::IpAddr>, EndpointError> {
        match std::env::var(Self::BEHIND_PROXY_ENV) {
            Ok(v) => crate::reach::parse_proxies(&v).map_err(|what| EndpointError {
                listen: String::new(),
                what: format!("{}: {what}", Self::BEHIND_PROXY_ENV),
            }),
            Err(_) => Ok(Vec::new()),
        }
    }

    /// [`Endpoint::start_behind`] on `listen` over `journal`, with the refresh
    /// [`Endpoint::REFRESH_ENV`] asks for and the proxies [`Endpoint::BEHIND_PROXY_ENV`] names.
    pub fn start_with_env_refresh(
        listen: &str,
        journal: Arc<dyn JournalStore>,
    ) -> Result<Self, EndpointError> {
        let proxies = Self::proxies_from_env()?;
        match Self::refresh_from_env()? {
            Some(refresh) => Self::start_behind(listen, Some(journal), refresh, proxies),
            None => Self::start_behind(listen, None, DEFAULT_REFRESH, proxies),
        }
    }

    /// The endpoint `INTERLOCK_METRICS_LISTEN` names, over `journal`; `None` when it is unset
    /// or empty.
    pub fn from_env(journal: Arc<dyn JournalStore>) -> Result<Option<Self>, EndpointError> {
        match std::env::var(Self::LISTEN_ENV) {
            Ok(at) if !at.trim().is_empty() => {
                Self::start_with_env_refresh(at.trim(), journal).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn answer(request: tiny_http::Request, gauges: &Gauges, every_scrape: bool, reach: &Reach) {
    let path = request.url().split('?').next().unwrap_or_default();
    let admitted = request.remote_addr().is_some_and(|p| reach.admits(p.ip()));
    let response = if !admitted {
        tiny_http::Response::from_string(
            "this endpoint answers its TLS proxy and loopback only: scrape through the proxy\n",
        )
        .with_status_code(403)
    } else if request.method() != &tiny_http::Method::Get {
        tiny_http::Response::from_string("only GET /metrics is served\n").with_status_code(405)
    } else if path == "/metrics" {
        let counts = gauges.for_scrape(every_scrape);
        let text = render(registry(), counts.as_ref().map(Option::as_ref));
        let mut r = tiny_http::Response::from_string(text);
        if let Ok(h) = tiny_http::Header::from_bytes(
            &b"Content-Type"[..],
            &b"text/plain; version=0.0.4; charset=utf-8"[..],
        ) {
            r.add_header(h);
        }
        r
    } else {
        tiny_http::Response::from_string("not found: metrics are at /metrics\n")
            .with_status_code(404)
    };
    if let Err(e) = request.respond(response) {
        tracing::debug!(error = %e, "a metrics scrape went away before its answer");
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // The journal reader is told to stop and left to finish on its own: a read stuck on a
        // database must not hold up the process's shutdown.
        self.gauges.stop.store(true, Ordering::SeqCst);
        if let Some(t) = &self.refresher {
            t.unpark();
        }
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
