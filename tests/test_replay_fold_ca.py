"""Symmetry folding on the compiled ``analytical-ca`` loop (xsim_trace.replay.fold_ca) is exact: the
folded replay gives every node of every rank the ready, start, end, wait and peer of the reference
engine over the Python backend (every rank simulated, flow by flow), and it refuses to fold where a
link is shared asymmetrically (a fabric between nodes, a slower port) or where the event order
decided something the full run may decide otherwise (a tie at a link)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from xsim_trace.cluster import load_cluster, single_switch  # noqa: E402
from xsim_trace.network.registry import make_backend  # noqa: E402
from xsim_trace.network.topology import build_topology  # noqa: E402
from xsim_trace.replay import ReplaySettings, compile_workload  # noqa: E402
from xsim_trace.replay.api import replay_compiled  # noqa: E402
from xsim_trace.replay.columnar import compile_rank_files  # noqa: E402
from xsim_trace.replay.engine import Engine  # noqa: E402
from xsim_trace.replay.fold_ca import ties_carry_over  # noqa: E402
from xsim_trace.replay.sample import tp_dp_step  # noqa: E402

from replay_helpers import assert_same_node_times, generate_pipeline_step  # noqa: E402

SETTINGS = [
    ReplaySettings(),
    ReplaySettings(chunks=4, in_flight=1, endpoint_delay_ns=10),
    ReplaySettings(chunks=3, in_flight=1, endpoint_delay_ns=300, reduction_delay_ns=70, p2p="rendezvous"),
]


def folded_and_reference(w, topo, settings, chunk_bytes=0):
    """The folded compiled replay and the reference engine's (Python loop, Python backend)."""
    folded = Engine(w, make_backend("analytical-ca", topo, chunk_bytes=chunk_bytes), settings, compiled=True,
                    fold=True)
    assert folded.compiled_ca
    ref = Engine(w, make_backend("analytical-ca", topo, chunk_bytes=chunk_bytes), settings, compiled=False)
    return folded.run(), ref.run()




def _tp_dp(**kw):
    traces, groups = tp_dp_step(tp=4, dp=4, layers=2, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20, **kw)
    return compile_workload(traces, groups)


@pytest.mark.parametrize("settings", SETTINGS)
def test_tp_dp_step_on_a_switch_folds_to_one_rank_exactly(settings):
    w = _tp_dp()
    folded, ref = folded_and_reference(w, build_topology(single_switch(16, 50.0, 500)), settings)
    assert_same_node_times(folded, ref)
    assert folded.stats.folded_ranks == 15
    assert folded.stats.flows < ref.stats.flows


def test_a_slow_rank_keeps_its_own_times():
    w = _tp_dp(slow_rank=5, slow_factor=1.3)
    folded, ref = folded_and_reference(w, build_topology(single_switch(16, 50.0, 500)), SETTINGS[1])
    assert_same_node_times(folded, ref)
    assert folded.rep_of is None or folded.rep_of[5] == 5


@pytest.fixture(scope="module")
def pipeline_step(tmp_path_factory):
    return generate_pipeline_step(tmp_path_factory.mktemp("fold_ca"))


@pytest.mark.parametrize("settings", SETTINGS[:2])
def test_generated_pipeline_step_folds_exactly(pipeline_step, settings):
    w, _ = compile_rank_files(pipeline_step, columnar=False)
    folded, ref = folded_and_reference(w, build_topology(single_switch(16, 50.0, 500)), settings)
    assert_same_node_times(folded, ref)
    assert folded.stats.folded_ranks == 14  # one rank per pipeline stage simulated
    assert folded.stats.flows < ref.stats.flows


def test_replay_compiled_folds_by_default_and_no_fold_turns_it_off(pipeline_step, monkeypatch):
    from xsim_trace.replay import compiled_ca

    monkeypatch.setattr(compiled_ca, "COMPILED_CA_MIN_FLOWS_NUMBA_LOADED", 0)  # the kernel on a small set
    w, _ = compile_rank_files(pipeline_step, columnar=False)
    topo = build_topology(single_switch(16, 50.0, 500))
    on = replay_compiled(w, make_backend("analytical-ca", topo, chunk_bytes=0), SETTINGS[1])
    ref = Engine(w, make_backend("analytical-ca", topo, chunk_bytes=0), SETTINGS[1], compiled=False).run()
    assert on.stats.folded_ranks == 14 and on.iteration_ns == int(ref.end_ns.max())
    off = Engine(w, make_backend("analytical-ca", topo, chunk_bytes=0), SETTINGS[1], compiled=True, fold=False).run()
    assert off.stats.folded_ranks == 0
    assert_same_node_times(off, ref)


def test_fabric_links_between_nodes_are_not_folded_over(pipeline_step):
    """On two DGX nodes the DP and pipeline flows cross NICs and the fabric, links no rank owns."""
    w, _ = compile_rank_files(pipeline_step, columnar=False)
    folded, ref = folded_and_reference(w, build_topology(load_cluster("dgx-h100:2")), SETTINGS[1])
    assert_same_node_times(folded, ref)
    assert folded.stats.folded_ranks == 0


def test_a_slower_port_is_not_folded_over():
    """Rank 7's port into the switch is slower: its flows leave later, so its class is not rank 0's."""
    w = _tp_dp()
    topo = build_topology(single_switch(16, 50.0, 500))
    slow = next(i for i, ln in enumerate(topo.links) if ln.src == 7)
    topo.bw_Bpns[slow] *= 0.5
    folded, ref = folded_and_reference(w, topo, SETTINGS[1])
    assert_same_node_times(folded, ref)
    assert folded.stats.folded_ranks == 0


@pytest.mark.parametrize("settings,chunk_bytes", [(SETTINGS[1], 128 << 10), (ReplaySettings(chunks=3, in_flight=2), 0)])
def test_ties_at_a_link_are_not_carried_over(settings, chunk_bytes):
    """The 128 KiB chunk pipeline, or two chunks in flight at once, make flows reach a link at one
    instant in an order the quotient's events decide: every rank is replayed."""
    w = _tp_dp()
    folded, ref = folded_and_reference(w, build_topology(single_switch(16, 50.0, 500)), settings, chunk_bytes)
    assert_same_node_times(folded, ref)
    assert folded.stats.folded_ranks == 0


def test_which_first_hop_ties_carry_over():
    """Nodes 0, 1, 2 started in one batch (places 0, 1, 2), node 3 in another; a cause ``-2 - n`` is
    node n's collective drive, which runs when the collective's last member starts."""
    batch = np.array([[5, 0], [5, 1], [5, 2], [6, 0]], np.int64)
    assert ties_carry_over(np.zeros((0, 2), np.int64), batch)
    assert ties_carry_over(np.array([[0, 1]]), batch)  # two sends, in the rank's own order
    assert ties_carry_over(np.array([[0, -2 - 2]]), batch)  # a send, then a later member's drive
    assert ties_carry_over(np.array([[-2 - 1, -2 - 1]]), batch)  # two chunks of one drive
    assert not ties_carry_over(np.array([[1, 0]]), batch)  # against the batch order
    assert not ties_carry_over(np.array([[-2 - 0, 2]]), batch)  # a drive first: the last member may come later
    assert not ties_carry_over(np.array([[-2 - 0, -2 - 1]]), batch)  # two drives
    assert not ties_carry_over(np.array([[0, 3]]), batch)  # two batches
