"""Full activation recompute and flash attention in the plan geometry: what a layer keeps for backward, the
recomputing layer's working set, and the forward rerun inside the backward template."""

from __future__ import annotations

import dataclasses

from xsim_trace.layer_templates.template import templates_from_model
from xsim_trace.plan.model_spec import ModelSpec

LLAMA7 = ModelSpec(num_layers=32, hidden=4096, heads=32, ffn_hidden=11008, seq_len=4096, micro_batch_size=1)


def _comp_ns(ops) -> int:
    return sum(o.duration_ns for o in ops if o.kind == "comp")


def test_activation_bytes_with_and_without_recompute_and_flash():
    s, h, a = 4096, 4096, 32
    full = LLAMA7.layer_activation_bytes(2)
    assert full == int(s * h * (10 + 24 / 2 + 5 * a * s / (h * 2)))  # Korthikanti, no SP, unfused attention
    flash = dataclasses.replace(LLAMA7, flash_attention=True)
    assert flash.layer_activation_bytes(2) == int(s * h * (10 + 24 / 2))
    rc = dataclasses.replace(flash, recompute=True)
    assert rc.layer_activation_bytes(2) == s * h * 2  # the layer input only, fp16
    assert rc.layer_working_bytes(2) == flash.layer_activation_bytes(2)


def test_recompute_reruns_the_forward_in_the_backward_template():
    base = templates_from_model(LLAMA7, "A100-SXM4-80GB", 2)
    rc = templates_from_model(dataclasses.replace(LLAMA7, recompute=True), "A100-SXM4-80GB", 2)
    (lb,), (lr,) = base.layers, rc.layers
    assert _comp_ns(lr.fwd) == _comp_ns(lb.fwd)
    assert _comp_ns(lr.bwd) == _comp_ns(lb.bwd) + _comp_ns(lb.fwd)
    # the rerun forward's TP all-reduces come back too
    colls = lambda ops: sum(1 for o in ops if o.kind == "coll")  # noqa: E731
    assert colls(lr.bwd) == colls(lb.bwd) + colls(lb.fwd)
    assert (rc.pre, rc.post) == (base.pre, base.post)  # embedding / head unchanged
