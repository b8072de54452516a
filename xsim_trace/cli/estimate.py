"""``xsim estimate``: predicted step time of one configuration, its breakdown, MFU, tokens/s/GPU and
memory per stage, from the flags of ``xsim generate`` (or ``--cluster``); no rank files."""

from __future__ import annotations

import argparse
import json
import sys

from xsim_trace.cli.generate import add_model_flags, add_parallelism_flags, setup_from_args
from xsim_trace.errors import ConfigError
from xsim_trace.units import gbps_to_GBps

#: largest world size ``--replay`` replays in full (larger: the replay is skipped with a note)
REPLAY_MAX_RANKS = 64


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="predict one configuration's step time, breakdown, MFU and memory (no rank files)",
        description="Closed-form prediction of one training iteration: step time with its breakdown "
        "(compute, exposed TP/CP/EP/PP/DP communication, pipeline bubble, host, optimizer), MFU, "
        "tokens/s/GPU and memory per pipeline stage with an out-of-memory flag.",
    )
    add_model_flags(p)
    add_parallelism_flags(p)
    p.add_argument("--cluster", metavar="FILE_OR_PRESET",
                   help="take device, GPUs per node and NIC rate from this homogeneous cluster (file or preset "
                        "like dgx-h100:4); replaces --device/--gpus-per-node/--nic-gbps")
    p.add_argument("--replay", action="store_true",
                   help=f"confirm by generating the rank set in memory and replaying it (up to {REPLAY_MAX_RANKS} ranks)")
    p.add_argument("--json", action="store_true", help="print one JSON object (step_time_s = the prediction)")
    p.set_defaults(func=cmd_estimate)


def _intra_GBps(group) -> float:  # noqa: N802
    """Per-GPU per-direction intra-node rate of a cluster group: its switch link, or the sum of GPU
    0's mesh lanes (NCCL runs rings over all of them)."""
    from xsim_trace.cluster.model import IntraKind

    if group.intra.kind is IntraKind.MESH:
        lanes = sum(n for a, b, n in group.intra.mesh if 0 in (a, b))
        return group.intra.bw_GBps * max(lanes, 1)
    return group.intra.bw_GBps


def _system_from_cluster(args: argparse.Namespace):
    """(cluster, DeviceSpec, GPUs per node, NIC Gb/s per GPU, intra GB/s per GPU) of a one-group cluster."""
    from xsim_trace.cluster import load_cluster
    from xsim_trace.devices.catalog import catalog_for

    catalog = catalog_for(args.device_file)
    cluster = load_cluster(args.cluster, catalog=catalog)
    if len(cluster.groups) != 1:
        names = ", ".join(g.name for g in cluster.groups)
        raise ConfigError(f"xsim estimate needs a homogeneous cluster; {cluster.name} has groups {names} "
                          "(use xsim generate --plan for heterogeneous plans)", field="--cluster")
    g = cluster.groups[0]
    device = g.device_spec  # resolved by the loader in the run's catalog
    if device is None:
        raise ConfigError(f"cluster {cluster.name}: GPU type {g.gpu_type!r} has no device specs; name a device "
                          f"({', '.join(catalog.names())})", field="--cluster")
    nic = g.nic.count * g.nic.nic_gbps / g.devices_per_node if g.nic is not None else args.nic_gbps
    return cluster, device, g.devices_per_node, nic, _intra_GBps(g)


