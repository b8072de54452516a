"""The one reader of PyTorch profiler (Kineto) Chrome-trace JSON, used by the converters (Kineto ->
Chakra) and by validation (the measured side).

A file is parsed once, incrementally, with ijson (C backend when available): each complete
(``ph: "X"``) event of a kept category becomes a frozen :class:`KinetoEvent` as it arrives, holding only
what the consumers need (times in integer ns, stream, correlation, the collective and shape args of
communication work), so memory stays well below the size of the JSON text.  The header objects
(``distributedInfo``, ``deviceProperties``) are picked up in the same pass wherever they appear.

Every value is checked at this boundary: decompression errors and nesting depth
(:mod:`xsim_trace.io.json_input`), finite in-range times, int64 ids, rank and world size; a bad
value is a one-line :class:`FormatError` naming the file, the event and the field.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, Any, Callable, Mapping

import ijson

from xsim_trace.errors import FormatError
from xsim_trace.graph.bounds import MAX_WORLD_SIZE
from xsim_trace.io.json_input import GuardedReader, checked_us
from xsim_trace.io.sources import Source
from xsim_trace.kineto_names import (
    COLL_ARG_KEYS,
    COMM_OP_PREFIXES,
    CPU_CATS,
    GPU_CATS,
    IGNORED_RUNTIME,
    KEPT_CATS,
    RUNTIME_CATS,
    SHAPE_ARG_KEYS,
)
from xsim_trace.nccl_names import is_nccl_kernel

CHUNK_BYTES = 1 << 18  # smaller chunks: fewer parsed-but-unreduced events alive at once
NS_PER_US = 1000
_INT64 = (-(1 << 63), (1 << 63) - 1)
#: relative error bound of a parsed double times 1000 (two roundings, with slack)
_FLOAT_SLACK = 2.0 ** -50


@dataclass(frozen=True, slots=True)
class KinetoEvent:
    """One complete (``ph: "X"``) event, reduced to what conversion and validation need."""

    index: int  # position in traceEvents
    cat: str
    name: str
    pid: int | str | None
    tid: int | str | None
    ts_ns: int
    end_ns: int
    correlation: int | None
    external_id: int | None
    record_function_id: int | None
    stream: int | None  # args.stream; for device work without one, the tid
    args: Mapping[str, Any] | None  # collective / shape args of communication work only

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.ts_ns


def is_nccl_work(event: KinetoEvent) -> bool:
    """Whether the event is an NCCL kernel: communication to the converters and to validation alike."""
    return event.cat == "kernel" and is_nccl_kernel(event.name)


@dataclass(frozen=True, slots=True)
class KinetoTrace:
    """One Kineto file, reduced.  ``events`` is a list so a consumer may free it (``events.clear()``)."""

    name: str
    events: list[KinetoEvent]
    rank: int | None = None  # distributedInfo.rank
    world_size: int | None = None  # distributedInfo.world_size
    device_names: tuple[str, ...] = ()  # deviceProperties[*].name
    total_events: int = 0  # every entry of traceEvents, kept or not


def us_to_ns(value: Any, what: str = "ts", name: str = "", event: int | None = None) -> int:
    """Kineto microseconds (int, float, Decimal or numeric text) to integer ns, rounded half-even on the
    decimal value written in the file (a float is taken as its shortest repr, which is the text for up to
    15 significant digits); FormatError when not a finite number in range (:func:`checked_us`)."""
    value = checked_us(value, what, name, event)
    if isinstance(value, int):
        return value * NS_PER_US
    if isinstance(value, float):
        scaled = value * NS_PER_US
        nearest = round(scaled)
        if 0.5 - abs(scaled - nearest) > _FLOAT_SLACK * abs(scaled) + 1e-9:
            return int(nearest)  # far from a tie: the double's rounding is the decimal's
        value = Decimal(repr(value))
    return int((value * NS_PER_US).to_integral_value())


def opt_int64(value: Any) -> int | None:
    """An int64 (an integral float becomes an int), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return value
    return None


def _thread_id(value: Any, idx: int, key: str, name: str) -> int | str | None:
    """A pid / tid: absent, text, or an int64."""
    if value is None or isinstance(value, str):
        return value
    n = opt_int64(value)
    if n is None:
        raise FormatError(f"{key!r} must be an integer or a string, found {str(value)[:40]}", file=name, event=idx)
    return n


def _kept_args(cat: str, name: str, args: Mapping[str, Any]) -> dict[str, Any] | None:
    """The args of communication work: the collective args of device work that has them (or is an
    NCCL kernel), the collective and shape args of communication ops."""
    if cat in GPU_CATS:
        if "Collective name" in args or "bytes" in args or cat == "kernel" and is_nccl_kernel(name):
            return {k: args[k] for k in (*COLL_ARG_KEYS, "bytes") if k in args}
    elif cat in CPU_CATS and name.startswith(COMM_OP_PREFIXES):
        return {k: args[k] for k in (*COLL_ARG_KEYS, *SHAPE_ARG_KEYS) if k in args}
    return None


