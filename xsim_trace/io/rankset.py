"""Per-rank trace sets: ``<prefix>.<rank>.et`` (or ``.et.gz``) files plus a comm-group JSON.

The comm-group file is ``<prefix>.comm_groups.json`` with ``{"<pg id>": [ranks...]}``, the form
ASTRA-sim's ``--comm-group-configuration`` reads.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

from xsim_trace.errors import FormatError, GraphError
from xsim_trace.graph.model import Trace, comm_groups_to_json
from xsim_trace.io.atomic import atomic_write
from xsim_trace.io.outset import StagedSet, output_set, recover

if TYPE_CHECKING:
    from xsim_trace.io.et import Progress

COMM_GROUPS_SUFFIX = ".comm_groups.json"
#: the cluster a plan's rank set was generated for (``xsim generate --plan``), part of the set
CLUSTER_SUFFIX = ".cluster.yaml"
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


def find_rank_files(prefix_or_dir: str | os.PathLike[str], *, partial: bool = False) -> tuple[str, dict[int, Path]]:
    """Resolve a prefix (``out/dlrm`` for ``out/dlrm.0.et`` ...), a directory holding one rank set,
    or a single rank file, to ``(prefix, {rank: path})``.

    Raises FormatError when nothing matches, when a directory holds several prefixes, or (unless
    ``partial``) when ranks are missing from 0..N-1.
    """
    p = Path(prefix_or_dir)
    recover(p if p.is_dir() else p.parent)  # finish or undo an interrupted write of a set here
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
    if missing and not partial:
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
    *,
    partial: bool = False,
) -> RankSet:
    """Read every ``<prefix>.<rank>.et`` and the comm-group JSON if present (``partial``: ranks may
    be missing)."""
    prefix, files = find_rank_files(prefix_or_dir, partial=partial)
    traces: dict[int, Trace] = {}
    for rank, path in files.items():
        if on_rank is not None:
            on_rank(rank, path)
        traces[rank] = _et().read_et(path, rank=rank, progress=progress)
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


@dataclass(frozen=True)
class StagedRankSet:
    """A rank set being written: ``prefix`` is where its files go first (see :func:`rank_set_output`)."""

    staged: StagedSet
    prefix: Path

    def final(self, path: str | os.PathLike[str]) -> Path:
        """Where a staged file of the set ends up."""
        return self.staged.final(path)


def rank_set_member(stem: str) -> Callable[[str], bool]:
    """Whether a file name belongs to the rank set ``<stem>``: its rank files, comm groups, cluster."""
    def owns(name: str) -> bool:
        m = _RANK_FILE.match(name)
        return (m is not None and m["stem"] == stem) or name in (stem + COMM_GROUPS_SUFFIX, stem + CLUSTER_SUFFIX)

    return owns


@contextlib.contextmanager
def rank_set_output(prefix: str | os.PathLike[str], *, partial: bool = False) -> Iterator[StagedRankSet]:
    """Write a whole rank set at once: files written under the yielded ``prefix`` replace the old
    set of ``prefix`` together on a clean exit (:mod:`xsim_trace.io.outset`), and the old set's
    other files (ranks beyond the new world, a ``.gz`` twin) go.  ``partial``: some ranks only
    (``xsim generate --ranks``): the other files of the old set stay."""
    target = Path(os.fspath(prefix))
    owns = None if partial else rank_set_member(target.name)
    with output_set(target.parent, owns, label=target.name[:40]) as staged:
        yield StagedRankSet(staged, staged.path(target.name))


def write_rank_set(
    prefix: str | os.PathLike[str],
    traces: Mapping[int, Trace],
    comm_groups: Mapping[str, Iterable[int]] | None = None,
    *,
    compress: bool = False,
    progress: Progress | None = None,
    extra: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write one file per rank and, if given, the comm-group JSON (a group "0" of all the ranks is
    left out: pg "0" means all ranks anyway; any other id must be a positive integer), as one set:
    the old set of ``prefix`` stays whole until all new files are written.  ``extra``: more files of
    the set, ``{suffix: text}`` written to ``<prefix><suffix>``.  Returns the final paths."""
    if comm_groups is not None:
        world = tuple(sorted(traces))
        if "0" in comm_groups and tuple(sorted(comm_groups["0"])) == world == tuple(range(len(world))):
            comm_groups = {k: v for k, v in comm_groups.items() if k != "0"}  # pg "0" is all ranks without an entry
        check_group_ids(comm_groups, os.fspath(prefix) + COMM_GROUPS_SUFFIX)
    paths = []
    with rank_set_output(prefix) as out:
        for rank in sorted(traces):
            path = rank_path(out.prefix, rank, compress)
            _et().write_et(path, traces[rank], compress=compress, progress=progress)
            paths.append(path)
        if comm_groups is not None:
            paths.append(write_comm_groups(out.prefix, comm_groups))
        for suffix, text in (extra or {}).items():
            path = Path(f"{out.prefix}{suffix}")
            with atomic_write(path) as handle:
                handle.write(text)
            paths.append(path)
    return [out.final(p) for p in paths]


def _et():
    """The protobuf reader/writer, imported where a file is read or written whole (finding rank files
    and reading comm groups need no protobuf)."""
    from xsim_trace.io import et

    return et
