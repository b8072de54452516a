"""Replay a rewritten rank set with the event-driven engine (:mod:`xsim_trace.replay`) over a
cluster description and a network backend, and hand back per-node times for the metrics."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from xsim_trace.devices import get_device
from xsim_trace.errors import ConfigError
from xsim_trace.rewrite.quickreplay import NodeTime
from xsim_trace.rewrite.rewriter import RewriteResult

BACKENDS = ("analytical", "analytical_ca")


def _gpu(name: str) -> str | None:
    try:
        return get_device(name).name
    except ConfigError:
        return None  # a generic / unknown GPU type matches any plan group


def place_on_cluster(result: RewriteResult, cluster: Any) -> Any:
    """The cluster with a rank map putting each plan rank on a device of its plan group: the
    cluster group of the same name, else the first group with the same GPU type (or a GPU type the
    catalog does not know, e.g. ``generic``) that still has room."""
    names = [g.name for g in cluster.groups]
    room = [g.count for g in cluster.groups]
    where: dict[str, tuple[int, int]] = {}  # plan group -> (cluster group, first device index)
    need = {g.name: sum(1 for r in result.layout.ranks if r.group == g.name) for g in result.plan.groups}
    for pg in result.plan.groups:
        if not need[pg.name]:
            continue
        cands = [names.index(pg.name)] if pg.name in names else [
            i for i, g in enumerate(cluster.groups) if _gpu(g.gpu_type) in (pg.device, None)]
        cands = [i for i in cands if _gpu(cluster.groups[i].gpu_type) in (pg.device, None)]
        fit = [i for i in cands if room[i] >= need[pg.name]]
        if not fit:
            raise ConfigError(f"no cluster group of {pg.device} with {need[pg.name]} free devices for plan group {pg.name!r} "
                              f"(cluster groups: {', '.join(f'{g.name}={g.gpu_type}x{g.count}' for g in cluster.groups)})",
                              field="cluster.groups")
        gi = fit[0]
        where[pg.name] = (gi, cluster.groups[gi].count - room[gi])
        room[gi] -= need[pg.name]
    from xsim_trace.cluster.model import DevicePos

    used = set()
    positions = []
    for r in result.layout.ranks:
        gi, base = where[r.group]
        dpn = cluster.groups[gi].devices_per_node
        idx = base + r.device_index
        pos = DevicePos(gi, idx // dpn, idx % dpn)
        used.add(pos)
        positions.append(pos)
    positions += [pos for pos in cluster.positions if pos not in used]  # the rank map covers every device
    return dataclasses.replace(cluster, rank_map=tuple(positions))


def make_backend(name: str, cluster: Any) -> Any:
    from xsim_trace.network.topology import build_topology

    topo = build_topology(cluster)
    if name == "analytical":
        from xsim_trace.network.analytical import AnalyticalBackend

        return AnalyticalBackend(topo)
    if name == "analytical_ca":
        from xsim_trace.network.analytical_ca import AnalyticalCongestionAwareBackend

        return AnalyticalCongestionAwareBackend(topo)
    raise ConfigError(f"unknown backend {name!r} (choose {', '.join(BACKENDS)})", field="--backend")


def engine_times(result: RewriteResult, cluster: Any, backend: str = "analytical") -> Mapping[tuple[int, int], NodeTime]:
    from xsim_trace.cluster import load_cluster
    from xsim_trace.replay.api import replay

    placed = place_on_cluster(result, load_cluster(cluster) if isinstance(cluster, str) else cluster)
    rr = replay(result.traces, make_backend(backend, placed), comm_groups=result.comm_groups, cluster=placed)
    w, t = rr.workload, rr.times
    ranks, ids = w.node_rank.tolist(), w.node_id.tolist()
    ready, start, end = t.ready_ns.tolist(), t.start_ns.tolist(), t.end_ns.tolist()
    return {(ranks[i], ids[i]): NodeTime(ready[i], start[i], end[i]) for i in range(len(ids))}
