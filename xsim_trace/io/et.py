"""Reading and writing single Chakra ``.et`` files (plain or gzip), streaming."""

from __future__ import annotations

import gzip
import logging
import os
from typing import IO, Callable, Iterable, Iterator

from google.protobuf.message import DecodeError

from xsim_trace.errors import FormatError
from xsim_trace.graph.model import GlobalMetadata, Node, Trace
from xsim_trace.io import codec
from xsim_trace.io.atomic import atomic_write
from xsim_trace.io.framing import RecordWriter, is_gzip_name, open_binary, iter_records
from xsim_trace.schema import pb

log = logging.getLogger(__name__)

Source = str | os.PathLike[str] | IO[bytes]
#: called with the number of nodes handled since the last call
Progress = Callable[[int], None]
_PROGRESS_EVERY = 10_000


def _parse(msg_type: type, payload: bytes, name: str, offset: int, what: str):
    msg = msg_type()
    try:
        msg.ParseFromString(payload)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise FormatError(f"corrupt {what} record ({exc})", file=name, offset=offset) from None
    return msg


def iter_messages(source: Source) -> Iterator[tuple[int, object]]:
    """Yield ``(offset, pb message)`` for the metadata record then each node: the raw fast path."""
    stream, name, owned = open_binary(source)
    try:
        records = iter_records(stream, name)
        first = next(records, None)
        if first is None:
            raise FormatError("empty file: no GlobalMetadata record", file=name, offset=0)
        yield first[0], _parse(pb.GlobalMetadata, first[1], name, first[0], "GlobalMetadata")
        node_type = pb.Node
        for offset, payload in records:
            msg = node_type()
            try:
                msg.ParseFromString(payload)
            except (DecodeError, RuntimeError, ValueError) as exc:
                raise FormatError(f"corrupt Node record ({exc})", file=name, offset=offset) from None
            yield offset, msg
    finally:
        if owned:
            stream.close()


def _iter_model(source: Source, progress: Progress | None) -> Iterator[GlobalMetadata | Node]:
    it = iter_messages(source)
    for offset, msg in it:
        yield codec.metadata_from_pb(msg)
        break
    count = 0
    node_from_pb = codec.node_from_pb
    for offset, msg in it:
        yield node_from_pb(msg)
        if progress is not None:
            count += 1
            if count == _PROGRESS_EVERY:
                progress(count)
                count = 0
    if progress is not None and count:
        progress(count)


def read_metadata(source: Source) -> GlobalMetadata:
    """The GlobalMetadata record alone (reads only the first record)."""
    for item in _iter_model(source, None):
        assert isinstance(item, GlobalMetadata)
        return item
    raise AssertionError("unreachable")


def iter_nodes(source: Source, progress: Progress | None = None) -> Iterator[Node]:
    """Stream the nodes of an ``.et`` file (the metadata record is skipped)."""
    it = _iter_model(source, progress)
    next(it)
    yield from it  # type: ignore[misc]


def read_et(source: Source, rank: int | None = None, progress: Progress | None = None) -> Trace:
    """Read a whole ``.et`` file into a :class:`Trace`."""
    it = _iter_model(source, progress)
    meta = next(it)
    assert isinstance(meta, GlobalMetadata)
    nodes = tuple(it)  # type: ignore[arg-type]
    name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else getattr(source, "name", None)
    return Trace(metadata=meta, nodes=nodes, rank=rank, source=name if isinstance(name, str) else None)


def encode_records(metadata: GlobalMetadata, nodes: Iterable[Node], out: IO[bytes], progress: Progress | None) -> int:
    writer = RecordWriter(out)
    writer.write(codec.metadata_to_pb(metadata).SerializeToString())
    node_to_pb = codec.node_to_pb
    count = 0
    pending = 0
    for node in nodes:
        writer.write(node_to_pb(node).SerializeToString())
        count += 1
        if progress is not None:
            pending += 1
            if pending == _PROGRESS_EVERY:
                progress(pending)
                pending = 0
    writer.flush()
    if progress is not None and pending:
        progress(pending)
    return count


def write_et(
    target: str | os.PathLike[str] | IO[bytes],
    trace: Trace | GlobalMetadata,
    nodes: Iterable[Node] | None = None,
    *,
    compress: bool | None = None,
    progress: Progress | None = None,
) -> int:
    """Write an ``.et`` file; returns the node count.

    ``trace`` is a :class:`Trace`, or a :class:`GlobalMetadata` with ``nodes`` an iterable (streamed,
    so a generator of millions of nodes never sits in memory).  Paths are written atomically;
    ``compress`` defaults to gzip when the path ends in ``.gz``.
    """
    if isinstance(trace, Trace):
        metadata, node_iter = trace.metadata, trace.nodes if nodes is None else nodes
    else:
        metadata, node_iter = trace, nodes if nodes is not None else ()
    if not isinstance(target, (str, os.PathLike)):
        return encode_records(metadata, node_iter, target, progress)
    gz = is_gzip_name(target) if compress is None else compress
    with atomic_write(target, "wb") as handle:
        if gz:
            with gzip.GzipFile(filename="", fileobj=handle, mode="wb", mtime=0) as zipped:
                return encode_records(metadata, node_iter, zipped, progress)  # type: ignore[arg-type]
        return encode_records(metadata, node_iter, handle, progress)
