//! An OpenTelemetry collector in the test's own process: OTLP's trace service over gRPC, on a
//! loopback port, keeping every span it is sent. A test points a worker or `interlock serve` at
//! it with `OTEL_EXPORTER_OTLP_ENDPOINT` and reads back what the process exported, exactly as a
//! real collector would have received it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};

/// One span as received.
#[derive(Debug, Clone)]
pub struct Span {
    /// `service.name` of the process that sent it.
    pub service: String,
    /// Its name (`interlock.attempt`).
    pub name: String,
    /// Hex.
    pub trace_id: String,
    /// Hex.
    pub span_id: String,
    /// Hex; empty for a root span.
    pub parent_span_id: String,
    /// Its attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
}

impl Span {
    /// An attribute's value, or "" when it has none.
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Kept {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .map(|kv| text(kv.value.as_ref()))
                .unwrap_or_default();
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                kept.push(Span {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                        .collect(),
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The receiver; stops when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    kept: Kept,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    /// Listen on a free loopback port.
    pub fn start() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .context("binding the OTLP receiver")?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let kept = Kept::default();
        let service = TraceServiceServer::new(kept.clone());
        runtime.spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
            {
                eprintln!("the OTLP receiver stopped: {e}");
            }
        });
        Ok(Self {
            endpoint,
            kept,
            _runtime: runtime,
        })
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.kept
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The spans once `done` holds of them, or an error listing what came within `limit`.
    pub fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&[Span]) -> bool,
    ) -> anyhow::Result<Vec<Span>> {
        let t0 = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if t0.elapsed() > limit {
                let names: Vec<String> = spans
                    .iter()
                    .map(|s| format!("{}/{}", s.service, s.name))
                    .collect();
                anyhow::bail!("after {limit:?} the receiver holds only {names:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `span` and its ancestors among `spans`, the span first; stops at a parent not received.
pub fn ancestry<'a>(spans: &'a [Span], span: &'a Span) -> Vec<&'a Span> {
    let mut chain = vec![span];
    let mut at = span;
    while !at.parent_span_id.is_empty() {
        match spans
            .iter()
            .find(|s| s.span_id == at.parent_span_id && s.trace_id == at.trace_id)
        {
            Some(parent) if chain.len() <= spans.len() => {
                chain.push(parent);
                at = parent;
            }
            _ => break,
        }
    }
    chain
}
