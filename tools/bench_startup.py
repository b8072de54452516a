#!/usr/bin/env python3
"""Where the CPU of a small ``xsim replay`` goes: the interpreter, numpy, xsim's modules, the work.

    python tools/bench_startup.py [--runs 7]

Each line is a separate process, run ``--runs`` times (interleaved), CPU = user + sys of the child
(its rusage), the minimum and the median shown: on a shared machine the minimum is the steadier
figure.  The lines build on each other (each imports what the one before did, and more), so the
differences are what each layer adds; the last lines are whole ``xsim`` commands as
``tools/bench_vs_astra.py`` runs them (``-q replay ... --no-plot --no-timeline``) on its 8-rank sets.
Children keep their bytecode in a scratch ``PYTHONPYCACHEPREFIX`` as an installed package keeps its
.pyc files (one untimed run of each line first writes it).  Not a test: the figures depend on the
machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from bench_vs_astra import HGX, MiB, Net, chain_set  # noqa: E402

_REPLAY_IMPORTS = ("import xsim_trace.cli.main, xsim_trace.cli.replay, xsim_trace.replay.columnar, "
                   "xsim_trace.replay.api, xsim_trace.report, xsim_trace.cluster, xsim_trace.network.registry, "
                   "xsim_trace.network.topology, xsim_trace.devices.catalog")


def _lines(work: Path) -> list[tuple[str, list[str]]]:
    py = [sys.executable]
    one, chain = work / "one", work / "chain"
    chain_set(one, 8, 0, MiB, 0)
    chain_set(chain, 8, 100, MiB, 100)
    hgx, sw = Net(8, coll_bytes=MiB, **HGX), Net(8, coll_bytes=MiB)

    def replay(prefix: Path, net: Net, backend: str) -> list[str]:
        return [*py, "-m", "xsim_trace.cli.main", "-q", "replay", str(prefix), "--cluster", str(net.write_xsim(work)),
                "--backend", backend, *net.xsim_flags(backend), "--no-plot", "--no-timeline", "--out",
                str(work / f"out-{prefix.name}-{backend}")]

    return [
        ("python -c pass (interpreter + site)", [*py, "-c", "pass"]),
        ("+ import numpy", [*py, "-c", "import numpy"]),
        ("+ the modules of xsim replay", [*py, "-c", f"import numpy; {_REPLAY_IMPORTS}"]),
        ("  (+ protobuf and the Chakra schema: the typed reader)", [*py, "-c", f"import numpy; {_REPLAY_IMPORTS}; "
                                                                    "import xsim_trace.io.et"]),
        ("  (+ numba and one cached kernel: the compiled paths)", [*py, "-c", f"import numpy; {_REPLAY_IMPORTS}; "
                                                                   "import numpy as np; from xsim_trace.io import _et_kernel as k; "
                                                                   "k.count_records(np.zeros(1, np.uint8))"]),
        ("xsim --help", [*py, "-m", "xsim_trace.cli.main", "--help"]),
        ("xsim replay: one 1 MiB all-reduce, 8 ranks, analytical", replay(one, hgx, "analytical")),
        ("xsim replay: one 1 MiB all-reduce, 8 ranks, analytical-ca", replay(one, hgx, "analytical-ca")),
        ("xsim replay: 8 ranks x 100 x [compute -> all-reduce], analytical", replay(chain, sw, "analytical")),
        ("xsim replay: 8 ranks x 100 x [compute -> all-reduce], analytical-ca", replay(chain, sw, "analytical-ca")),
    ]


def _cpu(cmd: list[str], env: dict[str, str]) -> float:
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.stderr.close()
    if status:
        raise SystemExit(f"bench_startup: {' '.join(cmd[:6])} ... failed: {err.strip()[-300:]}")
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="runs of each line (default 7)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xsim-startup-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "PYTHONPYCACHEPREFIX": str(work / "pycache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        lines = _lines(work)
        for _label, cmd in lines:  # untimed: bytecode written, numba kernels compiled or found in their cache
            _cpu(cmd, env)
        cpu: dict[str, list[float]] = {label: [] for label, _ in lines}
        for _ in range(args.runs):
            for label, cmd in lines:
                cpu[label].append(_cpu(cmd, env))
    width = max(len(label) for label in cpu)
    print(f"{'':{width}}  CPU s min  median  (of {args.runs} runs each; user + sys of the process)")
    for label, values in cpu.items():
        print(f"{label:{width}}  {min(values):9.3f}  {statistics.median(values):6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
