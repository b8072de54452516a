"""Host-side cost model: one framework module call = one host_op_overhead_ns, whatever the kernels."""

from __future__ import annotations

import dataclasses

from xsim_trace.workload import ops as O
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.model import get_model

from workload_helpers import setup, small_llama

H = 100_000  # 100 us per module call


def _timer(model, fw):
    program, timer = setup(model, fw)
    return program, type(timer)(dataclasses.replace(timer.device, host_op_overhead_ns=H), timer.links, fw)


def _host(timer, ops):
    return sum(timer.host_ns(op) for op in ops)


def test_unfused_attention_core_is_one_module_call():
    fw = Framework()
    model = small_llama().with_(flash_attention=False)
    _, timer = _timer(model, fw)
    core = [op for op in O.attention_core_ops(model, fw, O.dims(model, fw)) if isinstance(op, O.ComputeOp)]
    assert [op.name for op in core] == ["attn_scores_bmm", "attn_softmax_dropout", "attn_context_bmm"]
    assert sum(op.kernels for op in core) == 4  # the device still pays 4 launches
    assert abs(_host(timer, core) - H) <= len(core)  # each op rounds to whole ns
    # forward layer: input_norm, qkv, rope, [core], out_proj, residual, post_norm, fc1, act, fc2, residual = 11 calls
    assert abs(_host(timer, O.layer_forward(model, fw)) - 11 * H) <= 3
    flash = small_llama()
    _, ftimer = _timer(flash, fw)
    assert _host(ftimer, O.layer_forward(flash, fw)) == 11 * H  # the flash kernel is one call too


def test_multi_kernel_ops_cost_one_call_and_experts_one_each():
    fw = Framework(ep=1)
    model = small_llama()
    _, timer = _timer(model, fw)
    head = O.head_forward(model, fw)  # final_norm, logits, cross_entropy (6 kernels)
    assert _host(timer, head) == 3 * H
    assert _host(timer, O.embedding_forward(model, fw)) == H  # 3 kernels, one module
    moe = get_model("mixtral-8x7b").with_(layers=2, seq_len=256)
    fw = Framework(ep=2, dp=2, global_batch=2)
    _, mtimer = _timer(moe, fw)
    by_name = {op.name: op for op in O.mlp_ops(moe, fw, O.dims(moe, fw)) if isinstance(op, O.ComputeOp)}
    local = moe.moe_experts // 2
    assert mtimer.host_ns(by_name["moe_experts"]) == local * H  # one expert MLP call per local expert
    assert mtimer.host_ns(by_name["moe_expert_act"]) == local * H
    assert mtimer.host_ns(by_name["moe_permute"]) == H and mtimer.host_ns(by_name["moe_unpermute"]) == H


def test_backward_gemm_pair_costs_the_forward_call():
    fw = Framework()
    model = small_llama()
    _, timer = _timer(model, fw)
    fwd = [op for op in O.layer_forward(model, fw) if op.name == "qkv_proj"]
    bwd = O.backward_of(fwd)
    assert [op.name for op in bwd] == ["qkv_proj_dgrad", "qkv_proj_wgrad"]
    assert _host(timer, bwd) == H


def _with_host(timer, host):
    return type(timer)(timer.device, timer.links, timer.fw, host)


