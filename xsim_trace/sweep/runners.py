"""Units of work of a sweep: a runner turns one run's parameters into a result mapping.

Built-in runners:

``network``  one micro case (:mod:`xsim_trace.sweep.micro`) on one backend.  Parameters: ``case``
             (single), ``ranks`` (4), ``size_bytes`` (16 MiB), ``bw_GBps`` (25), ``latency_ns`` (1000),
             ``backend`` (analytical).  Result: ``makespan_ns`` (= ``iteration_ns``), ``flows``.

``pipeline`` an analytic training iteration of a pipeline-parallel plan whose communication times
             come from a backend.  Parameters (defaults): ``schedule`` (1f1b), ``stages`` (2),
             ``microbatches`` (8), ``chunks`` (1), ``layers`` (32), ``fwd_ns_per_layer`` (1e6),
             ``bwd_ns_per_layer`` (2 x forward), ``activation_bytes`` (16 MiB, one stage-to-stage
             transfer), ``dp`` (1), ``grad_bytes`` (0, the whole model's gradient), ``bw_GBps`` (25),
             ``latency_ns`` (1000), ``backend`` (analytical); with ``global_batch`` the forward/backward
             times and activation bytes are per sample and a micro-batch holds
             ``global_batch / (dp * microbatches)`` samples (a fixed-batch search).  Ranks: replica d, stage s is rank
             ``d * stages + s`` on one switch.  ``p2p_ns`` = one activation transfer on the idle network
             (backend); the schedule's timeline (:func:`xsim_trace.plan.schedules.analytic_timeline`)
             gives ``pipeline_ns``; the gradient all-reduce is a ring over the replicas of every stage at
             once, 2(dp-1) identical steps of one chunk each (one step simulated, times 2(dp-1)) ->
             ``dp_allreduce_ns``; ``iteration_ns`` = ``pipeline_ns`` + ``dp_allreduce_ns`` (no overlap).

``replay``   the replay engine on a rank set: ``trace`` (prefix), ``cluster`` (file or preset),
             ``backend``, ``algorithm``, ``chunks``, ``in_flight``, ``p2p``, ``drop_missing_deps``.
             Result: ``iteration_ns``, ``flows``.

``plan``     a deployment plan file rewritten from the plan's model and replayed by the engine:
             ``plan``, ``cluster`` (default: built from the plan's groups), ``backend``, ``reshard``,
             ``partition``, ``device``, ``tp``, ``quick``.  Result: ``iteration_ns``, bubble, reshard and
             straggler times, ranks, nodes.

``package.module:function``  any importable callable ``f(params) -> mapping`` (e.g. a replay of a trace
             on a cluster); it must return JSON-serialisable values.
"""

from __future__ import annotations

import importlib
import math
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from xsim_trace.cluster.load import MAX_BW_gbps, MAX_LATENCY_NS, MIN_BW_gbps
from xsim_trace.errors import ConfigError, XsimError
from xsim_trace.graph.bounds import MAX_DURATION_NS, MAX_SIZE_BYTES
from xsim_trace.network.protocol import Flow
from xsim_trace.sweep.backends import close_backend, make_named_backend, star_topology
from xsim_trace.sweep.micro import MAX_MICRO_RANKS, TimedFlow, micro_flows, run_flows
from xsim_trace.units import gbps_to_GBps

Runner = Callable[[Mapping[str, Any]], Mapping[str, Any]]

#: integers and numbers of runner parameters: at most 2^53 (exact in a float)
MAX_INT = 1 << 53


class _Params:
    """Typed access to a run's parameters with field-naming errors; unknown names are an error."""

    def __init__(self, params: Mapping[str, Any], known: tuple[str, ...]) -> None:
        extra = sorted(set(params) - set(known))
        if extra:
            raise ConfigError(f"unknown parameter {extra[0]!r} (known: {', '.join(known)})", field=extra[0])
        self.p = params

    def int(self, name: str, default: int, minimum: int = 0, maximum: int = MAX_INT) -> int:
        v = self.p.get(name, default)
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool) or not minimum <= v <= maximum:
            raise ConfigError(f"expected an integer in {minimum}..{maximum}, found {_show(v)}", field=name)
        return v

    def num(self, name: str, default: float, *, positive: bool = True, minimum: float = 0.0,
            maximum: float = MAX_INT) -> float:
        v = self.p.get(name, default)
        try:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and minimum <= float(v) <= maximum
        except OverflowError:
            ok = False
        if not ok or (positive and v <= 0):
            raise ConfigError(f"expected a {'positive' if positive else 'non-negative'} number in "
                              f"{minimum:g}..{maximum:g}, found {_show(v)}", field=name)
        return float(v)

    def str(self, name: str, default: str) -> str:
        v = self.p.get(name, default)
        if not isinstance(v, str) or not v:
            raise ConfigError(f"expected a name, found {v!r}", field=name)
        return v


