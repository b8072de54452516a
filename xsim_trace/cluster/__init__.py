"""Cluster descriptions: device groups, intra-node fabric, NICs, switch fabric, inter-group links.

``load_cluster(path_or_preset)`` reads a YAML/JSON file or a bundled preset (``dgx-h100:4``);
``single_switch(n, bw_GBps, latency_ns)`` builds the simplest cluster programmatically;
``Cluster.from_dict`` validates a dict.  See docs/network.md for the file format.
"""

from __future__ import annotations

from pathlib import Path

from xsim_trace.cluster.astra import is_astra_spec, load_astra_cluster
from xsim_trace.cluster.describe import describe
from xsim_trace.cluster.load import cluster_from_dict, cluster_to_dict, read_cluster_file
from xsim_trace.cluster.model import (
    Cluster,
    DeviceGroup,
    DevicePos,
    Fabric,
    FabricKind,
    GroupLink,
    IntraKind,
    IntraNode,
    NcclTuning,
    Nic,
)
from xsim_trace.cluster.presets import is_preset_spec, load_preset, preset_names
from xsim_trace.errors import ConfigError

__all__ = [
    "Cluster",
    "DeviceGroup",
    "DevicePos",
    "Fabric",
    "FabricKind",
    "GroupLink",
    "IntraKind",
    "IntraNode",
    "NcclTuning",
    "Nic",
    "cluster_from_dict",
    "cluster_to_dict",
    "describe",
    "load_cluster",
    "preset_names",
    "single_switch",
    "astra_GBps",
]


def load_cluster(path_or_preset: str | Path | Cluster, *, catalog=None) -> Cluster:
    """A cluster from a file (``.yaml``/``.yml``/``.json``), a preset spec, ASTRA-sim inputs
    (``astra:NETWORK.yml[,SYSTEM.json]``, see :mod:`xsim_trace.cluster.astra`), or a Cluster (returned as is).
    ``catalog``: the run's device catalog (``devices.catalog_for(--device-file)``) a file's GPU types
    resolve in; None = the built-in one."""
    if isinstance(path_or_preset, Cluster):
        return path_or_preset
    if is_astra_spec(path_or_preset):
        return load_astra_cluster(str(path_or_preset))
    p = Path(path_or_preset)
    if p.is_file():
        return read_cluster_file(p, catalog)
    spec = str(path_or_preset)
    if is_preset_spec(spec):
        return load_preset(spec, catalog)
    if p.suffix.lower() in (".yaml", ".yml", ".json") or "/" in spec:
        raise ConfigError("cluster file not found", file=p)
    raise ConfigError(
        f"expected a cluster file or a preset ({', '.join(preset_names())}), found {spec!r}", field="cluster"
    )


def single_switch(num_ranks: int, bw_GBps: float, latency_ns: float, *, gpu_type: str = "generic") -> Cluster:
    """``num_ranks`` GPUs, each with one link of ``bw_GBps`` per direction and ``latency_ns`` to one switch
    (the shape of ASTRA-sim's ``Switch`` topology: a rank-to-rank flow crosses two links)."""
    return cluster_from_dict(
        {
            "name": f"single-switch-{num_ranks}",
            "groups": [
                {
                    "name": "g0",
                    "gpu": gpu_type,
                    "count": num_ranks,
                    "devices_per_node": num_ranks,
                    "intra_node": {"kind": "nvswitch", "bw_GBps": bw_GBps, "latency_ns": latency_ns},
                }
            ],
        },
        file="single_switch()",
    )


def astra_GBps(gb_per_s: float) -> float:
    """ASTRA-sim's ``GB/s`` (2**30 bytes/s) in xsim's ``bw_GBps`` (1e9 bytes/s): ``400 -> 429.4967296``."""
    return gb_per_s * (1 << 30) / 1e9
