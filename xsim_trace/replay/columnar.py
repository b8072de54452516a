"""Compile per-rank node columns (decoded straight from ``.et`` by
:mod:`xsim_trace.io.et_columns`) into a :class:`CompiledWorkload`, vectorised, with no per-node
Python objects (collective members aside: they are matched by :func:`_match_collectives`).

Gives exactly what :func:`~xsim_trace.replay.compile.compile_workload` gives on the typed traces of
the same files.  On any input that compile_workload would reject (or that this path does not
reproduce exactly) :func:`compile_rank_files` compiles the typed traces instead, so errors read the
same either way.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from xsim_trace.errors import GraphError
from xsim_trace.graph.bounds import check_bounds, columns_out_of_bounds
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import NS_PER_US, GlobalMetadata
from xsim_trace.io.et_columns import NameTable, NodeColumns, read_columns_many
from xsim_trace.io.metadata import read_metadata
from xsim_trace.io.rankset import COMM_GROUPS_SUFFIX, find_rank_files, read_comm_groups, read_rank_set
from xsim_trace.replay.compile import (
    _KIND_INDEX,
    K_COLL,
    K_RECV,
    K_SEND,
    OTHER_KIND,
    ROLE_COMM,
    ROLE_COMPUTE,
    ROLE_CPU,
    CompiledWorkload,
    _check_acyclic,
    _match_collectives,
    compile_workload,
)

log = logging.getLogger(__name__)

#: below this many bytes of rank files the typed reader decodes them: none, since the numpy decoder
#: (numba's above :data:`xsim_trace.io.et_columns.NUMBA_DECODE_MIN_BYTES`) is faster from a few nodes on,
#: and the typed reader would load protobuf (~0.025 s of CPU) for the files of a handful of nodes
COLUMNAR_MIN_BYTES = 0

_SEND, _RECV, _COLL = int(NodeType.COMM_SEND), int(NodeType.COMM_RECV), int(NodeType.COMM_COLL)
# resource key classes, per rank: CPU thread (none / negative stream / tid), device stream, comm, compute
_CPU_NONE, _CPU_STREAM, _CPU_TID, _STREAM, _COMM, _COMPUTE = range(6)


class _Unsupported(Exception):
    """This input is left to the typed path (which reports the error, or handles the odd case)."""


@dataclass(frozen=True)
class RankFiles:
    """A rank set's files, each read once: their columns where the column decoder took them (None
    where it declined, was not asked, or ranks are missing), and each file's metadata record."""

    prefix: str
    files: Mapping[int, os.PathLike[str]]
    columns: NodeColumns | None

    def metadata(self) -> dict[int, GlobalMetadata]:
        """``{rank: GlobalMetadata}``: from the decoded bytes, else read from each file's first record."""
        ranks = sorted(self.files)
        if self.columns is not None and len(self.columns.metadata) == len(ranks):
            return dict(zip(ranks, self.columns.metadata))
        return {r: read_metadata(self.files[r]) for r in ranks}


def read_rank_files(
    prefix_or_dir: str | os.PathLike[str], *, columnar: bool | None = None, partial: bool = False
) -> RankFiles:
    """Find a rank set's files and decode them column-wise (where ranks are 0..N-1 and ``columnar``,
    None: by size, :data:`COLUMNAR_MIN_BYTES`); ``partial`` allows missing ranks (then no columns)."""
    prefix, files = find_rank_files(prefix_or_dir, partial=partial)
    if columnar is None:
        columnar = sum(os.path.getsize(p) for p in files.values()) >= COLUMNAR_MIN_BYTES
    cols = None
    if columnar and sorted(files) == list(range(len(files))):
        cols = read_columns_many([files[r] for r in sorted(files)])
    return RankFiles(prefix=prefix, files=files, columns=cols)