#: ranks of a micro-benchmark topology
MAX_RANKS = MAX_MICRO_RANKS
#: pipeline operations (stages x microbatches x chunks) an analytic timeline walks
MAX_PIPELINE_OPS = 1 << 20


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _latency(p: _Params) -> int:
    return p.int("latency_ns", 1000, 0, int(MAX_LATENCY_NS))


def _bandwidth(p: _Params) -> float:
    return p.num("bw_GBps", 25.0, minimum=gbps_to_GBps(MIN_BW_gbps), maximum=gbps_to_GBps(MAX_BW_gbps))


_NETWORK_PARAMS = ("case", "ranks", "size_bytes", "bw_GBps", "latency_ns", "backend")


def network_runner(params: Mapping[str, Any]) -> dict[str, Any]:
    p = _Params(params, _NETWORK_PARAMS)
    ranks = p.int("ranks", 4, 2, MAX_RANKS)
    flows = micro_flows(p.str("case", "single"), ranks, p.int("size_bytes", 16 << 20, 1, MAX_SIZE_BYTES))
    topology = star_topology(ranks, _bandwidth(p), _latency(p))
    backend = make_named_backend(p.str("backend", "analytical"), topology)
    try:
        finish = run_flows(backend, flows)
    finally:
        close_backend(backend)
    makespan = max(finish.values())
    return {"iteration_ns": makespan, "makespan_ns": makespan, "flows": len(flows)}


_PIPELINE_PARAMS = ("schedule", "stages", "microbatches", "chunks", "layers", "fwd_ns_per_layer", "bwd_ns_per_layer",
                    "activation_bytes", "dp", "grad_bytes", "bw_GBps", "latency_ns", "backend", "global_batch")


def _phase_ns(backend: Any, flows: list[Flow], start_ns: int) -> int:
    if not flows:
        return 0
    finish = run_flows(backend, [TimedFlow(start_ns, f) for f in flows])
    return max(finish.values()) - start_ns


@dataclass(frozen=True, slots=True)
class _PipelineCase:
    """A pipeline runner's parameters, checked; costs per micro-batch (global_batch applied)."""

    schedule: str
    stages: int
    microbatches: int
    chunks: int
    layers: int
    dp: int
    fwd_ns: float  # per layer
    bwd_ns: float
    activation_bytes: int
    grad_bytes: int


def _pipeline_case(p: _Params, params: Mapping[str, Any]) -> _PipelineCase:
    schedule = p.str("schedule", "1f1b")
    stages, mb, chunks = p.int("stages", 2, 1, MAX_RANKS), p.int("microbatches", 8, 1, MAX_PIPELINE_OPS), \
        p.int("chunks", 1, 1, MAX_RANKS)
    layers, dp = p.int("layers", 32, 1, MAX_PIPELINE_OPS), p.int("dp", 1, 1, MAX_RANKS)
    if stages * mb * chunks > MAX_PIPELINE_OPS or stages * dp > MAX_RANKS:
        raise ConfigError(f"expected stages x microbatches x chunks <= {MAX_PIPELINE_OPS} and stages x dp <= "
                          f"{MAX_RANKS}, found {stages} x {mb} x {chunks} and {stages} x {dp}", field="stages")
    if layers < stages * chunks:
        raise ConfigError(f"expected at least stages x chunks = {stages * chunks} layers, found {layers}",
                          field="layers")
    fwd = p.num("fwd_ns_per_layer", 1e6, maximum=MAX_DURATION_NS / MAX_PIPELINE_OPS)
    bwd = p.num("bwd_ns_per_layer", 2 * fwd, maximum=MAX_DURATION_NS / MAX_PIPELINE_OPS)
    act = p.int("activation_bytes", 16 << 20, 0, MAX_SIZE_BYTES)
    if "global_batch" in params:  # per-sample costs; a micro-batch is global_batch / (dp x microbatches) samples
        gb = p.int("global_batch", 1, 1, MAX_PIPELINE_OPS)
        if gb % (dp * mb):
            raise ConfigError(f"expected a multiple of dp x microbatches = {dp * mb}, found {gb}",
                              field="global_batch")
        samples = gb // (dp * mb)
        fwd, bwd, act = fwd * samples, bwd * samples, act * samples
    grad = p.int("grad_bytes", 0, 0, MAX_SIZE_BYTES)
    return _PipelineCase(schedule, stages, mb, chunks, layers, dp, fwd, bwd, act, grad)


