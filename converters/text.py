"""Text workloads -> Chakra: the Chakra Text / ASTRA-sim format and SimAI/AICB ``HYBRID_TRANSFORMER_FWD_IN_BCKWD``.

File layout (whitespace separated)::

    <PARALLELISM> [key: value ...]        e.g. DATA | MODEL | HYBRID_DATA_MODEL | HYBRID_DLRM 4 |
                                           HYBRID_TRANSFORMER model_parallel_NPU_group: 2 |
                                           HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 16 ...
    <number of layers>
    <name> <reserved> <fwd time> <fwd comm> <fwd bytes> <ig time> <ig comm> <ig bytes> <wg time> <wg comm> <wg bytes> <update time>

Per pass and rank: forward through the layers (compute, then its communication), then backward in
reverse (weight-gradient compute and its communication, input-gradient compute and its
communication).  Forward / input-gradient communication runs in the tensor-parallel group
(``model_parallel_NPU_group``; the whole world when absent), weight-gradient communication in the
data-parallel group; a ``_EP`` / ``_DP_EP`` suffix selects the expert-parallel / expert-data
group.  Compute times are microseconds for Chakra Text (as the reference converter reads them) and
nanoseconds for SimAI/AICB files; ``time_unit`` overrides.  Update times (last column) and the
pipeline dimension (``pp``) are not modelled.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from xsim_trace.errors import ConfigError, FormatError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.bounds import MAX_DURATION_MICROS, MAX_SIZE_BYTES, MAX_WORLD_SIZE
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, Trace, comm_groups_to_json, make_metadata, make_node

NS_PER_US = 1000
_COMM_TYPES = {
    "ALLREDUCE": CollectiveType.ALL_REDUCE,
    "ALLGATHER": CollectiveType.ALL_GATHER,
    "REDUCESCATTER": CollectiveType.REDUCE_SCATTER,
    "ALLTOALL": CollectiveType.ALL_TO_ALL,
    "BROADCAST": CollectiveType.BROADCAST,
    "REDUCE": CollectiveType.REDUCE,
    "GATHER": CollectiveType.GATHER,
    "SCATTER": CollectiveType.SCATTER,
    "BARRIER": CollectiveType.BARRIER,
}
PARALLELISMS = ("DATA", "MODEL", "MICRO", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM",
                "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_CUSTOMIZED", "DISTRIBUTED_INFERENCE")
AICB = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
_KIND = {"tp": "tp", "dp": "dp", "ep": "ep", "dp_ep": "dp"}


@dataclass(frozen=True, slots=True)
class Comm:
    coll: CollectiveType
    size_bytes: int
    group: str  # "tp", "dp", "ep", "dp_ep"


@dataclass(frozen=True, slots=True)
class Layer:
    name: str
    line: int
    fwd_time: int
    fwd_comm: Comm | None
    ig_time: int
    ig_comm: Comm | None
    wg_time: int
    wg_comm: Comm | None


@dataclass(frozen=True, slots=True)
class Workload:
    parallelism: str
    params: dict[str, int]
    layers: tuple[Layer, ...]
    dlrm_join: int | None = None  # HYBRID_DLRM: the layer that consumes the embedding all-to-all


#: the largest compute time (in either unit) and message size a workload line may give
MAX_TIME = MAX_DURATION_MICROS
#: without --num-npus, a workload whose groups imply more ranks than this is refused (pass --num-npus)
MAX_DEFAULT_NPUS = 4096


def _int(text: str, path: str, line: int, what: str, maximum: int = MAX_TIME) -> int:
    try:
        value = float(text)
    except ValueError:
        raise FormatError(f"line {line}: expected a number for {what}, found {text[:40]!r}", file=path, field=what) from None
    if value < 0 or not math.isfinite(value) or value > maximum:
        raise FormatError(f"line {line}: expected a number in 0..{maximum} for {what}, found {text[:40]!r}",
                          file=path, field=what)
    return int(round(value))


def _comm(token: str, size: str, path: str, line: int, default_group: str, what: str) -> Comm | None:
    token = token.strip().upper()
    if token in ("NONE", ""):
        return None
    group = default_group
    base = token
    for suffix, g in (("_DP_EP", "dp_ep"), ("_EP", "ep"), ("_DP", "dp"), ("_TP", "tp")):
        if token.endswith(suffix):
            base, group = token[: -len(suffix)], g
            break
    coll = _COMM_TYPES.get(base)
    if coll is None:
        raise FormatError(f"line {line}: unknown communication type {token!r}", file=path, field=what)
    return Comm(coll, _int(size, path, line, f"{what} bytes", MAX_SIZE_BYTES), group)


def parse_workload(text: str, path: str = "<text>") -> Workload:
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines())]
    content = [(i, ln) for i, ln in lines if ln.strip()]
    if len(content) < 2:
        raise FormatError("expected a parallelism line and a layer count", file=path)
    head_no, head = content[0]
    words = head.split()
    parallelism = words[0].upper()
    if parallelism not in PARALLELISMS:
        raise FormatError(f"line {head_no}: unknown parallelism {words[0]!r} (expected one of {', '.join(PARALLELISMS)})",
                          file=path, field="parallelism")
    params: dict[str, int] = {}
    dlrm_join = None
    rest = words[1:]
    i = 0
    while i < len(rest):
        key = rest[i].rstrip(":")
        if i + 1 < len(rest) and re.fullmatch(r"-?\d+", rest[i + 1]):
            params[key] = int(rest[i + 1])
            if not -1 <= params[key] <= MAX_SIZE_BYTES:
                raise FormatError(f"line {head_no}: {key} {rest[i + 1][:40]} is out of range (-1..{MAX_SIZE_BYTES})",
                                  file=path, field=key)
            i += 2
        elif re.fullmatch(r"\d+", rest[i]) and parallelism == "HYBRID_DLRM":
            dlrm_join = _int(rest[i], path, head_no, "DLRM join layer", MAX_WORLD_SIZE)
            i += 1
        else:
            i += 1
    count_no, count_line = content[1]
    count = _int(count_line.split()[0], path, count_no, "layer count")
    body = content[2:]
    if len(body) < count:
        raise FormatError(f"line {count_no}: {count} layers announced, {len(body)} present", file=path, field="layers")
    layers = []
    for no, ln in body[:count]:
        f = ln.split()
        if len(f) < 11:
            raise FormatError(f"line {no}: expected 12 columns, found {len(f)}", file=path, field="layer")
        layers.append(Layer(
            name=f[0], line=no,
            fwd_time=_int(f[2], path, no, "fwd compute time"),
            fwd_comm=_comm(f[3], f[4], path, no, "tp", "fwd comm"),
            ig_time=_int(f[5], path, no, "ig compute time"),
            ig_comm=_comm(f[6], f[7], path, no, "tp", "ig comm"),
            wg_time=_int(f[8], path, no, "wg compute time"),
            wg_comm=_comm(f[9], f[10], path, no, "dp", "wg comm"),
        ))
    return Workload(parallelism, params, tuple(layers), dlrm_join)


@dataclass(slots=True)
class Layout:
    """Rank -> group members for the groups a workload names."""

    world: int
    tp: int
    ep: int
    flat: bool = False  # no group sizes given: every communication spans the world
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pg name -> ranks
    _names: dict[tuple[int, ...], str] = field(default_factory=dict)

    def members(self, rank: int, group: str) -> tuple[int, ...]:
        tp, world = self.tp, self.world
        if self.flat:
            return tuple(range(world))
        dp = max(1, world // tp)
        t, d = rank % tp, rank // tp
        if group == "tp":
            return tuple(range(d * tp, min(world, d * tp + tp)))
        ep = math.gcd(self.ep, dp) if self.ep > 1 else 1
        if group == "dp":
            return tuple(t + k * tp for k in range(dp))
        if group == "ep":
            block = d // ep
            return tuple(t + (block * ep + j) * tp for j in range(ep))
        if group == "dp_ep":
            return tuple(t + (m * ep + d % ep) * tp for m in range(dp // ep))
        raise ConfigError(f"unknown group kind {group!r}")  # pragma: no cover

    def pg_name(self, ranks: tuple[int, ...]) -> str:
        if len(ranks) == self.world:
            return "0"  # the world: every simulator reads pg "0" as all ranks; no comm-group entry
        name = self._names.get(ranks)
        if name is None:
            name = str(len(self._names) + 1)
            self._names[ranks] = name
            self.groups[name] = ranks
        return name


@dataclass(slots=True)
class TextConversion:
    traces: dict[int, Trace]
    comm_groups: dict[str, tuple[int, ...]]
    workload: Workload


def default_num_npus(w: Workload) -> int:
    tp = w.params.get("model_parallel_NPU_group")
    total = w.params.get("all_gpus")
    if total is not None and total <= 16:
        return total
    if tp:
        return tp * 2
    return 2


def convert_workload(w: Workload, *, num_npus: int | None = None, num_passes: int = 1,
                     time_unit: str = "auto", source: str = "", ranks: "Sequence[int] | None" = None) -> TextConversion:
    """One trace per rank of ``num_npus`` (or only ``ranks`` of them: large worlds, spot checks)."""
    world = num_npus or default_num_npus(w)
    if world < 1 or world > MAX_WORLD_SIZE:
        raise ConfigError(f"expected 1..{MAX_WORLD_SIZE} NPUs, found {world}", field="num_npus")
    if num_npus is None and world > MAX_DEFAULT_NPUS:
        raise ConfigError(f"the workload's groups imply {world} NPUs; pass --num-npus {world} to convert that many",
                          field="num_npus")
    unit = ("ns" if w.parallelism == AICB else "us") if time_unit == "auto" else time_unit
    if unit not in ("ns", "us"):
        raise ConfigError(f"expected time unit ns, us or auto, found {time_unit!r}", field="time_unit")
    scale = 1 if unit == "ns" else NS_PER_US
    given = w.params.get("model_parallel_NPU_group")
    tp = given or (1 if w.parallelism == "DATA" else world)
    if tp < 1 or tp > world or world % tp:
        raise ConfigError(f"model_parallel_NPU_group {tp} does not divide the {world} NPUs", field="num_npus")
    flat = given is None and w.parallelism not in ("DATA", "MODEL")
    layout = Layout(world, tp, max(1, w.params.get("ep", 1)), flat)
    traces = {}
    for rank in (range(world) if ranks is None else ranks):
        if not 0 <= rank < world:
            raise ConfigError(f"rank {rank} is outside the {world} NPUs", field="ranks")
        nodes = _rank_nodes(w, rank, layout, num_passes, scale)
        traces[rank] = Trace(metadata=make_metadata(), nodes=tuple(nodes), rank=rank, source=source)
    groups = dict(sorted(layout.groups.items(), key=lambda kv: int(kv[0])))  # ids from 1; the world is "0"
    meta_common = {
        A.META_WORLD_SIZE: world,
        A.META_SOURCE: f"xsim-convert text ({w.parallelism})",
        A.META_COMM_GROUPS: comm_groups_to_json({k: list(v) for k, v in groups.items()}),
    }
    for rank, tr in list(traces.items()):
        traces[rank] = Trace(metadata=make_metadata(**{A.META_RANK: rank, **meta_common}), nodes=tr.nodes,
                             rank=rank, source=source)
    return TextConversion(traces, groups, w)


def _rank_nodes(w: Workload, rank: int, layout: Layout, passes: int, scale: int) -> list[Node]:
    b = _RankNodes(w, rank, layout, scale)
    last: int | None = None
    grads: list[int] = []
    for p in range(passes):
        tag = f"p{p}_" if passes > 1 else ""
        prev = b.forward(tag, [last, *grads])
        last, grads = b.backward(tag, prev)
    # the iteration ends when the gradients are synchronised
    if grads:
        b.add("iteration_end", NodeType.COMP, [last, *grads], duration_micros=0, **{A.IS_CPU_OP: False, A.DURATION_NS: 0})
    return b.nodes


class _RankNodes:
    """One rank's nodes, built pass by pass: each returns the id of its last node (None: nothing yet)."""

    def __init__(self, w: Workload, rank: int, layout: Layout, scale: int) -> None:
        self.w, self.rank, self.layout, self.scale = w, rank, layout, scale
        self.nodes: list[Node] = []

    def add(self, name: str, ntype: NodeType, deps: list[int | None], **attrs: Any) -> int:
        nid = len(self.nodes)
        self.nodes.append(make_node(nid, name, ntype, data_deps=[d for d in dict.fromkeys(deps) if d is not None],
                                    **attrs))
        return nid

    def comp(self, name: str, time: int, deps: list[int | None]) -> int | None:
        if self.w.parallelism == "MICRO":  # a communication micro-benchmark: no compute
            return next((d for d in reversed(deps) if d is not None), None)
        ns = time * self.scale
        return self.add(name, NodeType.COMP, deps, duration_micros=(ns + NS_PER_US // 2) // NS_PER_US,
                        **{A.IS_CPU_OP: False, A.DURATION_NS: ns})

    def comm(self, name: str, c: Comm, dep: int | None) -> int | None:
        members = self.layout.members(self.rank, c.group)
        if len(members) < 2:
            return None  # a group of one moves nothing
        return self.add(f"{name}_{c.coll.name}", NodeType.COMM_COLL, [dep], **{
            A.IS_CPU_OP: False, A.COMM_TYPE: int(c.coll), A.COMM_SIZE: c.size_bytes,
            A.PG_NAME: self.layout.pg_name(members), A.COMM_KIND: _KIND[c.group]})

    def forward(self, tag: str, start_deps: list[int | None]) -> int | None:
        """The layers' forward compute and communication; the first layer waits on ``start_deps``."""
        w = self.w
        embedding_comm: int | None = None
        prev: int | None = None
        for i, layer in enumerate(w.layers):
            deps = [prev] if prev is not None else start_deps
            if w.dlrm_join is not None and i == w.dlrm_join and embedding_comm is not None:
                deps = [*deps, embedding_comm]
            c = self.comp(f"{tag}{layer.name}_FWD", layer.fwd_time, deps)
            prev = c
            if layer.fwd_comm is not None:
                m = self.comm(f"{tag}{layer.name}_FWD", layer.fwd_comm, c)
                if m is not None:
                    if w.parallelism == "HYBRID_DLRM" and i == 0:
                        embedding_comm = m
                    else:
                        prev = m
        return prev

    def backward(self, tag: str, prev: int | None) -> tuple[int | None, list[int]]:
        """The layers in reverse: weight gradient (its communication collected), then input gradient."""
        w = self.w
        grads: list[int] = []
        for layer in reversed(w.layers):
            first = layer is w.layers[0]
            wg = self.comp(f"{tag}{layer.name}_BWD_WG", layer.wg_time, [prev])
            if layer.wg_comm is not None:
                g = self.comm(f"{tag}{layer.name}_BWD_WG", layer.wg_comm, wg)
                if g is not None:
                    grads.append(g)
            # nothing consumes the first layer's input gradient: as the reference converter, no
            # input-gradient communication there (embedding all-to-alls still happen) and, for
            # DATA / HYBRID_DLRM, no input-gradient compute
            skip_ig = first and w.parallelism in ("DATA", "HYBRID_DLRM")
            ig = wg if skip_ig else self.comp(f"{tag}{layer.name}_BWD_IG", layer.ig_time, [wg])
            prev = ig
            if layer.ig_comm is not None and (not first or layer.ig_comm.coll is CollectiveType.ALL_TO_ALL):
                m = self.comm(f"{tag}{layer.name}_BWD_IG", layer.ig_comm, ig)
                if m is not None:
                    prev = m
        return prev, grads


def convert_text_file(path: str | os.PathLike[str], *, num_npus: int | None = None, num_passes: int = 1,
                      time_unit: str = "auto") -> TextConversion:
    from xsim_trace.io.documents import read_text

    name = os.fspath(path)
    text = read_text(name, "workload file", FormatError)
    return convert_workload(parse_workload(text, name), num_npus=num_npus, num_passes=num_passes,
                            time_unit=time_unit, source=name)
