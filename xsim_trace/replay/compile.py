"""Compile per-rank traces into the compact arrays the replay hot loop runs on.

All ranks' nodes are concatenated into one global index space (rank 0's nodes first, in file
order).  Dependencies become a successor CSR (``succ_ptr``/``succ_idx``) plus an in-degree per
node; streams become global resource ids; collectives are matched into instances by
(process group, order of issue on each rank).  Structural problems raise :class:`GraphError`
naming the rank and node.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import NS_PER_US, Trace, world_pg_name

log = logging.getLogger(__name__)

#: how a node is executed
K_TIMED, K_SEND, K_RECV, K_COLL = 0, 1, 2, 3

#: communication kinds of the breakdown, in report order; unknown kinds count as "other"
COMM_KINDS = ("tp", "dp", "pp", "reshard", "ep", "other")
_KIND_INDEX = {k: i for i, k in enumerate(COMM_KINDS)}
OTHER_KIND = _KIND_INDEX["other"]

#: resource roles (``CompiledWorkload.resource_role``)
ROLE_CPU, ROLE_COMPUTE, ROLE_COMM = 0, 1, 2
_ROLE_NAMES = ("cpu", "compute", "comm")

ALL_RANKS_PG = ("", "0")


@dataclass(frozen=True, slots=True)
class CollectiveInstance:
    """One collective as all its members see it."""

    group: int  # index into CompiledWorkload.groups
    seq: int  # order of issue within the group
    comm_type: int
    size_bytes: int
    nodes: tuple[int, ...]  # global node index per member, in group member order
    #: member position of the root of a BROADCAST / REDUCE / GATHER / SCATTER (``comm_root``;
    #: default 0, the lowest rank of the group)
    root: int = 0
    #: member positions in ring order (``ring_order``), or None for the group's rank order
    ring: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class CompiledWorkload:
    """Flat arrays over every node of every rank (global node index = position)."""

    num_ranks: int
    rank_ptr: np.ndarray  # int64 [R+1]: nodes of rank r are rank_ptr[r]:rank_ptr[r+1]
    node_rank: np.ndarray  # int32
    node_id: np.ndarray  # int64: the Chakra node id
    node_type: np.ndarray  # int8: NodeType value
    exec_kind: np.ndarray  # int8: K_TIMED / K_SEND / K_RECV / K_COLL
    duration_ns: np.ndarray  # int64
    resource: np.ndarray  # int32: global resource id
    indegree: np.ndarray  # int32: number of distinct deps
    succ_ptr: np.ndarray  # int64 [N+1]
    succ_idx: np.ndarray  # int32
    comm_size: np.ndarray  # int64 bytes
    comm_type: np.ndarray  # int16 (-1: none)
    comm_peer: np.ndarray  # int32: SEND -> dst rank, RECV -> src rank, else -1
    comm_tag: np.ndarray  # int64
    comm_kind: np.ndarray  # int8 index into COMM_KINDS
    coll_instance: np.ndarray  # int32: instance index of a COMM_COLL node, else -1
    names: tuple[str, ...]
    resource_rank: np.ndarray  # int32 per resource
    resource_tid: np.ndarray  # int32 per resource: thread id within its rank (timeline tid)
    resource_role: np.ndarray  # int8 per resource: ROLE_CPU / ROLE_COMPUTE / ROLE_COMM
    resource_label: tuple[str, ...]
    groups: tuple[tuple[int, ...], ...]  # member ranks of each group, sorted
    group_names: tuple[str, ...]
    instances: tuple[CollectiveInstance, ...]

    @property
    def num_nodes(self) -> int:
        return int(self.node_id.shape[0])

    @property
    def num_resources(self) -> int:
        return int(self.resource_rank.shape[0])


def _attr_map(node) -> dict:
    return {a.name: a.value for a in node.attrs}


def compile_workload(
    traces: Mapping[int, Trace],
    comm_groups: Mapping[str, tuple[int, ...]] | None = None,
    *,
    drop_missing_deps: bool = False,
) -> CompiledWorkload:
    """Compile ``{rank: Trace}`` (ranks 0..R-1) and comm groups ``{pg id: ranks}``.

    A dependency on a node absent from its rank's trace is a GraphError, unless
    ``drop_missing_deps`` (then it is dropped and counted in one warning per rank)."""
    if not traces:
        raise GraphError("no ranks to replay")
    ranks = sorted(traces)
    if ranks != list(range(len(ranks))):
        missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
        raise GraphError("ranks must be 0..N-1", rank=missing[0] if missing else None)
    num_ranks = len(ranks)
    comm_groups = {str(k): tuple(sorted({int(r) for r in v})) for k, v in (comm_groups or {}).items()}

    total = sum(len(traces[r].nodes) for r in ranks)
    node_rank = np.empty(total, np.int32)
    node_id = np.empty(total, np.int64)
    node_type = np.empty(total, np.int8)
    exec_kind = np.zeros(total, np.int8)
    duration = np.zeros(total, np.int64)
    resource = np.empty(total, np.int32)
    comm_size = np.zeros(total, np.int64)
    comm_type = np.full(total, -1, np.int16)
    comm_peer = np.full(total, -1, np.int32)
    comm_tag = np.zeros(total, np.int64)
    comm_kind = np.full(total, OTHER_KIND, np.int8)
    indegree = np.zeros(total, np.int32)
    names: list[str] = []
    pg_of: dict[int, str] = {}  # global index -> pg name, for collectives
    root_of: dict[int, int] = {}  # global index -> comm_root rank, where given
    ring_of: dict[int, tuple[int, ...]] = {}  # global index -> ring_order ranks, where given
    unsized = 0  # collectives without a size kept at their measured duration

    res_rank: list[int] = []
    res_tid: list[int] = []
    res_role: list[int] = []
    res_label: list[str] = []

    dep_src: list[int] = []  # edges pred -> succ (global)
    dep_dst: list[int] = []
    rank_ptr = np.zeros(num_ranks + 1, np.int64)

    base = 0
    for rank in ranks:
        trace = traces[rank]
        rank_ptr[rank] = base
        local_res: dict[object, int] = {}

        def res_for(key: object, role: int, label: str) -> int:
            rid = local_res.get(key)
            if rid is None:
                rid = len(res_rank)
                local_res[key] = rid
                res_rank.append(rank)
                res_tid.append(len(local_res) - 1)
                res_role.append(role)
                res_label.append(label)
            return rid

        dropped = 0
        index_of: dict[int, int] = {}
        for i, node in enumerate(trace.nodes):
            if node.id in index_of:
                raise GraphError("duplicate node id", file=trace.source, rank=rank, node=node.id)
            index_of[node.id] = base + i

        for i, node in enumerate(trace.nodes):
            g = base + i
            a = _attr_map(node)
            ntype = int(node.type)
            node_rank[g] = rank
            node_id[g] = node.id
            node_type[g] = ntype if -128 <= ntype < 128 else 0
            names.append(node.name)
            exact = a.get(A.DURATION_NS)
            duration[g] = int(exact) if exact is not None else int(node.duration_micros) * NS_PER_US
            if duration[g] < 0:
                raise GraphError(f"negative duration {duration[g]} ns", file=trace.source, rank=rank, node=node.id, field=A.DURATION_NS)
            kind_text = a.get(A.COMM_KIND)
            if kind_text is not None:
                comm_kind[g] = _KIND_INDEX.get(str(kind_text).lower(), OTHER_KIND)
            is_comm = ntype in (NodeType.COMM_SEND, NodeType.COMM_RECV, NodeType.COMM_COLL)
            stream = a.get(A.STREAM)
            if a.get(A.IS_CPU_OP, False) or (stream is not None and int(stream) < 0):
                # one resource per host thread: a negative stream names it, else the tid attribute
                if stream is not None and int(stream) < 0:
                    thread = ("stream", int(stream))
                else:
                    tid = a.get(A.THREAD)
                    thread = ("tid", int(tid)) if tid is not None else None
                label = "cpu" if thread is None else f"cpu thread {thread[1]}"
                resource[g] = res_for(("cpu", thread), ROLE_CPU, label)
            elif stream is not None:
                role = ROLE_COMM if is_comm else ROLE_COMPUTE
                resource[g] = res_for(("stream", int(stream)), role, f"stream {int(stream)}")
            elif is_comm:
                resource[g] = res_for("comm", ROLE_COMM, "comm")
            else:
                resource[g] = res_for("compute", ROLE_COMPUTE, "compute")
            if is_comm:
                comm_size[g] = int(a.get(A.COMM_SIZE, 0) or 0)
                if comm_size[g] < 0:
                    raise GraphError(f"negative comm_size {comm_size[g]}", file=trace.source, rank=rank, node=node.id, field=A.COMM_SIZE)
                tag = a.get(A.COMM_TAG)
                comm_tag[g] = int(tag) if tag is not None else 0
                if ntype == NodeType.COMM_SEND:
                    exec_kind[g] = K_SEND
                    peer = a.get(A.COMM_DST)
                    if peer is None:
                        raise GraphError("send without comm_dst", file=trace.source, rank=rank, node=node.id, field=A.COMM_DST)
                    comm_peer[g] = int(peer)
                elif ntype == NodeType.COMM_RECV:
                    exec_kind[g] = K_RECV
                    peer = a.get(A.COMM_SRC)
                    if peer is None:
                        raise GraphError("recv without comm_src", file=trace.source, rank=rank, node=node.id, field=A.COMM_SRC)
                    comm_peer[g] = int(peer)
                elif _unsized_collective(a, comm_size[g]):
                    # no size (a capture without record_shapes): keep the kernel's measured duration
                    exec_kind[g] = K_TIMED
                    duration[g] = int(a[A.MEASURED_DURATION_NS])
                    unsized += 1
                else:
                    exec_kind[g] = K_COLL
                    ct = a.get(A.COMM_TYPE)
                    comm_type[g] = int(ct) if ct is not None else 0
                    pg_of[g] = str(a.get(A.PG_NAME, "") or "")
                    root = a.get(A.COMM_ROOT)
                    if root is not None:
                        root_of[g] = int(root)
                    order = a.get(A.RING_ORDER)
                    if order is not None and len(order):
                        ring_of[g] = tuple(int(x) for x in order)
                if exec_kind[g] in (K_SEND, K_RECV):
                    peer = int(comm_peer[g])
                    if not 0 <= peer < num_ranks:
                        fld = A.COMM_DST if exec_kind[g] == K_SEND else A.COMM_SRC
                        raise GraphError(f"peer rank {peer} is not in 0..{num_ranks - 1}", file=trace.source, rank=rank, node=node.id, field=fld)
            # deps
            edges_before = len(dep_dst)
            seen: set[int] = set()
            for d in node.data_deps + node.ctrl_deps:
                if d in seen:
                    continue
                seen.add(d)
                p = index_of.get(d)
                if p is None and drop_missing_deps:
                    dropped += 1
                    continue
                if p is None:
                    raise GraphError(f"depends on node {d}, which is not in the trace (--drop-missing-deps drops such "
                                     "dependencies with a warning)", file=trace.source, rank=rank, node=node.id)
                if p == g:
                    raise GraphError("node depends on itself (a cycle)", file=trace.source, rank=rank, node=node.id)
                dep_src.append(p)
                dep_dst.append(g)
            indegree[g] = len(dep_dst) - edges_before
        if dropped:
            log.warning("rank %d: dropped %d dependencies on nodes missing from the trace", rank, dropped)
        base += len(trace.nodes)
    rank_ptr[num_ranks] = base

    src = np.asarray(dep_src, np.int64)
    dst = np.asarray(dep_dst, np.int64)
    order = np.argsort(src, kind="stable")
    succ_idx = dst[order].astype(np.int32)
    counts = np.bincount(src, minlength=total) if total else np.zeros(0, np.int64)
    succ_ptr = np.zeros(total + 1, np.int64)
    np.cumsum(counts, out=succ_ptr[1:])

    if np.any(src >= dst):  # some dependency points forward in file order: check for cycles
        _check_acyclic(total, indegree, succ_ptr, succ_idx, node_rank, node_id, src, dst,
                       sources={r: traces[r].source for r in ranks})

    if unsized:
        log.warning("%s: the capture was taken without record_shapes; they keep their measured duration",
                    unsized_message(unsized))
    groups, group_names, instances, coll_instance = _match_collectives(
        num_ranks, pg_of, node_rank, node_id, comm_type, comm_size, comm_groups, root_of, ring_of
    )

    return CompiledWorkload(
        num_ranks=num_ranks,
        rank_ptr=rank_ptr,
        node_rank=node_rank,
        node_id=node_id,
        node_type=node_type,
        exec_kind=exec_kind,
        duration_ns=duration,
        resource=resource,
        indegree=indegree,
        succ_ptr=succ_ptr,
        succ_idx=succ_idx,
        comm_size=comm_size,
        comm_type=comm_type,
        comm_peer=comm_peer,
        comm_tag=comm_tag,
        comm_kind=comm_kind,
        coll_instance=coll_instance,
        names=tuple(names),
        resource_rank=np.asarray(res_rank, np.int32),
        resource_tid=np.asarray(res_tid, np.int32),
        resource_role=np.asarray(res_role, np.int8),
        resource_label=tuple(res_label),
        groups=groups,
        group_names=group_names,
        instances=instances,
    )


def _check_acyclic(total, indegree, succ_ptr, succ_idx, node_rank, node_id, src, dst, sources=None) -> None:
    """Kahn's algorithm; on a cycle, name its file, rank and nodes."""
    indeg = indegree.astype(np.int64).tolist()
    ptr = succ_ptr.tolist()
    succ = succ_idx.tolist()
    stack = [i for i in range(total) if indeg[i] == 0]
    done = 0
    while stack:
        i = stack.pop()
        done += 1
        for k in range(ptr[i], ptr[i + 1]):
            s = succ[k]
            indeg[s] -= 1
            if indeg[s] == 0:
                stack.append(s)
    if done == total:
        return
    # walk predecessors among the unfinished nodes until one repeats: that node is on a cycle
    preds: dict[int, int] = {}
    for p, d in zip(src.tolist(), dst.tolist()):
        if indeg[p] > 0 and indeg[d] > 0 and d not in preds:
            preds[d] = p
    node = next(i for i in range(total) if indeg[i] > 0 and i in preds)
    seen: set[int] = set()
    while node not in seen:
        seen.add(node)
        node = preds[node]
    cycle = [node]  # walk the cycle once more to name it (each depends on the one before)
    while preds[cycle[-1]] != node:
        cycle.append(preds[cycle[-1]])
    path = " <- ".join(f"{int(node_id[i])}" + (f" (rank {int(node_rank[i])})" if node_rank[i] != node_rank[node] else "")
                       for i in cycle[:12])
    rank = int(node_rank[node])
    raise GraphError(f"dependency cycle: {path} <- {int(node_id[node])}" + (" ..." if len(cycle) > 12 else ""),
                     file=(sources or {}).get(rank), rank=rank, node=int(node_id[node]))


