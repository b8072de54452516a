"""Chakra workloads from a Program: one ``Trace`` per rank, pipeline passes in schedule order.

Each rank's compute stream is one dependency chain: the passes of its schedule, each pass the
ops of its layers (COMP nodes; TP / CP / EP collectives inline as blocking COMM_COLL nodes).
Pipeline inputs are COMM_RECV nodes the first op of a pass depends on; outputs COMM_SEND nodes
that nothing on the sender waits for.  DP gradient buckets are COMM_COLL nodes chained on the
comm stream, each released by the backward op that completes the bucket (overlap) or by the
last backward (no overlap); the optimizer step waits for all of them, the distributed
optimizer's parameter all-gather follows it.  Every node carries ``duration_ns`` (the compute
model's time; for communication the generator's alpha-beta estimate, which backends replace),
``comm_kind``, ``layer`` and ``microbatch`` where they apply.

Ranks are stamped from templates (:mod:`xsim_trace.workload.templates`): one per pipeline stage
and timing, built once, with the rank-specific fields (process-group ids, pipeline peers, the
metadata's rank) filled in per rank.  :func:`generate` returns every trace in memory;
:func:`write_workload` writes them one rank at a time from pre-encoded records, so memory does not
grow with the world size.  Both produce exactly what the per-rank reference builder
(``tests/generator_reference.py``) produces.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from xsim_trace.errors import ConfigError, GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.model import GlobalMetadata, Node, Trace, comm_groups_to_json, make_attr, make_metadata
from xsim_trace.io.rankset import rank_path, rank_set_output, write_comm_groups
from xsim_trace.io.records import NodePatch, metadata_record, node_record, write_record_file
from xsim_trace.workload.program import Program
from xsim_trace.workload.templates import RankContext, RankRef, RankTemplate, RankTiming
from xsim_trace.workload.timing import Timer

log = logging.getLogger(__name__)

SOURCE = "xsim.workload.generator"

#: templates kept at once by the streaming writer (ranks come stage by stage, so a few suffice)
TEMPLATE_CACHE_SIZE = 8


@dataclass
class GroupRegistry:
    """Process groups by member tuple -> numeric id (as a string, "0" reserved for all ranks)."""

    ids: dict[tuple[int, ...], str] = field(default_factory=dict)

    def id_of(self, members: Iterable[int]) -> str:
        key = tuple(sorted(members))
        if key not in self.ids:
            self.ids[key] = str(len(self.ids) + 1)
        return self.ids[key]

    def lookup(self, members: Iterable[int]) -> str:
        """The id of an already registered group."""
        key = tuple(sorted(members))
        try:
            return self.ids[key]
        except KeyError:
            raise GraphError(f"process group {list(key)} was not registered", field="pg_name") from None

    def as_json_dict(self) -> dict[str, tuple[int, ...]]:
        return {gid: members for members, gid in self.ids.items()}


@dataclass(frozen=True)
class Workload:
    traces: dict[int, Trace]
    comm_groups: dict[str, tuple[int, ...]]
    program: Program


@dataclass(frozen=True)
class WrittenWorkload:
    """What :func:`write_workload` wrote: rank files in rank order, then the comm-group file."""

    paths: tuple[Path, ...]
    comm_groups: dict[str, tuple[int, ...]]
    ranks: int
    nodes: int
    templates_built: int


def _wanted(program: Program, ranks: Iterable[int] | None) -> list[int]:
    world = program.fw.world_size
    wanted = sorted(set(ranks)) if ranks is not None else list(range(world))
    for r in wanted:
        if not 0 <= r < world:
            raise ConfigError(f"rank {r} outside world of {world}", field="ranks")
    return wanted


class _Templates:
    """Templates by timing; ``limit`` bounds how many are kept (least recently used goes)."""

    def __init__(self, ctx: RankContext, limit: int | None = None) -> None:
        self.ctx, self.limit = ctx, limit
        self.cache: OrderedDict[RankTiming, tuple[RankTemplate, Any]] = OrderedDict()
        self.built = 0

    def get(self, timing: RankTiming) -> tuple[RankTemplate, Any]:
        """(template, its encoded form or None until :meth:`encoded` is asked for)."""
        hit = self.cache.get(timing)
        if hit is not None:
            self.cache.move_to_end(timing)
            return hit
        template = self.ctx.build(timing)
        self.built += 1
        entry = (template, None)
        self.cache[timing] = entry
        if self.limit is not None and len(self.cache) > self.limit:
            self.cache.popitem(last=False)
        return entry

    def encoded(self, timing: RankTiming) -> tuple[RankTemplate, _Encoded]:
        template, enc = self.get(timing)
        if enc is None:
            enc = _encode(template)
            self.cache[timing] = (template, enc)
        return template, enc


def _register(ctx: RankContext, groups: GroupRegistry, refs: Iterable[RankRef], rank: int) -> None:
    for ref in refs:
        if ref.is_group:
            groups.id_of(ctx.members(ref, rank))


def _metadata(program: Program, timer: Timer, rank: int, blob: str) -> GlobalMetadata:
    return make_metadata(
        **{
            A.META_RANK: rank,
            A.META_WORLD_SIZE: program.fw.world_size,
            A.META_SOURCE: SOURCE,
            A.META_DEVICE: timer.device.name,
            A.META_SEQ_LEN: program.model.seq_len,
            A.META_MICRO_BATCH: program.fw.micro_batch,
            A.META_COMM_GROUPS: blob,
        }
    )


def _stamp_nodes(template: RankTemplate, values: dict[RankRef, Any]) -> tuple[Node, ...]:
    """The template's nodes with the slots filled; unchanged nodes are shared (they are frozen)."""
    nodes = list(template.nodes)
    for slot in template.slots:
        node = nodes[slot.index]
        attrs = list(node.attrs)
        for name, pos, ref in zip(slot.names, slot.positions, slot.refs):
            attrs[pos] = make_attr(name, values[ref])
        nodes[slot.index] = replace(node, attrs=tuple(attrs))
    return tuple(nodes)


