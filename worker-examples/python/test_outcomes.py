"""Tests of the Python worker's outcome mapping (``outcomes.py``), with no server: each gate
outcome becomes the report or the typed failure the Rust worker's ``interlock_temporal::verdict``
and ``report_of`` give, and each gRPC status is retried or not as documented.

    python3 -m unittest        # in worker-examples/python
"""

from __future__ import annotations

import json
import unittest
from datetime import timedelta
from typing import Any

import grpc
import temporalio.api.failure.v1
from google.protobuf.duration_pb2 import Duration
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, TimeoutError, TimeoutType

import gen_stubs

gen_stubs.ensure_importable()

import outcomes  # noqa: E402
from interlock.v1 import gate_pb2  # noqa: E402

KEY = "req_1"

# RefundReport's fields (worker_examples::model::RefundReport), as serde names them.
REPORT_FIELDS = {"outcome", "via", "refusal", "code", "refund_id", "detail", "repairs"}
# FailureDetails' fields (interlock_temporal::FailureDetails).
DETAILS_FIELDS = {"key", "outcome", "refusal", "target_code", "reason", "changes", "repairs"}


def committed(via: int, result: Any, replayed: bool = False) -> Any:
    return gate_pb2.Outcome(
        committed=gate_pb2.Committed(via=via, result_json=json.dumps(result), replayed=replayed)
    )


def refused() -> Any:
    return gate_pb2.Outcome(
        refused=gate_pb2.Refused(
            code=gate_pb2.REFUSAL_CODE_STALE_PREMISE_AT_RECOVERY,
            reason="moved",
            changes=[gate_pb2.Change(field="refunded_by_others", was_json="0", now_json="2000")],
            repairs=[
                gate_pb2.Repair(
                    kind="reduce_amount",
                    summary="refund what is left",
                    payload_json='{"payment_intent":"pi_1","amount":500,"currency":"usd"}',
                )
            ],
        )
    )


def failure_of(outcome: Any) -> ApplicationError:
    try:
        outcomes.verdict(KEY, outcome)
    except ApplicationError as e:
        return e
    raise AssertionError("verdict answered a report, not a failure")


def through_temporal(err: BaseException) -> BaseException:
    """``err`` as the workflow sees it: to a Temporal failure proto and back, details encoded by
    the default JSON payload converter."""
    conv = DataConverter.default
    proto = temporalio.api.failure.v1.Failure()
    conv.failure_converter.to_failure(err, conv.payload_converter, proto)
    return conv.failure_converter.from_failure(proto, conv.payload_converter)


class Commit(unittest.TestCase):
    def test_a_commit_is_a_report_naming_how_it_is_known_and_the_refund(self) -> None:
        r = outcomes.verdict(KEY, committed(gate_pb2.VIA_IDEMPOTENT_RESEND, {"id": "re_1"}))
        self.assertEqual(
            r,
            {
                "outcome": "COMMITTED",
                "via": "idempotent_resend",
                "refusal": None,
                "code": None,
                "refund_id": "re_1",
                "detail": "",
                "repairs": [],
            },
        )

    def test_a_replayed_commit_says_it_came_from_the_journal(self) -> None:
        r = outcomes.verdict(KEY, committed(gate_pb2.VIA_FIRST_SEND, {"id": "re_1"}, True))
        self.assertEqual((r["via"], r["detail"]), ("first_send", "replayed from the journal"))

    def test_a_commit_whose_answer_names_no_string_id_has_no_refund_id(self) -> None:
        for result in ({"id": 7}, {"object": "refund"}, ["re_1"], None):
            with self.subTest(result=result):
                r = outcomes.verdict(KEY, committed(gate_pb2.VIA_FOUND_BY_LOOKUP, result))
                self.assertIsNone(r["refund_id"])

    def test_reports_have_exactly_the_rust_reports_fields(self) -> None:
        r = outcomes.verdict(KEY, committed(gate_pb2.VIA_FIRST_SEND, {"id": "re_1"}))
        self.assertEqual(set(r), REPORT_FIELDS)
        self.assertEqual(set(outcomes.report("ERROR")), REPORT_FIELDS)


