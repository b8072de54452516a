"""MoE layers in deployment plans: experts, top-k and expert parallelism folded onto each stage's TP
ranks; checked by the plan, costed by the closed form (expert GEMMs, dispatch / combine
all-to-all) and rewritten into all-to-alls on the expert-parallel groups."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.checks import check_rank_set
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.layer_templates.template import templates_from_model
from xsim_trace.plan.closed_form import estimate_plan
from xsim_trace.plan.parse import plan_from_mapping
from xsim_trace.plan.partition import _tp_collectives_ns
from xsim_trace.plan.stage_cost import LATENCY_NS
from xsim_trace.rewrite.rewriter import rewrite

DENSE = {"num_layers": 4, "hidden": 1024, "heads": 16, "ffn_hidden": 2816, "vocab": 32000, "seq_len": 1024}
MOE = {"num_layers": 4, "hidden": 1024, "heads": 16, "ffn_hidden": 2816, "vocab": 32000, "seq_len": 1024,
       "moe_experts": 8, "moe_top_k": 2}


def _plan(ep: int = 4, tp: int = 4, **model) -> dict:
    return {"model": dict(MOE, **model), "expert_parallel": ep, "micro_batches": 4,
            "device_groups": [{"name": "h100", "device": "H100", "count": 8}],
            "pipelines": [{"stages": [{"group": "h100", "tp": tp, "layers": [0, 2]},
                                      {"group": "h100", "tp": tp, "layers": [2, 4]}]}]}


@pytest.mark.parametrize("over,field,says", [
    ({"model": DENSE}, "expert_parallel", "needs an MoE model"),
    ({"model": dict(MOE, moe_experts=6)}, "expert_parallel", "does not divide the 6 experts"),
    ({"expert_parallel": 8}, "pipelines[0].stages[0].tp", "does not divide TP 4"),
    ({"model": dict(MOE, moe_top_k=9)}, "model.moe_top_k", "exceeds the 8 experts"),
    ({"model": dict(MOE, moe_expert=8)}, "model.moe_expert", "did you mean 'moe_experts'"),
])
def test_bad_moe_plans_name_the_field(over, field, says):
    d = dict(_plan(), **over)
    with pytest.raises(ConfigError) as e:
        plan_from_mapping(d)
    assert e.value.context.get("field") == field and says in e.value.message


def test_moe_geometry_counts_every_expert_for_memory_and_the_active_ones_for_flops():
    m = plan_from_mapping(_plan()).model
    dense = plan_from_mapping(dict(_plan(ep=1), model=DENSE)).model
    expert = 3 * 1024 * 2816
    assert m.layer_params() - dense.layer_params() == 7 * expert + 8 * 1024  # 8 experts + router vs one MLP
    assert m.active_layer_params() - dense.active_layer_params() == expert + 8 * 1024  # top-2: one more expert
    assert m.expert_split(4) == (4, 1) and m.expert_split(2) == (1, 2)  # EP folded onto TP when it divides


def test_closed_form_prices_the_dispatch_and_combine_all_to_all_over_the_ep_ranks():
    plan = plan_from_mapping(_plan(ep=2))
    tm = templates_from_model(plan.model, "H100", 4)
    a2a = [o for o in tm.layer(0).fwd + tm.layer(0).bwd if o.kind != "comp" and o.comm_type == CollectiveType.ALL_TO_ALL]
    assert len(a2a) == 4  # dispatch + combine, forward and backward
    ar = [o for o in tm.layer(0).fwd + tm.layer(0).bwd if o.kind != "comp" and o.comm_type != CollectiveType.ALL_TO_ALL]
    bw = 450.0
    hand = sum(LATENCY_NS + o.comm_size_bytes / 2 / bw for o in a2a)  # ep 2: each rank sends half its buffer
    hand += sum(6 * LATENCY_NS + 6 * o.comm_size_bytes / 4 / bw for o in ar)  # TP 4 ring all-reduces
    assert _tp_collectives_ns(tm, 4, bw, ep=2) == pytest.approx(hand)
    moe = estimate_plan(plan, tm)
    assert moe.step_ns > 0 and 0 < moe.mfu < 1


def test_rewrite_puts_the_all_to_alls_on_the_expert_parallel_groups_and_the_replay_runs():
    from xsim_trace.evaluate.compare import evaluate

    plan = plan_from_mapping(_plan(ep=2))
    tm = templates_from_model(plan.model, "H100", 4)
    res = rewrite(plan, tm)
    assert check_rank_set(res.traces, res.comm_groups) == []
    groups = {res.comm_groups[n.pg_name] for t in res.traces.values() for n in t.nodes
              if n.type == NodeType.COMM_COLL and n.attr(A.COMM_KIND) == "ep"}
    assert groups == {(0, 1), (2, 3), (4, 5), (6, 7)}  # ep 2 blocks of each stage's TP 4 ranks
    assert all(int(n.comm_type) == int(CollectiveType.ALL_TO_ALL) for t in res.traces.values() for n in t.nodes
               if n.attr(A.COMM_KIND) == "ep")
    _, _, replayed = evaluate(plan, tm)
    est = estimate_plan(plan, tm).step_ns
    assert abs(est / replayed - 1) < 0.25, (est, replayed)
