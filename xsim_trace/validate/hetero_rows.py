"""Rows of a measured heterogeneous-training table (``../shared/reference/hetero_measured.csv``) parsed into
typed deployments: the model, the GPUs, and the plan as stages x data-parallel replicas with each rank's node.

Two plan forms are read (any CSV with the columns ``row_id, model_dims, seq, gbs, mbs, cluster, gpus, plan,
metric, value, notes``):

- Sailor: ``PP=2; S0: layers 0-11 on DP=1 [RTX-3090x2 TP2]; S1: layers 12-25 on DP=1 [Titan-RTXx2 TP2]; mbs=2;
  microbatches per pipeline replica=128``.  Layer indices are inclusive and count ``L + 2`` units (embedding,
  ``L`` blocks, head).  Each replica ``[GPUxN TPk]`` is one node (or VM) of N GPUs of one type.
- AMP: ``TP(mp)=1, DP=4, PP=4; layer boundaries [0, 7, 14, 20, 30] (AMP indexing, 30 units); mbs=1;
  grad-accum=8; ranks 0-15, node k = ranks 4k..4k+3``.  Boundaries are half-open over the ``L + 6`` units of
  Megatron-DeepSpeed's GPT-2 pipeline module (embedding, transpose, ``L`` blocks, transpose, final norm, tied
  head, fp32 cast).  Ranks follow DeepSpeed's pipe-major topology (rank = (stage * DP + replica) * TP + tp rank);
  the nodes take their GPU types from the ``gpus`` column in order (``V100x12 + T4x4`` with 4 GPUs per node:
  nodes 0-2 V100, node 3 T4).

Every problem is a :class:`RowError` naming the row and the column.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from xsim_trace.devices import get_device
from xsim_trace.errors import ConfigError

COLUMNS = ("row_id", "model_dims", "seq", "gbs", "mbs", "cluster", "gpus", "plan", "metric", "value", "notes")


class RowError(ConfigError):
    """A row that cannot be built: names the row and the column."""

    def __init__(self, row_id: str, column: str, message: str) -> None:
        super().__init__(message, row=row_id, column=column)
        self.row_id = row_id
        self.column = column


@dataclass(frozen=True, slots=True)
class RowModel:
    name: str
    num_layers: int
    hidden: int
    heads: int
    vocab: int
    ffn_hidden: int


@dataclass(frozen=True, slots=True)
class Placement:
    """The GPUs of one (replica, stage): their device, TP degree and node of every TP rank."""

    device: str  # canonical catalog name
    tp: int
    nodes: tuple[int, ...]  # node of each TP rank
    ranks: tuple[int, ...] = ()  # global ranks (AMP form; empty for Sailor)

    @property
    def spans_nodes(self) -> bool:
        return len(set(self.nodes)) > 1


@dataclass(frozen=True, slots=True)
class RowStage:
    units: tuple[int, int]  # [first, end) in the plan's own unit indexing
    layers: tuple[int, int]  # [first, end) transformer blocks
    embedding: bool
    head: bool
    replicas: tuple[Placement, ...]  # one per data-parallel replica
    final_norm: bool = False  # the final LayerNorm (Sailor: part of its head unit)

    @property
    def num_layers(self) -> int:
        return self.layers[1] - self.layers[0]


@dataclass(frozen=True, slots=True)
class RowPlan:
    form: str  # "sailor" | "amp"
    stages: tuple[RowStage, ...]
    micro_batch: int
    micro_batches: int  # per pipeline replica (gradient accumulation steps)
    node_devices: tuple[str, ...]  # device of each node
    gpus_per_node: tuple[int, ...]

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def dp(self) -> int:
        return len(self.stages[0].replicas)

    @property
    def world_size(self) -> int:
        return sum(p.tp for s in self.stages for p in s.replicas)


@dataclass(frozen=True, slots=True)
class HeteroRow:
    row_id: str
    model: RowModel
    seq_len: int
    global_batch: int
    plan: RowPlan
    cluster: str
    measured_s: float | None  # None for failed runs
    failed: bool
    heterogeneous: bool
    suspect: bool


@dataclass(frozen=True, slots=True)
class RawRow:
    """A row before building: enough to report it even when it cannot be built."""

    row_id: str
    fields: Mapping[str, str]

    @property
    def metric(self) -> str:
        return self.fields.get("metric", "").strip()

    @property
    def heterogeneous(self) -> bool:
        return self.fields.get("notes", "").lstrip().upper().startswith("HETEROGENEOUS")

    @property
    def suspect(self) -> bool:
        return "SUSPECT" in self.fields.get("notes", "")

    @property
    def failed(self) -> bool:
        return self.metric == "run_failed"


def read_rows(path: str | Path) -> list[RawRow]:
    """The CSV's rows (every column kept as text); a missing column is a ConfigError naming the file."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise ConfigError(f"missing column(s) {', '.join(missing)}", file=str(p))
            return [RawRow(str(r["row_id"]).strip() or f"line{i + 2}", {k: (v or "") for k, v in r.items() if k})
                    for i, r in enumerate(reader)]
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=str(p)) from None


