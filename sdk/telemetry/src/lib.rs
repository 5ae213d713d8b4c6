//! Logs and traces for the processes that run the gate: the workers, `interlock serve` and the
//! command line. A team follows one refund from its workflow through the gate to the target in
//! the tracing system it already runs, configured the way every OpenTelemetry SDK is (the
//! `OTEL_*` variables), and off when none is set. The gate library itself only opens `tracing`
//! spans; which subscriber sees them is the binary's choice, made here once.
//!
//! Spans are batched and sent by a thread of their own: the gate never waits on a collector, and
//! a collector that is down costs dropped spans (counted by the batch processor), not refunds.

mod config;
mod export;
mod propagate;
#[cfg(test)]
mod testing;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub use propagate::{continue_trace, trace_headers};

/// Which spans are exported (`tracing`'s filter syntax); default [`DEFAULT_TRACES_FILTER`].
pub const TRACES_FILTER: &str = "INTERLOCK_TRACES_FILTER";
/// The gate's, the server's and the activity's spans and the events inside them, nothing from
/// the libraries under them.
pub const DEFAULT_TRACES_FILTER: &str = "interlock=debug";

/// Why logs or traces could not be set up as the variables ask.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `OTEL_TRACES_EXPORTER` names an exporter that is not built in.
    #[error(
        "OTEL_TRACES_EXPORTER={0}: only `otlp` (OTLP over gRPC) is built in; set it to otlp, \
         or to none to export nothing"
    )]
    UnsupportedExporter(String),
    /// The OTLP protocol asked for is not gRPC.
    #[error(
        "{var}={value}: only OTLP over gRPC is built in; set it to grpc (or unset it) and point \
         the endpoint at a collector's gRPC port (usually 4317)"
    )]
    UnsupportedProtocol {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// The endpoint is not a plain `http://` address.
    #[error(
        "{var}={value}: the endpoint must be http://HOST:PORT (OTLP over gRPC without TLS); to \
         reach a collector over TLS, run one beside this process and point it there"
    )]
    Endpoint {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// Compression is asked for.
    #[error("{var}={value}: compression is not built in; unset it, or set it to none")]
    UnsupportedCompression {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// `INTERLOCK_TRACES_FILTER` does not parse.
    #[error("{TRACES_FILTER}={value}: {reason} (example: {DEFAULT_TRACES_FILTER})")]
    Filter {
        /// Its value.
        value: String,
        /// What the parser said.
        reason: String,
    },
    /// The exporter could not be built.
    #[error("starting the OTLP exporter: {0}")]
    Exporter(String),
    /// Another subscriber was installed first.
    #[error("a tracing subscriber is already installed in this process")]
    AlreadyInstalled,
}

/// What [`install`] set up; dropping it sends the spans still batched, waiting for them at most
/// 5 seconds. A process ended by a signal it does not handle loses its last batch.
#[must_use = "dropping it stops the export; keep it for the life of the process"]
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Send what is batched and stop exporting; the error says what could not be sent.
    pub fn shutdown(mut self) -> Result<(), TelemetryError> {
        match self.provider.take() {
            Some(p) => export::shut(&p).map_err(TelemetryError::Exporter),
            None => Ok(()),
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take()
            && let Err(e) = export::shut(&p)
        {
            tracing::warn!(error = %e, "the last spans could not be exported");
        }
    }
}

/// Logs to stderr at `RUST_LOG`'s level (`default_log` when unset or unreadable, `"off"` for
/// none), and the gate's spans exported over OTLP/gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, as `service` unless `OTEL_SERVICE_NAME` says
/// otherwise. Call once, at the start of `main`, and keep what it returns.
pub fn install(service: &str, default_log: &str) -> Result<Telemetry, TelemetryError> {
    install_from(&|name| std::env::var(name).ok(), service, default_log)
}

/// Logs only, as [`install`] sets them up, whatever the `OTEL_*` variables say: for a command
/// that must run even when they ask for what is not built in.
pub fn install_logs_only(default_log: &str) -> Result<Telemetry, TelemetryError> {
    install_from(&|_| None, "interlock", default_log)
}

/// [`install`], reading the variables through `var` instead of the environment.
pub fn install_from(
    var: &dyn Fn(&str) -> Option<String>,
    service: &str,
    default_log: &str,
) -> Result<Telemetry, TelemetryError> {
    let logs = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_log));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(logs);
    let chosen = config::traces(var, service)?;
    let provider = match &chosen {
        config::Traces::Off(_) => None,
        config::Traces::Otlp { service, endpoint } => {
            Some(export::otlp_provider(service, endpoint)?)
        }
    };
    let traces = match &provider {
        Some(p) => Some(
            tracing_opentelemetry::layer()
                .with_tracer(p.tracer("interlock"))
                // The span's own fields say where it is; timing every enter and exit, and the
                // source line and thread of every span, would cost each effect more than they tell.
                .with_tracked_inactivity(false)
                .with_location(false)
                .with_threads(false)
                .with_filter(traces_filter(var)?),
        ),
        None => None,
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(traces)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    match chosen {
        config::Traces::Off(why) => tracing::debug!(why, "traces are not exported"),
        config::Traces::Otlp { service, endpoint } => {
            tracing::info!(%service, %endpoint, "exporting traces over OTLP/gRPC");
        }
    }
    Ok(Telemetry { provider })
}

fn traces_filter(var: &dyn Fn(&str) -> Option<String>) -> Result<EnvFilter, TelemetryError> {
    let value = var(TRACES_FILTER)
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_TRACES_FILTER.to_owned());
    EnvFilter::builder()
        .parse(&value)
        .map_err(|e| TelemetryError::Filter {
            value,
            reason: e.to_string(),
        })
}
