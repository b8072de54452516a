"""Atomic output sets: several files that must change together (a rank set, a replay's reports).

A writer puts the whole new set into a staging folder beside the targets (``<folder>/.xsim-set-*``),
then commits: it writes a journal (``.commit``: the files to move in, the old set's files to remove)
and only then moves the files into place.  A run killed before the journal leaves the old set
untouched (its staging folder is deleted later); a run killed after it is rolled forward by the next
:func:`recover` of that folder, which every writer and the rank-set reader call first.  So whoever
looks through xsim sees either the complete old set or the complete new one.

A staging folder in use is locked (``flock`` on its ``.lock``); recovery leaves locked ones alone,
so a reader never disturbs a live writer.  One staging folder per set; a single file needs only
:func:`xsim_trace.io.atomic.atomic_write`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from xsim_trace.errors import OutputError
from xsim_trace.io.atomic import _blocker

log = logging.getLogger(__name__)

STAGING_PREFIX = ".xsim-set-"
_LOCK = ".lock"
_JOURNAL = ".commit"
#: test hook: the committing process kills itself after this many moves (crash tests only)
CRASH_ENV = "XSIM_TEST_CRASH_AFTER_MOVES"


@dataclass(frozen=True)
class StagedSet:
    """Where a set's files are written (``staging``) and where they end up (``folder``)."""

    folder: Path
    staging: Path

    def path(self, name: str) -> Path:
        """The staged path of the output file ``name`` (write it here)."""
        return self.staging / name

    def final(self, staged: str | os.PathLike[str]) -> Path:
        """The final path of a staged file."""
        return self.folder / Path(staged).name


@contextlib.contextmanager
def output_set(folder: str | os.PathLike[str], owns: Callable[[str], bool] | None = None,
               label: str = "") -> Iterator[StagedSet]:
    """Stage a set of output files for ``folder``; on a clean exit commit them all at once.

    ``owns(name)`` says which files already in ``folder`` belong to the set: those the new set does
    not rewrite are removed at the commit (None: none are removed).  On an exception nothing in
    ``folder`` changes and the staging folder is deleted."""
    target = Path(folder)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output folder: {_blocker(target) or exc.strerror or exc}",
                          file=str(target)) from None
    try:
        recover(target)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{label}-" if label else STAGING_PREFIX, dir=target))
        lock = open(staging / _LOCK, "w")  # noqa: SIM115 - held for the life of the staging folder
    except OSError as exc:
        raise OutputError(f"cannot write the outputs here: {exc.strerror or exc}", file=str(target)) from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield StagedSet(target, staging)
        _commit(target, staging, owns)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        lock.close()


def _commit(folder: Path, staging: Path, owns: Callable[[str], bool] | None) -> None:
    files = sorted(n for n in os.listdir(staging) if n not in (_LOCK, _JOURNAL))
    for name in files:
        if (folder / name).is_dir():
            raise OutputError("cannot write the output: a folder has this name", file=str(folder / name))
    new = set(files)
    stale = sorted(n for n in os.listdir(folder)
                   if owns is not None and n not in new and not n.startswith(".") and owns(n))
    journal = staging / _JOURNAL
    tmp = staging / (_JOURNAL + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"files": files, "remove": stale}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, journal)
    except OSError as exc:
        raise OutputError(f"cannot commit the outputs: {exc.strerror or exc}", file=str(folder)) from None
    _fsync_dir(staging)
    _apply(folder, staging, files, stale)


def _apply(folder: Path, staging: Path, files: list[str], stale: list[str]) -> None:
    """Move the staged files in, remove the old set's leftovers, delete the staging folder
    (idempotent: a crash at any point is finished by running it again)."""
    crash_after = int(os.environ.get(CRASH_ENV, "-1"))
    for moved, name in enumerate(files):
        if moved == crash_after:
            os.kill(os.getpid(), 9)
        with contextlib.suppress(FileNotFoundError):  # moved before a crash
            os.replace(staging / name, folder / name)
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / name)
    _fsync_dir(folder)
    shutil.rmtree(staging, ignore_errors=True)


def recover(folder: str | os.PathLike[str]) -> int:
    """Finish or undo the interrupted commits in ``folder``: a staging folder with a journal is
    rolled forward, one without is deleted; staging folders of live writers are left alone.
    Returns how many were handled; a folder that cannot be changed (read-only) is skipped."""
    base = Path(folder)
    handled = 0
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(STAGING_PREFIX) and p.is_dir()]
    except OSError:
        return 0
    for staging in candidates:
        try:
            handled += _recover_one(base, staging)
        except OSError as exc:
            log.warning("could not clean up %s (%s)", staging, exc)
    return handled


def _recover_one(folder: Path, staging: Path) -> int:
    lock_path = staging / _LOCK
    with contextlib.ExitStack() as stack:
        if lock_path.exists():
            lock = stack.enter_context(open(lock_path, "a"))
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0  # a live writer
        journal = staging / _JOURNAL
        if journal.exists():
            spec = json.loads(journal.read_text(encoding="utf-8"))
            log.warning("finishing an interrupted write of %d file(s) in %s", len(spec["files"]), folder)
            _apply(folder, staging, list(spec["files"]), list(spec["remove"]))
        else:
            log.info("removing an unfinished output set %s", staging)
            shutil.rmtree(staging, ignore_errors=True)
    return 1


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
