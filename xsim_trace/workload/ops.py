"""Per-layer compute and communication of a Megatron-style transformer, per rank, per micro-batch.

Everything here is counted for ONE rank processing ONE micro-batch: GEMMs sharded 1/tp, the
sequence split 1/cp, norms and elementwise work on 1/tp of the tokens under sequence parallelism,
MoE expert work spread evenly over the replica's tp*cp ranks (balanced routing).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from xsim_trace.devices.compute import KernelClass
from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.workload.framework import Framework, Recompute
from xsim_trace.workload.host import HostGroup
from xsim_trace.workload.model import ModelSpec


class Phase(enum.Enum):
    FWD = "fwd"
    BWD = "bwd"
    RECOMPUTE = "recompute"
    OPTIMIZER = "optimizer"


class CommKind(enum.Enum):
    TP = "tp"
    CP = "cp"
    EP = "ep"
    DP = "dp"
    PP = "pp"


@dataclass(frozen=True, slots=True)
class ComputeOp:
    name: str
    kernel_class: KernelClass
    flops: int
    bytes_accessed: int
    kernels: int = 1  # how many kernel launches this op stands for (device-overhead model)
    #: host issue cost in units of the device's host_op_overhead_ns per kernel; chosen so that
    #: kernels * host_weight = the framework module calls the op stands for (the host cost of a
    #: Megatron step is Python/PyTorch work per module call, not per CUDA launch)
    host_weight: float = 1.0
    #: which kind of framework module issues it (the host model scales the per-call cost by kind)
    host_group: HostGroup = HostGroup.MODULE
    #: kernel shape for the shape-aware compute model (devices.kernels): GEMM (m, n, k, groups);
    #: flash attention (batch*heads, keys per query, head dim, causal 0/1); () = roofline only
    shape: tuple[int, ...] = ()
    #: "fwd", "dgrad", "wgrad" (GEMMs) or "bwd" (others)
    role: str = "fwd"
    #: a linear layer that runs in the framework's matmul precision (fp8 under Transformer Engine);
    #: other GEMMs (logits, router, attention bmm) stay bf16
    linear: bool = False
    #: a frozen weight (LoRA base): its backward computes the data gradient only
    frozen: bool = False
    #: kernel launches of its backward when they differ from the forward's (0: as many as forward)
    bwd_kernels: int = 0


@dataclass(frozen=True, slots=True)
class CommOp:
    name: str
    kind: CommKind
    collective: CollectiveType | None  # None for a ring step (``ring``)
    size_bytes: int  # the collective's buffer size per rank (Chakra comm_size convention)
    #: issued at its place in the pass on the rank's comm stream without blocking the compute chain;
    #: a later :class:`WaitOp` of the same name makes the next op wait for it (prefetch, overlap)
    asynchronous: bool = False
    #: one step of a ring over the op's group: send ``size_bytes`` to the next rank of the group and
    #: receive as much from the previous one (context-parallel KV exchange)
    ring: bool = False
    #: another group than the kind's own: ``EXPERT_DP_GROUP`` (expert parameters under ZeRO-3)
    group: str = ""


@dataclass(frozen=True, slots=True)
class WaitOp:
    """The next op waits for the latest asynchronous :class:`CommOp` named ``name`` (a no-op when
    none was issued in the pass)."""

    name: str


Op = ComputeOp | CommOp | WaitOp


@dataclass(frozen=True, slots=True)
class Dims:
    """Per-rank micro-batch dimensions."""

    tokens: int  # b * s / cp: tokens this rank's TP group works on
    tokens_sp: int  # tokens in the sequence-parallel regions (tokens / tp with SP)
    seq_kv: int  # keys each query attends to (full sequence)
    elt: int  # bytes per activation element (bf16 = 2; fp8 GEMMs keep bf16 activations)


def dims(model: ModelSpec, fw: Framework) -> Dims:
    tokens = fw.micro_batch * model.seq_len // fw.cp
    return Dims(
        tokens=tokens,
        tokens_sp=tokens // fw.tp if fw.sequence_parallel else tokens,
        seq_kv=model.seq_len,
        elt=2,
    )


def _gemm(name: str, m: int, n: int, k: int, elt: int, kernels: int = 1, group: HostGroup = HostGroup.MODULE,
          *, linear: bool = False) -> ComputeOp:
    return ComputeOp(name, KernelClass.GEMM, 2 * m * n * k, (m * k + k * n + m * n) * elt, kernels, 1.0, group,
                     (m, n, k, 1), "fwd", linear)


def _mem(name: str, kc: KernelClass, nbytes: int, kernels: int = 1, modules: float = 1.0,
         group: HostGroup = HostGroup.MODULE) -> ComputeOp:
    """A memory-bound op of ``kernels`` launches issued by ``modules`` framework module calls."""
    return ComputeOp(name, kc, 0, nbytes, kernels, modules / kernels, group)


#: the unfused attention core (scores, softmax + dropout, context) is one module call on the host
#: (Megatron's DotProductAttention / TE's unfused backend), shared by its three ops
_CORE_SHARE = 1.0 / 3.0


def _tp_in(model: ModelSpec, fw: Framework, d: Dims, name: str) -> list[Op]:
    """Entering a TP region: all-gather the sequence under SP (nothing otherwise)."""
    if fw.tp > 1 and fw.sequence_parallel:
        return [CommOp(name, CommKind.TP, CollectiveType.ALL_GATHER, d.tokens * model.hidden * d.elt)]
    return []


def _tp_out(model: ModelSpec, fw: Framework, d: Dims, name: str) -> list[Op]:
    """Leaving a TP region: reduce-scatter under SP, all-reduce otherwise."""
    if fw.tp == 1:
        return []
    coll = CollectiveType.REDUCE_SCATTER if fw.sequence_parallel else CollectiveType.ALL_REDUCE
    return [CommOp(name, CommKind.TP, coll, d.tokens * model.hidden * d.elt)]


def attention_core_ops(model: ModelSpec, fw: Framework, d: Dims, *, cp_ring: bool = True) -> list[Op]:
    """Scores, softmax and the weighted sum (one fused kernel with flash attention).  With context
    parallelism, flash attention runs as a ring (:func:`expand_cp_ring` splits it into cp steps);
    the unfused core (or ``cp_ring=False``: formats without point-to-point steps, SimAI) all-gathers
    K and V over the CP group first, the same bytes per rank as the ring."""
    heads_tp = model.heads // fw.tp
    qk, v = model.qk_head_dim, model.v_dim
    # QK^T and AV, full (un-masked) count as in Megatron's formula (4 t s h for qk = v = head_dim)
    flops = 2 * d.tokens * d.seq_kv * heads_tp * (qk + v)
    q_bytes = d.tokens * heads_tp * (qk + v) * d.elt  # Q in, O out
    ops: list[Op] = []
    if fw.cp > 1 and not (model.flash_attention and cp_ring):
        ops.append(CommOp("cp_kv_allgather", CommKind.CP, CollectiveType.ALL_GATHER, cp_kv_bytes(model, fw, d) * fw.cp))
    if model.flash_attention:
        nbytes = q_bytes + fw.cp * cp_kv_bytes(model, fw, d)
        shape = (fw.micro_batch * heads_tp, d.seq_kv, qk, int(model.causal))
        ops.append(ComputeOp("flash_attention", KernelClass.ATTENTION, flops, nbytes, kernels=1, shape=shape))
        return ops
    score_bytes = fw.micro_batch * heads_tp * (d.tokens // fw.micro_batch) * d.seq_kv * d.elt
    core = HostGroup.ATTENTION_CORE
    q_len = d.tokens // fw.micro_batch
    bh = fw.micro_batch * heads_tp
    ops.append(ComputeOp("attn_scores_bmm", KernelClass.GEMM, 2 * d.tokens * d.seq_kv * heads_tp * qk,
                         d.tokens * heads_tp * 2 * qk * d.elt + score_bytes, 1, _CORE_SHARE, core, (q_len, d.seq_kv, qk, bh)))
    ops.append(_mem("attn_softmax_dropout", KernelClass.SOFTMAX, 3 * score_bytes, kernels=2, modules=_CORE_SHARE, group=core))
    ops.append(ComputeOp("attn_context_bmm", KernelClass.GEMM, 2 * d.tokens * d.seq_kv * heads_tp * v,
                         score_bytes + d.tokens * heads_tp * 2 * v * d.elt, 1, _CORE_SHARE, core, (q_len, v, d.seq_kv, bh)))
    return ops


def cp_kv_bytes(model: ModelSpec, fw: Framework, d: Dims) -> int:
    """Bytes of this rank's K and V block (its 1/cp of the sequence, its TP share of the heads; a
    KV head is not split below one head when tp exceeds the KV heads)."""
    if model.is_mla:
        width = model.heads // fw.tp * (model.qk_head_dim + model.v_dim)
    else:
        width = 2 * max(model.kv_hidden // fw.tp, model.head_dim)
    return d.tokens * width * d.elt


CP_RING = "cp_kv_ring"
FSDP_GATHER = "fsdp_param_allgather"
FSDP_REDUCE = "fsdp_grad_reducescatter"
EXPERT_SUFFIX = "_experts"
EXPERT_DP_GROUP = "expert_dp"


def expand_cp_ring(ops: list[Op], model: ModelSpec, fw: Framework) -> list[Op]:
    """Context parallelism as a P2P ring (Megatron / Transformer Engine): the flash-attention op of
    a pass becomes ``cp`` steps, each over 1/cp of the keys; before step i the ring sends the KV
    block it holds to the next CP rank and receives the previous rank's, overlapped with step i
    (the next step waits for it).  Backward passes K, V and the partial dK, dV (twice the bytes).
    Under the load-balanced causal split (2 cp chunks per sequence) every step does half its dense
    work, as the whole kernel did."""
    if fw.cp == 1:
        return ops
    d = dims(model, fw)
    out: list[Op] = []
    for op in ops:
        if not (isinstance(op, ComputeOp) and op.kernel_class is KernelClass.ATTENTION and op.shape):
            out.append(op)
            continue
        bh, seq_kv, hd, causal = op.shape
        # one module call issues the whole ring (Transformer Engine's context-parallel attention
        # function loops over the steps): the steps share its host cost
        step = dataclasses.replace(op, name=op.name + "_cp_step", flops=op.flops // fw.cp, host_weight=op.host_weight / fw.cp,
                                   bytes_accessed=op.bytes_accessed // fw.cp, shape=(bh, seq_kv // fw.cp, hd, causal))
        size = cp_kv_bytes(model, fw, d) * (2 if op.role == "bwd" else 1)
        ring = CommOp(CP_RING + ("_bwd" if op.role == "bwd" else ""), CommKind.CP, None, size, True, True)
        for i in range(fw.cp):
            if i < fw.cp - 1:
                out.append(ring)
            out.append(step)
            if i < fw.cp - 1:
                out.append(WaitOp(ring.name))
    return out


def mlp_ops(model: ModelSpec, fw: Framework, d: Dims, moe: bool | None = None) -> list[Op]:
    """The MLP of one layer: dense (``moe`` False, or a dense model), else the MoE block."""
    h, e = model.hidden, d.elt
    if not (model.is_moe if moe is None else moe):
        f_tp = model.ffn // fw.tp
        up = (2 if model.swiglu else 1) * f_tp
        return [
            _gemm("mlp_fc1", d.tokens, up, h, e, linear=True),
            _mem("mlp_act", KernelClass.ELEMENTWISE, (up + f_tp) * d.tokens * e),
            _gemm("mlp_fc2", d.tokens, h, f_tp, e, linear=True),
        ]
    # MoE: router, dispatch, expert GEMMs (balanced over the replica's tp*cp ranks), combine
    t_moe = d.tokens_sp
    local_experts = max(model.moe_experts // fw.ep, 1)
    mats = 3 if model.swiglu else 2
    # the busiest expert-parallel rank sets the pace (moe_imbalance x the balanced share)
    expert_tokens = int(fw.micro_batch * model.seq_len * model.moe_top_k * fw.moe_imbalance) // (fw.tp * fw.cp)
    expert_flops = 2 * expert_tokens * h * model.moe_ffn * mats
    expert_bytes = local_experts * mats * h * (model.moe_ffn // fw.etp) * e + 3 * expert_tokens * h * e
    moe_group = HostGroup.MOE
    ops: list[Op] = [_gemm("moe_router", t_moe, model.moe_experts, h, e, group=moe_group)]
    gather = _moe_gather_group(fw) if fw.moe_dispatcher == "allgather" else None
    ops += _moe_dispatch_ops(model, fw, d, gather)
    # one expert MLP module per local expert (two GEMM launches each)
    per_expert = max(1, expert_tokens // local_experts)
    shape = (per_expert, mats * model.moe_ffn // fw.etp, h, local_experts)
    ops.append(ComputeOp("moe_experts", KernelClass.GEMM, expert_flops, expert_bytes, 2 * local_experts, 0.5, moe_group,
                         shape, "fwd", True))
    ops.append(_mem("moe_expert_act", KernelClass.ELEMENTWISE, 3 * expert_tokens * model.moe_ffn * e // fw.etp,
                    kernels=local_experts, modules=local_experts, group=moe_group))
    ops += _moe_combine_ops(model, fw, d, gather)
    if model.moe_shared_experts:
        # the shared experts: one dense MLP of width shared * moe_ffn over every token, TP-sharded
        f_tp = model.moe_shared_experts * model.moe_ffn // fw.tp
        up = (2 if model.swiglu else 1) * f_tp
        ops += [_gemm("moe_shared_fc1", d.tokens, up, h, e, group=moe_group, linear=True),
                _mem("moe_shared_act", KernelClass.ELEMENTWISE, (up + f_tp) * d.tokens * e, group=moe_group),
                _gemm("moe_shared_fc2", d.tokens, h, f_tp, e, group=moe_group, linear=True)]
    return ops


def _moe_dispatch_ops(model: ModelSpec, fw: Framework, d: Dims, gather: tuple[CommKind, float] | None) -> list[Op]:
    """The MoE token dispatch before the experts: permute, then the all-to-all over EP (``gather`` None:
    the all-to-all dispatcher, or a dispatcher with nothing to gather over); else Megatron's
    MoEAllGatherTokenDispatcher over the group ``gather`` names (kind, buffer scale), then permute."""
    h, e, t_moe = model.hidden, d.elt, d.tokens_sp
    routed = t_moe * model.moe_top_k
    if gather is None:
        ops: list[Op] = [_mem("moe_permute", KernelClass.ELEMENTWISE, 2 * routed * h * e, kernels=4, group=HostGroup.MOE)]
        if fw.ep > 1:
            ops.append(CommOp("moe_dispatch_a2a", CommKind.EP, CollectiveType.ALL_TO_ALL,
                              int(routed * fw.moe_imbalance) * h * e))
        return ops
    kind, scale = gather
    # every rank of the expert-TP x EP group gathers all the group's tokens (and their routing map and
    # probabilities), then keeps those of its local experts
    return [
        CommOp("moe_dispatch_allgather", kind, CollectiveType.ALL_GATHER, int(scale * t_moe * h * e)),
        CommOp("moe_dispatch_allgather_probs", kind, CollectiveType.ALL_GATHER,
               int(scale * t_moe * model.moe_experts * 5)),  # fp32 probabilities + bool map
        _mem("moe_permute", KernelClass.ELEMENTWISE, 2 * routed * h * e + fw.etp * fw.ep * t_moe * model.moe_experts,
             kernels=4, group=HostGroup.MOE),
    ]


def _moe_combine_ops(model: ModelSpec, fw: Framework, d: Dims, gather: tuple[CommKind, float] | None) -> list[Op]:
    """The MoE combine after the experts, the mirror of :func:`_moe_dispatch_ops`: all-to-all back then
    unpermute; or (all-gather dispatcher) unpermute into a zeroed buffer of the group's tokens, then
    reduce-scatter it back."""
    h, e, t_moe = model.hidden, d.elt, d.tokens_sp
    routed = t_moe * model.moe_top_k
    if gather is None:
        ops: list[Op] = []
        if fw.ep > 1:
            ops.append(CommOp("moe_combine_a2a", CommKind.EP, CollectiveType.ALL_TO_ALL,
                              int(routed * fw.moe_imbalance) * h * e))
        ops.append(_mem("moe_unpermute", KernelClass.ELEMENTWISE, 2 * routed * h * e, kernels=3, group=HostGroup.MOE))
        return ops
    kind, scale = gather
    n = fw.etp * fw.ep
    return [
        _mem("moe_unpermute", KernelClass.ELEMENTWISE, 2 * routed * h * e + n * t_moe * h * e, kernels=3,
             group=HostGroup.MOE),
        CommOp("moe_combine_reducescatter", kind, CollectiveType.REDUCE_SCATTER, int(scale * t_moe * h * e)),
    ]


def _moe_gather_group(fw: Framework) -> tuple[CommKind, float] | None:
    """The group the all-gather dispatcher gathers over (Megatron's expert-TP x EP group of etp * ep
    ranks), as a group the generator has: EP (or TP when ep is 1), with the buffer scaled so that each
    rank receives the (n - 1) token blocks it receives in the real group; None when n is 1."""
    n = fw.etp * fw.ep
    if n == 1:
        return None
    g = fw.ep if fw.ep > 1 else fw.tp
    if g == 1:
        return None
    return (CommKind.EP if fw.ep > 1 else CommKind.TP), (n - 1) * g / (g - 1)


#: Megatron's unfused RoPE (``_apply_rotary_pos_emb_bshd``, called once for q and once for k), per rotated
#: tensor of N elements.  Forward: the frequency tables (cos, sin, two ``* mscale``, two ``.to(dtype)``:
#: 6 kernels on the small [s, 1, 1, d] table) and 6 kernels over the tensor: ``t * cos`` (2N), the
#: rotate-half's neg of one half (N) and its cat/stack (2N), ``* sin`` (2N), the add (3N) and the final
#: cat with the (empty) pass-through part (2N): 12 kernels, 12 N elements moved.  Backward (autograd): the
#: two multiplies (4N), the neg (N), the rotate-half split's cat (2N), the accumulation of t's two
#: gradient paths (3N), and the slice's zero-filled full-size gradient plus its copy (3N): 7 kernels.
ROPE_FWD_KERNELS = 12
ROPE_BWD_KERNELS = 7
ROPE_FWD_PASSES = 12  # elements moved / N
#: host cost of one eager torch op, in framework module calls: the model's own price for eager kernels
#: inside a module's forward, the unfused attention core (one module call for its four kernels: scores,
#: softmax, dropout, context; ``_CORE_SHARE``)
EAGER_OP_CALLS = 0.25


def rope_ops(fw: Framework, rotated_elems: int, fused_bytes: int, elt: int) -> list[Op]:
    """Rotary embedding of q and k (``rotated_elems`` elements together): Transformer Engine's fused
    kernel (one module call, ``fused_bytes``) or, with ``fw.rope_fusion`` off, Megatron's eager ops."""
    if fw.rope_fusion:
        return [_mem("rope_bias", KernelClass.ELEMENTWISE, fused_bytes)]
    kernels = 2 * ROPE_FWD_KERNELS
    return [ComputeOp("rope_unfused", KernelClass.ELEMENTWISE, 0, ROPE_FWD_PASSES * rotated_elems * elt, kernels,
                      EAGER_OP_CALLS, bwd_kernels=2 * ROPE_BWD_KERNELS)]


