"""Lossless conversion between protobuf messages and the typed graph model.

Kept: which oneof member of an attribute is set (zero values included), present-but-empty IOInfo,
unknown enum values (as plain ints), attribute order.  So model -> protobuf -> bytes reproduces
the bytes the model was read from.
"""

from __future__ import annotations

from typing import Any

from xsim_trace.errors import GraphError
from xsim_trace.graph.kinds import ATTR_KIND_BY_FIELD, AttrKind, NodeType
from xsim_trace.graph.model import Attr, GlobalMetadata, IOInfo, Node
from xsim_trace.schema import pb

_NODE_TYPES = {t.value: t for t in NodeType}
_NONE = AttrKind.NONE


def attr_from_pb(msg: Any) -> Attr:
    field = msg.WhichOneof("value")
    if field is None:
        return Attr(name=msg.name, kind=_NONE, value=None, doc_string=msg.doc_string)
    kind = ATTR_KIND_BY_FIELD[field]
    value = getattr(msg, field)
    if kind.is_list:
        value = tuple(value.values)
    return Attr(name=msg.name, kind=kind, value=value, doc_string=msg.doc_string)


def attr_to_pb(attr: Attr, msg: Any) -> None:
    msg.name = attr.name
    if attr.doc_string:
        msg.doc_string = attr.doc_string
    kind = attr.kind
    if kind is _NONE:
        return
    if kind.is_list:
        holder = getattr(msg, kind.value)
        holder.SetInParent()
        holder.values.extend(attr.value)
    else:
        setattr(msg, kind.value, attr.value)


#: interning of decoded attributes: real traces repeat the same (name, kind, value) triples a lot,
#: so equal attributes share one Attr object (immutable, so sharing is safe).  Bounded.
_ATTR_CACHE: dict[tuple, Attr] = {}
_ATTR_CACHE_MAX = 1 << 16
#: floats are not interned: -0.0 == 0.0 would merge values with different wire bytes
_UNCACHED = frozenset({"double_val", "double_list", "float_val", "float_list"})


def _attrs_from_pb(repeated: Any) -> tuple[Attr, ...]:
    out = []
    cache = _ATTR_CACHE
    for msg in repeated:
        field = msg.WhichOneof("value")
        if field is None or msg.doc_string or field in _UNCACHED:
            out.append(attr_from_pb(msg))
            continue
        value = getattr(msg, field)
        if field.endswith("_list"):
            value = tuple(value.values)
        key = (msg.name, field, value)
        try:
            attr = cache[key]
        except KeyError:
            attr = Attr(name=msg.name, kind=ATTR_KIND_BY_FIELD[field], value=value)
            if len(cache) >= _ATTR_CACHE_MAX:
                cache.clear()
            cache[key] = attr
        except TypeError:  # unhashable: cannot happen for scalars/tuples, kept for safety
            attr = Attr(name=msg.name, kind=ATTR_KIND_BY_FIELD[field], value=value)
        out.append(attr)
    return tuple(out)


def _io_from_pb(msg: Any) -> IOInfo:
    return IOInfo(values=msg.values, shapes=msg.shapes, types=msg.types)


def node_from_pb(msg: Any) -> Node:
    raw_type = msg.type
    return Node(
        id=msg.id,
        name=msg.name,
        type=_NODE_TYPES.get(raw_type, raw_type),
        ctrl_deps=tuple(msg.ctrl_deps),
        data_deps=tuple(msg.data_deps),
        start_time_micros=msg.start_time_micros,
        duration_micros=msg.duration_micros,
        inputs=_io_from_pb(msg.inputs) if msg.HasField("inputs") else None,
        outputs=_io_from_pb(msg.outputs) if msg.HasField("outputs") else None,
        attrs=_attrs_from_pb(msg.attr) if msg.attr else (),
    )


def _io_to_pb(info: IOInfo, msg: Any) -> None:
    msg.SetInParent()
    if info.values:
        msg.values = info.values
    if info.shapes:
        msg.shapes = info.shapes
    if info.types:
        msg.types = info.types


def node_to_pb(node: Node) -> Any:
    """The protobuf Node; a value its wire field cannot hold (an id above 2^64, an int64 attribute of
    2^70, text in an integer field) is a GraphError naming the node and field, not a crash."""
    try:
        return _node_to_pb(node)
    except (ValueError, TypeError, OverflowError) as exc:
        raise GraphError(f"cannot be written: {exc}", node=node.id, field=_bad_field(node)) from None


def _bad_field(node: Node) -> str | None:
    """The first field or attribute of ``node`` that protobuf refuses (for the message)."""
    for attr in node.attrs:
        try:
            attr_to_pb(attr, pb.Node().attr.add())
        except (ValueError, TypeError, OverflowError):
            return attr.name
    return None


def _node_to_pb(node: Node) -> Any:
    msg = pb.Node()
    msg.id = node.id
    if node.name:
        msg.name = node.name
    msg.type = int(node.type)
    if node.ctrl_deps:
        msg.ctrl_deps.extend(node.ctrl_deps)
    if node.data_deps:
        msg.data_deps.extend(node.data_deps)
    msg.start_time_micros = node.start_time_micros
    msg.duration_micros = node.duration_micros
    if node.inputs is not None:
        _io_to_pb(node.inputs, msg.inputs)
    if node.outputs is not None:
        _io_to_pb(node.outputs, msg.outputs)
    for attr in node.attrs:
        attr_to_pb(attr, msg.attr.add())
    return msg


def metadata_from_pb(msg: Any) -> GlobalMetadata:
    return GlobalMetadata(version=msg.version, attrs=tuple(attr_from_pb(a) for a in msg.attr))


def metadata_to_pb(meta: GlobalMetadata) -> Any:
    msg = pb.GlobalMetadata()
    if meta.version:
        msg.version = meta.version
    for attr in meta.attrs:
        attr_to_pb(attr, msg.attr.add())
    return msg