# --- small field parsers -------------------------------------------------------------------------------------------
def _int(raw: RawRow, column: str) -> int:
    text = raw.fields.get(column, "").strip()
    if not re.fullmatch(r"\d+", text) or int(text) <= 0:
        raise RowError(raw.row_id, column, f"expected a positive integer, found {text!r}")
    return int(text)


def _search(raw: RawRow, column: str, pattern: str, what: str, default: int | None = None) -> int:
    m = re.search(pattern, raw.fields.get(column, ""), re.IGNORECASE)
    if not m:
        if default is not None:
            return default
        raise RowError(raw.row_id, column, f"no {what} found")
    return int(m.group(1))


def parse_model(raw: RawRow) -> RowModel:
    text = raw.fields.get("model_dims", "")
    layers = _search(raw, "model_dims", r"(\d+)\s+layers", "'<n> layers'")
    hidden = _search(raw, "model_dims", r"hidden\s+(\d+)", "'hidden <n>'")
    heads = _search(raw, "model_dims", r"(\d+)\s+heads", "'<n> heads'")
    vocab = _search(raw, "model_dims", r"vocab\s+(\d+)", "'vocab <n>'")
    ffn = _search(raw, "model_dims", r"ffn\s+(\d+)", "'ffn <n>'", default=4 * hidden)
    if hidden % heads:
        raise RowError(raw.row_id, "model_dims", f"hidden {hidden} is not divisible by {heads} heads")
    name = text.split(":", 1)[0].strip() or raw.fields.get("model", "").strip()
    return RowModel(name=name, num_layers=layers, hidden=hidden, heads=heads, vocab=vocab, ffn_hidden=ffn)


def _device(raw: RawRow, column: str, name: str) -> str:
    """The catalog device of a GPU name; a memory size the cluster column gives for that name
    (``4x V100-16GB each``) picks the variant (``V100`` alone is the catalog's 32 GB part)."""
    name = name.strip()
    m = re.search(re.escape(name) + r"[-\s]?(\d+)\s*GB", raw.fields.get("cluster", ""), re.IGNORECASE)
    if m:
        try:
            return get_device(f"{name}-{m.group(1)}GB").name
        except ConfigError:
            pass
    try:
        return get_device(name).name
    except ConfigError:
        raise RowError(raw.row_id, column, f"unknown GPU type {name.strip()!r} (not in the device catalog)") from None


_GPU_TERM = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9 .\-]*?)\s*x\s*(\d+)\s*$")


