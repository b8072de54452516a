"""Atomic output files: write to a temporary file beside the target, rename on success.

A failure (exception, interrupt) leaves neither a partial target nor the temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from xsim_trace.errors import OutputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file for writing; on clean exit it replaces ``path`` atomically."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', not {mode!r}")
    target = Path(path)
    if target.is_dir():
        raise OutputError("cannot write the output: a folder has this name", file=str(target))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output folder: {_blocker(target.parent) or exc.strerror or exc}",
                          file=str(target)) from None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(f"cannot write in the output folder: {exc.strerror or exc}", file=str(target)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual permissions
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise OutputError(f"cannot write the output: {exc.strerror or exc}", file=str(target)) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def check_output_folder(path: str | os.PathLike[str]) -> None:
    """Refuse, before any work, an output folder that cannot be made: ``path`` or an ancestor exists
    and is not a folder.  Creates nothing (a run that fails later leaves no empty folder)."""
    folder = Path(path)
    blocker = _blocker(folder)
    if blocker:
        raise OutputError(f"cannot create the output folder: {blocker}", file=str(folder))


def _blocker(folder: Path) -> str | None:
    """Why ``folder`` cannot be made when an ancestor (or itself) exists but is not a folder."""
    for p in (folder, *folder.parents):
        if p.exists():
            return f"{p} exists and is not a folder" if not p.is_dir() else None
    return None
