"""The typed in-memory model of a Chakra execution trace.

Frozen dataclasses mirror the protobuf messages one to one, so conversion is lossless (the oneof
member of each attribute, present-but-empty IOInfo, unknown enum values are all kept).  Protobuf
objects never leave :mod:`xsim_trace.io`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import AttrKind, CollectiveType, NodeType

NS_PER_US = 1000


@dataclass(frozen=True, slots=True)
class Attr:
    """One ``AttributeProto``: a name, the oneof member that is set, and its value.

    Scalars are Python ``int`` / ``float`` / ``bool`` / ``str`` / ``bytes``; lists are tuples.
    """

    name: str
    kind: AttrKind
    value: Any = None
    doc_string: str = ""


@dataclass(frozen=True, slots=True)
class IOInfo:
    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclass(frozen=True, slots=True)
class Node:
    """One ``Node`` message.  ``type`` is a :class:`NodeType`, or a plain int for values unknown to
    the schema (kept so checks can report them and writers reproduce them)."""

    id: int
    name: str = ""
    type: NodeType | int = NodeType.INVALID
    ctrl_deps: tuple[int, ...] = ()
    data_deps: tuple[int, ...] = ()
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attrs: tuple[Attr, ...] = ()

    # -- attribute access -----------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        """Value of the first attribute called ``name``, else ``default``."""
        for a in self.attrs:
            if a.name == name:
                return a.value
        return default

    def has_attr(self, name: str) -> bool:
        return any(a.name == name for a in self.attrs)

    def with_attrs(self, **values: Any) -> "Node":
        """A copy with attributes set (replaced in place if present, else appended)."""
        return replace(self, attrs=set_attrs(self.attrs, values))

    @property
    def deps(self) -> tuple[int, ...]:
        """Data deps then control deps, without repeats, in their order."""
        if not self.ctrl_deps:
            return self.data_deps
        seen = dict.fromkeys(self.data_deps)
        seen.update(dict.fromkeys(self.ctrl_deps))
        return tuple(seen)

    @property
    def duration_ns(self) -> int:
        """Exact ``duration_ns`` attribute when present, else ``duration_micros`` in ns."""
        exact = self.attr(A.DURATION_NS)
        if exact is not None:
            return int(exact)
        return int(self.duration_micros) * NS_PER_US

    @property
    def is_cpu_op(self) -> bool:
        return bool(self.attr(A.IS_CPU_OP, False))

    @property
    def is_comm(self) -> bool:
        return self.type in (NodeType.COMM_SEND, NodeType.COMM_RECV, NodeType.COMM_COLL)

    @property
    def comm_type(self) -> CollectiveType | None:
        v = self.attr(A.COMM_TYPE)
        if v is None:
            return None
        try:
            return CollectiveType(v)
        except ValueError:
            return None

    @property
    def comm_size_bytes(self) -> int:
        return int(self.attr(A.COMM_SIZE, 0) or 0)

    @property
    def comm_src(self) -> int | None:
        return self.attr(A.COMM_SRC)

    @property
    def comm_dst(self) -> int | None:
        return self.attr(A.COMM_DST)

    @property
    def comm_tag(self) -> int | None:
        return self.attr(A.COMM_TAG)

    @property
    def pg_name(self) -> str:
        return str(self.attr(A.PG_NAME, "") or "")


@dataclass(frozen=True, slots=True)
class GlobalMetadata:
    version: str = ""
    attrs: tuple[Attr, ...] = ()

    def attr(self, name: str, default: Any = None) -> Any:
        for a in self.attrs:
            if a.name == name:
                return a.value
        return default


@dataclass(frozen=True, slots=True)
class Trace:
    """One rank's execution graph: the metadata record and the nodes in file order."""

    metadata: GlobalMetadata
    nodes: tuple[Node, ...]
    rank: int | None = None
    source: str | None = field(default=None, compare=False)  # the file it came from, for messages

    def __len__(self) -> int:
        return len(self.nodes)

    def by_id(self) -> dict[int, Node]:
        return {n.id: n for n in self.nodes}

    @property
    def measured_step_ns(self) -> int | None:
        v = self.metadata.attr(A.META_MEASURED_STEP_NS)
        return int(v) if v is not None else None


