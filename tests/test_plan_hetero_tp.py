"""A heterogeneous TP group: one stage's TP ranks over two device groups, paced by the slower
device and the slower link, in the plan, the closed form, the rewriter and the replay."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.checks import check_rank_set
from xsim_trace.graph.kinds import NodeType
from xsim_trace.layer_templates.template import templates_from_model
from xsim_trace.plan.closed_form import estimate_plan
from xsim_trace.plan.parse import plan_from_mapping
from xsim_trace.plan.partition import stage_costs
from xsim_trace.plan.placement import layout
from xsim_trace.rewrite.rewriter import rewrite

from rewrite_helpers import TINY_MODEL, plan_dict

GROUPS = [{"name": "h100", "device": "H100", "count": 8, "nic_gbps": 400},
          {"name": "a100", "device": "A100-SXM4-80GB", "count": 8, "nic_gbps": 200}]


def _mixed(first: dict | None = None) -> dict:
    first = first or {"groups": {"h100": 2, "a100": 2}}
    return plan_dict(model=dict(TINY_MODEL, num_layers=4), device_groups=GROUPS, micro_batches=4,
                     pipelines=[{"stages": [dict(first, layers=[0, 2]), {"group": "h100", "tp": 4, "layers": [2, 4]}]}])


def test_a_stage_over_two_groups_parses_places_and_counts_devices_per_group():
    plan = plan_from_mapping(_mixed())
    st = plan.pipelines[0].stages[0]
    assert st.tp == 4 and st.mixed and st.parts == (("h100", 2), ("a100", 2)) and st.group == "h100"
    lay = layout(plan)
    assert [(r.group, r.tp_rank, r.device_index) for r in lay.ranks[:4]] == [
        ("h100", 0, 0), ("h100", 1, 1), ("a100", 2, 0), ("a100", 3, 1)]
    assert [r.device_index for r in lay.ranks[4:]] == [2, 3, 4, 5]  # the next stage takes the next H100s
    assert plan.stage_hbm_bytes(st) == min(g.spec().hbm_bytes for g in plan.stage_groups(st))
    assert plan.stage_tp_GBps(st) == 200 / 8  # the slower NIC: the TP ring crosses nodes of two groups


@pytest.mark.parametrize("stage,field,says", [
    ({"groups": {"h100": 2, "a100": 2}, "tp": 8}, "pipelines[0].stages[0].tp", "tp 8 != the TP ranks"),
    ({"groups": {"h100": 2, "b200": 2}}, "pipelines[0].stages[0].groups.b200", "unknown device group"),
    ({"group": "h100", "groups": {"h100": 2}}, "pipelines[0].stages[0].groups", "either group"),
    ({"groups": {"h100": 10, "a100": 2}}, "device_groups[0].count", "over-subscribed"),
])
def test_bad_mixed_stages_name_the_field(stage, field, says):
    with pytest.raises(ConfigError) as e:
        plan_from_mapping(_mixed(stage))
    assert e.value.context.get("field") == field and says in e.value.message


def test_closed_form_paces_a_mixed_tp_group_by_the_slower_device_and_link():
    tm = templates_from_model(plan_from_mapping(_mixed()).model, "H100", 4)  # with its TP all-reduces
    mixed = stage_costs(plan_from_mapping(_mixed()), 0, tm)[0]
    a100 = stage_costs(plan_from_mapping(_mixed({"group": "a100", "tp": 4})), 0, tm)[0]
    h100 = stage_costs(plan_from_mapping(_mixed({"group": "h100", "tp": 4})), 0, tm)[0]
    # the A100 half paces the compute, and the TP collectives cross a 25 GB/s NIC instead of NVLink
    assert mixed.layer_ns > a100.layer_ns > h100.layer_ns
    est = estimate_plan(plan_from_mapping(_mixed()), tm)
    assert est.devices == 8 and est.step_ns > estimate_plan(plan_from_mapping(_mixed({"group": "a100", "tp": 4})), tm).step_ns


def test_rewrite_times_each_rank_on_its_own_device_and_the_replay_paces_by_the_slower():
    from xsim_trace.evaluate.compare import evaluate

    plan = plan_from_mapping(_mixed())
    tm = templates_from_model(plan.model, "H100", 4)
    res = rewrite(plan, tm)
    assert check_rank_set(res.traces, res.comm_groups) == []
    comp = {r: sum(n.duration_ns for n in res.traces[r].nodes if n.type == NodeType.COMP) for r in range(4)}
    assert comp[0] == comp[1] < comp[2] == comp[3]  # H100 ranks compute faster than the A100 ranks
    tp = {n.pg_name for n in res.traces[0].nodes if n.attr(A.COMM_KIND) == "tp"}
    assert {res.comm_groups[pg] for pg in tp} == {(0, 1, 2, 3)}  # one TP group over both device groups
    _, met, replayed = evaluate(plan, tm)
    est = estimate_plan(plan, tm).step_ns
    assert abs(est / replayed - 1) < 0.25, (est, replayed)
    # the H100 ranks of the mixed stage wait for the A100 ones at every TP collective: same busy span
    assert met.bubbles[0].busy_ns > 0


def test_generate_plan_with_a_mixed_stage_makes_a_template_per_group(tmp_path):
    from xsim_trace.layer_templates.generated import group_templates

    plan = plan_from_mapping(_mixed())
    assert set(group_templates(plan)) == {("h100", 4), ("a100", 4)}


def test_a_mixed_stage_round_trips_through_the_plan_document():
    from xsim_trace.plan.document import plan_document

    plan = plan_from_mapping(_mixed())
    back = plan_from_mapping(plan_document(plan))
    assert [p.stages for p in back.pipelines] == [p.stages for p in plan.pipelines]


def test_generate_for_a_plan_with_a_mixed_stage_reports_each_group_of_it():
    from xsim_trace.rewrite.hetero_generate import generate_for_plan

    work = generate_for_plan(plan_from_mapping(_mixed()))
    first = [(s.group, s.ranks) for s in work.stages if s.stage == 0]
    assert first == [("h100", (0, 1)), ("a100", (2, 3))]
    a100 = next(s for s in work.stages if s.group == "a100")
    h100 = next(s for s in work.stages if s.group == "h100" and s.stage == 0)
    assert a100.layer_fwd_ns > h100.layer_fwd_ns  # each group timed on its own device
    assert check_rank_set(work.result.traces, work.result.comm_groups) == []
