"""A short human-readable summary of a cluster (for a CLI ``cluster show`` or logs)."""

from __future__ import annotations

from xsim_trace.cluster.model import Cluster, FabricKind, IntraKind


def describe(cluster: Cluster) -> list[str]:
    """One line for the cluster, one per group, one per inter-group link."""
    lines = [f"{cluster.name}: {cluster.num_ranks} ranks on {cluster.num_nodes} nodes in {len(cluster.groups)} group(s)"]
    first = 0
    for g in cluster.groups:
        intra = (
            f"NVSwitch {g.intra.bw_GBps:g} GB/s/GPU"
            if g.intra.kind is IntraKind.NVSWITCH
            else f"NVLink mesh {g.intra.bw_GBps:g} GB/s/lane ({len(g.intra.mesh)} pairs)"
        )
        nic = f"{g.nic.count}x {g.nic.nic_gbps:g} Gb/s NIC" if g.nic else "no NIC"
        fab = g.fabric.kind.value
        if g.nic and g.fabric.kind is FabricKind.FAT_TREE:
            fab += f" 1:{g.fabric.oversubscription:g}, {g.fabric.nics_per_leaf} NICs/leaf"
        ranks = f"ranks {first}-{first + g.count - 1}" if not cluster.rank_map else "ranks per rank_map"
        lines.append(
            f"  {g.name}: {g.count}x {g.gpu_type} = {g.num_nodes} node(s) x {g.devices_per_node}; {intra}; {nic}"
            f"{'; ' + fab if g.nic and g.num_nodes > 1 else ''}; {ranks}"
        )
        first += g.count
    for ln in cluster.links:
        lines.append(f"  link {ln.a} <-> {ln.b}: {ln.bw_gbps:g} Gb/s, {ln.latency_ns:g} ns")
    return lines
