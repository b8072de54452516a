"""Start offsets, mirrored peers, comm grouping, comparison, table/JSON/plot and the CLI, on small graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Trace, make_metadata, make_node
from xsim_trace.validate.commops import comm_operations
from xsim_trace.validate.compare import (
    SimulatedCollective,
    SimulatedRank,
    compare,
    compute_only_critical_path_ns,
    error_pct,
    format_table,
)
from xsim_trace.validate.scenario import START_OFFSET_NODE, mirror_peers, mirror_rank, with_start_offset


def _trace(rank: int, nodes) -> Trace:
    return Trace(make_metadata(rank=rank, world_size=4), tuple(nodes), rank=rank)


def _chain():
    cpu = make_node(1, "op", NodeType.COMP, duration_micros=5, is_cpu_op=True, stream=-1)
    k = make_node(2, "kernel", NodeType.COMP, data_deps=[1], duration_micros=7, stream=7)
    coll = make_node(3, "ALL_REDUCE nccl", NodeType.COMM_COLL, data_deps=[2], comm_type=int(CollectiveType.ALL_REDUCE),
                     comm_size=1 << 20, stream=9, measured_duration_ns=40_000)
    after = make_node(4, "opt", NodeType.COMP, data_deps=[3], duration_micros=3, is_cpu_op=True, stream=-1)
    side = make_node(5, "side", NodeType.COMP, duration_micros=2, stream=7)  # a second root
    return [cpu, k, coll, after, side]


def test_start_offset_delays_every_root():
    t = with_start_offset(_trace(0, _chain()), 2_500)
    first = t.nodes[0]
    assert first.name == START_OFFSET_NODE and first.id == 6 and first.duration_ns == 2_500 and first.is_cpu_op
    by = t.by_id()
    assert by[1].ctrl_deps == (6,) and by[5].ctrl_deps == (6,)
    assert by[2].ctrl_deps == () and by[2].data_deps == (1,)
    assert with_start_offset(_trace(0, _chain()), 0).nodes == tuple(_chain())
    with pytest.raises(GraphError, match="start offset"):
        with_start_offset(_trace(0, _chain()), -1)


def test_compute_only_critical_path_by_hand():
    # 5 us op -> 7 us kernel -> (collective free) -> 3 us op = 15 us; the 2 us side root is shorter
    assert compute_only_critical_path_ns(_trace(0, _chain())) == 15_000


def _alltoall(rank: int, order, base_id: int, start_us: int):
    """Per-peer nodes of one all-to-all, chained, as xsim-convert writes them."""
    nodes = []
    prev = None
    for i, (peer, send_first) in enumerate(order):
        for is_send in ((True, False) if send_first else (False, True)):
            nid = base_id + len(nodes)
            src, dst = (rank, peer) if is_send else (peer, rank)
            name = f"ALL_TO_ALL k {'send->' if is_send else 'recv<-'}{peer}"
            nodes.append(make_node(nid, name, NodeType.COMM_SEND if is_send else NodeType.COMM_RECV,
                                   data_deps=[prev] if prev else [], start_time_micros=start_us,
                                   comm_type=int(CollectiveType.ALL_TO_ALL), comm_src=src, comm_dst=dst,
                                   comm_tag=0, comm_size=100 if is_send else 60, stream=84, pg_name="0"))
            prev = nid
    return nodes


def _circle(rank, members):  # rounds for 4 ranks: (0,3)(1,2) / (0,2)(1,3)... a fixed non-shift order
    rounds = [[(0, 3), (1, 2)], [(0, 2), (1, 3)], [(0, 1), (2, 3)]]
    out = []
    for pairs in rounds:
        for a, b in pairs:
            if rank == a:
                out.append((b, True))
            elif rank == b:
                out.append((a, False))
    return out


def test_comm_operations_groups_per_peer_nodes_of_one_kernel():
    nodes = _alltoall(0, _circle(0, range(4)), 10, 100) + _chain()
    t = _trace(0, nodes)
    groups = comm_operations(t)
    assert [len(g) for g in groups] == [1, 6]  # the all-reduce (start 0) first, then the all-to-all
    assert {t.nodes[p].name.split(" ")[-1] for p in groups[1]} == {"send->3", "recv<-3", "send->2", "recv<-2",
                                                                    "send->1", "recv<-1"}


def test_mirror_shifts_p2p_and_reorders_alltoalls():
    send = make_node(1, "pp send", NodeType.COMM_SEND, comm_src=0, comm_dst=1, comm_tag=7, comm_size=8)
    recv = make_node(2, "pp recv", NodeType.COMM_RECV, data_deps=[1], comm_src=3, comm_dst=0, comm_tag=7, comm_size=8)
    nodes = [send, recv] + _alltoall(0, _circle(0, range(4)), 10, 100)
    m = mirror_rank(_trace(0, nodes), 0, 2, 4, alltoall_order=_circle)
    assert m.rank == 2 and m.metadata.attr(A.META_RANK) == 2
    by = m.by_id()
    assert (by[1].comm_src, by[1].comm_dst) == (2, 3) and (by[2].comm_src, by[2].comm_dst) == (1, 2)
    a2a = [n for n in m.nodes if n.comm_type == CollectiveType.ALL_TO_ALL]
    want = []
    for peer, send_first in _circle(2, range(4)):
        pair = [("send", 2, peer), ("recv", peer, 2)]
        want.extend(pair if send_first else pair[::-1])
    got = [("send" if n.type == NodeType.COMM_SEND else "recv", n.comm_src, n.comm_dst) for n in a2a]
    assert got == want
    assert [n.id for n in a2a] == list(range(10, 16)) and a2a[1].data_deps == (10,)
    assert {n.comm_size_bytes for n in a2a if n.type == NodeType.COMM_SEND} == {100}
    # without an order, peers shift like any p2p
    plain = mirror_rank(_trace(0, nodes), 0, 1, 4)
    assert [(n.comm_src, n.comm_dst) for n in plain.nodes[2:4]] == [(1, 0), (0, 1)]  # was 0->3, 3->0


def test_mirror_peers_completes_the_world():
    full, mirrored = mirror_peers({0: _trace(0, _chain())}, 4)
    assert sorted(full) == [0, 1, 2, 3] and mirrored == (1, 2, 3)
    assert [full[r].rank for r in range(4)] == [0, 1, 2, 3]
    with pytest.raises(GraphError, match="does not cover"):
        mirror_peers({5: _trace(5, _chain())}, 4)


def _measured(rank: int, step_ns: int):
    from xsim_trace.validate.measured import NcclKernel, RankMeasurement, Step

    k = NcclKernel(0, "ncclKernel_AllReduce_RING_LL_Sum_float", "ALL_REDUCE", "RING", "LL", 9, 0, 50_000, None,
                   None, None, None, None, None)
    s = Step(10, 0, step_ns)
    return RankMeasurement(rank, 2, "V100", "x", (s,), s, 3, 2, 1, 1, 50_000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                           (k,))


def test_compare_rows_table_json_and_plot(tmp_path):
    meas = {0: _measured(0, 10_000_000), 1: _measured(1, 20_000_000)}
    sim = {
        0: SimulatedRank(0, 10_500_000, 0, 9_000_000, (SimulatedCollective(3, "x", "ALL_REDUCE", 1024, 40_000),)),
        1: SimulatedRank(1, 19_000_000, 2_000_000, None, ()),
    }
    v = compare("demo", "v100-dgx1", meas, sim, ["a note"])
    assert [r.error_pct for r in v.ranks] == [5.0, -5.0]
    assert v.max_abs_error_pct == 5.0 and v.mean_abs_error_pct == 5.0
    c0, c1 = v.collectives
    assert (c0.measured_ns, c0.simulated_ns, c0.error_pct, c0.size_bytes) == (50_000, 40_000, -20.0, 1024)
    assert c1.simulated_ns is None and c1.error_pct is None
    text = format_table(v)
    assert "+5.00" in text and "-5.00" in text and "note: a note" in text and "ALL_REDUCE" in text
    doc = json.loads(json.dumps(v.to_dict()))
    assert doc["max_abs_error_pct"] == 5.0 and doc["ranks"][1]["start_offset_ns"] == 2_000_000
    assert error_pct(0, 0) == 0.0
    from xsim_trace.validate.plot import plot_validation

    plot_validation(v, tmp_path / "v.png")
    assert (tmp_path / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["v.png"]  # no temp file left


def test_cli_errors_are_one_line(tmp_path, capsys):
    from xsim_trace.cli.main import main

    assert main(["validate", str(tmp_path / "none.json"), "--cluster", "v100-dgx1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xsim: error:")
    assert main(["validate", str(tmp_path), "--cluster", "no-such-preset", "--plot"]) == 2
    assert "--plot needs --out" in capsys.readouterr().err
    bad = tmp_path / "c.yaml"
    bad.write_text("name: [")
    trace = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "kineto" / "hta_a100_nccl_2rank"
    if trace.is_dir():
        assert main(["validate", str(trace), "--cluster", str(bad)]) == 2
        assert "not valid YAML" in capsys.readouterr().err
        assert main(["validate", str(trace), "--cluster", "no-such-preset"]) == 2
        err = capsys.readouterr().err
        assert "no-such-preset" in err and "v100-dgx1" in err
