"""Decoding a rank file by difference from one decoded before it (the numpy decoder's way).

The ranks of a step are mostly alike: a generated TP2 PP2 DP2 step's DP replicas and TP peers differ
in a few hundred bytes of a MB (comm-group ids, peers).  A file of the same length as an earlier,
fully decoded *base* file whose bytes differ only inside node records (no byte of any length prefix
differs) is framed exactly as the base is (framing reads the same prefix bytes at the same
positions), and every column of a record is a function of that record's bytes alone (each record is
walked within its own bounds; offsets are file positions, equal in both files).  So its columns are
the base's, with the records that hold a changed byte decoded afresh: the same columns as decoding
it whole, and the same refusal (a refusal is a record's, and every record that differs is decoded).
``tests/test_et_decoders.py`` compares it with the numba decoder's whole decode, also on mutated
copies.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from xsim_trace.io._et_numpy import FileColumns

#: a file is decoded by difference when at most this fraction of its node records changed (else whole)
MAX_CHANGED_FRACTION = 0.5

_OFFSETS = ("name_off", "soff", "loff")  # byte offsets into the file (soff/loff: -1 = absent)
_ROWS = ("node_id", "node_type", "duration_micros", "name_off", "name_len", "ivals", "ihas", "soff", "slen", "loff",
         "llen")


class Framing(NamedTuple):
    """Every record of a file (the GlobalMetadata record first): ``[starts[i], ends[i])``."""

    starts: np.ndarray  # int64
    ends: np.ndarray  # int64

    @property
    def nodes(self) -> int:
        return int(self.starts.shape[0]) - 1


def framing(framed: tuple[list[int], list[int]]) -> Framing:
    return Framing(np.asarray(framed[0], np.int64), np.asarray(framed[1], np.int64))


class Changes(NamedTuple):
    """Where a file differs from its base: ``records`` (node records, indices from 0, ascending)
    hold a changed byte; ``at`` / ``node``: each changed byte of a node record and its record."""

    records: np.ndarray
    at: np.ndarray
    node: np.ndarray


def changed_records(data: bytes, base_data: bytes, base: Framing) -> Changes | None:
    """Where ``data`` differs from ``base_data``, a file of the same length framed as ``base``; None
    when a length prefix differs (the framing may then differ: decode the file whole)."""
    diff = np.flatnonzero(np.frombuffer(data, np.uint8) != np.frombuffer(base_data, np.uint8))
    if diff.size == 0:
        return Changes(diff, diff, diff)
    rec = np.searchsorted(base.ends, diff, side="right")  # the first record ending after the byte
    if np.any(rec >= base.ends.shape[0]) or np.any(diff < base.starts[np.minimum(rec, base.ends.shape[0] - 1)]):
        return None
    in_node = rec >= 1  # (a change in the metadata record leaves the node columns alone)
    at, nodes = diff[in_node], rec[in_node] - 1  # ascending, as the bytes are
    if nodes.size < 2:
        return Changes(nodes, at, nodes)
    keep = np.empty(nodes.shape[0], bool)
    keep[0] = True
    np.not_equal(nodes[1:], nodes[:-1], out=keep[1:])
    return Changes(nodes[keep], at, nodes)


def to_decode(changes: Changes, base: FileColumns) -> np.ndarray:
    """The changed records that must be decoded afresh: all but those whose every changed byte lies
    in the payload of their name or of a string attribute the columns keep (``soff``).  Those
    payloads are never interpreted by the decoder (their tag and length bytes are not in them), and
    the names and strings are read from the file's own bytes at the base's offsets afterwards."""
    if changes.at.size == 0:
        return changes.records
    k, at = changes.node, changes.at
    off, ln = base.name_off[k], base.name_len[k]
    free = (at >= off) & (at < off + ln)
    for j in range(base.soff.shape[1]):
        so, sl = base.soff[k, j], base.slen[k, j]
        free |= (so >= 0) & (at >= so) & (at < so + sl)
    fixed = np.bincount(k[~free], minlength=int(k[-1]) + 1)  # changed bytes outside those payloads
    return changes.records[fixed[changes.records] > 0]


def file_slice(cols: FileColumns, first: int, stop: int, byte_off: int) -> FileColumns:
    """Rows ``[first, stop)`` of a batch's columns as one file's, offsets moved to that file's bytes
    (``byte_off``: where the file starts in the batch's joined bytes)."""
    d0, d1 = int(cols.dep_ptr[first]), int(cols.dep_ptr[stop])
    rows = {f: getattr(cols, f)[first:stop] for f in _ROWS}
    return FileColumns(**_shift(rows, -byte_off), dep_ptr=cols.dep_ptr[first:stop + 1] - d0, deps=cols.deps[d0:d1])


def _shift(rows: dict, delta: int) -> dict:
    out = dict(rows)
    if delta:
        out["name_off"] = rows["name_off"] + delta
        for f in ("soff", "loff"):
            x = rows[f]
            out[f] = np.where(x >= 0, x + delta, x)
    return out


def record_bounds(bases: Sequence[Framing], changed: Sequence[np.ndarray], byte_offs: Sequence[int]):
    """Starts and ends, in the joined bytes of a batch, of the changed records of each of its files."""
    starts = [b.starts[1:][c] + o for b, c, o in zip(bases, changed, byte_offs)]
    ends = [b.ends[1:][c] + o for b, c, o in zip(bases, changed, byte_offs)]
    return np.concatenate(starts), np.concatenate(ends)


def splice(bases: Sequence[FileColumns], changed: Sequence[np.ndarray], byte_offs: Sequence[int],
           fresh: FileColumns) -> FileColumns:
    """A batch's columns: each file's base columns (file-local) moved to its place in the joined
    bytes, the rows of its changed records replaced by ``fresh`` (those records decoded over the
    joined bytes, files in order, each file's records in order)."""
    sizes = np.asarray([int(b.node_id.shape[0]) for b in bases], np.int64)
    row0 = np.zeros(len(bases) + 1, np.int64)
    np.cumsum(sizes, out=row0[1:])
    rows = {}
    moved = [_shift({f: getattr(b, f) for f in _ROWS}, o) for b, o in zip(bases, byte_offs)]
    at = np.concatenate([c + row0[j] for j, c in enumerate(changed)])
    for f in _ROWS:
        col = np.concatenate([m[f] for m in moved]) if len(moved) != 1 else moved[0][f].copy()
        col[at] = getattr(fresh, f)
        rows[f] = col
    dep_ptr, deps = _spliced_deps(bases, row0, at, fresh)
    return FileColumns(**rows, dep_ptr=dep_ptr, deps=deps)


def _spliced_deps(bases: Sequence[FileColumns], row0: np.ndarray, at: np.ndarray, fresh: FileColumns):
    """``dep_ptr`` / ``deps`` of the spliced rows: a changed row's deps from ``fresh``, every other
    row's from its base, gathered in row order."""
    d0 = np.zeros(len(bases) + 1, np.int64)
    np.cumsum([int(b.deps.shape[0]) for b in bases], out=d0[1:])
    start = np.concatenate([b.dep_ptr[:-1] + d0[j] for j, b in enumerate(bases)])
    count = np.concatenate([np.diff(b.dep_ptr) for b in bases])
    pool = np.concatenate([*(b.deps for b in bases), fresh.deps])
    start[at] = fresh.dep_ptr[:-1] + d0[-1]
    count[at] = np.diff(fresh.dep_ptr)
    dep_ptr = np.zeros(int(row0[-1]) + 1, np.int64)
    np.cumsum(count, out=dep_ptr[1:])
    total = int(dep_ptr[-1])
    take = np.repeat(start - dep_ptr[:-1], count) + np.arange(total, dtype=np.int64)
    return dep_ptr, pool[take]
