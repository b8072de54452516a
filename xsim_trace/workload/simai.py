"""SimAI / AICB text workload (``HYBRID_TRANSFORMER_FWD_IN_BCKWD``) for exchange.

One line per layer block: ``name  -1  fwd_ns fwd_comm fwd_bytes  ig_ns ig_comm ig_bytes
wg_ns wg_comm wg_bytes  update_ns``; compute times in ns on one representative rank of
stage 0 (stage s of a pipeline shows its own layers; AICB files describe one stage).  Forward
communication is the block's TP (or EP) collective, input-gradient the backward one, weight
gradient the DP reduction (first line) and none per block.
"""

from __future__ import annotations

import os
from typing import Sequence

from xsim_trace.graph.kinds import CollectiveType
from xsim_trace.io import atomic_write
from xsim_trace.workload import ops as O
from xsim_trace.workload.estimate import GRAD_BYTES, PARAM_BYTES
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.layout import Coord, Layout
from xsim_trace.workload.model import ModelSpec
from xsim_trace.workload.program import Chunk, Program
from xsim_trace.workload.timing import Timer

_NAMES = {
    CollectiveType.ALL_REDUCE: "ALLREDUCE",
    CollectiveType.ALL_GATHER: "ALLGATHER",
    CollectiveType.REDUCE_SCATTER: "REDUCESCATTER",
    CollectiveType.ALL_TO_ALL: "ALLTOALL",
    CollectiveType.BROADCAST: "BROADCAST",
}


def _comm(ops: list[O.Op]) -> tuple[str, int]:
    comms = [op for op in ops if isinstance(op, O.CommOp)]
    if not comms:
        return "NONE", 0
    name = _NAMES.get(comms[0].collective, "NONE")
    if comms[0].kind is O.CommKind.EP:
        name += "_EP"
    return name, sum(op.size_bytes for op in comms)


def _split(ops: list[O.Op]) -> list[tuple[str, list[O.Op]]]:
    """A layer's forward ops as (attention block, mlp block)."""
    cut = next(i for i, op in enumerate(ops) if op.name == "post_attn_norm")
    return [("attention_layer", ops[:cut]), ("mlp_moelayer" if any(op.name.startswith("moe") for op in ops) else "mlp_layer", ops[cut:])]


def simai_lines(program: Program, timer: Timer, stage: int = 0) -> list[str]:
    fw = program.fw
    dense, expert = program.stage_trainable_params(stage)
    chunks = [c for (s, _), c in sorted(program.chunks.items()) if s == stage]
    return stage_simai_lines(program.model, fw, timer, chunks, dense + expert, rank=Layout(fw).rank(Coord(0, 0, 0, stage)))


def stage_simai_lines(model: ModelSpec, fw: Framework, timer: Timer, chunks: Sequence[Chunk], params: int, *,
                      rank: int = 0) -> list[str]:
    """The workload of one stage given its model chunks and its per-rank parameter count (the
    heterogeneous path builds stages that no homogeneous :class:`Program` has)."""

    def t(ops: list[O.Op]) -> int:
        return max(1, sum(timer.op_ns(op, rank) for op in ops if isinstance(op, O.ComputeOp)))

    grads = params * GRAD_BYTES
    lines = []
    if fw.zero_stage >= 1:
        lines.append(f"grad_gather\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER\t{params * PARAM_BYTES}\t100")
        lines.append(f"grad_param_comm\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER\t{grads}\t100")
    else:
        lines.append(f"grad_param_comm\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCE\t{grads}\t100")
    blocks: list[tuple[str, list[O.Op]]] = []
    layer_fwd = {moe: O.layer_forward_collective(model, fw, moe) for moe in {False, model.is_moe}}
    for c in chunks:
        if c.has_embedding:
            blocks.append(("embedding_layer", O.embedding_forward(model, fw)))
        for layer in range(c.first_layer, c.first_layer + c.layers):
            blocks += _split(layer_fwd[model.is_moe_layer(layer)])
        if c.has_head:
            blocks.append(("head_layer", O.head_forward(model, fw)))
    for name, fwd in blocks:
        bwd = O.backward_of(fwd)
        ig = [op for op in bwd if not (isinstance(op, O.ComputeOp) and op.name.endswith("_wgrad"))]
        wg = [op for op in bwd if isinstance(op, O.ComputeOp) and op.name.endswith("_wgrad")]
        fc, fs = _comm(fwd)
        ic, isz = _comm(ig)
        lines.append(f"{name}\t-1\t{t(fwd)}\t{fc}\t{fs}\t{t(ig)}\t{ic}\t{isz}\t{t(wg)}\tNONE\t0\t100")
    header = (
        f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {fw.tp} ep: {fw.ep} pp: {fw.pp} "
        f"vpp: {fw.vpp} ga: {fw.microbatches} all_gpus: {fw.world_size} checkpoints: 0 checkpoint_initiates: 0 "
        f"pp_comm {O.pp_activation_bytes(model, fw)}"
    )
    return [header, str(len(lines)), *lines]


def write_simai(path: "str | os.PathLike[str]", program: Program, timer: Timer, stage: int = 0) -> None:
    with atomic_write(path) as handle:
        handle.write("\n".join(simai_lines(program, timer, stage)) + "\n")
