"""Replaying a rank set folded by construction: only one rank per class of equivalent ranks is on
disk (``xsim generate --ranks`` of a generator whose ranks are stamped from shared templates),
with the complete comm groups.  The present ranks are the quotient :mod:`xsim_trace.replay.fold`
would simulate; every collective is priced for its whole group (the NCCL model on the cluster),
each present member taking its own offset, and p2p transfers are routed between the present ranks'
own devices.

Unlike :func:`~xsim_trace.replay.fold.find_fold`, which finds the classes in a complete set and
checks them, here the classes are *declared* (``rep_of``: the present rank each rank takes its
times from) and the absent ranks are never read.  What can be checked is: every present rank's
send/recv peer is present, every collective a present rank is in has, for each of its members, the
member's declared representative in it (at the same node position is not checkable: the absent
rank has no nodes), and members of one class get the same priced offset.  ``tools/bench_16k.py``
replays a small set both ways (complete and unfolded, and declared) and compares every node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from xsim_trace.errors import ConfigError
from xsim_trace.io.et_columns import NodeColumns
from xsim_trace.io.et_wanted import INT_ATTRS
from xsim_trace.replay.compile import ALL_RANKS_PG, CompiledWorkload


@dataclass(frozen=True, slots=True)
class DeclaredSet:
    """A compiled partial set: ``workload`` ranks ``0..k-1`` are ``rank_ids`` of a world of
    ``world_size``; ``full_groups[g]`` are the world ranks of ``workload.groups[g]``'s comm group."""

    workload: CompiledWorkload
    rank_ids: np.ndarray  # int64, ascending
    full_groups: tuple[tuple[int, ...], ...]
    world_size: int

    @property
    def full(self) -> tuple[np.ndarray, tuple[tuple[int, ...], ...]]:
        """What :func:`~xsim_trace.replay.compiled_loop.run_compiled` takes as ``full``."""
        return self.rank_ids, self.full_groups


def compile_declared(cols: Mapping[int, NodeColumns], comm_groups: Mapping[str, Sequence[int]],
                     world_size: int) -> DeclaredSet:
    """Compile the present ranks ``{world rank: columns}`` of a set whose comm groups are complete."""
    from xsim_trace.replay.columnar import compile_columns  # noqa: PLC0415

    ranks = np.asarray(sorted(cols), np.int64)
    local = np.full(world_size, -1, np.int64)
    local[ranks] = np.arange(len(ranks))
    for r in ranks.tolist():
        _localise_peers(cols[r], local, r)
    groups = {str(k): tuple(sorted(int(m) for m in v)) for k, v in comm_groups.items()}
    present = {k: tuple(int(local[m]) for m in v if local[m] >= 0) for k, v in groups.items()}
    w = compile_columns({int(local[r]): cols[r] for r in ranks.tolist()}, {k: v for k, v in present.items() if v})
    full = tuple(groups.get(name) or (tuple(range(world_size)) if name in ALL_RANKS_PG else ())
                 for name in w.group_names)
    if any(not f for f in full):
        raise ConfigError("a collective's comm group is not in the comm groups file", field="pg_name")
    return DeclaredSet(w, ranks, full, world_size)


def _localise_peers(c: NodeColumns, local: np.ndarray, rank: int) -> None:
    """comm_src / comm_dst as present-rank indices (in place); a peer that is absent is an error."""
    for name in ("comm_src", "comm_dst"):
        k = INT_ATTRS.index(name)
        vals, has = c.ivals[:, k], c.ihas[:, k].astype(bool)
        if not has.any():
            continue
        v = vals[has]
        bad = (v < 0) | (v >= len(local))
        mapped = np.where(bad, -1, local[np.where(bad, 0, v)])
        if np.any(mapped < 0):
            raise ConfigError(f"rank {rank} sends to or receives from rank {int(v[np.argmax(mapped < 0)])}, which is "
                              "not in the set: a folded set holds each present rank's peers", field=name)
        vals[has] = mapped


def check_declared(d: DeclaredSet, rep_of: np.ndarray, pricer) -> None:
    """Refuse a declaration the present ranks contradict (see the module docstring)."""
    w = d.workload
    rep_of = np.asarray(rep_of, np.int64)
    if len(rep_of) != d.world_size or np.any(rep_of[d.rank_ids] != d.rank_ids):
        raise ConfigError("every rank needs a representative and a present rank is its own", field="rep_of")
    if not np.all(np.isin(rep_of, d.rank_ids)):
        raise ConfigError("a rank's declared representative is not in the set", field="rep_of")
    for inst in w.instances:
        full = np.asarray(d.full_groups[inst.group], np.int64)
        here = d.rank_ids[list(w.groups[inst.group])]
        if not np.all(np.isin(rep_of[full], here)):
            raise ConfigError(f"comm group {w.group_names[inst.group]}: a member's representative is not a member",
                              field="rep_of")
        if len(full) > 1 and inst.size_bytes:
            off = np.asarray(pricer.offsets_ns(inst, tuple(full.tolist())), np.int64)
            mine = off[np.searchsorted(full, rep_of[full])]
            if np.any(off != mine):
                raise ConfigError(f"comm group {w.group_names[inst.group]}: members of one class get different "
                                  "offsets", field="rep_of")


