"""What each pipeline stage runs: the op lists of its model chunks, forward and backward."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.workload import ops as O
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.model import ModelSpec


#: host-side launches per pipeline pass outside the layers (schedule bookkeeping, p2p
#: isend/irecv + wait, loss / grad scaling, micro-batch data fetch), in units of one kernel launch
PASS_LAUNCHES = 0  # 0: off (fitting it did not lower the CI error; see docs/workload.md)
PARAM_BYTES = 2  # bf16 parameters (what ZeRO-3 / FSDP gathers)
#: ZeRO-3 / FSDP gradient reduce-scatter element size: fp32, as Megatron's main grads and the
#: fp32 reduce dtype torchtitan's FSDP2 mixed-precision policy uses
FSDP_GRAD_BYTES = 4


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


def rank_params(model: ModelSpec, fw: Framework, layers: int, *, embedding: bool, head: bool,
                moe_layers: int | None = None) -> tuple[int, int]:
    """(dense params, expert params) on one rank holding ``layers`` layers (``moe_layers`` of them
    MoE layers; default: all on an MoE model) and the vocab-parallel embedding / output layer when
    asked, after TP / EP sharding.  Multi-latent attention's down projections are replicated over TP."""
    m = model
    n_moe = (layers if m.is_moe else 0) if moe_layers is None else moe_layers
    attn = m.attention_params()
    replicated = m.mla_replicated_params()
    attn_rank = (attn - replicated) // fw.tp + replicated
    expert = n_moe * m.moe_experts * m.mlp_params(m.moe_ffn) // (fw.ep * fw.etp)
    moe_layer = attn_rank + m.norm_params() + m.hidden * m.moe_experts \
        + m.moe_shared_experts * m.mlp_params(m.moe_ffn) // fw.tp
    dense_layer = attn_rank + m.mlp_params() // fw.tp + m.norm_params()
    dense = n_moe * moe_layer + (layers - n_moe) * dense_layer + (embedding + head) * (m.vocab * m.hidden // fw.tp)
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
    def _layer_ops(self) -> dict[tuple[bool, bool], list[O.Op]]:
        """(moe layer, forward) -> one layer's ops (without FSDP gathers)."""
        kinds = {False, True} if self.model.is_moe and self.model.moe_dense_layers else {self.model.is_moe}
        out = {}
        for moe in kinds:
            out[(moe, True)] = O.layer_forward(self.model, self.fw, moe)
            out[(moe, False)] = O.layer_backward(self.model, self.fw, moe)
        return out

    @property
    def _layer_fwd(self) -> list[O.Op]:
        return self._layer_ops[(self.model.is_moe, True)]

    @property
    def _layer_bwd(self) -> list[O.Op]:
        return self._layer_ops[(self.model.is_moe, False)]

    def layer_ops(self, layer: int, forward: bool) -> list[O.Op]:
        return self._layer_ops[(self.model.is_moe_layer(layer), forward)]

    def pass_ops(self, stage: int, chunk: int, forward: bool) -> list[tuple[int | None, O.Op]]:
        """(layer index or None, op) in execution order for one pass of one micro-batch."""
        c = self.chunks[(stage, chunk)]
        units: list[tuple[int | None, str, list[O.Op]]] = []  # (layer, unit, ops)
        layers = range(c.first_layer, c.first_layer + c.layers)
        if forward:
            if c.has_embedding:
                units.append((None, "embedding", O.embedding_forward(self.model, self.fw)))
            units += [(layer, "layer", self.layer_ops(layer, True)) for layer in layers]
            if c.has_head:
                units.append((None, "head", O.head_forward(self.model, self.fw)))
        else:
            if c.has_head:
                units.append((None, "head", O.head_backward(self.model, self.fw)))
            units += [(layer, "layer", self.layer_ops(layer, False)) for layer in reversed(layers)]
            if c.has_embedding:
                units.append((None, "embedding", O.embedding_backward(self.model, self.fw)))
        out: list[tuple[int | None, O.Op]] = [(None, O.pass_overhead(PASS_LAUNCHES))] if PASS_LAUNCHES else []
        if self.fsdp:
            return out + self._with_fsdp(units, forward)
        for layer, _, ops in units:
            out += [(layer, op) for op in ops]
        return out

    # -- ZeRO-3 / FSDP ---------------------------------------------------------------------------
    @property
    def fsdp(self) -> bool:
        """ZeRO-3 / FSDP over a DP group of 2+ ranks: per-unit gathers and reduce-scatters inside
        the passes replace the gradient buckets and the post-optimizer parameter all-gather."""
        return self.fw.zero_stage >= 3 and self.fw.dp * self.fw.cp > 1

    def syncs_tied_embedding(self, stage: int) -> bool:
        """Whether ranks of ``stage`` all-reduce the tied embedding's gradient with the other end of
        the pipeline (tied input and output embeddings split over pp > 1 stages, trained)."""
        m, fw = self.model, self.fw
        return m.tied_embeddings and fw.pp > 1 and not fw.lora_rank and stage in (0, fw.pp - 1)

    def tied_embedding_grad_bytes(self, timer) -> int:
        """The tied embedding's gradient on one rank (vocab-parallel over TP) in the reduction dtype."""
        return self.model.vocab * self.model.hidden // self.fw.tp * timer.grad_reduce_bytes

    def unit_params(self, unit: str, layer: int | None) -> tuple[int, int]:
        """(dense, expert) parameters one rank holds of one FSDP unit (a layer, the embedding, the
        output layer) before sharding over DP (experts: over the expert-DP group)."""
        m, fw = self.model, self.fw
        if unit == "layer":
            return rank_params(m, fw, 1, embedding=False, head=False, moe_layers=int(m.is_moe_layer(layer)))
        if unit == "head" and m.tied_embeddings and fw.pp == 1:
            return 0, 0  # the output layer is the embedding's weight, gathered with it
        return m.vocab * m.hidden // fw.tp, 0

    def unit_trainable(self, unit: str, layer: int | None) -> tuple[int, int]:
        """(dense, expert) parameters of the unit that train (LoRA: the layers' adapters only)."""
        if not self.fw.lora_rank:
            return self.unit_params(unit, layer)
        if unit != "layer":
            return 0, 0
        return O.lora_params(self.layer_ops(layer, True)), 0

    def _fsdp_comms(self, counts: tuple[int, int], name: str, coll: CollectiveType, elt: int) -> tuple[O.CommOp, ...]:
        """The dense part over the DP group; experts under EP over their expert-DP group."""
        dense, expert = counts
        if self.fw.ep == 1:
            dense, expert = dense + expert, 0
        out = []
        if dense:
            out.append(O.CommOp(name, O.CommKind.DP, coll, dense * elt, asynchronous=True))
        if expert:
            out.append(O.CommOp(name + O.EXPERT_SUFFIX, O.CommKind.DP, coll, expert * elt, asynchronous=True,
                                group=O.EXPERT_DP_GROUP))
        return tuple(out)

    def _with_fsdp(self, units, forward: bool) -> list[tuple[int | None, O.Op]]:
        """ZeRO-3 / FSDP: each unit's bf16 parameters are all-gathered over the DP group before it
        runs (forward and again in backward), the next unit's gather issued when this one starts
        (prefetch, overlapped with its compute); in backward each unit's gradients are
        reduce-scattered as soon as it is done, overlapped with the next unit."""
        gathers = [self._fsdp_comms(self.unit_params(unit, layer), O.FSDP_GATHER, CollectiveType.ALL_GATHER,
                                    PARAM_BYTES) for layer, unit, _ in units]
        gathered = [i for i, g in enumerate(gathers) if g]
        out: list[tuple[int | None, O.Op]] = []
        if gathered:
            out += [(units[gathered[0]][0], op) for op in gathers[gathered[0]]]
        for i, (layer, unit, ops) in enumerate(units):
            if gathers[i]:
                out += [(layer, O.WaitOp(op.name)) for op in gathers[i]]
                nxt = next((j for j in gathered if j > i), None)
                if nxt is not None:
                    out += [(units[nxt][0], op) for op in gathers[nxt]]
            out += [(layer, op) for op in ops]
            if not forward:
                reduces = self._fsdp_comms(self.unit_trainable(unit, layer), O.FSDP_REDUCE,
                                           CollectiveType.REDUCE_SCATTER, FSDP_GRAD_BYTES)
                out += [(layer, op) for op in reduces]
        return out


    # -- parameters held by one rank of a stage --------------------------------------------------
    def stage_params(self, stage: int) -> tuple[int, int]:
        """(dense params, expert params) on one rank of ``stage`` after TP / EP sharding."""
        m, fw = self.model, self.fw
        held = [i for (s, _), c in self.chunks.items() if s == stage for i in range(c.first_layer, c.first_layer + c.layers)]
        # the output layer is on the last stage (a tied copy there when pp > 1)
        head = stage == fw.pp - 1 and (not m.tied_embeddings or fw.pp > 1)
        return rank_params(m, fw, len(held), embedding=stage == 0, head=head,
                           moe_layers=sum(m.is_moe_layer(i) for i in held))

    def stage_trainable_params(self, stage: int) -> tuple[int, int]:
        """(dense, expert) parameters one rank of ``stage`` trains: its gradients are reduced over
        DP and updated by the optimizer.  All of :meth:`stage_params` except under LoRA, where only
        the adapters train."""
        if not self.fw.lora_rank:
            return self.stage_params(stage)
        held = [i for (s, _), c in self.chunks.items() if s == stage for i in range(c.first_layer, c.first_layer + c.layers)]
        return sum(O.lora_params(self.layer_ops(i, True)) for i in held), 0

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
