"""Cross-rank processing of NCCL operations: process groups, issue order, send/recv pairing.

Each rank lists its NCCL operations in issue order.  Within a process group every member issues
the same sequence, so the k-th operation of a group is the same collective on all its members:
``k`` becomes the tag that pairs the sends and receives it is made of.

An all-to-all (NCCL runs it as grouped SendRecv) becomes, on each rank, one SEND and one RECV per
peer, ordered by a round-robin pairing (the circle method): in round ``r`` every member exchanges
with exactly one partner, the lower rank sending first.  Any simulator that serialises a rank's
p2p operations, blocking or not, therefore completes it without deadlock.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol, Sequence

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType

from converters.common import GNode
from converters.nccl import CommInfo, CommKind

log = logging.getLogger(__name__)

#: tags of direct send/recv pairs start here (all-to-all tags are the group-local issue index)
P2P_TAG_BASE = 1 << 20
ALLTOALL_MODES = ("p2p", "coll")


class IssuedOp(Protocol):
    """One NCCL operation of a rank as cross-rank processing reads it (converters.kineto.CommOp)."""

    node: GNode
    info: CommInfo
    issue_ns: int


@dataclass(slots=True)
class RankOps:
    """What cross-rank processing needs from one rank: its NCCL operations."""

    rank: int
    ops: Sequence[IssuedOp]


def circle_rounds(members: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Round-robin pairings of ``members``: each round a set of disjoint pairs; every pair once."""
    players: list[int | None] = list(members)
    if len(players) % 2:
        players.append(None)
    n = len(players)
    rounds = []
    for r in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = players[i], players[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def alltoall_schedule(rank: int, members: Sequence[int]) -> list[tuple[int, bool]]:
    """(peer, send_first) per round for ``rank``."""
    out = []
    for pairs in circle_rounds(sorted(members)):
        for a, b in pairs:
            if rank == a:
                out.append((b, True))
            elif rank == b:
                out.append((a, False))
    return out


def group_members(info: CommInfo, world_size: int) -> tuple[int, ...]:
    if info.group_ranks:
        return tuple(sorted(info.group_ranks))
    return tuple(range(world_size))


@dataclass(slots=True)
class _Seen:
    """What :func:`assign` gathers over the ranks: the largest member list per process group, each
    rank's sequence of operation kinds per group, and coll-mode all-to-alls by (pg, issue index)."""

    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    sequences: dict[str, dict[int, list[str]]] = field(default_factory=dict)
    uneven: dict[tuple[str, int], list] = field(default_factory=dict)


def assign(ranks: Iterable[RankOps], world_size: int, alltoall: str = "p2p") -> dict[str, tuple[int, ...]]:
    """Set the Chakra comm attributes on every comm node; return the comm groups.

    ``alltoall``: "p2p" (per-peer SEND/RECV, default) or "coll" (one COMM_COLL ALL_TO_ALL).
    The groups come back with ASTRA-sim's ids (:func:`astra_group_ids`): the world is pg "0" and
    left out, every other group has a positive integer id.
    """
    ranks = list(ranks)
    seen = _Seen()
    for r in ranks:
        _assign_rank(r, world_size, alltoall, seen)
    _warn_unsized(ranks)
    # an uneven all-to-all moves different bytes per rank; one COMM_COLL needs one size: the largest
    for nodes in seen.uneven.values():
        size = max(n.attrs[A.COMM_SIZE] for n in nodes)
        for n in nodes:
            n.attrs[A.COMM_SIZE] = size
    for pg, per_rank in sorted(seen.sequences.items()):
        seqs = {tuple(v) for v in per_rank.values()}
        if len(seqs) > 1:
            log.warning("process group %s: ranks issue different NCCL sequences (%s)", pg,
                        "; ".join(f"rank {k}: {len(v)} ops" for k, v in sorted(per_rank.items())))
    match_p2p_sizes(ranks)
    rename = astra_group_ids(seen.groups, world_size)
    for r in ranks:
        for op in r.ops:
            attrs = op.node.attrs
            if A.PG_NAME in attrs:
                attrs[A.PG_NAME] = rename[attrs[A.PG_NAME]]
    return {rename[pg]: members for pg, members in seen.groups.items() if rename[pg] != WORLD_PG}


def _assign_rank(r: RankOps, world_size: int, alltoall: str, seen: _Seen) -> None:
    """One rank's operations in issue order: pg name, collective type and size, or p2p peer and tag."""
    issue: dict[str, int] = {}
    pair_count: dict[tuple[str, int, int], int] = {}
    for op in sorted(r.ops, key=lambda o: (o.issue_ns, o.node.seq)):
        info: CommInfo = op.info
        members = group_members(info, world_size)
        pg = info.pg_name or "0"
        if pg not in seen.groups or len(members) > len(seen.groups[pg]):
            seen.groups[pg] = members
        index = issue.get(pg, 0)
        issue[pg] = index + 1
        what = info.coll.name if info.coll is not None else info.kind.value
        seen.sequences.setdefault(pg, {}).setdefault(r.rank, []).append(what)
        node = op.node
        node.attrs[A.PG_NAME] = pg
        if info.kind is CommKind.COLLECTIVE:
            if info.coll is CollectiveType.ALL_TO_ALL and alltoall == "p2p" and len(members) > 1:
                _expand_alltoall(node, info, r.rank, members, index)
            else:
                node.attrs[A.COMM_TYPE] = int(info.coll)  # type: ignore[arg-type]
                node.attrs[A.COMM_SIZE] = info.size_bytes
                if info.coll is CollectiveType.ALL_TO_ALL:
                    seen.uneven.setdefault((pg, index), []).append(node)
        else:
            _set_p2p(node, info, r.rank, pg, pair_count)


def _set_p2p(node: GNode, info: CommInfo, rank: int, pg: str, pair_count: dict[tuple[str, int, int], int]) -> None:
    """A send or receive: its peer, and a tag counting the (pg, src, dst) pair's transfers so far."""
    peer = info.peer
    if peer is None:
        log.warning("rank %d: %s without a known peer; kept as compute", rank, node.name)
        node.type = NodeType.COMP
        node.timed = True
        return
    src, dst = (rank, peer) if info.kind is CommKind.SEND else (peer, rank)
    key = (pg, src, dst)
    tag = P2P_TAG_BASE + pair_count.get(key, 0)
    pair_count[key] = pair_count.get(key, 0) + 1
    node.type = NodeType.COMM_SEND if info.kind is CommKind.SEND else NodeType.COMM_RECV
    node.attrs.update({A.COMM_SRC: src, A.COMM_DST: dst, A.COMM_TAG: tag, A.COMM_SIZE: info.size_bytes})


def _warn_unsized(ranks: Sequence[RankOps]) -> None:
    unsized = sum(1 for r in ranks for op in r.ops if op.info.kind is CommKind.COLLECTIVE
                  and op.info.coll is not CollectiveType.BARRIER and op.info.size_bytes == 0)
    if unsized:
        log.warning("%d collective%s no size: the capture was taken without record_shapes; the replay keeps "
                    "their measured duration", unsized, "s have" if unsized != 1 else " has")


#: the process group every simulator reads as "all ranks" without a comm-group entry
WORLD_PG = "0"


def astra_group_ids(groups: Mapping[str, Sequence[int]], world_size: int) -> dict[str, str]:
    """Old pg name -> the id written: ASTRA-sim reads pg_name "" or "0" as the world, aborts on a
    comm-group entry with id 0 and parses every other id as an integer.  So the world group "0"
    stays "0" (and out of the file); positive integer names are kept; any other group (a
    non-numeric name, or a "0" that is not the world) gets the next free integer, in name order."""
    world = tuple(range(world_size))
    rename: dict[str, str] = {}
    taken: set[int] = set()
    for pg, members in groups.items():
        if pg in ("", WORLD_PG) and tuple(sorted(members)) == world:
            rename[pg] = WORLD_PG
        elif pg.isdigit() and int(pg) > 0 and str(int(pg)) == pg:
            rename[pg] = pg
            taken.add(int(pg))
    next_id = max(taken, default=0) + 1
    for pg in sorted(groups):
        if pg not in rename:
            rename[pg] = str(next_id)
            next_id += 1
    return rename


def _p2p_parts(node) -> list[tuple[NodeType, dict]]:
    """(type, comm attrs) of a comm node's SEND / RECV parts: its expansion, or itself."""
    if node.expand:
        return [(t, attrs) for t, _name, attrs in node.expand if t in (NodeType.COMM_SEND, NodeType.COMM_RECV)]
    if node.type in (NodeType.COMM_SEND, NodeType.COMM_RECV):
        return [(node.type, node.attrs)]
    return []


def match_p2p_sizes(ranks: Sequence[RankOps]) -> None:
    """Give each receive the size of the send it pairs with (the k-th send and the k-th receive of
    one (pg, src, dst, tag), in issue order): simulators pair them by (tag, src, dst, size), and an
    uneven all-to-all split by each side's own byte count disagrees."""
    sends: dict[tuple, list[int]] = defaultdict(list)
    recvs: dict[tuple, list[dict]] = defaultdict(list)
    for r in ranks:
        for op in sorted(r.ops, key=lambda o: (o.issue_ns, o.node.seq)):
            pg = op.node.attrs.get(A.PG_NAME)
            for kind, attrs in _p2p_parts(op.node):
                key = (pg, attrs[A.COMM_SRC], attrs[A.COMM_DST], attrs[A.COMM_TAG])
                if kind is NodeType.COMM_SEND:
                    sends[key].append(attrs[A.COMM_SIZE])
                else:
                    recvs[key].append(attrs)
    changed = 0
    for key, attrs_list in recvs.items():
        for attrs, size in zip(attrs_list, sends.get(key, ())):
            if attrs[A.COMM_SIZE] != size:
                attrs[A.COMM_SIZE] = size
                changed += 1
    if changed:
        log.info("%d receive(s) take the byte count of their send (the two sides' counts differ)", changed)


def _expand_alltoall(node, info: CommInfo, rank: int, members: Sequence[int], tag: int) -> None:
    n = len(members)
    send_bytes = info.in_bytes // n
    recv_bytes = (info.out_bytes or info.in_bytes) // n
    parts = []
    base = node.name
    for peer, send_first in alltoall_schedule(rank, members):
        send = (NodeType.COMM_SEND, f"{base} send->{peer}",
                {A.COMM_SRC: rank, A.COMM_DST: peer, A.COMM_TAG: tag, A.COMM_SIZE: send_bytes})
        recv = (NodeType.COMM_RECV, f"{base} recv<-{peer}",
                {A.COMM_SRC: peer, A.COMM_DST: rank, A.COMM_TAG: tag, A.COMM_SIZE: recv_bytes})
        parts.extend([send, recv] if send_first else [recv, send])
    node.attrs[A.COMM_TYPE] = int(CollectiveType.ALL_TO_ALL)  # which collective the p2p nodes form
    node.expand = parts


def comm_groups_json_ready(groups: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    return {k: sorted(v) for k, v in groups.items()}