class FinalFailures(unittest.TestCase):
    def test_a_refusal_stops_retries_with_typed_details(self) -> None:
        f = failure_of(refused())
        self.assertEqual((f.type, f.non_retryable), (outcomes.REFUSED, True))
        self.assertEqual(f.message, "stale_premise_at_recovery: moved")
        self.assertEqual(
            list(f.details),
            [
                {
                    "key": KEY,
                    "outcome": "REFUSED",
                    "refusal": "stale_premise_at_recovery",
                    "target_code": None,
                    "reason": "moved",
                    "changes": [{"field": "refunded_by_others", "was": 0, "now": 2000}],
                    "repairs": [
                        {
                            "kind": "reduce_amount",
                            "summary": "refund what is left",
                            "payload": {
                                "payment_intent": "pi_1",
                                "amount": 500,
                                "currency": "usd",
                            },
                        }
                    ],
                }
            ],
        )

    def test_an_ambiguity_stops_retries_with_the_premises_that_moved(self) -> None:
        f = failure_of(
            gate_pb2.Outcome(
                ambiguous=gate_pb2.Ambiguous(
                    reason="tier 3",
                    changes=[gate_pb2.Change(field="eligible", was_json="true", now_json="")],
                )
            )
        )
        self.assertEqual((f.type, f.non_retryable, f.message), (outcomes.AMBIGUOUS, True, "tier 3"))
        d = f.details[0]
        self.assertEqual(set(d), DETAILS_FIELDS)
        self.assertEqual((d["outcome"], d["refusal"], d["repairs"]), ("AMBIGUOUS", None, []))
        self.assertEqual(d["changes"], [{"field": "eligible", "was": True, "now": None}])

    def test_a_failure_at_the_target_stops_retries_naming_its_code(self) -> None:
        f = failure_of(
            gate_pb2.Outcome(failed=gate_pb2.Failed(code="charge_disputed", message="disputed"))
        )
        self.assertEqual((f.type, f.non_retryable), (outcomes.FAILED, True))
        self.assertEqual(f.message, "charge_disputed: disputed")
        d = f.details[0]
        self.assertEqual(
            (d["outcome"], d["target_code"], d["reason"]), ("FAILED", "charge_disputed", "disputed")
        )

    def test_applied_twice_stops_retries_naming_each_refund_as_rust_prints_it(self) -> None:
        f = failure_of(
            gate_pb2.Outcome(
                applied_twice=gate_pb2.AppliedTwice(
                    found_json=['{"id": "re_1"}', '{"id": "re_2"}', '{"x": [1, 2]}'],
                    reason="two under one key",
                )
            )
        )
        self.assertEqual((f.type, f.non_retryable), (outcomes.APPLIED_TWICE, True))
        # serde_json's Value::to_string: ids keep their quotes, other values are compact JSON.
        want = 'two under one key (found: "re_1", "re_2", {"x":[1,2]})'
        self.assertEqual(f.message, want)
        self.assertEqual((f.details[0]["outcome"], f.details[0]["reason"]), ("APPLIED_TWICE", want))

    def test_an_outcome_this_worker_does_not_know_stops_retries(self) -> None:
        f = failure_of(gate_pb2.Outcome())
        self.assertEqual((f.type, f.non_retryable), (outcomes.SERVER, True))


class NotYet(unittest.TestCase):
    def test_in_flight_and_retry_are_retried_after_the_gates_delay(self) -> None:
        wait = Duration(seconds=0, nanos=700_000_000)
        for o in (
            gate_pb2.Outcome(in_flight=gate_pb2.InFlight(retry_after=wait, reason="held")),
            gate_pb2.Outcome(retry=gate_pb2.Retry(retry_after=wait, reason="held")),
        ):
            with self.subTest(kind=o.WhichOneof("kind")):
                f = failure_of(o)
                self.assertEqual((f.type, f.non_retryable), (outcomes.IN_FLIGHT, False))
                self.assertEqual(f.next_retry_delay, timedelta(milliseconds=700))
                self.assertEqual((f.message, list(f.details)), ("held", []))

    def test_in_flight_without_a_delay_leaves_it_to_the_retry_policy(self) -> None:
        f = failure_of(gate_pb2.Outcome(in_flight=gate_pb2.InFlight(reason="held")))
        self.assertIsNone(f.next_retry_delay)
        self.assertFalse(f.non_retryable)

    def test_a_superseded_attempt_is_retried_after_200_ms(self) -> None:
        f = failure_of(gate_pb2.Outcome(superseded=gate_pb2.Superseded(reason="taken")))
        self.assertEqual((f.type, f.non_retryable), (outcomes.IN_FLIGHT, False))
        self.assertEqual(f.next_retry_delay, timedelta(milliseconds=200))