def compile_rank_files(
    prefix_or_dir: str | os.PathLike[str] | RankFiles,
    *,
    drop_missing_deps: bool = False,
    columnar: bool | None = None,
) -> tuple[CompiledWorkload, str]:
    """``(workload, prefix)`` of a rank set on disk (or already read: :func:`read_rank_files`, ranks
    0..N-1), decoded column-wise where possible.

    ``columnar``: None decides by size (:data:`COLUMNAR_MIN_BYTES`), True/False forces it."""
    read = prefix_or_dir if isinstance(prefix_or_dir, RankFiles) else read_rank_files(prefix_or_dir, columnar=columnar)
    prefix, cols = read.prefix, read.columns
    groups_path = prefix + COMM_GROUPS_SUFFIX
    groups = read_comm_groups(groups_path) if os.path.exists(groups_path) else {}
    if cols is not None:
        try:
            return compile_columns(cols, groups, drop_missing_deps=drop_missing_deps), prefix
        except _Unsupported as why:
            log.debug("columnar compile declined (%s); compiling the typed traces", why)
        except GraphError:
            log.debug("columnar compile refused the set; the typed path words the error")
    rs = read_rank_set(prefix)
    check_bounds(rs.traces)  # the typed path refuses what the engine cannot represent (graph/bounds.py)
    return compile_workload(rs.traces, rs.comm_groups, drop_missing_deps=drop_missing_deps), prefix


def compile_columns(
    cols: Mapping[int, NodeColumns] | NodeColumns,
    comm_groups: Mapping[str, tuple[int, ...]] | None = None,
    *,
    drop_missing_deps: bool = False,
) -> CompiledWorkload:
    """The columnar twin of compile_workload; raises _Unsupported where it would differ from it.
    ``cols``: ``{rank: columns}`` (ranks 0..N-1), or one set of all ranks' columns in rank order
    with its ``rank_sizes``."""
    if isinstance(cols, NodeColumns):
        c, sizes = cols, list(cols.rank_sizes or (len(cols),))
    else:
        ranks = sorted(cols)
        if not ranks or ranks != list(range(len(ranks))):
            raise _Unsupported("ranks are not 0..N-1")
        c, sizes = _concat([cols[r] for r in ranks]), [len(cols[r]) for r in ranks]
    num_ranks = len(sizes)
    comm_groups = {str(k): tuple(sorted({int(r) for r in v})) for k, v in (comm_groups or {}).items()}
    counts = np.array(sizes, np.int64)
    rank_ptr = np.zeros(num_ranks + 1, np.int64)
    np.cumsum(counts, out=rank_ptr[1:])
    total = int(rank_ptr[-1])

    node_rank = np.repeat(np.arange(num_ranks, dtype=np.int32), counts)
    cat = _columns(c, node_rank, rank_ptr, num_ranks)
    src, dst = _deps(c, node_rank, rank_ptr, drop_missing_deps)
    res = _resources(cat.pop("res_key"), node_rank, num_ranks)
    order = np.lexsort((dst, src))
    succ_idx = dst[order].astype(np.int32)
    indegree = np.bincount(dst, minlength=total).astype(np.int32) if total else np.zeros(0, np.int32)
    succ_ptr = np.zeros(total + 1, np.int64)
    if total:
        np.cumsum(np.bincount(src, minlength=total), out=succ_ptr[1:])
    node_id = cat["node_id"]
    if np.any(src >= dst):
        try:
            _check_acyclic(total, indegree, succ_ptr, succ_idx, node_rank, node_id, src, dst)
        except GraphError:  # let the typed path name the cycle (it walks the edges in its own order)
            raise _Unsupported("dependency cycle") from None
    groups, group_names, instances, coll_instance = _match_collectives(
        num_ranks, cat["pg_of"], node_rank, node_id, cat["comm_type"], cat["comm_size"], comm_groups,
        cat["root_of"], cat["ring_of"]
    )
    return CompiledWorkload(
        num_ranks=num_ranks, rank_ptr=rank_ptr, node_rank=node_rank, node_id=node_id,
        node_type=cat["node_type"], exec_kind=cat["exec_kind"], duration_ns=cat["duration_ns"],
        resource=res["resource"], indegree=indegree, succ_ptr=succ_ptr, succ_idx=succ_idx,
        comm_size=cat["comm_size"], comm_type=cat["comm_type"], comm_peer=cat["comm_peer"], comm_tag=cat["comm_tag"],
        comm_kind=cat["comm_kind"], coll_instance=coll_instance,
        names=c.names,
        resource_rank=res["rank"], resource_tid=res["tid"], resource_role=res["role"], resource_label=res["label"],
        groups=groups, group_names=group_names, instances=instances,
    )


