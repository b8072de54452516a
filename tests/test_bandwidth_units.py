"""Bandwidth units go through :mod:`xsim_trace.units` only: ``*_GBps`` (1e9 bytes/s) and ``*_gbps``
(1e9 bits/s) differ in letter case alone, so a bare 8 next to them is a factor waiting to bite."""

from __future__ import annotations

import re
from pathlib import Path

import xsim_trace
from xsim_trace.units import GBps_to_bits_per_s, GBps_to_bytes_per_s, GBps_to_gbps, gbps_to_bytes_per_s, gbps_to_GBps

_BW = re.compile(r"(gbps|GBps|GBPS|bw|bandwidth)", re.IGNORECASE)
_BARE_8 = re.compile(r"(?<![\w.])(?:[*/]\s*8(?:\.0*)?(?![\w.])|8(?:\.0*)?\s*\*|8e9)")


def test_helpers_convert_both_ways():
    assert gbps_to_GBps(400.0) == 50.0 and GBps_to_gbps(50.0) == 400.0
    assert GBps_to_bytes_per_s(50.0) == 50e9 and gbps_to_bytes_per_s(400.0) == 50e9
    assert GBps_to_bits_per_s(50.0) == 400e9


def test_no_bare_factor_of_8_next_to_a_bandwidth():
    package = Path(xsim_trace.__file__).parent
    root = package.parent
    found = []
    files = [*package.rglob("*.py"), *(root / "converters").rglob("*.py"), *(root / "tools").rglob("*.py")]
    for path in sorted(files):
        if path.name == "units.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if _BW.search(code) and _BARE_8.search(code):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert not found, "convert with xsim_trace.units:\n" + "\n".join(found)
