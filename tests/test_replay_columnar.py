"""The columnar .et decode + vectorised compile gives exactly what the typed reader + compile_workload
give, on real and generated traces and on traces full of odd wire encodings."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pytest

from xsim_trace.replay.api import compile_checked

pytest.importorskip("numba")

from xsim_trace.errors import GraphError  # noqa: E402
from xsim_trace.graph.kinds import AttrKind, CollectiveType, NodeType  # noqa: E402
from xsim_trace.graph.model import Attr, Node, Trace, make_metadata  # noqa: E402
from xsim_trace.io import read_rank_set, write_comm_groups, write_et  # noqa: E402
from xsim_trace.io.et_columns import read_columns  # noqa: E402
from xsim_trace.replay import compile_workload  # noqa: E402
from xsim_trace.replay.columnar import compile_rank_files  # noqa: E402

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "chakra_et"


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def decoder(request, monkeypatch):
    """Every test runs with each columnar decoder (tests/test_et_decoders.py compares them directly)."""
    from xsim_trace.io import _et_kernel, et_columns

    monkeypatch.setattr(et_columns, "_kernel", lambda _decoder, _size: _et_kernel if request.param == "numba" else None)
    return request.param
BUNDLED = Path(__file__).resolve().parents[1] / "traces"


def assert_same_workload(a, b) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        elif f.name == "names":
            assert list(x) == list(y), f.name
        else:
            assert x == y, f.name


def both(prefix, drop=False):
    rs = read_rank_set(prefix)
    typed = compile_workload(rs.traces, rs.comm_groups, drop_missing_deps=drop)
    fast, _ = compile_rank_files(prefix, drop_missing_deps=drop, columnar=True)
    return typed, fast


@pytest.mark.parametrize("prefix", [
    BUNDLED / "dlrm_v100_8rank",
    SHARED / "astra_custom_ring_8npus" / "custom_allreduce",
    SHARED / "reference_text_converter" / "Resnet50_DataParallel",
    SHARED / "reference_text_converter" / "DLRM_HybridParallel",
    SHARED / "reference_generator" / "ALL_TO_ALL",
])
def test_real_traces_compile_the_same(prefix):
    if not Path(str(prefix) + ".0.et").exists() and not Path(prefix).is_dir():
        pytest.skip("trace not available")
    typed, fast = both(prefix)
    assert_same_workload(typed, fast)


def A(name, kind, value, doc=""):
    return Attr(name=name, kind=kind, value=value, doc_string=doc)


def odd_rank(rank: int) -> Trace:
    """Every replay attribute in an unusual but valid encoding."""
    K = AttrKind
    other = 1 - rank
    nodes = (
        Node(id=10, name="gemm α", type=NodeType.COMP, duration_micros=7,
             attrs=(A("stream", K.SINT64, 3), A("duration_ns", K.UINT64, 7_123), A("kernel_class", K.STRING, "gemm"))),
        Node(id=11, name="host", type=NodeType.COMP, ctrl_deps=(10, 10), data_deps=(10,), duration_micros=2,
             attrs=(A("is_cpu_op", K.INT32, 1), A("tid", K.FIXED64, 9))),
        Node(id=12, name="neg stream", type=NodeType.COMP, data_deps=(11,), duration_micros=1,
             attrs=(A("stream", K.SFIXED32, -3),)),
        Node(id=13, name="send", type=NodeType.COMM_SEND, data_deps=(12,),
             attrs=(A("comm_dst", K.SFIXED64, other), A("comm_src", K.INT32, rank), A("comm_tag", K.FIXED32, 5),
                    A("comm_size", K.INT64, 4096), A("comm_kind", K.STRING, "PP", doc="a doc"))),
        Node(id=14, name="recv", type=NodeType.COMM_RECV, ctrl_deps=(12,),
             attrs=(A("comm_src", K.UINT32, other), A("comm_tag", K.SINT32, 5), A("comm_size", K.UINT64, 4096),
                    A("tid", K.INT64, 4))),
        Node(id=15, name="ar", type=NodeType.COMM_COLL, data_deps=(13, 14), ctrl_deps=(13,),
             attrs=(A("comm_type", K.INT64, int(CollectiveType.ALL_REDUCE)), A("comm_size", K.INT64, 1 << 20),
                    A("pg_name", K.STRING, "7"), A("ring_order", K.INT64_LIST, (1, 0)), A("comm_kind", K.STRING, "dp"),
                    A("stream", K.UINT32, 1))),
        Node(id=16, name="bc", type=NodeType.COMM_COLL, data_deps=(15,),
             attrs=(A("comm_type", K.INT32, int(CollectiveType.BROADCAST)), A("comm_size", K.INT64, 64),
                    A("comm_root", K.INT32, 1), A("pg_name", K.NONE, None))),
        Node(id=17, name="", type=77, data_deps=(16, 99), duration_micros=3,
             attrs=(A("pg_name", K.STRING, "ignored"), A("comm_kind", K.NONE, None))),
        Node(id=18, name="meta", type=NodeType.METADATA, ctrl_deps=(17,), duration_micros=1,
             attrs=(A("involved_dim", K.BOOL_LIST, (True, False)), A("weight", K.DOUBLE, -0.0))),
    )
    return Trace(make_metadata(rank=rank, world_size=2), nodes, rank=rank)


def write_set(tmp_path, traces, groups, gz=False):
    prefix = tmp_path / "odd"
    for r, t in traces.items():
        write_et(f"{prefix}.{r}.et{'.gz' if gz else ''}", t)
    write_comm_groups(prefix, groups)
    return prefix


@pytest.mark.parametrize("gz", [False, True])
def test_odd_encodings_compile_the_same(tmp_path, gz):
    prefix = write_set(tmp_path, {r: odd_rank(r) for r in (0, 1)}, {"7": [0, 1]}, gz)
    assert read_columns(f"{prefix}.0.et{'.gz' if gz else ''}") is not None  # the fast path took it
    with pytest.raises(GraphError) as typed_err:  # replay's typed entry point checks bounds first
        rs = read_rank_set(prefix)
        compile_checked(rs.traces, rs.comm_groups)
    with pytest.raises(GraphError) as fast_err:
        compile_rank_files(prefix, columnar=True)
    assert str(typed_err.value) == str(fast_err.value)
    typed, fast = both(prefix, drop=True)
    assert_same_workload(typed, fast)
    assert list(fast.names)[:2] == ["gemm α", "host"]


def test_unpacked_deps_and_fields_out_of_order(tmp_path):
    """Hand-made wire bytes: unpacked ctrl deps before the id, a repeated id (last wins)."""
    from xsim_trace.io.framing import encode_varint, frame
    from xsim_trace.schema import pb

    def key(field, wt):
        return encode_varint(field << 3 | wt)

    meta = pb.GlobalMetadata(version="0.0.4").SerializeToString()
    n0 = pb.Node(id=1, name="a", type=4, duration_micros=5).SerializeToString()
    n1 = (key(4, 0) + encode_varint(1) + key(1, 0) + encode_varint(99) + key(2, 2) + encode_varint(1) + b"b"
          + key(3, 0) + encode_varint(4) + key(7, 0) + encode_varint(2) + key(1, 0) + encode_varint(2)
          + key(5, 2) + encode_varint(1) + encode_varint(1) + key(99, 0) + encode_varint(3))
    prefix = tmp_path / "raw"
    Path(f"{prefix}.0.et").write_bytes(frame(meta) + frame(n0) + frame(n1))
    assert read_columns(f"{prefix}.0.et") is not None
    typed, fast = both(prefix)
    assert_same_workload(typed, fast)
    assert fast.node_id.tolist() == [1, 2] and fast.indegree.tolist() == [0, 1]


def test_corrupt_file_falls_back_to_the_typed_error(tmp_path):
    prefix = write_set(tmp_path, {r: odd_rank(r) for r in (0, 1)}, {"7": [0, 1]})
    p = Path(f"{prefix}.1.et")
    p.write_bytes(p.read_bytes()[:-3])
    assert read_columns(p) is None
    with pytest.raises(Exception) as typed_err:
        read_rank_set(prefix)
    with pytest.raises(Exception) as fast_err:
        compile_rank_files(prefix, columnar=True)
    assert type(typed_err.value) is type(fast_err.value) and str(typed_err.value) == str(fast_err.value)


def test_gzip_reads_the_same(tmp_path):
    prefix = write_set(tmp_path, {r: odd_rank(r) for r in (0, 1)}, {"7": [0, 1]})
    raw = Path(f"{prefix}.0.et").read_bytes()
    Path(f"{prefix}.0.et").unlink()
    Path(f"{prefix}.0.et.gz").write_bytes(gzip.compress(raw))
    a = read_columns(f"{prefix}.0.et.gz")
    assert a is not None and a.node_id.tolist() == list(range(10, 19))


@pytest.mark.parametrize("attrs", [
    (A("stream", AttrKind.INT32, -2), A("stream", AttrKind.SFIXED32, -3)),  # twice: first or last wins?
    (A("stream", AttrKind.NONE, None),),  # no value: a bounds error
    (A("stream", AttrKind.BOOL, True),),  # a bool for a number: a bounds error
    (A("duration_ns", AttrKind.DOUBLE, 5.0),),  # a float: the typed path decides
])
def test_what_the_fast_decoder_leaves_to_the_typed_path(tmp_path, attrs):
    node = Node(id=1, name="x", type=NodeType.COMP, duration_micros=1, attrs=attrs)
    write_et(tmp_path / "one.0.et", Trace(make_metadata(), (node,), rank=0))
    assert read_columns(tmp_path / "one.0.et") is None


def test_out_of_bounds_values_get_the_typed_error(tmp_path):
    node = Node(id=1, name="x", type=NodeType.COMM_SEND, attrs=(A("comm_dst", AttrKind.INT64, 1 << 40),))
    write_et(tmp_path / "one.0.et", Trace(make_metadata(), (node,), rank=0))
    assert read_columns(tmp_path / "one.0.et") is not None
    rs = read_rank_set(tmp_path / "one")
    with pytest.raises(GraphError) as typed_err:
        compile_checked(rs.traces, rs.comm_groups)
    with pytest.raises(GraphError) as fast_err:
        compile_rank_files(tmp_path / "one", columnar=True)
    assert str(typed_err.value) == str(fast_err.value) and "comm_dst" in str(fast_err.value)
