"""Model presets, framework validation, FLOP counts against the SC'21 formula, schedules, layout."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.workload.framework import Framework, Recompute, Schedule
from xsim_trace.workload.layout import Layout
from xsim_trace.workload.model import get_model, list_models, load_model_file
from xsim_trace.workload.program import Program, megatron_formula_flops
from xsim_trace.workload.schedule import gpipe, interleaved, one_f_one_b


@pytest.mark.parametrize(
    "name, billions",
    [
        ("gpt3-175b", 174.6),  # Brown et al.: 175.0B (with 50257 vocab); ours uses the padded 51200
        ("gpt3-13b", 12.85),
        ("llama2-7b", 6.74),  # Touvron et al.: 6.74B
        ("llama2-13b", 13.02),
        ("llama2-70b", 68.98),
        ("llama3-8b", 8.03),
        ("llama3-70b", 70.55),
        ("llama3-405b", 405.85),
        ("mixtral-8x7b", 46.70),  # Jiang et al.: 46.7B total
    ],
)
def test_preset_parameter_counts(name, billions):
    assert get_model(name).total_params() / 1e9 == pytest.approx(billions, abs=0.01)


def test_presets_and_aliases():
    assert {"gpt3-1.3b", "gpt3-175b", "llama2-70b", "llama3-405b", "mixtral-8x7b"} <= set(list_models())
    m = get_model("Llama-3-70B")
    assert (m.layers, m.hidden, m.ffn, m.heads, m.kv_heads, m.vocab, m.seq_len) == (80, 8192, 28672, 64, 8, 128256, 8192)
    assert m.swiglu and m.flash_attention and not m.is_moe
    mx = get_model("mixtral")
    assert mx.moe_experts == 8 and mx.moe_top_k == 2 and mx.moe_ffn == 14336
    with pytest.raises(ConfigError, match="unknown model 'gpt5'"):
        get_model("gpt5")


def test_model_file(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("models:\n  tiny:\n    base: llama3-8b\n    layers: 2\n  mine: {layers: 2, hidden: 64, ffn: 256, heads: 4, vocab: 100, seq_len: 32}\n")
    models = load_model_file(f)
    assert models["tiny"].layers == 2 and models["tiny"].kv_heads == 8
    assert get_model("mine", f).hidden == 64
    f.write_text("models:\n  bad: {layers: 2, hidden: 65, ffn: 256, heads: 4, vocab: 100, seq_len: 32}\n")
    with pytest.raises(ConfigError, match="not divisible by heads") as info:
        load_model_file(f)
    assert str(f) in str(info.value)


@pytest.mark.parametrize(
    "model, fw",
    [
        ("gpt3-175b", dict(tp=8, pp=12, dp=4, micro_batch=1, global_batch=1536)),
        ("gpt3-175b", dict(tp=8, pp=12, dp=2, micro_batch=2, global_batch=96, vpp=2, sequence_parallel=True)),
        ("gpt3-1.3b", dict(tp=2, pp=2, dp=2, cp=2, micro_batch=4, global_batch=64)),
        ("gpt3-530b", dict(tp=8, pp=35, dp=1, micro_batch=1, global_batch=70)),
    ],
)
def test_flops_match_sc21_formula_with_full_recompute(model, fw):
    m = get_model(model)
    f = Framework(recompute="full", **fw)
    assert Program(m, f).iteration_flops() == pytest.approx(megatron_formula_flops(m, f.global_batch), rel=1e-9)


def test_flops_without_recompute_are_three_quarters_of_the_layer_term():
    m = get_model("gpt3-13b")
    f = Framework(tp=2, dp=4, micro_batch=2, global_batch=16)
    B, s, l, h, V = 16, m.seq_len, m.layers, m.hidden, m.vocab
    expect = 72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V  # fwd+bwd = 3x forward
    assert Program(m, f).iteration_flops() == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(tp=0), "framework.tp"),
        (dict(dp=4, micro_batch=2, global_batch=12), "not a multiple of micro_batch"),
        (dict(global_batch=8, grad_accum=3), "disagrees"),
        (dict(recompute="half"), "expected one of none, selective, full"),
        (dict(precision="int4"), "unknown precision"),
        (dict(zero_stage=4), "zero_stage"),
    ],
)
def test_framework_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Framework(**kwargs)


def test_framework_defaults_and_model_checks():
    f = Framework(dp=2, micro_batch=2, global_batch=32, distributed_optimizer=True, vpp=2, pp=2, tp=1, sequence_parallel=True)
    assert f.grad_accum == 8 and f.zero_stage == 1 and f.schedule is Schedule.INTERLEAVED
    assert f.sequence_parallel is False  # meaningless without TP
    assert f.recompute is Recompute.NONE and f.world_size == 4
    m = get_model("llama2-70b")
    with pytest.raises(ConfigError, match="tp 3 does not divide heads 64"):
        Framework(tp=3).check_model(m)
    with pytest.raises(ConfigError, match="needs an MoE model"):
        Framework(ep=2, dp=2, global_batch=2).check_model(m)
    with pytest.raises(ConfigError, match="does not divide 8 experts"):
        Framework(ep=3, dp=3, global_batch=3).check_model(get_model("mixtral"))


def test_stage_layer_split():
    m = get_model("gpt3-530b")  # 105 layers over 35 stages
    assert Framework(pp=35, global_batch=35).stage_layers(m) == [3] * 35
    m = get_model("llama2-7b").with_(layers=10)
    counts = Framework(pp=4, global_batch=4).stage_layers(m)
    assert counts == [2, 3, 3, 2] and sum(counts) == 10


def test_one_f_one_b_by_hand():
    assert [str(s) for s in one_f_one_b(0, 4, 6)] == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5".split()
    assert [str(s) for s in one_f_one_b(3, 4, 6)] == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5".split()
    assert [str(s) for s in one_f_one_b(0, 4, 2)] == "F0 F1 B0 B1".split()
    assert [str(s) for s in gpipe(1, 2, 2)] == "F0 F1 B0 B1".split()


def test_interleaved_covers_every_chunk_once():
    pp, m, v = 4, 8, 3
    for stage in range(pp):
        order = interleaved(stage, pp, m, v)
        assert len(order) == 2 * m * v
        assert len({(s.forward, s.microbatch, s.chunk) for s in order}) == 2 * m * v
        assert sum(s.forward for s in order[: (pp - stage - 1) * 2 + (v - 1) * pp]) == (pp - stage - 1) * 2 + (v - 1) * pp
    with pytest.raises(ConfigError):
        interleaved(0, 4, 6, 2)


def test_layout_groups():
    lay = Layout(Framework(tp=2, cp=2, dp=2, pp=2, ep=2, etp=1, global_batch=4))
    assert lay.tp_group(5) == (4, 5)
    assert lay.cp_group(5) == (5, 7)
    assert lay.dp_group(0) == (0, 2, 4, 6)
    assert lay.pp_group(3) == (3, 11)
    assert lay.ep_group(0) == (0, 1)  # etp 1: neighbouring ranks hold different experts
    assert lay.expert_dp_group(0) == (0, 2, 4, 6)
    for r in range(16):
        assert lay.rank(lay.coord(r)) == r
