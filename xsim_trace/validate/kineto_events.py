"""The Kineto (PyTorch profiler) captures validation measures: which files a spec names, and each
one's rank.  Reading is :mod:`xsim_trace.io.kineto`, the one reader the converters use too.

Inputs may be a ``.json`` / ``.json.gz`` file, a folder of rank files, a glob, or a ``.tar.gz`` of rank
files (members are streamed out of the archive, never extracted).
"""

from __future__ import annotations

import os
from pathlib import Path

from xsim_trace.errors import FormatError
from xsim_trace.graph.bounds import MAX_WORLD_SIZE
from xsim_trace.io.json_input import GuardedReader
from xsim_trace.io.kineto import KinetoTrace
from xsim_trace.io.sources import Source, resolve_inputs

_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")

#: one Kineto JSON (plain or gzip), possibly a member of an archive: the io package's input source
CaptureFile = Source


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


def capture_rank(trace: KinetoTrace, capture: CaptureFile, position: int | None = None) -> int:
    """``distributedInfo.rank``, else the number in the file name, else ``position`` (as xsim-convert)."""
    rank = trace.rank if trace.rank is not None else capture.rank_hint
    if rank is None:
        rank = position
    if rank is None:
        raise FormatError("cannot tell the rank (no distributedInfo.rank, no rank in the file name)",
                          file=capture.name)
    if not 0 <= rank < MAX_WORLD_SIZE:
        raise FormatError(f"rank {rank} (from the file name) is out of range (0..{MAX_WORLD_SIZE - 1})",
                          file=capture.name)
    return rank


def device_name(trace: KinetoTrace) -> str:
    """The first GPU name of ``deviceProperties`` ("" when none)."""
    return next((n for n in trace.device_names if n), "")
