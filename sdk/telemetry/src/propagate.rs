//! W3C trace context over gRPC. A worker in another language calls the gate server with its
//! activity's `traceparent` in the call's metadata; the server's spans for that call become its
//! children, so one trace runs from the worker's activity through the gate to the send. A
//! malformed or absent header starts no parent: the call is served the same either way.
//!
//! Flags other than "sampled" are dropped before the header is read: W3C Trace Context level 2
//! adds a "random trace id" flag (OpenTelemetry's Python SDK sends `-03`), which the Rust
//! propagator rejects as unknown for version `00`, although level 1 tells a reader to ignore
//! flags it does not know.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{KeyRef, MetadataMap};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Make `span` a child of the trace context in `metadata` (`traceparent`, `tracestate`), when it
/// carries a valid one and traces are exported; otherwise nothing changes.
pub fn continue_trace(span: &tracing::Span, metadata: &MetadataMap) {
    let traceparent = metadata
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .map(sampled_flag_only);
    let cx = TraceContextPropagator::new().extract(&Metadata {
        metadata,
        traceparent: traceparent.as_deref(),
    });
    if cx.span().span_context().is_valid() {
        // Fails only when no OpenTelemetry layer is installed: then there is no trace to join.
        let _ = span.set_parent(cx);
    }
}

/// The `traceparent` (and `tracestate`) of `span`, as metadata for an outgoing call; empty when
/// traces are not exported.
pub fn trace_headers(span: &tracing::Span) -> Vec<(String, String)> {
    let mut out = Headers(Vec::new());
    TraceContextPropagator::new().inject_context(&span.context(), &mut out);
    out.0
}

struct Headers(Vec<(String, String)>);

impl Injector for Headers {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

const TRACEPARENT: &str = "traceparent";

/// `traceparent` with its flags reduced to the one bit version `00` defines (sampled); any other
/// shape is left as it is, for the propagator to judge.
fn sampled_flag_only(traceparent: &str) -> String {
    let parts: Vec<&str> = traceparent.trim().split('-').collect();
    match parts.as_slice() {
        [version, trace, span, flags] if flags.len() == 2 => match u8::from_str_radix(flags, 16) {
            Ok(f) => format!("{version}-{trace}-{span}-{:02x}", f & 1),
            Err(_) => traceparent.to_owned(),
        },
        _ => traceparent.to_owned(),
    }
}

struct Metadata<'a> {
    metadata: &'a MetadataMap,
    /// The caller's `traceparent`, its flags reduced.
    traceparent: Option<&'a str>,
}

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        if key == TRACEPARENT {
            return self.traceparent;
        }
        self.metadata.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.metadata
            .keys()
            .filter_map(|k| match k {
                KeyRef::Ascii(k) => Some(k.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::testing::Memory;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";

    /// Serve one "call" carrying `traceparent` (if any): a server span with an attempt inside,
    /// and the headers the attempt would send on.
    fn serve(
        traceparent: Option<&str>,
    ) -> (
        Vec<opentelemetry_sdk::trace::SpanData>,
        Vec<(String, String)>,
    ) {
        let memory = Memory::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(memory.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let mut metadata = MetadataMap::new();
        if let Some(tp) = traceparent {
            metadata.insert("traceparent", tp.parse().unwrap());
        }
        let headers = tracing::subscriber::with_default(subscriber, || {
            let rpc = tracing::info_span!("interlock.rpc");
            continue_trace(&rpc, &metadata);
            rpc.in_scope(|| {
                let attempt = tracing::info_span!("interlock.attempt");
                attempt.in_scope(|| trace_headers(&attempt))
            })
        });
        provider.force_flush().unwrap();
        (memory.spans(), headers)
    }

    fn named<'a>(
        spans: &'a [opentelemetry_sdk::trace::SpanData],
        name: &str,
    ) -> &'a opentelemetry_sdk::trace::SpanData {
        spans.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn a_callers_traceparent_becomes_the_parent_of_the_calls_spans() {
        let (spans, headers) = serve(Some(&format!("00-{TRACE}-{PARENT}-01")));
        let rpc = named(&spans, "interlock.rpc");
        let attempt = named(&spans, "interlock.attempt");
        let trace = TraceId::from_hex(TRACE).unwrap();
        assert_eq!(rpc.span_context.trace_id(), trace);
        assert_eq!(rpc.parent_span_id, SpanId::from_hex(PARENT).unwrap());
        assert_eq!(attempt.span_context.trace_id(), trace);
        assert_eq!(attempt.parent_span_id, rpc.span_context.span_id());
        let (name, value) = &headers[0];
        assert_eq!(name, "traceparent");
        assert_eq!(
            value,
            &format!("00-{TRACE}-{}-01", attempt.span_context.span_id())
        );
    }

    #[test]
    fn a_level_2_random_flag_is_ignored_as_level_1_asks() {
        // As OpenTelemetry's Python SDK sends it: sampled, and a random trace id.
        let (spans, headers) = serve(Some(&format!("00-{TRACE}-{PARENT}-03")));
        let rpc = named(&spans, "interlock.rpc");
        assert_eq!(rpc.parent_span_id, SpanId::from_hex(PARENT).unwrap());
        assert!(rpc.span_context.is_sampled());
        assert!(headers[0].1.ends_with("-01"), "{headers:?}");
        // Random but not sampled: the caller's choice not to record this trace stands.
        let (spans, _) = serve(Some(&format!("00-{TRACE}-{PARENT}-02")));
        assert!(spans.is_empty(), "{spans:?}");
    }

    #[test]
    fn a_missing_or_malformed_traceparent_starts_a_trace_of_its_own() {
        for tp in [
            None,
            Some("garbage"),
            Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-zzzzzzzzzzzzzzzz-01"),
        ] {
            let (spans, _) = serve(tp);
            let rpc = named(&spans, "interlock.rpc");
            assert_eq!(rpc.parent_span_id, SpanId::INVALID, "{tp:?}");
            assert!(rpc.span_context.is_valid(), "{tp:?}");
            assert_ne!(
                rpc.span_context.trace_id(),
                TraceId::from_hex(TRACE).unwrap()
            );
        }
    }

    #[test]
    fn without_an_exporter_there_is_nothing_to_continue_or_send() {
        let span = tracing::info_span!("interlock.rpc");
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "traceparent",
            format!("00-{TRACE}-{PARENT}-01").parse().unwrap(),
        );
        continue_trace(&span, &metadata);
        assert!(trace_headers(&span).is_empty());
    }
}