def parse_gpus(raw: RawRow) -> list[tuple[str, int]]:
    """``RTX-3090x8 + RTX-2080x16 (= 24 GPUs, ...)`` -> [(device, count), ...] in the column's order."""
    text = raw.fields.get("gpus", "").split("(", 1)[0]
    out = []
    for term in text.split("+"):
        m = _GPU_TERM.match(term)
        if not m:
            raise RowError(raw.row_id, "gpus", f"expected '<GPU>x<count>' terms joined by '+', found {term.strip()!r}")
        out.append((_device(raw, "gpus", m.group(1)), int(m.group(2))))
    if not out:
        raise RowError(raw.row_id, "gpus", "no GPUs")
    return out


# --- Sailor form ---------------------------------------------------------------------------------------------------
_SAILOR_STAGE = re.compile(r"S(\d+)\s*:\s*layers\s+(\d+)\s*-\s*(\d+)\s+on\s+DP\s*=\s*(\d+)\s*\[([^\]]*)\]", re.IGNORECASE)
_SAILOR_REPLICA = re.compile(r"^\s*(.+?)\s*x\s*(\d+)\s+TP\s*(\d+)\s*$", re.IGNORECASE)


def _blocks(units: tuple[int, int], first_block_unit: int, model: RowModel) -> tuple[int, int]:
    """Transformer blocks [first, end) inside a unit range whose blocks start at unit ``first_block_unit``."""
    a, b = units
    lo = min(max(a - first_block_unit, 0), model.num_layers)
    hi = min(max(b - first_block_unit, 0), model.num_layers)
    return (lo, max(lo, hi))


def _check_cover(raw: RawRow, ranges: list[tuple[int, int]], total: int) -> None:
    expect = 0
    for a, b in ranges:
        if a != expect or b <= a:
            raise RowError(raw.row_id, "plan", f"stage units [{a}, {b}) do not follow on from unit {expect}")
        expect = b
    if expect != total:
        raise RowError(raw.row_id, "plan", f"layer boundaries end at unit {expect}, the model has {total} units")


def parse_sailor_plan(raw: RawRow, model: RowModel, gpus: list[tuple[str, int]]) -> RowPlan:
    text = raw.fields.get("plan", "")
    pp = _search(raw, "plan", r"PP\s*=\s*(\d+)", "'PP=<n>'")
    mbs = _search(raw, "plan", r"mbs\s*=\s*(\d+)", "'mbs=<n>'")
    m_count = _search(raw, "plan", r"microbatches per pipeline replica\s*=\s*(\d+)", "'microbatches per pipeline replica=<n>'")
    found = list(_SAILOR_STAGE.finditer(text))
    if len(found) != pp:
        raise RowError(raw.row_id, "plan", f"PP={pp} but {len(found)} stage(s) 'S<i>: layers a-b on DP=n [...]'")
    units_total = model.num_layers + 2
    ranges = [(int(m.group(2)), int(m.group(3)) + 1) for m in found]
    _check_cover(raw, ranges, units_total)
    node_devices: list[str] = []
    node_sizes: list[int] = []
    stages = []
    dp = None
    for m, units in zip(found, ranges):
        reps = [r for r in m.group(5).split("|")]
        if int(m.group(4)) != len(reps):
            raise RowError(raw.row_id, "plan", f"S{m.group(1)}: DP={m.group(4)} but {len(reps)} replica(s) listed")
        if dp is None:
            dp = len(reps)
        elif dp != len(reps):
            raise RowError(raw.row_id, "plan", f"S{m.group(1)}: DP={len(reps)}, stage S0 has DP={dp}")
        placements = []
        for rep in reps:
            rm = _SAILOR_REPLICA.match(rep)
            if not rm:
                raise RowError(raw.row_id, "plan", f"expected '<GPU>x<n> TP<k>', found {rep.strip()!r}")
            dev, n, tp = _device(raw, "plan", rm.group(1)), int(rm.group(2)), int(rm.group(3))
            if tp != n:
                raise RowError(raw.row_id, "plan", f"replica {rep.strip()!r}: TP{tp} on {n} GPUs (one TP group per node)")
            node = len(node_devices)
            node_devices.append(dev)
            node_sizes.append(n)
            placements.append(Placement(dev, tp, (node,) * tp))
        head = units[1] == units_total
        stages.append(RowStage(units, _blocks(units, 1, model), units[0] == 0, head, tuple(placements), head))
    plan = RowPlan("sailor", tuple(stages), mbs, m_count, tuple(node_devices), tuple(node_sizes))
    _check_gpus(raw, plan, gpus)
    return plan


