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
from typing import Callable, Mapping

import numpy as np

from xsim_trace.errors import GraphError
from xsim_trace.graph.bounds import check_bounds, columns_in_bounds
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import NS_PER_US
from xsim_trace.io.et_columns import NameTable, NodeColumns, read_columns
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

#: below this many bytes of rank files the typed reader is faster than loading the numba decoder
COLUMNAR_MIN_BYTES = 4 << 20

_SEND, _RECV, _COLL = int(NodeType.COMM_SEND), int(NodeType.COMM_RECV), int(NodeType.COMM_COLL)
# resource key classes, per rank: CPU thread (none / negative stream / tid), device stream, comm, compute
_CPU_NONE, _CPU_STREAM, _CPU_TID, _STREAM, _COMM, _COMPUTE = range(6)


class _Unsupported(Exception):
    """This input is left to the typed path (which reports the error, or handles the odd case)."""


def compile_rank_files(
    prefix_or_dir: str | os.PathLike[str],
    *,
    drop_missing_deps: bool = False,
    columnar: bool | None = None,
    on_rank: Callable[[int], None] | None = None,
) -> tuple[CompiledWorkload, str]:
    """``(workload, prefix)`` of a rank set on disk, decoded column-wise where possible.

    ``columnar``: None decides by size (:data:`COLUMNAR_MIN_BYTES`), True/False forces it."""
    prefix, files = find_rank_files(prefix_or_dir)
    groups_path = prefix + COMM_GROUPS_SUFFIX
    groups = read_comm_groups(groups_path) if os.path.exists(groups_path) else {}
    if columnar is None:
        columnar = sum(os.path.getsize(p) for p in files.values()) >= COLUMNAR_MIN_BYTES
    if columnar:
        cols: dict[int, NodeColumns] = {}
        for rank, path in files.items():
            c = read_columns(path)
            if c is None or not columns_in_bounds(c):  # out of bounds: the typed path names the value
                break
            cols[rank] = c
            if on_rank is not None:
                on_rank(rank)
        else:
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
    cols: Mapping[int, NodeColumns],
    comm_groups: Mapping[str, tuple[int, ...]] | None = None,
    *,
    drop_missing_deps: bool = False,
) -> CompiledWorkload:
    """The columnar twin of compile_workload; raises _Unsupported where it would differ from it."""
    ranks = sorted(cols)
    if not ranks or ranks != list(range(len(ranks))):
        raise _Unsupported("ranks are not 0..N-1")
    num_ranks = len(ranks)
    comm_groups = {str(k): tuple(sorted({int(r) for r in v})) for k, v in (comm_groups or {}).items()}
    counts = np.array([len(cols[r]) for r in ranks], np.int64)
    rank_ptr = np.zeros(num_ranks + 1, np.int64)
    np.cumsum(counts, out=rank_ptr[1:])
    total = int(rank_ptr[-1])

    parts = [_rank_part(r, cols[r], int(rank_ptr[r]), num_ranks, drop_missing_deps) for r in ranks]
    res = _resources(parts)
    cat = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in parts[0] if k not in ("pg_of", "root_of", "ring_of", "res_key", "dep_src", "dep_dst")}
    src = np.concatenate([p["dep_src"] for p in parts])
    dst = np.concatenate([p["dep_dst"] for p in parts])
    order = np.lexsort((dst, src))
    succ_idx = dst[order].astype(np.int32)
    indegree = np.bincount(dst, minlength=total).astype(np.int32) if total else np.zeros(0, np.int32)
    succ_ptr = np.zeros(total + 1, np.int64)
    if total:
        np.cumsum(np.bincount(src, minlength=total), out=succ_ptr[1:])
    node_rank = np.repeat(np.arange(num_ranks, dtype=np.int32), counts)
    node_id = cat["node_id"]
    if np.any(src >= dst):
        try:
            _check_acyclic(total, indegree, succ_ptr, succ_idx, node_rank, node_id, src, dst)
        except GraphError:  # let the typed path name the cycle (it walks the edges in its own order)
            raise _Unsupported("dependency cycle") from None
    pg_of: dict[int, str] = {}
    root_of: dict[int, int] = {}
    ring_of: dict[int, tuple[int, ...]] = {}
    for p in parts:
        pg_of.update(p["pg_of"])
        root_of.update(p["root_of"])
        ring_of.update(p["ring_of"])
    groups, group_names, instances, coll_instance = _match_collectives(
        num_ranks, pg_of, node_rank, node_id, cat["comm_type"], cat["comm_size"], comm_groups, root_of, ring_of
    )
    return CompiledWorkload(
        num_ranks=num_ranks, rank_ptr=rank_ptr, node_rank=node_rank, node_id=node_id,
        node_type=cat["node_type"], exec_kind=cat["exec_kind"], duration_ns=cat["duration_ns"],
        resource=res["resource"], indegree=indegree, succ_ptr=succ_ptr, succ_idx=succ_idx,
        comm_size=cat["comm_size"], comm_type=cat["comm_type"], comm_peer=cat["comm_peer"], comm_tag=cat["comm_tag"],
        comm_kind=cat["comm_kind"], coll_instance=coll_instance,
        names=NameTable.concat([cols[r].names for r in ranks]),  # type: ignore[arg-type]
        resource_rank=res["rank"], resource_tid=res["tid"], resource_role=res["role"], resource_label=res["label"],
        groups=groups, group_names=group_names, instances=instances,
    )


