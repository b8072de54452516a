"""Truncated and corrupted .et files: only FormatError (with file and offset) ever escapes."""

from __future__ import annotations

import gzip
import io
import random

import pytest

from conftest import shared_path
from xsim_trace.errors import FormatError
from xsim_trace.graph.checks import check_trace
from xsim_trace.io import read_et
from xsim_trace.io.framing import iter_records

SAMPLES = [
    ("reference_generator", "one_metadata_node_all_types.0.et"),
    ("reference_text_converter", "DLRM_HybridParallel.0.et"),
    ("astra_custom_ring_8npus", "custom_allreduce.3.et"),
    ("feeder_test_real", "chakra.0.et"),
]
#: each corrupted copy is parsed whole, so the budget of tries shrinks with the file's size
BUDGET_BYTES = 6_000_000


def _tries(data: bytes, most: int) -> int:
    return max(20, min(most, BUDGET_BYTES // max(1, len(data))))


def _boundaries(data: bytes) -> set[int]:
    out = {0}
    for offset, payload in iter_records(io.BytesIO(data), "x"):
        prefix = 1
        n = len(payload)
        while n >= 0x80:
            n >>= 7
            prefix += 1
        out.add(offset + prefix + len(payload))
    return out


@pytest.mark.parametrize("folder,name", SAMPLES)
def test_truncation_is_a_format_error_with_offset(folder, name):
    data = shared_path("chakra_et", folder, name).read_bytes()
    bounds = _boundaries(data)
    rng = random.Random(1234)
    cuts = sorted(set(rng.sample(range(1, len(data)), min(_tries(data, 300), len(data) - 1))) | {1, len(data) - 1})
    errors = 0
    for cut in cuts:
        piece = data[:cut]
        if cut in bounds:
            read_et(io.BytesIO(piece))  # a clean, shorter file: readable (no count on the wire)
            continue
        with pytest.raises(FormatError) as info:
            read_et(io.BytesIO(piece))
        assert "offset" in str(info.value) and "truncated" in str(info.value)
        errors += 1
    assert errors > len(cuts) // 2


@pytest.mark.parametrize("folder,name", SAMPLES)
def test_flipped_bytes_never_escape_as_other_errors(folder, name):
    data = shared_path("chakra_et", folder, name).read_bytes()
    rng = random.Random(99)
    outcomes = {"ok": 0, "format": 0}
    for _ in range(_tries(data, 400)):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        try:
            trace = read_et(io.BytesIO(bytes(buf)))
        except FormatError as exc:
            assert "offset" in str(exc)
            outcomes["format"] += 1
            continue
        outcomes["ok"] += 1
        check_trace(trace)  # whatever parsed, the checks must cope (they report, never crash)
    assert outcomes["format"] > 0


def test_gzip_truncated_and_garbage():
    data = shared_path("chakra_et", "reference_text_converter", "DLRM_HybridParallel.0.et").read_bytes()
    gz = gzip.compress(data, mtime=0)
    for cut in (5, 11, len(gz) // 2, len(gz) - 3):
        with pytest.raises(FormatError):
            read_et(io.BytesIO(gz[:cut]))
    with pytest.raises(FormatError, match="empty file"):
        read_et(io.BytesIO(b""))
    with pytest.raises(FormatError, match="length prefix longer"):
        read_et(io.BytesIO(b"\xff" * 16))


def test_missing_file_names_it(tmp_path):
    with pytest.raises(FormatError, match=r"nope.et: no such file"):
        read_et(tmp_path / "nope.et")
