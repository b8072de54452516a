"""What a trace may hold so that the replay engine can represent it: the boundary check of `.et` input.

The engine keeps node ids and times in int64, ranks and indices in int32, collective types in
int16, and converts transfer times from floats; a value outside these ranges used to crash deep
inside compilation (OverflowError) or, worse, wrap silently.  Every rule is stated here once:

- node id: an integer in ``0 .. MAX_NODE_ID`` (2^63 - 1);
- a node's duration (``duration_ns``, else ``duration_micros`` x 1000): ``0 .. MAX_DURATION_NS``
  (2^53 ns, about 104 days: exact in a float as well), and per rank at most ``MAX_TOTAL_NS`` in all;
- ``comm_size``: ``0 .. MAX_SIZE_BYTES`` (2^50 B, 1 PiB) per node, ``MAX_TOTAL_BYTES`` per rank;
- ranks (``comm_src``, ``comm_dst``, ``comm_root``, ``ring_order``): ``0 .. MAX_RANK`` (2^31 - 1);
- ``comm_type``: a Chakra CollectiveType value (0..9);
- ``stream``, ``tid``, ``comm_tag``: int64;
- integer fields hold integers (an integral finite float is accepted), never text, lists or inf.

:func:`node_problems` yields ``(field, message)`` for one node (``xsim trace check`` turns them
into problems); :func:`check_bounds` raises the first as a :class:`GraphError` (the replay entry
points call it before compiling).  A columnar decoder can apply :data:`INT_FIELDS` and
:func:`int_problem` to whole columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import NS_PER_US, Node, Trace

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
MAX_NODE_ID = INT64_MAX
MAX_RANK = (1 << 31) - 1
MAX_DURATION_NS = 1 << 53
MAX_DURATION_MICROS = MAX_DURATION_NS // NS_PER_US
MAX_TOTAL_NS = 1 << 60
MAX_SIZE_BYTES = 1 << 50
MAX_TOTAL_BYTES = 1 << 56
#: ranks of one rank set that a converter or generator builds (world groups are materialised)
MAX_WORLD_SIZE = 1 << 20
_COLLECTIVES = frozenset(int(c) for c in CollectiveType)
_COMM_TYPES = frozenset({NodeType.COMM_SEND, NodeType.COMM_RECV, NodeType.COMM_COLL})


@dataclass(frozen=True, slots=True)
class IntRange:
    """An inclusive integer range with the words that explain it."""

    lo: int
    hi: int
    what: str

    def problem(self, value: int) -> str | None:
        if self.lo <= value <= self.hi:
            return None
        return f"{value} is out of range ({self.what} must be in {self.lo}..{self.hi})"


#: integer attributes the engine reads, and what each may hold
INT_FIELDS: dict[str, IntRange] = {
    A.DURATION_NS: IntRange(0, MAX_DURATION_NS, "a duration in ns"),
    A.COMM_SIZE: IntRange(0, MAX_SIZE_BYTES, "a message size in bytes"),
    A.COMM_SRC: IntRange(0, MAX_RANK, "a rank"),
    A.COMM_DST: IntRange(0, MAX_RANK, "a rank"),
    A.COMM_ROOT: IntRange(0, MAX_RANK, "a rank"),
    A.COMM_TAG: IntRange(INT64_MIN, INT64_MAX, "a tag (int64)"),
    A.COMM_TYPE: IntRange(0, max(_COLLECTIVES), "a collective type"),
    A.STREAM: IntRange(INT64_MIN, INT64_MAX, "a stream (int64)"),
    A.THREAD: IntRange(INT64_MIN, INT64_MAX, "a thread id (int64)"),
}
#: integer-list attributes the engine reads
INT_LIST_FIELDS: dict[str, IntRange] = {A.RING_ORDER: IntRange(0, MAX_RANK, "a rank")}
NODE_ID_RANGE = IntRange(0, MAX_NODE_ID, "a node id")
DURATION_MICROS_RANGE = IntRange(0, MAX_DURATION_MICROS, "duration_micros")


def as_int(value: Any) -> int | None:
    """``value`` as an exact integer (a bool is 0 / 1, as the engine reads it), or None when it is not
    one (text, list, inf, nan, 2.5)."""
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def int_problem(name: str, value: Any, rule: IntRange) -> str | None:
    """Why ``value`` cannot be field ``name``, or None when it can."""
    n = as_int(value)
    if n is None:
        return f"{name} must be an integer, found {_show(value)}"
    why = rule.problem(n)
    return f"{name} {why}" if why else None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def node_problems(node: Node) -> Iterator[tuple[str, str]]:
    """``(field, message)`` for every value of ``node`` the engine cannot represent."""
    why = int_problem("id", node.id, NODE_ID_RANGE)
    if why:
        yield "id", why
    exact = None
    for attr in node.attrs:
        if attr.value is None:  # an attribute without a value is absent to the engine
            continue
        rule = INT_FIELDS.get(attr.name)
        if rule is not None:
            why = int_problem(attr.name, attr.value, rule)
            if why:
                yield attr.name, why
            elif attr.name == A.DURATION_NS:
                exact = attr.value
            elif attr.name == A.COMM_TYPE and node.type == NodeType.COMM_COLL and as_int(attr.value) not in _COLLECTIVES:
                yield attr.name, f"comm_type {attr.value} is not a Chakra collective type"
            continue
        rule = INT_LIST_FIELDS.get(attr.name)
        if rule is not None:
            if not isinstance(attr.value, (tuple, list)):
                yield attr.name, f"{attr.name} must be a list of integers, found {_show(attr.value)}"
                continue
            for v in attr.value:
                why = int_problem(attr.name, v, rule)
                if why:
                    yield attr.name, why
                    break
    if exact is None:
        why = int_problem("duration_micros", node.duration_micros, DURATION_MICROS_RANGE)
        if why:
            yield "duration_micros", why


def trace_problems(trace: Trace) -> Iterator[tuple[int | None, str, str]]:
    """``(node id, field, message)`` for every out-of-bounds value of ``trace``, then its totals."""
    total_ns = total_bytes = 0
    for node in trace.nodes:
        bad = False
        for fld, why in node_problems(node):
            bad = True
            yield node.id, fld, why
        if bad:
            continue
        total_ns += node.duration_ns
        if node.type in _COMM_TYPES:
            total_bytes += node.comm_size_bytes
    if total_ns > MAX_TOTAL_NS:
        yield None, A.DURATION_NS, f"the durations add up to {total_ns} ns, more than the {MAX_TOTAL_NS} ns a replay can hold"
    if total_bytes > MAX_TOTAL_BYTES:
        yield None, A.COMM_SIZE, f"the message sizes add up to {total_bytes} B, more than the {MAX_TOTAL_BYTES} B a replay can hold"


def check_bounds(traces: Mapping[int, Trace]) -> None:
    """Raise a GraphError naming file, rank, node and field for the first value the engine cannot
    represent (with how many more there are)."""
    first = None
    count = 0
    for rank in sorted(traces):
        trace = traces[rank]
        for node_id, fld, why in trace_problems(trace):
            count += 1
            if first is None:
                first = (trace.source, rank, node_id, fld, why)
    if first is not None:
        source, rank, node_id, fld, why = first
        more = f" (and {count - 1} more out-of-range values)" if count > 1 else ""
        raise GraphError(f"{why}{more}", file=source, rank=rank, node=node_id, field=fld)


def columns_out_of_bounds(cols: Any, rank_ptr: Any = None) -> str | None:
    """The first bound that decoded columns (:class:`xsim_trace.io.et_columns.NodeColumns`) break, checked
    column-wise, else None.  ``rank_ptr``: where each rank starts in a set of ranks decoded into one set of
    columns (default: one rank); the totals hold per rank.  A caller that gets a reason hands the files to
    the typed reader, whose :func:`check_bounds` names the first offending node and field."""
    import numpy as np

    if rank_ptr is None:
        rank_ptr = np.array([0, len(cols)])
    if len(cols) and int(cols.node_id.min()) < 0:
        return "node id"
    for name, rule in INT_FIELDS.items():
        if rule.lo <= -(1 << 63) and rule.hi >= (1 << 63) - 1:
            continue  # every int64 is in range
        values, has = cols.int_attr(name)
        if len(values) and rule.lo <= int(values.min()) and int(values.max()) <= rule.hi:
            continue  # every value in range, present or not
        if np.any(has & ((values < rule.lo) | (values > rule.hi))):
            return name
    rule = INT_LIST_FIELDS[A.RING_ORDER]
    for ring in cols.ring_order.values():
        if any(not isinstance(r, int) or rule.problem(r) for r in ring):
            return A.RING_ORDER
    exact, has_exact = cols.int_attr(A.DURATION_NS)
    micros = cols.duration_micros
    if np.any(~has_exact & (micros > MAX_DURATION_MICROS)):
        return "duration_micros"
    comm_type, has_type = cols.int_attr(A.COMM_TYPE)
    is_coll = (cols.node_type == int(NodeType.COMM_COLL)) & has_type
    if is_coll.any() and not np.isin(comm_type[is_coll], sorted(_COLLECTIVES)).all():
        return A.COMM_TYPE
    ns = np.where(has_exact, exact, micros * NS_PER_US)
    if max(_per_rank_sums(ns, rank_ptr), default=0) > MAX_TOTAL_NS:
        return "total duration"
    size, has_size = cols.int_attr(A.COMM_SIZE)
    is_comm = np.isin(cols.node_type, sorted(int(t) for t in _COMM_TYPES)) & has_size
    if max(_per_rank_sums(np.where(is_comm, size, 0), rank_ptr), default=0) > MAX_TOTAL_BYTES:
        return "total size"
    return None


def columns_in_bounds(cols: Any) -> bool:
    """Whether one rank's decoded columns are within the bounds above (:func:`columns_out_of_bounds`)."""
    return columns_out_of_bounds(cols) is None


def _per_rank_sums(values: Any, rank_ptr: Any) -> list[int]:
    """Exact per-rank sums of non-negative values below 2**53 (split in two parts so no int64 overflows)."""
    import numpy as np

    if len(values) and max(-int(values.min()), int(values.max())) * len(values) < 1 << 63:
        cs = np.zeros(len(values) + 1, np.int64)  # no partial sum can overflow: summed whole
        np.cumsum(values, out=cs[1:])
        return (cs[rank_ptr[1:]] - cs[rank_ptr[:-1]]).tolist()
    out = []
    for part in (values >> 20, values & ((1 << 20) - 1)):
        cs = np.concatenate([[0], np.cumsum(part)])
        out.append(cs[rank_ptr[1:]] - cs[rank_ptr[:-1]])
    return [int(hi) * (1 << 20) + int(lo) for hi, lo in zip(out[0].tolist(), out[1].tolist())]
