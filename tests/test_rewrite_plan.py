"""Deployment plan loading and validation: every bad plan names its file and field."""

from __future__ import annotations

import json
import re

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.plan.memory import stage_memory_bytes
from xsim_trace.plan.parse import load_plan, plan_from_mapping
from xsim_trace.plan.reshard import ReshardStrategy
from xsim_trace.plan.schedules import Schedule

from rewrite_helpers import plan_dict


def test_yaml_and_json_plans_load_to_the_same_plan(tmp_path):
    d = plan_dict(reshard="leader", global_batch=4)
    (tmp_path / "p.json").write_text(json.dumps(d))
    import yaml

    (tmp_path / "p.yaml").write_text(yaml.safe_dump(d))
    a, b = load_plan(tmp_path / "p.json"), load_plan(tmp_path / "p.yaml")
    assert a.pipelines == b.pipelines and a.groups == b.groups
    assert a.reshard is ReshardStrategy.LEADER and a.schedule is Schedule.ONE_F_ONE_B
    assert a.groups[0].device == "H100-SXM5-80GB"  # alias resolved through the catalog
    assert [s.chunks for s in a.pipelines[0].stages] == [((0, 2),), ((2, 4),)]


def test_replicas_repeat_a_pipeline_and_global_batch_is_checked():
    d = plan_dict()
    d["pipelines"][0]["replicas"] = 2
    d["device_groups"][0]["count"] = 4
    d["device_groups"][1]["count"] = 8
    assert plan_from_mapping(d).dp == 2
    with pytest.raises(ConfigError, match=r"field global_batch: global_batch 5 != micro_batches 4 x micro_batch_size 1 x DP 2"):
        plan_from_mapping(dict(d, global_batch=5))


@pytest.mark.parametrize(
    "mutate,field,message",
    [
        (lambda d: d["pipelines"][0]["stages"][1].update(layers=[3, 4]), "pipelines[0].stages[1].layers",
         r"layers \[2, 3\) are not covered"),
        (lambda d: d["pipelines"][0]["stages"][1].update(layers=[1, 4]), "pipelines[0].stages[1].layers",
         r"layers \[1, 2\) overlap the previous stage"),
        (lambda d: d["pipelines"][0]["stages"][1].update(layers=[2, 3]), "pipelines[0].stages",
         r"layers \[3, 4\) are not covered"),
        (lambda d: d["pipelines"][0]["stages"][0].update(tp=8), "pipelines[0].stages[0].tp",
         "TP 8 does not divide the 12 attention heads"),
        (lambda d: d["device_groups"][1].update(count=2), "device_groups[1].count",
         "device group 'a100' is over-subscribed: stages use 4 of its 2 devices"),
        (lambda d: d["device_groups"][0].update(device="Z9000"), "device_groups[0].device", "unknown device 'Z9000'"),
        (lambda d: d["pipelines"][0]["stages"][0].update(group="tpu"), "pipelines[0].stages[0].group",
         "unknown device group 'tpu'"),
        (lambda d: d.update(schedule="zigzag"), "schedule", "unknown schedule 'zigzag'"),
        (lambda d: d.update(reshard="teleport"), "reshard", "unknown resharding strategy 'teleport'"),
        (lambda d: d.update(micro_batches=0), "micro_batches", "expected a positive integer, found 0"),
        (lambda d: d["model"].pop("heads"), "model.heads", "required field is missing"),
        (lambda d: d.update(chunks=2), "chunks", "chunks > 1 needs schedule interleaved-1f1b"),
        (lambda d: d.update(colour="red"), "colour", "unknown field 'colour'"),
    ],
)
def test_bad_plans_name_file_and_field(tmp_path, mutate, field, message):
    d = plan_dict()
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ConfigError) as info:
        load_plan(path)
    text = str(info.value)
    assert f"file {path}" in text and f"field {field}" in text
    assert re.search(message, text), text


