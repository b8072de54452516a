"""``xsim generate``: Megatron-style training workloads from a model and parallelism parameters."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from xsim_trace.cli.device_file import add_device_file
from xsim_trace.errors import ConfigError
from xsim_trace.io import atomic_write
from xsim_trace.workload.estimate import estimate
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.generator import write_workload
from xsim_trace.workload.memory import stage_memory
from xsim_trace.workload.model import list_models
from xsim_trace.workload.simai import write_simai
from xsim_trace.workload.spec_file import load_spec_file, make_setup

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="generate per-rank Chakra (or SimAI text) workloads from a model and parallelism flags",
        description="Generate a Megatron-style training iteration as per-rank Chakra traces "
        "(<PREFIX>.<rank>.et + <PREFIX>.comm_groups.json) or a SimAI/AICB text workload.",
    )
    add_model_flags(p)
    p.add_argument("--plan", help="a spec file (YAML/JSON: model, framework, system; flags are ignored) or a "
                   "deployment plan (device_groups, pipelines: one workload per device group; --model sets or "
                   "checks its model)")
    p.add_argument("--out", required=True, help="output prefix (chakra) or file (simai)")
    p.add_argument("--format", choices=("chakra", "simai"), default="chakra")
    add_parallelism_flags(p)
    p.add_argument("--cluster", metavar="FILE_OR_PRESET",
                   help="deployment plans: write <PREFIX>.cluster.yaml as this cluster with each rank on a device of "
                        "its plan group (default: a cluster of the plan's device groups)")
    p.add_argument("--ranks", help="only these ranks, e.g. 0-7,16 (chakra); comm groups still complete")
    p.add_argument("--summary", help="write estimate + memory JSON here ('-' = stdout)")
    p.set_defaults(func=cmd_generate)


def add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help=f"preset ({', '.join(list_models())}) or a name in --model-file")
    p.add_argument("--model-file", help="YAML file of extra models (models: {name: {fields}})")


def add_parallelism_flags(p: argparse.ArgumentParser) -> None:
    """Parallelism, batch, precision and system flags (shared by generate and estimate)."""
    g = p.add_argument_group("parallelism")
    for flag in ("tp", "pp", "dp", "vpp", "cp", "ep", "etp"):
        g.add_argument(f"--{flag}", type=int, default=0 if flag == "etp" else 1)
    g.add_argument("--sp", "--sequence-parallel", dest="sp", action="store_true")
    g.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage")
    g.add_argument("--distributed-optimizer", action="store_true", help="= ZeRO-1")
    g.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    g.add_argument("--schedule", choices=("1f1b", "gpipe", "interleaved"), default="1f1b")
    g.add_argument("--mbs", "--micro-batch", dest="mbs", type=int, default=1)
    g.add_argument("--gbs", "--global-batch", dest="gbs", type=int, default=0, help="default: mbs*dp*pp")
    g.add_argument("--grad-accum", type=int, default=0)
    g.add_argument("--precision", choices=("bf16", "fp16", "fp8"), default="bf16")
    g.add_argument("--overlap-grad-reduce", action="store_true")
    g.add_argument("--overlap-param-gather", action="store_true")
    g.add_argument("--seq-len", type=int, default=0, help="override the model's sequence length")
    g.add_argument("--layers", type=int, default=0, help="override the model's layer count")
    g.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters of this rank on the linear layers, base frozen")
    g.add_argument("--moe-imbalance", type=float, default=1.0,
                   help="MoE routing imbalance: busiest EP rank's tokens / balanced share (default 1)")
    g.add_argument("--transformer-impl", choices=("transformer_engine", "local"), default="transformer_engine",
                   help="Megatron --transformer-impl: local modules cost the family's local_impl_factor x a TE call")
    g.add_argument("--no-rope-fusion", dest="rope_fusion", action="store_false",
                   help="Megatron --no-rope-fusion: RoPE as eager torch ops (kernels and host calls) instead of "
                        "one fused kernel per rotated tensor")
    g.add_argument("--position-embedding-type", dest="position_embedding", default=None,
                   choices=("rope", "learned_absolute", "none"),
                   help="Megatron --position-embedding-type: rope (a RoPE op per layer), learned_absolute (a position "
                        "table added in the embedding) or none (default: the model's; GPT-3 presets learned_absolute, "
                        "the others rope)")
    g.add_argument("--moe-token-dispatcher-type", dest="moe_dispatcher", default="alltoall",
                   choices=("alltoall", "allgather"),
                   help="Megatron --moe-token-dispatcher-type (default alltoall; Megatron's own default is allgather: "
                        "every rank gathers the expert-TP x EP group's tokens, then reduce-scatters)")
    s = p.add_argument_group("system")
    s.add_argument("--device", default="H100")
    add_device_file(s)
    s.add_argument("--gpus-per-node", type=int, default=8)
    s.add_argument("--nic-gbps", type=float, default=400.0, help="NIC line rate per GPU, Gb/s")
    add_framework_flags(s)


def add_framework_flags(group) -> None:
    """--framework / --cuda-graphs / --deterministic, shared by generate and estimate."""
    from xsim_trace.workload.families import DEFAULT_FAMILY, list_families

    group.add_argument("--framework", default=DEFAULT_FAMILY,
                       help=f"framework family: {', '.join(list_families())} (default {DEFAULT_FAMILY}): host cost per "
                            "module call, CUDA graphs, optimizer launches, per-step host work, gradient dtype")
    group.add_argument("--cuda-graphs", dest="cuda_graphs", action="store_true", default=None,
                       help="CUDA graphs on (default: the family's setting)")
    group.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false")
    group.add_argument("--deterministic", action="store_true",
                       help="deterministic mode (Megatron --deterministic-mode / TE deterministic kernels, "
                            "NVTE_ALLOW_NONDETERMINISTIC_ALGO=0): every host call costs the family's "
                            "deterministic factor (megatron-core 1.1x); default off")


def resolve_family(args: argparse.Namespace):
    """The --framework family with --cuda-graphs / --no-cuda-graphs applied."""
    from xsim_trace.workload.families import get_family

    family = get_family(args.framework)
    if args.cuda_graphs is not None:
        family = family.with_(cuda_graphs=args.cuda_graphs)
    return family


def _ranks(text: str | None) -> list[int] | None:
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise ConfigError(f"expected ranks like 0-7,16, found {text!r}", field="--ranks") from None
    return out


def _setup(args: argparse.Namespace):
    if args.plan:
        return load_spec_file(args.plan, device_file=args.device_file)
    return setup_from_args(args)


def setup_from_args(args: argparse.Namespace, *, device=None, gpus_per_node: int | None = None,
                    nic_gbps: float | None = None, intra_GBps: float | None = None):  # noqa: N803
    """The Setup of the model / parallelism / system flags; ``device`` (a DeviceSpec resolved at the
    boundary, e.g. from --cluster), ``gpus_per_node`` and ``nic_gbps`` replace the flags when given."""
    if not args.model:
        raise ConfigError("give --model (or --plan FILE)", field="--model")
    from xsim_trace.workload.model import get_model

    model = get_model(args.model, args.model_file)
    changes = {}
    if args.seq_len:
        changes["seq_len"] = args.seq_len
    if args.layers:
        changes["layers"] = args.layers
    if args.position_embedding:
        changes["position_embedding"] = args.position_embedding
    if changes:
        model = model.with_(**changes)
    gbs = args.gbs or args.mbs * args.dp * args.pp
    fw = Framework(
        tp=args.tp, pp=args.pp, dp=args.dp, vpp=args.vpp, cp=args.cp, ep=args.ep, etp=args.etp,
        sequence_parallel=args.sp, zero_stage=args.zero, distributed_optimizer=args.distributed_optimizer,
        recompute=args.recompute, schedule=args.schedule, micro_batch=args.mbs, global_batch=gbs,
        grad_accum=args.grad_accum, precision=args.precision, overlap_grad_reduce=args.overlap_grad_reduce,
        overlap_param_gather=args.overlap_param_gather, lora_rank=args.lora_rank, moe_imbalance=args.moe_imbalance,
        deterministic=args.deterministic, transformer_impl=args.transformer_impl, rope_fusion=args.rope_fusion,
        moe_dispatcher=args.moe_dispatcher,
    )
    return make_setup(model, fw, device if device is not None else args.device,
                      gpus_per_node=gpus_per_node or args.gpus_per_node,
                      nic_gbps_per_gpu=nic_gbps if nic_gbps is not None else args.nic_gbps,
                      device_file=args.device_file, framework=resolve_family(args), intra_GBps=intra_GBps)


def _deployment_plan(path: str):
    """The parsed document when ``path`` is a heterogeneous deployment plan, else None."""
    from xsim_trace.rewrite.hetero_generate import is_deployment_plan
    from xsim_trace.plan.parse import read_plan_document

    try:
        doc = read_plan_document(path)
    except ConfigError:
        return None  # the spec-file loader reports it
    return doc if is_deployment_plan(doc) else None


def _write_chakra(args: argparse.Namespace, setup, ranks: list[int] | None) -> list[str]:
    """Rank files streamed one at a time from the generator's templates, with a bar over ranks."""
    from xsim_trace.cli.progress import progress_bar

    total = len(set(ranks)) if ranks is not None else setup.fw.world_size
    with progress_bar(total, "writing ranks", quiet=args.quiet, unit="rank", min_items=64) as bar:
        result = write_workload(args.out, setup.program, setup.timer, ranks, progress=bar.update)
    return [str(p) for p in result.paths]


