"""The two columnar .et decoders (numba kernel, numpy twin) give the same columns, or both refuse, on
real traces, generated steps, odd encodings and hostile bytes; and the replay path picks the numpy
one (no numba loaded) for a small rank set."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_mutate import hostile_file
from test_replay_columnar import odd_rank, write_set
from xsim_trace.io.et_columns import read_columns, read_columns_many

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "traces" / "chakra_et"


def assert_same_columns(a, b) -> None:
    assert (a is None) == (b is None)
    if a is None:
        return
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), f.name
        elif f.name == "names":
            assert list(x) == list(y), f.name
        else:
            assert x == y, f.name


def both(paths):
    return read_columns_many(paths, decoder="numba"), read_columns_many(paths, decoder="numpy")


def rank_files(prefix) -> list[str]:
    out = []
    r = 0
    while Path(f"{prefix}.{r}.et").exists():
        out.append(f"{prefix}.{r}.et")
        r += 1
    return out


@pytest.mark.parametrize("prefix", [
    ROOT / "traces" / "dlrm_v100_8rank" / "dlrm",
    SHARED / "astra_custom_ring_8npus" / "custom_allreduce",
    SHARED / "feeder_test_real" / "chakra",
    SHARED / "reference_text_converter" / "DLRM_HybridParallel",
    SHARED / "reference_generator" / "one_metadata_node_all_types",
])
def test_real_traces_decode_the_same(prefix):
    files = rank_files(prefix)
    if not files:
        pytest.skip("trace not available")
    a, b = both(files)
    assert a is not None
    assert_same_columns(a, b)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A generated TP2 PP2 DP2 step (2 layers): every replay attribute a generator writes."""
    from xsim_trace.cli.main import main

    prefix = tmp_path_factory.mktemp("gen") / "step"
    assert main(["-q", "generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--layers", "2",
                 "--out", str(prefix)]) == 0
    return prefix


def test_generated_step_decodes_the_same(generated):
    a, b = both(rank_files(generated))
    assert a is not None and len(a) > 1000
    assert_same_columns(a, b)


@pytest.mark.parametrize("gz", [False, True])
def test_odd_encodings_decode_the_same(tmp_path, gz):
    prefix = write_set(tmp_path, {r: odd_rank(r) for r in (0, 1)}, {"7": [0, 1]}, gz)
    a, b = both([f"{prefix}.{r}.et{'.gz' if gz else ''}" for r in (0, 1)])
    assert a is not None and a.ring_order
    assert_same_columns(a, b)


_SEEDS = {}


def _seed(kind: str, tmp_path_factory=None) -> bytes:
    if kind not in _SEEDS:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="xsim-dec-"))
        prefix = write_set(folder, {r: odd_rank(r) for r in (0, 1)}, {"7": [0, 1]})
        _SEEDS["odd"] = Path(f"{prefix}.0.et").read_bytes()
        _SEEDS["real"] = (SHARED / "astra_custom_ring_8npus" / "custom_allreduce.0.et").read_bytes()
    return _SEEDS[kind]


@settings(max_examples=int(os.environ.get("XSIM_DECODER_EXAMPLES", "150")), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), kind=st.sampled_from(["odd", "real"]))
def test_hostile_bytes_decode_the_same_or_both_refuse(tmp_path, data, kind):
    seed = _seed(kind)
    if kind == "real" and not seed:
        return
    path = tmp_path / "h.0.et"
    path.write_bytes(data.draw(hostile_file("et", seed)))
    assert_same_columns(read_columns(path, decoder="numba"), read_columns(path, decoder="numpy"))


def test_a_small_replay_loads_no_numba(tmp_path, generated):
    """``xsim replay`` of a small set decodes with numpy and runs the Python loop: numba never loads."""
    code = ("import sys; from xsim_trace.cli.main import main; "
            f"rc = main(['-q', 'replay', {str(generated)!r}, '--cluster', 'dgx-h100:1', '--no-plot', "
            f"'--no-timeline', '--out', {str(tmp_path / 'out')!r}]); "
            "print(rc, 'numba' in sys.modules, 'xsim_trace.io._et_numpy' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-3:] == ["0", "False", "True"]