def test_host_model_scales_moe_and_attention_core_calls_only():
    from xsim_trace.workload.host import HostGroup, HostModel

    moe = get_model("mixtral-8x7b").with_(layers=2, seq_len=256, flash_attention=False)
    fw = Framework(ep=2, dp=2, global_batch=2)
    _, base = _timer(moe, fw)
    scaled = _with_host(base, HostModel(moe_factor=2.5, attention_core_factor=0.5))
    fwd = O.layer_forward(moe, fw)
    layer_ops = fwd + O.layer_backward(moe, fw)
    groups = {op.host_group for op in layer_ops if isinstance(op, O.ComputeOp)}
    assert groups == {HostGroup.MODULE, HostGroup.MOE, HostGroup.ATTENTION_CORE}
    for op in layer_ops:
        if not isinstance(op, O.ComputeOp):
            assert scaled.host_ns(op) == 0  # collectives cost no host time
            continue
        want = {HostGroup.MODULE: 1.0, HostGroup.MOE: 2.5, HostGroup.ATTENTION_CORE: 0.5}[op.host_group]
        assert abs(scaled.host_ns(op) - base.host_ns(op) * want) <= 1, op.name
    # backward and recompute keep the forward op's group
    assert {op.host_group for op in O.backward_of(fwd) if isinstance(op, O.ComputeOp) and op.name.startswith("moe_")} == {HostGroup.MOE}
    # the device side does not change
    assert all(scaled.device_ns(op, 0) == base.device_ns(op, 0) for op in layer_ops)


def test_host_model_ep_exponent_and_defaults():
    import pytest

    from xsim_trace.errors import ConfigError
    from xsim_trace.workload.host import HostGroup, HostModel

    assert HostModel().factor(HostGroup.MOE, ep=8) == 1.0
    assert HostModel(moe_factor=2.0, moe_ep_exponent=0.5).factor(HostGroup.MOE, ep=4) == 4.0
    assert HostModel(moe_factor=2.0, moe_ep_exponent=0.5).factor(HostGroup.MODULE, ep=4) == 1.0
    with pytest.raises(ConfigError, match="host.moe_factor"):
        HostModel(moe_factor=-1)
    with pytest.raises(ConfigError, match="unknown host model field"):
        HostModel.from_mapping({"moe": 2})
    assert HostModel.from_mapping({"attention_core_factor": "0.5"}).attention_core_factor == 0.5


def test_host_model_moves_the_estimate_and_the_replayed_trace_alike():
    """The closed form and the generated trace see the same host model (generator -> Timer.host_ns)."""
    from xsim_trace.graph import attrs as A
    from xsim_trace.workload.estimate import estimate
    from xsim_trace.workload.generator import generate
    from xsim_trace.workload.host import HostModel

    moe = get_model("mixtral-8x7b").with_(layers=2, seq_len=256, hidden=512, ffn=1024, moe_ffn=1024, heads=8, kv_heads=8)
    fw = Framework(ep=2, dp=2, global_batch=4, micro_batch=1)
    program, base = _timer(moe, fw)
    heavy = _with_host(base, HostModel(moe_factor=3.0))
    assert estimate(program, heavy).step_ns > estimate(program, base).step_ns

    def cpu_ns(timer):
        trace = generate(program, timer, ranks=[0]).traces[0]
        return sum(n.duration_ns for n in trace.nodes if n.attr(A.IS_CPU_OP, False))

    assert cpu_ns(heavy) > cpu_ns(base)


def test_deterministic_mode_scales_every_call_of_a_deterministic_run_only():
    from xsim_trace.workload.host import HostGroup, HostModel

    model = small_llama().with_(flash_attention=False)
    host = HostModel(attention_core_factor=0.5, deterministic_factor=1.4)
    assert host.factor(HostGroup.MODULE) == 1.0
    assert host.factor(HostGroup.MODULE, deterministic=True) == 1.4
    assert host.factor(HostGroup.ATTENTION_CORE, deterministic=True) == 0.5 * 1.4
    plain, det = Framework(), Framework(deterministic=True)
    _, base = _timer(model, plain)
    ops = [op for op in O.layer_forward(model, plain) if isinstance(op, O.ComputeOp)]
    fast = _with_host(base, host)
    slow = type(base)(base.device, base.links, det, host)
    for op in ops:
        assert abs(slow.host_ns(op) - 1.4 * fast.host_ns(op)) <= 1, op.name
        assert slow.device_ns(op, 0) == fast.device_ns(op, 0)  # the device side does not change


