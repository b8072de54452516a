"""Structural checks on hand-built graphs and on the real feeder trace."""

from __future__ import annotations

import pytest

from conftest import shared_path
from xsim_trace.errors import GraphError
from xsim_trace.graph import NodeType, Trace, make_metadata, make_node
from xsim_trace.graph.checks import ProblemKind, check_rank_set, check_trace, find_cycle, raise_problems
from xsim_trace.graph.nxview import critical_path, to_networkx
from xsim_trace.io import read_et


def _trace(nodes, rank=0):
    return Trace(metadata=make_metadata(), nodes=tuple(nodes), rank=rank, source=f"t.{rank}.et")


def comp(i, deps=(), us=1):
    return make_node(i, f"c{i}", NodeType.COMP, data_deps=deps, duration_micros=us)


def kinds(problems):
    return sorted(p.kind.value for p in problems)


def test_clean_chain_has_no_problems_and_critical_path():
    t = _trace([comp(1, us=2), comp(2, [1], us=3), comp(3, [1], us=1), comp(4, [2, 3], us=4)])
    assert check_trace(t) == []
    assert critical_path(t) == (9000, [1, 2, 4])
    g = to_networkx(t)
    assert sorted(g.edges) == [(1, 2), (1, 3), (2, 4), (3, 4)]


def test_cycle_duplicate_dangling_unknown():
    t = _trace([comp(1, [3]), comp(2, [1]), comp(3, [2]), comp(4, [99]), comp(4), make_node(5, "bad", 42)])
    probs = check_trace(t)
    assert kinds(probs) == ["cycle", "dangling-dep", "duplicate-id", "unknown-type"]
    cyc = next(p for p in probs if p.kind is ProblemKind.CYCLE)
    assert "1 -> 3 -> 2 -> 1" in cyc.message
    dangling = next(p for p in probs if p.kind is ProblemKind.DANGLING_DEP)
    assert dangling.node == 4 and "node 99" in dangling.message
    assert str(dangling).startswith("file t.0.et, rank 0, node 4: dangling-dep")
    with pytest.raises(GraphError, match=r"rank 0.*and 3 more problems"):
        raise_problems(probs)
    assert find_cycle(_trace([comp(1), comp(2, [1])]).nodes) == []


def test_send_recv_matching_across_ranks():
    send = make_node(1, "s", NodeType.COMM_SEND, comm_src=0, comm_dst=1, comm_tag=5, comm_size=10)
    recv_ok = make_node(1, "r", NodeType.COMM_RECV, comm_src=0, comm_dst=1, comm_tag=5, comm_size=10)
    recv_bad_tag = make_node(1, "r", NodeType.COMM_RECV, comm_src=0, comm_dst=1, comm_tag=6, comm_size=10)
    assert check_rank_set({0: _trace([send], 0), 1: _trace([recv_ok], 1)}) == []
    probs = check_rank_set({0: _trace([send], 0), 1: _trace([recv_bad_tag], 1)})
    assert kinds(probs) == ["unmatched-recv", "unmatched-send"]
    assert any(p.rank == 0 and "tag 5" in p.message for p in probs)


def test_send_recv_sizes_must_agree():
    """ASTRA-sim pairs a send with a recv by (tag, src, dst, size): a recv of another size never completes."""
    send = make_node(1, "s", NodeType.COMM_SEND, comm_src=0, comm_dst=1, comm_tag=5, comm_size=10)
    recv = make_node(7, "r", NodeType.COMM_RECV, comm_src=0, comm_dst=1, comm_tag=5, comm_size=12)
    probs = check_rank_set({0: _trace([send], 0), 1: _trace([recv], 1)})
    assert kinds(probs) == ["p2p-size-mismatch"]
    assert probs[0].rank == 1 and probs[0].node == 7 and "expects 12 B" in probs[0].message and "has 10 B" in probs[0].message


def test_comm_group_ids_are_positive_integers(tmp_path):
    from xsim_trace.io import write_comm_groups

    t = {0: _trace([comp(1)], 0), 1: _trace([comp(1)], 1)}
    assert check_rank_set(t, {"1": [0, 1]}) == []
    assert kinds(check_rank_set(t, {"0": [0, 1], "tp0": [0], "01": [1]})) == ["group-id"] * 3
    with pytest.raises(GraphError, match="comm group id '0'"):
        write_comm_groups(tmp_path / "w", {"0": [0, 1]})
    assert not (tmp_path / "w.comm_groups.json").exists()


