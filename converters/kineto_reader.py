"""Streaming reader of PyTorch profiler (Kineto) Chrome-trace JSON.

The file is parsed incrementally with ijson (C backend when available): events are turned into
compact :class:`Event` records as they arrive, keeping only the fields the converter needs, so
memory stays well below the size of the JSON text.  Header objects (``distributedInfo``,
``deviceProperties``) are picked up wherever they appear in the file.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import IO, Any, Callable

import ijson

from xsim_trace.errors import FormatError
from xsim_trace.graph.bounds import MAX_WORLD_SIZE
from xsim_trace.io.json_input import GuardedReader, checked_us

CHUNK_BYTES = 1 << 18  # smaller chunks: fewer parsed-but-unreduced events alive at once
NS_PER_US = 1000

from xsim_trace.kineto_names import CPU_CATS, GPU_CATS, RUNTIME_CATS  # noqa: E402 - re-exported
KEPT_CATS = CPU_CATS | RUNTIME_CATS | GPU_CATS

#: runtime calls that neither launch GPU work nor order it: not kept (they are most of the
#: runtime events of a busy trace, e.g. cudaEventQuery polling)
IGNORED_RUNTIME = frozenset({
    "cudaEventQuery", "cudaPeekAtLastError", "cudaGetLastError", "cudaStreamIsCapturing", "cudaGetDevice",
    "cudaSetDevice", "cudaGetDeviceCount", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cudaFuncGetAttributes", "cudaFuncSetAttribute",
    "cudaDeviceGetAttribute", "cudaPointerGetAttributes", "cudaStreamGetPriority",
    "cudaDeviceGetStreamPriorityRange", "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaGetDeviceProperties",
    "cudaGetDeviceProperties_v2", "cudaThreadExchangeStreamCaptureMode", "cudaStreamGetCaptureInfo",
    "cudaStreamGetCaptureInfo_v2", "cudaGetSymbolAddress", "cudaEventCreate", "cudaEventCreateWithFlags",
    "cudaEventDestroy", "cuGetProcAddress", "cuDevicePrimaryCtxGetState", "cuCtxGetCurrent",
})

#: cpu-op name prefixes whose arguments (shapes, collective args) are kept
_COMM_OP_PREFIXES = ("nccl:", "c10d::", "record_param_comms", "gloo:")
#: argument keys of collectives (kernel or record_param_comms)
COLL_ARG_KEYS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "In msg size",
    "Out msg size",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "In split size",
    "Out split size",
    "Src Rank",
    "Dst Rank",
    "Rank",
    "Global rank start",
    "Global rank stride",
)
_SHAPE_KEYS = ("Input Dims", "Input type")


class Event:
    """One complete (``ph: "X"``) event, reduced to what conversion needs.  Times in integer ns."""

    __slots__ = ("idx", "cat", "name", "pid", "tid", "ts", "end", "corr", "ext", "rf", "stream", "args")

    def __init__(self, idx: int, cat: str, name: str, pid: Any, tid: Any, ts: int, end: int,
                 corr: int | None, ext: int | None, rf: int | None, stream: int | None,
                 args: dict[str, Any] | None) -> None:
        self.idx, self.cat, self.name, self.pid, self.tid = idx, cat, name, pid, tid
        self.ts, self.end, self.corr, self.ext, self.rf, self.stream, self.args = ts, end, corr, ext, rf, stream, args

    @property
    def dur(self) -> int:
        return self.end - self.ts

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Event({self.idx}, {self.cat}, {self.name[:40]!r}, ts={self.ts}, dur={self.dur})"


@dataclass(slots=True)
class KinetoTrace:
    """One Kineto file, reduced."""

    name: str
    events: list[Event]
    distributed: dict[str, Any] = field(default_factory=dict)
    device_names: list[str] = field(default_factory=list)
    total_events: int = 0  # every entry of traceEvents, kept or not

    @property
    def rank(self) -> int | None:
        r = self.distributed.get("rank")
        return int(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else None

    @property
    def world_size(self) -> int | None:
        w = self.distributed.get("world_size")
        return int(w) if isinstance(w, (int, float)) and not isinstance(w, bool) else None


def _to_ns(value: Any, idx: int, key: str, name: str) -> int:
    value = checked_us(value, key, name, idx)
    return int(round(value * NS_PER_US)) if not isinstance(value, int) else value * NS_PER_US


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _thread_id(value: Any, idx: int, key: str, name: str) -> Any:
    """A pid / tid: absent, text, or an int64 (an integral float becomes an int)."""
    if value is None or isinstance(value, str):
        return value
    n = _opt_int(value)
    if n is None:
        raise FormatError(f"{key!r} must be an integer or a string, found {str(value)[:40]}", file=name, event=idx)
    return n


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return value
    return None


class _Reducer:
    def __init__(self, name: str) -> None:
        self.name = name
        self.events: list[Event] = []
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
        ts = _to_ns(raw.get("ts"), idx, "ts", self.name)
        dur = _to_ns(raw.get("dur", 0), idx, "dur", self.name)
        if dur < 0:
            raise FormatError(f"event {idx}: negative 'dur'", file=self.name, event=idx)
        args = raw.get("args") or {}
        if not isinstance(args, dict):
            raise FormatError(f"event {idx}: 'args' is not an object", file=self.name, event=idx)
        kept: dict[str, Any] | None = None
        if cat in GPU_CATS:
            if "Collective name" in args or "bytes" in args:
                kept = {k: args[k] for k in (*COLL_ARG_KEYS, "bytes") if k in args}
        elif cat in CPU_CATS and name.startswith(_COMM_OP_PREFIXES):
            kept = {k: args[k] for k in (*COLL_ARG_KEYS, *_SHAPE_KEYS) if k in args}
        interned = self._intern.setdefault(name, sys.intern(name) if len(name) < 256 else name)
        stream = _opt_int(args.get("stream"))
        if stream is None and cat in GPU_CATS:
            stream = _opt_int(raw.get("tid"))
        small = self._small
        pid = _thread_id(raw.get("pid"), idx, "pid", self.name)
        tid = _thread_id(raw.get("tid"), idx, "tid", self.name)
        pid = small.setdefault(pid, pid) if isinstance(pid, (int, str)) else pid
        tid = small.setdefault(tid, tid) if isinstance(tid, (int, str)) else tid
        if stream is not None:
            stream = small.setdefault(stream, stream)
        self.events.append(Event(
            idx, sys.intern(cat), interned, pid, tid, ts, ts + dur,
            _opt_int(args.get("correlation")), _opt_int(args.get("External id")),
            _opt_int(args.get("Record function id")), stream, kept,
        ))


def read_kineto(stream: IO[bytes], name: str, progress: Callable[[int], None] | None = None) -> KinetoTrace:
    """Parse one Kineto JSON stream.  ``progress`` is called with the number of bytes consumed."""
    stream = GuardedReader(stream, name)
    reducer = _Reducer(name)
    header: dict[str, Any] = {}
    devices: list[Any] = []
    pending: list[Any] = []
    ev_sink: list[Any] = []
    events_coro = ijson.items_coro(_ListSink(ev_sink), "traceEvents.item", use_float=True)
    # header objects: each parser is dropped as soon as its object is complete
    headers = [
        (ijson.items_coro(_ListSink(pending), "distributedInfo", use_float=True), pending),
        (ijson.items_coro(_ListSink(devices), "deviceProperties", use_float=True), devices),
    ]
    coros = [events_coro] + [c for c, _ in headers]
    consumed = 0
    try:
        while True:
            chunk = stream.read(CHUNK_BYTES)
            if not chunk:
                break
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
    except ijson.JSONError as exc:
        raise FormatError(f"malformed JSON after event {reducer.count} ({exc})".replace("\n", " "),
                          file=name, offset=consumed, event=reducer.count) from None
    except (OSError, EOFError) as exc:
        raise FormatError(f"cannot read ({exc})", file=name, event=reducer.count) from None
    if reducer.count == 0:
        raise FormatError("no traceEvents: not a Kineto / Chrome trace JSON", file=name)
    if pending and isinstance(pending[0], dict):
        header = pending[0]
        for key in ("rank", "world_size"):
            _check_rank_field(header.get(key), key, name)
    device_list = devices[0] if devices and isinstance(devices[0], list) else []
    names = [str(d.get("name", "")) for d in device_list if isinstance(d, dict)]
    return KinetoTrace(name=name, events=reducer.events, distributed=header, device_names=names,
                       total_events=reducer.count)


def _check_rank_field(value: Any, key: str, name: str) -> None:
    """``distributedInfo.rank`` / ``world_size``: absent, or a whole number below MAX_WORLD_SIZE."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return  # not a number: ignored, as before (the rank then comes from the file name)
    lo = 1 if key == "world_size" else 0
    if not (isinstance(value, int) or value.is_integer()) or not lo <= value < MAX_WORLD_SIZE + lo:
        raise FormatError(f"{value!r} is not a {key.replace('_', ' ')} ({lo}..{MAX_WORLD_SIZE - 1 + lo})",
                          file=name, field=f"distributedInfo.{key}")


class _ListSink:
    """ijson coroutine target that appends every item to a list."""

    def __init__(self, out: list[Any]) -> None:
        self.out = out

    def send(self, value: Any) -> None:
        self.out.append(value)

    def close(self) -> None:  # pragma: no cover - protocol
        pass
