"""The worker's trace context: what it sends the gate server, and when it exports."""

import unittest

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import opentelemetry.propagate  # noqa: F401  (as Export loads it)
import tracecontext


class TraceContextTest(unittest.TestCase):
    def test_a_call_inside_a_span_carries_its_traceparent(self) -> None:
        tracer = TracerProvider().get_tracer("test")
        with tracer.start_as_current_span("RunActivity:refund_gated") as span:
            ctx = span.get_span_context()
            sent = dict(tracecontext.headers())
        self.assertEqual(
            sent["traceparent"], f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
        )

    def test_a_call_outside_any_span_carries_none(self) -> None:
        self.assertNotIn("traceparent", dict(tracecontext.headers()))

    def test_export_only_when_an_endpoint_is_named_and_not_turned_off(self) -> None:
        on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}
        self.assertFalse(tracecontext.wanted({}))
        self.assertFalse(tracecontext.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}))
        self.assertTrue(tracecontext.wanted(on))
        self.assertTrue(
            tracecontext.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"})
        )
        self.assertFalse(tracecontext.wanted({**on, "OTEL_SDK_DISABLED": "TRUE"}))
        self.assertFalse(tracecontext.wanted({**on, "OTEL_TRACES_EXPORTER": "none"}))


if __name__ == "__main__":
    unittest.main()
