"""HexiScale / FlashFlex MFU rows predicted: the run rebuilt from what the repository publishes, the plan chosen by
xsim's own plan search, the predicted step time turned into an MFU by the repository's formula.

A FlashFlex row (``metric`` = ``MFU``; github.com/Relaxed-System-Lab/FlashFlex README "Performance Results") gives a
cluster, a model and a measured MFU, no batch and no plan.  The prediction fills the run in as a user would, every
choice either read in the repository or a stated default of this tool (docs/validation.md lists them per row):

- model: the row's layers / hidden / heads, FFN by Llama's rule (``multiple_of`` 256 over ``8h/3``; Meta's llama
  ``model.py``), vocabulary 32000 and sequence 4096 (``experimental/config.py``; ``hexiscale/process_args.py``
  forces ``seq_length = 4096``), fp16 (``scripts/train.sh --fp16 --mixed_precision fp16``), flash attention
  (``--use-flash-attn``), full activation recompute (``--checkpoint-layers --checkpoint-all``);
- micro-batch 1 (``experimental/arguments.py --micro_bsz`` default 1; every launch example runs one sequence per
  micro-batch); global batch: the row's ``gbs`` when given, else ``xsim plan search``'s default (64);
- schedule GPipe (``llama/arguments.py --pipeline-type`` default ``Gpipe``; FlashFlex has no interleaving);
- the cluster: nodes from the ``cluster`` column (``1x8 RTX 3090`` = one node of eight, ``2 nodes x 8x A100-PCIe``),
  GPUs from the catalog; inside a node NVLink where the column says NVLink, else the device's PCIe link at the
  fitted PCIe efficiency; between nodes one Ethernet NIC per node at FlashFlex's own assumed inter-machine
  bandwidth (``experimental/arguments.py --inter_bw`` default 5, GiB/s by ``experimental/utils.py``), through
  xsim's TCP model (:func:`~xsim_trace.validate.hetero_predict.nic_achievable_gbps`);
- the engine: FlashFlex wraps every layer in FSDP ``SHARD_GRAD_OP`` when its data-parallel peers share a TP size
  (``llama/modules/hybrid_parallel_model_dist.py`` ``get_hybrid_parallel_configs``; ``hexiscale/wrap_modules.py``),
  with ``MixedPrecision(reduce_dtype=fp16)``: the optimizer state is sharded over the replicas and gradients move in
  fp16; ``hexiscale/fsdp_hooks_utils.py`` removes the post-backward reduce-scatter hooks for every micro-batch but
  the last, so the gradient sync happens once per iteration (parameters gathered once and kept, not per
  micro-batch), which is the volume of one all-reduce;  ``--devices_id`` (``scripts/generate_hetero_scripts.sh``)
  puts stage k of every pipeline on one machine: a stage's DP peers share a node (``placement="stage"``); the
  README's homogeneous baselines ran Megatron (1F1B, no distributed optimizer, TP-DP-PP rank order: the same
  placement); both engines run on every GPU of the cluster (``every_device``);
- the plan: ``xsim plan search`` (objective step, closed form) over that cluster and model;
- the MFU: ``96 L B s h^2 (1 + s/6h + V/16Lh)`` FLOPs per step over the step time and the summed peak of every GPU
  of the row, peaks from ``experimental/machine_amounts.json`` in units of 2^40 FLOP/s
  (:mod:`xsim_trace.validate.hetero_mfu`).

The measured MFU at that batch is an iteration time (FLOPs / (MFU x peak)); the row's error is the predicted step
against it, like every timed row.  What the prediction does not describe (HexiScale's own partitioner, which need
not find the closed form's optimum; the consumer GPUs' uncalibrated GEMM rate) is in docs/validation.md.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from xsim_trace.devices import get_device
from xsim_trace.errors import ConfigError
from xsim_trace.plan.model import DeviceGroup
from xsim_trace.plan.model_spec import ModelSpec
from xsim_trace.plan.schedules import Schedule
from xsim_trace.plan.space import Space
from xsim_trace.units import GBps_to_gbps
from xsim_trace.validate.hetero_mfu import (
    FLASHFLEX_PEAK_TFLOPS,
    FLASHFLEX_SEQ,
    FLASHFLEX_TFLOPS_UNIT,
    FLASHFLEX_VOCAB,
    flashflex_flops_per_token,
)
from xsim_trace.validate.hetero_rows import RawRow, RowError, parse_gpus

#: micro-batch of every FlashFlex run (experimental/arguments.py ``--micro_bsz`` default 1)
FLASHFLEX_MICRO_BATCH = 1
#: FSDP's gradient dtype: ``hexiscale/wrap_modules.py`` builds ``MixedPrecision(reduce_dtype=mixed_precision)``, fp16
#: under ``--mixed_precision fp16`` (scripts/train.sh), so the DP reduction moves 2 bytes per parameter
FLASHFLEX_GRAD_REDUCE_BYTES = 2
#: global batch when the row gives none: ``xsim plan search``'s own default (``--gbs 64``), not a FlashFlex figure
DEFAULT_GLOBAL_BATCH = 64
#: FlashFlex's assumed inter-machine bandwidth (experimental/arguments.py ``--inter_bw`` default 5; GiB/s, as
#: experimental/utils.py multiplies it by 1024**3)
FLASHFLEX_INTER_GiBps = 5.0
#: the plan search's budget per row, counted in structures costed (best lower bound first) instead of wall seconds,
#: so that the chosen plan does not depend on the machine.  With every GPU in use (``Space.every_device``) the
#: README clusters have 14-16,216 structures and branch and bound ends on its own after 2-3,432 of them (seconds),
#: so the budget is only a guard: each row's plan is the closed form's optimum over the space
SEARCH_STRUCTURES = 50_000


@dataclass(frozen=True, slots=True)
class NodeSet:
    device: str  # catalog name
    nodes: int
    per_node: int
    nvlink: bool  # the cluster column says NVLink for this GPU


@dataclass(frozen=True, slots=True)
class FlashFlexRun:
    """What the prediction assumes for one row (every field sourced in the module doc or docs/validation.md)."""

    row_id: str
    model: ModelSpec
    global_batch: int
    gbs_from_row: bool
    node_sets: tuple[NodeSet, ...]
    peak_tflops: float  # summed repository peaks ("TFLOPS" of 2^40)
    measured_mfu_pct: float
    megatron: bool = False  # the README's homogeneous baselines ran Megatron, not FlashFlex (the ``plan`` column)

    @property
    def flops_per_step(self) -> float:
        m = self.model
        return flashflex_flops_per_token(m.num_layers, m.hidden, m.seq_len, m.vocab) * self.global_batch * m.seq_len

    def seconds_at_mfu(self, mfu_pct: float) -> float:
        return self.flops_per_step / (mfu_pct / 100.0 * self.peak_tflops * FLASHFLEX_TFLOPS_UNIT)

    def mfu_pct_at(self, seconds: float) -> float:
        return self.flops_per_step / (seconds * self.peak_tflops * FLASHFLEX_TFLOPS_UNIT) * 100.0


@dataclass(frozen=True, slots=True)
class FlashFlexPrediction:
    run: FlashFlexRun
    step_s: float
    plan_text: str
    search_scope: str = ""

    @property
    def measured_s(self) -> float:
        return self.run.seconds_at_mfu(self.run.measured_mfu_pct)

    @property
    def predicted_mfu_pct(self) -> float:
        return self.run.mfu_pct_at(self.step_s)

    def note(self) -> str:
        r = self.run
        return (f"MFU measured {r.measured_mfu_pct:.2f}% predicted {self.predicted_mfu_pct:.2f}% at gbs "
                f"{r.global_batch}{'' if r.gbs_from_row else ' (assumed)'} x seq {r.model.seq_len}; searched plan "
                f"{self.plan_text} ({self.search_scope})")


def llama_ffn(hidden: int, multiple_of: int = 256) -> int:
    """Llama's SwiGLU width: ``2/3`` of ``4h`` rounded up to ``multiple_of`` (Meta's llama ``model.py``)."""
    return multiple_of * math.ceil(int(2 * 4 * hidden / 3) / multiple_of)


def _dim(raw: RawRow, pattern: str, what: str, default: int | None = None) -> int:
    m = re.search(pattern, raw.fields.get("model_dims", ""), re.IGNORECASE)
    if not m:
        if default is not None:
            return default
        raise RowError(raw.row_id, "model_dims", f"no {what} found")
    return int(m.group(1))


def _positive(raw: RawRow, column: str, default: int) -> tuple[int, bool]:
    text = raw.fields.get(column, "").strip()
    if not text:
        return default, False
    if not re.fullmatch(r"\d+", text) or int(text) <= 0:
        raise RowError(raw.row_id, column, f"expected a positive integer or nothing, found {text!r}")
    return int(text), True


def flashflex_model(raw: RawRow) -> ModelSpec:
    layers = _dim(raw, r"(\d+)\s+layers", "'<n> layers'")
    hidden = _dim(raw, r"hidden\s+(\d+)", "'hidden <n>'")
    heads = _dim(raw, r"(\d+)\s+heads", "'<n> heads'")
    if hidden % heads:
        raise RowError(raw.row_id, "model_dims", f"hidden {hidden} is not divisible by {heads} heads")
    ffn = _dim(raw, r"ffn\s+(\d+)", "'ffn <n>'", default=llama_ffn(hidden))
    vocab = _dim(raw, r"vocab\s+(\d+)", "'vocab <n>'", default=FLASHFLEX_VOCAB)
    seq, _ = _positive(raw, "seq", FLASHFLEX_SEQ)
    mbs, _ = _positive(raw, "mbs", FLASHFLEX_MICRO_BATCH)
    name = raw.fields.get("model", "").strip() or "llama"
    return ModelSpec(num_layers=layers, hidden=hidden, heads=heads, ffn_hidden=ffn, vocab=vocab, seq_len=seq,
                     micro_batch_size=mbs, gated_mlp=True, name=name, recompute=True, flash_attention=True,
                     grad_reduce_bytes=FLASHFLEX_GRAD_REDUCE_BYTES)


#: ``1x8 RTX 3090-24G`` (nodes x GPUs per node, then the GPU) or ``2 nodes x 8x A100-PCIe``
_NODE_TERM = re.compile(r"(\d+)\s*(?:nodes?\s*)?x\s*(\d+)\s*x?\s*(?:NVIDIA\s+|RTX\s+|GeForce\s+)*([A-Za-z]*\d+[A-Za-z]*"
                        r"(?:-PCIe)?)", re.IGNORECASE)


def node_sets(raw: RawRow) -> tuple[NodeSet, ...]:
    """The nodes of the ``cluster`` column, checked against the ``gpus`` column's devices and counts."""
    text = raw.fields.get("cluster", "")
    gpus = parse_gpus(raw)
    want: dict[str, int] = {}
    for dev, n in gpus:
        want[dev] = want.get(dev, 0) + n
    out: list[NodeSet] = []
    for term in re.split(r"\+|;|,(?![^()]*\))", text):
        m = _NODE_TERM.search(term)
        if not m:
            continue
        name = m.group(3)
        dev = next((d for d in want if _same_gpu(name, d)), None)
        if dev is None:
            raise RowError(raw.row_id, "cluster", f"{m.group(0).strip()!r}: GPU {name!r} is not in the gpus column "
                                                  f"({', '.join(sorted(want))})")
        out.append(NodeSet(dev, int(m.group(1)), int(m.group(2)), "nvlink" in term.lower()))
    if not out:
        raise RowError(raw.row_id, "cluster", "no nodes found ('<nodes>x<GPUs per node> <GPU>' or "
                                              "'<n> nodes x <k>x <GPU>')")
    have: dict[str, int] = {}
    for ns in out:
        have[ns.device] = have.get(ns.device, 0) + ns.nodes * ns.per_node
    if have != want:
        fmt = lambda d: " + ".join(f"{k}x{v}" for k, v in sorted(d.items()))  # noqa: E731
        raise RowError(raw.row_id, "cluster", f"the nodes hold {fmt(have)}, the gpus column lists {fmt(want)}")
    return tuple(out)