def _pipeline_comm(case: _PipelineCase, p: _Params) -> tuple[int, int, int]:
    """(one stage-to-stage activation transfer, one step of the per-stage DP gradient rings, flows
    simulated), each alone on a star of the stages x dp ranks; no backend where nothing moves."""
    topology = star_topology(max(2, case.stages * case.dp), _bandwidth(p), _latency(p))
    backend_name = p.str("backend", "analytical")
    needs_p2p = case.stages > 1 and case.activation_bytes > 0
    needs_dp = case.dp > 1 and case.grad_bytes > 0
    p2p_ns = step_ns = flows_simulated = 0
    if not (needs_p2p or needs_dp):
        return p2p_ns, step_ns, flows_simulated
    backend = make_named_backend(backend_name, topology)
    try:
        if needs_p2p:
            p2p_ns = _phase_ns(backend, [Flow(0, 0, 1, case.activation_bytes)], 0)
            flows_simulated += 1
        if needs_dp:
            stages, dp = case.stages, case.dp
            chunk = math.ceil(case.grad_bytes / stages / dp)
            ring = [Flow(1 + s * dp + d, d * stages + s, ((d + 1) % dp) * stages + s, chunk)
                    for s in range(stages) for d in range(dp)]
            step_ns = _phase_ns(backend, ring, p2p_ns)
            flows_simulated += len(ring)
    finally:
        close_backend(backend)
    return p2p_ns, step_ns, flows_simulated


