"""The decorator's client without a server: how outcomes become receipts and typed errors, which
effect a call is, and how the decorator reads its key and approval from the call's arguments.

    python3 -m unittest test_interlock_gate
"""

from __future__ import annotations

import unittest
from unittest import mock

import interlock_gate as ig
from interlock.v1 import gate_pb2


def outcome(**kind) -> gate_pb2.Outcome:
    return gate_pb2.Outcome(**kind)


class Settle(unittest.TestCase):
    def test_a_commit_is_a_receipt_with_the_targets_result(self) -> None:
        r = ig.settle("k", "refunds", outcome(committed=gate_pb2.Committed(via=2, result_json='{"id": "re_1"}', replayed=True)))
        self.assertEqual(r, ig.Receipt("k", "refunds", "idempotent_resend", {"id": "re_1"}, True))

    def test_a_refusal_carries_what_changed_and_what_would_still_fit(self) -> None:
        refused = gate_pb2.Refused(
            code=1,
            reason="moved",
            changes=[gate_pb2.Change(field="refunded_by_others", was_json="0", now_json="1000")],
            repairs=[gate_pb2.Repair(kind="still_fits", summary="fits", payload_json='{"amount": 2000}')],
        )
        with self.assertRaises(ig.Refused) as e:
            ig.settle("k", "refunds", outcome(refused=refused))
        self.assertEqual(e.exception.code, "stale_premise")
        self.assertEqual(e.exception.changes, [{"field": "refunded_by_others", "was": 0, "now": 1000}])
        self.assertEqual(e.exception.repairs[0]["payload"], {"amount": 2000})

    def test_every_other_outcome_is_its_own_error(self) -> None:
        cases = [
            (dict(failed=gate_pb2.Failed(code="card", message="no")), ig.Failed),
            (dict(ambiguous=gate_pb2.Ambiguous(reason="?")), ig.Ambiguous),
            (dict(applied_twice=gate_pb2.AppliedTwice(found_json=['{"id": "a"}', '{"id": "b"}'])), ig.AppliedTwice),
            (dict(in_flight=gate_pb2.InFlight(reason="busy")), ig.InFlight),
            (dict(retry=gate_pb2.Retry(reason="read failed")), ig.InFlight),
            (dict(superseded=gate_pb2.Superseded(reason="stopped")), ig.InFlight),
        ]
        for kind, error in cases:
            with self.subTest(kind=next(iter(kind))):
                with self.assertRaises(error):
                    ig.settle("k", "refunds", outcome(**kind))
        with self.assertRaises(ig.GateError):
            ig.settle("k", "refunds", gate_pb2.Outcome())


class WhichEffect(unittest.TestCase):
    first = {"payload": {"amount": 2000}, "premises": {"refunded_by_others": 0}}

    def test_a_request_carried_out_or_under_way_is_always_the_same_effect(self) -> None:
        for status in (gate_pb2.EFFECT_STATUS_COMMITTED, gate_pb2.EFFECT_STATUS_IN_FLIGHT, gate_pb2.EFFECT_STATUS_AMBIGUOUS):
            self.assertTrue(ig.belongs(status, self.first, {"amount": 9999}, {"refunded_by_others": 5}))

    def test_a_new_decision_after_a_refusal_is_the_next_effect(self) -> None:
        refused = gate_pb2.EFFECT_STATUS_REFUSED
        self.assertTrue(ig.belongs(refused, self.first, {"amount": 2000}, {"refunded_by_others": 0}))
        self.assertFalse(ig.belongs(refused, self.first, {"amount": 1000}, {"refunded_by_others": 0}))
        self.assertFalse(ig.belongs(refused, self.first, {"amount": 2000}, {"refunded_by_others": 1000}))


    def test_a_refused_effect_that_landed_late_keeps_every_call(self) -> None:
        refused = gate_pb2.EFFECT_STATUS_REFUSED
        confirmed = [gate_pb2.Record(kind="PROPOSED"), gate_pb2.Record(kind="REFUSED"), gate_pb2.Record(kind="CONFIRMED")]
        self.assertTrue(ig.landed_late(confirmed))
        late = gate_pb2.Record(kind="LATE_RESULT", event_json='{"kind": "LATE_RESULT", "token": 1, "answer": {"done": {"id": "re_1"}}}')
        self.assertTrue(ig.landed_late([late]))
        unknown = gate_pb2.Record(kind="LATE_RESULT", event_json='{"kind": "LATE_RESULT", "token": 1, "answer": {"unknown": "timeout"}}')
        self.assertFalse(ig.landed_late([unknown]))
        self.assertTrue(ig.belongs(refused, self.first, {"amount": 1000}, {}, landed=True))

    def test_a_requests_effects_cannot_be_another_requests(self) -> None:
        self.assertEqual(ig.effect_key("req-9", 1), "req-9")
        self.assertEqual(ig.effect_key("r-1", 2), "r-1.2")
        self.assertNotEqual(ig.effect_key("r-1.2", 1), ig.effect_key("r-1", 2))
        self.assertEqual(ig.effect_key("a b/é", 1), "a%20b%2F%C3%A9")


class Decorator(unittest.TestCase):
    def test_the_key_and_the_approval_come_from_the_calls_arguments(self) -> None:
        gate = ig.Gate("127.0.0.1:1")
        with mock.patch.object(gate, "submit", return_value="receipt") as submit:

            @gate.effect(target="refunds", key="request_id", lease=lambda approval, **_: f"lease-{approval}")
            def refund(payment_intent: str, amount: int, request_id: str, approval: str = "a") -> dict:
                return {"payment_intent": payment_intent, "amount": amount}

            self.assertEqual(refund("pi_1", 500, request_id="req-1"), "receipt")
            submit.assert_called_once_with("refunds", "req-1", {"payment_intent": "pi_1", "amount": 500}, "lease-a", None)
            with self.assertRaises(ValueError):
                refund("pi_1", 500, request_id="")

            @gate.effect(target="refunds", key="missing", lease="approval")
            def wrong(approval: str) -> dict:
                return {}

            with self.assertRaises(TypeError):
                wrong("a")
        gate.close()


if __name__ == "__main__":
    unittest.main()
