"""SimAI / AICB text workloads of a heterogeneous plan: one per device group.

SimAI's ``HYBRID_TRANSFORMER_FWD_IN_BCKWD`` format describes one homogeneous job (one TP degree,
one device), so the honest mapping of a mixed plan is one file per device group: the group's first
stage (its TP degree, its layers, embedding / head where that stage holds them) timed on the
group's device, with a header for the homogeneous job in which every stage looked like it (TP of
the stage, the plan's pipeline depth, DP and micro-batches).  A group whose stages differ (TP,
layer count, embedding / head) is described by its first stage, with a warning.
"""

from __future__ import annotations

import logging

from xsim_trace.plan.model import Plan

log = logging.getLogger(__name__)


def _stage_signature(plan: Plan, p: int, s: int) -> tuple:
    pipe = plan.pipelines[p]
    last = len(pipe.stages) * plan.chunks - 1
    st = pipe.stages[s]
    return st.tp, tuple(b - a for a, b in st.chunks), s == 0, any(c * len(pipe.stages) + s == last for c in range(plan.chunks))


def group_simai_lines(plan: Plan, wmodel) -> dict[str, list[str]]:
    """``{group name: SimAI lines}`` for every group that holds a stage, in plan order (``plan``
    with its layer ranges resolved)."""
    from xsim_trace.workload.comm import LinkModel
    from xsim_trace.workload.framework import Framework
    from xsim_trace.workload.program import Chunk, rank_params
    from xsim_trace.workload.simai import stage_simai_lines
    from xsim_trace.workload.timing import Timer

    out: dict[str, list[str]] = {}
    for g in plan.groups:
        held = [(p, s) for p, pipe in enumerate(plan.pipelines) for s, st in enumerate(pipe.stages) if st.group == g.name]
        if not held:
            continue
        p, s = held[0]
        sigs = {_stage_signature(plan, pp, ss) for pp, ss in held}
        if len(sigs) > 1:
            log.warning("device group %s holds stages that differ (TP, layers, embedding / head); its SimAI file "
                        "describes pipelines[%d].stages[%d]", g.name, p, s)
        pipe = plan.pipelines[p]
        st = pipe.stages[s]
        n_st, v = len(pipe.stages), plan.chunks
        mbs = plan.model.micro_batch_size
        fw = Framework(tp=st.tp, pp=n_st, vpp=v, dp=plan.dp, micro_batch=mbs,
                       global_batch=mbs * plan.micro_batches_of(p) * plan.dp)
        dev = g.spec()
        timer = Timer(dev, LinkModel.for_device(dev, g.devices_per_node, g.nic_gbps), fw)
        chunks = []
        for c, (a, b) in enumerate(st.chunks):
            vs = c * n_st + s
            chunks.append(Chunk(s, c, vs, a, b - a, vs == 0, vs == n_st * v - 1))
        dense, expert = rank_params(wmodel, fw, sum(ch.layers for ch in chunks),
                                    embedding=any(ch.has_embedding for ch in chunks), head=any(ch.has_head for ch in chunks))
        out[g.name] = stage_simai_lines(wmodel, fw, timer, chunks, dense + expert)
    return out


def simai_path(out: str, group: str) -> str:
    """``w.txt`` -> ``w.<group>.txt``; ``w`` -> ``w.<group>.txt``."""
    stem = out[:-4] if out.endswith(".txt") else out
    return f"{stem}.{group}.txt"


__all__ = ["group_simai_lines", "simai_path"]
