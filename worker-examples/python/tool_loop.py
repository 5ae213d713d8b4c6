"""An agent's tool loop whose refund tool goes through the gate, in the shape of OpenAI's and
Anthropic's function calling, driven by a scripted model (no network, no model).

The model is asked to refund part of a payment. It reads the order (``get_order``), decides the
refund on what it read, and calls ``create_refund`` — a function decorated with
``gate.effect`` (``interlock_gate.py``), so the gate server carries it out: journaled first,
under the approval, on the facts the model saw, at most once. When the gate refuses because the
facts moved (someone refunded by hand meanwhile), the tool answers with what changed and what
would still fit, and the model sends the repaired call — a new decision on the facts as they
are now. ``gate.recover()`` runs first, so a loop killed mid-refund and started again settles
what it left in flight before deciding anything.

    python3 tool_loop.py --gate unix:/tmp/gate.sock --payments http://127.0.0.1:8787 \\
        --payment pi_123 --amount 2000 --request req-1 --approval lease-1 [--shape anthropic]

Prints the conversation as JSON lines on stdout, one message each, and exits 0 when the refund
landed, 1 when it did not (refused, failed, or not settled yet: run it again, nothing is sent
twice), 2 on a usage error or when the gate server could not be asked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
import urllib.request
from typing import Any, Callable

from interlock_gate import Gate, GateError, Receipt, Refused


def hand_refund(base: str, payment_intent: str, cents: int) -> None:
    """A refund made by a person, outside the agent (the local payments API's admin endpoint)."""
    body = json.dumps({"payment_intent": payment_intent, "amount": cents}).encode()
    req = urllib.request.Request(base.rstrip("/") + "/admin/refunds/hand", data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    urllib.request.urlopen(req, timeout=10).close()


def payments_get(base: str, secret: str, path: str) -> dict[str, Any]:
    req = urllib.request.Request(base.rstrip("/") + path)
    req.add_header("Authorization", f"Bearer {secret}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


class ScriptedModel:
    """Stands in for a model: reads the conversation and answers in the chosen shape."""

    def __init__(self, shape: str, task: dict[str, Any]):
        self.shape = shape
        self.task = task
        self.calls = 0

    def _call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        call_id = f"call_{self.calls}"
        if self.shape == "anthropic":
            return {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}],
            }
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }

    def _say(self, text: str) -> dict[str, Any]:
        if self.shape == "anthropic":
            return {"role": "assistant", "content": [{"type": "text", "text": text}]}
        return {"role": "assistant", "content": text}

    def respond(self, last_tool: str | None, result: dict[str, Any] | None) -> dict[str, Any]:
        t = self.task
        refund = {
            "payment_intent": t["payment"],
            "amount": t["amount"],
            "request_id": t["request"],
            "approval": t["approval"],
        }
        if last_tool is None:
            return self._call("get_order", {"payment_intent": t["payment"]})
        assert result is not None
        if last_tool == "get_order":
            if result["refundable"] < t["amount"]:
                return self._say(f"Only {result['refundable']} is left to refund; I will not refund {t['amount']}.")
            return self._call("create_refund", refund)
        if result.get("ok"):
            return self._say(f"Refunded {t['amount']} (refund {result['receipt']['result'].get('id')}).")
        repairs = result.get("repairs") or []
        if result.get("outcome") == "REFUSED" and repairs and self.calls < 6:
            # The refusal says what moved and what would still fit: decide again on that.
            return self._call("create_refund", dict(refund, amount=repairs[0]["payload"]["amount"]))
        if result.get("outcome") == "IN_FLIGHT":
            return self._say(f"The refund is not settled yet: {result.get('message')}")
        return self._say(f"The refund did not go through: {result.get('message')}")