def qkv_ops(model: ModelSpec, fw: Framework, d: Dims) -> list[Op]:
    """Projections into the attention core.  Multi-latent attention (Megatron's MLA layer): the
    down projections of the query and of the joint KV latent (+ the shared RoPE key) are replicated
    over TP; their norms, then the up projections sharded by heads."""
    h, e = model.hidden, d.elt
    if not model.is_mla:
        qkv_out = (h + 2 * model.kv_hidden) // fw.tp
        rotated = d.tokens * (h + model.kv_hidden) // fw.tp
        ops = [_gemm("qkv_proj", d.tokens, qkv_out, h, e, linear=True)]
        if model.position_embedding == "rope":  # learned absolute positions are added once, in the embedding
            ops += rope_ops(fw, rotated, 2 * d.tokens * qkv_out * e, e)
        return ops
    heads_tp = model.heads // fw.tp
    q_out = heads_tp * model.qk_head_dim
    ops: list[Op] = []
    if model.q_lora_rank:
        ops += [_gemm("mla_q_down", d.tokens, model.q_lora_rank, h, e, linear=True),
                _mem("mla_q_norm", KernelClass.NORM, 2 * d.tokens * model.q_lora_rank * e),
                _gemm("mla_q_up", d.tokens, q_out, model.q_lora_rank, e, linear=True)]
    else:
        ops.append(_gemm("mla_q_proj", d.tokens, q_out, h, e, linear=True))
    kv_up_out = heads_tp * (model.qk_nope_dim + model.v_head_dim)
    ops += [_gemm("mla_kv_down", d.tokens, model.kv_lora_rank + model.qk_rope_dim, h, e, linear=True),
            _mem("mla_kv_norm", KernelClass.NORM, 2 * d.tokens * model.kv_lora_rank * e),
            _gemm("mla_kv_up", d.tokens, kv_up_out, model.kv_lora_rank, e, linear=True),
            *rope_ops(fw, d.tokens * (heads_tp + 1) * model.qk_rope_dim, 2 * d.tokens * (q_out + kv_up_out) * e, e)]
    return ops


