"""Symmetry folding (xsim_trace.replay.fold) is exact: a folded replay gives every node of every
rank the unfolded replay's ready, start, end, wait and peer, bit for bit, and says how many ranks
it folded; ranks that differ (a slow rank, another device group) are not folded together."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("numba")

from xsim_trace.cli.main import main as xsim  # noqa: E402
from xsim_trace.cluster import load_cluster  # noqa: E402
from xsim_trace.network.registry import make_backend  # noqa: E402
from xsim_trace.network.topology import build_topology  # noqa: E402
from xsim_trace.replay import ReplaySettings, compile_workload  # noqa: E402
from xsim_trace.replay.api import collective_pricer, replay_compiled  # noqa: E402
from xsim_trace.replay.columnar import compile_rank_files  # noqa: E402
from xsim_trace.replay.engine import Engine  # noqa: E402
from xsim_trace.replay.sample import tp_dp_step  # noqa: E402

from replay_helpers import FOLD_TIMES, assert_same_node_times, generate_pipeline_step  # noqa: E402

TIMES = FOLD_TIMES


def folded_and_not(w, cluster, settings, rank_class=None, compiled=True):
    """The folded and the unfolded replay of ``w``, on the compiled loop or the Python one."""
    node_of = [cluster.node_of(r) for r in range(w.num_ranks)]

    def run(fold: bool):
        backend = make_backend("analytical", build_topology(cluster))
        pricer, resolved = collective_pricer(settings, cluster, backend)
        return Engine(w, backend, resolved, node_of=node_of, pricer=pricer, compiled=compiled, fold=fold,
                      rank_class=rank_class).run()

    if not compiled:  # the Python loop folds from fold_loop.MIN_NODES on; these workloads are smaller
        from xsim_trace.replay import fold_loop

        keep, fold_loop.MIN_NODES = fold_loop.MIN_NODES, 0
        try:
            return run(True), run(False)
        finally:
            fold_loop.MIN_NODES = keep

    return run(True), run(False)




SETTINGS = [
    ReplaySettings(),
    ReplaySettings(p2p="rendezvous"),
    ReplaySettings(chunks=4, in_flight=2, endpoint_delay_ns=300, reduction_delay_ns=70),
    ReplaySettings.from_cli(["tree"], chunks=3, endpoint_delay_ns=100),
]


LOOPS = pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])


@LOOPS
@pytest.mark.parametrize("settings", SETTINGS)
def test_tp_dp_step_folds_to_one_rank_exactly(settings, compiled):
    traces, groups = tp_dp_step(tp=4, dp=4, layers=2, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20)
    w = compile_workload(traces, groups)
    folded, full = folded_and_not(w, load_cluster("dgx-h100:2"), settings, compiled=compiled)
    assert_same_node_times(folded, full)
    assert full.stats.folded_ranks == 0
    assert folded.stats.folded_ranks > 0
    assert folded.stats.events < full.stats.events


@LOOPS
def test_a_slow_rank_and_its_peers_keep_their_own_times(compiled):
    traces, groups = tp_dp_step(tp=4, dp=4, layers=2, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20,
                                slow_rank=5, slow_factor=1.3)
    w = compile_workload(traces, groups)
    folded, full = folded_and_not(w, load_cluster("dgx-h100:2"), ReplaySettings(), compiled=compiled)
    assert_same_node_times(folded, full)
    # rank 5 differs from every other rank; the others still fold
    assert 0 < folded.stats.folded_ranks < w.num_ranks - 1


@LOOPS
def test_device_classes_split_the_fold(compiled):
    traces, groups = tp_dp_step(tp=4, dp=4, layers=1, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20)
    w = compile_workload(traces, groups)
    cluster = load_cluster("dgx-h100:2")
    one, _ = folded_and_not(w, cluster, ReplaySettings(), compiled=compiled)
    two, full = folded_and_not(w, cluster, ReplaySettings(), rank_class=[r // 8 for r in range(16)], compiled=compiled)
    assert_same_node_times(two, full)
    assert one.stats.folded_ranks == 15 and two.stats.folded_ranks == 14


@pytest.fixture(scope="module")
def pipeline_step(tmp_path_factory):
    return generate_pipeline_step(tmp_path_factory.mktemp("fold"))


@LOOPS
@pytest.mark.parametrize("settings", [ReplaySettings(), ReplaySettings(chunks=2, endpoint_delay_ns=200)])
def test_generated_pipeline_step_folds_exactly(pipeline_step, settings, compiled):
    w, _ = compile_rank_files(pipeline_step, columnar=False)
    folded, full = folded_and_not(w, load_cluster("dgx-h100:2"), settings, compiled=compiled)
    assert_same_node_times(folded, full)
    assert folded.stats.folded_ranks == 14  # one rank per pipeline stage simulated (TP peers and DP replicas fold)
    assert folded.stats.flows < full.stats.flows


def test_replay_reports_the_folded_ranks(pipeline_step, tmp_path):
    out_f, out_n = tmp_path / "f", tmp_path / "n"
    for out, extra in ((out_f, []), (out_n, ["--no-fold"])):
        assert xsim(["--quiet", "replay", str(pipeline_step), "--cluster", "dgx-h100:2", "--out", str(out),
                     "--no-plot", "--no-timeline", *extra]) == 0
    f = json.loads((out_f / "summary.json").read_text())
    n = json.loads((out_n / "summary.json").read_text())
    assert n["engine"]["folded_ranks"] == 0
    assert f["ranks"] == n["ranks"] and f["iteration_ns"] == n["iteration_ns"]
    # below the compiled loop's size threshold the Python loop runs; it folds from fold_loop.MIN_NODES on
    assert f["engine"]["folded_ranks"] in (0, 14)


def test_replay_compiled_folds_by_default_and_the_table_says_so():
    from xsim_trace.report import render_table

    traces, groups = tp_dp_step(tp=4, dp=4, layers=1, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20)
    w = compile_workload(traces, groups)
    cluster = load_cluster("dgx-h100:2")
    backend = make_backend("analytical", build_topology(cluster))
    forced = Engine(w, backend, ReplaySettings(), compiled=True, fold=True).run()
    assert forced.stats.folded_ranks == 15
    res = replay_compiled(w, make_backend("analytical", build_topology(cluster)), cluster=cluster)
    unfolded = replay_compiled(w, make_backend("analytical", build_topology(cluster)), cluster=cluster, fold=False)
    assert res.rank_iteration_ns() == unfolded.rank_iteration_ns()
    if res.stats.folded_ranks:
        assert "folded" in render_table(res)
    assert "folded" not in render_table(unfolded)


def test_folded_breakdowns_are_the_unfolded_ones():
    from xsim_trace.replay.results import build_result

    traces, groups = tp_dp_step(tp=4, dp=4, layers=2, gemm_ns=50_000, tp_bytes=4 << 20, grad_bytes=16 << 20,
                                slow_rank=5, slow_factor=1.3)
    w = compile_workload(traces, groups)
    folded, full = folded_and_not(w, load_cluster("dgx-h100:2"), ReplaySettings())
    assert folded.rep_of is not None and full.rep_of is None
    a = build_result(w, folded, backend="analytical", settings=ReplaySettings())
    b = build_result(w, full, backend="analytical", settings=ReplaySettings())
    assert a.ranks == b.ranks and a.groups == b.groups and a.iteration_ns == b.iteration_ns


def _stage_reps(tp: int, dp: int, pp: int) -> np.ndarray:
    r = np.arange(tp * dp * pp)
    return (r // (tp * dp)) * tp * dp  # Megatron order tp-dp-pp: rank (tp 0, dp 0) of the stage


def test_a_folded_rank_set_replays_as_the_complete_one(pipeline_step, tmp_path):
    from xsim_trace.io.et_columns import read_columns
    from xsim_trace.io.rankset import find_rank_files, read_comm_groups
    from xsim_trace.replay.fold_declared import compile_declared, replay_declared

    part = tmp_path / "part" / "step"
    xsim(["--quiet", "generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "4", "--layers", "2",
          "--ranks", "0,8", "--out", str(part)])
    cluster = load_cluster("dgx-h100:2")
    w, _ = compile_rank_files(pipeline_step, columnar=False)
    backend = make_backend("analytical", build_topology(cluster))
    pricer, settings = collective_pricer(ReplaySettings(), cluster, backend)
    full = Engine(w, backend, settings, node_of=[cluster.node_of(r) for r in range(16)], pricer=pricer,
                  compiled=True).run()
    _, files = find_rank_files(part, partial=True)
    d = compile_declared({r: read_columns(files[r]) for r in files}, read_comm_groups(str(part) + ".comm_groups.json"), 16)
    rep_of = _stage_reps(2, 4, 2)
    times, stats, per_rank = replay_declared(d, rep_of, cluster, make_backend("analytical", build_topology(cluster)))
    assert stats["folded_ranks"] == 14
    pos = np.arange(w.num_nodes) - w.rank_ptr[:-1][w.node_rank]
    twin = d.workload.rank_ptr[:-1][np.searchsorted(d.rank_ids, rep_of[w.node_rank])] + pos
    for i, name in enumerate(TIMES[:4]):
        assert np.array_equal(getattr(full, name), times[i][twin]), name
    assert np.array_equal(per_rank, np.maximum.reduceat(full.end_ns, w.rank_ptr[:-1]))


def test_a_folded_rank_set_needs_its_peers(tmp_path):
    from xsim_trace.errors import ConfigError
    from xsim_trace.io.et_columns import read_columns
    from xsim_trace.io.rankset import find_rank_files, read_comm_groups
    from xsim_trace.replay.fold_declared import compile_declared

    part = tmp_path / "step"
    xsim(["--quiet", "generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--layers", "2",
          "--ranks", "0", "--out", str(part)])
    _, files = find_rank_files(part, partial=True)
    with pytest.raises(ConfigError, match="not in the set"):
        compile_declared({r: read_columns(files[r]) for r in files}, read_comm_groups(str(part) + ".comm_groups.json"), 8)


def _tied_step():
    """Two identical ranks: two all-reduces on one group end at one instant and each wakes a
    compute node of the same stream, so which runs first is the engine's tie-break."""
    from xsim_trace.graph.kinds import CollectiveType, NodeType
    from xsim_trace.graph.model import Trace, make_metadata, make_node

    traces = {}
    for rank in range(2):
        ar = dict(comm_type=int(CollectiveType.ALL_REDUCE), comm_size=1 << 20, pg_name="1")
        nodes = (
            make_node(0, "ar.a", NodeType.COMM_COLL, stream=1, **ar),
            make_node(1, "ar.b", NodeType.COMM_COLL, stream=2, **ar),
            make_node(2, "c", NodeType.COMP, data_deps=[0], stream=0, duration_ns=5_000),
            make_node(3, "d", NodeType.COMP, data_deps=[1], stream=0, duration_ns=7_000),
        )
        traces[rank] = Trace(make_metadata(rank=rank, world_size=2, source="test"), nodes, rank=rank)
    return traces, {"1": (0, 1)}


