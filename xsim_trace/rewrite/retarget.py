"""Retargeting a captured trace to the cluster's devices.

Each rank's trace names the GPU it was captured on (metadata ``device_name``); the cluster places
that rank on a device of some group.  :func:`device_mismatches` lists the ranks whose two devices
differ; :func:`retarget` rescales every device compute kernel of those ranks to the cluster's
device by its kernel class (``kernel_class`` attribute, else :func:`classify_kernel` on its name)
and, where the node carries them, its FLOPs and HBM bytes (roofline ratio, the measurement's own
inefficiency kept).  Host (CPU) nodes keep their time unless a host factor is given; communication
nodes keep theirs, and the replay prices collectives and p2p by the network model anyway.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from xsim_trace.cluster.model import Cluster
from xsim_trace.devices.catalog import Catalog, default_catalog
from xsim_trace.devices.compute import classify_kernel, scale_kernel_ns
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import GlobalMetadata, Trace, set_attrs

NS_PER_US = 1000


@dataclass(frozen=True, slots=True)
class Mismatch:
    rank: int
    captured: str  # canonical catalog name (or the raw name when the catalog lacks it)
    cluster: str

    def describe(self) -> str:
        return f"rank {self.rank} was captured on {self.captured} but the cluster puts it on {self.cluster}"


def _canonical(name: str, catalog: Catalog) -> str:
    return catalog.get(name).name if name in catalog else name


def _cluster_device(cluster: Cluster, rank: int) -> DeviceSpec | None:
    """The device the cluster puts ``rank`` on, as its loader resolved it (None: generic, or no such rank)."""
    if rank >= cluster.num_ranks:
        return None
    return cluster.groups[cluster.positions[rank].group].device_spec


def device_mismatches(traces: dict[int, Trace], cluster: Cluster, catalog: Catalog | None = None) -> list[Mismatch]:
    """Ranks whose captured device differs from the cluster's (ranks without a captured device name,
    or on a ``generic`` cluster group, are not compared)."""
    return metadata_mismatches({rank: t.metadata for rank, t in traces.items()}, cluster, catalog)


def metadata_mismatches(metadata: Mapping[int, GlobalMetadata], cluster: Cluster,
                        catalog: Catalog | None = None) -> list[Mismatch]:
    """:func:`device_mismatches` from the ranks' metadata records alone (no node decoded)."""
    out = []
    for rank in sorted(metadata):
        captured = metadata[rank].attr(A.META_DEVICE) or ""
        target = _cluster_device(cluster, rank)
        if not captured or target is None:
            continue
        catalog = catalog or default_catalog()  # parsed (YAML, ~0.05 s) only when there is a pair to compare
        a, b = _canonical(captured, catalog), target.name
        if a != b:
            out.append(Mismatch(rank, a, b))
    return out


def _duration_ns(node) -> int:
    exact = node.attr(A.DURATION_NS)
    return int(exact) if exact is not None else int(node.duration_micros) * NS_PER_US


def _with_duration(node, new: int):
    return dataclasses.replace(node, duration_micros=new // NS_PER_US).with_attrs(**{A.DURATION_NS: new})


def _scaled(node, src: DeviceSpec, dst: DeviceSpec, host_factor: float):
    if node.attr(A.IS_CPU_OP, False):
        return node if host_factor == 1.0 else _with_duration(node, int(round(_duration_ns(node) * host_factor)))
    if int(node.type) != NodeType.COMP:
        return node
    kc = node.attr(A.KERNEL_CLASS) or classify_kernel(node.name).value
    flops = node.attr(A.FLOPS) or node.attr(A.NUM_OPS) or None
    nbytes = node.attr(A.BYTES_ACCESSED) or None
    return _with_duration(node, scale_kernel_ns(_duration_ns(node), src, dst, kc, flops=flops, bytes=nbytes))


def retarget(traces: dict[int, Trace], cluster: Cluster, catalog: Catalog | None = None, *,
             host_factor: float = 1.0) -> dict[int, Trace]:
    """Traces with every mismatched rank's device compute kernels rescaled to the cluster's device
    and its metadata ``device_name`` set to it; matching ranks are returned unchanged.  Host (CPU)
    nodes keep their time unless ``host_factor`` (target host time / captured host time: the
    target machine's CPU and container, which the device catalog does not know) says otherwise."""
    if not host_factor > 0:
        raise ConfigError(f"expected a positive host factor, found {host_factor!r}", field="host_factor")
    catalog = catalog or default_catalog()
    out = dict(traces)
    for mm in device_mismatches(traces, cluster, catalog):
        if mm.captured not in catalog:
            raise ConfigError(f"captured device {mm.captured!r} is not in the device catalog; cannot retarget "
                              f"(known: {', '.join(catalog.names())})", rank=mm.rank, field=A.META_DEVICE)
        src, dst = catalog.get(mm.captured), _cluster_device(cluster, mm.rank)
        trace = traces[mm.rank]
        nodes = tuple(_scaled(n, src, dst, host_factor) for n in trace.nodes)
        meta = dataclasses.replace(trace.metadata, attrs=set_attrs(trace.metadata.attrs, {A.META_DEVICE: dst.name}))
        out[mm.rank] = dataclasses.replace(trace, nodes=nodes, metadata=meta)
    return out