def write_summary(target: str | None, summary: dict) -> None:
    """The --summary JSON: to stdout for '-', atomically to a file otherwise, nowhere when unset."""
    if target == "-":
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif target:
        with atomic_write(target) as handle:
            json.dump(summary, handle, indent=1)


def cmd_generate(args: argparse.Namespace) -> int:
    ranks = _ranks(args.ranks)
    doc = _deployment_plan(args.plan) if args.plan else None
    if doc is not None:
        from xsim_trace.cli.generate_plan import cmd_generate_plan

        return cmd_generate_plan(args, doc, ranks)
    setup = _setup(args)
    est = estimate(setup.program, setup.timer)
    mem = stage_memory(setup.program, setup.device)
    if args.format == "simai":
        write_simai(args.out, setup.program, setup.timer)
        written = [args.out]
    else:
        written = _write_chakra(args, setup, ranks)
    summary = {
        "model": setup.model.name,
        "device": setup.device.name,
        "framework": setup.family.name if setup.family else None,
        "deterministic": setup.fw.deterministic,
        "world_size": setup.fw.world_size,
        "microbatches": setup.fw.microbatches,
        "estimated_step_s": round(est.step_s, 6),
        "model_tflops_per_gpu": round(est.tflops_per_gpu(), 2),
        "pipeline_bubble_fraction": round(est.bubble_fraction(), 4),
        "iteration_flops": est.flops,
        "memory": [m.as_dict() for m in mem],
        "out_of_memory": any(m.out_of_memory for m in mem),
        "files": len(written),
    }
    write_summary(args.summary, summary)
    if not args.quiet and args.summary != "-":
        oom = " OUT OF MEMORY on stage(s) " + ",".join(str(m.stage) for m in mem if m.out_of_memory) if summary["out_of_memory"] else ""
        print(
            f"wrote {len(written)} file(s) to {args.out}: {setup.model.name} on {setup.fw.world_size} x {setup.device.name}, "
            f"estimated step {est.step_s:.4f} s, {summary['model_tflops_per_gpu']} TFLOP/s/GPU, "
            f"peak memory {max(m.total_bytes for m in mem) / 2**30:.1f} GiB{oom}"
        )
    return 0
