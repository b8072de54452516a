"""Sweep specifications: which runs a sweep is made of, each with a stable key.

A spec is YAML (or JSON)::

    name: pp-search            # label (optional)
    runner: pipeline           # built-in runner (network | pipeline) or "package.module:function"
    metric: iteration_ns       # result field to minimise in the summary (default iteration_ns)
    top: 10                    # rows in the summary table
    base: {layers: 32, bw_GBps: 25}        # parameters every run starts from
    grid:                      # cartesian product, in the order written
      stages: [1, 2, 4]
      backend: [analytical, flow]
    runs:                      # explicit combinations (merged onto base), after the grid
      - {stages: 8, microbatches: 16}

Either ``grid`` or ``runs`` (or both) must be present; a grid value that is not a list is a
single value.  A run's key is the first 16 hex digits of the SHA-256 of its runner and its
parameters as canonical JSON (sorted keys), so it does not depend on the order runs are listed
in, and identical combinations collapse into one run.  File parameters (``plan``, ``cluster``,
``trace``, ``workload``) are hashed as written and resolved against the spec's folder when run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping


from xsim_trace.errors import ConfigError

SPEC_KEYS = ("name", "runner", "metric", "top", "base", "grid", "runs", "description", "limits")
#: parameters that set a run's limits (not passed to the runner, not part of its key)
LIMIT_PARAMS = {"time_limit_s": "time_s", "memory_limit_mb": "memory_mb"}


@dataclass(frozen=True, slots=True)
class RunLimits:
    """What a run may use: wall-clock seconds and resident memory (MB) of its worker process;
    None = no limit.  A run past a limit is killed and recorded as that run's error."""

    time_s: float | None = None
    memory_mb: float | None = None

    @classmethod
    def parse(cls, data: Mapping[str, Any], file: str | None, where: str) -> RunLimits:
        values = {}
        for name in ("time_s", "memory_mb"):
            v = data.get(name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e9:
                raise ConfigError(f"expected a positive number below 1e9, found {v!r}", file=file, field=f"{where}.{name}")
            values[name] = float(v)
        unknown = [k for k in data if k not in ("time_s", "memory_mb")]
        if unknown:
            raise ConfigError(f"unknown limit {unknown[0]!r} (known: time_s, memory_mb)", file=file, field=where)
        return cls(**values)

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in (("time_s", self.time_s), ("memory_mb", self.memory_mb)) if v is not None}


def _canonical(obj: Any, where: str, file: str | None) -> Any:
    """Plain JSON types only (so keys are stable and results serialisable)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            raise ConfigError(f"expected a finite number, found {obj}", file=file, field=where)
        return obj
    if isinstance(obj, (list, tuple)):
        return [_canonical(v, f"{where}[{i}]", file) for i, v in enumerate(obj)]
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise ConfigError(f"expected string keys, found {k!r}", file=file, field=where)
            out[k] = _canonical(v, f"{where}.{k}" if where else k, file)
        return out
    raise ConfigError(f"expected a plain value (number, string, list, mapping), found {type(obj).__name__}",
                      file=file, field=where)


def run_key(runner: str, params: Mapping[str, Any]) -> str:
    blob = json.dumps({"runner": runner, "params": params}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class RunSpec:
    key: str
    runner: str
    params: Mapping[str, Any]  # canonical JSON types, as written in the spec (the key hashes these)
    base_dir: str | None = None  # relative file parameters are resolved against it when the run executes
    limits: RunLimits = RunLimits()

    def resolved_params(self) -> dict[str, Any]:
        return resolve_paths(dict(self.params), Path(self.base_dir)) if self.base_dir else dict(self.params)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "runner": self.runner, "params": dict(self.params)}


@dataclass(frozen=True, slots=True)
class SweepSpec:
    name: str
    runner: str
    metric: str
    top: int
    runs: tuple[RunSpec, ...]
    varying: tuple[str, ...]  # parameter names whose value differs between runs, in first-seen order
    source: str | None = None


def spec_from_mapping(data: Any, file: str | None = None, base_dir: str | os.PathLike[str] | None = None) -> SweepSpec:
    if not isinstance(data, Mapping):
        raise ConfigError("expected a mapping at the top of the sweep spec", file=file)
    unknown = [k for k in data if k not in SPEC_KEYS]
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} (known: {', '.join(SPEC_KEYS)})", file=file, field=unknown[0])
    runner, metric, top = _header(data, file)
    base = _canonical(data.get("base") or {}, "base", file)
    if not isinstance(base, dict):
        raise ConfigError("expected a mapping of parameters", file=file, field="base")
    grid = data.get("grid")
    explicit = data.get("runs")
    if grid is None and explicit is None:
        raise ConfigError("expected a 'grid' or 'runs' section", file=file, field="grid")
    combos: list[dict[str, Any]] = []
    if grid is not None:
        combos += _grid_combos(_canonical(grid, "grid", file), base, file)
    if explicit is not None:
        combos += _explicit_combos(_canonical(explicit, "runs", file), base, file)
    default_limits = data.get("limits") or {}
    if not isinstance(default_limits, Mapping):
        raise ConfigError("expected a mapping {time_s, memory_mb}", file=file, field="limits")
    runs = _runs(combos, runner, default_limits, base_dir, file)  # takes the limit parameters out of combos
    name = str(data.get("name") or (Path(file).stem if file else "sweep"))
    return SweepSpec(name, runner, metric, top, runs, _varying(combos), file)


def _header(data: Mapping, file: str | None) -> tuple[str, str, int]:
    """The spec's runner, metric and top."""
    runner = data.get("runner", "pipeline")
    if not isinstance(runner, str) or not runner:
        raise ConfigError(f"expected a runner name, found {runner!r}", file=file, field="runner")
    metric = data.get("metric", "iteration_ns")
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"expected a result field name, found {metric!r}", file=file, field="metric")
    top = data.get("top", 10)
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise ConfigError(f"expected a positive integer, found {top!r}", file=file, field="top")
    return runner, metric, top