def _same_gpu(name: str, device: str) -> bool:
    try:
        return get_device(name).name == device
    except ConfigError:
        return False


def flashflex_run(raw: RawRow) -> FlashFlexRun:
    """The run a FlashFlex MFU row describes, with the published defaults and the tool's for what is missing."""
    text = raw.fields.get("value", "").strip()
    try:
        mfu = float(text)
    except ValueError:
        raise RowError(raw.row_id, "value", f"expected an MFU in %, found {text!r}") from None
    if not math.isfinite(mfu) or not 0 < mfu <= 100:
        raise RowError(raw.row_id, "value", f"expected an MFU in (0, 100] %, found {text!r}")
    model = flashflex_model(raw)
    gbs, from_row = _positive(raw, "gbs", DEFAULT_GLOBAL_BATCH)
    if gbs % model.micro_batch_size:
        raise RowError(raw.row_id, "gbs", f"gbs {gbs} is not a multiple of the micro-batch {model.micro_batch_size}")
    sets = node_sets(raw)
    peak = 0.0
    for ns in sets:
        if ns.device not in FLASHFLEX_PEAK_TFLOPS:
            raise RowError(raw.row_id, "gpus", f"{ns.device} has no peak in FlashFlex's experimental/machine_amounts.json")
        peak += FLASHFLEX_PEAK_TFLOPS[ns.device] * ns.nodes * ns.per_node
    megatron = "megatron" in raw.fields.get("plan", "").lower()
    return FlashFlexRun(raw.row_id, model, gbs, from_row, sets, peak, mfu, megatron)


