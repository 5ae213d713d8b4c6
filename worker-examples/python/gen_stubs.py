"""Generate the Python gRPC stubs of the gate's service from ``proto/interlock/v1/gate.proto``.

The stubs are generated, not committed, so they can never drift from the proto: this script (run
by hand, by ``refund_worker.py`` and by the tests when ``gen/`` is missing or older than the
proto) writes ``gen/interlock/v1/gate_pb2.py``, ``gate_pb2.pyi`` and ``gate_pb2_grpc.py`` beside
it with ``grpc_tools.protoc``, using the well-known protos grpc_tools bundles for
``google/protobuf/duration.proto``. It works from any current directory and does nothing when the
stubs are already newer than the proto.

    python3 gen_stubs.py          # generate if needed
    python3 gen_stubs.py --force  # generate again
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GEN = HERE / "gen"
PROTO_ROOT = HERE.parent.parent / "proto"
PROTO = Path("interlock") / "v1" / "gate.proto"
OUTPUTS = ("gate_pb2.py", "gate_pb2.pyi", "gate_pb2_grpc.py")


def _up_to_date() -> bool:
    source = PROTO_ROOT / PROTO
    out_dir = GEN / PROTO.parent
    outs = [out_dir / name for name in OUTPUTS]
    if not all(p.exists() for p in outs):
        return False
    if not source.exists():
        return True  # stubs without their proto (a copied tree): use what is there
    return min(p.stat().st_mtime for p in outs) >= source.stat().st_mtime


def generate(force: bool = False) -> Path:
    """Write the stubs under ``gen/`` unless they are newer than the proto; return ``gen/``."""
    if not force and _up_to_date():
        return GEN
    import grpc_tools  # imported here: only generating needs it

    source = PROTO_ROOT / PROTO
    if not source.exists():
        raise FileNotFoundError(f"the gate's proto is not at {source}")
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    out_dir = GEN / PROTO.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={GEN}",
        f"--pyi_out={GEN}",
        f"--grpc_python_out={GEN}",
        str(PROTO),
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_ROOT)
    # Packages, so `interlock.v1.gate_pb2` (as the generated grpc module imports it) resolves
    # with gen/ on sys.path.
    for pkg in (GEN / "interlock", out_dir):
        (pkg / "__init__.py").touch()
    return GEN


def ensure_importable() -> None:
    """Generate the stubs if needed and put ``gen/`` on ``sys.path``."""
    gen = str(generate())
    if gen not in sys.path:
        sys.path.insert(0, gen)


def main(argv: list[str]) -> int:
    generate(force="--force" in argv)
    sys.stderr.write(f"stubs in {GEN / PROTO.parent}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