def _grid_combos(grid: Any, base: dict[str, Any], file: str | None) -> list[dict[str, Any]]:
    """``base`` updated by every point of the product of the grid's axes (a scalar is a 1-value axis)."""
    if not isinstance(grid, dict) or not grid:
        raise ConfigError("expected a non-empty mapping of parameter -> list of values", file=file, field="grid")
    axes = []
    for name, values in grid.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError("expected at least one value", file=file, field=f"grid.{name}")
        axes.append([(name, v) for v in values])
    return [{**base, **dict(point)} for point in itertools.product(*axes)]


def _explicit_combos(explicit: Any, base: dict[str, Any], file: str | None) -> list[dict[str, Any]]:
    """``base`` updated by each entry of ``runs``."""
    if not isinstance(explicit, list):
        raise ConfigError("expected a list of parameter mappings", file=file, field="runs")
    combos = []
    for i, entry in enumerate(explicit):
        if not isinstance(entry, dict):
            raise ConfigError("expected a mapping of parameters", file=file, field=f"runs[{i}]")
        combos.append({**base, **entry})
    return combos


def _runs(combos: list[dict[str, Any]], runner: str, default_limits: Mapping, base_dir: str | os.PathLike[str] | None,
          file: str | None) -> tuple[RunSpec, ...]:
    """One RunSpec per distinct parameter set (by key), in order.  time_limit_s / memory_limit_mb in
    base, grid or runs are that run's limits, over the spec's; they are popped from ``combos``."""
    runs: list[RunSpec] = []
    seen: set[str] = set()
    for i, params in enumerate(combos):
        own = {LIMIT_PARAMS[k]: params.pop(k) for k in list(params) if k in LIMIT_PARAMS}
        limits = RunLimits.parse({**default_limits, **own}, file, "limits" if not own else f"run {i}")
        key = run_key(runner, params)
        if key not in seen:
            seen.add(key)
            runs.append(RunSpec(key, runner, params, str(base_dir) if base_dir is not None else None, limits))
    return tuple(runs)


def _varying(combos: list[dict[str, Any]]) -> tuple[str, ...]:
    """The parameter names whose value differs between runs, in first-seen order (each name's values
    compared once: linear in the runs, where a 1,600-run grid used to take seconds)."""
    names: dict[str, None] = {}
    for params in combos:
        names.update(dict.fromkeys(params))
    return tuple(k for k in names if len({json.dumps(c.get(k), sort_keys=True) for c in combos}) > 1)


#: parameters that name files; relative paths are taken relative to the spec file
PATH_PARAMS = ("plan", "cluster", "trace", "workload")


def resolve_paths(params: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    out = dict(params)
    for k in PATH_PARAMS:
        v = out.get(k)
        if isinstance(v, str) and v and not os.path.isabs(v) and (base_dir / v).exists():
            out[k] = str((base_dir / v).resolve())
    return out


def load_spec(path: str | os.PathLike[str]) -> SweepSpec:
    from xsim_trace.io.documents import load_document

    p = Path(path)
    data = load_document(p, "sweep spec", as_json=False)
    return spec_from_mapping(data, file=str(p), base_dir=p.parent)
