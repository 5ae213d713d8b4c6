"""Call one tool of an MCP server from the shell, as an agent's MCP client would: start the
server command given after ``--`` over stdio, do the handshake, call the tool, print what came
back as one line of JSON (the tool's text, whether it is a tool error, and the gate's outcome
when ``interlock mcp-proxy`` answered), and exit 0 when a tool result came back, tool errors
included (a refusal is an answer); 1 when the call itself failed (a JSON-RPC error, the server
gone).

    python3 call.py create_refund '{"payment_intent": "pi_1", ...}' -- \\
        interlock mcp-proxy --config interlock.mcp.toml -- python3 payments_server.py
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def call(tool: str, arguments: dict, command: list[str]) -> int:
    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(tool, arguments)
    text = " ".join(c.text for c in result.content if getattr(c, "type", None) == "text")
    outcome = (result.meta or {}).get("interlock/outcome", {})
    print(json.dumps({"outcome": outcome.get("label"), "isError": bool(result.is_error), "text": text}))
    return 0


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 2:
        sys.stderr.write("usage: call.py TOOL ARGUMENTS_JSON -- SERVER COMMAND...\n")
        return 2
    tool, arguments, command = argv[0], json.loads(argv[1]), argv[3:]
    if not command:
        sys.stderr.write("call.py: no server command after --\n")
        return 2
    try:
        return anyio.run(call, tool, arguments, command)
    except Exception as e:  # the MCP client raises its own errors and exception groups
        sys.stderr.write(f"call.py: {tool} failed: {e!r}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
