"""Recognise NCCL work in a trace and describe it: collective type, bytes, process group.

The names (collectives, kernels, dtypes) live in :mod:`xsim_trace.nccl_names`, shared with validation.

Three sources, best first: the collective args Kineto records on NCCL kernels and on
``record_param_comms`` (``Collective name``, ``In/Out msg nelems``, ``dtype``, ``Group size``,
``Process Group Name/Ranks``); the launching ``nccl:*`` / ``c10d::*`` CPU ops and their input
shapes; the kernel name (``ncclKernel_<Coll>_<Algo>_<Proto>_<Op>_<dtype>`` in older NCCL,
``ncclDevKernel_<Coll>_<Op>_<dtype>_<Algo>_<Proto>`` in newer).
"""

from __future__ import annotations

import ast
import enum
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from xsim_trace.graph.bounds import MAX_SIZE_BYTES, MAX_WORLD_SIZE
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.nccl_names import COLLECTIVE_BY_NAME, RECV_NAMES, SEND_NAMES, arg_count, dtype_bytes, normalise
from xsim_trace.nccl_names import parse_kernel_name as parse_nccl_kernel


class CommKind(enum.Enum):
    """What one NCCL operation is, before it becomes Chakra nodes."""

    COLLECTIVE = "collective"
    SEND = "send"
    RECV = "recv"


@dataclass(frozen=True, slots=True)
class CommInfo:
    kind: CommKind
    coll: CollectiveType | None  # for COLLECTIVE
    in_bytes: int
    out_bytes: int
    pg_name: str = "0"
    group_ranks: tuple[int, ...] | None = None  # None: the whole world
    peer: int | None = None  # for SEND / RECV (global rank) when known
    algo: str = ""
    source: str = ""  # "args", "op", "kernel-name"

    @property
    def size_bytes(self) -> int:
        """The Chakra ``comm_size``: bytes of the full buffer the collective works on."""
        if self.coll in (CollectiveType.ALL_GATHER, CollectiveType.GATHER):
            return self.out_bytes
        if self.coll in (CollectiveType.REDUCE_SCATTER, CollectiveType.REDUCE_SCATTER_BLOCK, CollectiveType.SCATTER):
            return self.in_bytes
        if self.kind is CommKind.RECV:
            return self.out_bytes or self.in_bytes
        return self.in_bytes or self.out_bytes


def coll_from_name(name: str) -> CollectiveType | CommKind | None:
    """A collective type (or SEND / RECV) from a collective's spelled name, e.g. ``all_reduce``;
    None for the SendRecv kernel (both directions at once: nothing to size or pair)."""
    key = normalise(name)
    if key in SEND_NAMES:
        return CommKind.SEND
    if key in RECV_NAMES:
        return CommKind.RECV
    return COLLECTIVE_BY_NAME.get(key)


def parse_kernel_name(name: str) -> tuple[str, str, str] | None:
    """(collective word, algorithm, dtype) from an NCCL kernel name, or None."""
    parts = parse_nccl_kernel(name)
    return (parts.coll, parts.algo, parts.dtype) if parts is not None else None


