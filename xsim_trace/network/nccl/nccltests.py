"""Read standard nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``,
``alltoall_perf``, ``sendrecv_perf``, ``broadcast_perf``, ``reduce_perf``).

A log is one table: header lines (``# nThread ... nGpus ...``, ``#  Rank  0 Group 0 Pid ... on HOST device 0
[0x..] GPU NAME``, optionally ``# nccl-tests version ... nccl-library=NNNNN`` and ``# Collective test
starting: X_perf``), then one row per size: ``size count type [redop] [root] time algbw busbw #wrong time algbw
busbw #wrong``.  Anything malformed is a :class:`~xsim_trace.errors.FormatError` naming file and line.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from xsim_trace.errors import FormatError
from xsim_trace.nccl_names import dtype_bytes
from xsim_trace.network.nccl.kinds import CollKind
from xsim_trace.network.nccl.model import bus_factor

#: nccl-tests binary stem -> collective
BINARIES: dict[str, CollKind] = {
    "all_reduce": CollKind.ALL_REDUCE,
    "all_gather": CollKind.ALL_GATHER,
    "reduce_scatter": CollKind.REDUCE_SCATTER,
    "alltoall": CollKind.ALL_TO_ALL,
    "sendrecv": CollKind.SEND_RECV,
    "broadcast": CollKind.BROADCAST,
    "reduce": CollKind.REDUCE,
}
_REDOPS = {"sum", "prod", "max", "min", "avg", "none", "premulsum"}
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\s+.*?\bon\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_START_RE = re.compile(r"Collective test starting:\s*(\w+?)(?:_perf\w*)?\s*$")
_VERSION_RE = re.compile(r"nccl-library=(\d+)|NCCL version\s+([\d.]+)")
#: largest 'error' (early nccl-tests: maximum deviation of the result) still taken as a correct run
_MAX_ERROR = 1e-3
_THREADS_RE = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_NUM_RE = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


@dataclass(frozen=True, slots=True)
class Row:
    line: int
    size_bytes: int
    time_us: float  # out-of-place
    algbw_GBps: float
    busbw_GBps: float
    time_in_place_us: float | None


@dataclass(frozen=True, slots=True)
class NcclTestsRun:
    """One nccl-tests table."""

    file: str
    collective: CollKind
    n_ranks: int
    n_nodes: int
    gpu: str | None  # device name from the rank lines
    nccl_version: str | None
    rows: tuple[Row, ...]
    gpus_per_process: int = 1  # nThread x nGpus: one process launching on several GPUs (-g N)

    @property
    def ranks_per_node(self) -> int:
        return self.n_ranks // self.n_nodes


def _err(file: str, line: int, msg: str) -> FormatError:
    return FormatError(msg, file=f"{file}:{line}")


def _collective_from_name(text: str) -> CollKind | None:
    stem = text.lower()
    for name in sorted(BINARIES, key=len, reverse=True):  # reduce_scatter before reduce
        if name in stem or name.replace("_", "") in stem:
            return BINARIES[name]
    return None


def _parse_row(file: str, ln: int, tokens: list[str]) -> tuple[Row, str | None, str | None]:
    try:
        size = int(tokens[0])
        int(tokens[1])  # the element count: an integer, not used
    except (ValueError, IndexError):
        raise _err(file, ln, f"expected 'size count type ... time algbw busbw #wrong', found {' '.join(tokens)[:80]!r}") from None
    rest = tokens[3:]
    redop = root = None
    if rest and rest[0].lower() in _REDOPS:
        redop = rest.pop(0).lower()
    if rest and re.fullmatch(r"-?\d+", rest[0]) and len(rest) % 4 == 1:
        root = rest.pop(0)
    if len(rest) not in (4, 8):
        raise _err(file, ln, f"expected 4 or 8 columns after the type (time algbw busbw #wrong, twice), found {len(rest)} (truncated line?)")
    for i, tok in enumerate(rest):
        if i % 4 == 3:
            _check_wrong(file, ln, tok)
        elif not _NUM_RE.match(tok):
            raise _err(file, ln, f"expected a number in column {4 + i}, found {tok!r}")
    t_in = float(rest[4]) if len(rest) == 8 else None
    for field, value in (("time", float(rest[0])), ("in-place time", t_in)):
        if value is not None and not (math.isfinite(value) and value > 0):  # a fit divides by it and takes its log
            raise _err(file, ln, f"expected a positive {field} in us, found {value:g}")
    return Row(ln, size, float(rest[0]), float(rest[1]), float(rest[2]), t_in), redop, root


def _check_wrong(file: str, ln: int, tok: str) -> None:
    """``#wrong`` (a count, must be 0), ``N/A`` (validation off), or in early releases ``error``: the largest
    deviation as a float (must be small)."""
    if tok == "N/A":
        return
    if re.fullmatch(r"\d+", tok):
        if int(tok) != 0:
            raise _err(file, ln, f"expected #wrong 0, found {tok} (the test reported wrong results)")
        return
    try:
        dev = float(tok)
    except ValueError:
        raise _err(file, ln, f"expected #wrong 0 (or N/A), found {tok!r}") from None
    if not dev <= _MAX_ERROR:
        raise _err(file, ln, f"expected an error column <= {_MAX_ERROR:g}, found {tok} (the test reported wrong results)")


def _ranks_from_bw(kind: CollKind, rows: list[Row]) -> int | None:
    big = max(rows, key=lambda r: r.algbw_GBps)
    if big.algbw_GBps <= 0:
        return None
    ratio = big.busbw_GBps / big.algbw_GBps
    for n in range(2, 4097):
        if abs(bus_factor(kind, n) - ratio) < 0.02 * max(ratio, 1e-9):
            return n
    return None


def parse_nccl_tests(path: str | Path, *, collective: CollKind | None = None, nodes: int | None = None) -> NcclTestsRun:
    """Parse one nccl-tests log.  ``collective`` overrides what the log and its file name say; ``nodes``
    what its rank lines say (needed when a log has none)."""
    p = Path(path)
    file = str(p)
    try:
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise FormatError(f"cannot read nccl-tests log: {exc.strerror or exc}", file=file) from exc
    starts: list[tuple[int, CollKind]] = []
    hosts: dict[int, str] = {}
    gpus: Counter[str] = Counter()
    version = None
    per_process = 1
    rows: list[Row] = []
    redops: set[str | None] = set()
    in_table_header = False
    for ln, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if m := _START_RE.search(line):
                kind = _collective_from_name(m.group(1))
                if kind is not None:
                    starts.append((ln, kind))
            elif m := _RANK_RE.match(line):
                hosts[int(m.group(1))] = m.group(2)
                gpus[m.group(3)] += 1
            elif m := _VERSION_RE.search(line):
                version = m.group(1) or m.group(2)
            if m := _THREADS_RE.search(line):
                per_process = int(m.group(1)) * int(m.group(2))
            if re.search(r"\bsize\b.*\bcount\b.*\btype\b", line):
                if rows:
                    raise _err(file, ln, "expected one nccl-tests table per file, found a second table header (two collectives in one file?)")
                in_table_header = True
            continue
        if not in_table_header:
            if re.match(r"^\d+\s+\d+\s+\w+", line):
                raise _err(file, ln, "expected the table header ('#  size  count  type ...') before the first row")
            continue
        row, redop, _root = _parse_row(file, ln, line.split())
        if rows and row.size_bytes <= rows[-1].size_bytes:
            raise _err(file, ln, f"expected sizes in increasing order, found {row.size_bytes} after {rows[-1].size_bytes}")
        redops.add(redop)
        rows.append(row)
    if not rows:
        raise _err(file, len(lines), "expected an nccl-tests table ('#  size  count  type ...' and rows), found none")
    kinds = {k for _, k in starts}
    if len(kinds) > 1:
        raise _err(file, starts[1][0], f"expected one collective per file, found {', '.join(sorted(k.value for k in kinds))}")
    kind = collective or (kinds.pop() if kinds else None) or _collective_from_name(p.name)
    if kind is None:
        raise _err(file, rows[0].line, "expected the collective ('# Collective test starting: X_perf' or a file name "
                   "containing all_reduce/all_gather/reduce_scatter/alltoall/sendrecv), found neither")
    rows = [r for r in rows if r.size_bytes > 0]
    if not rows:
        raise _err(file, len(lines), "expected rows with a non-zero size, found only size 0")
    n_ranks = len(hosts) or _ranks_from_bw(kind, rows)
    if not n_ranks:
        raise _err(file, rows[0].line, "expected '#  Rank N ... on HOST device ...' lines (or busbw/algbw giving the rank count), found neither")
    n_nodes = nodes or (len(set(hosts.values())) if hosts else 1)
    if n_ranks % n_nodes:
        raise _err(file, rows[0].line, f"expected {n_ranks} ranks to fill {n_nodes} nodes evenly, found a remainder")
    gpu = gpus.most_common(1)[0][0] if gpus else None
    return NcclTestsRun(file, kind, n_ranks, n_nodes, gpu, version, tuple(rows), per_process)


_STEM = {v: k for k, v in BINARIES.items()}


def render_log(
    collective: CollKind,
    rows: list[tuple[int, float]],
    *,
    gpu: str,
    nodes: int,
    gpus_per_node: int,
    gpus_per_process: int = 1,
    dtype: str = "float",
) -> str:
    """An nccl-tests log for ``rows`` of (size_bytes, out-of-place time µs), in the tool's layout (used to
    feed measurements kept as tables, e.g. ../shared/reference/nccl_tests.csv, through the parser)."""
    n = nodes * gpus_per_node
    stem = _STEM[collective]
    redop = "sum" if collective in (CollKind.ALL_REDUCE, CollKind.REDUCE_SCATTER, CollKind.REDUCE) else "none"
    root = "0" if collective in (CollKind.BROADCAST, CollKind.REDUCE) else "-1"
    out = [
        f"# Collective test starting: {stem}_perf",
        f"# nThread 1 nGpus {gpus_per_process} minBytes {rows[0][0]} maxBytes {rows[-1][0]} step: 2(factor) "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for r in range(n):
        node, local = divmod(r, gpus_per_node)
        out.append(f"#  Rank {r:2d} Group  0 Pid {1000 + r // gpus_per_process:6d} on node{node:03d} device {local:2d} "
                   f"[0x{local:02x}] {gpu}")
    out += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    elem = dtype_bytes(dtype) or 4  # nccl-tests -d names (half, bfloat16, double, int8, ...)
    for size, t_us in rows:
        algbw = size / (t_us * 1000.0)
        busbw = algbw * bus_factor(collective, n)
        fields = f"{t_us:8.2f} {algbw:7.2f} {busbw:7.2f} {0:6d}"
        out.append(f"{size:12d} {size // elem:13d} {dtype:>9} {redop:>7} {root:>7} {fields} {fields}")
    out += ["# Out of bounds values : 0 OK", "#"]
    return "\n".join(out) + "\n"