def _replay_cluster(setup, gpus_per_node: int, nic_gbps: float):
    """A one-group NVSwitch + fat-tree cluster of the setup's (resolved) device, big enough for its ranks."""
    from xsim_trace.cluster.load import cluster_from_dict

    dev = setup.device
    nodes = -(-setup.fw.world_size // gpus_per_node)
    return cluster_from_dict({
        "name": f"estimate-{dev.name}",
        "fabric": {"kind": "fat-tree", "latency_ns": 500},
        "groups": [{
            "name": "g0", "gpu": dev, "nodes": nodes, "devices_per_node": gpus_per_node,
            "intra_node": {"kind": "nvswitch", "bw_GBps": dev.nvlink_unidir_GBps or gbps_to_GBps(nic_gbps),
                           "latency_ns": 250},
            "nic": {"count": gpus_per_node, "nic_gbps": nic_gbps, "latency_ns": 1000},
        }],
    })


def _replay_s(setup, cluster) -> float:
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology
    from xsim_trace.replay import replay
    from xsim_trace.workload.generator import generate

    wl = generate(setup.program, setup.timer)
    res = replay(wl.traces, make_backend("analytical", build_topology(cluster)), comm_groups=wl.comm_groups,
                 cluster=cluster)
    return res.iteration_ns / 1e9


def cmd_estimate(args: argparse.Namespace) -> int:
    from xsim_trace.workload.predict import predict, prediction_dict

    if not args.model:
        raise ConfigError("give --model", field="--model")
    cluster = None
    if args.cluster:
        cluster, device, gpn, nic, intra = _system_from_cluster(args)
        setup = setup_from_args(args, device=device, gpus_per_node=gpn, nic_gbps=nic, intra_GBps=intra)
        if setup.fw.world_size > cluster.num_ranks:
            raise ConfigError(f"tp*pp*cp*dp = {setup.fw.world_size} GPUs but cluster {cluster.name} has "
                              f"{cluster.num_ranks}", field="--cluster")
    else:
        setup = setup_from_args(args)
        gpn, nic = args.gpus_per_node, args.nic_gbps
    pred = predict(setup)
    out = prediction_dict(setup, pred)
    if setup.timer.family is not None and setup.timer.family.name == "deepspeed":
        from xsim_trace.workload.pipeline_hetero import deepspeed_check

        out["deepspeed"] = deepspeed_check(setup.program, out["memory"][0]["capacity_GiB"] * 2**30)
    if args.replay:
        if setup.fw.world_size <= REPLAY_MAX_RANKS:
            if cluster is None:
                cluster = _replay_cluster(setup, gpn, nic)
            replayed = _replay_s(setup, cluster)
            out["replay_step_time_s"] = round(replayed, 6)
            out["replay_vs_estimate_pct"] = round((replayed / pred.step_s - 1) * 100, 2)
        else:
            out["replay_skipped"] = f"{setup.fw.world_size} ranks > {REPLAY_MAX_RANKS}"
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    _print_text(out)
    return 0


def _print_text(out: dict) -> None:
    p = out["parallelism"]
    mode = (", deterministic" if out["deterministic"] else "") + (", local modules" if out.get("transformer_impl") == "local" else "")
    mode += ", unfused RoPE" if out.get("rope_fusion") is False else ""
    print(f"{out['model']} on {out['world_size']} x {out['device']} ({out['framework']}{mode}): tp {p['tp']} pp {p['pp']} "
          f"dp {p['dp']} cp {p['cp']} ep {p['ep']} vpp {p['vpp']}, mbs {p['micro_batch']} gbs {p['global_batch']} "
          f"({p['microbatches']} micro-batches), {p['precision']}")
    step = out["step_time_s"]
    print(f"step time        {step:10.4f} s")
    for key, value in out["breakdown_s"].items():
        share = value / step * 100 if step else 0.0
        print(f"  {key:<14} {value:10.4f} s  {share:5.1f}%")
    print(f"MFU              {out['mfu'] * 100:9.1f} %  ({out['model_tflops_per_gpu']} model TFLOP/s/GPU)")
    print(f"tokens/s/GPU     {out['tokens_per_s_per_gpu']:10.1f}")
    for m in out["memory"]:
        flag = "  OUT OF MEMORY" if m["out_of_memory"] else ""
        print(f"memory stage {m['stage']:<3} {m['total_GiB']:8.1f} GiB of {m['capacity_GiB']:.1f} (weights "
              f"{m['weights_GiB']:.1f}, grads {m['grads_GiB']:.1f}, optimizer {m['optimizer_GiB']:.1f}, "
              f"activations {m['activations_GiB']:.1f}){flag}")
    for d in out.get("deepspeed", ()):
        verdict = f"cannot start: {d['unbuildable']}" if d["unbuildable"] else (
            "OUT OF MEMORY" if d["out_of_memory"] else "fits")
        print(f"deepspeed stage {d['stage']:<3} {d['memory_GiB']:6.1f} GiB fp16 pipeline memory, {verdict}")
    if "replay_step_time_s" in out:
        print(f"replay           {out['replay_step_time_s']:10.4f} s  ({out['replay_vs_estimate_pct']:+.1f}% vs estimate)")
    elif "replay_skipped" in out:
        print(f"replay skipped: {out['replay_skipped']}")