def test_memory_exceeded_is_reported_per_stage():
    # a 7B-class layer stack on one A100-40GB at TP1 cannot hold 32 layers of optimizer state
    d = plan_dict(model={"num_layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 11008, "seq_len": 2048},
                  device_groups=[{"name": "a", "device": "A100-SXM4-40GB", "count": 8}],
                  pipelines=[{"stages": [{"group": "a", "tp": 1, "layers": [0, 32]}]}])
    with pytest.raises(ConfigError, match=r"field pipelines\[0\].stages\[0\]: memory exceeded: 32 layers at TP 1 need "
                                          r"\d+\.\d GiB per device, A100-SXM4-40GB has 40 GiB"):
        plan_from_mapping(d, "m.yaml")
    # the same stack at TP 8 fits: 16 B/param x 6.5e9 params / 8 + activations
    d["pipelines"][0]["stages"][0]["tp"] = 8
    plan = plan_from_mapping(d)
    need = stage_memory_bytes(plan, plan.pipelines[0], 0)
    params = 32 * plan.model.layer_params() + 2 * plan.model.embedding_params()
    assert need > params * 16 // 8 and need < 40 * 2**30


def test_interleaved_needs_one_range_per_chunk():
    d = plan_dict(schedule="interleaved-1f1b", chunks=2)
    with pytest.raises(ConfigError, match=r"field pipelines\[0\].stages\[0\].layers: expected 2 layer range"):
        plan_from_mapping(d)
    d["pipelines"][0]["stages"][0]["layers"] = [[0, 1], [2, 3]]
    d["pipelines"][0]["stages"][1]["layers"] = [[1, 2], [3, 4]]
    plan = plan_from_mapping(d)
    assert plan.pipelines[0].stages[1].chunks == ((1, 2), (3, 4))
    d["pipelines"][0]["stages"][1]["layers"] = [[1, 3], [3, 4]]
    with pytest.raises(ConfigError, match=r"stages\[0\].layers\[1\]: layers \[2, 3\) overlap"):
        plan_from_mapping(d)


def test_auto_partition_respects_device_memory():
    from xsim_trace.plan.partition import resolve_partition
    from xsim_trace.plan.memory import max_layers_in_memory
    from xsim_trace.layer_templates.template import templates_from_model

    # Llama-2-7B at TP 1: the H100 stage would take ~3/4 of the layers by speed but holds only as many
    # as its 80 GB fit (16 B/param of state + in-flight activations); the rest move to the A100
    d = plan_dict(model={"preset": "llama2-7b", "seq_len": 2048}, micro_batches=8, partition="auto",
                  pipelines=[{"stages": [{"group": "h100", "tp": 1}, {"group": "a100", "tp": 1}]}])
    plan = plan_from_mapping(d)
    cap = max_layers_in_memory(plan, plan.pipelines[0], 0)
    resolved, (report,) = resolve_partition(plan, templates_from_model(plan.model, "A100-SXM4-80GB", 1))
    assert report.ideal[0] > cap + 4
    assert report.counts == (cap, 32 - cap)
    assert [(m.from_stage, m.to_stage) for m in report.moves] == [(0, 1)]
    assert report.moves[0].layers == round(report.ideal[0]) - cap
    assert resolved.pipelines[0].stages[0].chunks == ((0, cap),)


def test_wrong_type_for_a_mapping_field_is_one_line(tmp_path):
    from xsim_trace.errors import ConfigError
    from xsim_trace.plan.parse import load_plan

    p = tmp_path / "p.yaml"
    p.write_text("model: 7\npipelines: 3\n")
    with pytest.raises(ConfigError, match=r"p\.yaml, field model: expected Mapping/str, found 7"):
        load_plan(p)


@pytest.mark.parametrize("where, key, path, hint", [
    ("stage", "layer", r"pipelines\[0\]\.stages\[1\]\.layer", "did you mean 'layers'"),
    ("pipeline", "replica", r"pipelines\[0\]\.replica", "did you mean 'replicas'"),
    ("group", "nic_gpbs", r"device_groups\[0\]\.nic_gpbs", "did you mean 'nic_gbps'"),
    ("model", "seqlen", r"model\.seqlen", "did you mean 'seq_len'"),
    ("top", "micro_batch", r"micro_batch", "did you mean 'micro_batches'"),
])
def test_unknown_keys_anywhere_name_their_path_and_the_closest_key(where, key, path, hint):
    d = plan_dict()
    target = {"stage": d["pipelines"][0]["stages"][1], "pipeline": d["pipelines"][0], "group": d["device_groups"][0],
              "model": d["model"], "top": d}[where]
    target[key] = target.get("layers", 1) if where == "stage" else 1
    if where == "stage":
        del target["layers"]  # a misspelled `layer:` must not silently switch to auto partition
    with pytest.raises(ConfigError, match=rf"field {path}: unknown field '{key}' \({hint}"):
        plan_from_mapping(d)


def test_model_takes_a_preset_name():
    d = plan_dict(model="llama2-7b", pipelines=[{"stages": [{"group": "h100", "tp": 8}, {"group": "a100", "tp": 8}]}],
                  partition="auto")
    plan = plan_from_mapping(d)
    assert plan.model.num_layers == 32 and plan.model.hidden == 4096


def test_pipeline_micro_batches_are_each_replicas_share_of_the_global_batch():
    from rewrite_helpers import fixed_template
    from xsim_trace.rewrite.rewriter import rewrite

    d = plan_dict(global_batch=6)
    d.pop("micro_batches")
    d["pipelines"] = [{"micro_batches": 4, "stages": [{"group": "h100", "tp": 2, "layers": [0, 4]}]},
                      {"micro_batches": 2, "stages": [{"group": "a100", "tp": 2, "layers": [0, 4]}]}]
    plan = plan_from_mapping(d)
    assert [plan.micro_batches_of(i) for i in range(2)] == [4, 2] and plan.total_micro_batches == 6
    res = rewrite(plan, fixed_template())
    mbs = {r.pipeline: {n.attr("microbatch") for n in res.traces[r.rank].nodes if n.attr("microbatch") is not None}
           for r in res.layout.ranks}
    assert mbs == {0: {0, 1, 2, 3}, 1: {0, 1}}
    with pytest.raises(ConfigError, match=r"field global_batch: global_batch 8 != micro-batches \(4 \+ 2\)"):
        plan_from_mapping(dict(d, global_batch=8))


def test_auto_partition_evaluates_the_slowest_stage_h100x8_tp8_to_a100x1_tp1():
    # rounding the throughput-proportional ideal (30.3 / 1.7) gives 30/2, which leaves the single
    # A100 (plus the output head) the bottleneck; evaluating the stages picks 31/1, and the replay agrees
    from xsim_trace.evaluate.compare import evaluate
    from xsim_trace.plan.partition import resolve_partition
    from xsim_trace.layer_templates.template import templates_from_model

    d = plan_dict(model={"preset": "llama2-7b", "seq_len": 2048}, micro_batches=8, partition="auto",
                  device_groups=[{"name": "h100", "device": "H100-SXM5-80GB", "count": 8},
                                 {"name": "a100", "device": "A100-SXM4-80GB", "count": 1}],
                  pipelines=[{"stages": [{"group": "h100", "tp": 8}, {"group": "a100", "tp": 1}]}])
    plan = plan_from_mapping(d)
    tm = templates_from_model(plan.model, "H100-SXM5-80GB", 1)  # what `xsim plan compare` uses
    resolved, (report,) = resolve_partition(plan, tm)
    assert report.counts == (31, 1) and report.rounded == (30, 2)
    assert report.estimate_ns < report.rounded_estimate_ns
    assert any("evaluation picks 31/1" in line for line in report.lines())
    times = {}
    for split in (30, 31):
        given = dict(d, partition="given")
        given["pipelines"] = [{"stages": [{"group": "h100", "tp": 8, "layers": [0, split]},
                                          {"group": "a100", "tp": 1, "layers": [split, 32]}]}]
        times[split] = evaluate(plan_from_mapping(given), tm)[2]
    assert times[31] < times[30]
