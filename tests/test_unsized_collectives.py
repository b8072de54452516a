"""A capture taken without record_shapes: NCCL collectives without a size are counted in one
warning and keep their measured duration in the replay instead of becoming 0 us."""

from __future__ import annotations

import json
import logging

from xsim_trace.cluster import single_switch
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Trace, make_metadata, make_node
from xsim_trace.network import build_topology, make_backend
from xsim_trace.replay import replay


def _capture(tmp_path, rank: int):
    X = lambda cat, name, tid, ts, dur, **args: {"ph": "X", "cat": cat, "name": name,  # noqa: E731
                                                 "pid": 1 if cat != "kernel" else 0, "tid": tid, "ts": ts,
                                                 "dur": dur, "args": args}
    ev = [
        X("user_annotation", "ProfilerStep#1", 1, 0, 200),
        X("cpu_op", "nccl:all_reduce", 1, 1, 5),
        X("cuda_runtime", "cudaLaunchKernel", 1, 2, 2, correlation=21),
        # no "Collective name"/"In msg nelems" and no input shapes: the size is unknown
        X("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 7, 10, 40, correlation=21, stream=7),
    ]
    path = tmp_path / f"rank{rank}.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": ev}))
    return path


def test_converter_counts_collectives_without_a_size(tmp_path, caplog):
    from converters.kineto import convert_kineto, read_ranks
    from xsim_trace.io.sources import resolve_inputs

    for r in (0, 1):
        _capture(tmp_path, r)
    with caplog.at_level(logging.WARNING):
        conv = convert_kineto(read_ranks(resolve_inputs(tmp_path)))
    assert "2 collectives have no size: the capture was taken without record_shapes" in caplog.text
    coll = [n for n in conv.traces[0].nodes if n.type == NodeType.COMM_COLL]
    assert len(coll) == 1 and coll[0].attr(A.COMM_SIZE) == 0 and coll[0].attr(A.MEASURED_DURATION_NS) == 40_000
    be = make_backend("analytical", build_topology(single_switch(2, 100.0, 500)))
    with caplog.at_level(logging.WARNING):
        r = replay(conv.traces, be, comm_groups=conv.comm_groups)
    assert "2 collectives have no size" in caplog.text
    assert r.iteration_ns >= 40_000  # the kernel's 40 us, not 0 us


def test_replay_keeps_the_measured_duration_of_an_unsized_collective(caplog):
    def rank(r):
        node = make_node(1, "ncclKernel_AllReduce", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE),
                         comm_size=0, **{A.MEASURED_DURATION_NS: 7_000})
        return Trace(make_metadata(world_size=2), (node,), rank=r)

    be = make_backend("analytical", build_topology(single_switch(2, 100.0, 500)))
    with caplog.at_level(logging.WARNING):
        r = replay({0: rank(0), 1: rank(1)}, be)
    assert r.iteration_ns == 7_000
    assert "2 collectives have no size: the capture was taken without record_shapes" in caplog.text
    # a sized collective is still priced by the network, and a barrier of size 0 stays a barrier
    sized = make_node(1, "ar", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=1 << 20,
                      **{A.MEASURED_DURATION_NS: 7_000})
    r2 = replay({i: Trace(make_metadata(world_size=2), (sized,), rank=i) for i in (0, 1)},
                make_backend("analytical", build_topology(single_switch(2, 100.0, 500))))
    assert r2.iteration_ns != 7_000 and r2.stats.collectives == 1


def test_rank_files_of_unsized_collectives_replay_at_their_measured_duration(tmp_path, caplog):
    """Through the rank-file path (columnar decode where it can): the same answer and warning."""
    from xsim_trace.io import write_rank_set
    from xsim_trace.replay import replay_compiled
    from xsim_trace.replay.columnar import compile_rank_files

    node = make_node(1, "ncclKernel_AllReduce", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE),
                     comm_size=0, **{A.MEASURED_DURATION_NS: 7_000})
    write_rank_set(str(tmp_path / "u"), {r: Trace(make_metadata(world_size=2), (node,), rank=r) for r in (0, 1)}, {})
    be = make_backend("analytical", build_topology(single_switch(2, 100.0, 500)))
    with caplog.at_level(logging.WARNING):
        workload, _ = compile_rank_files(str(tmp_path / "u"), columnar=True)
    r = replay_compiled(workload, be)
    assert r.iteration_ns == 7_000
    assert "2 collectives have no size" in caplog.text