#: collective types whose ``comm_root`` the engine honours
ROOTED_TYPES = (CollectiveType.BROADCAST, CollectiveType.REDUCE, CollectiveType.GATHER, CollectiveType.SCATTER)


def _instance_layout(pg, seq, members, nodes, ctype, node_rank, node_id, root_of, ring_of) -> tuple[int, tuple[int, ...] | None]:
    """The root position and ring positions of one instance; every member that gives them must agree."""
    pos = {r: i for i, r in enumerate(members)}
    root = 0
    roots = {g: root_of[g] for g in nodes if g in root_of}
    if roots and ctype in ROOTED_TYPES:
        first = next(iter(roots.values()))
        for g, r in roots.items():
            if r != first:
                raise GraphError(f"collective #{seq} of process group {pg!r} has comm_root {r} here but {first} elsewhere",
                                 rank=int(node_rank[g]), node=int(node_id[g]), field=A.COMM_ROOT)
            if r not in pos:
                raise GraphError(f"comm_root {r} is not a member of process group {pg!r} {list(members)}",
                                 rank=int(node_rank[g]), node=int(node_id[g]), field=A.COMM_ROOT)
        root = pos[first]
    ring = None
    orders = {g: ring_of[g] for g in nodes if g in ring_of}
    if orders:
        first_o = next(iter(orders.values()))
        for g, o in orders.items():
            if o != first_o:
                raise GraphError(f"collective #{seq} of process group {pg!r} has ring_order {list(o)} here but {list(first_o)} elsewhere",
                                 rank=int(node_rank[g]), node=int(node_id[g]), field=A.RING_ORDER)
            if sorted(o) != list(members):
                raise GraphError(f"ring_order {list(o)} is not an ordering of process group {pg!r} {list(members)}",
                                 rank=int(node_rank[g]), node=int(node_id[g]), field=A.RING_ORDER)
        ring = tuple(pos[r] for r in first_o)
        if ring == tuple(range(len(members))):
            ring = None
    return root, ring