def test_collectives_must_agree_within_a_group():
    def ar(i, size, pg="1"):
        return make_node(i, "ar", NodeType.COMM_COLL, comm_type=0, comm_size=size, pg_name=pg)

    ok = {0: _trace([ar(1, 64)], 0), 1: _trace([ar(1, 64)], 1), 2: _trace([comp(1)], 2)}
    assert check_rank_set(ok, {"1": [0, 1]}) == []
    bad = {0: _trace([ar(1, 64)], 0), 1: _trace([ar(1, 32)], 1)}
    probs = check_rank_set(bad, {"1": [0, 1]})
    assert kinds(probs) == ["collective-mismatch"]
    assert "ALL_REDUCE 32 B here but ALL_REDUCE 64 B on rank 0" in probs[0].message
    outsider = {0: _trace([ar(1, 64)], 0), 1: _trace([ar(1, 64)], 1), 2: _trace([ar(1, 64)], 2)}
    assert kinds(check_rank_set(outsider, {"1": [0, 1]})) == ["group-membership"]


def test_real_feeder_trace_names_its_dangling_dependency():
    t = read_et(shared_path("chakra_et", "feeder_test_real", "chakra.0.et"))
    assert len(t.nodes) == 3664
    probs = check_trace(t)
    dangling = [p for p in probs if p.kind is ProblemKind.DANGLING_DEP]
    assert dangling[0].node == 216 and "node 3" in dangling[0].message
    assert "chakra.0.et" in str(dangling[0])


def test_rank_set_with_a_wrong_kind_value_is_reported_not_crashed():
    """A send whose comm_size is a string (a damaged file): the per-trace check reports it and the
    cross-rank checks, which would read the size as an integer, do not run (found by the .et fuzz)."""
    from dataclasses import replace

    from xsim_trace.graph.kinds import AttrKind
    from xsim_trace.graph.model import Attr

    send = make_node(1, "send", NodeType.COMM_SEND, comm_size=4, comm_dst=1, comm_tag=0)
    send = replace(send, attrs=tuple(a for a in send.attrs if a.name != "comm_size") + (Attr("comm_size", AttrKind.STRING, "x"),))
    recv = make_node(1, "recv", NodeType.COMM_RECV, comm_size=4, comm_src=0, comm_tag=0)
    problems = check_rank_set({0: Trace(make_metadata(), (send,), rank=0), 1: Trace(make_metadata(), (recv,), rank=1)})
    assert [(p.kind, p.rank, p.node) for p in problems] == [(ProblemKind.OUT_OF_RANGE, 0, 1)]
    assert "comm_size must be an integer" in problems[0].message


def test_scalar_ring_order_is_reported_not_crashed(tmp_path):
    """Found by the .et fuzz: a ring_order stored as one integer (not a list) crashed both
    `trace check` (cross-rank role checks) and the replay compile (len() of an int); it is now an
    out-of-range value naming node and field."""
    from dataclasses import replace

    from xsim_trace.graph.kinds import AttrKind, CollectiveType
    from xsim_trace.graph.model import Attr
    from xsim_trace.io import write_et
    from xsim_trace.replay.columnar import compile_rank_files

    ar = make_node(1, "ar", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=64, pg_name="0")
    ar = replace(ar, attrs=ar.attrs + (Attr("ring_order", AttrKind.INT64, 1),))
    traces = {r: Trace(make_metadata(), (ar,), rank=r, source=f"run.{r}.et") for r in (0, 1)}
    problems = check_rank_set(traces)
    assert [(p.kind, p.rank, p.node) for p in problems] == [(ProblemKind.OUT_OF_RANGE, 0, 1), (ProblemKind.OUT_OF_RANGE, 1, 1)]
    assert "ring_order must be a list of integers, found 1" in problems[0].message
    for r, trace in traces.items():
        write_et(tmp_path / f"run.{r}.et", trace)
    for columnar in (True, False):
        with pytest.raises(GraphError, match="rank 0, node 1, field ring_order: ring_order must be a list"):
            compile_rank_files(str(tmp_path / "run"), columnar=columnar)


def test_world_named_two_ways_is_one_group_for_check_and_replay(tmp_path):
    """Rank 0 names the world "" and rank 1 names it "0" (ASTRA-sim's world): replay matches the two
    all-reduces as one collective, as `trace check` does (found by the .et fuzz: replay refused the set)."""
    from xsim_trace.graph.kinds import CollectiveType
    from xsim_trace.io import write_et
    from xsim_trace.replay.columnar import compile_rank_files

    for rank, pg in ((0, ""), (1, "0")):
        node = make_node(1, "ar", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=1 << 20,
                         pg_name=pg)
        write_et(tmp_path / f"run.{rank}.et", Trace(make_metadata(), (node,), rank=rank))
    traces = {r: read_et(tmp_path / f"run.{r}.et", rank=r) for r in (0, 1)}
    assert check_rank_set(traces) == []
    for columnar in (True, False):
        workload, _ = compile_rank_files(str(tmp_path / "run"), columnar=columnar)
        assert workload.num_ranks == 2
