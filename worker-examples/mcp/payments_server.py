"""An MCP server over a Stripe-shaped payments API: the server an agent would call refunds with.

Tools: get_order (what was paid and refunded on a payment), create_refund, find_refund (the
refunds made under an idempotency key). It knows nothing of Interlock: put `interlock
mcp-proxy` in front of it to gate create_refund (interlock.mcp.toml beside this file).

Environment: STRIPE_API_BASE (default http://127.0.0.1:8787), STRIPE_SECRET_KEY (default
sk_test_local). For tests, MCP_PAYMENTS_HOLD_DIR names a directory where a file
`hold_<point>` (points: read, before_send, after_send) makes the tool wait at that point, after
writing its process id to `at_<point>`, until the hold file is removed.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

API = os.environ.get("STRIPE_API_BASE", "http://127.0.0.1:8787").rstrip("/")
SECRET = os.environ.get("STRIPE_SECRET_KEY", "sk_test_local")
HOLD_DIR = os.environ.get("MCP_PAYMENTS_HOLD_DIR")

server = MCPServer("payments")


class ApiError(Exception):
    """The payments API answered an error, or could not be reached."""

    def __init__(self, status: int | None, body: dict):
        super().__init__(body.get("error", {}).get("message") or f"HTTP {status}")
        self.status = status
        self.body = body

    @property
    def definite(self) -> bool:
        # A 4xx is the API refusing the request: nothing was done. Not so a 409 (the same
        # idempotency key is in use by a request still under way) or a 429 (rate limited; the
        # request may be retried), nor a 5xx or no answer at all, which may come after the
        # refund was made.
        return self.status is not None and 400 <= self.status < 500 and self.status not in (409, 429)


def _call(method: str, path: str, form: dict | None = None, key: str | None = None) -> dict:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(API + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {SECRET}")
    if key:
        req.add_header("Idempotency-Key", key)
    try:
        # Well under the proxy's send timeout (30 s by default): a call that cannot finish in
        # time gives up here rather than land after the proxy gave up on it.
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        try:
            body = json.loads(e.read())
        except ValueError:
            body = {}
        raise ApiError(e.code, body) from None
    except (urllib.error.URLError, OSError) as e:
        raise ApiError(None, {"error": {"message": str(e)}}) from None


async def api(method: str, path: str, form: dict | None = None, key: str | None = None) -> dict:
    return await anyio.to_thread.run_sync(lambda: _call(method, path, form, key))


async def hold(point: str) -> None:
    """Wait at `point` while the test holds it (see the module's docstring)."""
    if not HOLD_DIR:
        return
    flag = Path(HOLD_DIR) / f"hold_{point}"
    if not flag.exists():
        return
    (Path(HOLD_DIR) / f"at_{point}").write_text(str(os.getpid()))
    while flag.exists():
        await anyio.sleep(0.02)


def answer(value: dict) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(value))], structured_content=value
    )


def failure(e: ApiError) -> CallToolResult:
    value = {"error": e.body.get("error", {"message": str(e)}), "status": e.status, "definite": e.definite}
    return CallToolResult(
        content=[TextContent(type="text", text=f"the payments API refused: {e}")],
        structured_content=value,
        is_error=True,
    )


async def all_refunds(query: dict) -> list[dict]:
    refunds, after = [], None
    while True:
        q = dict(query, limit=100, **({"starting_after": after} if after else {}))
        page = await api("GET", "/v1/refunds?" + urllib.parse.urlencode(q))
        refunds += page["data"]
        if not page.get("has_more") or not page["data"]:
            return refunds
        after = page["data"][-1]["id"]


@server.tool()
async def get_order(payment_intent: str, excluding: str | None = None) -> CallToolResult:
    """What was paid on a payment and how much of it was refunded (optionally leaving out the
    refund made under the idempotency key `excluding`)."""
    await hold("read")
    try:
        paid = await api("GET", f"/v1/payment_intents/{urllib.parse.quote(payment_intent)}")
        refunds = await all_refunds({"payment_intent": payment_intent})
    except ApiError as e:
        return failure(e)
    refunded = sum(
        r["amount"]
        for r in refunds
        if r.get("status") != "failed"
        and not (excluding and (r.get("metadata") or {}).get("interlock_key") == excluding)
    )
    return answer(
        {
            "payment_intent": payment_intent,
            "amount": paid["amount"],
            "refunded": refunded,
            "refundable": paid["amount"] - refunded,
        }
    )


@server.tool()
async def create_refund(
    payment_intent: str,
    amount: int,
    request_id: str,
    approval: str,
    idempotency_key: str | None = None,
) -> CallToolResult:
    """Refund `amount` (cents) of a payment, for the customer request `request_id`, under the
    approval `approval`. With `idempotency_key`, a repeat with the same key refunds nothing more."""
    await hold("before_send")
    form = {
        "payment_intent": payment_intent,
        "amount": str(amount),
        "metadata[request_id]": request_id,
        "metadata[approval]": approval,
    }
    if idempotency_key:
        form["metadata[interlock_key]"] = idempotency_key
    try:
        refund = await api("POST", "/v1/refunds", form, key=idempotency_key)
    except ApiError as e:
        return failure(e)
    await hold("after_send")
    return answer(
        {"id": refund["id"], "amount": refund["amount"], "status": refund["status"], "payment_intent": payment_intent}
    )


@server.tool()
async def find_refund(idempotency_key: str) -> CallToolResult:
    """The refunds made under an idempotency key (none, one, or — if something went wrong — more)."""
    try:
        refunds = await all_refunds({})
    except ApiError as e:
        return failure(e)
    found = [r for r in refunds if (r.get("metadata") or {}).get("interlock_key") == idempotency_key]
    return answer({"result": [{"id": r["id"], "amount": r["amount"], "status": r["status"]} for r in found]})


if __name__ == "__main__":
    server.run("stdio")
