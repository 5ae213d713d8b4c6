//! The OTLP exporter on a runtime of its own. OpenTelemetry's batch processor runs the exporter
//! on a plain thread, but the gRPC exporter needs a Tokio reactor to connect and send; and the
//! processes that export are not alike (the CLI has no runtime, a worker's runtime may be busy
//! or gone by the time the last batch leaves). So the exporter owns a one-thread runtime, and
//! each batch is sent on it: a slow collector never takes a thread from the gate or the worker.

use std::future::Future;
use std::time::Duration;

use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

use crate::TelemetryError;

/// An exporter whose sends run on `runtime`. Fields drop in order: the exporter (and its
/// channel) before the runtime that drives them.
#[derive(Debug)]
pub(crate) struct OnOwnRuntime<E> {
    pub(crate) inner: E,
    pub(crate) runtime: tokio::runtime::Runtime,
}

impl<E: SpanExporter> SpanExporter for OnOwnRuntime<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        // Called on the batch processor's own thread, never inside a runtime.
        let done = self.runtime.block_on(self.inner.export(batch));
        std::future::ready(done)
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        let _in = self.runtime.enter();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        let _in = self.runtime.enter();
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// A one-thread runtime for the exporter.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, TelemetryError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("interlock-otlp")
        .enable_all()
        .build()
        .map_err(|e| TelemetryError::Exporter(format!("its runtime: {e}")))
}

/// A provider exporting to `endpoint` in batches (`OTEL_BSP_*`), every span carrying
/// `service.name = service`; the exporter reads its headers, timeout and compression from the
/// standard variables.
pub(crate) fn otlp_provider(
    service: &str,
    endpoint: &str,
) -> Result<SdkTracerProvider, TelemetryError> {
    let runtime = runtime()?;
    // The channel is built inside the runtime: it spawns its connection's task there.
    let built = {
        let _in = runtime.enter();
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
    };
    match built {
        Ok(inner) => Ok(provider(OnOwnRuntime { inner, runtime }, service)),
        Err(e) => {
            // Dropped without waiting: a worker calls this inside its own runtime, where
            // dropping another one would panic.
            runtime.shutdown_background();
            Err(TelemetryError::Exporter(format!(
                "{e} (endpoint {endpoint})"
            )))
        }
    }
}

/// A provider batching spans to `exporter`.
pub(crate) fn provider(exporter: impl SpanExporter + 'static, service: &str) -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .build()
}

/// Flush what is batched and stop the provider; the error names what was lost.
pub(crate) fn shut(provider: &SdkTracerProvider) -> Result<(), String> {
    match provider.shutdown() {
        Ok(()) | Err(OTelSdkError::AlreadyShutdown) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::testing::Memory;

    /// An exporter that, like the gRPC one, needs a Tokio reactor to send.
    #[derive(Debug)]
    struct NeedsTokio(Memory);

    impl SpanExporter for NeedsTokio {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            tokio::time::sleep(Duration::from_millis(1)).await;
            self.0.export(batch).await
        }
    }

    #[test]
    fn spans_are_sent_from_the_batch_thread_on_the_exporters_own_runtime() {
        let memory = Memory::default();
        let exporter = OnOwnRuntime {
            inner: NeedsTokio(memory.clone()),
            runtime: runtime().unwrap(),
        };
        let provider = Arc::new(provider(exporter, "test"));
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(
                opentelemetry::trace::TracerProvider::tracer(provider.as_ref(), "test"),
            ));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..3 {
                tracing::info_span!("interlock.attempt").in_scope(|| {});
            }
        });
        shut(&provider).unwrap();
        assert_eq!(memory.names(), vec!["interlock.attempt"; 3]);
    }
}