def replay_declared(d: DeclaredSet, rep_of: np.ndarray, cluster, backend, settings=None):
    """``(times of the present ranks' nodes, engine stats, iteration ns per world rank)``: the
    present ranks replayed on the compiled closed-form path, the others taking their
    representative's times."""
    from xsim_trace.network.protocol import capabilities_of  # noqa: PLC0415
    from xsim_trace.replay.api import collective_pricer  # noqa: PLC0415
    from xsim_trace.replay.compiled_loop import kernel, run_compiled  # noqa: PLC0415
    from xsim_trace.replay.schedule_cache import ScheduleCache  # noqa: PLC0415
    from xsim_trace.replay.settings import ReplaySettings  # noqa: PLC0415

    pricer, settings = collective_pricer(settings or ReplaySettings(), cluster, backend)
    if pricer is None or kernel() is None:
        raise ConfigError("a folded rank set replays on the compiled closed-form path only (numba, a contention-free "
                          "backend, collectives priced by the NCCL model)", field="backend")
    check_declared(d, rep_of, pricer)
    w = d.workload
    node_of = [cluster.node_of(int(r)) for r in d.rank_ids]
    caps = capabilities_of(backend)
    booked = caps.port_booking and not caps.contention_free
    if not (caps.contention_free or booked):
        raise ConfigError("a folded rank set needs a backend that times p2p transfers without events", field="backend")
    times, stats = run_compiled(w, ScheduleCache(w, backend, settings, node_of), settings, pricer, None, booked,
                                full=d.full)
    end = times[2]
    why = stats.pop("order_tie", None)
    if why is not None:
        raise ConfigError(f"the folded set cannot stand for the complete one ({why}): replay the complete set",
                          field="rep_of")
    if stats.pop("finished") != w.num_nodes:
        from xsim_trace.errors import GraphError  # noqa: PLC0415

        raise GraphError("replay of the folded set deadlocked")
    per_rank = np.maximum.reduceat(end, w.rank_ptr[:-1]) if w.num_nodes else np.zeros(w.num_ranks, np.int64)
    local = np.searchsorted(d.rank_ids, rep_of)
    return times, dict(stats, folded_ranks=d.world_size - len(d.rank_ids)), per_rank[local]


def differs_from_representative(a: NodeColumns, b: NodeColumns, groups: Mapping[str, Sequence[int]],
                                rep_of: np.ndarray) -> str | None:
    """Why rank file ``a`` (an absent rank, read for a spot check) is not its representative's
    ``b`` up to comm-group ids and peers, or None.  Compared: node ids, types, durations,
    dependencies, every replay attribute but comm_src / comm_dst / comm_tag and pg_name; a
    send/recv's peer must have ``b``'s peer as representative; a collective's group must have the
    same size and the same classes (representatives) of members as ``b``'s."""
    if len(a) != len(b):
        return f"{len(a)} nodes against {len(b)}"
    for name in ("node_id", "node_type", "duration_micros", "dep_ptr", "deps"):
        if not np.array_equal(getattr(a, name), getattr(b, name)):
            return f"{name} differs"
    peers = [INT_ATTRS.index(n) for n in ("comm_src", "comm_dst")]
    keep = [k for k in range(len(INT_ATTRS)) if k not in peers and INT_ATTRS[k] != "comm_tag"]
    if not np.array_equal(a.ihas, b.ihas) or not np.array_equal(a.ivals[:, keep], b.ivals[:, keep]):
        return "a replay attribute differs"
    for k in peers:
        has = a.ihas[:, k].astype(bool)
        if np.any(np.asarray(rep_of)[a.ivals[has, k]] != b.ivals[has, k]):
            return f"a {INT_ATTRS[k]} is not of the representative's peer class"
    if a.comm_kind != b.comm_kind or a.ring_order != b.ring_order or a.pg_name.keys() != b.pg_name.keys():
        return "comm kinds, ring orders or collectives differ"
    seen: set[tuple[str, str]] = set()
    for i, pg in a.pg_name.items():
        pair = (pg, b.pg_name[i])
        if pair in seen:
            continue
        seen.add(pair)
        ga, gb = groups.get(pair[0]), groups.get(pair[1])
        if ga is None or gb is None:
            return f"comm group {pair[0] if ga is None else pair[1]} is not in the comm groups"
        if len(ga) != len(gb) or sorted(np.asarray(rep_of)[list(ga)]) != sorted(np.asarray(rep_of)[list(gb)]):
            return f"comm group {pair[0]} has other member classes than {pair[1]}"
    return None
