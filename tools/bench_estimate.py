#!/usr/bin/env python3
"""CPU seconds of one ``xsim estimate`` prediction (workload.predict.predict, no files) per
configuration, up to 16,384 GPUs, against the 2-second target of issue 13; the same configurations
through the CLI (``xsim estimate --json``, in process) for the command's own cost.

usage: tools/bench_estimate.py [--repeat N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time

from xsim_trace.cli.main import main as xsim_main
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.predict import predict
from xsim_trace.workload.spec_file import make_setup

CASES = (
    ("llama3-8b", "H100", dict(tp=1, pp=1, dp=8, global_batch=128)),
    ("llama3-70b", "H100", dict(tp=8, pp=4, dp=32, vpp=5, global_batch=1024, sequence_parallel=True,
                                distributed_optimizer=True, overlap_grad_reduce=True)),
    ("gpt3-175b", "A100", dict(tp=8, pp=12, dp=16, global_batch=1536, recompute="full")),
    ("mixtral-8x22b", "H100", dict(tp=2, pp=8, dp=64, ep=8, global_batch=1024, sequence_parallel=True)),
    ("llama3-405b", "H100", dict(tp=8, pp=16, dp=128, global_batch=2048, sequence_parallel=True,
                                 distributed_optimizer=True, overlap_grad_reduce=True, recompute="full")),
    ("llama3-405b", "H100", dict(tp=8, pp=16, dp=128, vpp=7, global_batch=16384, sequence_parallel=True,
                                 distributed_optimizer=True)),
    ("deepseek-v3", "H100", dict(pp=16, dp=128, ep=64, global_batch=8192, distributed_optimizer=True, precision="fp8",
                                 recompute="full")),
    ("llama3-70b", "H100", dict(tp=8, cp=8, dp=256, global_batch=512, sequence_parallel=True, zero_stage=3)),
)


def _flags(model: str, device: str, kw: dict) -> list[str]:
    out = ["estimate", "--model", model, "--device", device, "--json"]
    for key, value in kw.items():
        flag = {"global_batch": "--gbs", "sequence_parallel": "--sp", "distributed_optimizer": "--distributed-optimizer",
                "overlap_grad_reduce": "--overlap-grad-reduce", "zero_stage": "--zero"}.get(key, f"--{key.replace('_', '-')}")
        out += [flag] if value is True else [flag, str(value)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{'model':<14} {'device':<6} {'GPUs':>6} {'mb':>5} {'predict_cpu_s':>13} {'cli_cpu_s':>9}  step_s")
    worst = 0.0
    for model, device, kw in CASES:
        fw = Framework(**kw)
        best = best_cli = float("inf")
        for _ in range(args.repeat):
            t0 = time.process_time()
            pred = predict(make_setup(model, fw, device))
            best = min(best, time.process_time() - t0)
            t0 = time.process_time()
            with contextlib.redirect_stdout(io.StringIO()):
                assert xsim_main(_flags(model, device, kw)) == 0
            best_cli = min(best_cli, time.process_time() - t0)
        worst = max(worst, best_cli)
        print(f"{model:<14} {device:<6} {fw.world_size:>6} {fw.microbatches:>5} {best:>13.3f} {best_cli:>9.3f}  {pred.step_s:.3f}")
    print(f"slowest CLI prediction: {worst:.3f} CPU s (target < 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