def _check_bounds(c: NodeColumns) -> None:
    """Refuse (to the typed path, which words the error) what graph.bounds.check_bounds refuses."""
    from xsim_trace.graph import bounds as B  # noqa: PLC0415

    for name, rule in B.INT_FIELDS.items():
        v, has = c.int_attr(name)
        if np.any(has & ((v < rule.lo) | (v > rule.hi))):
            raise _Unsupported(f"{name} out of bounds")
    for ring in c.ring_order.values():
        if any(not 0 <= x <= B.MAX_RANK for x in ring):
            raise _Unsupported("ring_order out of bounds")
    dur, has_dur = c.int_attr(A.DURATION_NS)
    if np.any(~has_dur & (c.duration_micros > B.MAX_DURATION_MICROS)):
        raise _Unsupported("duration_micros out of bounds")
    total = _exact_sum(np.where(has_dur, dur, c.duration_micros * NS_PER_US))
    size, _ = c.int_attr(A.COMM_SIZE)
    t = c.node_type
    comm = (t == _SEND) | (t == _RECV) | (t == _COLL)
    if total > B.MAX_TOTAL_NS or _exact_sum(np.where(comm, size, 0)) > B.MAX_TOTAL_BYTES:
        raise _Unsupported("totals out of bounds")


def _exact_sum(v: np.ndarray) -> int:
    """Sum of non-negative values below 2**53 without int64 overflow."""
    return int(np.sum(v >> 20)) * (1 << 20) + int(np.sum(v & ((1 << 20) - 1)))


