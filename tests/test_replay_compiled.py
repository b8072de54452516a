"""The compiled loop (numba) gives the reference engine's times bit for bit: every node's ready,
start, end, wait and peer, and the event counts, on generated and real workloads with p2p (eager
and rendezvous, with and without endpoint delays) and collectives of every algorithm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba")

from xsim_trace.cluster import load_cluster  # noqa: E402
from xsim_trace.io import read_rank_set  # noqa: E402
from xsim_trace.network.registry import make_backend  # noqa: E402
from xsim_trace.network.topology import build_topology  # noqa: E402
from xsim_trace.replay import ReplaySettings, compile_workload  # noqa: E402
from xsim_trace.replay.engine import Engine  # noqa: E402
from xsim_trace.replay.sample import tp_dp_step  # noqa: E402

from replay_helpers import StarAlphaBeta  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "traces" / "chakra_et"


def same_raw(a, b) -> None:
    for name in ("ready_ns", "start_ns", "end_ns", "wait_ns", "peer_node"):
        x, y = getattr(a, name), getattr(b, name)
        assert np.array_equal(np.asarray(x, np.int64), np.asarray(y, np.int64)), name
    assert a.stats == b.stats


def both(w, backend_factory, settings, node_of=None):
    ref = Engine(w, backend_factory(), settings, node_of=node_of, compiled=False)
    fast = Engine(w, backend_factory(), settings, node_of=node_of, compiled=True)
    assert not ref.compiled and fast.compiled
    return ref.run(), fast.run()




SETTINGS = [
    ReplaySettings(),
    ReplaySettings(p2p="rendezvous"),
    ReplaySettings(chunks=4, in_flight=2, endpoint_delay_ns=300, reduction_delay_ns=70),
    ReplaySettings.from_cli(["tree"], chunks=3, p2p="rendezvous", endpoint_delay_ns=100),
    ReplaySettings.from_cli(["halving_doubling"]),
    ReplaySettings.from_cli(["hierarchical"], chunks=2, endpoint_delay_ns=50),
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_tp_dp_step_on_analytical(settings):
    traces, groups = tp_dp_step(tp=4, dp=4, layers=2, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20)
    w = compile_workload(traces, groups)
    cl = load_cluster("dgx-h100:2")
    node_of = [cl.node_of(r) for r in range(w.num_ranks)]
    ref, fast = both(w, lambda: make_backend("analytical", build_topology(cl)), settings, node_of)
    same_raw(ref, fast)


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("prefix", [
    ROOT / "traces" / "dlrm_v100_8rank",
    SHARED / "astra_custom_ring_8npus" / "custom_allreduce",
    SHARED / "reference_text_converter" / "MLP_HybridParallel_Data_Model",
])
def test_real_traces(prefix, settings):
    if not (Path(prefix).is_dir() or Path(f"{prefix}.0.et").exists()):
        pytest.skip("trace not available")
    rs = read_rank_set(prefix)
    w = compile_workload(rs.traces, rs.comm_groups, drop_missing_deps=True)
    try:
        ref = Engine(w, StarAlphaBeta(25.0, 700), settings, compiled=False).run()
    except Exception as exc:  # e.g. a rendezvous deadlock: the compiled loop reports the same
        with pytest.raises(type(exc)) as err:
            Engine(w, StarAlphaBeta(25.0, 700), settings, compiled=True).run()
        assert str(err.value) == str(exc)
        return
    same_raw(ref, Engine(w, StarAlphaBeta(25.0, 700), settings, compiled=True).run())


@pytest.mark.parametrize("p2p", ["eager", "rendezvous"])
def test_generated_pipeline_step(tmp_path, p2p):
    """A generated Llama-2 step, TP2 PP2 DP2, 1F1B (sends and receives between stages)."""
    from xsim_trace.cli.main import main  # noqa: PLC0415

    prefix = tmp_path / "l7" / "step"
    assert main(["generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--layers", "4",
                 "--out", str(prefix)]) == 0
    rs = read_rank_set(prefix)
    w = compile_workload(rs.traces, rs.comm_groups)
    settings = ReplaySettings(p2p=p2p, endpoint_delay_ns=0 if p2p == "eager" else 200)
    try:
        ref = Engine(w, StarAlphaBeta(25.0, 700), settings, compiled=False).run()
    except Exception as exc:
        with pytest.raises(type(exc)) as err:
            Engine(w, StarAlphaBeta(25.0, 700), settings, compiled=True).run()
        assert str(err.value) == str(exc)
        return
    fast = Engine(w, StarAlphaBeta(25.0, 700), settings, compiled=True)
    assert fast.compiled
    same_raw(ref, fast.run())
    # analytical books endpoint ports between flows: the kernel books them the same way
    for spec in ("dgx-h100:1", "dgx-a100:2"):
        cl = load_cluster(spec)
        node_of = [cl.node_of(r) for r in range(8)]
        for rounding in ("floor", "ceil"):
            def be():
                return make_backend("analytical", build_topology(cl), rounding=rounding)
            ref = Engine(w, be(), settings, node_of=node_of, compiled=False).run()
            fast = Engine(w, be(), settings, node_of=node_of, compiled=True)
            assert fast.compiled
            same_raw(ref, fast.run())


def test_progress_adds_up_to_the_node_count():
    traces, groups = tp_dp_step(tp=2, dp=2, layers=1, gemm_ns=1000, tp_bytes=1 << 20, grad_bytes=1 << 20)
    w = compile_workload(traces, groups)
    seen = []
    Engine(w, StarAlphaBeta(25.0, 700), compiled=True, progress=seen.append).run()
    assert sum(seen) == w.num_nodes


def test_not_used_where_collectives_run_as_flows():
    traces, groups = tp_dp_step(tp=2, dp=2, layers=1, gemm_ns=1000, tp_bytes=1 << 20, grad_bytes=1 << 20)
    w = compile_workload(traces, groups)
    assert not Engine(w, StarAlphaBeta(25.0, 700), closed_form=False, compiled=True).compiled
