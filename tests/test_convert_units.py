"""Small pieces of the converters: input resolution, NCCL recognition, all-to-all pairing, graph finalize."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import tarfile

import pytest

from converters import crossrank, nccl
from converters.common import GraphBuilder, finalize, measured_replay
from xsim_trace.io.sources import rank_from_name, resolve_inputs
from xsim_trace.errors import FormatError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType


def test_inputs_file_dir_glob_and_tar(tmp_path):
    for r in range(3):
        (tmp_path / f"worker{r}.json").write_text("{}")
    with gzip.open(tmp_path / "worker3.json.gz", "wt") as f:
        f.write('{"a": 1}')
    (tmp_path / "notes.txt").write_text("x")
    names = [s.name.rsplit("/", 1)[-1] for s in resolve_inputs(tmp_path)]
    assert names == ["worker0.json", "worker1.json", "worker2.json", "worker3.json.gz"]
    assert len(resolve_inputs(str(tmp_path / "worker[12].json"))) == 2
    gz = resolve_inputs(tmp_path / "worker3.json.gz")[0]
    with gz.open() as f:
        assert f.read() == b'{"a": 1}'  # gunzipped transparently
    tar = tmp_path / "ranks.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        for r in (1, 0):
            data = json.dumps({"rank": r}).encode()
            info = tarfile.TarInfo(f"run/rank{r}.json")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    members = resolve_inputs(tar)
    assert [m.rank_hint for m in members] == [0, 1]
    with members[1].open() as f:
        assert json.load(f) == {"rank": 1}
    with pytest.raises(FormatError, match="no such file"):
        resolve_inputs(tmp_path / "missing.json")
    with pytest.raises(FormatError, match="no input trace files"):
        resolve_inputs(str(tmp_path / "*.csv"))


def test_rank_from_names():
    assert rank_from_name("dlrm_kineto/worker3_step_12.1694128201557.pt.trace.json") == 3
    assert rank_from_name("rank12.json.gz") == 12
    assert rank_from_name("dlrm_eg_5.json") == 5


def test_kernel_names_and_args():
    assert nccl.parse_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == (
        "AllReduce", "RING", "float")
    assert nccl.parse_kernel_name("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")[0] == "AllGather"
    assert nccl.from_kernel_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(x)", 8) is None  # op decides
    info = nccl.from_args({"Collective name": "_allgather_base", "In msg nelems": 10, "Out msg nelems": 80,
                           "dtype": "BFloat16", "Process Group Name": "3", "Process Group Ranks": "[0, 2, 4, 6]"}, 8)
    assert info.coll is CollectiveType.ALL_GATHER and info.size_bytes == 160 and info.group_ranks == (0, 2, 4, 6)
    assert info.pg_name == "3"
    ops = [("nccl:_reduce_scatter_base", {"Input Dims": [[65536, 384]], "Input type": ["float"]}),
           ("record_param_comms", {}),
           ("c10d::_reduce_scatter_base_", {"Input Dims": [[4096, 384], [65536, 384]], "Input type": ["float", "float"]})]
    rs = nccl.from_ops(ops, 16)
    assert rs.coll is CollectiveType.REDUCE_SCATTER and rs.size_bytes == 65536 * 384 * 4


def test_circle_rounds_pair_everyone_once():
    for n in (2, 3, 7, 8):
        members = list(range(n))
        rounds = crossrank.circle_rounds(members)
        pairs = [p for r in rounds for p in r]
        assert sorted(pairs) == list(itertools.combinations(members, 2))
        for r in rounds:
            flat = [x for p in r for x in p]
            assert len(flat) == len(set(flat))
        for rank in members:
            sched = crossrank.alltoall_schedule(rank, members)
            assert sorted(p for p, _ in sched) == [m for m in members if m != rank]
            assert all(first == (rank < peer) for peer, first in sched)


def test_finalize_delays_and_host_durations():
    b = GraphBuilder()
    cpu = b.add("launch", NodeType.COMP, 0, 10, on_cpu=True, fixed=False)
    k1 = b.add("k1", NodeType.COMP, 15, 25, on_cpu=False, deps=[cpu], **{A.STREAM: 7})
    sync = b.add("sync", NodeType.COMP, 12, 30, on_cpu=True, deps=[cpu, k1], fixed=False)
    comm = b.add("ar", NodeType.COMM_COLL, 25, 40, on_cpu=False, deps=[k1], timed=False)
    trace = finalize(b, {A.META_RANK: 0}, origin=0)
    by = {n.name: n for n in trace.nodes}
    assert by["delay"].attr(A.DURATION_NS) == 5 and by["delay"].attr(A.DELAY)
    assert by["k1"].deps == (by["delay"].id,)
    assert by["sync"].attr(A.DURATION_NS) == 5  # 30 - max(10, 25): waiting is not counted twice
    assert by["ar"].attr(A.DURATION_NS) is None and by["ar"].attr(A.MEASURED_DURATION_NS) == 15
    rep = measured_replay(trace)
    assert rep.end_ns[by["sync"].id] == 30 and rep.makespan_ns == 40
    assert [n.id for n in trace.nodes] == list(range(5)) and all(d < n.id for n in trace.nodes for d in n.deps)