def test_local_transformer_impl_scales_every_call_of_a_local_run_only():
    """--transformer-impl local: Megatron's own modules, each call local_impl_factor x TE's cost;
    the device side and TE runs do not change."""
    import pytest

    from xsim_trace.errors import ConfigError
    from xsim_trace.workload.host import HostGroup, HostModel

    host = HostModel(attention_core_factor=0.5, deterministic_factor=1.2, local_impl_factor=0.75)
    assert host.factor(HostGroup.MODULE, local_impl=True) == 0.75
    assert host.factor(HostGroup.ATTENTION_CORE, deterministic=True, local_impl=True) == pytest.approx(0.5 * 1.2 * 0.75)
    assert HostModel().factor(HostGroup.MODULE, local_impl=True) == 1.0  # default: no difference
    model = small_llama().with_(flash_attention=False)
    te, local = Framework(), Framework(transformer_impl="local")
    _, base = _timer(model, te)
    te_timer = _with_host(base, host)
    local_timer = type(base)(base.device, base.links, local, host)
    for op in (op for op in O.layer_forward(model, te) if isinstance(op, O.ComputeOp)):
        assert abs(local_timer.host_ns(op) - 0.75 * te_timer.host_ns(op)) <= 1, op.name
        assert local_timer.device_ns(op, 0) == te_timer.device_ns(op, 0)
    with pytest.raises(ConfigError, match="transformer_impl"):
        Framework(transformer_impl="apex")
    with pytest.raises(ConfigError, match="local_impl_factor"):
        HostModel(local_impl_factor=-1)


def test_unfused_rope_is_megatrons_eager_ops_on_host_and_device():
    """--no-rope-fusion: the fused RoPE call (one kernel, one module call per layer) becomes the eager ops
    of Megatron's _apply_rotary_pos_emb_bshd for q and k: 24 forward and 14 backward kernels, each a
    quarter of a module call on the host (the unfused attention core's price per eager kernel)."""
    import pytest

    from xsim_trace.errors import ConfigError

    model = small_llama()
    fused, eager = Framework(), Framework(rope_fusion=False)
    _, ftimer = _timer(model, fused)
    _, etimer = _timer(model, eager)
    fwd = {op.name: op for op in O.layer_forward(model, eager) if isinstance(op, O.ComputeOp)}
    assert "rope_bias" not in fwd and fwd["rope_unfused"].kernels == 2 * O.ROPE_FWD_KERNELS == 24
    d = O.dims(model, eager)
    assert fwd["rope_unfused"].bytes_accessed == O.ROPE_FWD_PASSES * d.tokens * (model.hidden + model.kv_hidden) * d.elt
    bwd = O.backward_of([fwd["rope_unfused"]])
    assert bwd[0].kernels == 2 * O.ROPE_BWD_KERNELS == 14
    assert etimer.host_ns(fwd["rope_unfused"]) == 24 * O.EAGER_OP_CALLS * H
    assert etimer.host_ns(bwd[0]) == 14 * O.EAGER_OP_CALLS * H
    # the layer: one fused call each way replaced by (24 + 14) / 4 calls; the device pays the launches
    f_layer = O.layer_forward(model, fused) + O.layer_backward(model, fused)
    e_layer = O.layer_forward(model, eager) + O.layer_backward(model, eager)
    assert _host(etimer, e_layer) - _host(ftimer, f_layer) == pytest.approx((38 * O.EAGER_OP_CALLS - 2) * H, abs=40)
    rope_dev = etimer.device_ns(fwd["rope_unfused"], 0)
    assert rope_dev > ftimer.device_ns(next(op for op in O.layer_forward(model, fused) if op.name == "rope_bias"), 0)
    # every other op is untouched
    others = [op.name for op in O.layer_forward(model, eager) if op.name != "rope_unfused"]
    assert others == [op.name for op in O.layer_forward(model, fused) if op.name != "rope_bias"]
    with pytest.raises(ConfigError, match="rope_fusion"):
        Framework(rope_fusion="no")