# -- builders --------------------------------------------------------------------------------------
def _infer_kind(name: str, value: Any) -> AttrKind:
    kind = A.KIND_OF.get(name)
    if kind is not None:
        return kind
    if isinstance(value, bool):
        return AttrKind.BOOL
    if isinstance(value, int):
        return AttrKind.INT64
    if isinstance(value, float):
        return AttrKind.DOUBLE
    if isinstance(value, str):
        return AttrKind.STRING
    if isinstance(value, bytes):
        return AttrKind.BYTES
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, bool) for v in value) and value:
            return AttrKind.BOOL_LIST
        if all(isinstance(v, int) for v in value):
            return AttrKind.INT64_LIST
        if all(isinstance(v, (int, float)) for v in value):
            return AttrKind.DOUBLE_LIST
        if all(isinstance(v, str) for v in value):
            return AttrKind.STRING_LIST
    raise GraphError(f"cannot infer an attribute kind for value {value!r}", field=name)


def make_attr(name: str, value: Any, kind: AttrKind | None = None) -> Attr:
    """An :class:`Attr` with the conventional wire kind for ``name`` (see ``attrs.KIND_OF``)."""
    kind = kind or _infer_kind(name, value)
    if kind.is_list:
        value = tuple(value)
    return Attr(name=name, kind=kind, value=value)


def set_attrs(existing: Iterable[Attr], values: Mapping[str, Any]) -> tuple[Attr, ...]:
    out = list(existing)
    index = {a.name: i for i, a in enumerate(out)}
    for name, value in values.items():
        attr = make_attr(name, value)
        if name in index:
            out[index[name]] = attr
        else:
            index[name] = len(out)
            out.append(attr)
    return tuple(out)


def make_node(
    node_id: int,
    name: str,
    node_type: NodeType,
    *,
    data_deps: Iterable[int] = (),
    ctrl_deps: Iterable[int] = (),
    duration_micros: int = 0,
    start_time_micros: int = 0,
    **attributes: Any,
) -> Node:
    """Convenience constructor: keyword attributes become :class:`Attr` with conventional kinds."""
    return Node(
        id=node_id,
        name=name,
        type=node_type,
        data_deps=tuple(data_deps),
        ctrl_deps=tuple(ctrl_deps),
        start_time_micros=start_time_micros,
        duration_micros=duration_micros,
        attrs=tuple(make_attr(k, v) for k, v in attributes.items()),
    )


def make_metadata(version: str = "0.0.4", **attributes: Any) -> GlobalMetadata:
    return GlobalMetadata(version=version, attrs=tuple(make_attr(k, v) for k, v in attributes.items()))


def comm_groups_to_json(groups: Mapping[str, Iterable[int]]) -> str:
    """Comm groups as Chakra/ASTRA-sim JSON: ``{"<id>": [ranks...]}``, keys in numeric-aware order."""

    def key(k: str) -> tuple[int, Any]:
        return (0, int(k)) if k.isdigit() else (1, k)

    return json.dumps({k: sorted(int(r) for r in groups[k]) for k in sorted(groups, key=key)})


def world_pg_name(pg_name: str, comm_groups: Mapping[str, Any]) -> str:
    """The process-group key a collective is matched under: "" (no group) and "0" (ASTRA-sim's world)
    both name the world, so "" joins "0" unless the comm groups define "" or give "0" to a subgroup
    (then the two stay apart).  Replay and ``xsim trace check`` match collectives by this key."""
    if pg_name == "" and "" not in comm_groups and "0" not in comm_groups:
        return "0"
    return pg_name
