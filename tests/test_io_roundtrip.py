"""Reading and writing Chakra .et: real reference files round-trip byte for byte."""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import pytest

from conftest import shared_path
from xsim_trace.errors import FormatError
from xsim_trace.graph import AttrKind, NodeType, make_metadata, make_node
from xsim_trace.io import (
    atomic_write,
    iter_nodes,
    read_comm_groups,
    read_et,
    read_metadata,
    read_rank_set,
    write_et,
    write_rank_set,
)


def _all_et_files() -> list[Path]:
    root = shared_path("chakra_et")
    return sorted(p for p in root.rglob("*") if p.name.endswith(".et") or p.name.endswith(".et.gz"))


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_every_shared_et_file_reads():
    files = _all_et_files()
    assert len(files) >= 50
    for f in files:
        trace = read_et(f)
        assert trace.metadata.version or trace.metadata.attrs, f
        assert len(trace.nodes) > 0, f


@pytest.mark.parametrize("folder", ["reference_generator", "reference_text_converter", "astra_custom_ring_8npus",
                                    "feeder_test_real", "reference_pytorch_e2e"])
def test_reference_files_round_trip_byte_for_byte(folder):
    files = sorted(p for p in shared_path("chakra_et", folder).iterdir() if ".et" in p.name and "json" not in p.name)
    assert files
    for f in files:
        out = io.BytesIO()
        write_et(out, read_et(f))
        assert out.getvalue() == _raw(f), f


def test_all_thirty_attribute_variants_survive():
    f = shared_path("chakra_et", "reference_generator", "one_metadata_node_all_types.0.et")
    trace = read_et(f)
    kinds = {a.kind for n in trace.nodes for a in n.attrs}
    assert kinds == {k for k in AttrKind if k is not AttrKind.NONE}
    node = trace.nodes[0]
    assert node.attr("int64") is not None
    lists = [a for a in node.attrs if a.kind.is_list]
    assert all(isinstance(a.value, tuple) and a.value for a in lists)
    out = io.BytesIO()
    write_et(out, trace)
    assert out.getvalue() == f.read_bytes()
    assert read_et(io.BytesIO(out.getvalue())).nodes == trace.nodes


def test_gzip_and_file_objects(tmp_path):
    f = shared_path("chakra_et", "reference_text_converter", "DLRM_HybridParallel.0.et")
    trace = read_et(f)
    gz = tmp_path / "x.0.et.gz"
    write_et(gz, trace)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert read_et(gz).nodes == trace.nodes
    with open(gz, "rb") as handle:
        assert [n.id for n in iter_nodes(handle)] == [n.id for n in trace.nodes]
    assert read_metadata(gz) == trace.metadata
    # gzip output is deterministic (no mtime / temp-file name in the header)
    gz2 = tmp_path / "y.0.et.gz"
    write_et(gz2, trace)
    assert gz.read_bytes() == gz2.read_bytes()


def test_streaming_write_from_generator(tmp_path):
    meta = make_metadata(rank=0)

    def nodes():
        for i in range(1000):
            yield make_node(i, f"n{i}", NodeType.COMP, data_deps=[i - 1] if i else [], duration_micros=i, duration_ns=i * 1000 + 7)

    path = tmp_path / "s.et"
    assert write_et(path, meta, nodes()) == 1000
    back = read_et(path)
    assert len(back.nodes) == 1000
    assert back.nodes[999].duration_ns == 999_007
    assert back.nodes[5].data_deps == (4,)


def test_zero_valued_oneof_is_written():
    node = make_node(1, "ar", NodeType.COMM_COLL, comm_type=0, comm_size=0)
    out = io.BytesIO()
    write_et(out, make_metadata(), [node])
    back = list(iter_nodes(io.BytesIO(out.getvalue())))[0]
    assert back.attr("comm_type") == 0 and back.has_attr("comm_type")
    assert {a.kind for a in back.attrs} == {AttrKind.INT64}


def test_rank_set_round_trip(tmp_path):
    traces = {}
    for r in range(3):
        traces[r] = read_et(shared_path("chakra_et", "reference_generator", f"ALL_REDUCE.{min(r, 1)}.et"), rank=r)
    paths = write_rank_set(tmp_path / "w", traces, {"3": [0, 1, 2], "7": [2, 0]})
    assert [p.name for p in paths] == ["w.0.et", "w.1.et", "w.2.et", "w.comm_groups.json"]
    rs = read_rank_set(tmp_path / "w")
    assert rs.ranks == [0, 1, 2]
    assert rs.comm_groups == {"3": (0, 1, 2), "7": (0, 2)}
    assert rs.traces[2].nodes == traces[2].nodes
    # a directory holding one set works too; a missing rank is named
    assert read_rank_set(tmp_path).ranks == [0, 1, 2]
    os.unlink(tmp_path / "w.1.et")
    with pytest.raises(FormatError, match=r"rank 1.*missing for rank\(s\) 1"):
        read_rank_set(tmp_path / "w")


def test_bad_comm_group_file(tmp_path):
    p = tmp_path / "g.comm_groups.json"
    p.write_text('{"1": [0, "x"]}')
    with pytest.raises(FormatError, match=r"g.comm_groups.json, field 1"):
        read_comm_groups(p)
    p.write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        read_comm_groups(p)


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "out.et"
    target.write_bytes(b"old")

    def boom():
        yield make_node(1, "a", NodeType.COMP)
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError):
        write_et(target, make_metadata(), boom())
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.et"]
    with pytest.raises(ValueError):
        with atomic_write(tmp_path / "x.txt") as h:
            h.write("half")
            raise ValueError
    assert not (tmp_path / "x.txt").exists()


def test_atomic_write_output_has_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "r.json") as h:
            h.write("{}")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
