"""Per-rank trace sets: ``<prefix>.<rank>.et`` (or ``.et.gz``) files plus a comm-group JSON.

The comm-group file is ``<prefix>.comm_groups.json`` with ``{"<pg id>": [ranks...]}``, the form
ASTRA-sim's ``--comm-group-configuration`` reads.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

from xsim_trace.errors import FormatError, GraphError
from xsim_trace.graph.model import Trace, comm_groups_to_json
from xsim_trace.io.atomic import atomic_write
from xsim_trace.io.et import Progress, read_et, write_et

COMM_GROUPS_SUFFIX = ".comm_groups.json"
_RANK_FILE = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.et(?:\.gz)?$")


@dataclass(frozen=True)
class RankSet:
    """All ranks of one workload."""

    traces: dict[int, Trace]
    comm_groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    prefix: str = ""

    @property
    def ranks(self) -> list[int]:
        return sorted(self.traces)

    @property
    def world_size(self) -> int:
        return len(self.traces)


def find_rank_files(prefix_or_dir: str | os.PathLike[str]) -> tuple[str, dict[int, Path]]:
    """Resolve a prefix (``out/dlrm`` for ``out/dlrm.0.et`` ...), a directory holding one rank set,
    or a single rank file, to ``(prefix, {rank: path})``.

    Raises FormatError when nothing matches, when a directory holds several prefixes, or when ranks
    are missing from 0..N-1.
    """
    p = Path(prefix_or_dir)
    if p.is_dir():
        stems: dict[str, dict[int, Path]] = {}
        for child in sorted(p.iterdir()):
            m = _RANK_FILE.match(child.name)
            if m:
                stems.setdefault(m["stem"], {})[int(m["rank"])] = child
        if not stems:
            raise FormatError("directory holds no <prefix>.<rank>.et files", file=str(p))
        if len(stems) > 1:
            raise FormatError(f"directory holds several rank sets ({', '.join(sorted(stems))}); give a prefix", file=str(p))
        stem, files = next(iter(stems.items()))
        prefix = str(p / stem)
    else:
        m = _RANK_FILE.match(p.name)
        if m and p.is_file():
            prefix = str(p.parent / m["stem"])
        else:
            prefix = str(p)
        parent = Path(prefix).parent
        stem = Path(prefix).name
        files = {}
        if parent.is_dir():
            for child in sorted(parent.iterdir()):
                m2 = _RANK_FILE.match(child.name)
                if m2 and m2["stem"] == stem:
                    files[int(m2["rank"])] = child
        if not files:
            raise FormatError("no rank files <prefix>.<rank>.et found", file=prefix)
    missing = sorted(set(range(max(files) + 1)) - set(files))
    if missing:
        shown = ", ".join(str(r) for r in missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise FormatError(f"rank files missing for rank(s) {shown}", file=prefix, rank=missing[0])
    return prefix, dict(sorted(files.items()))


def read_comm_groups(path: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    from xsim_trace.io.documents import load_document

    name = os.fspath(path)
    raw = load_document(name, "comm-group file", as_json=True, error=FormatError)
    if not isinstance(raw, dict):
        raise FormatError("expected an object {\"<id>\": [ranks...]}", file=name)
    out: dict[str, tuple[int, ...]] = {}
    for key, ranks in raw.items():
        if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
            raise FormatError("expected a list of non-negative rank numbers", file=name, field=str(key))
        out[str(key)] = tuple(ranks)
    return out


def read_rank_set(
    prefix_or_dir: str | os.PathLike[str],
    progress: Progress | None = None,
    on_rank: Callable[[int, Path], None] | None = None,
) -> RankSet:
    """Read every ``<prefix>.<rank>.et`` and the comm-group JSON if present."""
    prefix, files = find_rank_files(prefix_or_dir)
    traces: dict[int, Trace] = {}
    for rank, path in files.items():
        if on_rank is not None:
            on_rank(rank, path)
        traces[rank] = read_et(path, rank=rank, progress=progress)
    groups_path = Path(prefix + COMM_GROUPS_SUFFIX)
    groups = read_comm_groups(groups_path) if groups_path.exists() else {}
    return RankSet(traces=traces, comm_groups=groups, prefix=prefix)


def rank_path(prefix: str | os.PathLike[str], rank: int, compress: bool = False) -> Path:
    return Path(f"{os.fspath(prefix)}.{rank}.et{'.gz' if compress else ''}")


def check_group_ids(groups: Mapping[str, Iterable[int]], file: str | None = None) -> None:
    """Comm-group ids as ASTRA-sim reads them: positive decimal integers.  ASTRA-sim takes pg
    "0" (and "") as all ranks by itself and aborts on a group whose id is 0."""
    from xsim_trace.graph.checks import check_group_ids as problems_of

    problems = problems_of(groups)
    if problems:
        raise GraphError(f"cannot write {problems[0].message}", file=file)


def write_comm_groups(prefix: str | os.PathLike[str], groups: Mapping[str, Iterable[int]]) -> Path:
    """Write ``<prefix>.comm_groups.json``; ids must be positive integers (:func:`check_group_ids`)."""
    path = Path(os.fspath(prefix) + COMM_GROUPS_SUFFIX)
    check_group_ids(groups, str(path))
    with atomic_write(path) as handle:
        handle.write(comm_groups_to_json({str(k): list(v) for k, v in groups.items()}) + "\n")
    return path


def write_rank_set(
    prefix: str | os.PathLike[str],
    traces: Mapping[int, Trace],
    comm_groups: Mapping[str, Iterable[int]] | None = None,
    *,
    compress: bool = False,
    progress: Progress | None = None,
) -> list[Path]:
    """Write one file per rank (each atomically) and, if given, the comm-group JSON (a group "0" of
    all the ranks is left out: pg "0" means all ranks anyway; any other id must be a positive integer)."""
    paths = []
    for rank in sorted(traces):
        path = rank_path(prefix, rank, compress)
        write_et(path, traces[rank], compress=compress, progress=progress)
        paths.append(path)
    if comm_groups is not None:
        world = tuple(sorted(traces))
        if "0" in comm_groups and tuple(sorted(comm_groups["0"])) == world == tuple(range(len(world))):
            comm_groups = {k: v for k, v in comm_groups.items() if k != "0"}  # pg "0" is all ranks without an entry
        paths.append(write_comm_groups(prefix, comm_groups))
    return paths
