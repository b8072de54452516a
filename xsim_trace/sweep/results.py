"""``results.jsonl``: one JSON object per finished run, appended as runs finish.

The file is the sweep's resumable state, so it is append-only: each record is written with a
single ``write`` of one line, flushed and fsync'ed.  A run killed mid-write can leave at most a
torn last line; :func:`read_results` ignores it (and :class:`ResultLog` cuts it off before
appending), so a restart simply runs that combination again.  A record: ``key``, ``runner``,
``params``, ``status`` (``ok`` | ``error``), ``result`` or ``error``, ``wall_s``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from xsim_trace.errors import FormatError

log = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"


def _scan(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """Records by key (a later record of a key replaces an earlier one) and the byte length of
    the intact prefix of the file."""
    records: dict[str, dict[str, Any]] = {}
    good = 0
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    lineno = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        lineno += 1
        if end < 0:  # torn tail: no newline
            log.warning("%s: ignoring a torn last line (%d bytes)", path, len(data) - pos)
            break
        line = data[pos:end]
        pos = end + 1
        if not line.strip():
            good = pos
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if pos >= len(data):
                log.warning("%s: ignoring a torn last line", path)
                break
            raise FormatError(f"line {lineno} is not JSON", file=str(path)) from None
        if not isinstance(rec, dict) or not isinstance(rec.get("key"), str) or "status" not in rec:
            raise FormatError(f"line {lineno} is not a sweep record (key, status)", file=str(path))
        records[rec["key"]] = rec
        good = pos
    return records, good


def read_results(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        return {}
    return _scan(p)[0]


class ResultLog:
    """Append-only writer of ``results.jsonl`` (cuts a torn tail off first)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.existing: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            self.existing, good = _scan(self.path)
            if good < self.path.stat().st_size:
                with open(self.path, "r+b") as f:
                    f.truncate(good)
        self._f = open(self.path, "ab")

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        self._f.write(line.encode())
        self._f.flush()
        os.fsync(self._f.fileno())

    def fileno(self) -> int:
        return self._f.fileno()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
