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


# both hostile-bytes properties: the same examples on every CI run; XSIM_DECODER_EXAMPLES=N explores at random
HOSTILE = settings(max_examples=int(os.environ.get("XSIM_DECODER_EXAMPLES", "150")), deadline=None, database=None,
                   derandomize="XSIM_DECODER_EXAMPLES" not in os.environ,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@HOSTILE
@given(data=st.data(), kind=st.sampled_from(["odd", "real"]))
def test_hostile_bytes_decode_the_same_or_both_refuse(tmp_path, data, kind):
    seed = _seed(kind)
    if kind == "real" and not seed:
        return
    path = tmp_path / "h.0.et"
    path.write_bytes(data.draw(hostile_file("et", seed)))
    assert_same_columns(read_columns(path, decoder="numba"), read_columns(path, decoder="numpy"))


def test_generated_step_is_decoded_by_difference(generated):
    """The numpy decoder decodes the TP peers and DP replicas from a file decoded before (only the
    records holding a changed byte afresh): the columns are still the numba decoder's whole decode."""
    from xsim_trace.io.et_columns import _diff_plan, _read_file

    files = rank_files(generated)
    plan = _diff_plan([_read_file(f)[0] for f in files])
    by_difference = [p for p in plan if p[0] is not None]
    assert len(by_difference) >= len(files) // 2 and all(0 < len(p[1].records) < 2000 for p in by_difference)
    assert_same_columns(*both(files))


@HOSTILE
@given(data=st.data(), kind=st.sampled_from(["odd", "real"]))
def test_copies_with_changed_bytes_decode_as_whole(tmp_path, data, kind):
    """Files of one length whose bytes differ anywhere (node records, length prefixes, the metadata
    record): decoded by difference from the first, or whole where a prefix changed, the columns (or
    the refusal) are the numba decoder's whole decode of every file."""
    seed = _seed(kind)
    if kind == "real" and not seed:
        return
    payload = _payload_bytes(seed)  # names and kept string values: changes there are not decoded afresh
    paths = []
    for i in range(data.draw(st.integers(2, 4))):
        b = bytearray(seed)
        for _ in range(0 if i == 0 else data.draw(st.integers(0, 6))):
            anywhere = not len(payload) or data.draw(st.booleans())
            at = data.draw(st.integers(0, len(b) - 1)) if anywhere else int(payload[data.draw(st.integers(0, len(payload) - 1))])
            b[at] = data.draw(st.sampled_from([ord("x"), ord("7"), 0x80, 0xC3, 0xFF])) if not anywhere else data.draw(st.integers(0, 255))
        paths.append(tmp_path / f"c.{i}.et")
        paths[-1].write_bytes(bytes(b))
    assert_same_columns(*both(paths))


def _payload_bytes(seed: bytes) -> np.ndarray:
    """Positions of the bytes of the seed's node names and kept string attribute values."""
    from xsim_trace.io._et_numpy import decode

    c = decode(seed)
    if isinstance(c, int):
        return np.zeros(0, np.int64)
    spans = [(int(o), int(n)) for o, n in zip(c.name_off, c.name_len)]
    spans += [(int(o), int(n)) for o, n in zip(c.soff.ravel(), c.slen.ravel()) if o >= 0]
    return np.asarray([o + j for o, n in spans for j in range(n)], np.int64)


def test_a_small_replay_loads_no_numba(tmp_path, generated):
    """``xsim replay`` of a small set decodes with numpy and runs the Python loop: numba never loads, nor
    protobuf (the metadata is read by hand) nor numpy.ma (np.unique would import it)."""
    code = ("import sys; from xsim_trace.cli.main import main; "
            f"rc = main(['-q', 'replay', {str(generated)!r}, '--cluster', 'dgx-h100:1', '--no-plot', "
            f"'--no-timeline', '--out', {str(tmp_path / 'out')!r}]); "
            "print(rc, 'numba' in sys.modules, 'xsim_trace.io._et_numpy' in sys.modules, "
            "'google.protobuf' in sys.modules, 'numpy.ma' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-5:] == ["0", "False", "True", "False", "False"]


def _metadata_both(path):
    from xsim_trace.io import et
    from xsim_trace.io.metadata import read_metadata

    def run(f):
        try:
            return f(path)
        except Exception as exc:  # noqa: BLE001 - both readers must fail alike
            return (type(exc), str(exc))

    return run(read_metadata), run(et.read_metadata)


def test_metadata_reads_like_protobuf(generated, tmp_path):
    files = [*rank_files(generated), *rank_files(ROOT / "traces" / "dlrm_v100_8rank" / "dlrm"),
             *(str(p) for p in SHARED.glob("*/*.et"))]
    prefix = write_set(tmp_path, {r: odd_rank(r) for r in (0, 1)}, {"7": [0, 1]})
    files.append(f"{prefix}.0.et")
    for path in files:
        fast, typed = _metadata_both(path)
        assert fast == typed, path


@HOSTILE
@given(data=st.data(), kind=st.sampled_from(["odd", "real"]))
def test_hostile_metadata_reads_like_protobuf(tmp_path, data, kind):
    from xsim_trace.graph.kinds import AttrKind, NodeType
    from xsim_trace.graph.model import Attr, GlobalMetadata, Node, Trace
    from xsim_trace.io import write_et

    seed = _seed(kind)
    if data.draw(st.booleans()):  # a metadata record of random scalar attributes, then damage
        kinds = [AttrKind.INT64, AttrKind.INT32, AttrKind.UINT64, AttrKind.BOOL, AttrKind.STRING, AttrKind.DOUBLE,
                 AttrKind.NONE, AttrKind.SINT64, AttrKind.INT64_LIST]
        values = {AttrKind.INT64: st.integers(-(2**63), 2**63 - 1), AttrKind.INT32: st.integers(-(2**31), 2**31 - 1),
                  AttrKind.UINT64: st.integers(0, 2**64 - 1), AttrKind.BOOL: st.booleans(), AttrKind.STRING: st.text(max_size=5),
                  AttrKind.DOUBLE: st.floats(allow_nan=False), AttrKind.NONE: st.none(), AttrKind.SINT64: st.integers(-5, 5),
                  AttrKind.INT64_LIST: st.lists(st.integers(0, 9), max_size=3).map(tuple)}
        attrs = []
        for _ in range(data.draw(st.integers(0, 4))):
            k = data.draw(st.sampled_from(kinds))
            attrs.append(Attr(data.draw(st.text(max_size=4)), k, data.draw(values[k]), data.draw(st.sampled_from(["", "d"]))))
        path = tmp_path / "m.0.et"
        one = Node(id=1, name="x", type=NodeType.COMP, duration_micros=1)
        write_et(path, Trace(GlobalMetadata(version=data.draw(st.sampled_from(["", "0.0.4"])), attrs=tuple(attrs)), (one,)))
        seed = path.read_bytes()
    path = tmp_path / "h.0.et"
    path.write_bytes(data.draw(hostile_file("et", seed)) if data.draw(st.booleans()) else seed)
    fast, typed = _metadata_both(path)
    assert fast == typed or repr(fast) == repr(typed)  # a damaged double can read as NaN, and NaN != NaN


def test_distinct_helpers_equal_np_unique():
    from xsim_trace.replay.distinct import all_distinct, distinct_rows, sorted_distinct

    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 5, 100, 1000):
        a = rng.integers(-5, 20, n)
        assert np.array_equal(sorted_distinct(a), np.unique(a)) and sorted_distinct(a).dtype == np.unique(a).dtype
        assert all_distinct(a) == (len(np.unique(a)) == len(a))
        assert all_distinct(np.arange(n)[::-1])
        rows = rng.integers(-3, 4, (n, 3))
        got, inv = distinct_rows(rows)
        want, want_inv = np.unique(rows, axis=0, return_inverse=True)
        assert np.array_equal(got, want) and np.array_equal(inv, want_inv.reshape(-1))


@pytest.mark.parametrize("values", [
    [b"dp_0", b"tp_1", b"dp_0", b"", "n\u00e9\u00e9d".encode(), b"x" * 40, b"tp_1", b"y" * 17],
    [b"ok", b"\xff\xfe"],
])
def test_few_strings_equal_the_numpy_dedup(values):
    """The per-value decode that small files take (``_few_strings``) gives ``_strings``' dict, in its
    order, or raises where it raises (not UTF-8: the typed reader then words the error)."""
    from xsim_trace.io.et_columns import _few_strings, _strings

    data = b"\x00" * 3 + b"".join(values) + b"\x00" * 32
    off, pos = [], 3
    for v in values:
        off.append(pos)
        pos += len(v)
    off = np.array(off[:1] + [-1] + off[1:], np.int64)  # one node without the attribute
    ln = np.array([len(values[0]), 0] + [len(v) for v in values[1:]], np.int64)
    try:
        want = _strings(data, off, ln, 10)
    except UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            _few_strings(data, off, ln, 10, {})
        return
    got = _few_strings(data, off, ln, 10, {})
    assert list(got.items()) == list(want.items())