class Names(unittest.TestCase):
    def test_every_via_and_refusal_code_is_named_as_rusts_as_str_names_it(self) -> None:
        for enum, prefix, table in (
            (gate_pb2.Via, "VIA_", outcomes.VIA),
            (gate_pb2.RefusalCode, "REFUSAL_CODE_", outcomes.REFUSAL),
        ):
            named = {
                v.number: v.name[len(prefix) :].lower()
                for v in enum.DESCRIPTOR.values
                if v.number != 0
            }
            self.assertEqual(table, named)


class RpcErrors(unittest.TestCase):
    RETRIED = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL",
               "UNKNOWN", "CANCELLED"}

    def test_a_gate_server_that_cannot_be_reached_is_retried_after_a_second(self) -> None:
        for name in self.RETRIED:
            with self.subTest(code=name):
                f = outcomes.rpc_failure(name, "connection reset")
                self.assertEqual((f.type, f.non_retryable), (outcomes.UNAVAILABLE, False))
                self.assertEqual(f.next_retry_delay, timedelta(seconds=1))

    def test_a_call_the_gate_server_rejects_is_not_retried_and_names_the_code(self) -> None:
        for name in ("INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "UNAUTHENTICATED",
                     "PERMISSION_DENIED", "UNIMPLEMENTED", "OUT_OF_RANGE", "ALREADY_EXISTS"):
            with self.subTest(code=name):
                f = outcomes.rpc_failure(name, "no target refunds_t9")
                self.assertEqual((f.type, f.non_retryable), (outcomes.SERVER, True))
                self.assertIn(name, f.message)
                self.assertIn("no target refunds_t9", f.message)

    def test_every_grpc_status_code_is_retried_exactly_when_listed(self) -> None:
        for code in grpc.StatusCode:
            if code is grpc.StatusCode.OK:
                continue
            with self.subTest(code=code.name):
                self.assertEqual(outcomes.is_retryable_code(code.name), code.name in self.RETRIED)


class Reports(unittest.TestCase):
    def test_a_final_failure_through_temporal_becomes_the_report_of_its_details(self) -> None:
        seen = through_temporal(failure_of(refused()))
        self.assertEqual(
            outcomes.report_of_failure(seen, "Activity task failed"),
            {
                "outcome": "REFUSED",
                "via": None,
                "refusal": "stale_premise_at_recovery",
                "code": None,
                "refund_id": None,
                "detail": "moved",
                "repairs": ["reduce_amount"],
            },
        )

    def test_a_target_failure_reports_its_code(self) -> None:
        f = failure_of(
            gate_pb2.Outcome(failed=gate_pb2.Failed(code="charge_disputed", message="disputed"))
        )
        r = outcomes.report_of_failure(through_temporal(f), "")
        self.assertEqual(
            (r["outcome"], r["code"], r["detail"], r["refusal"]),
            ("FAILED", "charge_disputed", "disputed", None),
        )

    def test_retries_run_out_as_an_error_named_by_the_failure_type(self) -> None:
        f = failure_of(gate_pb2.Outcome(in_flight=gate_pb2.InFlight(reason="held")))
        self.assertEqual(
            outcomes.report_of_failure(through_temporal(f), "Activity task failed"),
            outcomes.report("ERROR", code=outcomes.IN_FLIGHT, detail="held"),
        )

    def test_an_untyped_application_error_reports_no_code(self) -> None:
        r = outcomes.report_of_failure(ApplicationError("boom"), "")
        self.assertEqual((r["outcome"], r["code"], r["detail"]), ("ERROR", None, "boom"))

    def test_a_timeout_reports_an_error_with_no_code(self) -> None:
        t = TimeoutError("activity Heartbeat timeout", type=TimeoutType.HEARTBEAT,
                         last_heartbeat_details=[])
        r = outcomes.report_of_failure(t, "Activity task timed out")
        self.assertEqual(r, outcomes.report("ERROR", detail="activity Heartbeat timeout"))

    def test_a_failure_without_a_cause_reports_the_activitys_message(self) -> None:
        r = outcomes.report_of_failure(None, "Activity task failed")
        self.assertEqual(r, outcomes.report("ERROR", detail="Activity task failed"))


