"""What each pipeline stage runs: the op lists of its model chunks, forward and backward."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xsim_trace.workload import ops as O
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.model import ModelSpec


#: host-side launches per pipeline pass outside the layers (schedule bookkeeping, p2p
#: isend/irecv + wait, loss / grad scaling, micro-batch data fetch), in units of one kernel launch
PASS_LAUNCHES = 0  # 0: off (fitting it did not lower the CI error; see docs/workload.md)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One model chunk: ``virtual`` = global virtual-stage index (chunk * pp + stage)."""

    stage: int
    chunk: int
    virtual: int
    first_layer: int
    layers: int
    has_embedding: bool
    has_head: bool


def rank_params(model: ModelSpec, fw: Framework, layers: int, *, embedding: bool, head: bool) -> tuple[int, int]:
    """(dense params, expert params) on one rank holding ``layers`` layers (and the vocab-parallel
    embedding / output layer when asked) after TP / EP sharding."""
    m = model
    if m.is_moe:
        expert = layers * m.moe_experts * m.mlp_params(m.moe_ffn) // (fw.ep * fw.etp)
        dense_layer = m.attention_params() // fw.tp + m.norm_params() + m.hidden * m.moe_experts
    else:
        expert = 0
        dense_layer = (m.attention_params() + m.mlp_params()) // fw.tp + m.norm_params()
    dense = layers * dense_layer + (embedding + head) * (m.vocab * m.hidden // fw.tp)
    return dense, expert


@dataclass(frozen=True)
class Program:
    model: ModelSpec
    fw: Framework

    def __post_init__(self) -> None:
        self.fw.check_model(self.model)

    @functools.cached_property
    def chunks(self) -> dict[tuple[int, int], Chunk]:
        fw = self.fw
        counts = fw.stage_layers(self.model)
        total = fw.pp * fw.vpp
        out: dict[tuple[int, int], Chunk] = {}
        first = 0
        for v in range(total):
            chunk, stage = divmod(v, fw.pp)
            out[(stage, chunk)] = Chunk(stage, chunk, v, first, counts[v], v == 0, v == total - 1)
            first += counts[v]
        return out

    @functools.cached_property
    def _layer_fwd(self) -> list[O.Op]:
        return O.layer_forward(self.model, self.fw)

    @functools.cached_property
    def _layer_bwd(self) -> list[O.Op]:
        return O.layer_backward(self.model, self.fw)

    def pass_ops(self, stage: int, chunk: int, forward: bool) -> list[tuple[int | None, O.Op]]:
        """(layer index or None, op) in execution order for one pass of one micro-batch."""
        c = self.chunks[(stage, chunk)]
        out: list[tuple[int | None, O.Op]] = [(None, O.pass_overhead(PASS_LAUNCHES))] if PASS_LAUNCHES else []
        layers = range(c.first_layer, c.first_layer + c.layers)
        if forward:
            if c.has_embedding:
                out += [(None, op) for op in O.embedding_forward(self.model, self.fw)]
            for layer in layers:
                out += [(layer, op) for op in self._layer_fwd]
            if c.has_head:
                out += [(None, op) for op in O.head_forward(self.model, self.fw)]
        else:
            if c.has_head:
                out += [(None, op) for op in O.head_backward(self.model, self.fw)]
            for layer in reversed(layers):
                out += [(layer, op) for op in self._layer_bwd]
            if c.has_embedding:
                out += [(None, op) for op in O.embedding_backward(self.model, self.fw)]
        return out

    # -- parameters held by one rank of a stage --------------------------------------------------
    def stage_params(self, stage: int) -> tuple[int, int]:
        """(dense params, expert params) on one rank of ``stage`` after TP / EP sharding."""
        m, fw = self.model, self.fw
        layers = sum(c.layers for (s, _), c in self.chunks.items() if s == stage)
        # the output layer is on the last stage (a tied copy there when pp > 1)
        head = stage == fw.pp - 1 and (not m.tied_embeddings or fw.pp > 1)
        return rank_params(m, fw, layers, embedding=stage == 0, head=head)

    def stage_trainable_params(self, stage: int) -> tuple[int, int]:
        """(dense, expert) parameters one rank of ``stage`` trains: its gradients are reduced over
        DP and updated by the optimizer.  All of :meth:`stage_params` except under LoRA, where only
        the adapters train."""
        if not self.fw.lora_rank:
            return self.stage_params(stage)
        layers = sum(c.layers for (s, _), c in self.chunks.items() if s == stage)
        return layers * O.lora_params(self._layer_fwd), 0

    def stage_param_tensors(self, stage: int) -> int:
        """Parameter tensors held by one rank of ``stage`` (weights, biases, norm scales)."""
        m, fw = self.model, self.fw
        layers = sum(c.layers for (s, _), c in self.chunks.items() if s == stage)
        norms = 2 * (2 if m.norm == "layernorm" else 1)
        attn = 2 * (2 if m.bias else 1)
        mats = 2 * (2 if m.bias else 1)
        if m.is_moe:
            mats = max(m.moe_experts // fw.ep, 1) * (2 if fw.ep > 0 else 1) + 1
        n = layers * (norms + attn + mats)
        if stage == 0:
            n += 2
        if stage == fw.pp - 1:
            n += 2
        return n

    def iteration_flops(self) -> int:
        """Model FLOPs of one iteration over all ranks (recompute included)."""
        per_mb = 0
        for (stage, chunk) in sorted(self.chunks):
            for forward in (True, False):
                per_mb += O.flops_of([op for _, op in self.pass_ops(stage, chunk, forward)])
        # every rank of a TP x CP group did its share of one micro-batch; DP replicas each do m micro-batches
        return per_mb * self.fw.tp * self.fw.cp * self.fw.microbatches * self.fw.dp


def megatron_formula_flops(model: ModelSpec, global_batch: int) -> float:
    """Narayanan et al. (SC'21) eq.: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), full recompute."""
    B, s, l, h, V = global_batch, model.seq_len, model.layers, model.hidden, model.vocab
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
