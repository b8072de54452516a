#!/usr/bin/env python3
"""Regenerate xsim_trace/schema/chakra_pb2.py from chakra.proto.

Needs the dev extra (grpcio-tools provides protoc):  pip install -e .[dev]
Usage:  python tools/regen_proto.py [--check]
With --check, exits 1 when the committed module differs from what protoc generates now.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "xsim_trace" / "schema"


def generate(out_dir: pathlib.Path) -> pathlib.Path:
    from grpc_tools import protoc  # type: ignore[import-not-found]

    rc = protoc.main(["protoc", f"-I{SCHEMA}", f"--python_out={out_dir}", str(SCHEMA / "chakra.proto")])
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")
    return out_dir / "chakra_pb2.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, exit 1 on drift")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(pathlib.Path(tmp)).read_text()
    target = SCHEMA / "chakra_pb2.py"
    if args.check:
        if not target.exists() or target.read_text() != fresh:
            print(f"{target}: differs from protoc output; run python tools/regen_proto.py", file=sys.stderr)
            return 1
        print(f"{target}: up to date")
        return 0
    target.write_text(fresh)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