class Requests(unittest.TestCase):
    def test_a_charge_is_refunded_by_charge_and_anything_else_by_payment_intent(self) -> None:
        req = {"request_id": "r", "amount": 2000, "currency": "usd", "lease": "l",
               "system": "gated_py_t1"}
        self.assertEqual(
            outcomes.payload_of({**req, "payment": "ch_1"}),
            {"charge": "ch_1", "amount": 2000, "currency": "usd"},
        )
        self.assertEqual(
            outcomes.payload_of({**req, "payment": "pi_1"}),
            {"payment_intent": "pi_1", "amount": 2000, "currency": "usd"},
        )

    def test_only_the_python_gated_systems_run_here(self) -> None:
        self.assertEqual(outcomes.tier_of("gated_py_t1"), "t1")
        self.assertEqual(outcomes.tier_of("gated_py_t2"), "t2")
        self.assertEqual(outcomes.tier_of("gated_http_t3"), "http_t3")
        for other in ("naive", "gated_t1", "gated_py_t3"):
            with self.subTest(system=other), self.assertRaises(ApplicationError) as cm:
                outcomes.tier_of(other)
            self.assertTrue(cm.exception.non_retryable)


class Settings(unittest.TestCase):
    def test_the_temporal_address_loses_its_scheme_and_has_a_default(self) -> None:
        import refund_worker

        self.assertEqual(
            refund_worker.temporal_address({"TEMPORAL_ADDRESS": "http://127.0.0.1:7244"}),
            "127.0.0.1:7244",
        )
        self.assertEqual(refund_worker.temporal_address({}), "127.0.0.1:7233")

    def test_temporal_settings_are_temporal_s_own_variables(self) -> None:
        import refund_worker

        s = refund_worker.temporal_settings(
            {
                "TEMPORAL_ADDRESS": "ns.acct.tmprl.cloud:7233",
                "TEMPORAL_NAMESPACE": "ns.acct",
                "TEMPORAL_API_KEY": "key",
                "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml",
            }
        )
        self.assertEqual(s["target_host"], "ns.acct.tmprl.cloud:7233")
        self.assertEqual(s["namespace"], "ns.acct")
        self.assertEqual(s["api_key"], "key")
        self.assertTrue(s["tls"], "an API key turns TLS on")
        plain = refund_worker.temporal_settings(
            {"TEMPORAL_ADDRESS": "http://127.0.0.1:7244", "TEMPORAL_CONFIG_FILE": "/nonexistent/t.toml"}
        )
        self.assertEqual(plain["target_host"], "127.0.0.1:7244")

    def test_the_gate_token_is_sent_as_a_bearer_and_systems_pick_their_targets(self) -> None:
        import refund_worker

        s = refund_worker.gate_settings(
            {"INTERLOCK_GATE_TOKEN": "tok", "INTERLOCK_GATE_TARGET_T2": "refunds_b"}
        )
        self.assertEqual(tuple(s.metadata()), (("authorization", "Bearer tok"),))
        self.assertEqual(
            (s.target("gated_py_t1"), s.target("gated_py_t2"), s.address),
            ("refunds", "refunds_b", "127.0.0.1:50051"),
        )
        self.assertEqual(s.target("gated_http_t2"), "refunds_http_t2")
        self.assertEqual(tuple(refund_worker.gate_settings({}).metadata()), ())


if __name__ == "__main__":
    unittest.main()
