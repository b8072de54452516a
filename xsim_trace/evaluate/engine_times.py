"""Replay a rewritten rank set with the event-driven engine (:mod:`xsim_trace.replay`) over a
cluster description and a network backend, and hand back per-node times for the metrics."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from xsim_trace.cluster import Cluster
from xsim_trace.errors import ConfigError
from xsim_trace.network.protocol import NetworkBackend
from xsim_trace.plan.model import Plan
from xsim_trace.evaluate.metrics import NodeTime
from xsim_trace.rewrite.rewriter import RewriteResult



def _gpu(group: Any) -> str | None:
    """A cluster group's device (as its loader resolved it); None: generic, matches any plan group."""
    return group.device_spec.name if group.device_spec is not None else None


def place_on_cluster(result: RewriteResult, cluster: Any) -> Any:
    """The cluster with a rank map putting each plan rank on a device of its plan group: the
    cluster group of the same name, else the first group with the same GPU type (or ``generic``)
    that still has room."""
    names = [g.name for g in cluster.groups]
    room = [g.count for g in cluster.groups]
    where: dict[str, tuple[int, int]] = {}  # plan group -> (cluster group, first device index)
    need = {g.name: sum(1 for r in result.layout.ranks if r.group == g.name) for g in result.plan.groups}
    for pg in result.plan.groups:
        if not need[pg.name]:
            continue
        cands = [names.index(pg.name)] if pg.name in names else [
            i for i, g in enumerate(cluster.groups) if _gpu(g) in (pg.device, None)]
        cands = [i for i in cands if _gpu(cluster.groups[i]) in (pg.device, None)]
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


def plan_cluster(plan: Plan, *, intra_latency_ns: float = 250.0, nic_latency_ns: float = 1000.0,
                 switch_latency_ns: float = 500.0, group_link_latency_ns: float = 2000.0) -> Any:
    """A cluster built from the plan's device groups: NVSwitch nodes at the group's intra-node
    bandwidth, one NIC per device at ``nic_gbps`` on a single switch per group, and a link between
    every two groups as fast as the slower group's NICs together."""
    from xsim_trace.cluster.load import cluster_from_dict

    groups = []
    for g in plan.groups:
        dpn = min(g.devices_per_node, g.count)
        if g.count % dpn:
            raise ConfigError(f"{g.count} devices do not fill whole nodes of {dpn}", file=plan.source or None,
                              field=f"device_groups[{plan.groups.index(g)}].count")
        groups.append({"name": g.name, "gpu": g.device_spec, "nodes": g.count // dpn, "devices_per_node": dpn,
                       "intra_node": {"kind": "nvswitch", "bw_GBps": g.intra_GBps, "latency_ns": intra_latency_ns},
                       "nic": {"count": dpn, "nic_gbps": g.nic_gbps, "latency_ns": nic_latency_ns}})
    links = []
    for i, a in enumerate(plan.groups):
        for b in plan.groups[i + 1:]:
            bw = min(a.nic_gbps * min(a.devices_per_node, a.count), b.nic_gbps * min(b.devices_per_node, b.count))
            links.append({"groups": [a.name, b.name], "bw_gbps": bw, "latency_ns": group_link_latency_ns})
    return cluster_from_dict({"name": plan.name or "plan", "fabric": {"kind": "single-switch", "latency_ns": switch_latency_ns},
                              "groups": groups, "links": links}, file=plan.source or None)


def make_backend(name: str, cluster: Cluster) -> NetworkBackend:
    """Any backend of the network registry (analytical, analytical-ca, flow, ns3 ...) over ``cluster``."""
    from xsim_trace.network import make_backend as make_named
    from xsim_trace.network.topology import build_topology

    return make_named(name, build_topology(cluster))


def engine_times(result: RewriteResult, cluster: Cluster | None = None, backend: str = "analytical",
                 settings=None) -> Mapping[tuple[int, int], NodeTime]:
    """Per-node times of the engine replay on a resolved ``cluster`` (None: :func:`plan_cluster` of
    the result's plan); ``settings``: ReplaySettings (default: collectives priced by the NCCL model)."""
    from xsim_trace.replay.api import replay

    if cluster is None:
        cluster = plan_cluster(result.plan)
    placed = place_on_cluster(result, cluster)
    rr = replay(result.traces, make_backend(backend, placed), settings, comm_groups=result.comm_groups, cluster=placed)
    w, t = rr.workload, rr.times
    ranks, ids = w.node_rank.tolist(), w.node_id.tolist()
    ready, start, end = t.ready_ns.tolist(), t.start_ns.tolist(), t.end_ns.tolist()
    return {(ranks[i], ids[i]): NodeTime(ready[i], start[i], end[i]) for i in range(len(ids))}
