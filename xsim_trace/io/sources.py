"""Input resolution for front ends: a file, a folder of rank files, a glob, or a .tar.gz holding them.

Each input becomes a :class:`Source`: a display name plus a way to open it as a binary stream
(transparently gunzipped).  Tar members are streamed from the archive, never extracted to disk.
"""

from __future__ import annotations

import glob
import gzip
import io
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator

from xsim_trace.errors import FormatError

_GZIP_MAGIC = b"\x1f\x8b"
_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar")
#: file name patterns that carry a rank number, tried in order
_RANK_PATTERNS = (
    re.compile(r"(?:rank|worker|trainer|gpu|node)[_\-.]?(\d+)", re.IGNORECASE),
    re.compile(r"[_\-.](\d+)\.(?:pt\.trace\.)?json(?:\.gz)?$", re.IGNORECASE),
    re.compile(r"(\d+)"),
)


@dataclass(frozen=True, slots=True)
class Source:
    """One input file (possibly a member of an archive)."""

    name: str
    opener: Callable[[], IO[bytes]]
    size_bytes: int | None = None

    def open(self) -> IO[bytes]:
        """A binary stream of the (decompressed) content."""
        raw = self.opener()
        if not hasattr(raw, "peek"):
            raw = io.BufferedReader(raw)  # type: ignore[arg-type]
        if raw.peek(2)[:2] == _GZIP_MAGIC:  # type: ignore[union-attr]
            return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
        return raw

    @property
    def rank_hint(self) -> int | None:
        """A rank number read from the file name (``worker3_...``, ``rank0.json``, ``dlrm_eg_5.json``)."""
        return rank_from_name(self.name)


def rank_from_name(name: str) -> int | None:
    base = os.path.basename(name)
    for pattern in _RANK_PATTERNS:
        m = pattern.search(base)
        if m:
            return int(m.group(1))
    return None


def _is_tar(path: Path) -> bool:
    return path.name.endswith(_TAR_SUFFIXES) and tarfile.is_tarfile(path)


def _file_source(path: Path) -> Source:
    return Source(name=str(path), opener=lambda p=path: open(p, "rb"), size_bytes=path.stat().st_size)


def _tar_sources(path: Path, accept: Callable[[str], bool]) -> Iterator[Source]:
    try:
        with tarfile.open(path, "r:*") as tar:
            members = [m for m in tar.getmembers() if m.isfile() and accept(m.name)]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise FormatError(f"cannot read the archive ({exc})", file=str(path)) from None
    for member in sorted(members, key=lambda m: m.name):

        def opener(p: Path = path, n: str = member.name) -> IO[bytes]:
            tar = tarfile.open(p, "r:*")
            handle = tar.extractfile(n)
            if handle is None:  # pragma: no cover - filtered by isfile above
                raise FormatError("archive member is not a file", file=f"{p}:{n}")
            return _TarMember(handle, tar)

        yield Source(name=f"{path}:{member.name}", opener=opener, size_bytes=member.size)


class _TarMember(io.RawIOBase):
    """A tar member stream that closes its archive when closed."""

    def __init__(self, handle: IO[bytes], tar: tarfile.TarFile) -> None:
        self._handle, self._tar = handle, tar

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self._handle.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._handle.close()
            self._tar.close()
        finally:
            super().close()


def is_json_name(name: str) -> bool:
    base = name.lower()
    return base.endswith((".json", ".json.gz")) and not base.rsplit("/", 1)[-1].startswith("._")


def resolve_inputs(spec: str | os.PathLike[str], accept: Callable[[str], bool] = is_json_name) -> list[Source]:
    """Expand an input argument to its files, sorted by name.

    ``spec`` is a file, a directory (its matching files, and the matching members of archives in
    it), a glob pattern, or a tar archive.  Raises FormatError when nothing matches.
    """
    text = os.fspath(spec)
    path = Path(text)
    found: list[Source] = []
    if path.is_file():
        found = list(_tar_sources(path, accept)) if _is_tar(path) else [_file_source(path)]
    elif path.is_dir():
        for child in sorted(path.iterdir()):
            if child.is_file() and _is_tar(child):
                found.extend(_tar_sources(child, accept))
            elif child.is_file() and accept(child.name):
                found.append(_file_source(child))
    elif any(ch in text for ch in "*?["):
        for match in sorted(glob.glob(text)):
            p = Path(match)
            if p.is_file():
                found.extend(_tar_sources(p, accept) if _is_tar(p) else [_file_source(p)])
    else:
        raise FormatError("no such file, directory or glob", file=text)
    if not found:
        raise FormatError("no input trace files found", file=text)
    return found
