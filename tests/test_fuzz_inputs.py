"""Fuzzing the input boundary (issue 15): per input kind, hostile copies of real seeds go through
the library pipeline of that kind; the only exception allowed out is XsimError, and no case may
take 10 s (of CPU) or more.

The default suite runs FUZZ_EXAMPLES (30) cases per kind, derandomised (the same cases every run);
``python -m pytest -m slow tests/test_fuzz_inputs.py`` runs XSIM_FUZZ_EXAMPLES (default 10,000)
random cases per kind, each under a 1 GiB address-space allowance above the start.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzz_mutate import hostile_file
from fuzz_targets import TARGETS
from xsim_trace.errors import XsimError

FUZZ_EXAMPLES = 30
SLOW_EXAMPLES = int(os.environ.get("XSIM_FUZZ_EXAMPLES", "10000"))
#: CPU seconds per case (the machine running the suite may be shared: wall time says little), and a
#: wall-clock bound on top that catches a case blocked without using the CPU
CASE_LIMIT_S = 10.0
CASE_WALL_LIMIT_S = 120.0
MEMORY_ALLOWANCE = 1 << 30
_COUNTS: dict[str, dict[str, int]] = {}


def _one_case(kind: str, name: str, data: bytes) -> str:
    folder = Path(tempfile.mkdtemp(prefix=f"xsim-fuzz-{kind}-"))
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        TARGETS[kind].run(folder, name, data)
        outcome = "ok"
    except XsimError as exc:
        text = str(exc)
        assert "\n" not in text, f"a multi-line error: {text!r}"
        outcome = "error"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert cpu < CASE_LIMIT_S and wall < CASE_WALL_LIMIT_S, f"{kind} case took {cpu:.1f} s CPU, {wall:.1f} s"
    return outcome


def _property(kind: str, examples: int, derandomize: bool):
    target = TARGETS[kind]
    seeds = target.seeds()
    if not seeds:
        pytest.skip(f"no seed files for {kind} (../shared/traces absent)")
    counts = _COUNTS.setdefault(kind, {"ok": 0, "error": 0})

    # the slow mode reports a failing case as found: shrinking a 10 s case can take longer than the run
    phases = list(Phase) if derandomize else [Phase.explicit, Phase.generate]
    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None, phases=phases,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        name, seed = data.draw(st.sampled_from(seeds))
        hostile = data.draw(hostile_file(target.syntax, seed))
        counts[_one_case(kind, name, hostile)] += 1

    check()
    return counts


@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_only_xsim_errors_leave_the_library(kind):
    counts = _property(kind, FUZZ_EXAMPLES, derandomize=True)
    assert counts["ok"] + counts["error"] >= FUZZ_EXAMPLES


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_only_xsim_errors_leave_the_library_at_scale(kind, record_property):
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    in_use = _address_space_bytes()
    if in_use:
        resource.setrlimit(resource.RLIMIT_AS, (in_use + MEMORY_ALLOWANCE, hard))
    try:
        t0 = time.perf_counter()
        counts = _property(kind, SLOW_EXAMPLES, derandomize=False)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    record_property("counts", counts)
    print(f"\nfuzz {kind}: {counts['ok'] + counts['error']} cases ({counts['ok']} accepted, {counts['error']} "
          f"XsimError) in {time.perf_counter() - t0:.0f} s")
    assert counts["ok"] + counts["error"] >= SLOW_EXAMPLES


def _address_space_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