def pipeline_runner(params: Mapping[str, Any]) -> dict[str, Any]:
    from xsim_trace.plan.schedules import analytic_timeline  # noqa: PLC0415 - rewrite is optional here

    p = _Params(params, _PIPELINE_PARAMS)
    case = _pipeline_case(p, params)
    stages, vstages = case.stages, case.stages * case.chunks
    per_vs = [case.layers // vstages + (1 if i < case.layers % vstages else 0) for i in range(vstages)]
    p2p_ns, step_ns, flows_simulated = _pipeline_comm(case, p)

    def op_time(stage: int, op: Any) -> int:
        n = per_vs[op.chunk * stages + stage]
        return round(n * (case.fwd_ns if op.kind == "F" else case.bwd_ns))

    timeline = analytic_timeline(case.schedule, stages, case.microbatches, op_time, chunks=case.chunks, p2p_ns=p2p_ns)
    pipeline_ns = timeline.makespan_ns
    dp_ns = 2 * (case.dp - 1) * step_ns
    bubble = max(timeline.bubble_fraction(s) for s in range(stages))
    return {
        "iteration_ns": pipeline_ns + dp_ns, "pipeline_ns": pipeline_ns, "dp_allreduce_ns": dp_ns,
        "p2p_ns": p2p_ns, "max_bubble_fraction": round(bubble, 6), "ranks": stages * case.dp,
        "flows_simulated": flows_simulated,
    }


_REPLAY_PARAMS = ("trace", "cluster", "backend", "algorithm", "chunks", "in_flight", "p2p", "drop_missing_deps",
                  "device_file")


def replay_runner(params: Mapping[str, Any]) -> dict[str, Any]:
    """A rank set (``trace`` prefix) replayed by the engine on ``cluster`` (file or preset) over
    ``backend``; ``algorithm`` (``ring`` or a list like ``[all_reduce=tree]``), ``chunks``,
    ``in_flight``, ``p2p``, ``device_file`` as for ``xsim replay``."""
    from xsim_trace.devices.catalog import catalog_for  # noqa: PLC0415
    from xsim_trace.replay import ReplaySettings  # noqa: PLC0415
    from xsim_trace.sweep.replay_compare import load_workload, replay_on  # noqa: PLC0415

    p = _Params(params, _REPLAY_PARAMS)
    algos = params.get("algorithm") or []
    algos = [algos] if isinstance(algos, str) else list(algos)
    settings = ReplaySettings.from_cli(algos, chunks=p.int("chunks", 1, 1), in_flight=p.int("in_flight", 1, 1),
                                       p2p=p.str("p2p", "eager"))
    workload = load_workload(p.str("trace", ""), drop_missing_deps=bool(params.get("drop_missing_deps", False)))
    from xsim_trace.cluster import load_cluster  # noqa: PLC0415

    cluster = load_cluster(p.str("cluster", ""), catalog=catalog_for(params.get("device_file") or None))
    run = replay_on(p.str("backend", "analytical"), workload, cluster, settings)
    return {"iteration_ns": run.iteration_ns, "flows": run.flows, "backend_setup_s": round(run.setup_s, 6),
            "replay_s": round(run.run_s, 6)}


_PLAN_PARAMS = ("plan", "cluster", "backend", "reshard", "partition", "device", "tp", "quick", "device_file")


def plan_runner(params: Mapping[str, Any]) -> dict[str, Any]:
    """A deployment plan (YAML, :mod:`xsim_trace.plan.model`) rewritten with per-layer templates from
    the plan's model and replayed by the engine on ``cluster`` (file / preset; default: a cluster built
    from the plan's device groups) over ``backend`` -- the ``xsim plan compare`` path for one plan.
    ``reshard`` / ``partition`` override the plan's strategies; ``quick: true`` uses the plan's
    closed form (:mod:`xsim_trace.plan.closed_form`, the ``plan compare --quick`` path) instead of
    rewriting and replaying (``nodes`` is then 0).  ``device_file``: extra devices (as ``--device-file``)
    where the plan's, the cluster's and ``device``'s names resolve."""
    from xsim_trace.devices.catalog import catalog_for  # noqa: PLC0415
    from xsim_trace.evaluate.compare import evaluate  # noqa: PLC0415
    from xsim_trace.evaluate.engine_times import engine_times  # noqa: PLC0415
    from xsim_trace.plan.parse import load_plan  # noqa: PLC0415
    from xsim_trace.layer_templates.template import templates_from_model  # noqa: PLC0415

    p = _Params(params, _PLAN_PARAMS)
    catalog = catalog_for(params.get("device_file") or None)
    plan = load_plan(p.str("plan", ""), catalog=catalog)
    plan = plan.with_strategy(reshard=params.get("reshard"), partition=params.get("partition"))
    device = catalog.get(p.str("device", "")) if params.get("device") else plan.groups[0].device_spec
    template = templates_from_model(plan.model, device, p.int("tp", 1, 1))
    if params.get("quick"):
        from xsim_trace.plan.closed_form import estimate_plan  # noqa: PLC0415

        est = estimate_plan(plan, template)
        return {"iteration_ns": est.step_ns, "max_bubble_fraction": round(est.bubble, 6), "reshard_ns": est.reshard_ns,
                "max_straggler_ns": est.straggler_ns, "ranks": est.devices, "nodes": 0}
    cluster = None
    if params.get("cluster"):
        from xsim_trace.cluster import load_cluster  # noqa: PLC0415

        cluster = load_cluster(p.str("cluster", ""), catalog=catalog)
    backend = p.str("backend", "analytical")
    res, met, iteration = evaluate(plan, template, lambda res: engine_times(res, cluster, backend))
    return {"iteration_ns": int(iteration), "max_bubble_fraction": round(max((b.fraction for b in met.bubbles),
                                                                            default=0.0), 6),
            "reshard_ns": int(met.reshard_ns()), "max_straggler_ns": int(met.max_straggler_ns()),
            "ranks": len(res.traces), "nodes": sum(len(t) for t in res.traces.values())}


BUILTIN_RUNNERS: dict[str, Runner] = {"network": network_runner, "pipeline": pipeline_runner,
                                      "replay": replay_runner, "plan": plan_runner}


def resolve_runner(name: str) -> Runner:
    if name in BUILTIN_RUNNERS:
        return BUILTIN_RUNNERS[name]
    if ":" not in name:
        raise ConfigError(f"unknown runner {name!r} (built-in: {', '.join(BUILTIN_RUNNERS)}, or module:function)",
                          field="runner")
    mod_name, _, fn_name = name.partition(":")
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load runner {name!r}: {exc}", field="runner") from None
    if not callable(fn):
        raise ConfigError(f"runner {name!r} is not callable", field="runner")
    return fn


def execute_run(run: Mapping[str, Any]) -> dict[str, Any]:
    """One run -> one result record (never raises for a failing run: the record says why).

    ``run`` is :meth:`RunSpec.to_dict` plus ``resolved`` (parameters with file paths resolved).
    """
    t0 = time.perf_counter()
    record: dict[str, Any] = {"key": run["key"], "runner": run["runner"], "params": run["params"]}
    try:
        fn = resolve_runner(run["runner"])
        result = fn(run.get("resolved", run["params"]))
        if not isinstance(result, Mapping):
            raise ConfigError(f"runner returned {type(result).__name__}, expected a mapping", field="runner")
        record["status"] = "ok"
        record["result"] = dict(result)
    except XsimError as exc:
        record["status"] = "error"
        record["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a bad run is a result, not the end of the sweep
        record["status"] = "error"
        record["error"] = f"{type(exc).__name__}: {exc}"
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        record["where"] = f"{tb.filename}:{tb.lineno} in {tb.name}"  # an unexpected error: where it came from
    record["wall_s"] = round(time.perf_counter() - t0, 6)
    return record