def _check_gpus(raw: RawRow, plan: RowPlan, gpus: list[tuple[str, int]]) -> None:
    want: dict[str, int] = {}
    for dev, n in gpus:
        want[dev] = want.get(dev, 0) + n
    have: dict[str, int] = {}
    for s in plan.stages:
        for p in s.replicas:
            have[p.device] = have.get(p.device, 0) + p.tp
    if want != have:
        fmt = lambda d: " + ".join(f"{k}x{v}" for k, v in sorted(d.items()))  # noqa: E731
        raise RowError(raw.row_id, "gpus", f"the plan uses {fmt(have)}, the gpus column lists {fmt(want)}")


# --- AMP form ------------------------------------------------------------------------------------------------------
def parse_amp_plan(raw: RawRow, model: RowModel, gpus: list[tuple[str, int]]) -> RowPlan:
    text = raw.fields.get("plan", "")
    tp = _search(raw, "plan", r"TP(?:\(mp\))?\s*=\s*(\d+)", "'TP(mp)=<n>'")
    dp = _search(raw, "plan", r"DP\s*=\s*(\d+)", "'DP=<n>'")
    pp = _search(raw, "plan", r"PP\s*=\s*(\d+)", "'PP=<n>'")
    mbs = _search(raw, "plan", r"mbs\s*=\s*(\d+)", "'mbs=<n>'")
    ga = _search(raw, "plan", r"grad-accum\s*=\s*(\d+)", "'grad-accum=<n>'")
    m = re.search(r"boundaries\s*\[([^\]]*)\]", text)
    if not m:
        raise RowError(raw.row_id, "plan", "no 'layer boundaries [...]'")
    try:
        bounds = [int(x) for x in m.group(1).split(",")]
    except ValueError:
        raise RowError(raw.row_id, "plan", f"layer boundaries are not integers: [{m.group(1)}]") from None
    units_total = model.num_layers + 6
    stated = _search(raw, "plan", r"(\d+)\s+units", "'<n> units'", default=units_total)
    if stated != units_total:
        raise RowError(raw.row_id, "plan", f"{stated} units stated, a {model.num_layers}-layer model has {units_total}")
    if len(bounds) != pp + 1:
        raise RowError(raw.row_id, "plan", f"PP={pp} needs {pp + 1} boundaries, found {len(bounds)}")
    ranges = list(zip(bounds[:-1], bounds[1:]))
    _check_cover(raw, ranges, units_total)
    rm = re.search(r"ranks\s+(\d+)\s*-\s*(\d+)", text)
    world = tp * dp * pp
    if rm and (int(rm.group(1)), int(rm.group(2))) != (0, world - 1):
        raise RowError(raw.row_id, "plan", f"ranks {rm.group(1)}-{rm.group(2)} do not match TP*DP*PP = {world}")
    per_node = _search(raw, "plan", r"node k = ranks\s*(\d+)\s*k\s*\.\.", "'node k = ranks <n>k..'", default=0)
    if not per_node:
        per_node = _search(raw, "gpus", r"x\s*(\d+)\s*\)", "'(<nodes> nodes x <gpus>)'", default=0)
    if not per_node:
        raise RowError(raw.row_id, "plan", "no node size ('node k = ranks 4k..4k+3')")
    total = sum(n for _, n in gpus)
    if total != world:
        raise RowError(raw.row_id, "gpus", f"{total} GPUs listed, the plan's TP*DP*PP is {world}")
    if total % per_node:
        raise RowError(raw.row_id, "gpus", f"{total} GPUs do not fill nodes of {per_node}")
    rank_dev = [dev for dev, n in gpus for _ in range(n)]
    node_devices = []
    for k in range(total // per_node):
        devs = set(rank_dev[k * per_node:(k + 1) * per_node])
        if len(devs) != 1:
            raise RowError(raw.row_id, "gpus", f"node {k} would mix {', '.join(sorted(devs))}")
        node_devices.append(devs.pop())
    stages = []
    for s, units in enumerate(ranges):
        reps = []
        for r in range(dp):
            ranks = tuple((s * dp + r) * tp + t for t in range(tp))
            devs = {rank_dev[x] for x in ranks}
            if len(devs) != 1:
                raise RowError(raw.row_id, "plan", f"stage {s} replica {r}: TP group mixes {', '.join(sorted(devs))}")
            reps.append(Placement(devs.pop(), tp, tuple(x // per_node for x in ranks), ranks))
        a, b = units
        norm_unit, head_unit = model.num_layers + 3, model.num_layers + 4
        stages.append(RowStage(units, _blocks(units, 2, model), a == 0, a <= head_unit < b, tuple(reps),
                               a <= norm_unit < b))
    return RowPlan("amp", tuple(stages), mbs, ga, tuple(node_devices), (per_node,) * len(node_devices))


def parse_plan(raw: RawRow, model: RowModel, gpus: list[tuple[str, int]]) -> RowPlan:
    text = raw.fields.get("plan", "")
    if re.search(r"boundaries", text):
        return parse_amp_plan(raw, model, gpus)
    if re.search(r"\bS0\s*:", text):
        return parse_sailor_plan(raw, model, gpus)
    raise RowError(raw.row_id, "plan", f"neither the Sailor nor the AMP plan form: {text[:60]!r}")


def parse_row(raw: RawRow) -> HeteroRow:
    """A buildable row, or a RowError naming the row and the first column that is wrong."""
    if raw.metric not in ("iteration_time", "run_failed"):
        raise RowError(raw.row_id, "metric", f"metric {raw.metric!r} is not an iteration time (nothing to predict)")
    model = parse_model(raw)
    seq, gbs, mbs = _int(raw, "seq"), _int(raw, "gbs"), _int(raw, "mbs")
    gpus = parse_gpus(raw)
    plan = parse_plan(raw, model, gpus)
    if plan.micro_batch != mbs:
        raise RowError(raw.row_id, "mbs", f"mbs {mbs}, the plan says mbs={plan.micro_batch}")
    if plan.micro_batch * plan.micro_batches * plan.dp != gbs:
        raise RowError(raw.row_id, "gbs", f"gbs {gbs} != mbs {mbs} x {plan.micro_batches} micro-batches x DP {plan.dp}")
    for s, st in enumerate(plan.stages):
        for p in st.replicas:
            if model.heads % p.tp:
                raise RowError(raw.row_id, "plan", f"stage {s}: TP {p.tp} does not divide the {model.heads} heads")
    measured = None
    if not raw.failed:
        text = raw.fields.get("value", "").strip()
        try:
            measured = float(text)
        except ValueError:
            raise RowError(raw.row_id, "value", f"expected seconds, found {text!r}") from None
        if not math.isfinite(measured) or measured <= 0:
            raise RowError(raw.row_id, "value", f"expected positive seconds, found {text!r}")
    return HeteroRow(raw.row_id, model, seq, gbs, plan, raw.fields.get("cluster", ""), measured, raw.failed,
                     raw.heterogeneous, raw.suspect)


def iter_rows(raws: Iterable[RawRow]) -> Iterator[tuple[RawRow, HeteroRow | RowError]]:
    for raw in raws:
        try:
            yield raw, parse_row(raw)
        except RowError as exc:
            yield raw, exc


__all__ = ["COLUMNS", "HeteroRow", "Placement", "RawRow", "RowError", "RowModel", "RowPlan", "RowStage",
           "iter_rows", "parse_amp_plan", "parse_gpus", "parse_model", "parse_plan", "parse_row",
           "parse_sailor_plan", "read_rows"]
