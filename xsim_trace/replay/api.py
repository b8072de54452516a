"""One-call replay: compile, run the engine over a backend, build the result."""

from __future__ import annotations

from typing import Callable, Mapping

from xsim_trace.cluster.model import Cluster
from xsim_trace.errors import ConfigError, GraphError
from xsim_trace.graph.bounds import check_bounds
from xsim_trace.graph.model import Trace
from xsim_trace.replay.compile import CompiledWorkload, compile_workload
from xsim_trace.replay.engine import Engine
from xsim_trace.replay.results import ReplayResult, build_result
from xsim_trace.replay.settings import ReplaySettings


def compile_checked(
    traces: Mapping[int, Trace],
    comm_groups: Mapping[str, tuple[int, ...]] | None = None,
    *,
    drop_missing_deps: bool = False,
) -> CompiledWorkload:
    """Check every value against what the engine can represent (:mod:`xsim_trace.graph.bounds`),
    then compile: the entry point of every replay of traces read from files."""
    check_bounds(traces)
    return compile_workload(traces, comm_groups, drop_missing_deps=drop_missing_deps)


def replay_compiled(
    workload: CompiledWorkload,
    backend,
    settings: ReplaySettings | None = None,
    *,
    cluster=None,
    closed_form: bool | None = None,
    progress: Callable[[int], None] | None = None,
    fold: bool = True,
    uncontended: bool = True,
) -> ReplayResult:
    """Replay a compiled workload.  ``fold``: on the compiled closed-form path, simulate one rank
    per class of equivalent ranks and give the others its times (:mod:`xsim_trace.replay.fold`;
    exact; ``result.stats.folded_ranks`` says how many were folded).  ``uncontended``: on a fresh
    ``analytical-ca`` backend walking the schedule, first price the collectives in closed form and
    keep that replay where no flow would have found a link busy (:mod:`xsim_trace.replay.uncontended`;
    exact; ``result.stats.closed_form_collectives`` then counts them), else run it flow by flow."""
    settings = settings or ReplaySettings()
    node_of = group_of = None
    if cluster is not None:
        have = int(cluster.num_ranks)
        if have < workload.num_ranks:
            raise ConfigError(f"the trace has {workload.num_ranks} ranks but the cluster only {have} devices", field="cluster")
        node_of = [cluster.node_of(r) for r in range(workload.num_ranks)]
        if hasattr(cluster, "group_of"):
            group_of = lambda r: cluster.group_of(r).name  # noqa: E731
        else:
            group_of = cluster.gpu_type
    pricer, settings = collective_pricer(settings, cluster, backend, closed_form=closed_form)
    rank_class = _rank_classes(group_of, workload.num_ranks) if group_of is not None else None
    try:
        raw = None
        if uncontended and pricer is None and closed_form is not False:
            from xsim_trace.replay import uncontended as shortcut  # noqa: PLC0415

            if shortcut.applies(backend, workload):
                raw = shortcut.replay_uncontended(workload, backend, settings, node_of=node_of, fold=fold,
                                                  rank_class=rank_class, progress=progress)
        if raw is None:
            raw = Engine(workload, backend, settings, node_of=node_of, closed_form=closed_form, pricer=pricer,
                         progress=progress, fold=fold, rank_class=rank_class).run()
    except OverflowError as exc:  # the bounds keep times in int64; a backend's own numbers can still overflow
        raise GraphError(f"simulated time does not fit in 64-bit nanoseconds ({exc}): check the cluster's "
                         "bandwidths and latencies and the trace's sizes") from None
    return build_result(
        workload, raw, backend=str(backend.name), settings=settings, group_of=group_of
    )


def _rank_classes(group_of: Callable[[int], str], num_ranks: int) -> list[int]:
    """A device class per rank (its cluster device group): ranks of different groups never fold together."""
    codes: dict[str, int] = {}
    return [codes.setdefault(str(group_of(r)), len(codes)) for r in range(num_ranks)]


def collective_pricer(settings: ReplaySettings, cluster, backend, *, closed_form: bool | None = None):
    """``(pricer, settings)``: the NCCL model when ``settings`` want it (``collective_model`` nccl, or auto
    with the schedule left at its defaults) on a resolved cluster: an
    :class:`~xsim_trace.network.nccl.pricer.NcclPricer` where collectives are priced whole (a closed-form
    backend, ``closed_form`` not False), else a :class:`~xsim_trace.replay.model_flows.ModelPacedFlows`
    (the model's price carried by flows, so that contention can slow it); None when the schedule is
    walked or run as flows.  ``settings`` come back with the model used.  An explicit ``nccl`` (or a
    forced NCCL algorithm/protocol) without a resolved cluster is a ConfigError."""
    from xsim_trace.replay.collective_pricing import is_contention_free  # noqa: PLC0415

    explicit = settings.collective_model == "nccl" or bool(settings.nccl_algo or settings.nccl_proto)
    if not settings.wants_nccl():
        return None, settings.resolved("schedule")
    if not isinstance(cluster, Cluster):
        if explicit:
            raise ConfigError("collective_model nccl needs the cluster the ranks run on", field="collective_model")
        return None, settings.resolved("schedule")
    if is_contention_free(backend) and closed_form is not False:
        from xsim_trace.network.nccl.pricer import NcclPricer  # noqa: PLC0415

        return NcclPricer(cluster, algo=settings.nccl_algo, proto=settings.nccl_proto), settings.resolved("nccl")
    from xsim_trace.replay.model_flows import ModelPacedFlows  # noqa: PLC0415

    return ModelPacedFlows(cluster, backend, algo=settings.nccl_algo, proto=settings.nccl_proto), settings.resolved("nccl")


def replay(
    traces: Mapping[int, Trace],
    backend,
    settings: ReplaySettings | None = None,
    *,
    comm_groups: Mapping[str, tuple[int, ...]] | None = None,
    cluster=None,
    closed_form: bool | None = None,
    progress: Callable[[int], None] | None = None,
    fold: bool = True,
) -> ReplayResult:
    """Replay ``{rank: Trace}`` over ``backend`` (a NetworkBackend whose endpoints are the ranks)."""
    workload = compile_checked(traces, comm_groups)
    return replay_compiled(workload, backend, settings, cluster=cluster, closed_form=closed_form, progress=progress,
                           fold=fold)