def layer_forward(model: ModelSpec, fw: Framework, moe: bool | None = None) -> list[Op]:
    """One transformer layer's forward on one rank for one micro-batch, in execution order; ``moe``
    picks the MoE or the dense MLP on a model that has both (default: MoE on an MoE model)."""
    return expand_cp_ring(_layer_forward(model, fw, moe), model, fw)


def layer_forward_collective(model: ModelSpec, fw: Framework, moe: bool | None = None) -> list[Op]:
    """One layer's forward with every communication a collective (no CP ring steps, no waits):
    for formats that have no point-to-point steps (SimAI)."""
    return _layer_forward(model, fw, moe, cp_ring=False)


def _layer_forward(model: ModelSpec, fw: Framework, moe: bool | None, *, cp_ring: bool = True) -> list[Op]:
    d = dims(model, fw)
    h, e = model.hidden, d.elt
    moe = model.is_moe if moe is None else moe
    norm = KernelClass.NORM
    ops: list[Op] = [_mem("input_norm", norm, 2 * d.tokens_sp * h * e)]
    ops += _tp_in(model, fw, d, "tp_allgather_attn")
    ops += qkv_ops(model, fw, d)
    ops += attention_core_ops(model, fw, d, cp_ring=cp_ring)
    ops.append(_gemm("attn_out_proj", d.tokens, h, model.heads // fw.tp * model.v_dim, e, linear=True))
    ops += _tp_out(model, fw, d, "tp_reduce_attn")
    ops.append(_mem("attn_residual_dropout", KernelClass.ELEMENTWISE, 3 * d.tokens_sp * h * e))
    ops.append(_mem("post_attn_norm", norm, 2 * d.tokens_sp * h * e))
    if not moe:
        ops += _tp_in(model, fw, d, "tp_allgather_mlp")
    ops += mlp_ops(model, fw, d, moe)
    if not moe:
        ops += _tp_out(model, fw, d, "tp_reduce_mlp")
    ops.append(_mem("mlp_residual_dropout", KernelClass.ELEMENTWISE, 3 * d.tokens_sp * h * e))
    return with_lora(ops, fw)


def with_lora(ops: list[Op], fw: Framework) -> list[Op]:
    """Under LoRA (``fw.lora_rank`` > 0) every linear layer's weight is frozen and followed by its
    two adapter GEMMs (x A: k -> r, then B: r -> n, bf16, trainable); expert GEMMs are frozen
    without adapters."""
    r = fw.lora_rank
    if not r:
        return ops
    out: list[Op] = []
    for op in ops:
        if not (isinstance(op, ComputeOp) and op.linear):
            out.append(op)
            continue
        out.append(dataclasses.replace(op, frozen=True))
        m, n, k, groups = op.shape
        if groups == 1:
            out.append(_gemm(op.name + "_lora_a", m, r, k, 2, group=op.host_group))
            out.append(_gemm(op.name + "_lora_b", m, n, r, 2, group=op.host_group))
    return out


def lora_params(ops: list[Op]) -> int:
    """Adapter parameters among ``ops`` (one layer's forward): k*r + r*n per adapted linear."""
    return sum(op.shape[1] * op.shape[2] for op in ops
               if isinstance(op, ComputeOp) and (op.name.endswith("_lora_a") or op.name.endswith("_lora_b")))


_BWD_TP = {
    CollectiveType.ALL_GATHER: CollectiveType.REDUCE_SCATTER,
    CollectiveType.REDUCE_SCATTER: CollectiveType.ALL_GATHER,
    CollectiveType.ALL_REDUCE: CollectiveType.ALL_REDUCE,
    CollectiveType.ALL_TO_ALL: CollectiveType.ALL_TO_ALL,
}


def backward_of(ops: list[Op]) -> list[Op]:
    """Backward of a forward op list: reverse order; a GEMM becomes data-grad + weight-grad GEMMs
    (2x FLOPs), attention 2x FLOPs, memory-bound ops 2x bytes; TP all-gather <-> reduce-scatter."""
    out: list[Op] = []
    for op in reversed(ops):
        if isinstance(op, WaitOp):
            raise ValueError("backward_of takes a forward op list before its CP ring is expanded")
        if isinstance(op, CommOp):
            out.append(CommOp(op.name + "_bwd", op.kind, _BWD_TP[op.collective], op.size_bytes))
        elif op.kernel_class is KernelClass.GEMM:
            # one autograd node issues both GEMMs: together they cost the forward op's host time
            half = op.host_weight if op.frozen else op.host_weight / 2
            g = op.host_group
            dgrad = wgrad = ()
            if op.shape:
                m, n, k, groups = op.shape
                dgrad, wgrad = (m, k, n, groups), (k, n, m, groups)  # dX = dY W^T; dW = X^T dY
            out.append(ComputeOp(op.name + "_dgrad", op.kernel_class, op.flops, op.bytes_accessed, op.kernels, half, g,
                                 dgrad, "dgrad", op.linear))
            if not op.frozen:
                out.append(ComputeOp(op.name + "_wgrad", op.kernel_class, op.flops, op.bytes_accessed, op.kernels, half,
                                     g, wgrad, "wgrad", op.linear))
        elif op.kernel_class is KernelClass.ATTENTION:
            out.append(ComputeOp(op.name + "_bwd", op.kernel_class, 2 * op.flops, 2 * op.bytes_accessed, op.kernels,
                                 op.host_weight, op.host_group, op.shape, "bwd"))
        else:
            out.append(ComputeOp(op.name + "_bwd", op.kernel_class, op.flops, 2 * op.bytes_accessed,
                                 op.bwd_kernels or op.kernels, op.host_weight, op.host_group, op.shape, "bwd"))
    return out


def layer_backward(model: ModelSpec, fw: Framework, moe: bool | None = None) -> list[Op]:
    """Backward of one layer, preceded by its recomputation under activation recompute."""
    fwd = _layer_forward(model, fw, moe)
    pre: list[Op] = []
    if fw.recompute is Recompute.FULL:
        pre = [_renamed(op, "recompute_") for op in expand_cp_ring(fwd, model, fw)]
    elif fw.recompute is Recompute.SELECTIVE and not model.flash_attention:
        core = attention_core_ops(model, fw, dims(model, fw))
        pre = [_renamed(op, "recompute_") for op in core if isinstance(op, ComputeOp)]
    return pre + expand_cp_ring(backward_of(fwd), model, fw)


def _renamed(op: Op, prefix: str) -> Op:
    return dataclasses.replace(op, name=prefix + op.name)


def embedding_forward(model: ModelSpec, fw: Framework) -> list[Op]:
    """Vocab-parallel embedding lookup on the first stage (+ TP reduction of the partial lookups)."""
    d = dims(model, fw)
    ops: list[Op] = [_mem("embedding", KernelClass.EMBEDDING, 2 * d.tokens * model.hidden * d.elt, kernels=3)]
    ops += _tp_out(model, fw, d, "tp_reduce_embedding")
    if model.position_embedding == "learned_absolute":
        # Megatron's LanguageModelEmbedding: the position table's lookup (an nn.Embedding module call,
        # N = tokens x hidden elements read and written) and its eager add to the word embeddings (3 N)
        ops.append(_mem("position_embedding", KernelClass.EMBEDDING, 5 * d.tokens * model.hidden * d.elt, kernels=2,
                        modules=1.0 + EAGER_OP_CALLS))
    return ops


def head_forward(model: ModelSpec, fw: Framework) -> list[Op]:
    """Final norm, vocab-parallel logits GEMM and cross-entropy on the last stage."""
    d = dims(model, fw)
    v_tp = model.vocab // fw.tp
    ops: list[Op] = [_mem("final_norm", KernelClass.NORM, 2 * d.tokens_sp * model.hidden * d.elt)]
    ops += _tp_in(model, fw, d, "tp_allgather_head")
    logits = _gemm("logits", d.tokens, v_tp, model.hidden, d.elt)
    ops.append(dataclasses.replace(logits, frozen=True) if fw.lora_rank else logits)
    ops.append(_mem("cross_entropy", KernelClass.SOFTMAX, 3 * d.tokens * v_tp * 4, kernels=6))
    return ops


def head_backward(model: ModelSpec, fw: Framework) -> list[Op]:
    return backward_of(head_forward(model, fw))


def embedding_backward(model: ModelSpec, fw: Framework) -> list[Op]:
    return backward_of(embedding_forward(model, fw))


def pass_overhead(launches: int) -> ComputeOp:
    """Host work of one pipeline pass outside its layers: no device work, ``launches`` launch costs."""
    return ComputeOp("pass_overhead", KernelClass.OTHER, 0, 0, kernels=launches)


def pp_activation_bytes(model: ModelSpec, fw: Framework) -> int:
    """Bytes sent between pipeline stages per micro-batch (scattered over TP under SP)."""
    d = dims(model, fw)
    return d.tokens_sp * model.hidden * d.elt


def flops_of(ops: list[Op]) -> int:
    return sum(op.flops for op in ops if isinstance(op, ComputeOp))
