"""DeepSpeed pipeline engine (Megatron-DeepSpeed) on a heterogeneous deployment: what one stage holds, whether
DeepSpeed can build it, how much memory one of its GPUs needs, and the 1F1B schedule across stages whose replicas
run at different speeds.

The framework facts (DeepSpeed ``PipelineEngine`` with its fused ``FP16_Optimizer``, Megatron v1.1.5's
``GPT2ModelPipe`` and ``get_params_for_weight_decay_optimization``; the same structure in Sailor's
Megatron-DeepSpeed fork):

- A stage is a contiguous run of pipeline units: word + position embedding, ``L`` transformer blocks, the final
  LayerNorm and the head tied to the word embedding (plus parameter-free units: transposes, the fp32 cast).
- Megatron builds two optimizer parameter groups per stage: weights with weight decay (every parameter of a
  non-LayerNorm module that is not a bias) and parameters without (biases, LayerNorm).  DeepSpeed's fused fp16
  optimizer flattens each group with ``_flatten_dense_tensors``, which fails on an empty group, so a stage holding
  only embeddings / the head (no bias, no LayerNorm) or only parameter-free units cannot start: the run fails
  before its first iteration, whatever the memory (:func:`unbuildable_reason`).
- Memory per GPU (:func:`stage_memory_bytes`): fp16 weights and gradients, the fp32 master copy and its gradient,
  Adam's two fp32 moments (20 B per local parameter), the fp32 copy of a gradient bucket for the fp32 all-reduce;
  activations of the micro-batches 1F1B keeps in flight (``min(stages - stage, micro-batches)``), per block the
  Korthikanti et al. (2022) bytes without sequence parallelism or recompute (``34 + 5 a s / h`` bytes per token
  and hidden unit, the attention part divided by TP; ``s^2`` scores only when attention is not fused); on the head
  stage the fp32 logits and one fp16 copy of them.
- 1F1B (:func:`schedule_1f1b`): DeepSpeed's ``TrainSchedule`` order per stage, each replica its own pass times,
  blocking stage-to-stage transfers (DeepSpeed's p2p is a two-rank broadcast: the sender waits for the wire);
  the slowest stage paces the pipeline.

This module holds the model only; xsim_trace.validate.hetero_predict feeds it measured-run deployments.
"""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.errors import GraphError
from xsim_trace.workload.schedule import one_f_one_b

#: bytes per local parameter of the fp16 mixed-precision state: fp16 weight (2) + fp16 gradient (2) + fp32 master
#: weight (4) + its fp32 gradient (4) + Adam momentum and variance (8)
STATE_BYTES_PER_PARAM = 20
#: bytes per local parameter the fp16 optimizer step reads and writes: overflow check (2) + unscale and norm of the
#: fp32 gradient (4 + 4) + Adam on master, momentum, variance (read p, g, m, v, write p, m, v: 28) + fp16 copy (2 + 4)
OPTIMIZER_BYTES_PER_PARAM = 44
#: DeepSpeed's gradient all-reduce bucket (elements), copied to fp32 when ``fp32_allreduce`` is set
ALLREDUCE_BUCKET_ELEMENTS = 500_000_000


@dataclass(frozen=True, slots=True)
class StageContent:
    """The pipeline units one stage holds."""

    blocks: int
    embedding: bool
    final_norm: bool
    head: bool


@dataclass(frozen=True, slots=True)
class BlockDims:
    hidden: int
    ffn: int
    heads: int
    vocab: int
    seq_len: int


def block_params(d: BlockDims) -> int:
    """One GPT-2 / OPT block: QKV + projection with biases, two LayerNorms, the MLP with biases."""
    h, f = d.hidden, d.ffn
    return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h


def stage_params(d: BlockDims, st: StageContent) -> int:
    params = st.blocks * block_params(d)
    if st.embedding:
        params += d.vocab * d.hidden + d.seq_len * d.hidden
    if st.final_norm:
        params += 2 * d.hidden
    if st.head:  # the tied copy of the word embedding (DeepSpeed builds the whole EmbeddingPipe on the stage)
        params += d.vocab * d.hidden + d.seq_len * d.hidden
    return params


def param_groups(d: BlockDims, st: StageContent) -> tuple[int, int]:
    """(with weight decay, without) parameter counts of Megatron's two optimizer groups on this stage."""
    h, f = d.hidden, d.ffn
    decay = st.blocks * (4 * h * h + 2 * h * f)
    no_decay = st.blocks * (4 * h + f + h + 4 * h)
    if st.embedding:
        decay += d.vocab * h + d.seq_len * h
    if st.head:
        decay += d.vocab * h + d.seq_len * h
    if st.final_norm:
        no_decay += 2 * h
    return decay, no_decay


def unbuildable_reason(d: BlockDims, st: StageContent) -> str:
    """Why DeepSpeed's fused fp16 optimizer cannot be built on this stage ("" when it can)."""
    decay, no_decay = param_groups(d, st)
    if decay and no_decay:
        return ""
    missing = " and ".join(n for n, v in (("weight-decay", decay), ("no-decay", no_decay)) if not v)
    return f"empty {missing} parameter group (DeepSpeed's fp16 optimizer cannot flatten an empty group)"