@LOOPS
def test_a_tie_broken_by_the_event_order_replays_every_rank(caplog, compiled):
    traces, groups = _tied_step()
    w = compile_workload(traces, groups)
    with caplog.at_level("DEBUG", logger="xsim_trace.replay"):
        folded, full = folded_and_not(w, load_cluster("dgx-h100:1"), ReplaySettings(), compiled=compiled)
    assert_same_node_times(folded, full)
    assert folded.stats.folded_ranks == 0 and folded.rep_of is None
    assert "collective or a transfer" in caplog.text


def test_an_absent_rank_is_compared_with_its_representative(pipeline_step):
    from xsim_trace.io.et_columns import read_columns
    from xsim_trace.io.rankset import find_rank_files, read_comm_groups
    from xsim_trace.replay.fold_declared import differs_from_representative

    _, files = find_rank_files(pipeline_step)
    groups = read_comm_groups(str(pipeline_step) + ".comm_groups.json")
    rep_of = _stage_reps(2, 4, 2)
    cols = {r: read_columns(files[r]) for r in (0, 3, 8, 13)}
    assert differs_from_representative(cols[3], cols[0], groups, rep_of) is None
    assert differs_from_representative(cols[13], cols[8], groups, rep_of) is None
    assert differs_from_representative(cols[8], cols[0], groups, rep_of) is not None  # another stage
    wrong = rep_of.copy()
    wrong[11] = 11  # rank 3's stage-1 peer declared a class of its own: not rank 0's peer's class
    assert "peer class" in differs_from_representative(cols[3], cols[0], groups, wrong)
