"""The transformer geometry a plan is checked against (heads for TP, sizes for memory)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelSpec:
    num_layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int = 32000
    seq_len: int = 2048
    micro_batch_size: int = 1
    kv_heads: int = 0  # 0 = same as heads (no GQA)
    gated_mlp: bool = True  # Llama SwiGLU: three ffn matrices instead of two
    dtype_bytes: int = 2  # bf16 weights and activations
    name: str = ""
    #: gradient bytes per parameter as kept and DP-reduced: Megatron accumulates and all-reduces bf16
    #: models' gradients in fp32 (4, the workload generator's GRAD_BYTES); 2 with bf16 reduction
    grad_reduce_bytes: int = 4
    optimizer_bytes_per_param: int = 12  # fp32 master weight + two Adam moments
    moe_experts: int = 0  # > 0: every layer's MLP is that many experts (MoE)
    moe_top_k: int = 1  # experts per token
    moe_ffn: int = 0  # an expert's width; 0 = ffn_hidden
    #: expert-parallel degree, folded onto each stage's TP ranks (MoE parallel folding): experts are
    #: split over ``expert_parallel`` ranks and each expert over the remaining tp / ep (expert TP)
    expert_parallel: int = 1
    #: full activation recompute (Megatron ``--recompute-granularity full``, FlashFlex ``--checkpoint-layers``):
    #: a layer keeps only its input for backward and reruns its forward (collectives included) before it
    recompute: bool = False
    #: fused (flash) attention: no ``a * s * s`` score / softmax / dropout tensors kept for backward
    flash_attention: bool = False

    @property
    def is_moe(self) -> bool:
        return self.moe_experts > 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn or self.ffn_hidden

    @property
    def bytes_per_param_state(self) -> int:
        """Weight + gradient + optimizer state per parameter (no sharding)."""
        return self.dtype_bytes + self.grad_reduce_bytes + self.optimizer_bytes_per_param

    @classmethod
    def from_workload(cls, spec, *, micro_batch_size: int = 1, seq_len: int | None = None) -> "ModelSpec":
        """From a :class:`xsim_trace.workload.model.ModelSpec` (a preset such as ``llama2-7b``)."""
        return cls(num_layers=spec.layers, hidden=spec.hidden, heads=spec.heads, ffn_hidden=spec.ffn,
                   vocab=spec.vocab, seq_len=seq_len or spec.seq_len, micro_batch_size=micro_batch_size,
                   kv_heads=spec.kv_heads if spec.kv_heads != spec.heads else 0, gated_mlp=spec.swiglu, name=spec.name,
                   moe_experts=spec.moe_experts, moe_top_k=spec.moe_top_k if spec.moe_experts else 1,
                   moe_ffn=spec.moe_ffn if spec.moe_experts and spec.moe_ffn != spec.ffn else 0)

    def to_workload(self):
        """The workload generator's geometry for this model (no biases, RMSNorm, SwiGLU if gated)."""
        from xsim_trace.workload.model import ModelSpec as WorkloadModel

        return WorkloadModel(name=self.name or "model", layers=self.num_layers, hidden=self.hidden, ffn=self.ffn_hidden,
                             heads=self.heads, vocab=self.vocab, seq_len=self.seq_len, kv_heads=self.kv_heads,
                             swiglu=self.gated_mlp, tied_embeddings=False, norm="rmsnorm", bias=False,
                             moe_experts=self.moe_experts, moe_top_k=self.moe_top_k, moe_ffn=self.moe_ffn)

    def expert_split(self, tp: int) -> tuple[int, int]:
        """(EP, expert TP) on a stage of TP ``tp``: the plan's expert parallelism folded onto the TP
        ranks, each expert split over the rest; (1, tp) for a dense model."""
        ep = self.expert_parallel if self.is_moe and tp % self.expert_parallel == 0 else 1
        return ep, tp // ep

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    def layer_params(self) -> int:
        h, f = self.hidden, self.ffn_hidden
        kv_dim = h * self.kv // self.heads
        attn = h * h * 2 + 2 * h * kv_dim  # q, o and k, v projections
        mats = 3 if self.gated_mlp else 2
        mlp = mats * h * f if not self.is_moe else self.moe_experts * (mats * h * self.expert_ffn + h)  # experts + router
        return attn + mlp + 2 * h  # two norms

    def active_layer_params(self) -> int:
        """Parameters one token passes through in a layer (MoE: its top-k experts and the router)."""
        if not self.is_moe:
            return self.layer_params()
        mats = 3 if self.gated_mlp else 2
        dense = self.layer_params() - self.moe_experts * (mats * self.hidden * self.expert_ffn + self.hidden)
        return dense + self.moe_top_k * mats * self.hidden * self.expert_ffn + self.moe_experts * self.hidden

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def layer_grad_bytes(self) -> int:
        """Bytes of one layer's gradient (what DP reduces), unsharded, at ``grad_reduce_bytes``."""
        return self.layer_params() * self.grad_reduce_bytes

    def embedding_grad_bytes(self) -> int:
        """Bytes of the embedding (or output layer) gradient, unsharded."""
        return self.embedding_params() * self.grad_reduce_bytes

    def boundary_activation_bytes(self) -> int:
        """Bytes of the hidden state passed between pipeline stages for one micro-batch."""
        return self.seq_len * self.micro_batch_size * self.hidden * self.dtype_bytes

    def layer_activation_bytes(self, tp: int) -> int:
        """Activation memory one layer keeps for backward per micro-batch: with recompute its input
        only (``s*b*h`` at ``dtype_bytes``, on every TP rank), else :meth:`layer_working_bytes`."""
        if self.recompute:
            return self.seq_len * self.micro_batch_size * self.hidden * self.dtype_bytes
        return self.layer_working_bytes(tp)

    def layer_working_bytes(self, tp: int) -> int:
        """Everything one layer's forward keeps for its backward, per micro-batch (Korthikanti et al.'s
        s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes, no sequence parallelism; the ``5*a*s/(h*t)`` attention
        scores, softmax and dropout mask are not kept with flash attention).  Under recompute one layer
        at a time holds this while it reruns its forward and backward."""
        s, b, h, a = self.seq_len, self.micro_batch_size, self.hidden, self.heads
        scores = 0.0 if self.flash_attention else 5 * a * s / (h * tp)
        return int(s * b * h * (10 + 24 / tp + scores))

    def layer_fwd_flops(self) -> int:
        """Forward FLOPs of one layer for one micro-batch (GEMMs + attention scores)."""
        tokens = self.seq_len * self.micro_batch_size
        return 2 * tokens * self.active_layer_params() + 4 * tokens * self.seq_len * self.hidden