def plan_groups(run: FlashFlexRun, pcie_efficiency: float, nvlink_efficiency: float, nic_gbps_per_node: float
                ) -> tuple[DeviceGroup, ...]:
    """One plan-search device group per node set: intra-node at the achievable NVLink or PCIe rate, the node's
    NIC rate split over its GPUs."""
    out = []
    for i, ns in enumerate(run.node_sets):
        spec = get_device(ns.device)
        if ns.nvlink and spec.nvlink_unidir_GBps:
            intra = spec.nvlink_unidir_GBps * nvlink_efficiency
        else:
            intra = spec.pcie_GBps * pcie_efficiency
        name = f"{ns.device.lower()}-{ns.per_node}g-{i}"
        out.append(DeviceGroup(name, spec, ns.nodes * ns.per_node, ns.per_node, intra,
                               nic_gbps_per_node / ns.per_node))
    return tuple(out)


def search_space(run: FlashFlexRun, groups: tuple[DeviceGroup, ...]) -> Space:
    """What the engine that ran the row can deploy: every GPU of the cluster, a stage's data-parallel replicas side
    by side (FlashFlex's ``--devices_id`` puts stage k of every pipeline on one machine; Megatron's rank order is
    TP, then DP, then PP); FlashFlex: GPipe with the optimizer state sharded over DP (FSDP ``SHARD_GRAD_OP``);
    Megatron: 1F1B, every replica holding its whole optimizer state (no ``--use-distributed-optimizer``)."""
    schedule = Schedule.ONE_F_ONE_B if run.megatron else Schedule.GPIPE
    return Space(groups, run.model, run.global_batch // run.model.micro_batch_size,
                 schedules=((schedule, 1),), distributed_optimizer=not run.megatron, placement="stage",
                 every_device=True)


