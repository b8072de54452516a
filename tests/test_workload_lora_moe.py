"""LoRA (frozen base: no weight-gradient GEMMs for it, adapter GEMMs, DP and optimizer over the adapters
only) and MoE routing imbalance, in the closed form, the generated traces and memory."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.workload.estimate import estimate
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.generator import generate
from xsim_trace.workload.memory import stage_memory
from xsim_trace.workload.model import get_model
from xsim_trace.workload.predict import predict
from xsim_trace.workload.spec_file import make_setup

from generator_reference import reference_generate
from workload_helpers import small_llama


def _setup(model, **kw):
    return make_setup(model, Framework(**kw), "H100")


def test_lora_freezes_base_weights():
    model = small_llama(layers=2, seq_len=4096)
    full = _setup(model, tp=2, dp=2, global_batch=4)
    lora = _setup(model, tp=2, dp=2, global_batch=4, lora_rank=8)
    names = [op.name for op in lora.program._layer_bwd]
    assert "qkv_proj_dgrad" in names and "qkv_proj_wgrad" not in names
    assert "qkv_proj_lora_a_wgrad" in names and "mlp_fc2_lora_b_wgrad" in names
    dense, expert = lora.program.stage_trainable_params(0)
    assert 0 < dense < lora.program.stage_params(0)[0] // 50 and expert == 0
    est_full, est_lora = estimate(full.program, full.timer), estimate(lora.program, lora.timer)
    assert est_lora.stages[0].compute_ns < 0.85 * est_full.stages[0].compute_ns  # no base weight gradients
    assert est_lora.stages[0].dp_exposed_ns < est_full.stages[0].dp_exposed_ns
    m_full, m_lora = stage_memory(full.program, full.device)[0], stage_memory(lora.program, lora.device)[0]
    assert m_lora.weights_bytes == m_full.weights_bytes and m_lora.optimizer_bytes < m_full.optimizer_bytes // 50


def test_lora_generator_matches_reference():
    s = _setup(small_llama(layers=2, seq_len=256), tp=2, pp=2, dp=2, global_batch=4, lora_rank=4)
    assert generate(s.program, s.timer).traces == reference_generate(s.program, s.timer).traces


def test_moe_imbalance_slows_experts_and_all_to_all():
    moe = get_model("mixtral-8x7b").with_(layers=4, seq_len=2048)
    even = predict(_setup(moe, tp=2, dp=4, ep=4, global_batch=4, sequence_parallel=True))
    skew = predict(_setup(moe, tp=2, dp=4, ep=4, global_batch=4, sequence_parallel=True, moe_imbalance=1.5))
    assert skew.part_ns("ep") > 1.3 * even.part_ns("ep") and skew.step_ns > even.step_ns
    with pytest.raises(ConfigError, match="moe_imbalance"):
        Framework(moe_imbalance=0.5)
