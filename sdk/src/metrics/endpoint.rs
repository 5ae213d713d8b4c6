//! `/metrics` over HTTP, for a worker or a server to expose: one thread answering scrapes one at a
//! time (a scrape every few seconds needs no more), the journal's counts read at most once per
//! refresh interval however often it is scraped.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{JournalCounts, journal_counts, registry, render};
use crate::journal::Journal;

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {listen}: {what} (name a free address, such as 127.0.0.1:9464)")]
pub struct EndpointError {
    /// The address asked for.
    pub listen: String,
    /// What went wrong.
    pub what: String,
}

/// A running `/metrics` endpoint; dropping it stops it.
pub struct Endpoint {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

struct Cache {
    journal: Option<Arc<dyn Journal>>,
    refresh: Duration,
    last: Mutex<Option<(Instant, Option<JournalCounts>)>>,
}

impl Cache {
    fn counts(&self) -> Option<Option<JournalCounts>> {
        let journal = self.journal.as_ref()?;
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, counts)) = last.as_ref()
            && at.elapsed() < self.refresh
        {
            return Some(counts.clone());
        }
        let counts = match journal_counts(journal.as_ref()) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "reading the journal for the metrics' gauges");
                None
            }
        };
        *last = Some((Instant::now(), counts.clone()));
        Some(counts)
    }
}

impl Endpoint {
    /// Serve `/metrics` on `listen` (`host:port`; port 0 picks a free one): this process's
    /// counters and histograms, and — given a journal — its effects counted at most once per
    /// `refresh`.
    pub fn start(
        listen: &str,
        journal: Option<Arc<dyn Journal>>,
        refresh: Duration,
    ) -> Result<Self, EndpointError> {
        let err = |what: String| EndpointError {
            listen: listen.to_owned(),
            what,
        };
        let server = Arc::new(tiny_http::Server::http(listen).map_err(|e| err(e.to_string()))?);
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| err("not an IP address".into()))?;
        let cache = Cache {
            journal,
            refresh,
            last: Mutex::new(None),
        };
        let serving = server.clone();
        let thread = std::thread::Builder::new()
            .name("interlock-metrics".into())
            .spawn(move || {
                for request in serving.incoming_requests() {
                    answer(request, &cache);
                }
            })
            .map_err(|e| err(e.to_string()))?;
        tracing::info!(%addr, "serving metrics at /metrics");
        Ok(Self {
            addr,
            server,
            thread: Some(thread),
        })
    }

    /// The variable that names where a worker serves its metrics.
    pub const LISTEN_ENV: &'static str = "INTERLOCK_METRICS_LISTEN";

    /// [`Endpoint::start`] on the address `INTERLOCK_METRICS_LISTEN` names, refreshing the
    /// journal's counts every 10 s; `None` when it is unset or empty.
    pub fn from_env(journal: Arc<dyn Journal>) -> Result<Option<Self>, EndpointError> {
        match std::env::var(Self::LISTEN_ENV) {
            Ok(at) if !at.trim().is_empty() => {
                Self::start(at.trim(), Some(journal), Duration::from_secs(10)).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn answer(request: tiny_http::Request, cache: &Cache) {
    let path = request.url().split('?').next().unwrap_or_default();
    let response = if request.method() != &tiny_http::Method::Get {
        tiny_http::Response::from_string("only GET /metrics is served\n").with_status_code(405)
    } else if path == "/metrics" {
        let counts = cache.counts();
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
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
