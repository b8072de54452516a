#!/usr/bin/env python3
"""Predict the measured Megatron-LM step times in ../shared/reference/ and print simulated vs
measured with the % error per row and the median absolute error.

Rows: megatron_ci_step_times.csv (Megatron-LM CI, DGX A100 / DGX H100, 1 node x 8 GPUs) and
megatron_sc21_a100.csv (Narayanan et al. SC'21, DGX A100 nodes).  Path: CI rows are generated
as Chakra rank sets by xsim_trace.workload and replayed by xsim_trace.replay (analytical backend,
dgx-a100:1 / dgx-h100:1); --estimate-only (and the SC'21 rows always) use the generator's closed
form (xsim_trace.workload.estimate) over the same Program.

Calibration (one per CSV golden = container x system, fitted once over all CI rows of that golden,
never per row; see CALIBRATION below and docs/workload.md): the host-side cost per framework module
call of that Megatron CI container (PyTorch eager + Python), which dominates these small models.
Rows that use a feature the generator lacks are predicted, flagged ``oos`` with the reason
(OUT_OF_SCOPE) and reported both inside "all" and apart from "in scope".

usage: tools/accuracy_megatron.py [--reference DIR] [--csv OUT] [--fit] [--all] [--estimate-only]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from xsim_trace.devices import DeviceSpec, get_device
from xsim_trace.errors import XsimError
from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.estimate import estimate
from xsim_trace.workload.families import MEGATRON_CORE, FrameworkFamily
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.host import HostModel
from xsim_trace.workload.model import ModelSpec
from xsim_trace.workload.program import Program
from xsim_trace.workload.timing import Timer

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO.parent / "shared" / "reference"

#: systems of the reference rows: device, NIC line rate per GPU (Gb/s)
SYSTEMS = {
    "dgx_a100": ("A100-SXM4-80GB", 200.0),
    "dgx_h100": ("H100-SXM5-80GB", 400.0),
}

#: One calibration per (container, device type), the CSV's ``golden`` column (dev / lts container x
#: DGX A100 / DGX H100): the host (Python + PyTorch eager) cost of that container, which sets the
#: pace of these small host-bound models.  ``host_module_ns`` is the cost of one framework module
#: call (a FrameworkFamily field: each golden is the megatron-core family with its own host costs);
#: the other two are HostModel fields (xsim_trace.workload.host):
#: an MoE-block module call costs ``moe_factor`` calls, the unfused attention core
#: ``attention_core_factor`` calls, and every call of a run with TE's deterministic kernels (most CI
#: cases: NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, tools/data/megatron_ci_cases.csv) ``deterministic_factor``
#: times more (``host_module_ns`` is the cost without).  Each golden's four values maximize the rows within 10% (ties:
#: the lower median |error|) over ALL CI rows of that golden (in scope or not), closed form, by
#: coordinate descent over FIT_GRIDS (``--fit`` redoes it, ``--cv K`` cross-validates it).  The dev and lts containers differ by ~30% on
#: identical configurations, so one value per device type cannot serve both.  The SC'21 rows (key
#: ``sc21``) use the lts_dgx_a100 per-call value, not fitted on them (they are GPU bound).
CALIBRATION: dict[str, dict[str, float]] = {
    "dev_dgx_a100": {"host_module_ns": 380_000, "moe_factor": 0.8, "attention_core_factor": 1.2, "deterministic_factor": 1.0, "local_impl_factor": 0.8},
    "lts_dgx_a100": {"host_module_ns": 263_636, "moe_factor": 2.0, "attention_core_factor": 1.5, "deterministic_factor": 1.1, "local_impl_factor": 1.0},
    "dev_dgx_h100": {"host_module_ns": 245_455, "moe_factor": 1.4, "attention_core_factor": 1.5, "deterministic_factor": 1.1, "local_impl_factor": 0.7},
    "sc21": {},  # the megatron-core family's defaults (host cost is negligible there)
}

#: CI rows whose test case turns on a feature the generator does not represent.  They are still
#: predicted and printed (flagged ``oos``); the summary gives figures over all rows and over the
#: rows in scope.  Substring of the test case name -> reason.
OUT_OF_SCOPE = {
    "muon": "Muon optimizer (Newton-Schulz iterations per step); the generator models Adam only",
    "fine_grained_offloading": "fine-grained activation offloading to host memory (D2H/H2D copies) not modelled",
    "tunable_overlap": "tunable TP/DP communication overlap schedule not modelled",
    "_mla": "multi-latent attention: the test case's MLA dimensions (q/kv LoRA ranks, head dims) are not in the table",
    "cudagraph": "CUDA graphs (replaced host launches) not modelled",
    "tp_overlap": "TP communication overlap with userbuffers not modelled",
    "a2a_ovlp": "EP all-to-all overlap with compute not modelled",
    "_mtp_": "multi-token prediction heads not modelled",
    "deepseek_proxy": "DeepSeek proxy: multi-latent attention whose dimensions are not in the table, EP all-to-all overlap",
    "qk_layernorm": "QK layernorm in test mode not modelled",
    "ep4_etp1_memory_speed": "multi-latent attention, multi-token prediction and shared experts (model_config.yaml)",
    "selective_recompute_experimental": "multi-latent attention, multi-token prediction and EP all-to-all overlap (model_config.yaml)",
}

#: CI families this generator cannot express (not a decoder/encoder stack of identical layers, or
#: not a plain pre-training step): skipped with the reason printed under --all
EXCLUDE = {
    "t5/": "encoder-decoder T5 (no layer count in the table)",
    "hybrid/": "hybrid Mamba/attention stack",
    "multimodal-llava/": "vision encoder + LLM",
    "mimo/": "vision-language model",
    "_grpo_": "RL (GRPO) step with generation, not a training step",
}


@dataclass(frozen=True)
class Row:
    source: str
    name: str
    system: str
    golden: str  # calibration key: the CSV's container x system, or "sc21"
    model: ModelSpec
    fw: Framework
    measured_s: float


def _int(v: str, default: int = 0) -> int:
    return int(v) if v not in ("", None) else default


#: per test case, the run settings the reference CSV does not carry (model_config.yaml of the test case)
CASES_CSV = Path(__file__).resolve().parent / "data" / "megatron_ci_cases.csv"


@dataclass(frozen=True)
class CaseConfig:
    """What a Megatron CI test case's model_config.yaml sets beyond the reference CSV's columns."""

    deterministic: bool  # NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (with or without --deterministic-mode)
    attention_backend: str  # auto | flash | unfused | local
    transformer_impl: str  # transformer_engine | local
    layers_per_virtual_stage: int  # --num-layers-per-virtual-pipeline-stage (0: absent)
    virtual_stages: int  # --num-virtual-stages-per-pipeline-rank (0: absent)
    moe_topk: int
    moe_ffn: int
    moe_grouped_gemm: bool  # --moe-grouped-gemm (not a generator input: see docs/workload.md, MoE misses)
    #: read where the model_config.yaml was read for them, None = not read (the tool's default / the name)
    vocab: int | None = None  # --vocab-size
    kv_heads: int | None = None  # --num-query-groups
    untie_embeddings: bool | None = None
    swiglu: bool | None = None
    dist_optimizer: bool | None = None
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    rope_fusion: bool | None = None  # False: --no-rope-fusion
    #: --position-embedding-type (every case read; Megatron's default learned_absolute where absent)
    position_embedding: str = "learned_absolute"
    moe_dispatcher: str = ""  # --moe-token-dispatcher-type (MoE cases; Megatron's default allgather where absent)
    #: --moe-router-load-balancing-type (MoE cases; recorded for the residual analysis, not a generator input:
    #: the aux-loss router's kernels were tried and not kept, docs/workload.md)
    moe_router_lb: str = ""


def _opt_int(v: str) -> int | None:
    return int(v) if v else None


def _opt_bool(v: str) -> bool | None:
    return {"true": True, "false": False}.get(v)


def load_cases(path: Path = CASES_CSV) -> dict[str, CaseConfig]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    out = {}
    for r in csv.DictReader(lines):
        out[r["test_case"]] = CaseConfig(
            deterministic=r["deterministic"] == "true", attention_backend=r["attention_backend"],
            transformer_impl=r["transformer_impl"], layers_per_virtual_stage=int(r["layers_per_virtual_stage"]),
            virtual_stages=int(r["virtual_stages"]), moe_topk=int(r["moe_topk"]), moe_ffn=int(r["moe_ffn"]),
            moe_grouped_gemm=r["moe_grouped_gemm"] == "true", vocab=_opt_int(r["vocab"]), kv_heads=_opt_int(r["kv_heads"]),
            untie_embeddings=_opt_bool(r["untie_embeddings"]), swiglu=_opt_bool(r["swiglu"]),
            dist_optimizer=_opt_bool(r["dist_optimizer"]), overlap_grad_reduce=_opt_bool(r["overlap_grad_reduce"]),
            overlap_param_gather=_opt_bool(r["overlap_param_gather"]), rope_fusion=_opt_bool(r["rope_fusion"]),
            position_embedding=r["position_embedding"] or "learned_absolute", moe_dispatcher=r["moe_dispatcher"],
            moe_router_lb=r["moe_router_lb"])
    return out


def virtual_chunks(case: CaseConfig | None, layers: int, pp: int, csv_vpp: int) -> int:
    """Model chunks per pipeline rank of the interleaved schedule.  Megatron's
    ``--num-layers-per-virtual-pipeline-stage L`` (the CSV's ``vpp`` column holds L) gives
    layers / (pp * L) chunks; ``--num-virtual-stages-per-pipeline-rank V`` gives V."""
    if pp <= 1:
        return 1
    if case is not None:
        if case.virtual_stages:
            return case.virtual_stages
        per_stage = case.layers_per_virtual_stage
    else:
        per_stage = csv_vpp
    return max(1, layers // (pp * per_stage)) if per_stage else 1


def _ci_rows(path: Path, skipped: list[tuple[str, str]]) -> list[Row]:
    rows = []
    cases = load_cases()
    with open(path, newline="") as handle:
        for r in csv.DictReader(handle):
            name = r["test_case"]
            why = next((reason for key, reason in EXCLUDE.items() if key in name), None)
            if why is None and not r["layers"]:
                why = "no layer count"
            if why:
                skipped.append((f"{name} [{r['golden']}]", why))
                continue
            system = "dgx_h100" if r["golden"].endswith("h100") else "dgx_a100"
            tp, pp, cp = _int(r["tp"], 1), _int(r["pp"], 1), _int(r["cp"], 1)
            world = _int(r["nodes"], 1) * _int(r["gpus_per_node"], 8)
            dp = world // (tp * pp * cp)
            hidden, heads = int(r["hidden"]), int(r["heads"])
            bert = name.startswith("bert/")
            experts = _int(r["experts"])
            case = cases.get(name)

            def flag(field: str, default: bool) -> bool:  # the test case's setting where read, else the default
                value = getattr(case, field) if case is not None else None
                return default if value is None else value

            vocab = (case.vocab if case is not None and case.vocab else None) or (30522 if bert else 50257)
            pad = 128 * tp
            vocab = -(-vocab // pad) * pad  # Megatron pads the vocabulary to a multiple of 128*tp
            # transformer implementation (the test cases' model_config.yaml): BERT runs TE with
            # --attention-backend unfused (local_spec: the local spec); GPT test cases named
            # gpt3_mcore_tp* (no "_te_") run --transformer-impl local; uninstall_te removes TE
            if case is not None:  # the test case's model_config.yaml (tools/data/megatron_ci_cases.csv)
                flash = case.attention_backend in ("auto", "flash") and case.transformer_impl != "local" and not bert
                local_impl = case.transformer_impl == "local"
            else:
                te = "uninstall_te" not in name and "local_spec" not in name and not re.match(r"gpt/gpt3_mcore_tp\d", name)
                flash = te and not bert
                local_impl = not te
            model = ModelSpec(
                name=name,
                layers=int(r["layers"]),
                hidden=hidden,
                ffn=_int(r["ffn"], 4 * hidden),
                heads=heads,
                kv_heads=(case.kv_heads if case is not None and case.kv_heads else 0),
                tied_embeddings=not flag("untie_embeddings", "untie" in name),
                vocab=vocab,
                seq_len=int(r["seq"]),
                swiglu=flag("swiglu", "swiglu" in name),
                flash_attention=flash,
                moe_experts=experts,
                moe_top_k=(case.moe_topk if case and case.moe_topk else min(2, experts)) if experts else 1,
                moe_ffn=case.moe_ffn if case and experts else 0,
                causal=not bert,
                # Megatron's default (GPT and BERT): a learned absolute position table; rope where the case sets it
                position_embedding=case.position_embedding if case is not None else "learned_absolute",
            )
            vpp = virtual_chunks(case, int(r["layers"]), pp, _int(r["vpp"]))
            if int(r["layers"]) % (pp * vpp) or (int(r["gbs"]) // (int(r["mbs"]) * dp)) % pp:
                vpp = 1  # chunks Megatron fills with embedding / loss "layers", or a micro-batch count the model rejects
            fw = Framework(
                tp=tp,
                pp=pp,
                dp=dp,
                cp=cp,
                vpp=vpp,
                ep=_int(r["ep"], 1),
                etp=int(etp.group(1)) if (etp := re.search(r"etp(\d+)", name)) else 0,
                sequence_parallel=r["seqpar"] == "true",
                distributed_optimizer=flag("dist_optimizer", "dist_optimizer" in name or "dist_muon" in name),
                zero_stage=3 if ("zp_z3" in name or "fsdp" in name) else 0,
                recompute=r["recompute"] or "none",
                micro_batch=int(r["mbs"]),
                global_batch=int(r["gbs"]),
                precision="fp8" if r["fp8"] else "bf16",
                overlap_grad_reduce=flag("overlap_grad_reduce", "overlap_grad_reduce" in name),
                overlap_param_gather=flag("overlap_param_gather", "param_gather" in name),
                # cases whose model_config.yaml was not read (all out of scope) keep the CI default
                deterministic=case.deterministic if case is not None else True,
                transformer_impl="local" if local_impl else "transformer_engine",
                rope_fusion=flag("rope_fusion", True),
                # --moe-token-dispatcher-type (Megatron's default allgather where a case does not say)
                moe_dispatcher=(case.moe_dispatcher if case is not None and case.moe_dispatcher else "allgather"),
            )
            rows.append(Row("ci", f"{name} [{r['golden']}]", system, r["golden"], model, fw, float(r["steady_median_s"])))
    return rows


def _sc21_rows(path: Path) -> list[Row]:
    rows = []
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    for r in csv.DictReader(lines):
        hidden = int(r["hidden"])
        model = ModelSpec(
            name=r["model"],
            layers=int(r["layers"]),
            hidden=hidden,
            ffn=4 * hidden,
            heads=int(r["heads"]),
            vocab=51200,
            seq_len=2048,
            flash_attention=False,  # 2021: no flash attention
            position_embedding="learned_absolute",  # GPT-3's learned positions; Megatron-LM of 2021 had no RoPE
        )
        fw = Framework(
            tp=int(r["tp"]),
            pp=int(r["pp"]),
            dp=int(r["dp"]),
            micro_batch=1,
            global_batch=int(r["global_batch"]),
            recompute="full",
            vpp=1,
        )
        rows.append(Row("sc21", f"{r['model']} tp{r['tp']} pp{r['pp']} dp{r['dp']} ({r['gpus']} GPUs)", "dgx_a100", "sc21", model, fw, float(r["seconds_per_iteration"])))
    return rows


def out_of_scope(row: Row) -> str | None:
    """The reason a row is out of the generator's scope, or None."""
    return next((why for key, why in OUT_OF_SCOPE.items() if key in row.name), None)


HOST_FIELDS = frozenset(f.name for f in dataclasses.fields(HostModel))


def device_for(row: Row, calibration: dict[str, dict[str, float]]) -> tuple[DeviceSpec, float, FrameworkFamily]:
    """The row's device, its NIC rate, and the megatron-core family with the golden's host costs
    (``host_module_ns`` and the HostModel fields; unset ones keep the family's defaults)."""
    name, nic = SYSTEMS[row.system]
    cal = calibration.get(row.golden, {})
    unknown = sorted(set(cal) - HOST_FIELDS - {"host_module_ns"})
    if unknown:
        raise XsimError(f"unknown calibration field(s) {', '.join(unknown)}", field=f"CALIBRATION.{row.golden}")
    family = MEGATRON_CORE
    if "host_module_ns" in cal:
        family = family.with_(host_module_ns=int(cal["host_module_ns"]))
    host = {k: v for k, v in cal.items() if k in HOST_FIELDS}
    if host:
        family = family.with_(host=dataclasses.replace(family.host, **{k: float(v) for k, v in host.items()}))
    return get_device(name), nic, family


#: cluster presets of xsim_trace.cluster for the replay path
CLUSTERS = {"dgx_a100": "dgx-a100", "dgx_h100": "dgx-h100"}
#: rank sets larger than this use the closed-form estimate (SC'21 rows: 384..2240 ranks, 10^5 nodes each)
REPLAY_MAX_RANKS = 64


def predict(row: Row, calibration: dict[str, dict[str, float]], *, use_replay: bool = False) -> tuple[float, str]:
    """(simulated seconds, path): 'replay' = generated Chakra rank set replayed by xsim_trace.replay
    over the analytical backend on the cluster preset; 'estimate' = the generator's closed form."""
    dev, nic, family = device_for(row, calibration)
    links = LinkModel.for_device(dev, gpus_per_node=8, nic_gbps_per_gpu=nic)
    program, timer = Program(row.model, row.fw), Timer(dev, links, row.fw, family=family)
    if use_replay and row.fw.world_size <= REPLAY_MAX_RANKS:
        from xsim_trace.cluster import load_cluster
        from xsim_trace.network.registry import make_backend
        from xsim_trace.network.topology import build_topology
        from xsim_trace.replay import replay
        from xsim_trace.workload.generator import generate

        nodes = -(-row.fw.world_size // 8)
        cluster = load_cluster(f"{CLUSTERS[row.system]}:{nodes}")
        wl = generate(program, timer)
        res = replay(wl.traces, make_backend("analytical", build_topology(cluster)), comm_groups=wl.comm_groups, cluster=cluster)
        return res.iteration_ns / 1e9, "replay"
    return estimate(program, timer).step_s, "estimate"


def _summary(label: str, errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    if not a:
        return f"{label}: 0 rows"
    return (f"{label}: {len(a)} rows, median |error| {statistics.median(a):.1f}%, within 5%: {sum(e <= 5 for e in a)}, "
            f"within 10%: {sum(e <= 10 for e in a)}, within 15%: {sum(e <= 15 for e in a)}, "
            f"worse than 25%: {sum(e > 25 for e in a)}, max {max(a):.1f}%")


def _table_row(label: str, errs: list[float]) -> str:
    """One line of the in-sample / cross-validated tables (errors in %)."""
    a = [abs(e) for e in errs]
    if not a:
        return f"{label:<34} {0:>5}"
    n = len(a)
    return (f"{label:<34} {n:>5} {statistics.median(a):>8.1f} {sum(e <= 5 for e in a):>5} ({sum(e <= 5 for e in a) / n:>4.0%})"
            f" {sum(e <= 15 for e in a):>5} ({sum(e <= 15 for e in a) / n:>4.0%}) {max(a):>7.1f}")


TABLE_HEADER = f"{'rows':<34} {'n':>5} {'median%':>8} {'<=5%':>12} {'<=15%':>12} {'worst%':>7}"


def noise_rows(rows: list[Row], spread: float = 0.15) -> set[str]:
    """Rows whose inputs are identical to another row's of the same golden (same model geometry and
    framework configuration; only the test case name differs) while their measured times differ by
    more than ``spread``: measurement noise no prediction can follow."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.source != "ci":
            continue
        groups.setdefault((r.golden, r.model.with_(name=""), r.fw), []).append(r)
    out: set[str] = set()
    for members in groups.values():
        times = [r.measured_s for r in members]
        if len(members) > 1 and max(times) > (1 + spread) * min(times):
            out.update(r.name for r in members)
    return out


#: search grids of the calibration fit (coordinate descent over these, in this order).  The search
#: runs on ``call_ns``, the per-call cost of the golden's deterministic-mode runs (the CI default),
#: so that moving ``deterministic_factor`` moves only the few runs without deterministic mode;
#: ``to_calibration`` turns a point into CALIBRATION's fields (host_module_ns = call_ns / factor).
FIT_GRIDS: dict[str, tuple[float, ...]] = {
    "call_ns": tuple(range(100_000, 500_001, 10_000)),
    "moe_factor": (0.4, 0.5, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.3, 2.6, 3.0),
    "attention_core_factor": (0.3, 0.5, 0.7, 0.85, 1.0, 1.2, 1.5),
    "deterministic_factor": (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.8),
    "local_impl_factor": (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0, 1.1, 1.2),
}
FIT_WITHIN = 0.10  # a row counts as predicted when within 10%
FIT_START = {"call_ns": 260_000, "moe_factor": 1.0, "attention_core_factor": 1.0, "deterministic_factor": 1.0,
             "local_impl_factor": 1.0}


def to_calibration(point: dict[str, float]) -> dict[str, float]:
    """CALIBRATION fields of a fit point (see FIT_GRIDS)."""
    cal = {k: v for k, v in point.items() if k != "call_ns"}
    cal["host_module_ns"] = int(round(point["call_ns"] / point["deterministic_factor"]))
    return cal


class _Scorer:
    """Closed-form predictions cached by the calibration fields that can change a row: the MoE
    fields only move MoE rows, the attention-core factor only rows without flash attention."""

    def __init__(self, ratios: dict[str, float] | None = None) -> None:
        self.cache: dict[tuple, float | None] = {}
        #: per row, replay / closed form at the shipped calibration: scoring closed form x ratio
        #: tracks the replay path (the table's) at closed-form cost
        self.ratios = ratios or {}

    def predict(self, row: Row, point: dict[str, float]) -> float | None:
        """Closed form x ratio for a fit point (FIT_GRIDS' fields)."""
        cal = to_calibration(point)
        key = (row.name, point["call_ns"],
               cal["moe_factor"] if row.model.moe_experts else None,
               cal["attention_core_factor"] if not row.model.flash_attention else None,
               # deterministic runs cost call_ns per call whatever the factor; the others call_ns / factor
               cal["deterministic_factor"] if not row.fw.deterministic else None,
               cal["local_impl_factor"] if row.fw.transformer_impl == "local" else None)
        if key not in self.cache:
            try:
                self.cache[key] = predict(row, {row.golden: cal})[0] * self.ratios.get(row.name, 1.0)
            except XsimError:
                self.cache[key] = None
        return self.cache[key]

    def errors(self, rows: list[Row], cal: dict[str, float]) -> list[float]:
        out = []
        for r in rows:
            sim = self.predict(r, cal)
            if sim is not None:
                out.append((sim - r.measured_s) / r.measured_s)
        return out

    def objective(self, rows: list[Row], cal: dict[str, float]) -> float:
        """What the fit minimizes: minus the rows within FIT_WITHIN, plus the median |error| as the
        tie-break (a robust 0-1 loss; it cross-validates better than the median alone, see
        docs/workload.md)."""
        errs = [abs(e) for e in self.errors(rows, cal)]
        return -sum(e <= FIT_WITHIN for e in errs) + statistics.median(errs)


def fit_golden(rows: list[Row], scorer: _Scorer, rounds: int = 3) -> dict[str, float]:
    """The host calibration of one golden: coordinate descent over FIT_GRIDS maximizing the rows of
    ``rows`` whose closed-form prediction is within FIT_WITHIN, ties broken by the median |error|
    (equal scores keep the earlier value)."""
    cal = dict(FIT_START)
    best = scorer.objective(rows, cal)
    for _ in range(rounds):
        moved = False
        for name, grid in FIT_GRIDS.items():
            for value in grid:
                trial = {**cal, name: value}
                err = scorer.objective(rows, trial)
                if err < best - 1e-12:
                    best, cal, moved = err, trial, True
        if not moved:
            break
    return cal


def replay_ratios(rows: list[Row], calibration: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per CI row, the replayed step time over the closed form under ``calibration`` (~3 minutes)."""
    out = {}
    for r in rows:
        if r.source != "ci":
            continue
        try:
            out[r.name] = predict(r, calibration, use_replay=True)[0] / predict(r, calibration)[0]
        except XsimError:
            continue
    return out


def fit(rows: list[Row], scorer: _Scorer | None = None) -> dict[str, dict[str, float]]:
    """One host calibration per golden, fitted on ALL CI rows of that golden (never per row)."""
    scorer = scorer or _Scorer()
    goldens = sorted({r.golden for r in rows if r.source == "ci"})
    return {g: to_calibration(fit_golden([r for r in rows if r.golden == g], scorer)) for g in goldens}


def cross_validate(rows: list[Row], folds: int = 5, ratios: dict[str, float] | None = None) -> dict[str, float]:
    """K-fold cross-validation of the calibration: rows of each golden (sorted by name) go to fold
    i % K; each fold is predicted with the calibration fitted on the other folds (never on the row
    it predicts).  ``ratios`` (replay / closed form per row at the shipped calibration: a property
    of the model, not of the measurements) put the held-out closed form on the replay path.
    Returns the held-out signed error per CI row name."""
    scorer = _Scorer(ratios)
    out: dict[str, float] = {}
    for g in sorted({r.golden for r in rows if r.source == "ci"}):
        sub = sorted((r for r in rows if r.golden == g), key=lambda r: r.name)
        for k in range(folds):
            test = [r for i, r in enumerate(sub) if i % folds == k]
            train = [r for i, r in enumerate(sub) if i % folds != k]
            cal = fit_golden(train, scorer)
            for r in test:
                sim = scorer.predict(r, cal)
                if sim is not None:
                    out[r.name] = (sim - r.measured_s) / r.measured_s
    return out


def _table_sets(pairs: list[tuple[Row, float]], noise: set[str]) -> list[tuple[str, list[float]]]:
    ci = [(r, e) for r, e in pairs if r.source == "ci"]
    sets = [(f"ci {g}", [e for r, e in ci if r.golden == g]) for g in sorted({r.golden for r, _ in ci})]
    sets += [
        ("ci all", [e for _, e in ci]),
        ("ci in scope", [e for r, e in ci if not out_of_scope(r)]),
        ("ci in scope, noise rows apart", [e for r, e in ci if not out_of_scope(r) and r.name not in noise]),
        ("sc21 (nothing fitted)", [e for r, e in pairs if r.source == "sc21"]),
        ("all", [e for _, e in pairs]),
    ]
    return sets


def noise_floor(rows: list[Row]) -> list[float]:
    """Signed errors (%) of the best any model of the generator's inputs can do on the CI rows in
    scope: each row predicted by the median measured time of the rows of its golden with identical
    inputs (itself included).  Rows alone in their group get 0."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.source == "ci" and not out_of_scope(r):
            groups.setdefault((r.golden, r.model.with_(name=""), r.fw), []).append(r)
    out = []
    for members in groups.values():
        med = statistics.median(m.measured_s for m in members)
        out += [(med - m.measured_s) / m.measured_s * 100 for m in members]
    return out


def print_tables(out: list, rows: list[Row], folds: int, ratios: dict[str, float]) -> None:
    """The in-sample table (host constants fitted on all rows of each golden) and, with ``folds``,
    the cross-validated one (each CI row predicted with constants fitted on the other folds; the
    SC'21 rows use no fitted constant and appear unchanged)."""
    noise = noise_rows(rows)
    pairs = [(r, e) for r, _, e, _ in out]
    print(f"\nin-sample (per-golden host calibration fitted on all CI rows of the golden); noise rows: {len(noise)}")
    print(TABLE_HEADER)
    for label, errs in _table_sets(pairs, noise):
        print(_table_row(label, errs))
    print(_table_row("floor: ci in scope, group median", noise_floor(rows)))
    if not folds:
        return
    held = cross_validate(rows, folds, ratios)
    cv_pairs = [(r, held[r.name] * 100 if r.source == "ci" else e) for r, e in pairs
                if r.source != "ci" or r.name in held]
    print(f"\ncross-validated ({folds}-fold: every CI row predicted with host constants fitted without it)")
    print(TABLE_HEADER)
    for label, errs in _table_sets(cv_pairs, noise):
        print(_table_row(label, errs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    ap.add_argument("--csv", type=Path, help="also write the table as CSV")
    ap.add_argument("--all", action="store_true", help="also list skipped rows and why")
    ap.add_argument("--estimate-only", action="store_true", help="closed-form estimate for every row (no replay)")
    ap.add_argument("--fit", action="store_true", help="redo the per-golden calibration search and print it: closed form "
                    "scaled per row by replay / closed form at the shipped calibration (~4 min; with --estimate-only "
                    "the bare closed form, ~30 s)")
    ap.add_argument("--cv", type=int, metavar="K", default=5, help="folds of the cross-validated table (default 5): "
                    "every CI row predicted with host constants fitted without it; 0 = no cross-validated table")
    ap.add_argument("--cv-only", action="store_true", help="print only the cross-validated summary (closed form)")
    args = ap.parse_args(argv)
    skipped: list[tuple[str, str]] = []
    rows = _ci_rows(args.reference / "megatron_ci_step_times.csv", skipped) + _sc21_rows(args.reference / "megatron_sc21_a100.csv")
    if args.fit:
        ratios = {} if args.estimate_only else replay_ratios(rows, CALIBRATION)
        for golden, cal in fit(rows, _Scorer(ratios)).items():
            print(f"fit: {golden}: " + ", ".join(f"{k} = {v:g}" for k, v in cal.items()))
        return 0
    if args.cv == 1 or args.cv < 0:
        ap.error("--cv needs K >= 2 (or 0: no cross-validated table)")
    if args.cv_only:
        held = cross_validate(rows, args.cv or 5)
        for golden in sorted({r.golden for r in rows if r.source == "ci"}):
            print(_summary(f"cv {golden} (held out)", [e * 100 for r in rows if r.golden == golden
                                                       for e in [held.get(r.name)] if e is not None]))
        print(_summary("cv ci all (held out)", [e * 100 for e in held.values()]))
        return 0
    out = []
    ratios: dict[str, float] = {}
    for row in rows:
        try:
            sim, path = predict(row, CALIBRATION, use_replay=not args.estimate_only)
        except XsimError as exc:
            skipped.append((row.name, f"not expressible: {exc}"))
            continue
        err = (sim - row.measured_s) / row.measured_s * 100.0
        out.append((row, sim, err, path))
        if path == "replay":
            ratios[row.name] = sim / predict(row, CALIBRATION)[0]
    width = max(len(r.name) for r, *_ in out)
    print(f"{'row':<{width}}  {'measured_s':>10}  {'simulated_s':>11}  {'error_%':>8}  path")
    for row, sim, err, path in out:
        flag = ("  MISS" if abs(err) > 25 else "") + ("  oos" if out_of_scope(row) else "")
        print(f"{row.name:<{width}}  {row.measured_s:10.4f}  {sim:11.4f}  {err:+8.1f}  {path}{flag}")
    ci = [(r, e) for r, _, e, _ in out if r.source == "ci"]
    lines = [_summary("sc21", [e for r, _, e, _ in out if r.source == "sc21"])]
    for golden in sorted({r.golden for r, _ in ci}):
        lines.append(_summary(f"ci {golden}", [e for r, e in ci if r.golden == golden]))
        lines.append(_summary(f"ci {golden} in scope", [e for r, e in ci if r.golden == golden and not out_of_scope(r)]))
    for family in sorted({r.name.split("/")[0] for r, _ in ci}):
        lines.append(_summary(f"ci family {family}", [e for r, e in ci if r.name.startswith(family + "/")]))
    lines.append(_summary("ci all", [e for _, e in ci]))
    lines.append(_summary("ci in scope", [e for r, e in ci if not out_of_scope(r)]))
    lines.append(_summary("all", [e for _, _, e, _ in out]))
    lines.append(_summary("all in scope", [e for r, _, e, _ in out if not out_of_scope(r)]))
    print("\n".join(lines))
    print_tables(out, rows, args.cv, ratios)
    if args.all:
        for name, why in skipped:
            print(f"skipped: {name}: {why}")
        for row, *_ in out:
            if why := out_of_scope(row):
                print(f"out of scope (predicted, counted under 'all'): {row.name}: {why}")
    else:
        print(f"skipped {len(skipped)} rows, {sum(bool(out_of_scope(r)) for r, *_ in out)} out of scope (--all lists them)")
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            w = csv.writer(handle)
            w.writerow(["source", "row", "measured_s", "simulated_s", "error_pct", "path", "out_of_scope"])
            for row, sim, err, path in out:
                w.writerow([row.source, row.name, f"{row.measured_s:.6f}", f"{sim:.6f}", f"{err:.2f}", path, out_of_scope(row) or ""])
    return 0


if __name__ == "__main__":
    sys.exit(main())
