"""The network graph of a cluster: endpoints (ranks 0..N-1), internal vertices (NVSwitches, NICs,
leaf / spine / rail switches, group borders) and directed links with ``bw_GBps`` (1e9 B/s) and
``latency_ns``; deterministic, cached routing.

Public for every backend (the NS-3 one included): ``Topology.vertices`` (ranks first, then the
internal vertices as strings such as ``"h100.n0.nvsw"``), ``Topology.links`` (``Link`` with
``link_id``, ``src``, ``dst``, ``bw_GBps``, ``latency_ns``, ``kind``), ``route(src, dst)`` ->
link ids, ``route_vertices(src, dst)`` -> vertex names, and the compiled numpy arrays
``bw_Bpns`` / ``latency`` / ``link_src`` / ``link_dst`` indexed by link id.

Routing rules (no search at run time, so routes are stable and cheap):
- same node: NVSwitch (``gpu -> nvsw -> gpu``) or the mesh's shortest path (fewest hops, then widest
  bottleneck, then smallest vertex ids);
- another node of the group: ``gpu -> nic -> fabric -> nic -> gpu`` where the GPU uses NIC
  ``local * nics // devices_per_node``; fabric = the single switch, the rail switch (rail-only: a
  cross-rail flow first crosses NVLink to the source-node GPU with the destination's local index),
  or ``leaf -> spine -> leaf`` with the spine chosen by destination NIC modulo spine count (D-mod-K);
- another group: up to the source group's top tier, its border vertex, the fewest-hop chain of
  inter-group links (ties: lexicographic group names), down from the destination group's top tier.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xsim_trace.cluster import Cluster, FabricKind, IntraKind
from xsim_trace.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link.  ``bw_GBps`` = 1e9 bytes/s; ``latency_ns`` may be fractional."""

    link_id: int
    src: Hashable
    dst: Hashable
    bw_GBps: float
    latency_ns: float
    kind: str  # nvlink / pcie / fabric / border / wan


@dataclass
class _GroupNet:
    name: str
    nics: int
    dpn: int
    kind: FabricKind | None
    npl: int = 1
    leaves: int = 0
    spines: int = 0
    mesh_paths: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)


