"""A template measured at TP 1 and run at a higher TP gains the TP collectives the generator places
at that TP: the rewritten graph has the same TP collectives (count, types, bytes, per layer and
micro-batch) as one built from templates generated at the stage's TP."""

from __future__ import annotations

from collections import Counter

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import NodeType
from xsim_trace.layer_templates.generated import group_templates
from xsim_trace.layer_templates.per_stage import as_template_set
from xsim_trace.layer_templates.template import templates_from_model
from xsim_trace.layer_templates.tp_collectives import at_tp, has_collectives
from xsim_trace.plan.parse import plan_from_mapping
from xsim_trace.rewrite.rewriter import rewrite

from rewrite_helpers import fixed_template, plan_dict


def _plan(tp: int):
    return plan_from_mapping(plan_dict(pipelines=[{"stages": [{"group": "h100", "tp": tp, "layers": [0, 2]},
                                                              {"group": "a100", "tp": tp, "layers": [2, 4]}]}]))


def _tp_colls(result) -> list[Counter]:
    """Per rank: (layer, micro-batch, phase, collective type) -> (count, bytes) of its TP collectives."""
    out = []
    for _, tr in sorted(result.traces.items()):
        c: Counter = Counter()
        for n in tr.nodes:
            if n.type == NodeType.COMM_COLL and n.attr(A.COMM_KIND) == "tp":
                key = (n.attr(A.LAYER), n.attr(A.MICROBATCH), n.attr(A.PHASE), int(n.comm_type))
                c[key + ("n",)] += 1
                c[key + ("bytes",)] += n.comm_size_bytes
        out.append(c)
    return out


@pytest.mark.parametrize("tp", [2, 4])
def test_a_tp1_template_scaled_up_carries_the_generators_tp_collectives(tp):
    plan = _plan(tp)
    scaled = _tp_colls(rewrite(plan, templates_from_model(plan.model, "H100", 1)))
    direct = _tp_colls(rewrite(plan, group_templates(plan)))
    assert scaled == direct
    total = sum(v for k, v in direct[0].items() if k[-1] == "n")
    assert total > 0 and sum(v for k, v in direct[0].items() if k[-1] == "bytes") > 0
    # two blocks per layer (attention, MLP), forward and backward, for every layer and micro-batch
    assert sum(v for k, v in direct[0].items() if k[-1] == "n" and k[0] is not None) == 2 * 2 * 2 * 4


def test_a_captured_style_template_gains_them_at_its_compute_share():
    plan = _plan(2)
    tm = fixed_template()  # TP 1, kernel names the generator does not use, no collectives
    assert not has_collectives(tm)
    scaled = as_template_set(tm, plan.model).for_stage("h100", 2)
    gen = group_templates(plan)[("h100", 2)]
    for mine, ref, own in ((scaled.layer(0).fwd, gen.layer(0).fwd, tm.layer(0).fwd),
                           (scaled.layer(0).bwd, gen.layer(0).bwd, tm.layer(0).bwd)):
        assert [(o.comm_type, o.comm_size_bytes) for o in mine if o.kind == "coll"] == \
            [(o.comm_type, o.comm_size_bytes) for o in ref if o.kind == "coll"]
        assert tuple(o for o in mine if o.kind == "comp") == own
    # the single forward GEMM is the whole layer: every collective comes after it
    assert scaled.layer(0).fwd[0].kind == "comp"
    def layers_only(rows):  # the template has no embedding / head, so neither has the graph
        return [Counter({k: v for k, v in c.items() if k[0] is not None}) for c in rows]

    assert layers_only(_tp_colls(rewrite(plan, tm))) == layers_only(_tp_colls(rewrite(plan, group_templates(plan))))


def test_templates_at_their_own_tp_or_with_collectives_are_left_alone():
    plan = _plan(2)
    t2 = templates_from_model(plan.model, "H100", 2)
    assert at_tp(t2, 4, plan.model) is t2  # measured at TP 2: its collectives are scaled, not added
    t1 = templates_from_model(plan.model, "H100", 1)
    assert at_tp(t1, 1, plan.model) is t1
    assert as_template_set(t1).for_stage("h100", 2) is t1  # no model given: nothing added


def test_a_tp_the_model_cannot_take_is_refused_naming_group_and_template_tp():
    plan = _plan(2)
    with pytest.raises(ConfigError) as e:
        as_template_set(templates_from_model(plan.model, "H100", 1), plan.model).for_stage("h100", 5)
    assert "'h100' at TP 5" in e.value.message and "measured at TP 1" in e.value.message