def test_position_embedding_type_places_the_position_work():
    """--position-embedding-type: RoPE is one op per layer and pass; a learned absolute table is a lookup
    and an add in the embedding (one module call and an eager op), and no layer rotates; none has neither."""
    import pytest

    from xsim_trace.errors import ConfigError

    fw = Framework(tp=2)
    rope = small_llama()
    learned = rope.with_(position_embedding="learned_absolute")
    none = rope.with_(position_embedding="none")
    names = lambda ops: [op.name for op in ops if isinstance(op, O.ComputeOp)]  # noqa: E731
    assert "rope_bias" in names(O.layer_forward(rope, fw)) and "rope_bias_bwd" in names(O.layer_backward(rope, fw))
    for m in (learned, none):
        assert not [n for n in names(O.layer_forward(m, fw) + O.layer_backward(m, fw)) if n.startswith("rope")]
    assert "position_embedding" not in names(O.embedding_forward(rope, fw) + O.embedding_forward(none, fw))
    pos = next(op for op in O.embedding_forward(learned, fw) if op.name == "position_embedding")
    d = O.dims(learned, fw)
    assert pos.kernels == 2 and pos.bytes_accessed == 5 * d.tokens * learned.hidden * d.elt
    _, timer = _timer(learned, fw)
    assert timer.host_ns(pos) == pytest.approx((1 + O.EAGER_OP_CALLS) * H, abs=2)
    assert "position_embedding_bwd" in names(O.embedding_backward(learned, fw))
    # one fewer module call per layer and pass than the rotary model
    _, rtimer = _timer(rope, fw)
    assert _host(rtimer, O.layer_forward(rope, fw)) - _host(timer, O.layer_forward(learned, fw)) == pytest.approx(H, abs=3)
    assert get_model("gpt3-175b").position_embedding == "learned_absolute"
    assert get_model("llama3-8b").position_embedding == "rope"
    with pytest.raises(ConfigError, match="position_embedding"):
        rope.with_(position_embedding="alibi")
    with pytest.raises(ConfigError, match="position_embedding"):
        get_model("deepseek-v3").with_(position_embedding="learned_absolute")


def test_moe_allgather_dispatcher():
    """Megatron's all-gather token dispatcher gathers the expert-TP x EP group's tokens (and routing) and
    reduce-scatters the result; the all-to-all one exchanges the routed tokens."""
    import pytest

    from xsim_trace.errors import ConfigError

    model = small_llama().with_(moe_experts=8, moe_top_k=2)
    a2a, ag = Framework(tp=2, ep=4, dp=4, global_batch=4, sequence_parallel=True), \
        Framework(tp=2, ep=4, dp=4, global_batch=4, sequence_parallel=True, moe_dispatcher="allgather")
    comm = lambda ops: {op.name: op for op in ops if isinstance(op, O.CommOp)}  # noqa: E731
    ca, cg = comm(O.layer_forward(model, a2a)), comm(O.layer_forward(model, ag))
    assert "moe_dispatch_a2a" in ca and "moe_dispatch_allgather" not in ca
    assert "moe_dispatch_a2a" not in cg and cg["moe_combine_reducescatter"].kind is O.CommKind.EP
    d = O.dims(model, ag)
    n, g = ag.etp * ag.ep, ag.ep  # 8 ranks gathered, modelled on the 4-rank EP group
    assert cg["moe_dispatch_allgather"].size_bytes == int((n - 1) * g / (g - 1) * d.tokens_sp * model.hidden * d.elt)
    # each rank receives the (n - 1) blocks it receives in the real group
    received = (n - 1) * d.tokens_sp * model.hidden * d.elt
    assert cg["moe_dispatch_allgather"].size_bytes * (g - 1) / g == pytest.approx(received, rel=1e-6)
    bwd = comm(O.layer_backward(model, ag))
    assert bwd["moe_dispatch_allgather_bwd"].collective.name == "REDUCE_SCATTER"
    # no gather group (tp 1, ep 1): the all-gather dispatcher has nothing to gather
    assert not comm(O.layer_forward(model, Framework(moe_dispatcher="allgather")))
    with pytest.raises(ConfigError, match="moe_dispatcher"):
        Framework(moe_dispatcher="flex")
