"""How the gate's answers become what the refund workflow acts on, with no server in sight.

The Python refund worker must end every refund exactly as the Rust worker does
(``worker-examples/src``), because the harness compares the two. This module holds the whole
mapping, pure, so it is unit-tested without Temporal or a gate server:

* ``verdict`` mirrors ``interlock_temporal::verdict`` (``sdk/temporal/src/lib.rs``): a committed
  outcome becomes the activity's ``RefundReport``; a final refusal, ambiguity, failure or double
  application becomes a non-retryable ``ApplicationError`` with a stable type and one details
  dict shaped like Rust's ``FailureDetails``; in-flight, retry and superseded outcomes become a
  retryable ``InterlockInFlight`` with the gate's delay.
* ``rpc_failure`` classifies a gRPC error from the gate server: transport trouble (the server was
  killed and is restarting) is retried, a request the server rejects is not.
* ``report_of_failure`` mirrors ``report_of`` in ``worker-examples/src/workflow.rs``: an
  activity failure becomes the report the workflow closes with.

Reports and details are plain dicts serialized by Temporal's JSON converter; their keys and values
are those serde gives ``worker_examples::model::RefundReport`` and
``interlock_temporal::FailureDetails``, so the Rust starter reads a Python worker's result.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Mapping, Optional, Sequence

from temporalio.exceptions import ApplicationError, FailureError

# The proto's numbers as the gate names them, and its JSON fields, shared with the decorator's
# client (interlock_gate.py).
from interlock_gate import REFUSAL, VIA, json_value  # noqa: F401  (re-exported)
from interlock_gate import changes_of as _changes
from interlock_gate import repairs_of as _repairs

# Failure types, as interlock_temporal names them (the workflow and retry policies match on them).
REFUSED = "InterlockRefused"
AMBIGUOUS = "InterlockAmbiguous"
APPLIED_TWICE = "InterlockAppliedTwice"
FAILED = "InterlockFailed"
IN_FLIGHT = "InterlockInFlight"
# The gate server could not be reached, or timed out: retried like an in-flight effect.
UNAVAILABLE = "InterlockUnavailable"
# The gate server rejected the call, or answered something this worker does not know: not retried.
SERVER = "InterlockServer"

# gRPC status codes (by `grpc.StatusCode` name) worth another attempt: the server is down or
# restarting, overloaded, or the call was cut off. Every other code is final.
RETRYABLE_CODES = frozenset(
    {
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        "RESOURCE_EXHAUSTED",
        "ABORTED",
        "INTERNAL",
        "UNKNOWN",
        "CANCELLED",
    }
)

# How long to wait after a retryable gRPC error, and after a superseded attempt.
UNAVAILABLE_DELAY = timedelta(seconds=1)
SUPERSEDED_DELAY = timedelta(milliseconds=200)

# `Status` labels that end an effect, as `Reported` (model.rs) takes them; others are ERROR.
FINAL_OUTCOMES = frozenset({"COMMITTED", "REFUSED", "FAILED", "AMBIGUOUS", "APPLIED_TWICE"})

# The systems this worker runs, and the gate server's target each one uses: the Stripe target at
# tier 1 or 2 (``t1``, ``t2``), or the refund described to the server as an HTTP target table at
# tier 1, 2 or 3 (``http_t1`` … ``http_t3``; see ``e2e/src/http_systems.rs``).
SYSTEM_TIERS: dict[str, str] = {
    "gated_py_t1": "t1",
    "gated_py_t2": "t2",
    "gated_http_t1": "http_t1",
    "gated_http_t2": "http_t2",
    "gated_http_t3": "http_t3",
}


def tier_of(system: str) -> str:
    """The target (``t1``, ``t2`` or ``http_t1`` … ``http_t3``) a request's ``system`` runs at.

    Raises a non-retryable ``ApplicationError`` (type ``UnknownSystem``) for any other system:
    this worker runs only the gated refund, and running a baseline's request through the gate
    would misreport it.
    """
    tier = SYSTEM_TIERS.get(system)
    if tier is None:
        raise ApplicationError(
            f"the Python refund worker runs systems {sorted(SYSTEM_TIERS)}, not {system!r}",
            type="UnknownSystem",
            non_retryable=True,
        )
    return tier


def payload_of(request: Mapping[str, Any]) -> dict[str, Any]:
    """The refund effect's payload, as ``RefundRequest::payload`` builds it: a charge when the
    payment's id is a charge's (``ch_…``), else a payment intent."""
    payment = str(request["payment"])
    field = "charge" if payment.startswith("ch_") else "payment_intent"
    return {field: payment, "amount": request["amount"], "currency": request["currency"]}


def report(
    outcome: str,
    *,
    via: Optional[str] = None,
    refusal: Optional[str] = None,
    code: Optional[str] = None,
    refund_id: Optional[str] = None,
    detail: str = "",
    repairs: Sequence[str] = (),
) -> dict[str, Any]:
    """A ``RefundReport`` as serde serializes it (every field present, absent ones null)."""
    return {
        "outcome": outcome,
        "via": via,
        "refusal": refusal,
        "code": code,
        "refund_id": refund_id,
        "detail": detail,
        "repairs": list(repairs),
    }


def _compact(value: Any) -> str:
    """``serde_json::Value::to_string``: compact JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _details(
    key: str,
    outcome: str,
    reason: str,
    *,
    refusal: Optional[str] = None,
    target_code: Optional[str] = None,
    changes: Sequence[dict[str, Any]] = (),
    repairs: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """``FailureDetails`` as serde serializes it."""
    return {
        "key": key,
        "outcome": outcome,
        "refusal": refusal,
        "target_code": target_code,
        "reason": reason,
        "changes": list(changes),
        "repairs": list(repairs),
    }


def _delay(msg: Any) -> Optional[timedelta]:
    """An ``InFlight``/``Retry`` message's ``retry_after``, if the server set one."""
    if not msg.HasField("retry_after"):
        return None
    return timedelta(seconds=msg.retry_after.seconds, microseconds=msg.retry_after.nanos // 1000)


def verdict(key: str, outcome: Any) -> dict[str, Any]:
    """The refund activity's result for the gate's ``Outcome`` (an ``interlock.v1.Outcome``
    message) of effect ``key``: the committed report, or raise the ``ApplicationError`` that
    ``interlock_temporal::verdict`` would."""
    kind = outcome.WhichOneof("kind")
    if kind == "committed":
        c = outcome.committed
        result = json_value(c.result_json)
        rid = result.get("id") if isinstance(result, dict) else None
        return report(
            "COMMITTED",
            via=VIA.get(c.via),
            refund_id=rid if isinstance(rid, str) else None,
            detail="replayed from the journal" if c.replayed else "",
        )
    if kind == "refused":
        r = outcome.refused
        code = REFUSAL.get(r.code)
        raise ApplicationError(
            f"{code if code is not None else r.code}: {r.reason}",
            _details(
                key,
                "REFUSED",
                r.reason,
                refusal=code,
                changes=_changes(r.changes),
                repairs=_repairs(r.repairs),
            ),
            type=REFUSED,
            non_retryable=True,
        )
    if kind == "ambiguous":
        a = outcome.ambiguous
        raise ApplicationError(
            a.reason,
            _details(key, "AMBIGUOUS", a.reason, changes=_changes(a.changes)),
            type=AMBIGUOUS,
            non_retryable=True,
        )
    if kind == "applied_twice":
        t = outcome.applied_twice
        found = [json_value(f) for f in t.found_json]
        ids = [_compact(v["id"]) if isinstance(v, dict) and "id" in v else _compact(v) for v in found]
        message = f"{t.reason} (found: {', '.join(ids)})"
        raise ApplicationError(
            message,
            _details(key, "APPLIED_TWICE", message),
            type=APPLIED_TWICE,
            non_retryable=True,
        )
    if kind == "failed":
        f = outcome.failed
        raise ApplicationError(
            f"{f.code}: {f.message}",
            _details(key, "FAILED", f.message, target_code=f.code),
            type=FAILED,
            non_retryable=True,
        )
    if kind in ("in_flight", "retry"):
        m = getattr(outcome, kind)
        raise ApplicationError(m.reason, type=IN_FLIGHT, next_retry_delay=_delay(m))
    if kind == "superseded":
        raise ApplicationError(
            outcome.superseded.reason, type=IN_FLIGHT, next_retry_delay=SUPERSEDED_DELAY
        )
    # An outcome a newer gate added (or none at all): stop the retries and let a person look,
    # rather than guess whether it is final.
    raise ApplicationError(
        f"the gate answered an outcome this worker does not know ({kind!r}): "
        "regenerate the stubs from the server's proto and update outcomes.py",
        type=SERVER,
        non_retryable=True,
    )


def is_retryable_code(code_name: str) -> bool:
    """Whether a gRPC status code (its ``grpc.StatusCode`` name) is worth another attempt."""
    return code_name in RETRYABLE_CODES


def rpc_failure(code_name: str, message: str) -> ApplicationError:
    """The activity failure for a gRPC error from the gate server (``code_name`` is the
    ``grpc.StatusCode`` name, e.g. ``UNAVAILABLE``)."""
    if is_retryable_code(code_name):
        return ApplicationError(
            f"the gate server could not be asked ({code_name}): {message}",
            type=UNAVAILABLE,
            next_retry_delay=UNAVAILABLE_DELAY,
        )
    return ApplicationError(
        f"the gate server answered {code_name}: {message}",
        type=SERVER,
        non_retryable=True,
    )


def _failure_details(details: Sequence[Any]) -> Optional[Mapping[str, Any]]:
    """The first detail, when it reads as ``FailureDetails`` (as Rust's ``app.details`` does)."""
    if not details:
        return None
    d = details[0]
    needed = ("key", "outcome", "reason", "changes", "repairs")
    if not isinstance(d, Mapping) or not all(k in d for k in needed):
        return None
    return d


def report_of_failure(cause: Optional[BaseException], message: str) -> dict[str, Any]:
    """The report a failed refund activity closes the workflow with (``report_of`` in
    workflow.rs). ``cause`` is the activity error's cause, ``message`` the activity error's own
    message (used when there is no cause)."""
    if isinstance(cause, ApplicationError):
        d = _failure_details(cause.details)
        if d is not None:
            outcome = str(d["outcome"])
            return report(
                outcome if outcome in FINAL_OUTCOMES else "ERROR",
                refusal=d.get("refusal"),
                code=d.get("target_code"),
                detail=str(d["reason"]),
                repairs=[str(r.get("kind")) for r in d["repairs"] if isinstance(r, Mapping)],
            )
        return report("ERROR", code=cause.type or None, detail=cause.message)
    if isinstance(cause, FailureError):
        return report("ERROR", detail=cause.message)
    if cause is not None:
        return report("ERROR", detail=str(cause))
    return report("ERROR", detail=message)
