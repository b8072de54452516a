"""Step-time prediction of one configuration without writing rank files: the closed-form estimate
(:func:`xsim_trace.workload.estimate.estimate`) turned into a breakdown that sums to the step,
MFU, tokens/s/GPU and memory per stage.  ``xsim estimate`` prints it; plan search calls
:func:`predict` directly.

Breakdown (seconds, one rank of the critical stage: the stage whose pipeline end plus exposed
gradient sync sets the step):

- ``compute``: GPU kernel time of its forward/backward passes (all micro-batches);
- ``tp`` / ``cp`` / ``ep``: communication serial inside the passes (exposed by construction);
- ``pp``: pipeline send/recv waits (schedule with the p2p times minus without them);
- ``bubble``: pipeline fill/drain idle (end - busy - pp);
- ``host``: time the GPU waited for the host to issue work, plus the framework's per-step host work;
- ``dp``: exposed data-parallel gradient reduction and (ZeRO) parameter all-gather;
- ``optimizer``: the optimizer step (the slowest stage's).

MFU counts model FLOPs without recompute (6 N + attention) against the device's dense bf16
peak, the usual convention also for fp8 runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from xsim_trace.devices.spec import Precision
from xsim_trace.workload.estimate import Estimate, estimate
from xsim_trace.workload.framework import Recompute
from xsim_trace.workload.memory import StageMemory, stage_memory
from xsim_trace.workload.program import Program
from xsim_trace.workload.spec_file import Setup

BREAKDOWN_KEYS = ("compute", "tp", "cp", "ep", "pp", "bubble", "host", "dp", "optimizer")


@dataclass(frozen=True, slots=True)
class Prediction:
    step_ns: int
    breakdown_ns: tuple[tuple[str, int], ...]  # BREAKDOWN_KEYS order; sums to step_ns
    model_flops: int  # per iteration, all ranks, no recompute
    world_size: int
    tokens_per_step: int
    peak_flops_per_gpu: float
    memory: tuple[StageMemory, ...]
    estimate: Estimate

    @property
    def step_s(self) -> float:
        return self.step_ns / 1e9

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.world_size * self.step_s * self.peak_flops_per_gpu)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_step / self.step_s / self.world_size

    @property
    def out_of_memory(self) -> bool:
        return any(m.out_of_memory for m in self.memory)

    def part_ns(self, key: str) -> int:
        return dict(self.breakdown_ns)[key]


def predict(setup: Setup) -> Prediction:
    """Predict one iteration of ``setup`` (model x framework x device x links x framework family)."""
    program, timer = setup.program, setup.timer
    est = estimate(program, timer)
    crit = est.critical_stage
    opt_stage = max(est.stages, key=lambda st: (st.optimizer_ns + st.param_gather_ns, -st.stage))
    fixed_host = timer.family.step_fixed_host_ns if timer.family is not None else 0
    parts = {
        "compute": crit.compute_ns,
        "tp": crit.comm("tp"),
        "cp": crit.comm("cp"),
        "ep": crit.comm("ep"),
        "pp": crit.pp_exposed_ns,
        "bubble": max(0, crit.pipeline_end_ns - crit.busy_ns - crit.pp_exposed_ns),
        "host": crit.host_exposed_ns + fixed_host,
        "dp": crit.dp_exposed_ns + opt_stage.param_gather_ns + crit.comm("dp"),
        "optimizer": opt_stage.optimizer_ns - fixed_host,
    }
    fw = program.fw
    no_recompute = program if fw.recompute is Recompute.NONE else Program(
        program.model, dataclasses.replace(fw, recompute=Recompute.NONE))
    return Prediction(
        step_ns=est.step_ns,
        breakdown_ns=tuple((k, int(parts[k])) for k in BREAKDOWN_KEYS),
        model_flops=no_recompute.iteration_flops(),
        world_size=fw.world_size,
        tokens_per_step=fw.global_batch * program.model.seq_len,
        peak_flops_per_gpu=timer.device.peak_flops(Precision.BF16),
        memory=tuple(stage_memory(program, timer.device)),
        estimate=est,
    )


def prediction_dict(setup: Setup, pred: Prediction) -> dict:
    """The ``--json`` object: ``step_time_s`` is the prediction, the breakdown beside it."""
    fw = setup.fw
    return {
        "model": setup.model.name,
        "device": setup.device.name,
        "framework": setup.family.name if setup.family is not None else None,
        "deterministic": fw.deterministic,
        "transformer_impl": fw.transformer_impl,
        "rope_fusion": fw.rope_fusion,
        "position_embedding": setup.model.position_embedding,
        "moe_dispatcher": fw.moe_dispatcher,
        "world_size": fw.world_size,
        "parallelism": {"tp": fw.tp, "pp": fw.pp, "dp": fw.dp, "cp": fw.cp, "ep": fw.ep, "etp": fw.etp, "vpp": fw.vpp,
                        "micro_batch": fw.micro_batch, "global_batch": fw.global_batch,
                        "microbatches": fw.microbatches, "zero_stage": fw.zero_stage,
                        "recompute": fw.recompute.value, "precision": fw.precision.value},
        "step_time_s": round(pred.step_s, 6),
        "breakdown_s": {k: round(v / 1e9, 6) for k, v in pred.breakdown_ns},
        "mfu": round(pred.mfu, 4),
        "model_tflops_per_gpu": round(pred.model_flops / fw.world_size / pred.step_s / 1e12, 2),
        "tokens_per_s_per_gpu": round(pred.tokens_per_s_per_gpu, 1),
        "memory": [m.as_dict() for m in pred.memory],
        "out_of_memory": pred.out_of_memory,
    }
