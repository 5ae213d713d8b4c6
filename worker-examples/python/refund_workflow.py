"""``RefundWorkflow`` for the Python worker: decide → refund through the gate server → report.

The same workflow as ``worker-examples/src/workflow.rs`` (same type name, activity ids, timeouts
and retry policies), so the harness can run a refund on either worker and compare: it always
closes with a ``RefundReport`` of what it believes happened, except when ``decide`` fails, which
fails the workflow as in Rust.

Activities are called by name, so this module (which runs in Temporal's sandbox) never imports
gRPC; ``outcomes`` is pure and passed through the sandbox.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import outcomes


def _retry(max_attempts: int, every_ms: int = 1000) -> RetryPolicy:
    """Every ``every_ms`` (a second by default), up to ``max_attempts`` attempts (as in
    workflow.rs)."""
    return RetryPolicy(
        initial_interval=timedelta(milliseconds=every_ms),
        backoff_coefficient=1.0,
        maximum_attempts=max_attempts,
    )


@workflow.defn(name="RefundWorkflow")
class RefundWorkflow:
    """Refund one approved request through the gate."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run the refund; answer the ``RefundReport`` as a JSON object."""
        outcomes.tier_of(request["system"])  # fail now on a system this worker does not run
        try:
            decision = await workflow.execute_activity(
                "decide",
                request,
                activity_id="decide",
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=_retry(5),
                result_type=dict,
            )
        except ActivityError as e:
            # The server refused to fix the effect (a payload the target does not take, an
            # unknown target) or could not be asked: nothing was journaled; the person who
            # started the workflow reads why in the report.
            return outcomes.report_of_failure(e.cause, e.message)
        # The same timeouts as the Rust worker: by default heartbeat 2 s, retry every 1 s; the
        # request's ``step`` names others (it travels in the input so a replay schedules alike).
        step = request.get("step") or {}
        try:
            return await workflow.execute_activity(
                "refund_gated",
                decision,
                activity_id="refund",
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=timedelta(milliseconds=step.get("heartbeat_ms", 2000)),
                retry_policy=_retry(40, step.get("retry_ms", 1000)),
                result_type=dict,
            )
        except ActivityError as e:
            return outcomes.report_of_failure(e.cause, e.message)