def _concat(parts: list[NodeColumns]) -> NodeColumns:
    """All ranks' columns as one (positions and dep pointers made global)."""
    if len(parts) == 1:
        return parts[0]
    sizes = [len(p) for p in parts]
    bases = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    dep_bases = np.concatenate([[0], np.cumsum([len(p.deps) for p in parts])]).astype(np.int64)
    dep_ptr = np.concatenate([p.dep_ptr[:-1] + dep_bases[i] for i, p in enumerate(parts)] + [dep_bases[-1:]])

    def merged(attr: str) -> dict:
        out: dict = {}
        for i, p in enumerate(parts):
            d = getattr(p, attr)
            if d:
                base = int(bases[i])
                out.update({base + k: v for k, v in d.items()})
        return out

    return NodeColumns(
        source=None, node_id=np.concatenate([p.node_id for p in parts]),
        node_type=np.concatenate([p.node_type for p in parts]),
        duration_micros=np.concatenate([p.duration_micros for p in parts]),
        names=NameTable.concat([p.names for p in parts]), dep_ptr=dep_ptr,
        deps=np.concatenate([p.deps for p in parts]), ivals=np.concatenate([p.ivals for p in parts]),
        ihas=np.concatenate([p.ihas for p in parts]), pg_name=merged("pg_name"), comm_kind=merged("comm_kind"),
        ring_order=merged("ring_order"), metadata=tuple(m for p in parts for m in p.metadata),
    )


def _check_bounds(c: NodeColumns, rank_ptr: np.ndarray) -> None:
    """Refuse (to the typed path, which words the error) what graph.bounds.check_bounds refuses."""
    why = columns_out_of_bounds(c, rank_ptr)
    if why is not None:
        raise _Unsupported(f"{why} out of bounds")