@dataclass(frozen=True)
class _Encoded:
    """A template as framed records: ``pieces`` are runs of fixed nodes joined into one bytes
    object, or ``(NodePatch, k)`` for a slot whose values are ``ref_sets[k]`` resolved per rank."""

    pieces: tuple[bytes | tuple[NodePatch, int], ...]
    ref_sets: tuple[tuple[RankRef, ...], ...]

    def records(self, values: dict[RankRef, Any]) -> Iterator[bytes]:
        resolved = [tuple(values[r] for r in refs) for refs in self.ref_sets]
        for piece in self.pieces:
            if type(piece) is bytes:
                yield piece
            else:
                patch, k = piece
                yield patch.record(resolved[k])


def _encode(template: RankTemplate) -> _Encoded:
    slot_at = {s.index: s for s in template.slots}
    ref_sets: dict[tuple[RankRef, ...], int] = {}
    pieces: list = []
    run: list[bytes] = []
    for i, node in enumerate(template.nodes):
        slot = slot_at.get(i)
        if slot is None:
            run.append(node_record(node))
            continue
        if run:
            pieces.append(b"".join(run))
            run = []
        pieces.append((NodePatch(node, slot.names), ref_sets.setdefault(slot.refs, len(ref_sets))))
    if run:
        pieces.append(b"".join(run))
    return _Encoded(tuple(pieces), tuple(ref_sets))


def generate(program: Program, timer: Timer, ranks: Iterable[int] | None = None) -> Workload:
    """Per-rank traces for ``ranks`` (default: all).  Comm groups cover every group any generated
    rank uses; the JSON is also stored in each trace's metadata (``comm_groups``)."""
    wanted = _wanted(program, ranks)
    ctx = RankContext(program, timer)
    templates = _Templates(ctx)
    groups = GroupRegistry()
    chosen: list[tuple[int, RankTemplate]] = []
    for r in wanted:
        template, _ = templates.get(ctx.timing(r))
        _register(ctx, groups, template.refs, r)
        chosen.append((r, template))
    comm_groups = groups.as_json_dict()
    blob = comm_groups_to_json(comm_groups)
    traces = {}
    for r, template in chosen:
        values = ctx.values(template.refs, r, groups.lookup)
        traces[r] = Trace(metadata=_metadata(program, timer, r, blob), nodes=_stamp_nodes(template, values), rank=r)
    log.info("generated %d rank traces from %d templates, %d comm groups", len(traces), templates.built, len(comm_groups))
    return Workload(traces=traces, comm_groups=comm_groups, program=program)


def write_workload(
    prefix: str | os.PathLike[str],
    program: Program,
    timer: Timer,
    ranks: Iterable[int] | None = None,
    *,
    compress: bool = False,
    progress: Callable[[int], None] | None = None,
) -> WrittenWorkload:
    """Write ``<prefix>.<rank>.et`` for ``ranks`` (default: all) and ``<prefix>.comm_groups.json``,
    one rank at a time: the same bytes as ``write_rank_set(prefix, *generate(...))`` without holding
    the traces.  ``progress(1)`` is called after each rank file."""
    wanted = _wanted(program, ranks)
    ctx = RankContext(program, timer)
    templates = _Templates(ctx, TEMPLATE_CACHE_SIZE)
    # pass 1: every process group, in the order the ranks first use them (the ids depend on it);
    # which groups a rank uses depends on its stage only
    groups = GroupRegistry()
    for r in wanted:
        _register(ctx, groups, ctx.group_refs(ctx.layout.coord(r).pp), r)
    comm_groups = groups.as_json_dict()
    blob = comm_groups_to_json(comm_groups)
    # pass 2: stamp and write each rank, the whole set at once (the old set stays until it is done)
    paths: list[Path] = []
    nodes = 0
    with rank_set_output(prefix, partial=ranks is not None) as out:
        for r in wanted:
            template, encoded = templates.encoded(ctx.timing(r))
            values = ctx.values(template.refs, r, groups.lookup)
            path = rank_path(out.prefix, r, compress)
            head = metadata_record(_metadata(program, timer, r, blob))
            write_record_file(path, _chain(head, encoded.records(values)), compress=compress)
            paths.append(path)
            nodes += len(template.nodes)
            if progress is not None:
                progress(1)
        paths.append(write_comm_groups(out.prefix, comm_groups))
    paths = [out.final(p) for p in paths]
    log.info(
        "wrote %d rank traces (%d nodes) from %d templates, %d comm groups, to %s",
        len(wanted), nodes, templates.built, len(comm_groups), os.fspath(prefix),
    )
    return WrittenWorkload(tuple(paths), comm_groups, len(wanted), nodes, templates.built)


def _chain(first: bytes, rest: Iterable[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest
