"""``analytical-ca`` priced in closed form where no two flows would hold a link at once
(:mod:`xsim_trace.replay.uncontended`): where the shortcut keeps its replay, every node's ready,
start, end, wait and peer equal the reference engine's over the Python ``analytical-ca`` backend
(flow by flow); where some flow would have waited for a link, it gives the replay back (None) and
the flow-by-flow one stands."""

from __future__ import annotations

import numpy as np
import pytest

from xsim_trace.cluster import load_cluster, single_switch
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Trace, make_metadata, make_node
from xsim_trace.network.registry import make_backend
from xsim_trace.network.topology import build_topology
from xsim_trace.replay import ReplaySettings, compile_workload, replay_compiled
from xsim_trace.replay.engine import Engine
from xsim_trace.replay.uncontended import applies, replay_uncontended
from replay_helpers import chains  # noqa: E402

SETTINGS = [
    ReplaySettings(),
    ReplaySettings(chunks=4, in_flight=1, endpoint_delay_ns=10),
    ReplaySettings(chunks=4, in_flight=1, endpoint_delay_ns=10, reduction_delay_ns=30),
    ReplaySettings(chunks=4, in_flight=2, reduction_delay_ns=70),
    ReplaySettings.from_cli(["tree"], chunks=3, endpoint_delay_ns=100),
    ReplaySettings.from_cli(["halving_doubling"], chunks=2),
    ReplaySettings.from_cli(["direct"], chunks=2, endpoint_delay_ns=20),
    ReplaySettings.from_cli(["hierarchical"], chunks=2, endpoint_delay_ns=50),
]
TIMES = ("ready_ns", "start_ns", "end_ns", "wait_ns", "peer_node")


def pipeline(ranks: int, micro: int, size: int, compute_ns: int = 20_000) -> dict[int, Trace]:
    """Rank r: per micro-batch, receive from r - 1, compute, send to r + 1 (one comm stream per rank)."""
    out = {}
    for r in range(ranks):
        nodes, last, i = [], (), 0
        for m in range(micro):
            if r > 0:
                nodes.append(make_node(i, f"recv{m}", NodeType.COMM_RECV, data_deps=last, comm_src=r - 1, comm_size=size,
                                       comm_tag=m))
                last, i = (i,), i + 1
            nodes.append(make_node(i, f"f{m}", NodeType.COMP, data_deps=last, duration_ns=compute_ns + 11 * r,
                                   is_cpu_op=False))
            last, i = (i,), i + 1
            if r + 1 < ranks:
                nodes.append(make_node(i, f"send{m}", NodeType.COMM_SEND, data_deps=last, comm_dst=r + 1, comm_size=size,
                                       comm_tag=m))
                last, i = (i,), i + 1
        out[r] = Trace(make_metadata(world_size=ranks), tuple(nodes), rank=r)
    return out


def kept(w, make, settings, node_of=None, **kw) -> bool:
    """Whether the shortcut kept its replay; where it did, every node as the reference engine's."""
    ref = Engine(w, make(), settings, node_of=node_of, compiled=False).run()
    got = replay_uncontended(w, make(), settings, node_of=node_of, **kw)
    if got is None:
        return False
    for name in TIMES:
        assert np.array_equal(np.asarray(getattr(ref, name), np.int64), np.asarray(getattr(got, name), np.int64)), name
    assert got.stats.closed_form_collectives == ref.stats.collectives
    return True


def switch(n, bw=50.0, lat=500):
    return lambda: make_backend("analytical-ca", build_topology(single_switch(n, bw, lat)))


@pytest.mark.parametrize("ctype", [CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER,
                                   CollectiveType.ALL_TO_ALL, CollectiveType.BROADCAST, CollectiveType.REDUCE])
def test_chains_on_a_switch(ctype):
    w = compile_workload(chains(8, 3, (1 << 20) + 7, ctype))
    taken = [kept(w, switch(8), s) for s in SETTINGS]
    # a ring, one chunk in flight: each link carries one flow at a time (all-to-all has no ring: its
    # direct schedule sends to every peer at once, which share the sender's uplink)
    assert (taken[1] and taken[2]) == (ctype != CollectiveType.ALL_TO_ALL)


@pytest.mark.parametrize("chunk_bytes", [0, None])
def test_chains_on_multi_node_clusters(chunk_bytes):
    opts = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
    w = compile_workload(chains(16, 2, 3 << 20))
    for spec in ("dgx-h100:2", "dgx-a100:2"):
        cl = load_cluster(spec)
        node_of = [cl.node_of(r) for r in range(16)]
        make = lambda: make_backend("analytical-ca", build_topology(cl), **opts)  # noqa: E731
        taken = [kept(w, make, s, node_of) for s in SETTINGS]
        assert any(taken)


@pytest.mark.parametrize("size", [64, 4096])
def test_zero_time_hops(size):
    """No latency, messages that serialise in under 1 ns: holds of 0 ns count as 1 ns in the checks."""
    for ctype in (CollectiveType.ALL_REDUCE, CollectiveType.ALL_TO_ALL):
        w = compile_workload(chains(8, 3, size, ctype))
        for s in SETTINGS[:3]:
            kept(w, switch(8, 50.0, 0), s)


@pytest.mark.parametrize("p2p", ["eager", "rendezvous"])
def test_pipeline_of_sends(p2p):
    w = compile_workload(pipeline(4, 6, 1 << 20))
    s = ReplaySettings(p2p=p2p, endpoint_delay_ns=10)
    assert kept(w, switch(4), s)
    cl = load_cluster("dgx-a100:2")
    assert kept(compile_workload(pipeline(16, 3, 1 << 20)), lambda: make_backend("analytical-ca", build_topology(cl)), s,
                [cl.node_of(r) for r in range(16)])


def test_contention_gives_the_replay_back():
    """Rank 0's eager send reaches rank 1 while 1..3 all-reduce: the send and the ring share rank 1's
    downlink, so the closed form would be wrong; two chunks in flight meet on every uplink."""
    nodes = {0: [make_node(0, "send", NodeType.COMM_SEND, comm_dst=1, comm_size=64 << 20, comm_tag=0)]}
    for r in (1, 2, 3):
        nodes[r] = [make_node(0, "ar", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=16 << 20,
                              pg_name="1")]
    nodes[1].append(make_node(1, "recv", NodeType.COMM_RECV, data_deps=(0,), comm_src=0, comm_size=64 << 20, comm_tag=0))
    traces = {r: Trace(make_metadata(world_size=4), tuple(n), rank=r) for r, n in nodes.items()}
    w = compile_workload(traces, {"1": (1, 2, 3)})
    s = ReplaySettings(chunks=4, in_flight=1, endpoint_delay_ns=10)
    assert replay_uncontended(w, switch(4)(), s) is None
    ref = Engine(w, switch(4)(), s, compiled=False).run()
    res = replay_compiled(w, switch(4)(), s)
    assert res.iteration_ns == int(ref.end_ns.max()) and res.stats.closed_form_collectives == 0
    assert replay_uncontended(compile_workload(chains(8, 2, 1 << 20)), switch(8)(), SETTINGS[3]) is None


def test_what_is_tried():
    w = compile_workload(chains(8, 2, 1 << 20))
    be = switch(8)()
    assert applies(be, w) and not applies(make_backend("analytical", be.topology), w)
    res = replay_compiled(w, be, SETTINGS[1])
    assert res.stats.closed_form_collectives == 2 and be.flows_started == 0
    from xsim_trace.replay.sample import tp_dp_step  # noqa: PLC0415

    traces, groups = tp_dp_step(tp=2, dp=2, layers=1, gemm_ns=50_000, tp_bytes=1 << 20, grad_bytes=1 << 20)
    step = compile_workload(traces, groups)
    many_streams = any(len({int(step.resource[i]) for i in range(step.num_nodes)
                            if step.node_rank[i] == r and step.exec_kind[i] != 0}) > 1 for r in range(step.num_ranks))
    assert applies(switch(4)(), step) == (not many_streams)
    assert replay_compiled(w, switch(8)(), SETTINGS[1], uncontended=False).stats.closed_form_collectives == 0


def test_folded_and_compiled():
    """The compiled closed-form loop with symmetry folding under the shortcut: every node as the
    flow-by-flow reference's."""
    pytest.importorskip("numba")
    w = compile_workload(chains(32, 3, 1 << 20))
    assert kept(w, switch(32), SETTINGS[2], compiled=True, fold=True)
    got = replay_uncontended(w, switch(32)(), SETTINGS[2], compiled=True, fold=True)
    assert got.stats.folded_ranks == 31


