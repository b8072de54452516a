"""ASTRA-sim inputs as a cluster: ``astra:NETWORK.yml[,SYSTEM.json]``.

The network file (ASTRA-sim's analytical network: ``topology``, ``npus_count``, ``bandwidth`` in
ASTRA GB/s = 2^30 B/s, ``latency`` in ns, one entry per dimension) becomes one device group:

- dimension 1 is the node: ``Switch`` -> an NVSwitch-like switch (every NPU one link to it),
  ``Ring`` -> a bidirectional ring mesh, ``FullyConnected`` -> a link per NPU pair;
- dimension 2 (and further ones, folded into it) joins NPUs of the same local index across nodes:
  one NIC per NPU at that dimension's bandwidth on a rail switch (rail-only fabric) with the
  dimension's latency per switch link, so a cross-node flow crosses two latencies as in ASTRA-sim's
  ``Switch``.  A ``Ring`` or ``FullyConnected`` there, or a third dimension, is modelled as that
  rail switch too (logged): multi-hop ring distances between nodes are not reproduced.

The system file (``all-reduce-implementation`` etc. per dimension, ``preferred-dataset-splits``,
``active-chunks-per-dimension``, ``endpoint-delay``) becomes :class:`AstraSystem`: the collective
algorithms and chunking a replay should use (``xsim replay --cluster astra:...`` applies them
unless ``--algorithm`` / ``--chunks`` / ``--in-flight`` / ``--endpoint-delay-ns`` are given).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xsim_trace.cluster.load import cluster_from_dict
from xsim_trace.cluster.model import Cluster
from xsim_trace.errors import ConfigError
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.units import GBps_to_gbps

log = logging.getLogger(__name__)

PREFIX = "astra:"
_TOPOLOGIES = {"switch": "Switch", "ring": "Ring", "fullyconnected": "FullyConnected"}
#: ASTRA-sim collective implementation names -> xsim algorithm names
_ALGORITHMS = {"ring": "ring", "oneRing": "ring", "direct": "direct", "oneDirect": "direct",
               "halvingDoubling": "halving_doubling", "oneHalvingDoubling": "halving_doubling",
               "doubleBinaryTree": "tree"}
_IMPLEMENTATION_KEYS = {
    "all-reduce-implementation": CollectiveType.ALL_REDUCE,
    "all-gather-implementation": CollectiveType.ALL_GATHER,
    "reduce-scatter-implementation": CollectiveType.REDUCE_SCATTER,
    "all-to-all-implementation": CollectiveType.ALL_TO_ALL,
}


@dataclass(frozen=True, slots=True)
class AstraSystem:
    """What an ASTRA-sim system file says about running collectives."""

    algorithms: tuple[tuple[CollectiveType, str], ...]  # xsim algorithm per collective type
    chunks: int  # preferred-dataset-splits
    in_flight: int  # active-chunks-per-dimension
    endpoint_delay_ns: int


def is_astra_spec(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def split_spec(spec: str) -> tuple[Path, Path | None]:
    """``astra:NET.yml[,SYS.json]`` -> (network path, system path or None)."""
    parts = [p.strip() for p in spec[len(PREFIX):].split(",")]
    if not parts[0] or len(parts) > 2 or (len(parts) == 2 and not parts[1]):
        raise ConfigError(f"expected astra:NETWORK.yml[,SYSTEM.json], found {spec!r}", field="cluster")
    return Path(parts[0]), (Path(parts[1]) if len(parts) == 2 else None)


def load_astra_cluster(spec: str) -> Cluster:
    """The cluster of ``astra:NETWORK.yml[,SYSTEM.json]`` (the system file is checked too)."""
    net, sys_path = split_spec(spec)
    cluster = astra_network_cluster(net)
    if sys_path is not None:
        read_astra_system(sys_path)
    return cluster


def astra_system_of(spec: str) -> AstraSystem | None:
    """The system part of an ``astra:`` spec, None when it names no system file."""
    _, sys_path = split_spec(spec)
    return read_astra_system(sys_path) if sys_path is not None else None


def _read_document(path: Path, what: str) -> Any:
    if not path.is_file():
        raise ConfigError(f"ASTRA-sim {what} file not found", file=path)
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        import yaml  # noqa: PLC0415

        return yaml.safe_load(text)
    except (ValueError, Exception) as exc:  # yaml.YAMLError and json errors
        raise ConfigError(f"cannot parse the ASTRA-sim {what} file: {str(exc).splitlines()[0]}", file=path) from None


def _list_field(doc: dict, key: str, path: Path, kind: type) -> list:
    v = doc.get(key)
    if not isinstance(v, list) or not v:
        raise ConfigError(f"expected a non-empty list, found {v!r}", file=path, field=key)
    out = []
    for i, x in enumerate(v):
        ok = isinstance(x, str) if kind is str else (isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0)
        if not ok:
            want = "a topology name" if kind is str else "a positive number"
            raise ConfigError(f"expected {want}, found {x!r}", file=path, field=f"{key}[{i}]")
        out.append(x)
    return out


def astra_network_cluster(path: Path) -> Cluster:
    """One device group from an ASTRA-sim analytical network file (see the module docstring)."""
    from xsim_trace.cluster import astra_GBps  # noqa: PLC0415

    doc = _read_document(path, "network")
    if not isinstance(doc, dict):
        raise ConfigError("expected a mapping with topology, npus_count, bandwidth, latency", file=path)
    topo = _list_field(doc, "topology", path, str)
    npus = _list_field(doc, "npus_count", path, int)
    bw = _list_field(doc, "bandwidth", path, float)
    lat = _list_field(doc, "latency", path, float)
    dims = len(topo)
    for key, v in (("npus_count", npus), ("bandwidth", bw), ("latency", lat)):
        if len(v) != dims:
            raise ConfigError(f"expected {dims} entries (one per dimension of topology), found {len(v)}",
                              file=path, field=key)
    names = []
    for i, t in enumerate(topo):
        name = _TOPOLOGIES.get(t.strip().lower())
        if name is None:
            raise ConfigError(f"expected one of {', '.join(_TOPOLOGIES.values())}, found {t!r}", file=path,
                              field=f"topology[{i}]")
        names.append(name)
    for i, n in enumerate(npus):
        if int(n) != n or n < 1:
            raise ConfigError(f"expected a positive integer, found {n!r}", file=path, field=f"npus_count[{i}]")
    dpn = int(npus[0])
    nodes = 1
    for n in npus[1:]:
        nodes *= int(n)
    group: dict[str, Any] = {"name": "astra", "gpu": "generic", "count": dpn * nodes, "devices_per_node": dpn,
                             "intra_node": _intra(names[0], dpn, astra_GBps(bw[0]), lat[0])}
    if nodes > 1:
        if dims > 2 or names[1] != "Switch":
            log.warning("%s: dimensions 2..%d (%s) modelled as one rail switch per local NPU index",
                        path, dims, ", ".join(names[1:]))
        group["nic"] = {"count": dpn, "nic_gbps": GBps_to_gbps(astra_GBps(min(bw[1:]))), "latency_ns": 0}
        group["fabric"] = {"kind": "rail-only", "latency_ns": max(lat[1:])}
    return cluster_from_dict({"name": f"astra-{path.stem}", "groups": [group]}, file=path)


def _intra(kind: str, dpn: int, bw_GBps: float, latency_ns: float) -> dict[str, Any]:
    if kind == "Switch" or dpn == 1:
        return {"kind": "nvswitch", "bw_GBps": bw_GBps, "latency_ns": latency_ns}
    if kind == "Ring":
        pairs = {tuple(sorted((i, (i + 1) % dpn))) for i in range(dpn)}
    else:
        pairs = {(a, b) for a in range(dpn) for b in range(a + 1, dpn)}
    return {"kind": "mesh", "bw_GBps": bw_GBps, "latency_ns": latency_ns,
            "mesh": [[a, b, 1] for a, b in sorted(pairs)]}


def read_astra_system(path: Path) -> AstraSystem:
    """Collective algorithms and chunking from an ASTRA-sim system file."""
    doc = _read_document(path, "system")
    if not isinstance(doc, dict):
        raise ConfigError("expected a JSON object", file=path)
    algos: list[tuple[CollectiveType, str]] = []
    for key, ctype in _IMPLEMENTATION_KEYS.items():
        if key not in doc:
            continue
        impl = doc[key]
        if not isinstance(impl, list) or not impl or not all(isinstance(x, str) for x in impl):
            raise ConfigError(f"expected a list of implementation names, found {impl!r}", file=path, field=key)
        for i, name in enumerate(impl):
            if name not in _ALGORITHMS:
                raise ConfigError(f"expected one of {', '.join(sorted(_ALGORITHMS))}, found {name!r}", file=path,
                                  field=f"{key}[{i}]")
        # one phase per dimension: several dimensions run hierarchically, one runs its algorithm
        algos.append((ctype, "hierarchical" if len(impl) > 1 else _ALGORITHMS[impl[0]]))
    return AstraSystem(tuple(algos), _positive(doc, "preferred-dataset-splits", 1, path),
                       _positive(doc, "active-chunks-per-dimension", 1, path),
                       _positive(doc, "endpoint-delay", 0, path, allow_zero=True))


def _positive(doc: dict, key: str, default: int, path: Path, *, allow_zero: bool = False) -> int:
    v = doc.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < (0 if allow_zero else 1):
        raise ConfigError(f"expected an integer >= {0 if allow_zero else 1}, found {v!r}", file=path, field=key)
    return int(v)
