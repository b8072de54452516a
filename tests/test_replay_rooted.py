"""comm_root, ring_order and sender completion, against hand-computed times.

Backends here are contention-free with a per-pair time, so every case runs twice: in closed form and
flow by flow, with identical results.  Rule under test: a member's chunk ends once every receive
addressed to it has arrived *and* every send it issued has been delivered (a broadcast root ends
when its data has reached its neighbour, not at once)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from replay_helpers import A, StarAlphaBeta, coll, trace  # noqa: E402

from xsim_trace.errors import GraphError  # noqa: E402
from xsim_trace.graph.kinds import CollectiveType as C  # noqa: E402
from xsim_trace.network.protocol import BackendCapabilities, Flow  # noqa: E402
from xsim_trace.replay import ReplaySettings, replay  # noqa: E402
from xsim_trace.replay.algorithms import build_schedule  # noqa: E402


class PairTimes:
    """Contention-free: a transfer src -> dst of b bytes takes 1000 + 100 src + 10 dst + b ns."""

    name = "test-pair-times"
    capabilities = BackendCapabilities(closed_form=True, contention_free=True)

    def __init__(self, fn=None) -> None:
        self.fn = fn or (lambda s, d, b: 1000 + 100 * s + 10 * d + b)
        self.active: dict[int, int] = {}

    def transfer_ns(self, src: int, dst: int, size: int) -> int:
        return self.fn(src, dst, size)

    def transfer_time_ns(self, src, dst, size):
        return np.asarray([self.fn(a, b, c) for a, b, c in zip(src.tolist(), dst.tolist(), size.tolist())], np.int64)

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        self.active[flow.flow_id] = now_ns + self.fn(flow.src, flow.dst, flow.size_bytes)

    def next_completion_ns(self):
        return min(self.active.values()) if self.active else None

    def advance(self, now_ns: int) -> list[int]:
        done = sorted((t, f) for f, t in self.active.items() if t <= now_ns)
        for _, f in done:
            del self.active[f]
        return [f for _, f in done]


def slow_pair(s: int, d: int, b: int) -> int:
    """Links between ranks 0 and 1 take 5000 ns, every other pair 1000 ns (size-independent)."""
    return 5000 if {s, d} == {0, 1} else 1000


ONE = ReplaySettings(chunks=1, in_flight=1)


def ends(ctype, size, n=4, settings=ONE, fn=None, **attrs):
    """Per-rank end of one collective over ranks 0..n-1, checked equal on both engine paths."""
    traces = {r: trace(r, [coll(1, size, ctype=ctype, **attrs)]) for r in range(n)}
    out = []
    for closed in (True, False):
        r = replay(traces, PairTimes(fn), settings, closed_form=closed)
        assert r.stats.closed_form_collectives == (1 if closed else 0)
        out.append([int(x) for x in r.times.end_ns])
    assert out[0] == out[1]
    return out[0]


def test_broadcast_root_ends_when_its_data_reaches_its_neighbour():
    # ring broadcast = chain 0 -> 1 -> 2 -> 3 of 400 B: 0->1 1410, 1->2 1520, 2->3 1630
    assert ends(C.BROADCAST, 400) == [1410, 1410 + 1520, 1410 + 1520 + 1630, 1410 + 1520 + 1630]


def test_broadcast_from_comm_root():
    # chain 2 -> 3 -> 0 -> 1: 2->3 1630, 3->0 1700, 0->1 1410
    assert ends(C.BROADCAST, 400, comm_root=2) == [1630 + 1700 + 1410, 4740, 1630, 1630 + 1700]


def test_broadcast_chain_follows_ring_order_from_the_root():
    # ring order 0 3 2 1, root 3: chain 3 -> 2 -> 1 -> 0: 3->2 1720, 2->1 1610, 1->0 1500
    assert ends(C.BROADCAST, 400, comm_root=3, ring_order=[0, 3, 2, 1]) == [4830, 4830, 1720 + 1610, 1720]


def test_reduce_chain_ends_at_comm_root():
    # ring reduce to root 1: chain 2 -> 3 -> 0 -> 1 of 400 B (1630, 1700, 1410)
    assert ends(C.REDUCE, 400, comm_root=1) == [3330 + 1410, 4740, 1630, 3330]


def test_gather_to_and_scatter_from_comm_root():
    # direct gather of 400 B (100 B each) to rank 2: 0->2 1120, 1->2 1220, 3->2 1420; senders end at delivery
    assert ends(C.GATHER, 400, comm_root=2) == [1120, 1220, 1420, 1420]
    # direct scatter from rank 1: 1->0 1200, 1->2 1220, 1->3 1230; the root ends with its last send
    assert ends(C.SCATTER, 400, comm_root=1) == [1200, 1230, 1220, 1230]
    # no comm_root: the lowest rank of the group (0): 1->0 1200, 2->0 1300, 3->0 1400
    assert ends(C.GATHER, 400) == [1400, 1200, 1300, 1400]


def test_all_reduce_ring_order_avoids_the_slow_pair():
    # rank p receives step s at R[p][s] = R[p-1][s-1] + t(p-1 -> p): after the 6 steps of a
    # 4-rank ring, one lap plus the two edges into p and p-1; a rank ends at max(R[p][5], R[p+1][5])
    # (its last send is delivered when its successor receives).  Ring 0 1 2 3 has the slow edge
    # 0 -> 1 (s = 5000, f = 1000): R = [s+5f, 2s+4f, 2s+4f, s+5f] -> ends [2s+4f, 2s+4f, 2s+4f, s+5f]
    assert ends(C.ALL_REDUCE, 4000, fn=slow_pair) == [14000, 14000, 14000, 10000]
    # ring 0 2 1 3 never uses the 0-1 pair: 6 steps of 1000 ns
    assert ends(C.ALL_REDUCE, 4000, fn=slow_pair, ring_order=[0, 2, 1, 3]) == [6000] * 4


def test_broadcast_chunks_are_windowed_by_delivery():
    # 2 chunks of 200 B, 1 in flight, t = 2 x 100 + 200 B / (1 B/ns) = 400 ns per hop: the root sends
    # chunk 1 once chunk 0 has reached rank 1, so it ends at 2t
    t = 400
    traces = {r: trace(r, [coll(1, 400, ctype=C.BROADCAST)]) for r in range(4)}
    s = ReplaySettings(chunks=2, in_flight=1)
    got = []
    for closed in (True, False):
        r = replay(traces, StarAlphaBeta(1.0, 100), s, closed_form=closed)
        got.append(r.rank_iteration_ns())
    # rank 1: chunk 0 in at t, forwarded by 2t; chunk 1 in at 2t, forwarded by 3t.
    # rank 2: chunk 0 in at 2t, forwarded by 3t; chunk 1 in at 3t, forwarded by 4t.  rank 3: 4t
    assert got[0] == got[1] == [2 * t, 3 * t, 4 * t, 4 * t]


def test_ring_order_maps_the_schedule_back_to_member_positions():
    sched = build_schedule("ring", C.ALL_GATHER, 4, 400, order=[0, 2, 1, 3])
    assert [(int(a), int(b)) for a, b in zip(sched.steps[0].src, sched.steps[0].dst)] == [(0, 2), (2, 1), (1, 3), (3, 0)]
    with pytest.raises(ValueError):
        build_schedule("ring", C.ALL_GATHER, 4, 400, order=[0, 0, 1, 3])


@pytest.mark.parametrize(
    "attrs_by_rank,field,text",
    [
        ({r: {A.COMM_ROOT: 5} for r in range(4)}, A.COMM_ROOT, "not a member"),
        ({0: {A.COMM_ROOT: 1}, 1: {A.COMM_ROOT: 2}}, A.COMM_ROOT, "comm_root 2 here but 1"),
        ({r: {A.RING_ORDER: [0, 1, 2]} for r in range(4)}, A.RING_ORDER, "not an ordering"),
        ({0: {A.RING_ORDER: [0, 1, 2, 3]}, 2: {A.RING_ORDER: [3, 2, 1, 0]}}, A.RING_ORDER, "elsewhere"),
    ],
)
def test_bad_root_or_ring_order_names_rank_node_and_field(attrs_by_rank, field, text):
    traces = {r: trace(r, [coll(1, 400, ctype=C.BROADCAST, **attrs_by_rank.get(r, {}))]) for r in range(4)}
    with pytest.raises(GraphError) as e:
        replay(traces, PairTimes(), ONE)
    msg = str(e.value)
    assert text in msg and field in msg and "node" in msg and "rank" in msg


@pytest.mark.parametrize("algo", ["ring", "tree", "direct", "halving_doubling"])
@pytest.mark.parametrize("ctype", [C.ALL_REDUCE, C.ALL_GATHER, C.REDUCE_SCATTER, C.BROADCAST, C.REDUCE, C.GATHER, C.SCATTER, C.ALL_TO_ALL])
def test_closed_form_equals_flow_path_with_uneven_links_roots_and_ring_order(algo, ctype):
    # uneven per-pair times, 2 chunks, endpoint and reduction delays: the sender rule, comm_root and
    # ring_order give the same per-rank ends on both paths
    s = ReplaySettings(algorithms={ctype: algo}, chunks=2, in_flight=1, endpoint_delay_ns=7, reduction_delay_ns=3)
    a = ends(ctype, 4096, n=8, settings=s, comm_root=5, ring_order=[0, 3, 6, 1, 4, 7, 2, 5])
    assert max(a) > 1000
