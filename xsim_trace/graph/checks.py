"""Structural checks of single traces and of rank sets.

Checks collect every :class:`Problem` they find; callers then report them (``xsim trace check``)
or raise the first as a :class:`~xsim_trace.errors.GraphError` (:func:`raise_problems`).
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from xsim_trace.errors import GraphError
from xsim_trace.graph.bounds import trace_problems
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, Trace, world_pg_name

_KNOWN_TYPES = frozenset(t.value for t in NodeType if t is not NodeType.INVALID)
#: at most this many problems of one kind per file are listed individually
MAX_PER_KIND = 50


class ProblemKind(enum.Enum):
    DUPLICATE_ID = "duplicate-id"
    DANGLING_DEP = "dangling-dep"
    SELF_DEP = "self-dep"
    CYCLE = "cycle"
    UNKNOWN_TYPE = "unknown-type"
    UNMATCHED_SEND = "unmatched-send"
    UNMATCHED_RECV = "unmatched-recv"
    P2P_SIZE_MISMATCH = "p2p-size-mismatch"
    MISSING_PEER = "missing-peer"
    COLLECTIVE_MISMATCH = "collective-mismatch"
    GROUP_MEMBERSHIP = "group-membership"
    OUT_OF_RANGE = "out-of-range"
    GROUP_ID = "group-id"
    REPLAY = "replay"  # a dry replay refused the set (``xsim trace check --replay``): e.g. a deadlock


@dataclass(frozen=True, slots=True)
class Problem:
    kind: ProblemKind
    message: str
    file: str | None = None
    rank: int | None = None
    node: int | None = None

    def __str__(self) -> str:
        where = []
        if self.file is not None:
            where.append(f"file {self.file}")
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.node is not None:
            where.append(f"node {self.node}")
        return f"{', '.join(where)}: {self.kind.value}: {self.message}" if where else f"{self.kind.value}: {self.message}"

    def to_error(self) -> GraphError:
        return GraphError(f"{self.kind.value}: {self.message}", file=self.file, rank=self.rank, node=self.node)


class _Collector:
    def __init__(self, file: str | None, rank: int | None) -> None:
        self.file, self.rank = file, rank
        self.problems: list[Problem] = []
        self._per_kind: Counter[ProblemKind] = Counter()

    def add(self, kind: ProblemKind, message: str, node: int | None = None) -> None:
        self._per_kind[kind] += 1
        n = self._per_kind[kind]
        if n <= MAX_PER_KIND:
            self.problems.append(Problem(kind, message, self.file, self.rank, node))

    def finish(self) -> list[Problem]:
        for kind, n in self._per_kind.items():
            if n > MAX_PER_KIND:
                self.problems.append(Problem(kind, f"... and {n - MAX_PER_KIND} more of this kind", self.file, self.rank))
        return self.problems


def check_trace(trace: Trace, file: str | None = None) -> list[Problem]:
    """Duplicate ids, dangling and self dependencies, unknown node types, values out of the engine's
    range (:mod:`xsim_trace.graph.bounds`), cycles."""
    out = _Collector(file or trace.source, trace.rank)
    seen: dict[int, int] = {}
    for index, node in enumerate(trace.nodes):
        if node.id in seen:
            out.add(ProblemKind.DUPLICATE_ID, f"id also used by record {seen[node.id]} (this is record {index})", node.id)
        else:
            seen[node.id] = index
        if int(node.type) not in _KNOWN_TYPES:
            label = "INVALID (0)" if int(node.type) == 0 else str(int(node.type))
            out.add(ProblemKind.UNKNOWN_TYPE, f"node type {label} is not a Chakra node type", node.id)
    for node in trace.nodes:
        for kind_name, deps in (("data", node.data_deps), ("ctrl", node.ctrl_deps)):
            for dep in deps:
                if dep == node.id:
                    out.add(ProblemKind.SELF_DEP, f"{kind_name} dependency on itself", node.id)
                elif dep not in seen:
                    out.add(ProblemKind.DANGLING_DEP, f"{kind_name} dependency on node {dep}, which is not in the file", node.id)
    for node_id, _field, why in trace_problems(trace):
        out.add(ProblemKind.OUT_OF_RANGE, why, node_id)
    cycle = find_cycle(trace.nodes, seen)
    if cycle:
        path = " -> ".join(str(n) for n in cycle[:12]) + (" -> ..." if len(cycle) > 12 else "")
        out.add(ProblemKind.CYCLE, f"dependency cycle {path} -> {cycle[0]}", cycle[0])
    return out.finish()


def find_cycle(nodes: Sequence[Node], ids: Mapping[int, int] | None = None) -> list[int]:
    """One dependency cycle as a list of node ids (each depends on the next), or [] if acyclic.

    Kahn's algorithm over known ids; on a residue, walk dependencies inside it until a repeat.
    """
    ids = ids if ids is not None else {n.id: i for i, n in enumerate(nodes)}
    deps_of: dict[int, list[int]] = {}
    indegree: dict[int, int] = {}
    users: dict[int, list[int]] = defaultdict(list)
    for node in nodes:
        if node.id in deps_of:
            continue
        ds = [d for d in node.deps if d in ids and d != node.id]
        deps_of[node.id] = ds
        indegree[node.id] = len(ds)
        for d in ds:
            users[d].append(node.id)
    ready = [n for n, k in indegree.items() if k == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for u in users.get(n, ()):
            indegree[u] -= 1
            if indegree[u] == 0:
                ready.append(u)
    if done == len(deps_of):
        return []
    residue = {n for n, k in indegree.items() if k > 0}
    start = min(residue)
    order: list[int] = []
    position: dict[int, int] = {}
    current = start
    while current not in position:
        position[current] = len(order)
        order.append(current)
        current = next(d for d in deps_of[current] if d in residue)
    return order[position[current]:]


def _comm_key(node: Node) -> tuple:
    return (node.comm_type, node.comm_size_bytes)


def check_rank_set(
    traces: Mapping[int, Trace],
    comm_groups: Mapping[str, Iterable[int]] | None = None,
) -> list[Problem]:
    """Per-trace checks on every rank, then cross-rank ones: every send has a recv with the same
    (src, dst, tag) and vice versa, of the same size; collectives of one process group agree across its
    members.  The cross-rank checks read the values the per-trace ones bound (sizes, peers, tags), so they
    run only when no value is out of range or of the wrong kind (those are reported already)."""
    problems: list[Problem] = []
    for rank in sorted(traces):
        problems.extend(check_trace(traces[rank]))
    if any(p.kind is ProblemKind.OUT_OF_RANGE for p in problems):
        return problems
    problems.extend(check_p2p(traces))
    problems.extend(check_collectives(traces, comm_groups or {}))
    problems.extend(check_collective_roles(traces, comm_groups or {}))
    problems.extend(check_group_ids(comm_groups or {}))
    return problems


#: collective types whose ``comm_root`` replay honours
_ROOTED = frozenset({CollectiveType.BROADCAST, CollectiveType.REDUCE, CollectiveType.GATHER, CollectiveType.SCATTER})


def _collectives_by_group(traces: Mapping[int, Trace], world: tuple[int, ...],
                          comm_groups: Mapping[str, Iterable[int]]) -> dict[str, dict[int, list[Node]]]:
    """Each process group's collectives, per rank, in issue order, keyed as replay matches them
    (:func:`~xsim_trace.graph.model.world_pg_name`: "" joins "0", the world, where the groups allow)."""
    per_group: dict[str, dict[int, list[Node]]] = defaultdict(lambda: defaultdict(list))
    for rank in world:
        for node in traces[rank].nodes:
            if node.type == NodeType.COMM_COLL:
                per_group[world_pg_name(node.pg_name, comm_groups)][rank].append(node)
    return per_group


def _group_members(pg: str, comm_groups: Mapping[str, Iterable[int]], world: tuple[int, ...],
                   issuers: Iterable[int]) -> tuple[int, ...]:
    if pg in comm_groups:
        return tuple(sorted(int(r) for r in comm_groups[pg]))
    if pg in ("", "0"):
        return world
    return tuple(sorted(issuers))


def check_collective_roles(traces: Mapping[int, Trace], comm_groups: Mapping[str, Iterable[int]]) -> list[Problem]:
    """What replay refuses beyond types and sizes: comm groups naming ranks outside the set; the
    ``comm_root`` of a rooted collective and the ``ring_order`` of any must be the same on every member,
    the root a member and the ring an ordering of the members."""
    out: list[Problem] = []
    world = tuple(sorted(traces))
    for pg in sorted(comm_groups):
        bad = [r for r in comm_groups[pg] if r not in traces]
        if bad and len(traces) == max(world) + 1:
            out.append(Problem(ProblemKind.GROUP_MEMBERSHIP, f"process group {pg!r} names rank {bad[0]}, outside "
                               f"0..{max(world)}"))
    per_group = _collectives_by_group(traces, world, comm_groups)
    for pg in sorted(per_group):
        by_rank = per_group[pg]
        members = _group_members(pg, comm_groups, world, by_rank)
        for seq in range(min(len(v) for v in by_rank.values())):
            nodes = [(r, by_rank[r][seq]) for r in sorted(by_rank)]
            out.extend(_role_problems(traces, pg, seq, members, nodes))
    return out


def _role_problems(traces, pg: str, seq: int, members: tuple[int, ...], nodes) -> list[Problem]:
    out: list[Problem] = []
    rooted = [(r, n, n.attr(A.COMM_ROOT)) for r, n in nodes if n.comm_type in _ROOTED and n.attr(A.COMM_ROOT) is not None]
    for r, n, root in rooted:
        if root != rooted[0][2]:
            out.append(Problem(ProblemKind.COLLECTIVE_MISMATCH, f"process group {pg!r}: collective #{seq} has comm_root "
                               f"{root} here but {rooted[0][2]} on rank {rooted[0][0]}", traces[r].source, r, n.id))
        elif root not in members:
            out.append(Problem(ProblemKind.GROUP_MEMBERSHIP, f"comm_root {root} is not a member of process group "
                               f"{pg!r} {list(members)}", traces[r].source, r, n.id))
    rings = [(r, n, tuple(n.attr(A.RING_ORDER))) for r, n in nodes if n.attr(A.RING_ORDER)]
    for r, n, ring in rings:
        if ring != rings[0][2]:
            out.append(Problem(ProblemKind.COLLECTIVE_MISMATCH, f"process group {pg!r}: collective #{seq} has ring_order "
                               f"{list(ring)} here but {list(rings[0][2])} on rank {rings[0][0]}", traces[r].source, r, n.id))
        elif sorted(ring) != list(members):
            out.append(Problem(ProblemKind.GROUP_MEMBERSHIP, f"ring_order {list(ring)} is not an ordering of process "
                               f"group {pg!r} {list(members)}", traces[r].source, r, n.id))
    return out


def check_group_ids(comm_groups: Mapping[str, Iterable[int]]) -> list[Problem]:
    """Comm-group ids must be positive integers: ASTRA-sim parses each as an integer, reads pg "0"
    as all ranks by itself and aborts on a comm-group entry with id 0."""
    out = []
    for key in comm_groups:
        key = str(key)
        if key.isascii() and key.isdigit() and key == str(int(key)) and int(key) > 0:
            continue
        why = "0 is the whole world and needs no entry" if key.isdigit() and int(key) == 0 else "not a positive integer"
        out.append(Problem(ProblemKind.GROUP_ID, f"comm group id {key!r}: {why} (ASTRA-sim refuses the file)"))
    return out


def check_p2p(traces: Mapping[int, Trace]) -> list[Problem]:
    out: list[Problem] = []
    sends: dict[tuple[int, int, int], list[tuple[int, int, int | None]]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[tuple[int, int, int | None]]] = defaultdict(list)
    world = set(traces)
    for rank in sorted(traces):
        trace = traces[rank]
        for node in trace.nodes:
            if node.type == NodeType.COMM_SEND:
                dst = node.comm_dst
                if dst is None:
                    out.append(Problem(ProblemKind.MISSING_PEER, "send without comm_dst", trace.source, rank, node.id))
                    continue
                src = node.comm_src if node.comm_src is not None else rank
                sends[(src, dst, node.comm_tag or 0)].append((rank, node.id, node.comm_size_bytes))
            elif node.type == NodeType.COMM_RECV:
                src = node.comm_src
                if src is None:
                    out.append(Problem(ProblemKind.MISSING_PEER, "recv without comm_src", trace.source, rank, node.id))
                    continue
                dst = node.comm_dst if node.comm_dst is not None else rank
                recvs[(src, dst, node.comm_tag or 0)].append((rank, node.id, node.comm_size_bytes))
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        s, r = sends.get(key, []), recvs.get(key, [])
        for (_srank, snode, ssize), (rrank, rnode, rsize) in zip(s, r):
            if ssize != rsize:  # ASTRA-sim pairs by (tag, src, dst, size): such a recv never completes
                out.append(Problem(ProblemKind.P2P_SIZE_MISMATCH,
                                   f"recv {src}->{dst} tag {tag} expects {rsize} B but its send (node {snode} "
                                   f"on rank {src}) has {ssize} B", traces[rrank].source, rrank, rnode))
        if len(s) > len(r):
            for rank, node, _size in s[len(r):]:
                why = f"rank {dst} is not in the set" if dst not in world else f"no recv on rank {dst}"
                out.append(Problem(ProblemKind.UNMATCHED_SEND, f"send {src}->{dst} tag {tag} has {why}",
                                   traces[rank].source, rank, node))
        elif len(r) > len(s):
            for rank, node, _size in r[len(s):]:
                why = f"rank {src} is not in the set" if src not in world else f"no send on rank {src}"
                out.append(Problem(ProblemKind.UNMATCHED_RECV, f"recv {src}->{dst} tag {tag} has {why}",
                                   traces[rank].source, rank, node))
    return out


def check_collectives(traces: Mapping[int, Trace], comm_groups: Mapping[str, Iterable[int]]) -> list[Problem]:
    """Members of each process group must issue the same sequence of (type, size) collectives."""
    out: list[Problem] = []
    world = tuple(sorted(traces))
    per_group = _collectives_by_group(traces, world, comm_groups)
    for pg in sorted(per_group):
        by_rank = per_group[pg]
        members = _group_members(pg, comm_groups, world, by_rank)  # unknown group: the ranks that use it
        for rank in sorted(by_rank):
            if rank not in members:
                first = by_rank[rank][0]
                out.append(Problem(ProblemKind.GROUP_MEMBERSHIP, f"collective in process group {pg!r}, whose members are {list(members)}",
                                   traces[rank].source, rank, first.id))
        present = [r for r in members if r in traces]
        if len(present) < 2:
            continue
        ref_rank = present[0]
        ref = [_comm_key(n) for n in by_rank.get(ref_rank, [])]
        for rank in present[1:]:
            seq = by_rank.get(rank, [])
            keys = [_comm_key(n) for n in seq]
            if keys == ref:
                continue
            if len(keys) != len(ref):
                node = seq[min(len(seq), len(ref)) - 1].id if seq and len(seq) > len(ref) else None
                out.append(Problem(ProblemKind.COLLECTIVE_MISMATCH,
                                   f"process group {pg!r}: {len(keys)} collectives here, {len(ref)} on rank {ref_rank}",
                                   traces[rank].source, rank, node))
                continue
            i = next(i for i, (a, b) in enumerate(zip(keys, ref)) if a != b)
            def show(k: tuple) -> str:
                t = CollectiveType(k[0]).name if k[0] is not None else "?"
                return f"{t} {k[1]} B"
            out.append(Problem(ProblemKind.COLLECTIVE_MISMATCH,
                               f"process group {pg!r}: collective #{i} is {show(keys[i])} here but {show(ref[i])} on rank {ref_rank}",
                               traces[rank].source, rank, seq[i].id))
    return out


def raise_problems(problems: Sequence[Problem]) -> None:
    """Raise the first problem as a GraphError (with a count of the rest), if any."""
    if problems:
        err = problems[0].to_error()
        if len(problems) > 1:
            err = type(err)(f"{err.message} (and {len(problems) - 1} more problems)", **err.context)
        raise err
