"""Parse and validate cluster descriptions (YAML / JSON files, dicts, preset names).

Every problem is a :class:`~xsim_trace.errors.ConfigError` naming the file and the field path
(``groups[1].devices_per_node``) with what was expected and what was found.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


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
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError
from xsim_trace.units import gbps_to_GBps

_TOP_KEYS = {"name", "groups", "fabric", "links", "rank_map"}
_GROUP_KEYS = {"name", "gpu", "gpu_type", "count", "nodes", "devices_per_node", "intra_node", "nic", "fabric", "nccl"}
_NCCL_KEYS = {"net", "host_cpu", "nvls", "collnet", "intra_bw_GBps", "net_bw_GBps", "nvls_bw_GBps", "latency_us", "simple_latency_us",
              "net_latency_us", "algorithms", "protocols", "ll_latency_us", "ll128_latency_us", "ll_bw_scale",
              "ll128_bw_scale", "simple_bw_scale", "simple_fill_us", "simple_fill_bytes", "tree_fill_us",
              "tree_fill_bytes", "mtu_bytes", "tcp_offload", "nvls_tree_bw_scale"}
#: optional NCCL tuning numbers: (key, smallest allowed value: None = any, 0.0 = non-negative, "positive")
_NCCL_OPTIONAL: tuple[tuple[str, float | str | None], ...] = (
    ("ll_latency_us", None), ("ll128_latency_us", None), ("simple_latency_us", None),
    ("ll_bw_scale", "positive"), ("ll128_bw_scale", "positive"), ("simple_bw_scale", "positive"),
    ("simple_fill_us", 0.0), ("simple_fill_bytes", 0.0), ("tree_fill_us", 0.0),
    ("tree_fill_bytes", 0.0), ("nvls_tree_bw_scale", "positive"))
_NET_KINDS = ("ib", "roce", "ethernet")
#: the Ethernet MTU a cluster file may give: IPv4's minimum (576 B) to jumbo frames (9216 B, the common switch maximum)
MIN_MTU_BYTES, MAX_MTU_BYTES = 576, 9216
_HOST_CPUS = ("intel", "amd", "arm")
#: NCCL's algorithm and protocol names as a cluster file may restrict them (NCCL_ALGO / NCCL_PROTO)
_NCCL_ALGOS = ("ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat")
_NCCL_PROTOS = ("LL", "LL128", "Simple")
_INTRA_KEYS = {"kind", "bw_GBps", "latency_ns", "mesh"}
_NIC_KEYS = {"count", "nic_gbps", "latency_ns"}
_FABRIC_KEYS = {"kind", "latency_ns", "oversubscription", "nics_per_leaf", "spines"}
_LINK_KEYS = {"groups", "bw_gbps", "latency_ns"}

# What a cluster may describe, so that every transfer time fits the replay's int64 nanoseconds
# (with xsim_trace.graph.bounds: at most 2^50 B per message and 2^56 B per rank).
#: devices in one cluster (65,536: a topology of this size builds in about 2 s)
MAX_DEVICES = 1 << 16
#: devices per node, NICs per leaf switch, spine switches, mesh lanes
MAX_SMALL_COUNT = 1 << 16
#: bandwidths from 0.1 Gb/s to 10 Pb/s (a GB/s field: the same range, in bytes)
MIN_BW_gbps, MAX_BW_gbps = 0.1, 1e7
#: a latency of at most 1000 s
MAX_LATENCY_NS = 1e12
#: oversubscription ratio
MAX_OVERSUBSCRIPTION = 1e6


class _Ctx:
    def __init__(self, file: object, catalog=None) -> None:
        self.file = str(file) if file is not None else None
        self.catalog = catalog  # devices.Catalog that GPU types resolve in (None: the built-in one)

    def err(self, field: str, msg: str) -> ConfigError:
        return ConfigError(msg, file=self.file, field=field or None)

    def mapping(self, v: Any, field: str, allowed: set[str]) -> Mapping[str, Any]:
        if not isinstance(v, Mapping):
            raise self.err(field, f"expected a mapping, found {type(v).__name__} {v!r:.60}")
        for k in v:
            if k not in allowed:
                raise self.err(
                    f"{field}.{k}" if field else str(k),
                    f"unknown key (expected one of {', '.join(sorted(allowed))})",
                )
        return v

    def number(self, v: Any, field: str, *, positive: bool = False, minimum: float | None = 0.0,
               maximum: float | None = None) -> float:
        try:
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(float(v))
        except OverflowError:
            ok = False
        if not ok:
            raise self.err(field, f"expected a number (finite), found {_show(v)}")
        x = float(v)
        if positive and x <= 0:
            raise self.err(field, f"expected a positive number, found {v!r}")
        if minimum is not None and x < minimum:
            raise self.err(field, f"expected a number >= {minimum:g}, found {v!r}")
        if maximum is not None and x > maximum:
            raise self.err(field, f"expected a number <= {maximum:g}, found {_show(v)}")
        return x

    def bandwidth(self, v: Any, field: str, *, per_byte: bool = False) -> float:
        """A bandwidth in Gb/s (``per_byte``: GB/s) within MIN_BW_gbps .. MAX_BW_gbps."""
        lo, hi = (gbps_to_GBps(MIN_BW_gbps), gbps_to_GBps(MAX_BW_gbps)) if per_byte else (MIN_BW_gbps, MAX_BW_gbps)
        return self.number(v, field, positive=True, minimum=lo, maximum=hi)

    def latency(self, v: Any, field: str) -> float:
        return self.number(v, field, maximum=MAX_LATENCY_NS)

    def integer(self, v: Any, field: str, *, minimum: int = 1, maximum: int = MAX_SMALL_COUNT) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and math.isfinite(v) and v.is_integer():
                v = int(v)
            else:
                raise self.err(field, f"expected an integer, found {_show(v)}")
        if v < minimum:
            raise self.err(field, f"expected an integer >= {minimum}, found {_show(v)}")
        if v > maximum:
            raise self.err(field, f"expected an integer <= {maximum}, found {_show(v)}")
        return int(v)

    def string(self, v: Any, field: str) -> str:
        if not isinstance(v, str) or not v.strip():
            raise self.err(field, f"expected a non-empty string, found {v!r}")
        return v.strip()

    def enum(self, v: Any, field: str, cls: type) -> Any:
        names = [m.value for m in cls]
        if not isinstance(v, str):
            raise self.err(field, f"expected one of {', '.join(names)}, found {_show(v)}")
        key = v.strip().lower().replace("_", "-")
        aliases = {"switch": "single-switch", "fattree": "fat-tree", "clos": "fat-tree", "rail": "rail-only"}
        key = aliases.get(key, key)
        for m in cls:
            if m.value == key:
                return m
        raise self.err(field, f"expected one of {', '.join(names)}, found {v!r}")


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _intra(ctx: _Ctx, raw: Any, f: str, dpn: int) -> IntraNode:
    d = ctx.mapping(raw, f, _INTRA_KEYS)
    kind = ctx.enum(d.get("kind", "nvswitch"), f + ".kind", IntraKind)
    if "bw_GBps" not in d:
        raise ctx.err(f + ".bw_GBps", "expected a positive number (GB/s per direction), found nothing")
    bw = ctx.bandwidth(d["bw_GBps"], f + ".bw_GBps", per_byte=True)
    lat = ctx.latency(d.get("latency_ns", 0), f + ".latency_ns")
    mesh: list[tuple[int, int, int]] = []
    if kind is IntraKind.MESH:
        raw_mesh = d.get("mesh")
        if not isinstance(raw_mesh, list) or not raw_mesh:
            raise ctx.err(f + ".mesh", f"expected a list of [gpu_a, gpu_b, lanes], found {raw_mesh!r:.60}")
        seen: set[tuple[int, int]] = set()
        for i, e in enumerate(raw_mesh):
            ef = f"{f}.mesh[{i}]"
            if not isinstance(e, (list, tuple)) or len(e) not in (2, 3):
                raise ctx.err(ef, f"expected [gpu_a, gpu_b] or [gpu_a, gpu_b, lanes], found {e!r}")
            a = ctx.integer(e[0], ef, minimum=0)
            b = ctx.integer(e[1], ef, minimum=0)
            lanes = ctx.integer(e[2], ef, minimum=1) if len(e) == 3 else 1
            if a >= dpn or b >= dpn or a == b:
                raise ctx.err(ef, f"expected two distinct GPU indices in [0, {dpn}), found {a}, {b}")
            key = (min(a, b), max(a, b))
            if key in seen:
                raise ctx.err(ef, f"duplicate GPU pair {a}-{b}")
            seen.add(key)
            mesh.append((key[0], key[1], lanes))
        # every GPU must reach every other
        reach = {0}
        frontier = [0]
        while frontier:
            x = frontier.pop()
            for a, b, _ in mesh:
                for u, v in ((a, b), (b, a)):
                    if u == x and v not in reach:
                        reach.add(v)
                        frontier.append(v)
        if len(reach) != dpn:
            missing = sorted(set(range(dpn)) - reach)
            raise ctx.err(f + ".mesh", f"expected a connected mesh of {dpn} GPUs, found GPUs {missing} unreachable")
    elif "mesh" in d:
        raise ctx.err(f + ".mesh", "mesh links are only allowed with kind: mesh")
    return IntraNode(kind, bw, lat, tuple(sorted(mesh)))


def _nic(ctx: _Ctx, raw: Any, f: str) -> Nic:
    d = ctx.mapping(raw, f, _NIC_KEYS)
    if "nic_gbps" not in d:
        raise ctx.err(f + ".nic_gbps", "expected a positive number (Gb/s per NIC), found nothing")
    return Nic(
        count=ctx.integer(d.get("count", 1), f + ".count"),
        nic_gbps=ctx.bandwidth(d["nic_gbps"], f + ".nic_gbps"),
        latency_ns=ctx.latency(d.get("latency_ns", 0), f + ".latency_ns"),
    )


def _fabric(ctx: _Ctx, raw: Any, f: str, base: Fabric | None = None) -> Fabric:
    d = ctx.mapping(raw, f, _FABRIC_KEYS)
    base = base or Fabric()
    kind = ctx.enum(d["kind"], f + ".kind", FabricKind) if "kind" in d else base.kind
    over = ctx.number(d.get("oversubscription", base.oversubscription), f + ".oversubscription", positive=True,
                      maximum=MAX_OVERSUBSCRIPTION)
    if over < 1.0:
        raise ctx.err(f + ".oversubscription", f"expected a ratio >= 1 (1 = non-blocking), found {over:g}")
    return Fabric(
        kind=kind,
        latency_ns=ctx.latency(d.get("latency_ns", base.latency_ns), f + ".latency_ns"),
        oversubscription=over,
        nics_per_leaf=ctx.integer(d.get("nics_per_leaf", base.nics_per_leaf), f + ".nics_per_leaf"),
        spines=ctx.integer(d.get("spines", base.spines), f + ".spines", minimum=0),
    )


def _nccl(ctx: _Ctx, raw: Any, f: str) -> NcclTuning:
    d = ctx.mapping(raw, f, _NCCL_KEYS)
    net = str(d.get("net", "ib")).strip().lower()
    if net not in _NET_KINDS:
        raise ctx.err(f + ".net", f"expected one of {', '.join(_NET_KINDS)}, found {d.get('net')!r}")
    host_cpu = str(d.get("host_cpu", "intel")).strip().lower()
    if host_cpu not in _HOST_CPUS:
        raise ctx.err(f + ".host_cpu", f"expected one of {', '.join(_HOST_CPUS)}, found {d.get('host_cpu')!r}")

    def flag(key: str) -> bool | None:
        v = d.get(key)
        if v is not None and not isinstance(v, bool):
            raise ctx.err(f"{f}.{key}", f"expected true or false, found {v!r}")
        return v

    def bw(key: str) -> float | None:
        return None if d.get(key) is None else ctx.number(d[key], f"{f}.{key}", positive=True)

    def names(key: str, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
        v = d.get(key)
        if v is None:
            return None
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not items:
            raise ctx.err(f"{f}.{key}", f"expected a non-empty list of {', '.join(allowed)}, found {v!r}")
        out = []
        for item in items:
            key_norm = str(item).strip().lower().replace("-", "_")
            match = next((a for a in allowed if a.lower().replace("_", "") == key_norm.replace("_", "")), None)
            if match is None:
                raise ctx.err(f"{f}.{key}", f"expected one of {', '.join(allowed)}, found {item!r}")
            out.append(match)
        return tuple(sorted(set(out)))

    def optional(key: str, least: float | str | None) -> float | None:
        v = d.get(key)
        if v is None:
            return None
        if least == "positive":
            return ctx.number(v, f"{f}.{key}", positive=True)
        return ctx.number(v, f"{f}.{key}", minimum=least)  # type: ignore[arg-type]

    nlat = d.get("net_latency_us")
    mtu = d.get("mtu_bytes")
    if mtu is not None:
        mtu = ctx.integer(mtu, f + ".mtu_bytes", minimum=MIN_MTU_BYTES, maximum=MAX_MTU_BYTES)
    return NcclTuning(
        net=net,
        host_cpu=host_cpu,
        nvls=flag("nvls"),
        collnet=bool(flag("collnet")),
        intra_bw_GBps=bw("intra_bw_GBps"),
        net_bw_GBps=bw("net_bw_GBps"),
        nvls_bw_GBps=bw("nvls_bw_GBps"),
        latency_us=ctx.number(d.get("latency_us", 0.0), f + ".latency_us", minimum=None),
        net_latency_us=None if nlat is None else ctx.number(nlat, f + ".net_latency_us"),
        algorithms=names("algorithms", _NCCL_ALGOS),
        protocols=names("protocols", _NCCL_PROTOS),
        mtu_bytes=mtu,
        tcp_offload=bool(flag("tcp_offload")),
        **{key: optional(key, least) for key, least in _NCCL_OPTIONAL},
    )


def nccl_tuning_to_dict(t: NcclTuning) -> dict[str, Any]:
    out: dict[str, Any] = {"net": t.net}
    if t.host_cpu != "intel":
        out["host_cpu"] = t.host_cpu
    for key in ("nvls", "intra_bw_GBps", "net_bw_GBps", "nvls_bw_GBps", "net_latency_us"):
        if getattr(t, key) is not None:
            out[key] = getattr(t, key)
    if t.collnet:
        out["collnet"] = True
    if t.mtu_bytes is not None:
        out["mtu_bytes"] = t.mtu_bytes
    if t.tcp_offload:
        out["tcp_offload"] = True
    if t.latency_us:
        out["latency_us"] = t.latency_us
    for key in ("algorithms", "protocols"):
        if getattr(t, key) is not None:
            out[key] = list(getattr(t, key))
    for key, _ in _NCCL_OPTIONAL:
        if getattr(t, key) is not None:
            out[key] = getattr(t, key)
    return out


#: the GPU type of network-only clusters (``single_switch``): no device specs, no compute scaling
GENERIC_GPU = "generic"


def _resolve_gpu(ctx: _Ctx, gpu: Any, field: str) -> tuple[str, DeviceSpec | None]:
    """(GPU type name, its DeviceSpec) in the run's catalog: the specs travel with the group, so
    compute scaling, memory and the NCCL model never look the name up again.  ``generic`` (a
    network-only cluster whose traces replay with their own compute times) has no spec.  In code,
    a group's ``gpu`` may be a resolved DeviceSpec already (e.g. a plan's device)."""
    if isinstance(gpu, DeviceSpec):
        return gpu.name, gpu
    name = ctx.string(gpu, field)
    if name.strip().lower() == GENERIC_GPU:
        return name, None
    from xsim_trace.devices import get_device

    try:
        return name, get_device(name, ctx.catalog)
    except ConfigError as exc:
        raise ctx.err(field, f"unknown GPU type: {exc.message}") from None


def _group(ctx: _Ctx, raw: Any, f: str, fabric: Fabric) -> DeviceGroup:
    d = ctx.mapping(raw, f, _GROUP_KEYS)
    name = ctx.string(d.get("name"), f + ".name")
    gpu_raw = d.get("gpu", d.get("gpu_type"))
    gpu_field = f + (".gpu" if "gpu" in d or "gpu_type" not in d else ".gpu_type")
    gpu, spec = _resolve_gpu(ctx, gpu_raw, gpu_field)
    if "devices_per_node" not in d:
        raise ctx.err(f + ".devices_per_node", "expected a positive integer, found nothing")
    dpn = ctx.integer(d["devices_per_node"], f + ".devices_per_node")
    if "count" in d and "nodes" in d:
        raise ctx.err(f + ".nodes", "give either count (devices) or nodes, not both")
    if "count" in d:
        count = ctx.integer(d["count"], f + ".count", maximum=MAX_DEVICES)
        if count % dpn:
            raise ctx.err(
                f + ".devices_per_node",
                f"expected a divisor of count {count}, found {dpn} ({count} devices do not fill whole nodes)",
            )
    elif "nodes" in d:
        count = ctx.integer(d["nodes"], f + ".nodes", maximum=MAX_DEVICES) * dpn
        if count > MAX_DEVICES:
            raise ctx.err(f + ".nodes", f"expected at most {MAX_DEVICES} devices in a group, found {count}")
    else:
        raise ctx.err(f + ".count", "expected a positive integer (devices in the group), found nothing")
    if "intra_node" not in d:
        if dpn > 1:
            raise ctx.err(f + ".intra_node", "expected the intra-node fabric (bw_GBps, latency_ns), found nothing")
        intra = IntraNode(IntraKind.NVSWITCH, 1.0, 0.0)
    else:
        intra = _intra(ctx, d["intra_node"], f + ".intra_node", dpn)
    nic = _nic(ctx, d["nic"], f + ".nic") if d.get("nic") is not None else None
    gfabric = _fabric(ctx, d["fabric"], f + ".fabric", fabric) if d.get("fabric") is not None else fabric
    if nic is not None and nic.count > dpn:
        raise ctx.err(f + ".nic.count", f"expected at most devices_per_node ({dpn}) NICs per node, found {nic.count}")
    if nic is not None and gfabric.kind is FabricKind.RAIL_ONLY and dpn % nic.count:
        raise ctx.err(f + ".nic.count", f"rail-only needs devices_per_node ({dpn}) divisible by the NIC count, found {nic.count}")
    if nic is None and count // dpn > 1:
        raise ctx.err(f + ".nic", f"expected NICs (count, nic_gbps) for a group of {count // dpn} nodes, found nothing")
    nccl = _nccl(ctx, d["nccl"], f + ".nccl") if d.get("nccl") is not None else NcclTuning()
    return DeviceGroup(name, gpu, count, dpn, intra, nic, gfabric, nccl, spec)


def _parse_pos(ctx: _Ctx, e: Any, f: str, names: list[str]) -> DevicePos:
    if isinstance(e, str):
        parts = e.split("/")
    elif isinstance(e, (list, tuple)):
        parts = list(e)
    elif isinstance(e, Mapping):
        parts = [e.get("group"), e.get("node"), e.get("local", e.get("gpu"))]
    else:
        parts = []
    if len(parts) != 3:
        raise ctx.err(f, f"expected 'group/node/gpu' or [group, node, gpu], found {e!r}")
    g = parts[0]
    if isinstance(g, str) and g in names:
        gi = names.index(g)
    else:
        try:
            gi = int(g)
        except (TypeError, ValueError, OverflowError):
            raise ctx.err(f, f"expected a group name ({', '.join(names)}) or index, found {g!r}") from None
    try:
        node, local = int(parts[1]), int(parts[2])
    except (TypeError, ValueError, OverflowError):
        raise ctx.err(f, f"expected integer node and gpu indices, found {e!r}") from None
    return DevicePos(gi, node, local)


def cluster_from_dict(data: Any, *, file: object = None, catalog=None) -> Cluster:
    """``catalog``: the run's device catalog (``devices.catalog_for(--device-file)``) that the
    groups' GPU types must resolve in; None = the built-in catalog."""
    ctx = _Ctx(file, catalog)
    d = ctx.mapping(data, "", _TOP_KEYS)
    name = ctx.string(d.get("name", Path(str(file)).stem if file else "cluster"), "name")
    fabric = _fabric(ctx, d["fabric"], "fabric") if d.get("fabric") is not None else Fabric()
    raw_groups = d.get("groups")
    if not isinstance(raw_groups, list) or not raw_groups:
        raise ctx.err("groups", f"expected a non-empty list of device groups, found {raw_groups!r:.60}")
    groups = tuple(_group(ctx, g, f"groups[{i}]", fabric) for i, g in enumerate(raw_groups))
    if sum(g.count for g in groups) > MAX_DEVICES:
        raise ctx.err("groups", f"expected at most {MAX_DEVICES} devices in all, found {sum(g.count for g in groups)}")
    names = [g.name for g in groups]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise ctx.err(f"groups[{i}].name", f"duplicate group name {n!r}")
    links: list[GroupLink] = []
    raw_links = d.get("links") or []
    if not isinstance(raw_links, list):
        raise ctx.err("links", f"expected a list of group links, found {raw_links!r:.60}")
    for i, rl in enumerate(raw_links):
        f = f"links[{i}]"
        ld = ctx.mapping(rl, f, _LINK_KEYS)
        pair = ld.get("groups")
        if not isinstance(pair, list) or len(pair) != 2 or any(not isinstance(p, str) or p not in names for p in pair) \
                or pair[0] == pair[1]:
            raise ctx.err(f + ".groups", f"expected two distinct group names out of {names}, found {pair!r}")
        if "bw_gbps" not in ld:
            raise ctx.err(f + ".bw_gbps", "expected a positive number (Gb/s), found nothing")
        for p in pair:
            if groups[names.index(p)].nic is None:
                raise ctx.err(f + ".groups", f"group {p!r} has no NICs to reach other groups")
        links.append(
            GroupLink(
                pair[0],
                pair[1],
                ctx.bandwidth(ld["bw_gbps"], f + ".bw_gbps"),
                ctx.latency(ld.get("latency_ns", 0), f + ".latency_ns"),
            )
        )
    # groups must be connected through the links
    if len(groups) > 1:
        reach = {names[0]}
        changed = True
        while changed:
            changed = False
            for ln in links:
                if (ln.a in reach) != (ln.b in reach):
                    reach |= {ln.a, ln.b}
                    changed = True
        if len(reach) != len(names):
            lost = [n for n in names if n not in reach]
            raise ctx.err("links", f"expected links joining every group, found groups {lost} unreachable from {names[0]!r}")
    rank_map: tuple[DevicePos, ...] = ()
    raw_map = d.get("rank_map")
    if raw_map is not None:
        total = sum(g.count for g in groups)
        if not isinstance(raw_map, list) or len(raw_map) != total:
            n = len(raw_map) if isinstance(raw_map, list) else type(raw_map).__name__
            raise ctx.err("rank_map", f"expected a list of {total} devices (one per rank), found {n}")
        seen: dict[DevicePos, int] = {}
        out = []
        for r, e in enumerate(raw_map):
            f = f"rank_map[{r}]"
            p = _parse_pos(ctx, e, f, names)
            if not 0 <= p.group < len(groups):
                raise ctx.err(f, f"expected a group index in [0, {len(groups)}), found {p.group}")
            g = groups[p.group]
            if not (0 <= p.node < g.num_nodes and 0 <= p.local < g.devices_per_node):
                raise ctx.err(f, f"expected node in [0, {g.num_nodes}) and gpu in [0, {g.devices_per_node}) of group {g.name!r}, found {p.node}/{p.local}")
            if p in seen:
                raise ctx.err(f, f"device {g.name}/{p.node}/{p.local} already holds rank {seen[p]}")
            seen[p] = r
            out.append(p)
        rank_map = tuple(out)
    return Cluster(name, groups, tuple(links), rank_map)