class _Reducer:
    """Turns raw event objects into :class:`KinetoEvent` records (sharing repeated strings and ids)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.events: list[KinetoEvent] = []
        self.count = 0
        self._intern: dict[str, str] = {}
        self._small: dict = {}  # pids, tids, streams: one object each

    def add(self, raw: Any) -> None:
        idx = self.count
        self.count += 1
        if not isinstance(raw, dict):
            raise FormatError(f"event {idx} is not a JSON object", file=self.name, event=idx)
        if raw.get("ph") != "X":
            return
        cat = raw.get("cat")
        if not isinstance(cat, str) or cat not in KEPT_CATS:
            return
        name = raw.get("name")
        if not isinstance(name, str):
            raise FormatError(f"event {idx}: 'name' is missing or not a string", file=self.name, event=idx)
        if cat == "python_function" and not name.startswith("nn.Module:"):
            return
        if cat in RUNTIME_CATS and name in IGNORED_RUNTIME:
            return
        self.events.append(self._event(idx, cat, name, raw))

    def _event(self, idx: int, cat: str, name: str, raw: dict) -> KinetoEvent:
        ts = us_to_ns(raw.get("ts"), "ts", self.name, idx)
        dur = us_to_ns(raw.get("dur", 0), "dur", self.name, idx)
        if dur < 0:
            raise FormatError(f"event {idx}: negative 'dur'", file=self.name, event=idx)
        args = raw.get("args") or {}
        if not isinstance(args, dict):
            raise FormatError(f"event {idx}: 'args' is not an object", file=self.name, event=idx)
        stream = opt_int64(args.get("stream"))
        if stream is None and cat in GPU_CATS:
            stream = opt_int64(raw.get("tid"))
        small = self._small
        pid = _thread_id(raw.get("pid"), idx, "pid", self.name)
        tid = _thread_id(raw.get("tid"), idx, "tid", self.name)
        return KinetoEvent(
            index=idx,
            cat=sys.intern(cat),
            name=self._intern.setdefault(name, sys.intern(name) if len(name) < 256 else name),
            pid=small.setdefault(pid, pid),
            tid=small.setdefault(tid, tid),
            ts_ns=ts,
            end_ns=ts + dur,
            correlation=opt_int64(args.get("correlation")),
            external_id=opt_int64(args.get("External id")),
            record_function_id=opt_int64(args.get("Record function id")),
            stream=small.setdefault(stream, stream),
            args=_kept_args(cat, name, args),
        )


class _ListSink:
    """ijson coroutine target that appends every item to a list."""

    def __init__(self, out: list[Any]) -> None:
        self.out = out

    def send(self, value: Any) -> None:
        self.out.append(value)

    def close(self) -> None:  # pragma: no cover - protocol
        pass


def read_kineto(stream: IO[bytes], name: str, progress: Callable[[int], None] | None = None) -> KinetoTrace:
    """Parse one Kineto JSON stream.  ``progress`` is called with the number of bytes consumed."""
    reader = GuardedReader(stream, name)
    reducer = _Reducer(name)
    dist: list[Any] = []
    devices: list[Any] = []
    ev_sink: list[Any] = []
    events_coro = ijson.items_coro(_ListSink(ev_sink), "traceEvents.item", use_float=True)
    # header objects: each parser is dropped as soon as its object is complete
    headers = [
        (ijson.items_coro(_ListSink(dist), "distributedInfo", use_float=True), dist),
        (ijson.items_coro(_ListSink(devices), "deviceProperties", use_float=True), devices),
    ]
    coros = [events_coro] + [c for c, _ in headers]
    consumed = 0
    try:
        while chunk := reader.read(CHUNK_BYTES):
            consumed += len(chunk)
            for coro in coros:
                coro.send(chunk)
            if headers and any(sink for _, sink in headers):
                headers = [(c, sink) for c, sink in headers if not sink]
                coros = [events_coro] + [c for c, _ in headers]
            for raw in ev_sink:
                reducer.add(raw)
            ev_sink.clear()
            if progress is not None:
                progress(len(chunk))
        for coro in coros:
            coro.close()
        for raw in ev_sink:
            reducer.add(raw)
    except UnicodeDecodeError as exc:  # ijson decodes strings as UTF-8 as it goes
        raise FormatError(f"not UTF-8 text ({exc.reason} at byte 0x{exc.object[exc.start]:02x})", file=name) from None
    except ijson.JSONError as exc:
        detail = " ".join(str(exc).split())  # yajl's message spans lines, with a caret drawing
        raise FormatError(f"malformed JSON after event {reducer.count} ({detail})",
                          file=name, offset=consumed, event=reducer.count) from None
    except (OSError, EOFError) as exc:
        raise FormatError(f"cannot read ({exc})", file=name, event=reducer.count) from None
    if reducer.count == 0:
        raise FormatError("no traceEvents: not a Kineto / Chrome trace JSON", file=name)
    header = dist[0] if dist and isinstance(dist[0], dict) else {}
    device_list = devices[0] if devices and isinstance(devices[0], list) else []
    return KinetoTrace(
        name=name,
        events=reducer.events,
        rank=_rank_field(header.get("rank"), "rank", name),
        world_size=_rank_field(header.get("world_size"), "world_size", name),
        device_names=tuple(str(d.get("name", "")) for d in device_list if isinstance(d, dict)),
        total_events=reducer.count,
    )


def read_capture(source: Source, progress: Callable[[int], None] | None = None) -> KinetoTrace:
    """Read one Kineto file (:class:`xsim_trace.io.sources.Source`: plain, gzip or an archive member)."""
    with source.open() as handle:
        return read_kineto(handle, source.name, progress)


def _rank_field(value: Any, key: str, name: str) -> int | None:
    """``distributedInfo.rank`` / ``world_size``: absent or not a number (None: the rank then comes from
    the file name), else a whole number in range."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    lo = 1 if key == "world_size" else 0
    if not (isinstance(value, int) or math.isfinite(value) and value.is_integer()) \
            or not lo <= value < MAX_WORLD_SIZE + lo:
        raise FormatError(f"{value!r} is not a {key.replace('_', ' ')} ({lo}..{MAX_WORLD_SIZE - 1 + lo})",
                          file=name, field=f"distributedInfo.{key}")
    return int(value)