class Topology:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.num_ranks = cluster.num_ranks
        self.vertices: list[Hashable] = list(range(self.num_ranks))
        self._vindex: dict[Hashable, int] = {r: r for r in range(self.num_ranks)}
        self.links: list[Link] = []
        self._by_ends: dict[tuple[Hashable, Hashable], int] = {}
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._groups: list[_GroupNet] = []
        #: NIC vertices (their links are endpoint ports: see network/_common.endpoint_port_mask)
        self.nic_vertices: frozenset[str] = frozenset()
        self._build()
        self.nic_vertices = frozenset(v for v in self.vertices if isinstance(v, str) and v in self._nic_names)
        n = len(self.links)
        self.bw_GBps = np.fromiter((ln.bw_GBps for ln in self.links), dtype=np.float64, count=n)
        #: bytes per ns (== bw_GBps, since 1 GB/s = 1e9 B / 1e9 ns)
        self.bw_Bpns = self.bw_GBps.copy()
        self.latency = np.fromiter((ln.latency_ns for ln in self.links), dtype=np.float64, count=n)
        self.link_src = np.fromiter((self._vindex[ln.src] for ln in self.links), dtype=np.int64, count=n)
        self.link_dst = np.fromiter((self._vindex[ln.dst] for ln in self.links), dtype=np.int64, count=n)

    # ---- building ---------------------------------------------------------------------------------
    def _vertex(self, name: str) -> str:
        if name not in self._vindex:
            self._vindex[name] = len(self.vertices)
            self.vertices.append(name)
        return name

    def _link(self, u: Hashable, v: Hashable, bw_GBps: float, latency_ns: float, kind: str, both: bool = True) -> None:
        for a, b in ((u, v), (v, u)) if both else ((u, v),):
            if (a, b) in self._by_ends:
                raise ConfigError(f"duplicate link {a} -> {b}")
            lid = len(self.links)
            self.links.append(Link(lid, a, b, float(bw_GBps), float(latency_ns), kind))
            self._by_ends[(a, b)] = lid

    def _build(self) -> None:
        c = self.cluster
        border_bw: dict[str, float] = {}
        for ln in c.links:
            border_bw[ln.a] = border_bw.get(ln.a, 0.0) + ln.bw_GBps
            border_bw[ln.b] = border_bw.get(ln.b, 0.0) + ln.bw_GBps
        self._tops: list[list[str]] = []
        self._nic_names: set[str] = set()
        for gi, g in enumerate(c.groups):
            name = g.name
            nics = g.nic.count if g.nic is not None else 0
            net = _GroupNet(name, nics, g.devices_per_node, g.fabric.kind if nics else None)
            self._groups.append(net)
            # intra-node
            for n in range(g.num_nodes):
                ranks = [c.rank_at(gi, n, l) for l in range(g.devices_per_node)]
                if g.devices_per_node > 1:
                    if g.intra.kind is IntraKind.NVSWITCH:
                        sw = self._vertex(f"{name}.n{n}.nvsw")
                        for r in ranks:
                            self._link(r, sw, g.intra.bw_GBps, g.intra.latency_ns, "nvlink")
                    else:
                        for a, b, lanes in g.intra.mesh:
                            self._link(ranks[a], ranks[b], g.intra.bw_GBps * lanes, g.intra.latency_ns, "nvlink")
                for k in range(nics):
                    self._nic_names.add(self._vertex(f"{name}.n{n}.nic{k}"))
                for l, r in enumerate(ranks):
                    if nics:
                        k = l * nics // g.devices_per_node
                        self._link(r, f"{name}.n{n}.nic{k}", g.nic.bw_GBps, g.nic.latency_ns, "pcie")
            if g.intra.kind is IntraKind.MESH:
                net.mesh_paths = _mesh_paths(g.devices_per_node, g.intra.mesh)
            # scale-out fabric
            tops: list[str] = []
            if nics:
                f = g.fabric
                bw = g.nic.bw_GBps
                if f.kind is FabricKind.SINGLE_SWITCH:
                    sw = self._vertex(f"{name}.sw")
                    for n in range(g.num_nodes):
                        for k in range(nics):
                            self._link(f"{name}.n{n}.nic{k}", sw, bw, f.latency_ns, "fabric")
                    tops = [sw]
                elif f.kind is FabricKind.RAIL_ONLY:
                    for k in range(nics):
                        rail = self._vertex(f"{name}.rail{k}")
                        for n in range(g.num_nodes):
                            self._link(f"{name}.n{n}.nic{k}", rail, bw, f.latency_ns, "fabric")
                        tops.append(rail)
                else:
                    total = g.num_nodes * nics
                    net.npl = f.nics_per_leaf
                    net.leaves = math.ceil(total / f.nics_per_leaf)
                    leaves = [self._vertex(f"{name}.leaf{i}") for i in range(net.leaves)]
                    for j in range(total):
                        n, k = divmod(j, nics)
                        self._link(f"{name}.n{n}.nic{k}", leaves[j // f.nics_per_leaf], bw, f.latency_ns, "fabric")
                    if net.leaves > 1:
                        net.spines = f.spines or f.nics_per_leaf
                        up_bw = f.nics_per_leaf * bw / (f.oversubscription * net.spines)
                        spines = [self._vertex(f"{name}.spine{s}") for s in range(net.spines)]
                        for leaf in leaves:
                            for sp in spines:
                                self._link(leaf, sp, up_bw, f.latency_ns, "fabric")
                        tops = spines
                    else:
                        tops = leaves
            self._tops.append(tops)
            if name in border_bw:
                b = self._vertex(f"{name}.border")
                for t in tops:
                    self._link(t, b, border_bw[name], 0.0, "border")
        for ln in c.links:
            self._link(f"{ln.a}.border", f"{ln.b}.border", ln.bw_GBps, ln.latency_ns, "wan")
        self._group_paths = _group_paths([g.name for g in c.groups], [(ln.a, ln.b) for ln in c.links])

    # ---- routing ----------------------------------------------------------------------------------
    def _intra_path(self, gi: int, node: int, la: int, lb: int) -> list[Hashable]:
        c = self.cluster
        if la == lb:
            return [c.rank_at(gi, node, la)]
        g = c.groups[gi]
        if g.intra.kind is IntraKind.NVSWITCH:
            return [c.rank_at(gi, node, la), f"{g.name}.n{node}.nvsw", c.rank_at(gi, node, lb)]
        return [c.rank_at(gi, node, x) for x in self._groups[gi].mesh_paths[(la, lb)]]

    def _nic(self, gi: int, node: int, local: int) -> tuple[str, int]:
        net = self._groups[gi]
        k = local * net.nics // net.dpn
        return f"{net.name}.n{node}.nic{k}", node * net.nics + k

    def _up(self, gi: int, node: int, local: int) -> list[Hashable]:
        """From the NIC of (node, local) up to one top-tier vertex of the group (no border)."""
        net = self._groups[gi]
        nic, j = self._nic(gi, node, local)
        if net.kind is FabricKind.SINGLE_SWITCH:
            return [nic, f"{net.name}.sw"]
        if net.kind is FabricKind.RAIL_ONLY:
            return [nic, f"{net.name}.rail{j % net.nics}"]
        leaf = f"{net.name}.leaf{j // net.npl}"
        if net.leaves > 1:
            return [nic, leaf, f"{net.name}.spine{j % net.spines}"]
        return [nic, leaf]

    def route_vertices(self, src: int, dst: int) -> list[Hashable]:
        """The vertex sequence from rank ``src`` to rank ``dst`` (``[src]`` when equal)."""
        c = self.cluster
        for r in (src, dst):
            if not 0 <= r < self.num_ranks:
                raise ConfigError(f"expected an endpoint in [0, {self.num_ranks}), found {r}", rank=r)
        pa, pb = c.positions[src], c.positions[dst]
        if pa.group == pb.group and pa.node == pb.node:
            return self._intra_path(pa.group, pa.node, pa.local, pb.local)
        net_a = self._groups[pa.group]
        if pa.group == pb.group:
            gi = pa.group
            if net_a.kind is FabricKind.RAIL_ONLY:
                rail_a = pa.local * net_a.nics // net_a.dpn
                rail_b = pb.local * net_a.nics // net_a.dpn
                head = self._intra_path(gi, pa.node, pa.local, pb.local) if rail_a != rail_b else [src]
                via = pb.local if rail_a != rail_b else pa.local
                nic_a, _ = self._nic(gi, pa.node, via)
                nic_b, _ = self._nic(gi, pb.node, pb.local)
                return head + [nic_a, f"{net_a.name}.rail{rail_b}", nic_b, dst]
            if net_a.kind is FabricKind.FAT_TREE and net_a.leaves > 1:
                nic_a, ja = self._nic(gi, pa.node, pa.local)
                nic_b, jb = self._nic(gi, pb.node, pb.local)
                la, lb = f"{net_a.name}.leaf{ja // net_a.npl}", f"{net_a.name}.leaf{jb // net_a.npl}"
                if la == lb:
                    return [src, nic_a, la, nic_b, dst]
                return [src, nic_a, la, f"{net_a.name}.spine{jb % net_a.spines}", lb, nic_b, dst]
            up = self._up(gi, pa.node, pa.local)
            down = self._up(gi, pb.node, pb.local)[::-1]
            if up[0] == down[-1]:  # same NIC (several GPUs per NIC, different nodes cannot share)
                return [src, up[0], dst]
            return [src, *up, *down[1:], dst]
        chain = self._group_paths[(pa.group, pb.group)]
        up = self._up(pa.group, pa.node, pa.local)
        down = self._up(pb.group, pb.node, pb.local)[::-1]
        borders = [f"{c.groups[g].name}.border" for g in chain]
        return [src, *up, *borders, *down, dst]

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids from rank ``src`` to rank ``dst`` (empty when equal).  Cached."""
        key = (src, dst)
        r = self._routes.get(key)
        if r is None:
            verts = self.route_vertices(src, dst)
            r = tuple(self._by_ends[(a, b)] for a, b in zip(verts[:-1], verts[1:]))
            self._routes[key] = r
        return r

    def link_between(self, u: Hashable, v: Hashable) -> Link:
        return self.links[self._by_ends[(u, v)]]

    def path_latency_ns(self, src: int, dst: int) -> float:
        return float(sum(self.links[i].latency_ns for i in self.route(src, dst)))

    def path_bottleneck_GBps(self, src: int, dst: int) -> float:
        r = self.route(src, dst)
        return min((self.links[i].bw_GBps for i in r), default=math.inf)

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph`` of vertices and links (edge attrs: link_id, bw_GBps, latency_ns, kind)."""
        import networkx as nx  # noqa: PLC0415

        g = nx.DiGraph()
        g.add_nodes_from(self.vertices)
        for ln in self.links:
            g.add_edge(ln.src, ln.dst, link_id=ln.link_id, bw_GBps=ln.bw_GBps, latency_ns=ln.latency_ns, kind=ln.kind)
        return g

    def __repr__(self) -> str:
        return f"Topology({self.cluster.name!r}, {self.num_ranks} ranks, {len(self.vertices)} vertices, {len(self.links)} links)"


def _mesh_paths(dpn: int, mesh: tuple[tuple[int, int, int], ...]) -> dict[tuple[int, int], tuple[int, ...]]:
    """All-pairs paths in a GPU mesh: fewest hops, then widest bottleneck (lanes), then smallest ids."""
    lanes: dict[tuple[int, int], int] = {}
    for a, b, w in mesh:
        lanes[(a, b)] = lanes[(b, a)] = w
    adj = {v: sorted(b for (a, b) in lanes if a == v) for v in range(dpn)}
    out: dict[tuple[int, int], tuple[int, ...]] = {}
    for s in range(dpn):
        # BFS layers; best[v] = (-(bottleneck), path) minimal
        best: dict[int, tuple[int, tuple[int, ...]]] = {s: (-(10**9), (s,))}
        layer = [s]
        while layer:
            nxt: dict[int, tuple[int, tuple[int, ...]]] = {}
            for u in layer:
                bu, pu = best[u]
                for v in adj[u]:
                    if v in best:
                        continue
                    cand = (max(bu, -lanes[(u, v)]), pu + (v,))
                    if v not in nxt or cand < nxt[v]:
                        nxt[v] = cand
            best.update(nxt)
            layer = sorted(nxt)
        for d in range(dpn):
            if d != s:
                out[(s, d)] = best[d][1]
    return out


def _group_paths(names: list[str], edges: list[tuple[str, str]]) -> dict[tuple[int, int], tuple[int, ...]]:
    idx = {n: i for i, n in enumerate(names)}
    adj: dict[int, list[int]] = {i: [] for i in range(len(names))}
    for a, b in edges:
        adj[idx[a]].append(idx[b])
        adj[idx[b]].append(idx[a])
    for v in adj:
        adj[v] = sorted(set(adj[v]), key=lambda i: names[i])
    out: dict[tuple[int, int], tuple[int, ...]] = {}
    for s in range(len(names)):
        prev = {s: -1}
        q = deque([s])
        while q:
            u = q.popleft()
            for v in adj[u]:
                if v not in prev:
                    prev[v] = u
                    q.append(v)
        for d in prev:
            path = [d]
            while path[-1] != s:
                path.append(prev[path[-1]])
            out[(s, d)] = tuple(reversed(path))
    return out


def build_topology(cluster: Cluster) -> Topology:
    """The topology of a resolved cluster (``load_cluster(spec)`` reads a file or preset, once, at the
    boundary; the Cluster travels down)."""
    if not isinstance(cluster, Cluster):
        raise ConfigError(f"expected a resolved Cluster (load_cluster(spec) first), found {type(cluster).__name__} "
                          f"{cluster!r}", field="cluster")
    return Topology(cluster)