def _rank_part(rank: int, c: NodeColumns, base: int, num_ranks: int, drop_missing: bool) -> dict:
    _check_bounds(c)
    n = len(c)
    ids = c.node_id
    if len(np.unique(ids)) != n:
        raise _Unsupported("duplicate node id")
    ntype = c.node_type
    dur_ns, has_dur = c.int_attr("duration_ns")
    if np.any(~has_dur & (c.duration_micros > (np.iinfo(np.int64).max // NS_PER_US))):
        raise _Unsupported("duration_micros out of range")
    duration = np.where(has_dur, dur_ns, c.duration_micros * NS_PER_US)
    if np.any(duration < 0):
        raise _Unsupported("negative duration")
    is_comm = (ntype == _SEND) | (ntype == _RECV) | (ntype == _COLL)
    comm_kind = np.full(n, OTHER_KIND, np.int8)
    for i, text in c.comm_kind.items():
        comm_kind[i] = _KIND_INDEX.get(text.lower(), OTHER_KIND)

    size, has_size = c.int_attr("comm_size")
    comm_size = np.where(is_comm & has_size, size, 0)
    if np.any(comm_size < 0):
        raise _Unsupported("negative comm_size")
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
    if np.any(comm_type < np.iinfo(np.int16).min) or np.any(comm_type > np.iinfo(np.int16).max):
        raise _Unsupported("comm_type out of range")
    colls = np.flatnonzero(coll)
    pg_of = {base + i: c.pg_name.get(i, "") for i in colls.tolist()}
    root_v, has_root = c.int_attr("comm_root")
    root_of = {base + i: int(root_v[i]) for i in np.flatnonzero(coll & has_root).tolist()}
    ring_of = {base + i: tuple(int(x) for x in c.ring_order[i]) for i in colls.tolist() if len(c.ring_order.get(i, ()))}

    dep_src, dep_dst = _deps(rank, c, base, drop_missing)
    return {
        "node_id": ids, "node_type": np.where((ntype >= -128) & (ntype < 128), ntype, 0).astype(np.int8),
        "exec_kind": exec_kind, "duration_ns": duration.astype(np.int64), "comm_size": comm_size.astype(np.int64),
        "comm_type": comm_type.astype(np.int16), "comm_peer": peer.astype(np.int32), "comm_tag": comm_tag.astype(np.int64),
        "comm_kind": comm_kind, "pg_of": pg_of, "root_of": root_of, "ring_of": ring_of,
        "res_key": _resource_keys(c, is_comm), "dep_src": dep_src, "dep_dst": dep_dst,
    }


def _deps(rank: int, c: NodeColumns, base: int, drop_missing: bool) -> tuple[np.ndarray, np.ndarray]:
    """Edges (pred, succ) in global indices, one per distinct dependency."""
    n = len(c)
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(c.dep_ptr))
    order = np.argsort(c.node_id, kind="stable")
    sorted_ids = c.node_id[order]
    pos = np.searchsorted(sorted_ids, c.deps)
    pos_c = np.minimum(pos, max(n - 1, 0))
    found = (pos < n) & (sorted_ids[pos_c] == c.deps) if n else np.zeros(len(c.deps), bool)
    if not found.all():
        if not drop_missing:
            raise _Unsupported("dependency on a node not in the trace")
    pred = order[pos_c]
    owner, pred = owner[found], pred[found]
    if np.any(pred == owner):
        raise _Unsupported("self dependency")
    if len(owner):
        pair = np.unique(owner * max(n, 1) + pred)
        owner, pred = pair // max(n, 1), pair % max(n, 1)
    if drop_missing:
        # dropped deps are counted once per occurrence after de-duplication, as the typed path does
        dropped = _dropped_count(c, found)
        if dropped:
            log.warning("rank %d: dropped %d dependencies on nodes missing from the trace", rank, dropped)
    return pred + base, owner + base


def _dropped_count(c: NodeColumns, found: np.ndarray) -> int:
    """Missing deps counted like the typed path: a repeated missing id of one node counts once."""
    if found.all():
        return 0
    owner = np.repeat(np.arange(len(c), dtype=np.int64), np.diff(c.dep_ptr))
    miss_owner, miss_id = owner[~found], c.deps[~found]
    return len(np.unique(np.stack([miss_owner, miss_id], 1), axis=0))


def _resource_keys(c: NodeColumns, is_comm: np.ndarray) -> np.ndarray:
    """Per node (class, value, role if it creates the resource) of its resource key."""
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
    out = np.empty((n, 3), np.int64)
    out[:, 0], out[:, 1], out[:, 2] = cls, val, role
    return out


def _label(cls: int, val: int) -> str:
    if cls == _CPU_NONE:
        return "cpu"
    if cls in (_CPU_STREAM, _CPU_TID):
        return f"cpu thread {val}"
    if cls == _STREAM:
        return f"stream {val}"
    return "comm" if cls == _COMM else "compute"


def _resources(parts: list[dict]) -> dict:
    """Global resource ids: per rank, in order of first use (as compile_workload assigns them)."""
    resource, res_rank, res_tid, res_role, res_label = [], [], [], [], []
    nres = 0
    for rank, p in enumerate(parts):
        keys = p["res_key"]
        if not len(keys):
            resource.append(np.zeros(0, np.int32))
            continue
        uniq, first, inv = np.unique(keys[:, :2], axis=0, return_index=True, return_inverse=True)
        by_first = np.argsort(first, kind="stable")
        local = np.empty(len(uniq), np.int64)
        local[by_first] = np.arange(len(uniq))
        resource.append((local[inv.reshape(-1)] + nres).astype(np.int32))
        for j in by_first.tolist():
            cls, val = int(uniq[j, 0]), int(uniq[j, 1])
            res_rank.append(rank)
            res_tid.append(int(local[j]))
            res_role.append(int(keys[first[j], 2]))
            res_label.append(_label(cls, val))
        nres += len(uniq)
    return {
        "resource": np.concatenate(resource) if resource else np.zeros(0, np.int32),
        "rank": np.asarray(res_rank, np.int32), "tid": np.asarray(res_tid, np.int32),
        "role": np.asarray(res_role, np.int8), "label": tuple(res_label),
    }
