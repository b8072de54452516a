"""Builders shared by the rewrite tests: small plans and hand-timed templates."""

from __future__ import annotations

import copy
from typing import Any

from xsim_trace.devices import get_device
from xsim_trace.layer_templates.template import LayerTemplate, ModelTemplate, OpTemplate

TINY_MODEL = {"num_layers": 4, "hidden": 768, "heads": 12, "ffn_hidden": 3072, "seq_len": 128, "vocab": 1000}


def fixed_template(fwd_ns: int = 300_000, bwd_ns: int = 600_000, *, act_bytes: int = 0, grad_bytes: int = 1200,
                   device: str = "H100-SXM5-80GB", tp_coll_bytes: int = 0) -> ModelTemplate:
    """One layer: a forward GEMM and a backward GEMM of fixed time (no FLOPs: class-ratio scaling),
    optionally a TP all-reduce after each."""
    fwd = [OpTemplate("fwd_gemm", "comp", fwd_ns, "gemm")]
    bwd = [OpTemplate("bwd_gemm", "comp", bwd_ns, "gemm")]
    if tp_coll_bytes:
        fwd.append(OpTemplate("fwd_tp_ar", "coll", comm_size_bytes=tp_coll_bytes))
        bwd.append(OpTemplate("bwd_tp_ar", "coll", comm_size_bytes=tp_coll_bytes))
    return ModelTemplate((LayerTemplate(tuple(fwd), tuple(bwd), 0),), get_device(device), 1, act_bytes, grad_bytes)


def plan_dict(**over: Any) -> dict:
    d = {
        "model": dict(TINY_MODEL),
        "device_groups": [{"name": "h100", "device": "H100", "count": 8},
                          {"name": "a100", "device": "A100-SXM4-80GB", "count": 8}],
        "pipelines": [{"stages": [{"group": "h100", "tp": 2, "layers": [0, 2]},
                                  {"group": "a100", "tp": 4, "layers": [2, 4]}]}],
        "micro_batches": 4,
        "schedule": "1f1b",
    }
    d = copy.deepcopy(d)
    d.update(over)
    return d


def replay_uniform(result, bw_GBps: float, latency_ns: float = 0.0):
    """Per-node times of the engine replay of a rewritten rank set on one switch whose every link
    has ``bw_GBps`` and ``latency_ns`` (a rank-to-rank flow crosses two links), collectives walked as
    ring schedules over those links (no NCCL latencies): hand numbers can be checked exactly."""
    from xsim_trace.cluster import single_switch
    from xsim_trace.evaluate.engine_times import engine_times
    from xsim_trace.replay import ReplaySettings

    return engine_times(result, single_switch(len(result.traces), bw_GBps, latency_ns), "analytical",
                        ReplaySettings(collective_model="schedule"))


def iteration_ns(times) -> int:
    return max(t.end_ns for t in times.values()) - min(t.start_ns for t in times.values())
