"""The compiled analytical-ca loop (numba, :mod:`xsim_trace.replay.compiled_ca`) gives the reference
engine over the Python ``analytical-ca`` backend bit for bit: every node's ready, start, end, wait and
peer, the engine's event counts and the backend's own counters, on chains of all-reduces, collectives
of every algorithm, a generated pipeline step (sends and receives), a heterogeneous rewrite with
reshards, on a single switch and on multi-node clusters, with both roundings and chunk sizes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from xsim_trace.cluster import load_cluster, single_switch  # noqa: E402
from xsim_trace.graph.kinds import CollectiveType  # noqa: E402
from xsim_trace.io import read_rank_set  # noqa: E402
from xsim_trace.network.registry import make_backend  # noqa: E402
from xsim_trace.network.topology import build_topology  # noqa: E402
from xsim_trace.replay import ReplaySettings, compile_workload  # noqa: E402
from xsim_trace.replay.engine import Engine  # noqa: E402
from xsim_trace.replay.sample import tp_dp_step  # noqa: E402
from replay_helpers import chains  # noqa: E402

SETTINGS = [
    ReplaySettings(),
    ReplaySettings(chunks=4, in_flight=1, endpoint_delay_ns=10),
    ReplaySettings(chunks=4, in_flight=2, reduction_delay_ns=70),
    ReplaySettings(chunks=3, in_flight=2, endpoint_delay_ns=300, reduction_delay_ns=70, p2p="rendezvous"),
    ReplaySettings.from_cli(["tree"], chunks=3, p2p="rendezvous", endpoint_delay_ns=100),
    ReplaySettings.from_cli(["halving_doubling"], chunks=2),
    ReplaySettings.from_cli(["direct"], chunks=2, endpoint_delay_ns=20),
    ReplaySettings.from_cli(["hierarchical"], chunks=2, endpoint_delay_ns=50),
]


def check_both(w, make, settings, node_of=None) -> None:
    ref_be, fast_be = make(), make()
    ref = Engine(w, ref_be, settings, node_of=node_of, compiled=False)
    fast = Engine(w, fast_be, settings, node_of=node_of, compiled=True)
    assert not ref.compiled_ca and fast.compiled_ca
    try:
        a = ref.run()
    except Exception as exc:  # e.g. a rendezvous deadlock: the compiled loop reports the same
        with pytest.raises(type(exc)) as err:
            fast.run()
        assert str(err.value) == str(exc)
        return
    b = fast.run()
    for name in ("ready_ns", "start_ns", "end_ns", "wait_ns", "peer_node"):
        assert np.array_equal(np.asarray(getattr(a, name), np.int64), np.asarray(getattr(b, name), np.int64)), name
    assert a.stats == b.stats
    assert (ref_be.flows_started, ref_be.events, ref_be.heap_ops) == (fast_be.flows_started, fast_be.events, fast_be.heap_ops)
    assert a.stats.flows > 0


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("ctype", [CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.ALL_TO_ALL,
                                   CollectiveType.BROADCAST])
def test_chains_on_a_switch(settings, ctype):
    w = compile_workload(chains(8, 3, (1 << 20) + 7, ctype))
    check_both(w, lambda: make_backend("analytical-ca", build_topology(single_switch(8, 50.0, 500))), settings)


@pytest.mark.parametrize("settings", [SETTINGS[0], SETTINGS[1], SETTINGS[6]])
@pytest.mark.parametrize("size", [64, 4096])
def test_zero_time_hops_on_a_switch(settings, size):
    """No latency and messages that serialise in under 1 ns (floored to 0): a link's release, a flow's
    next arrival and flows started in the same turn all land at one time, so the order of equal
    times (the kernel's lazy releases and first arrivals handled at start) decides who waits."""
    w = compile_workload(chains(8, 3, size, CollectiveType.ALL_TO_ALL))
    check_both(w, lambda: make_backend("analytical-ca", build_topology(single_switch(8, 50.0, 0))), settings)
    w = compile_workload(chains(8, 3, size))
    check_both(w, lambda: make_backend("analytical-ca", build_topology(single_switch(8, 50.0, 0))), settings)


@pytest.mark.parametrize("rounding,chunk_bytes", [("floor", None), ("ceil", 0), ("ceil", 1 << 14)])
def test_tp_dp_step_on_multi_node_clusters(rounding, chunk_bytes):
    traces, groups = tp_dp_step(tp=4, dp=4, layers=2, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20)
    w = compile_workload(traces, groups)
    for spec in ("dgx-h100:2", "dgx-a100:2"):
        cl = load_cluster(spec)
        node_of = [cl.node_of(r) for r in range(w.num_ranks)]
        opts = {"rounding": rounding} | ({} if chunk_bytes is None else {"chunk_bytes": chunk_bytes})
        for settings in (SETTINGS[1], SETTINGS[7]):
            check_both(w, lambda: make_backend("analytical-ca", build_topology(cl), **opts), settings, node_of)


@pytest.mark.parametrize("p2p", ["eager", "rendezvous"])
def test_generated_pipeline_step(tmp_path, p2p):
    """A generated Llama-2 step, TP2 PP2 DP2, 1F1B: sends and receives between stages."""
    from xsim_trace.cli.main import main  # noqa: PLC0415

    prefix = tmp_path / "l7" / "step"
    assert main(["-q", "generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--layers", "2",
                 "--out", str(prefix)]) == 0
    rs = read_rank_set(prefix)
    w = compile_workload(rs.traces, rs.comm_groups)
    settings = ReplaySettings(p2p=p2p, chunks=2, endpoint_delay_ns=0 if p2p == "eager" else 200)
    check_both(w, lambda: make_backend("analytical-ca", build_topology(single_switch(8, 400.0, 936.25))), settings)
    cl = load_cluster("dgx-a100:2")
    check_both(w, lambda: make_backend("analytical-ca", build_topology(cl)), settings,
               [cl.node_of(r) for r in range(8)])


@pytest.mark.parametrize("strategy", ["direct", "leader", "broadcast"])
def test_heterogeneous_rewrite_with_reshards(strategy):
    from rewrite_helpers import TINY_MODEL, fixed_template, plan_dict  # noqa: PLC0415
    from xsim_trace.plan.parse import plan_from_mapping  # noqa: PLC0415
    from xsim_trace.rewrite.rewriter import rewrite  # noqa: PLC0415

    d = plan_dict(model=dict(TINY_MODEL, num_layers=8), schedule="interleaved-1f1b", chunks=2, reshard=strategy,
                  micro_batches=4,
                  pipelines=[{"stages": [{"group": "h100", "tp": 2, "layers": [[0, 2], [4, 6]]},
                                         {"group": "a100", "tp": 4, "layers": [[2, 4], [6, 8]]}]},
                             {"stages": [{"group": "h100", "tp": 4, "layers": [[0, 4], [4, 8]]}]}])
    res = rewrite(plan_from_mapping(d), fixed_template(act_bytes=400_000, tp_coll_bytes=1 << 16, grad_bytes=1 << 20))
    w = compile_workload(res.traces, res.comm_groups)
    for settings in (SETTINGS[2], SETTINGS[3]):
        check_both(w, lambda: make_backend("analytical-ca", build_topology(single_switch(16, 50.0, 1000.0))), settings)


def test_default_choice_and_fallbacks():
    small = compile_workload(chains(4, 1, 1 << 20))
    topo = build_topology(single_switch(4, 50.0, 500))
    assert not Engine(small, make_backend("analytical-ca", topo)).compiled_ca  # too few flows to pay for the kernel
    big = compile_workload(chains(64, 4, 1 << 20))
    topo64 = build_topology(single_switch(64, 50.0, 500))
    assert Engine(big, make_backend("analytical-ca", topo64), ReplaySettings(chunks=4)).compiled_ca
    assert not Engine(big, make_backend("analytical", topo64), ReplaySettings(chunks=4)).compiled_ca
    used = make_backend("analytical-ca", topo64)
    Engine(small, used).run()
    assert not Engine(big, used, compiled=True).compiled_ca  # a backend with flows behind it stays in Python


def test_capacity_rerun_and_progress(monkeypatch):
    """A capacity that runs out reruns from scratch with room to spare: the same times; the progress
    reports add up to the node count."""
    from xsim_trace.replay import compiled_ca  # noqa: PLC0415

    w = compile_workload(chains(16, 3, 1 << 20, CollectiveType.ALL_TO_ALL))
    make = lambda: make_backend("analytical-ca", build_topology(single_switch(16, 50.0, 500)))  # noqa: E731
    settings = ReplaySettings(chunks=4, in_flight=4)
    ref = Engine(w, make(), settings, compiled=True).run()
    real = compiled_ca._collectives
    monkeypatch.setattr(compiled_ca, "_collectives", lambda *a: (lambda r: (*r[:5], 3, *r[6:]))(real(*a)))  # 3 flows of room
    seen = []
    got = Engine(w, make(), settings, compiled=True, progress=seen.append).run()
    assert np.array_equal(ref.end_ns, got.end_ns) and ref.stats == got.stats
    assert sum(seen) == w.num_nodes