def parse_ranks(value: Any) -> tuple[int, ...] | None:
    """``"[0, 1, 2]"`` or a list -> tuple of ints; None if absent or unreadable."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool)
                                                 and 0 <= v < MAX_WORLD_SIZE for v in value):
        return tuple(int(v) for v in value)
    return None


def from_args(args: Mapping[str, Any] | None, world_size: int) -> CommInfo | None:
    """From the NCCL args Kineto writes on kernels and record_param_comms (PyTorch >= 2.1)."""
    if not args or "Collective name" not in args:
        return None
    what = coll_from_name(str(args["Collective name"]))
    if what is None:
        return None
    elem = dtype_bytes(args.get("dtype")) or 1
    n_in = arg_count(args, "In msg nelems")
    n_out = arg_count(args, "Out msg nelems")
    in_bytes = n_in * elem if n_in is not None else (arg_count(args, "In msg size") or 0)
    out_bytes = n_out * elem if n_out is not None else (arg_count(args, "Out msg size") or in_bytes)
    in_bytes, out_bytes = min(in_bytes, MAX_SIZE_BYTES), min(out_bytes, MAX_SIZE_BYTES)
    ranks = parse_ranks(args.get("Process Group Ranks"))
    pg = args.get("Process Group Name")
    pg_name = str(pg) if pg not in (None, "") else ("0" if ranks is None or len(ranks) == world_size else _ranks_key(ranks))
    kind = what if isinstance(what, CommKind) else CommKind.COLLECTIVE
    coll = what if isinstance(what, CollectiveType) else None
    peer = None
    if kind is not CommKind.COLLECTIVE:
        for key in ("Dst Rank", "Src Rank", "Rank"):
            v = arg_count(args, key, MAX_WORLD_SIZE - 1)
            if v is not None:
                peer = v
                break
    return CommInfo(kind, coll, in_bytes, out_bytes, pg_name, ranks, peer, source="args")


def _ranks_key(ranks: Iterable[int]) -> str:
    return "ranks:" + ",".join(str(r) for r in ranks)


def _shape_bytes(dims: Any, dtype: Any) -> int | None:
    elem = dtype_bytes(dtype)
    if elem is None or not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return None
    return math.prod(dims) * elem if dims else None


def from_ops(ops: Iterable[tuple[str, Mapping[str, Any] | None]], world_size: int) -> CommInfo | None:
    """From the stack of CPU ops enclosing the launch, innermost first (names + kept args)."""
    ops = list(ops)
    for name, args in ops:  # record_param_comms / nccl ops may carry the full args
        info = from_args(args, world_size)
        if info is not None:
            return info
    what: CollectiveType | CommKind | None = None
    in_bytes = out_bytes = None
    for name, args in ops:
        if name.startswith("nccl:") and what is None:
            what = coll_from_name(name[5:])
            if args:
                dims, types = args.get("Input Dims") or [], args.get("Input type") or []
                sizes = [_shape_bytes(d, t) for d, t in zip(dims, types)]
                sizes = [s for s in sizes if s]
                if sizes:
                    in_bytes = sum(sizes)
        elif name.startswith("c10d::") and args:
            if what is None:
                what = coll_from_name(name[6:].rstrip("_"))
            dims, types = args.get("Input Dims") or [], args.get("Input type") or []
            if name.startswith("c10d::alltoall_base") and len(dims) >= 2:
                out_bytes = _shape_bytes(dims[0], types[0] if types else None)
                if in_bytes is None:
                    in_bytes = _shape_bytes(dims[1], types[1] if len(types) > 1 else None)
            elif name.startswith(("c10d::_allgather_base", "c10d::allgather_into_tensor")) and len(dims) >= 2:
                out_bytes = _shape_bytes(dims[0], types[0] if types else None)
                if in_bytes is None:
                    in_bytes = _shape_bytes(dims[1], types[1] if len(types) > 1 else None)
            elif name.startswith(("c10d::_reduce_scatter_base", "c10d::reduce_scatter_tensor")) and len(dims) >= 2:
                out_bytes = _shape_bytes(dims[0], types[0] if types else None)
                if in_bytes is None:
                    in_bytes = _shape_bytes(dims[1], types[1] if len(types) > 1 else None)
    if what is None:
        return None
    if what is CollectiveType.ALL_GATHER and in_bytes and not out_bytes:
        out_bytes = in_bytes * world_size
    if what is CollectiveType.REDUCE_SCATTER and in_bytes and out_bytes and in_bytes < out_bytes:
        in_bytes, out_bytes = out_bytes, in_bytes
    kind = what if isinstance(what, CommKind) else CommKind.COLLECTIVE
    coll = what if isinstance(what, CollectiveType) else None
    ib = in_bytes or 0
    return CommInfo(kind, coll, ib, out_bytes or ib, "0", None, source="op")


def from_kernel_name(name: str, world_size: int) -> CommInfo | None:
    parsed = parse_kernel_name(name)
    if parsed is None:
        return None
    word, algo, _dtype = parsed
    what = coll_from_name(word)
    if what is None:  # SendRecv / Generic: a point-to-point group we cannot size or pair
        return None
    kind = what if isinstance(what, CommKind) else CommKind.COLLECTIVE
    coll = what if isinstance(what, CollectiveType) else None
    return CommInfo(kind, coll, 0, 0, "0", None, algo=algo, source="kernel-name")


def describe(kernel_name: str, kernel_args: Mapping[str, Any] | None,
             ops: Iterable[tuple[str, Mapping[str, Any] | None]], world_size: int) -> CommInfo | None:
    """Best description of one NCCL kernel, or None when nothing says what it is."""
    parsed = parse_kernel_name(kernel_name)
    algo = parsed[1] if parsed else ""
    info = from_args(kernel_args, world_size) or from_ops(ops, world_size) or from_kernel_name(kernel_name, world_size)
    if info is None:
        return None
    size = kernel_args.get("bytes") if kernel_args else None
    if info.in_bytes == 0 and isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= MAX_SIZE_BYTES:
        info = CommInfo(info.kind, info.coll, kernel_args["bytes"], kernel_args["bytes"], info.pg_name,
                        info.group_ranks, info.peer, algo, info.source)
    if algo and not info.algo:
        info = CommInfo(info.kind, info.coll, info.in_bytes, info.out_bytes, info.pg_name, info.group_ranks,
                        info.peer, algo, info.source)
    return info
