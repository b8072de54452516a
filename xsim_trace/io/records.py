"""Pre-encoded ``.et`` records: encode nodes once, re-encode only the attributes that change.

For writers that emit many files sharing most of their nodes (the workload generator's rank
templates): a record is the framed bytes :func:`xsim_trace.io.write_et` would write for the same
node, so a file assembled from these pieces is byte-identical to ``write_et`` of the same nodes.
Protobuf stays inside :mod:`xsim_trace.io`.
"""

from __future__ import annotations

import gzip
import os
from typing import Any, Iterable, Sequence

from xsim_trace.errors import GraphError
from xsim_trace.graph.model import GlobalMetadata, Node
from xsim_trace.io import codec
from xsim_trace.io.atomic import atomic_write
from xsim_trace.io.framing import frame

#: bytes joined per write call when assembling a file from pieces
_WRITE_BATCH_BYTES = 1 << 20


def node_record(node: Node) -> bytes:
    """The framed record of one node, as ``write_et`` writes it."""
    return frame(codec.node_to_pb(node).SerializeToString())


def metadata_record(metadata: GlobalMetadata) -> bytes:
    """The framed GlobalMetadata record, as ``write_et`` writes it."""
    return frame(codec.metadata_to_pb(metadata).SerializeToString())


class NodePatch:
    """A node whose named attributes take other values per file.

    ``record(values)`` gives the framed record of the node with ``names[i]`` set to ``values[i]``
    (same wire kind as in the template node): the protobuf message is built once and only those
    fields are rewritten.  The last result is kept, so consecutive files with the same values
    (ranks of one TP group sharing a process group) cost a tuple comparison.
    """

    __slots__ = ("_msg", "_targets", "_last_values", "_last_record")

    def __init__(self, node: Node, names: Sequence[str]) -> None:
        self._msg = codec.node_to_pb(node)
        targets = []
        for name in names:
            index = next((i for i, a in enumerate(node.attrs) if a.name == name), None)
            if index is None:
                raise GraphError("no such attribute to patch", node=node.id, field=name)
            kind = node.attrs[index].kind
            if kind.is_list or not kind.value:
                raise GraphError(f"only scalar attributes can be patched, found {kind.name}", node=node.id, field=name)
            targets.append((self._msg.attr[index], kind.value))
        self._targets = tuple(targets)
        self._last_values: tuple[Any, ...] | None = None
        self._last_record = b""

    def record(self, values: tuple[Any, ...]) -> bytes:
        if values == self._last_values:
            return self._last_record
        for (attr_msg, field), value in zip(self._targets, values):
            setattr(attr_msg, field, value)
        out = frame(self._msg.SerializeToString())
        self._last_values, self._last_record = values, out
        return out


def write_record_file(target: str | os.PathLike[str], records: Iterable[bytes], *, compress: bool = False) -> int:
    """Write pre-framed records (metadata first) to ``target`` atomically; returns bytes written
    (uncompressed).  gzip output matches ``write_et(..., compress=True)``."""
    total = 0
    with atomic_write(target, "wb") as handle:
        sink: Any = handle
        zipped = gzip.GzipFile(filename="", fileobj=handle, mode="wb", mtime=0) if compress else None
        if zipped is not None:
            sink = zipped
        try:
            batch: list[bytes] = []
            size = 0
            for piece in records:
                batch.append(piece)
                size += len(piece)
                if size >= _WRITE_BATCH_BYTES:
                    sink.write(b"".join(batch))
                    total += size
                    batch.clear()
                    size = 0
            if batch:
                sink.write(b"".join(batch))
                total += size
        finally:
            if zipped is not None:
                zipped.close()
    return total
