"""Stage-major placement (HexiScale / FlashFlex's ``--devices_id`` layout): a stage's replicas on consecutive
devices, so its data-parallel peers share a node; the layout, the closed form and the plan document agree."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.layer_templates.template import templates_from_model
from xsim_trace.plan.closed_form import estimate_plan
from xsim_trace.plan.document import plan_document
from xsim_trace.plan.parse import plan_from_mapping
from xsim_trace.plan.placement import layout
from xsim_trace.plan.stage_cost import ring_allreduce_ns
from xsim_trace.units import gbps_to_GBps

from rewrite_helpers import plan_dict

GROUP = [{"name": "g", "device": "A100-SXM4-80GB", "count": 8, "devices_per_node": 4, "nic_gbps": 25,
          "intra_node_GBps": 200}]


def _plan(placement: str | None = None):
    pipe = {"replicas": 2, "stages": [{"group": "g", "tp": 2, "layers": [0, 2]}, {"group": "g", "tp": 2, "layers": [2, 4]}]}
    extra = {"placement": placement} if placement else {}
    return plan_from_mapping(plan_dict(device_groups=GROUP, pipelines=[pipe], micro_batches=4, **extra))


def test_stage_placement_puts_a_stage_replicas_side_by_side_and_keeps_rank_order():
    by_pipeline, by_stage = layout(_plan()), layout(_plan("stage"))
    assert [r.device_index for r in by_pipeline.ranks] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [r.device_index for r in by_stage.ranks] == [0, 1, 4, 5, 2, 3, 6, 7]
    assert [(r.pipeline, r.stage, r.tp_rank) for r in by_stage.ranks] == \
        [(r.pipeline, r.stage, r.tp_rank) for r in by_pipeline.ranks]
    assert {by_stage.ranks[i].node for i in by_stage.of(0, 0) + by_stage.of(1, 0)} == {"g/0"}


def test_closed_form_syncs_a_stage_inside_its_node_and_pays_the_nic_between_stages():
    plan = _plan()
    tmpl = templates_from_model(plan.model, plan.groups[0].device_spec, 1)
    a, b = estimate_plan(plan, tmpl), estimate_plan(_plan("stage"), tmpl)
    grad = tmpl.layer_grad_bytes * 2 + max(tmpl.pre_grad_bytes, tmpl.post_grad_bytes)
    assert a.dp_ns == pytest.approx(ring_allreduce_ns(grad / 2, 2, gbps_to_GBps(25)), abs=1)  # over the NIC
    assert b.dp_ns == pytest.approx(ring_allreduce_ns(grad / 2, 2, 200), abs=1)  # inside the node
    assert a.pp_ns < b.pp_ns  # pipeline-major: both stages in one node (NVLink); stage-major: across nodes


def test_placement_round_trips_through_the_plan_document_and_a_bad_one_names_the_field():
    plan = _plan("stage")
    back = plan_from_mapping(plan_document(plan))
    assert back.placement == "stage" and "placement" not in plan_document(_plan())
    with pytest.raises(ConfigError) as e:
        _plan("diagonal")
    assert "placement" in str(e.value) and "diagonal" in str(e.value)
    with pytest.raises(ConfigError):
        replace(plan, placement="x")


def test_plan_search_offers_every_placement_the_plan_knows():
    """The CLI spells the placements out (importing plan.model would slow the parser); they must stay the same."""
    from xsim_trace.cli.main import build_parser
    from xsim_trace.plan.model import PLACEMENTS

    parser = build_parser("plan")
    args = parser.parse_args(["plan", "search", "--cluster", "c", "--model", "m", "--out", "o"])
    assert args.placement == PLACEMENTS[0]
    for name in PLACEMENTS:
        assert parser.parse_args(["plan", "search", "--cluster", "c", "--model", "m", "--out", "o", "--placement", name]).placement == name
    with pytest.raises(SystemExit):
        parser.parse_args(["plan", "search", "--cluster", "c", "--model", "m", "--out", "o", "--placement", "nowhere"])
