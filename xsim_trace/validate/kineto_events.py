"""Streaming access to the events of Kineto (PyTorch profiler) JSON captures, for the measured side.

Inputs may be a ``.json`` / ``.json.gz`` file, a folder of rank files, a glob, or a ``.tar.gz`` of rank
files (members are streamed out of the archive, never extracted).  Events are read with ijson one at
a time; only the fields the measurements need are kept, as integer nanoseconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Iterator

import ijson

from xsim_trace.errors import FormatError
from xsim_trace.graph.bounds import MAX_WORLD_SIZE
from xsim_trace.io.json_input import GuardedReader, checked_us
from xsim_trace.io.sources import Source, resolve_inputs
from xsim_trace.kineto_names import GPU_CATS, RUNTIME_CATS

_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")

#: Kineto categories of device-side activity
GPU_CATEGORIES = GPU_CATS
#: Kineto categories of host-side activity
RUNTIME_CATEGORIES = RUNTIME_CATS


#: one Kineto JSON (plain or gzip), possibly a member of an archive: the io package's input source
CaptureFile = Source


@dataclass(frozen=True, slots=True)
class Event:
    """The fields of one ``ph: "X"`` event that measurements use (times in integer ns)."""

    index: int
    cat: str
    name: str
    ts_ns: int
    dur_ns: int
    tid: int | str
    stream: int | None = None
    correlation: int | None = None
    args: dict | None = None  # only kept for NCCL kernels and ProfilerStep spans

    @property
    def end_ns(self) -> int:
        return self.ts_ns + self.dur_ns


@dataclass(frozen=True, slots=True)
class Header:
    rank: int | None
    world_size: int | None
    device_name: str


def us_to_ns(value: object, what: str = "ts", name: str = "", event: int | None = None) -> int:
    """Kineto microseconds (int, float or Decimal) to integer nanoseconds, rounded half-even;
    FormatError when not a finite number in range (:func:`xsim_trace.io.json_input.checked_us`)."""
    value = checked_us(value, what, name, event)
    if isinstance(value, Decimal):
        return int((value * 1000).to_integral_value())
    if isinstance(value, int):
        return value * 1000
    return int(round(Decimal(repr(value)) * 1000))


def resolve_captures(spec: str | os.PathLike[str]) -> list[CaptureFile]:
    """Kineto files named by ``spec`` (file, folder, glob or tarball), sorted by name; in a folder,
    glob or archive, files that are not Kineto captures (PyTorch ETs) are left out."""
    text = os.fspath(spec)
    try:
        sources = resolve_inputs(text)
    except FormatError as exc:
        raise FormatError(f"no such Kineto capture (file, folder, glob or .tar.gz): {exc.message}", file=text) from None
    if len(sources) == 1 and Path(text).is_file() and not text.endswith(_TAR_SUFFIXES):
        return sources
    return [s for s in sources if is_kineto(s)]


def is_kineto(capture: CaptureFile) -> bool:
    """Whether the file looks like a Kineto capture (not a PyTorch Execution Trace), by its first 64 KiB."""
    with GuardedReader(capture.open(), capture.name) as f:
        head = f.read(65536)
    return any(key in head for key in (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"'))


def read_header(capture: CaptureFile) -> Header:
    """Rank, world size and GPU name from ``distributedInfo`` / ``deviceProperties``."""
    rank = world = None
    device = ""
    try:
        with GuardedReader(capture.open(), capture.name) as f:
            for prefix, event, value in ijson.parse(f):
                if prefix == "distributedInfo.rank" and event == "number":
                    rank = _int_or_none(value)
                elif prefix == "distributedInfo.world_size" and event == "number":
                    world = _int_or_none(value)
                elif prefix == "deviceProperties.item.name" and event == "string" and not device:
                    device = value
                elif prefix == "traceEvents" and event == "start_array" and rank is not None and device:
                    break
    except ijson.JSONError as exc:
        raise FormatError(f"not valid JSON: {exc}", file=capture.name) from None
    if rank is None:
        rank = capture.rank_hint
    if rank is not None and not 0 <= rank < MAX_WORLD_SIZE or world is not None and not 0 < world <= MAX_WORLD_SIZE:
        raise FormatError(f"rank {rank} / world size {world} out of range (at most {MAX_WORLD_SIZE} ranks)",
                          file=capture.name, field="distributedInfo")
    return Header(rank=rank, world_size=world, device_name=device)


def _int_or_none(value: object) -> int | None:
    """An integral number (int, integral float / Decimal / text) within int64, else None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = Decimal(value.strip()) if isinstance(value, str) else Decimal(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, ArithmeticError):
        return None
    if not number.is_finite() or number != number.to_integral_value() or abs(number) >= 1 << 63:
        return None
    return int(number)


def iter_events(capture: CaptureFile) -> Iterator[Event]:
    """Every complete (``ph: "X"``) event of ``capture``, in file order, streamed."""
    try:
        with GuardedReader(capture.open(), capture.name) as f:
            for index, raw in enumerate(ijson.items(f, "traceEvents.item")):
                if not isinstance(raw, dict) or raw.get("ph") != "X":
                    continue
                ts_ns = us_to_ns(raw.get("ts"), "ts", capture.name, index)
                dur_ns = us_to_ns(raw.get("dur", 0), "dur", capture.name, index)
                if dur_ns < 0:
                    raise FormatError("negative 'dur'", file=capture.name, event=index)
                cat = str(raw.get("cat", ""))
                name = str(raw.get("name", ""))
                args = raw.get("args") or {}
                if not isinstance(args, dict):
                    raise FormatError("'args' is not an object", file=capture.name, event=index)
                tid = raw.get("tid", 0)
                if not isinstance(tid, str):
                    tid = _int_or_none(tid)
                    if tid is None:
                        raise FormatError("'tid' must be an integer or a string", file=capture.name, event=index)
                keep_args = None
                if name.startswith("ProfilerStep#") or (cat == "kernel" and "nccl" in name.lower()):
                    keep_args = {k: (float(v) if isinstance(v, Decimal) else v) for k, v in args.items()}
                yield Event(
                    index=index,
                    cat=cat,
                    name=name,
                    ts_ns=ts_ns,
                    dur_ns=dur_ns,
                    tid=tid,
                    stream=_int_or_none(args.get("stream")),
                    correlation=_int_or_none(args.get("correlation")),
                    args=keep_args,
                )
    except ijson.JSONError as exc:
        raise FormatError(f"not valid JSON: {exc}", file=capture.name) from None
