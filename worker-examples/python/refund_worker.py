"""The Python refund worker: polls a Temporal task queue and runs ``RefundWorkflow`` with its
refund step one ``Submit`` call to the Interlock gate server, so a worker in any language gets the
gate's guarantees without linking it.

    python3 refund_worker.py

Configured by the environment:

* Temporal's own settings, as its CLI and SDKs read them: ``TEMPORAL_ADDRESS`` (``host:port``; a
  scheme such as ``http://`` is stripped; default ``localhost:7233``), ``TEMPORAL_NAMESPACE``
  (default ``default``), ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*`` and a profile file
  (``TEMPORAL_CONFIG_FILE``, ``TEMPORAL_PROFILE``).
* ``TASK_QUEUE``: default ``refunds``.
* ``INTERLOCK_GATE_ADDRESS``: the gate server's gRPC target (``127.0.0.1:50051``,
  ``unix:///path/gate.sock``); default ``127.0.0.1:50051``.
* ``INTERLOCK_GATE_TOKEN``: sent as ``authorization: Bearer <token>`` when set.
* ``INTERLOCK_GATE_TARGET_T1`` / ``INTERLOCK_GATE_TARGET_T2``: the server's target names for
  ``gated_py_t1`` / ``gated_py_t2``; defaults ``refunds`` (the example configuration's tier-1
  target) / ``refunds_t2``.
* OpenTelemetry's ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and the other ``OTEL_*`` variables): when set,
  each workflow task and activity is a span exported over OTLP/gRPC (service
  ``refund-worker-py`` unless ``OTEL_SERVICE_NAME`` says otherwise), and every call to the gate
  server carries its ``traceparent``, so the server's spans join the activity's trace.

Logs go to stderr. Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import Mapping, Optional

import grpc
from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.worker import Worker

import gen_stubs
import tracecontext

gen_stubs.ensure_importable()

from refund_activities import GateSettings, RefundActivities  # noqa: E402
from refund_workflow import RefundWorkflow  # noqa: E402

log = logging.getLogger("refund_worker")

# How long to keep trying to reach Temporal at start-up.
CONNECT_FOR = 30.0

# The harness SIGKILLs and restarts the gate server mid-refund: reconnect within ~100 ms–1 s
# rather than gRPC's default backoff (1 s growing to 120 s).
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


def temporal_address(env: Mapping[str, str]) -> str:
    """``TEMPORAL_ADDRESS`` as ``host:port``, a scheme stripped."""
    addr = env.get("TEMPORAL_ADDRESS") or "127.0.0.1:7233"
    if "://" in addr:
        addr = addr.split("://", 1)[1]
    return addr.rstrip("/")


def temporal_settings(env: Mapping[str, str]) -> dict:
    """``Client.connect``'s arguments from Temporal's environment configuration (address,
    namespace, API key, TLS, profile file), the address as ``host:port``."""
    config = dict(ClientConfig.load_client_connect_config(override_env_vars=dict(env)))
    config["target_host"] = temporal_address({"TEMPORAL_ADDRESS": config.get("target_host") or ""})
    return config


def gate_settings(env: Mapping[str, str]) -> GateSettings:
    """The gate server's address, token and target names from the environment."""
    return GateSettings(
        address=env.get("INTERLOCK_GATE_ADDRESS") or "127.0.0.1:50051",
        token=env.get("INTERLOCK_GATE_TOKEN") or None,
        target_t1=env.get("INTERLOCK_GATE_TARGET_T1") or "refunds",
        target_t2=env.get("INTERLOCK_GATE_TARGET_T2") or "refunds_t2",
    )


def channel(address: str) -> grpc.aio.Channel:
    """An insecure channel to the gate server that reconnects fast after a restart.

    On a unix socket grpcio sends the socket's path, percent-encoded, as the HTTP/2 authority,
    which the server's HTTP/2 stack rejects as malformed (every call fails with RST_STREAM
    PROTOCOL_ERROR); a plain authority is given instead."""
    options = list(CHANNEL_OPTIONS)
    if address.startswith("unix:"):
        options.append(("grpc.default_authority", "localhost"))
    return grpc.aio.insecure_channel(address, options=options)


async def connect(settings: dict, identity: str) -> Client:
    """A client as ``settings`` say, retrying for ``CONNECT_FOR`` seconds."""
    address = settings["target_host"]
    deadline = time.monotonic() + CONNECT_FOR
    while True:
        try:
            return await Client.connect(**settings, identity=identity)
        except Exception as e:  # the SDK raises RuntimeError; anything else is also worth a retry
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"connecting to Temporal at {address}: is `temporal server start-dev` "
                    f"running? ({e})"
                ) from e
            log.info("Temporal at %s not reachable yet (%s); retrying", address, e)
            await asyncio.sleep(0.5)


async def run(env: Mapping[str, str]) -> None:
    """Connect, register, and poll until SIGTERM or SIGINT."""
    temporal = temporal_settings(env)
    addr = f"{temporal['target_host']} namespace={temporal.get('namespace', 'default')}"
    queue = env.get("TASK_QUEUE") or "refunds"
    settings = gate_settings(env)
    identity = f"refund-worker-py@pid{os.getpid()}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A stop while Temporal is still out of reach ends the wait at once.
    connecting = asyncio.ensure_future(connect(temporal, identity))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({connecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not connecting.done():
        connecting.cancel()
        log.info("stopped before reaching Temporal")
        return
    client = connecting.result()
    export = tracecontext.start(env, "refund-worker-py")
    try:
        await poll(client, queue, identity, settings, addr, stop, export)
    finally:
        if export is not None:
            export.shutdown()


async def poll(
    client: Client,
    queue: str,
    identity: str,
    settings: GateSettings,
    addr: str,
    stop: asyncio.Event,
    export: Optional[tracecontext.Export],
) -> None:
    """Run the worker until ``stop`` is set."""
    async with channel(settings.address) as gate_channel:
        acts = RefundActivities(gate_channel, settings)
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[RefundWorkflow],
            activities=[acts.decide, acts.refund_gated],
            # No workflow cache: a killed worker's sticky queue would otherwise stall the
            # workflow (as in the Rust worker).
            max_cached_workflows=0,
            identity=identity,
            interceptors=export.interceptors if export is not None else [],
        )
        async with worker:
            log.info(
                "polling addr=%s queue=%s gate=%s targets=%s,%s pid=%d",
                addr,
                queue,
                settings.address,
                settings.target_t1,
                settings.target_t2,
                os.getpid(),
            )
            await stop.wait()
            log.info("stopping")


def main() -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        asyncio.run(run(os.environ))
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
