"""Traces from the Python worker, and their context carried to the gate server.

The gate server continues a call's W3C ``traceparent``: its spans for the call become children of
the span that made it, so one trace runs from the worker's activity through the gate to the send.
Export is off unless OpenTelemetry's standard variables name a collector
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; ``OTEL_SDK_DISABLED=true``
or ``OTEL_TRACES_EXPORTER=none`` turn it off), and OpenTelemetry is imported only then.
"""

from __future__ import annotations

import sys
from typing import Any, Mapping, Optional

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def headers() -> list[tuple[str, str]]:
    """The current span's ``traceparent`` (and ``tracestate``, ``baggage``) as call metadata;
    empty when OpenTelemetry is not loaded or no span is being recorded."""
    propagate = sys.modules.get("opentelemetry.propagate")
    if propagate is None:
        return []
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return sorted(carrier.items())


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the variables ask for spans to be exported."""
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return False
    if (env.get("OTEL_TRACES_EXPORTER") or "otlp").strip() == "none":
        return False
    return any((env.get(v) or "").strip() for v in ENDPOINT_VARS)


class Export:
    """Spans batched to the collector over OTLP/gRPC, and Temporal's interceptor that opens one
    span per workflow task and activity (``RunActivity:refund_gated``)."""

    def __init__(self, env: Mapping[str, str], service: str) -> None:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from temporalio.contrib.opentelemetry import TracingInterceptor

        import opentelemetry.propagate  # noqa: F401  (headers() finds it loaded)

        name = (env.get("OTEL_SERVICE_NAME") or "").strip() or service
        self.provider = TracerProvider(resource=Resource.create({"service.name": name}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(self.provider)
        self.interceptors: list[Any] = [TracingInterceptor()]

    def shutdown(self) -> None:
        """Send what is batched."""
        self.provider.shutdown()


def start(env: Mapping[str, str], service: str) -> Optional[Export]:
    """Export as the variables ask, under ``service`` unless ``OTEL_SERVICE_NAME`` says
    otherwise; ``None`` when they do not."""
    return Export(env, service) if wanted(env) else None