def layer_activation_bytes(d: BlockDims, micro_batch: int, tp: int, fused_attention: bool = False) -> float:
    """Activation bytes one block keeps for its backward (Korthikanti et al. 2022, no sequence parallelism)."""
    s, b, h, a = d.seq_len, micro_batch, d.hidden, d.heads
    scores = 0.0 if fused_attention else 5 * a * s / (h * tp)
    return s * b * h * (10 + 24 / tp + scores)


def stage_memory_bytes(d: BlockDims, st: StageContent, stage: int, stages: int, micro_batch: int,
                       micro_batches: int, tp: int, fused_attention: bool = False) -> float:
    """Bytes one GPU of a stage replica needs (without the CUDA context / workspace reserve)."""
    params = stage_params(d, st) / tp
    state = params * STATE_BYTES_PER_PARAM + min(params, ALLREDUCE_BUCKET_ELEMENTS) * 4
    in_flight = min(stages - stage, micro_batches)
    s, b, h = d.seq_len, micro_batch, d.hidden
    act = layer_activation_bytes(d, micro_batch, tp, fused_attention) * st.blocks * in_flight
    if st.embedding:
        act += s * b * h * 2 * in_flight
    if st.head:  # fp32 logits (kept as the softmax, its gradient computed in place) + one fp16 copy: the fp16
        # logits while they are cast in the forward, the gradient's fp16 copy in the backward
        act += s * b * d.vocab / tp * (4 + 2)
    return state + act


def schedule_1f1b(fwd: list[int], bwd: list[int], p2p: list[int], m: int,
                  p2p_bwd: list[int] | None = None) -> list[int]:
    """DeepSpeed ``TrainSchedule`` (1F1B) on one pipeline replica: the end time of each stage's last backward.
    ``fwd[s]`` / ``bwd[s]`` are stage s's pass times, ``p2p[s]`` the activation transfer from stage s to s + 1 and
    ``p2p_bwd[s]`` the gradient's way back (default: the same; the sender is busy until it is on the wire)."""
    back = p2p if p2p_bwd is None else p2p_bwd
    p = len(fwd)
    orders = [one_f_one_b(s, p, m) for s in range(p)]
    f_end = [[0] * m for _ in range(p)]
    b_end = [[0] * m for _ in range(p)]
    free = [0] * p
    pos = [0] * p
    done = 0
    total = sum(len(o) for o in orders)
    while done < total:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                step = orders[s][pos[s]]
                i = step.microbatch
                if step.forward:
                    if s > 0 and not f_end[s - 1][i]:
                        break
                    ready = f_end[s - 1][i] + p2p[s - 1] if s > 0 else 0
                    end = max(free[s], ready) + fwd[s]
                    f_end[s][i] = end
                    free[s] = end + (p2p[s] if s < p - 1 else 0)
                else:
                    if s < p - 1 and not b_end[s + 1][i]:
                        break
                    ready = b_end[s + 1][i] + back[s] if s < p - 1 else 0
                    end = max(free[s], ready) + bwd[s]
                    b_end[s][i] = end
                    free[s] = end + (back[s - 1] if s > 0 else 0)
                pos[s] += 1
                done += 1
                progressed = True
        if not progressed:  # cannot happen for 1F1B orders; a guard against an endless loop
            raise GraphError(f"1F1B recursion stalled after {done} of {total} passes")
    return [max(b_end[s]) for s in range(p)]


def program_stages(program) -> list[StageContent]:
    """The stage contents of a generator :class:`~xsim_trace.workload.program.Program` (chunk 0 of each stage; the
    final LayerNorm sits with the head)."""
    out = []
    for stage in range(program.fw.pp):
        c = program.chunks[(stage, 0)]
        out.append(StageContent(blocks=c.layers, embedding=c.has_embedding, final_norm=c.has_head, head=c.has_head))
    return out


def deepspeed_check(program, capacity_bytes: float) -> list[dict]:
    """Per stage, DeepSpeed's view of a generator program (what ``xsim estimate --framework deepspeed`` reports
    next to the Megatron memory model): whether the fused fp16 optimizer can be built, and the fp16 pipeline
    memory of one GPU against ``capacity_bytes`` (no reserve)."""
    m, fw = program.model, program.fw
    dims = BlockDims(hidden=m.hidden, ffn=m.ffn, heads=m.heads, vocab=m.vocab, seq_len=m.seq_len)
    micro_batches = fw.global_batch // (fw.micro_batch * fw.dp)
    out = []
    for s, st in enumerate(program_stages(program)):
        need = stage_memory_bytes(dims, st, s, fw.pp, fw.micro_batch, micro_batches, fw.tp,
                                  fused_attention=bool(m.flash_attention))
        out.append({"stage": s, "unbuildable": unbuildable_reason(dims, st), "memory_GiB": round(need / 2**30, 2),
                    "out_of_memory": need > capacity_bytes})
    return out


__all__ = ["ALLREDUCE_BUCKET_ELEMENTS", "BlockDims", "OPTIMIZER_BYTES_PER_PARAM", "STATE_BYTES_PER_PARAM",
           "StageContent", "block_params", "deepspeed_check", "layer_activation_bytes", "param_groups",
           "program_stages", "schedule_1f1b", "stage_memory_bytes", "stage_params", "unbuildable_reason"]