def cluster_to_dict(c: Cluster) -> dict[str, Any]:
    """A plain dict that :func:`cluster_from_dict` reads back to an equal cluster."""

    def fab(f: Fabric) -> dict[str, Any]:
        return {
            "kind": f.kind.value,
            "latency_ns": f.latency_ns,
            "oversubscription": f.oversubscription,
            "nics_per_leaf": f.nics_per_leaf,
            "spines": f.spines,
        }

    groups = []
    for g in c.groups:
        gd: dict[str, Any] = {
            "name": g.name,
            "gpu": g.gpu_type,
            "count": g.count,
            "devices_per_node": g.devices_per_node,
            "intra_node": {"kind": g.intra.kind.value, "bw_GBps": g.intra.bw_GBps, "latency_ns": g.intra.latency_ns},
            "fabric": fab(g.fabric),
        }
        if g.intra.mesh:
            gd["intra_node"]["mesh"] = [list(m) for m in g.intra.mesh]
        if g.nic is not None:
            gd["nic"] = {"count": g.nic.count, "nic_gbps": g.nic.nic_gbps, "latency_ns": g.nic.latency_ns}
        if g.nccl != NcclTuning():
            gd["nccl"] = nccl_tuning_to_dict(g.nccl)
        groups.append(gd)
    out: dict[str, Any] = {"name": c.name, "groups": groups}
    if c.links:
        out["links"] = [{"groups": [ln.a, ln.b], "bw_gbps": ln.bw_gbps, "latency_ns": ln.latency_ns} for ln in c.links]
    if c.rank_map:
        out["rank_map"] = [[p.group, p.node, p.local] for p in c.rank_map]
    return out


def read_cluster_file(path: str | Path, catalog=None) -> Cluster:
    from xsim_trace.io.documents import load_document

    p = Path(path)
    return cluster_from_dict(load_document(p, "cluster file"), file=p, catalog=catalog)