def unsized_message(count: int) -> str:
    """The one warning for collectives without a size (also written by the converter)."""
    return f"{count} collective{'s' if count != 1 else ''} {'have' if count != 1 else 'has'} no size"


def _unsized_collective(attrs: dict, size_bytes: int) -> bool:
    """A collective (not a barrier) with no size but a measured duration: a capture without shapes."""
    if size_bytes != 0 or int(attrs.get(A.COMM_TYPE, 0) or 0) == int(CollectiveType.BARRIER):
        return False
    measured = attrs.get(A.MEASURED_DURATION_NS)
    return measured is not None and int(measured) > 0


def _match_collectives(num_ranks, pg_of, node_rank, node_id, comm_type, comm_size, comm_groups, root_of=None, ring_of=None):
    """Group collectives by process group and order of issue; check every member agrees."""
    root_of = root_of or {}
    ring_of = ring_of or {}
    per_pg: dict[str, dict[int, list[int]]] = {}
    for g in sorted(pg_of):
        per_pg.setdefault(world_pg_name(pg_of[g], comm_groups), {}).setdefault(int(node_rank[g]), []).append(g)

    groups: list[tuple[int, ...]] = []
    group_names: list[str] = []
    instances: list[CollectiveInstance] = []
    coll_instance = np.full(node_rank.shape[0], -1, np.int32)

    def pg_key(k: str):
        return (0, int(k)) if k.isdigit() else (1, k)

    for pg in sorted(per_pg, key=pg_key):
        by_rank = per_pg[pg]
        if pg in comm_groups:
            members = comm_groups[pg]
        elif pg in ALL_RANKS_PG:
            members = tuple(range(num_ranks))
        else:
            members = tuple(sorted(by_rank))
            log.warning("process group %r is not in the comm groups; using the %d rank(s) that issue it", pg, len(members))
        bad = [r for r in members if not 0 <= r < num_ranks]
        if bad:
            raise GraphError(f"process group {pg!r} names rank {bad[0]}, outside 0..{num_ranks - 1}", field="comm_groups")
        for r in sorted(by_rank):
            if r not in members:
                raise GraphError(f"rank issues a collective on process group {pg!r} it is not a member of", rank=r, node=int(node_id[by_rank[r][0]]))
        counts = {r: len(by_rank.get(r, ())) for r in members}
        if len(set(counts.values())) > 1:
            most = max(counts.values())
            short = min(members, key=lambda r: (counts[r], r))
            raise GraphError(
                f"process group {pg!r}: this rank issues {counts[short]} collective(s), another member issues {most}; they cannot be matched",
                rank=short,
            )
        gid = len(groups)
        groups.append(tuple(members))
        group_names.append(pg)
        n_inst = counts[members[0]] if members else 0
        if n_inst:
            _add_instances(instances, coll_instance, gid, pg, members, by_rank, n_inst, node_rank, node_id, comm_type,
                           comm_size, root_of, ring_of)
    return tuple(groups), tuple(group_names), tuple(instances), coll_instance


