"""Per-stage memory estimate: weights, gradients, optimizer state, activations; OOM flag.

Activations per layer per micro-batch follow Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models"): s*b*h*(34 + 5*a*s/h) bytes without parallelism, the
34 term divided by tp only under sequence parallelism (10 + 24/tp otherwise), the attention term
5*a*s/h divided by tp and dropped by selective recompute (or flash attention, which never stores
the score matrix); full recompute keeps only the 2*s*b*h layer input.  1F1B keeps up to pp
micro-batches in flight on stage 0 (pp - stage on later stages); interleaving adds (1 + (pp-1)/(pp*vpp)).
"""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.workload.framework import Recompute, Schedule
from xsim_trace.workload.program import Program

#: bytes per parameter: bf16 weight; fp32 main grad; Adam fp32 master + 2 moments
WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPTIMIZER_BYTES = 12
#: fraction of HBM usable by tensors (CUDA context, NCCL buffers, allocator fragmentation)
USABLE_FRACTION = 0.90


@dataclass(frozen=True, slots=True)
class StageMemory:
    stage: int
    params: int
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    capacity_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def out_of_memory(self) -> bool:
        return self.total_bytes > self.capacity_bytes

    def as_dict(self) -> dict:
        gib = 2**30
        return {
            "stage": self.stage,
            "params": self.params,
            "weights_GiB": round(self.weights_bytes / gib, 3),
            "grads_GiB": round(self.grads_bytes / gib, 3),
            "optimizer_GiB": round(self.optimizer_bytes / gib, 3),
            "activations_GiB": round(self.activations_bytes / gib, 3),
            "total_GiB": round(self.total_bytes / gib, 3),
            "capacity_GiB": round(self.capacity_bytes / gib, 3),
            "out_of_memory": self.out_of_memory,
        }


def layer_activation_bytes(program: Program) -> int:
    """Activation bytes one layer keeps for backward, per micro-batch, on one rank."""
    m, fw = program.model, program.fw
    s, b, h, a, t = m.seq_len // fw.cp, fw.micro_batch, m.hidden, m.heads, fw.tp
    if fw.recompute is Recompute.FULL:
        return 2 * s * b * h // (t if fw.sequence_parallel else 1)
    linear = 34 / t if fw.sequence_parallel else 10 + 24 / t
    if m.is_moe:  # the MLP part (19 of the 34) scales with the routed (and shared) tokens, on the MoE layers
        moe_share = m.moe_layers / m.layers
        linear += 19 / t * ((m.moe_top_k + m.moe_shared_experts) * m.moe_ffn / m.ffn - 1) * moe_share
    if m.is_mla:
        # Q and K (4 sbh of the 34) are a*qk wide, V and the output projection's input (4 sbh) a*v wide,
        # sharded over TP; the replicated down projections keep their latents (and the RoPE key)
        linear += (4 * (a * m.qk_head_dim - h) + 4 * (a * m.v_dim - h)) / (h * t)
        linear += 2 * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_dim) / h
    attn = 0.0 if (m.flash_attention or fw.recompute is Recompute.SELECTIVE) else 5 * a * m.seq_len / (h * t)
    return int(s * b * h * (linear + attn))


def stage_memory(program: Program, device: DeviceSpec) -> list[StageMemory]:
    fw = program.fw
    out = []
    per_layer = layer_activation_bytes(program)
    for stage in range(fw.pp):
        dense, expert = program.stage_params(stage)
        params = dense + expert
        dp = fw.dp * fw.cp
        edp = max(1, fw.dp * fw.cp * fw.tp // (fw.ep * fw.etp))
        opt_div_d = dp if fw.zero_stage >= 1 else 1
        opt_div_e = edp if fw.zero_stage >= 1 else 1
        t_dense, t_expert = program.stage_trainable_params(stage)  # all of them except under LoRA
        optimizer = OPTIMIZER_BYTES * (t_dense // opt_div_d + t_expert // opt_div_e)
        grads = GRAD_BYTES * (t_dense // (dp if fw.zero_stage >= 2 else 1) + t_expert // (edp if fw.zero_stage >= 2 else 1))
        weights = WEIGHT_BYTES * (dense // (dp if fw.zero_stage >= 3 else 1) + expert // (edp if fw.zero_stage >= 3 else 1))
        layers = sum(c.layers for (s, _), c in program.chunks.items() if s == stage)
        if program.fsdp:  # ZeRO-3: the unit running and the one prefetched are held unsharded
            held = [i for (s, _), c in program.chunks.items() if s == stage for i in range(c.first_layer, c.first_layer + c.layers)]
            weights += 2 * WEIGHT_BYTES * max(sum(program.unit_params("layer", i)) for i in held)
        if fw.schedule is Schedule.GPIPE:
            inflight = fw.microbatches
        else:
            inflight = min(fw.microbatches, fw.pp - stage)
        factor = 1.0 + ((fw.pp - 1) / (fw.pp * fw.vpp) if fw.vpp > 1 else 0.0)
        acts = int(per_layer * layers * inflight * factor)
        if stage == fw.pp - 1:  # logits (fp32) of the micro-batch being processed
            acts += 4 * fw.micro_batch * (program.model.seq_len // fw.cp) * program.model.vocab // fw.tp
        out.append(StageMemory(stage, params, weights, grads, optimizer, acts, int(device.hbm_bytes * USABLE_FRACTION)))
    return out
