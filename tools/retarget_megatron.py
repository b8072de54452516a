#!/usr/bin/env python3
"""Validate trace retargeting (``xsim replay --retarget``) on the Megatron-LM CI goldens that ran
the same test case on DGX A100 and DGX H100 (dev container): predict the H100 step from the A100
one and back, and print the table.

The goldens hold step times, not traces, so each source "capture" is built the way a capture
would look: the generator's rank set on the source device (the source golden's host calibration),
with every node's duration scaled so that its replay matches the measured source step (the
capture's own inefficiency).  ``rewrite.retarget`` then rescales its device kernels to the target
GPU; the replay on the target cluster is the prediction, compared with the target's measured step.
Two predictions per direction: kernels only (host time as captured: what ``--retarget`` does by
default, since a capture cannot know the target machine's CPU), and kernels + host factor (the
ratio of the two goldens' fitted per-call host costs, ``--retarget-host-factor``).

usage: tools/retarget_megatron.py [--reference DIR] [--limit N] [--csv OUT]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import statistics
import sys
from pathlib import Path

from xsim_trace.cluster import load_cluster
from xsim_trace.errors import XsimError
from xsim_trace.graph import attrs as A
from xsim_trace.network.registry import make_backend
from xsim_trace.network.topology import build_topology
from xsim_trace.replay import replay
from xsim_trace.rewrite.retarget import retarget
from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.generator import generate
from xsim_trace.workload.program import Program
from xsim_trace.workload.timing import Timer

REPO = Path(__file__).resolve().parents[1]
PAIRS = (("dev_dgx_a100", "dev_dgx_h100"), ("dev_dgx_h100", "dev_dgx_a100"))


def _accuracy_tool():
    spec = importlib.util.spec_from_file_location("accuracy_megatron", REPO / "tools" / "accuracy_megatron.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _replay_s(traces, groups, cluster) -> float:
    return replay(traces, make_backend("analytical", build_topology(cluster)), comm_groups=groups,
                  cluster=cluster).iteration_ns / 1e9


def _scaled(traces, factor: float):
    """Every node's duration times ``factor`` (a capture anchored on the measured step)."""
    out = {}
    for rank, t in traces.items():
        nodes = []
        for n in t.nodes:
            d = n.attr(A.DURATION_NS)
            if d:
                new = int(round(d * factor))
                n = dataclasses.replace(n, duration_micros=new // 1000).with_attrs(**{A.DURATION_NS: new})
            nodes.append(n)
        out[rank] = dataclasses.replace(t, nodes=tuple(nodes))
    return out


def host_factor(tool, src_row, dst_row) -> float:
    """Target / source host cost per module call of the two goldens' calibrations (fitted on all CI
    rows of each golden: in-sample for the row predicted), deterministic-mode factor included."""

    def per_call(row) -> float:
        family = tool.device_for(row, tool.CALIBRATION)[2]
        return family.host_module_ns * (family.host.deterministic_factor if row.fw.deterministic else 1.0)

    return per_call(dst_row) / per_call(src_row)


def predict_pair(tool, src_row, dst_row) -> tuple[float, float]:
    """Target step predicted from the source row's anchored capture, retargeted and replayed:
    (kernels only, kernels + host factor)."""
    dev, nic, family = tool.device_for(src_row, tool.CALIBRATION)
    links = LinkModel.for_device(dev, gpus_per_node=8, nic_gbps_per_gpu=nic)
    wl = generate(Program(src_row.model, src_row.fw), Timer(dev, links, src_row.fw, family=family))
    src_cluster = load_cluster(f"{tool.CLUSTERS[src_row.system]}:1")
    dst_cluster = load_cluster(f"{tool.CLUSTERS[dst_row.system]}:1")
    sim_src = _replay_s(wl.traces, wl.comm_groups, src_cluster)
    capture = _scaled(wl.traces, src_row.measured_s / sim_src)
    kernels = _replay_s(retarget(capture, dst_cluster), wl.comm_groups, dst_cluster)
    hf = host_factor(tool, src_row, dst_row)
    both = _replay_s(retarget(capture, dst_cluster, host_factor=hf), wl.comm_groups, dst_cluster)
    return kernels, both


def _err(sim: float, row) -> float:
    return (sim - row.measured_s) / row.measured_s * 100


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=0, help="only the first N test cases (sorted by name)")
    ap.add_argument("--csv", type=Path)
    args = ap.parse_args(argv)
    tool = _accuracy_tool()
    ref = args.reference or tool.DEFAULT_REFERENCE
    rows = tool._ci_rows(ref / "megatron_ci_step_times.csv", [])
    by_key = {(r.name.split(" [")[0], r.golden): r for r in rows if not tool.out_of_scope(r)}
    names = sorted({n for n, g in by_key if (n, PAIRS[0][0]) in by_key and (n, PAIRS[0][1]) in by_key})
    if args.limit:
        names = names[: args.limit]
    table = []
    for name in names:
        for src, dst in PAIRS:
            s, d = by_key[(name, src)], by_key[(name, dst)]
            try:
                sim_k, sim_h = predict_pair(tool, s, d)
            except XsimError as exc:
                print(f"skipped {name} {src}->{dst}: {exc}", file=sys.stderr)
                continue
            table.append((name, src, dst, s.measured_s, d.measured_s, sim_k, _err(sim_k, d), sim_h, _err(sim_h, d)))
    width = max((len(r[0]) for r in table), default=10)
    print(f"{'test case':<{width}}  {'direction':<10}  {'source_s':>8}  {'target_s':>8}  {'kernels_s':>9}  {'err_%':>6}  "
          f"{'+host_s':>8}  {'err_%':>6}")
    for name, src, dst, ms, md, sk, ek, sh, eh in table:
        arrow = "A100->H100" if src.endswith("a100") else "H100->A100"
        print(f"{name:<{width}}  {arrow:<10}  {ms:8.4f}  {md:8.4f}  {sk:9.4f}  {ek:+6.1f}  {sh:8.4f}  {eh:+6.1f}")
    for label, pick in (("A100->H100", "dev_dgx_a100"), ("H100->A100", "dev_dgx_h100")):
        for what, col in (("kernels only", 6), ("kernels + host factor", 8)):
            errs = [abs(r[col]) for r in table if r[1] == pick]
            if errs:
                print(f"{label} {what}: {len(errs)} test cases, median |error| {statistics.median(errs):.1f}%, "
                      f"within 5%: {sum(e <= 5 for e in errs)}, within 15%: {sum(e <= 15 for e in errs)}, "
                      f"worst {max(errs):.1f}%")
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            w = csv.writer(handle)
            w.writerow(["test_case", "source", "target", "source_s", "target_s", "kernels_s", "kernels_err_pct",
                        "with_host_s", "with_host_err_pct"])
            for r in table:
                w.writerow([r[0], r[1], r[2], *(f"{v:.6f}" for v in r[3:6]), f"{r[6]:.2f}", f"{r[7]:.6f}", f"{r[8]:.2f}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