def _columns(c: NodeColumns, node_rank: np.ndarray, rank_ptr: np.ndarray, num_ranks: int) -> dict:
    """Every per-node column of the compiled workload, and the collective attributes by node."""
    _check_bounds(c, rank_ptr)
    n = len(c)
    ntype = c.node_type
    dur_ns, has_dur = c.int_attr("duration_ns")
    duration = np.where(has_dur, dur_ns, c.duration_micros * NS_PER_US)
    if np.any(duration < 0):
        raise _Unsupported("negative duration")
    is_comm = (ntype == _SEND) | (ntype == _RECV) | (ntype == _COLL)
    comm_kind = np.full(n, OTHER_KIND, np.int8)
    if c.comm_kind:  # each distinct text looked up once
        kinds = c.comm_kind
        index = {text: _KIND_INDEX.get(text.lower(), OTHER_KIND) for text in set(kinds.values())}
        comm_kind[np.fromiter(kinds.keys(), np.int64, len(kinds))] = np.fromiter(
            map(index.__getitem__, kinds.values()), np.int8, len(kinds))

    size, has_size = c.int_attr("comm_size")
    comm_size = np.where(is_comm & has_size, size, 0)
    tag, has_tag = c.int_attr("comm_tag")
    comm_tag = np.where(is_comm & has_tag, tag, 0)
    exec_kind = np.zeros(n, np.int8)
    exec_kind[ntype == _SEND] = K_SEND
    exec_kind[ntype == _RECV] = K_RECV
    exec_kind[ntype == _COLL] = K_COLL
    dst_v, has_dst = c.int_attr("comm_dst")
    src_v, has_src = c.int_attr("comm_src")
    if np.any((ntype == _SEND) & ~has_dst) or np.any((ntype == _RECV) & ~has_src):
        raise _Unsupported("send/recv without its peer")
    peer = np.where(ntype == _SEND, dst_v, np.where(ntype == _RECV, src_v, -1))
    p2p = (ntype == _SEND) | (ntype == _RECV)
    if np.any(p2p & ((peer < 0) | (peer >= num_ranks))):
        raise _Unsupported("peer out of range")
    ct, has_ct = c.int_attr("comm_type")
    coll = ntype == _COLL
    comm_type = np.where(coll, np.where(has_ct, ct, 0), -1)
    if np.any(coll & (comm_size == 0) & (comm_type != int(CollectiveType.BARRIER))):
        # maybe a capture without record_shapes: the typed path keeps such collectives at their
        # measured duration (an attribute these columns do not decode) and says how many
        raise _Unsupported("collective without a size")
    colls = np.flatnonzero(coll).tolist()
    root_v, has_root = c.int_attr("comm_root")
    return {
        "node_id": c.node_id, "node_type": np.where((ntype >= -128) & (ntype < 128), ntype, 0).astype(np.int8),
        "exec_kind": exec_kind, "duration_ns": duration.astype(np.int64), "comm_size": comm_size.astype(np.int64),
        "comm_type": comm_type.astype(np.int16), "comm_peer": peer.astype(np.int32), "comm_tag": comm_tag.astype(np.int64),
        "comm_kind": comm_kind,
        "pg_of": {i: c.pg_name.get(i, "") for i in colls},
        "root_of": {i: int(root_v[i]) for i in np.flatnonzero(coll & has_root).tolist()},
        "ring_of": {i: tuple(int(x) for x in c.ring_order[i]) for i in colls if len(c.ring_order.get(i, ()))},
        "res_key": _resource_keys(c, is_comm, node_rank),
    }


_ID_BITS = 32


def _deps(c: NodeColumns, node_rank: np.ndarray, rank_ptr: np.ndarray, drop_missing: bool) -> tuple[np.ndarray, np.ndarray]:
    """Edges (pred, succ) in global indices, one per distinct dependency; a dependency names a node
    of its own rank.  Node ids are looked up as (rank << 32 | id), so ids must be below 2**32."""
    n = len(c)
    ids = c.node_id
    if n and int(ids.max()) >= 1 << _ID_BITS:
        raise _Unsupported("node ids of 2**32 or more")
    node_key = (node_rank.astype(np.int64) << _ID_BITS) | ids
    order = np.argsort(node_key, kind="stable")
    sorted_keys = node_key[order]
    if n and np.any(sorted_keys[1:] == sorted_keys[:-1]):
        raise _Unsupported("duplicate node id")
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(c.dep_ptr))
    small = c.deps < (1 << _ID_BITS)
    dep_key = (node_rank[owner].astype(np.int64) << _ID_BITS) | np.where(small, c.deps, 0)
    pos = np.searchsorted(sorted_keys, dep_key)
    pos_c = np.minimum(pos, max(n - 1, 0))
    found = small & (pos < n) & (sorted_keys[pos_c] == dep_key) if n else np.zeros(len(c.deps), bool)
    if not found.all() and not drop_missing:
        raise _Unsupported("dependency on a node not in the trace")
    if drop_missing and not found.all():
        _warn_dropped(c, owner, found, node_rank)
    pred = order[pos_c][found]
    owner = owner[found]
    if np.any(pred == owner):
        raise _Unsupported("self dependency")
    if len(owner):
        pair = np.sort(owner * max(n, 1) + pred)
        pair = pair[np.concatenate([[True], pair[1:] != pair[:-1]])]
        owner, pred = pair // max(n, 1), pair % max(n, 1)
    return pred, owner