def test_collectives_priced_elsewhere_fail_the_check():
    """The check only vouches for what the booking walk priced: a replay priced by another pricer fails it."""
    from xsim_trace.replay.collective_pricing import ScheduleWalkPricer  # noqa: PLC0415
    from xsim_trace.replay.schedule_cache import ScheduleCache  # noqa: PLC0415
    from xsim_trace.replay.uncontended import BookingWalk, LoneFlows, contention  # noqa: PLC0415

    w = compile_workload(chains(8, 2, 1 << 20))
    s = SETTINGS[1]
    view = LoneFlows(switch(8)())
    walk = BookingWalk(ScheduleCache(w, view, s), s, view)
    other = ScheduleWalkPricer(ScheduleCache(w, view, s), s)
    raw = Engine(w, view, s, closed_form=True, pricer=other, compiled=False).run()
    assert contention(w, raw, walk, view, s) == "a collective with flows was priced without the walk"
    raw = Engine(w, view, s, closed_form=True, pricer=walk, compiled=False).run()
    assert contention(w, raw, walk, view, s) is None


def random_program(seed: int, ranks: int) -> tuple[dict[int, Trace], dict[str, tuple[int, ...]]]:
    """Every rank a chain: computes, collectives over random groups, sends and receives, issued in one
    global order (so that nothing deadlocks), on one comm stream per rank."""
    rng = np.random.default_rng(seed)
    groups = {str(g + 1): tuple(sorted(rng.choice(ranks, size=int(rng.integers(2, ranks + 1)), replace=False).tolist()))
              for g in range(3)}
    nodes: dict[int, list] = {r: [] for r in range(ranks)}

    def add(r, name, kind, **attrs):
        deps = (len(nodes[r]) - 1,) if nodes[r] else ()
        nodes[r].append(make_node(len(nodes[r]), name, kind, data_deps=deps, **attrs))

    sizes = [1 << 10, 1 << 16, 1 << 20, (1 << 20) + 7]
    ctypes = [CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER, CollectiveType.BROADCAST]
    for op in range(int(rng.integers(6, 14))):
        what = rng.integers(0, 3)
        if what == 0:
            r = int(rng.integers(ranks))
            add(r, f"c{op}", NodeType.COMP, duration_ns=int(rng.integers(1, 50_000)), is_cpu_op=False)
        elif what == 1:
            g = str(int(rng.integers(1, 4)))
            size, ctype = sizes[int(rng.integers(4))], ctypes[int(rng.integers(4))]
            for r in groups[g]:
                add(r, f"x{op}", NodeType.COMM_COLL, comm_type=int(ctype), comm_size=size, pg_name=g)
        else:
            src, dst = (int(x) for x in rng.choice(ranks, size=2, replace=False))
            size = sizes[int(rng.integers(4))]
            add(src, f"s{op}", NodeType.COMM_SEND, comm_dst=dst, comm_size=size, comm_tag=op)
            add(dst, f"r{op}", NodeType.COMM_RECV, comm_src=src, comm_size=size, comm_tag=op)
    for r in range(ranks):
        if not nodes[r]:
            add(r, "idle", NodeType.COMP, duration_ns=1, is_cpu_op=False)
    return {r: Trace(make_metadata(world_size=ranks), tuple(n), rank=r) for r, n in nodes.items()}, groups


def test_random_programs():
    """Seeded random programs (computes, collectives of four types over three groups, eager and
    rendezvous sends) on a switch and on a two-node cluster: wherever the shortcut keeps its replay,
    every node is the reference engine's."""
    cl = load_cluster("dgx-a100:2")
    node_of = [cl.node_of(r) for r in range(16)]
    taken = 0
    for seed in range(12):
        traces, groups = random_program(seed, 8 if seed % 2 else 16)
        w = compile_workload(traces, groups)
        p2p = "eager" if seed % 3 else "rendezvous"
        for s in (ReplaySettings(chunks=2, in_flight=1, endpoint_delay_ns=10, p2p=p2p),
                  ReplaySettings.from_cli(["tree"], chunks=1, p2p=p2p)):
            if w.num_ranks == 8:
                taken += kept(w, switch(8, 50.0, 700), s)
            else:
                taken += kept(w, lambda: make_backend("analytical-ca", build_topology(cl)), s, node_of)
    assert taken >= 4
