"""The one home of NCCL naming knowledge, shared by the converters (``converters/nccl.py``) and the
measured side of validation (``xsim_trace/validate/measured.py``): collective names as Kineto, the
``nccl:*`` / ``c10d::*`` ops and the kernels spell them, kernel-name layouts, dtype element sizes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from xsim_trace.graph.bounds import MAX_SIZE_BYTES
from xsim_trace.graph.kinds import CollectiveType

#: element sizes of the dtype spellings seen in Kineto args, kernel names and ET types
DTYPE_BYTES: dict[str, int] = {}
for _names, _size in (
    (("float", "float32", "f32", "c10::float", "single"), 4),
    (("double", "float64", "f64"), 8),
    (("half", "float16", "f16", "c10::half", "__half"), 2),
    (("bfloat16", "bf16", "c10::bfloat16", "__nv_bfloat16"), 2),
    (("int", "int32", "i32", "int32_t", "unsigned int", "uint32", "u32", "uint32_t"), 4),
    (("long", "long int", "int64", "i64", "int64_t", "long long", "unsigned long", "uint64", "u64", "uint64_t"), 8),
    (("short", "short int", "int16", "i16"), 2),
    (("char", "int8", "i8", "int8_t", "signed char", "byte", "uint8", "u8", "uint8_t", "unsigned char", "bool"), 1),
    (("float8_e4m3fn", "float8_e5m2", "fp8", "f8e4m3", "f8e5m2", "c10::float8_e4m3fn", "c10::float8_e5m2"), 1),
):
    for _n in _names:
        DTYPE_BYTES[_n] = _size


def arg_count(args: Mapping[str, Any], key: str, maximum: int = MAX_SIZE_BYTES) -> int | None:
    """A count, size or rank from the NCCL args Kineto records (``In msg nelems``, ``Group size``,
    ``Dst Rank``): an int, a finite float or digit text within ``0..maximum``; None when absent,
    unreadable or out of range."""
    v = args.get(key)
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and math.isfinite(v):
        v = int(v)
    if isinstance(v, str) and v.strip().isdigit() and len(v.strip()) < 20:
        v = int(v)
    return v if isinstance(v, int) and 0 <= v <= maximum else None


def dtype_bytes(name: Any) -> int | None:
    """Bytes per element of a dtype spelling (``Float``, ``torch.bfloat16``, ``f32``), or None."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower()
    if key.startswith("torch."):
        key = key[6:]
    return DTYPE_BYTES.get(key)


#: collective names (Kineto "Collective name", nccl:* op suffixes, kernel names), lower-case letters only
COLLECTIVE_BY_NAME: dict[str, CollectiveType] = {
    "allreduce": CollectiveType.ALL_REDUCE,
    "allreducecoalesced": CollectiveType.ALL_REDUCE,
    "reduce": CollectiveType.REDUCE,
    "allgather": CollectiveType.ALL_GATHER,
    "allgatherbase": CollectiveType.ALL_GATHER,
    "allgatherintotensorcoalesced": CollectiveType.ALL_GATHER,
    "allgathercoalesced": CollectiveType.ALL_GATHER,
    "gather": CollectiveType.GATHER,
    "scatter": CollectiveType.SCATTER,
    "broadcast": CollectiveType.BROADCAST,
    "alltoall": CollectiveType.ALL_TO_ALL,
    "alltoallbase": CollectiveType.ALL_TO_ALL,
    "alltoallv": CollectiveType.ALL_TO_ALL,
    "reducescatter": CollectiveType.REDUCE_SCATTER,
    "reducescatterbase": CollectiveType.REDUCE_SCATTER,
    "reducescattertensorcoalesced": CollectiveType.REDUCE_SCATTER,
    "barrier": CollectiveType.BARRIER,
}
#: point-to-point names: one direction (send / recv, their i- forms) or the SendRecv kernel of both
SEND_NAMES = frozenset({"send", "isend"})
RECV_NAMES = frozenset({"recv", "irecv"})
P2P_KERNEL_NAMES = frozenset({"sendrecv"})

_OLD_KERNEL = re.compile(r"^ncclKernel_(?P<coll>[A-Za-z]+)_(?P<algo>[A-Z_]+?)_(?P<proto>LL128|LL|SIMPLE)_(?P<op>[A-Za-z]+)_(?P<dtype>[A-Za-z0-9_]+?)\(")
_NEW_KERNEL = re.compile(r"^ncclDevKernel_(?P<coll>[A-Za-z]+)(?:_(?P<op>Sum|Prod|Min|Max|PreMulSum|SumPostDiv))?(?:_(?P<dtype>[a-z0-9]+))?(?:_(?P<algo>RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|NVLS|NVLS_TREE|PAT))?(?:_(?P<proto>LL128|LL|SIMPLE))?")
#: looser layouts (unknown algorithm or protocol spellings): collective, algorithm, protocol only
_OLD_LOOSE = re.compile(r"^ncclKernel_([A-Za-z]+)_([A-Z]+)_([A-Z0-9]+)_")
_NEW_LOOSE = re.compile(r"^ncclDevKernel_([A-Za-z]+)(?:_[A-Za-z0-9]+)*?(?:_([A-Z]+)_([A-Z0-9]+))?\(")


@dataclass(frozen=True, slots=True)
class KernelName:
    """The parts of an NCCL kernel name (``ncclKernel_<Coll>_<Algo>_<Proto>_<Op>_<dtype>`` in older
    NCCL, ``ncclDevKernel_<Coll>_<Op>_<dtype>_<Algo>_<Proto>`` in newer); empty when not spelled."""

    coll: str
    algo: str = ""
    proto: str = ""
    dtype: str = ""


def normalise(name: str) -> str:
    """Lower-case letters only: ``all_reduce``, ``AllReduce`` and ``allreduce`` read the same."""
    return re.sub(r"[^a-z]", "", name.lower())


def collective_of(name: str) -> CollectiveType | None:
    """The collective a spelled name means (``all_reduce``, ``AllGather``, ``_reduce_scatter_base``)."""
    return COLLECTIVE_BY_NAME.get(normalise(name))


def is_nccl_kernel(name: str) -> bool:
    """Whether a device event's name is an NCCL kernel (the converters and validation both ask this)."""
    return name.startswith(("ncclKernel", "ncclDevKernel", "nccl::", "ncclSendRecv")) or "nccl" in name[:24].lower()


def parse_kernel_name(name: str) -> KernelName | None:
    """The parts of an NCCL kernel name: the exact layouts first, then looser ones; None if neither."""
    for pattern in (_OLD_KERNEL, _NEW_KERNEL):
        m = pattern.match(name)
        if m:
            return KernelName(m["coll"], m["algo"] or "", m["proto"] or "", m["dtype"] or "")
    return None


def parse_kernel_loosely(name: str) -> KernelName | None:
    """Collective, algorithm and protocol of a kernel name by the looser layouts (what validation's
    per-kernel table reports), or None."""
    m = _OLD_LOOSE.match(name)
    if m:
        return KernelName(m.group(1), m.group(2), m.group(3))
    m = _NEW_LOOSE.match(name)
    if m:
        return KernelName(m.group(1), m.group(2) or "", m.group(3) or "")
    return None