def _warn_dropped(c: NodeColumns, owner: np.ndarray, found: np.ndarray, node_rank: np.ndarray) -> None:
    """One warning per rank, counting a repeated missing id of one node once (as the typed path)."""
    miss = np.unique(np.stack([owner[~found], c.deps[~found]], 1), axis=0)
    per_rank = np.bincount(node_rank[miss[:, 0]], minlength=int(node_rank.max()) + 1)
    for rank in np.flatnonzero(per_rank).tolist():
        log.warning("rank %d: dropped %d dependencies on nodes missing from the trace", rank, int(per_rank[rank]))


def _resource_keys(c: NodeColumns, is_comm: np.ndarray, node_rank: np.ndarray) -> np.ndarray:
    """Per node (rank, class, value, role if it creates the resource) of its resource key."""
    n = len(c)
    stream, has_stream = c.int_attr("stream")
    tid, has_tid = c.int_attr("tid")
    cpu_flag, has_cpu = c.int_attr("is_cpu_op")
    neg_stream = has_stream & (stream < 0)
    cpu = (has_cpu & (cpu_flag != 0)) | neg_stream
    cls = np.where(is_comm, _COMM, _COMPUTE)
    cls = np.where(has_stream, _STREAM, cls)
    cpu_cls = np.where(neg_stream, _CPU_STREAM, np.where(has_tid, _CPU_TID, _CPU_NONE))
    cls = np.where(cpu, cpu_cls, cls)
    val = np.where(cls == _CPU_TID, tid, np.where((cls == _CPU_STREAM) | (cls == _STREAM), stream, 0))
    role = np.where(cpu, ROLE_CPU, np.where(is_comm, ROLE_COMM, ROLE_COMPUTE))
    out = np.empty((n, 4), np.int64)
    out[:, 0], out[:, 1], out[:, 2], out[:, 3] = node_rank, cls, val, role
    return out


def _label(cls: int, val: int) -> str:
    if cls == _CPU_NONE:
        return "cpu"
    if cls in (_CPU_STREAM, _CPU_TID):
        return f"cpu thread {val}"
    if cls == _STREAM:
        return f"stream {val}"
    return "comm" if cls == _COMM else "compute"


def _resources(keys: np.ndarray, node_rank: np.ndarray, num_ranks: int) -> dict:
    """Global resource ids: by rank, and within a rank in order of first use (as compile_workload)."""
    if not len(keys):
        return {"resource": np.zeros(0, np.int32), "rank": np.zeros(0, np.int32), "tid": np.zeros(0, np.int32),
                "role": np.zeros(0, np.int8), "label": ()}
    order = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))  # stable: a group's first is its first use
    sk = keys[order, :3]
    new_group = np.concatenate([[True], np.any(sk[1:] != sk[:-1], axis=1)])
    group = np.cumsum(new_group) - 1  # per sorted node: its key's group
    first = order[new_group]  # per group: the node that uses it first
    by_first = np.argsort(first, kind="stable")  # rank-major, since ranks' nodes are contiguous
    rid = np.empty(len(first), np.int64)
    rid[by_first] = np.arange(len(first))
    resource = np.empty(len(keys), np.int64)
    resource[order] = rid[group]
    firsts = first[by_first]
    res_rank = keys[firsts, 0]
    starts = np.searchsorted(res_rank, np.arange(num_ranks))
    tid = np.arange(len(firsts)) - starts[res_rank]
    labels = tuple(_label(int(a), int(b)) for a, b in keys[firsts, 1:3].tolist())
    return {
        "resource": resource.astype(np.int32),
        "rank": res_rank.astype(np.int32), "tid": tid.astype(np.int32),
        "role": keys[firsts, 3].astype(np.int8), "label": labels,
    }