def tool_calls(message: dict[str, Any], shape: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The (id, name, arguments) of each tool call in a model's message."""
    if shape == "anthropic":
        return [
            (b["id"], b["name"], b["input"])
            for b in message.get("content") or []
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
    return [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]


def tool_result(call_id: str, content: dict[str, Any], shape: str) -> dict[str, Any]:
    """The message that answers a tool call."""
    text = json.dumps(content)
    if shape == "anthropic":
        return {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text}],
        }
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def as_tool_answer(call: Callable[[], Receipt]) -> dict[str, Any]:
    """A gated call's receipt, or its refusal with the changes and repairs, as a tool result."""
    try:
        r = call()
        return {"ok": True, "receipt": {"key": r.key, "via": r.via, "replayed": r.replayed, "result": r.result}}
    except Refused as e:
        return {"ok": False, "outcome": e.outcome, "code": e.code, "message": e.message,
                "changes": e.changes, "repairs": e.repairs}
    except GateError as e:
        return {"ok": False, "outcome": e.outcome, "message": e.message}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gate", default=os.environ.get("INTERLOCK_GATE", "127.0.0.1:50051"))
    p.add_argument("--token", default=os.environ.get("INTERLOCK_SERVE_TOKEN"))
    p.add_argument("--target", default="refunds", help="the gate server's refunds target")
    p.add_argument("--payments", default=os.environ.get("STRIPE_API_BASE", "http://127.0.0.1:8787"))
    p.add_argument("--secret", default=os.environ.get("STRIPE_SECRET_KEY", "sk_test_local"))
    p.add_argument("--payment", required=True)
    p.add_argument("--amount", type=int, required=True)
    p.add_argument("--request", required=True)
    p.add_argument("--approval", required=True)
    p.add_argument("--shape", choices=["openai", "anthropic"], default="openai")
    p.add_argument(
        "--hand-refund",
        type=int,
        metavar="CENTS",
        help="after the model read the order, a person refunds CENTS by hand (through the local "
        "payments API's admin endpoint), to show a refusal and its repair",
    )
    args = p.parse_args(argv)

    gate = Gate(args.gate, token=args.token)
    # What the model read, by payment: the facts its refund is decided on.
    seen: dict[str, dict[str, Any]] = {}

    @gate.effect(
        target=args.target,
        key="request_id",
        lease="approval",
        premises=lambda payment_intent, **_: seen.get(payment_intent),
    )
    def create_refund(payment_intent: str, amount: int, request_id: str, approval: str) -> dict:
        return {"payment_intent": payment_intent, "amount": amount, "currency": "usd"}

    def get_order(payment_intent: str) -> dict[str, Any]:
        paid = payments_get(args.payments, args.secret, f"/v1/payment_intents/{urllib.parse.quote(payment_intent)}")
        refunds = payments_get(args.payments, args.secret, f"/v1/refunds?payment_intent={urllib.parse.quote(payment_intent)}&limit=100")
        refunded = sum(r["amount"] for r in refunds["data"] if r.get("status") != "failed")
        seen[payment_intent] = {"amount_paid": paid["amount"], "refunded_by_others": refunded}
        if args.hand_refund:
            hand_refund(args.payments, payment_intent, args.hand_refund)
            args.hand_refund = None
        return {"payment_intent": payment_intent, "amount": paid["amount"], "refunded": refunded,
                "refundable": paid["amount"] - refunded}

    def run_create_refund(**a: Any) -> dict[str, Any]:
        answer = as_tool_answer(lambda: create_refund(**a))
        for c in answer.get("changes") or []:
            # The refusal told the model the facts as the gate read them: its next decision
            # stands on those.
            seen.setdefault(a["payment_intent"], {})[c["field"]] = c["now"]
        return answer

    tools = {"get_order": get_order, "create_refund": run_create_refund}

    def emit(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    try:
        for key, outcome in gate.recover():
            emit({"role": "system", "content": f"recovered {key}: {outcome}"})
        model = ScriptedModel(args.shape, vars(args))
        last_tool, result = None, None
        for _ in range(8):
            message = model.respond(last_tool, result)
            emit(message)
            calls = tool_calls(message, args.shape)
            if not calls:
                return 0 if "Refunded" in json.dumps(message) else 1
            for call_id, name, arguments in calls:
                result = tools[name](**arguments)
                last_tool = name
                emit(tool_result(call_id, result, args.shape))
        return 1
    except GateError as e:
        sys.stderr.write(f"tool_loop: {e}\n")
        return 2
    finally:
        gate.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