def _add_instances(instances: list, coll_instance: np.ndarray, gid: int, pg: str, members: tuple[int, ...], by_rank: dict,
                   n_inst: int, node_rank, node_id, comm_type, comm_size, root_of: dict, ring_of: dict) -> None:
    """The ``n_inst`` collectives of one process group (member ``r``'s ``seq``-th is ``by_rank[r][seq]``):
    checked (one type; the largest size where members disagree, with a warning) and appended, in order."""
    mat = np.asarray([by_rank[r] for r in members], np.int64).T  # [seq, member position]
    ctypes = comm_type[mat]
    bad = ctypes != ctypes[:, :1]
    bad_seq = int(np.argmax(bad.any(axis=1))) if bad.any() else n_inst  # the first collective of two types
    sizes = comm_size[mat]
    size_max = sizes.max(axis=1).tolist()
    disagree = set(np.flatnonzero(sizes.min(axis=1) != sizes.max(axis=1)).tolist())
    layout = bool(root_of or ring_of) and any(g in root_of or g in ring_of for g in mat.ravel().tolist())
    base = len(instances)
    coll_instance[mat] = (base + np.arange(n_inst, dtype=np.int32))[:, None]
    for seq, (nodes, ctype) in enumerate(zip(map(tuple, mat.tolist()), ctypes[:, 0].tolist())):
        if seq == bad_seq:
            pos = int(np.argmax(bad[seq]))
            g = nodes[pos]
            raise GraphError(f"collective #{seq} of process group {pg!r} has type {int(comm_type[g])} here but {ctype} on rank {members[0]}",
                             rank=members[pos], node=int(node_id[g]), field=A.COMM_TYPE)
        if seq in disagree:
            log.warning("collective #%d of process group %r: members disagree on comm_size %s; using the largest", seq, pg,
                        sorted({int(comm_size[g]) for g in nodes}))
        root, ring = (_instance_layout(pg, seq, members, nodes, ctype, node_rank, node_id, root_of, ring_of) if layout
                      else (0, None))
        instances.append(CollectiveInstance(gid, seq, ctype, size_max[seq], nodes, root, ring))


def role_name(role: int) -> str:
    return _ROLE_NAMES[role]
