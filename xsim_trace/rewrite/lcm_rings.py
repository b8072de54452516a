"""LCM chunking of a gradient across data-parallel members whose TP degrees differ.

With member groups of TP degree ``tp_g`` the gradient of a layer interval is cut into
``Lc = lcm(tp_g)`` equal chunks.  Chunk ``c`` lives on TP rank ``floor(c * tp_g / Lc)`` of group
``g``; chunks with the same tuple of owners travel together in one ring, and the rings are
independent (they can run concurrently).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from xsim_trace.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ChunkRing:
    """One all-reduce ring: ``members[g]`` is the TP rank of group ``g`` taking part."""

    members: tuple[int, ...]
    chunks: tuple[int, ...]  # chunk indices in 0..num_chunks-1 carried by this ring
    num_chunks: int  # Lc

    def size_bytes(self, total_bytes: int) -> int:
        """Bytes this ring reduces when the whole gradient is ``total_bytes`` (exact split of the
        Lc chunks; the remainder bytes go to the lowest chunk indices)."""
        return sum(chunk_bytes(total_bytes, self.num_chunks, c) for c in self.chunks)


def chunk_bytes(total_bytes: int, num_chunks: int, index: int) -> int:
    """Size of chunk ``index`` when ``total_bytes`` is cut into ``num_chunks`` near-equal chunks."""
    base, rem = divmod(total_bytes, num_chunks)
    return base + (1 if index < rem else 0)


def lcm_rings(tp_degrees: Sequence[int]) -> tuple[ChunkRing, ...]:
    """Rings for DP members with the given TP degrees, in chunk order.

    >>> [r.members for r in lcm_rings([2, 4])]
    [(0, 0), (0, 1), (1, 2), (1, 3)]
    """
    if not tp_degrees:
        raise ConfigError("a DP group needs at least one member", field="tp_degrees")
    for i, t in enumerate(tp_degrees):
        if not isinstance(t, int) or t < 1:
            raise ConfigError(f"expected a positive TP degree, found {t!r}", field=f"tp_degrees[{i}]")
    lc = math.lcm(*tp_degrees)
    by_members: dict[tuple[int, ...], list[int]] = {}
    for c in range(lc):
        owners = tuple(c * t // lc for t in tp_degrees)
        by_members.setdefault(owners, []).append(c)
    return tuple(ChunkRing(members=m, chunks=tuple(cs), num_chunks=lc) for m, cs in by_members.items())