def predict_flashflex(raw: RawRow, cal) -> FlashFlexPrediction:
    """Rebuild the row's run, search its plan, and time the best plan (closed form)."""
    from xsim_trace.layer_templates.template import templates_from_model
    from xsim_trace.plan.search import search
    from xsim_trace.validate.hetero_predict import nic_achievable_gbps

    run = flashflex_run(raw)
    line_gbps = GBps_to_gbps(FLASHFLEX_INTER_GiBps * 2**30 / 1e9)  # GiB/s -> GB/s -> Gb/s
    nic = nic_achievable_gbps(line_gbps, "ethernet", cal)
    groups = plan_groups(run, cal.pcie_efficiency, cal.nvlink_efficiency, nic)
    space = search_space(run, groups)
    template = templates_from_model(run.model, groups[0].device_spec, 1)
    counter = itertools.count()  # the search's clock: one tick per structure costed
    try:
        result = search(space, template, objective="step", top_k=1, budget_s=SEARCH_STRUCTURES, replay_top=0,
                        clock=lambda: float(next(counter)))
    except ConfigError as exc:
        raise RowError(raw.row_id, "gpus", f"the plan search finds no plan: {exc.message}") from None
    best, st = result.best, result.stats
    scope = (f"best of the first {st.evaluated} of {st.candidates} structures by lower bound" if st.budget_hit
             else f"{st.evaluated} of {st.candidates} structures costed, the rest bounded out")
    return FlashFlexPrediction(run, best.step_ns / 1e9, best.candidate.text(), scope)


__all__ = ["DEFAULT_GLOBAL_BATCH", "FLASHFLEX_INTER_GiBps", "FLASHFLEX_MICRO_BATCH", "FlashFlexPrediction",
           "FlashFlexRun", "NodeSet", "SEARCH_STRUCTURES", "flashflex_model", "flashflex_run", "llama_ffn", "node_sets", "plan_groups",
           "predict_flashflex", "search_space"]
