"""ZeRO-3 / FSDP per-unit gathers and reduce-scatters with prefetch, context parallelism as a P2P
ring, the tied-embedding gradient sync between the first and last stage, and the DeepSeek-V3
preset with multi-latent attention: counts and bytes in the generated rank traces, the closed
form, and their agreement."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.graph.checks import check_rank_set
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.workload.estimate import estimate
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.generator import generate
from xsim_trace.workload.model import get_model
from xsim_trace.workload.ops import CommKind, cp_kv_bytes, dims
from xsim_trace.workload.predict import predict
from xsim_trace.workload.program import rank_params
from xsim_trace.workload.spec_file import make_setup

from generator_reference import reference_generate
from workload_helpers import setup, small_llama


def _nodes(trace, name):
    return [n for n in trace.nodes if n.name == name]


def _replay_ns(wl):
    replay_mod = pytest.importorskip("xsim_trace.replay")
    from xsim_trace.cluster import load_cluster
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology

    cluster = load_cluster("dgx-h100:1")
    settings = replay_mod.ReplaySettings(collective_model="schedule")
    return replay_mod.replay(wl.traces, make_backend("analytical", build_topology(cluster)), settings,
                             comm_groups=wl.comm_groups, cluster=cluster).iteration_ns


# -- ZeRO-3 / FSDP --------------------------------------------------------------------------------
def test_fsdp_gathers_every_unit_forward_and_backward_and_reduce_scatters_in_backward():
    model = small_llama(layers=4, seq_len=1024)
    fw = Framework(dp=4, zero_stage=3, global_batch=8)  # 2 micro-batches
    program, timer = setup(model, fw)
    wl = generate(program, timer)
    assert check_rank_set(wl.traces, wl.comm_groups) == []
    t = wl.traces[0]
    gathers, reduces = _nodes(t, "fsdp_param_allgather"), _nodes(t, "fsdp_grad_reducescatter")
    units = 1 + 4 + 1  # embedding, 4 layers, untied output layer
    assert len(gathers) == 2 * 2 * units and len(reduces) == 2 * units
    layer_params = rank_params(model, fw, 1, embedding=False, head=False)[0]
    emb = model.vocab * model.hidden
    assert sorted({n.comm_size_bytes for n in gathers}) == sorted({2 * layer_params, 2 * emb})
    assert sorted({n.comm_size_bytes for n in reduces}) == sorted({4 * layer_params, 4 * emb})
    assert all(n.attr("comm_type") == CollectiveType.ALL_GATHER for n in gathers)
    assert all(n.attr("comm_type") == CollectiveType.REDUCE_SCATTER for n in reduces)
    # no end-of-step gradient buckets or parameter all-gather: ZeRO-3 did it per unit
    assert not [n for n in t.nodes if n.name.startswith(("dp_grad_bucket", "dp_param_allgather"))]
    # prefetch: a layer's gather is issued before the previous unit's first compute node
    first_gemm = next(i for i, n in enumerate(t.nodes) if n.name == "qkv_proj")
    assert sum(1 for n in t.nodes[:first_gemm] if n.name == "fsdp_param_allgather") == 3
    assert wl.traces == reference_generate(program, timer).traces


def test_fsdp_prefetch_hides_gathers_and_replay_agrees():
    model = small_llama(layers=4, seq_len=2048)
    program, timer = setup(model, Framework(dp=4, zero_stage=3, global_batch=8))
    est = estimate(program, timer)
    gather_ns = timer.links.collective_ns(CollectiveType.ALL_GATHER, 2 * program.unit_params("layer", 0)[0], 4, False)
    serial = 2 * 2 * 4 * gather_ns  # 4 layer gathers per pass, fwd + bwd, 2 micro-batches
    exposed = predict(make_setup(model, program.fw, "H100")).part_ns("dp")
    assert 0 < exposed < serial / 2
    assert _replay_ns(generate(program, timer)) == pytest.approx(est.step_ns, rel=0.10)


def test_fsdp_memory_holds_two_unsharded_layers():
    from xsim_trace.workload.memory import stage_memory

    model = small_llama(layers=4, seq_len=1024)
    program, timer = setup(model, Framework(dp=4, zero_stage=3, global_batch=8))
    zero2 = setup(model, Framework(dp=4, zero_stage=2, global_batch=8))[0]
    m3, m2 = stage_memory(program, timer.device)[0], stage_memory(zero2, timer.device)[0]
    layer = sum(program.unit_params("layer", 0))
    assert m3.weights_bytes == 2 * (m2.params // 4) + 2 * 2 * layer


def test_fsdp_with_expert_parallelism_gathers_experts_over_expert_dp():
    moe = get_model("mixtral-8x7b").with_(layers=2, seq_len=256, name="moe-small")
    fw = Framework(dp=4, ep=2, zero_stage=3, global_batch=4)
    program, timer = setup(moe, fw)
    wl = generate(program, timer)
    assert check_rank_set(wl.traces, wl.comm_groups) == []
    t = wl.traces[0]
    experts = _nodes(t, "fsdp_param_allgather_experts")
    assert len(experts) == 2 * 2 and len(_nodes(t, "fsdp_grad_reducescatter_experts")) == 2  # 2 layers, 1 mb
    assert {n.comm_size_bytes for n in experts} == {2 * moe.moe_experts // 2 * moe.mlp_params(moe.moe_ffn)}
    assert sorted(wl.comm_groups[experts[0].attr("pg_name")]) == [0, 2]  # expert-DP: same experts, other replica
    assert wl.traces == reference_generate(program, timer).traces


# -- context parallelism ring ----------------------------------------------------------------------
def test_cp_ring_steps_bytes_and_peers():
    model = small_llama(layers=2, seq_len=2048)
    fw = Framework(cp=4, dp=2, global_batch=2)  # 1 micro-batch
    program, timer = setup(model, fw)
    wl = generate(program, timer)
    assert check_rank_set(wl.traces, wl.comm_groups) == []
    t = wl.traces[0]
    kv = cp_kv_bytes(model, fw, dims(model, fw))
    assert kv == 2 * (2048 // 4) * model.kv_hidden * 2  # K and V of 512 tokens, bf16
    sends, recvs = _nodes(t, "cp_kv_ring_send"), _nodes(t, "cp_kv_ring_recv")
    assert len(sends) == len(recvs) == 3 * 2  # cp-1 steps per layer, 2 layers
    assert {n.comm_size_bytes for n in sends} == {kv}
    assert {n.comm_size_bytes for n in _nodes(t, "cp_kv_ring_bwd_send")} == {2 * kv}  # K, V and dK, dV
    cp_group = timer.group(CommKind.CP, 0)
    assert {n.comm_dst for n in sends} == {cp_group[1]} and {n.comm_src for n in recvs} == {cp_group[-1]}
    steps = _nodes(t, "flash_attention_cp_step")
    assert len(steps) == 4 * 2 and not _nodes(t, "cp_kv_allgather")
    # the FLOPs of the ring steps add up to the whole attention
    whole = setup(model, Framework(dp=2, global_batch=2))[0].pass_ops(0, 0, True)
    att = next(op for _, op in whole if op.name == "flash_attention")
    assert sum(n.attr("num_ops") for n in steps) == 2 * att.flops // 4  # 2 layers, 1/cp of the queries each
    assert wl.traces == reference_generate(program, timer).traces


def test_cp_ring_overlaps_attention_and_replay_agrees():
    model = small_llama(layers=2, seq_len=8192)
    fw = Framework(cp=4, global_batch=1)
    program, timer = setup(model, fw)
    pred = predict(make_setup(model, fw, "H100"))
    ring_ns = timer.links.p2p_ns(cp_kv_bytes(model, fw, dims(model, fw)), False)
    serial = 2 * 3 * ring_ns + 2 * 3 * timer.links.p2p_ns(2 * cp_kv_bytes(model, fw, dims(model, fw)), False)
    assert pred.part_ns("cp") < serial  # hidden behind the attention steps, not serial
    assert _replay_ns(generate(program, timer)) == pytest.approx(estimate(program, timer).step_ns, rel=0.12)


# -- tied embedding ---------------------------------------------------------------------------------
def test_tied_embedding_grad_allreduce_between_first_and_last_stage():
    model = get_model("gpt3-1.3b").with_(layers=6, seq_len=512)
    fw = Framework(tp=2, pp=3, dp=2, global_batch=6)
    program, timer = setup(model, fw)
    wl = generate(program, timer)
    assert check_rank_set(wl.traces, wl.comm_groups) == []
    by_stage = {s: [n for n in wl.traces[program.fw.tp * program.fw.dp * s].nodes if n.name == "embedding_grad_allreduce"]
                for s in range(3)}
    assert len(by_stage[0]) == len(by_stage[2]) == 1 and not by_stage[1]
    node = by_stage[0][0]
    assert node.comm_size_bytes == model.vocab * model.hidden // 2 * 4 and node.attr("comm_type") == CollectiveType.ALL_REDUCE
    assert sorted(wl.comm_groups[node.attr("pg_name")]) == [0, 8]
    assert wl.traces == reference_generate(program, timer).traces
    # untied: no sync; one stage: nothing to sync
    untied = setup(model.with_(tied_embeddings=False), fw)
    assert not any(n.name == "embedding_grad_allreduce" for t in generate(*untied).traces.values() for n in t.nodes)
    est_tied, est_untied = estimate(program, timer), estimate(*untied)
    assert est_tied.stages[0].dp_exposed_ns > est_untied.stages[0].dp_exposed_ns
    assert est_tied.stages[1].dp_exposed_ns == est_untied.stages[1].dp_exposed_ns


# -- DeepSeek-V3 / MLA ------------------------------------------------------------------------------
def test_deepseek_v3_geometry_and_parameters():
    m = get_model("deepseek-v3")
    assert (m.layers, m.hidden, m.heads, m.vocab, m.moe_experts, m.moe_top_k, m.moe_ffn) == \
        (61, 7168, 128, 129280, 256, 8, 2048)
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_dim, m.qk_nope_dim, m.v_head_dim) == (1536, 512, 64, 128, 128)
    assert m.moe_dense_layers == 3 and m.moe_shared_experts == 1 and m.ffn == 18432
    assert m.total_params() / 1e9 == pytest.approx(671, rel=0.005)  # the paper's 671B (MTP module apart)
    inactive = m.moe_layers * (m.moe_experts - m.moe_top_k) * m.mlp_params(m.moe_ffn)
    assert (m.total_params() - inactive - m.vocab * m.hidden) / 1e9 == pytest.approx(37, rel=0.03)  # 37B active
    assert [m.is_moe_layer(i) for i in (0, 2, 3, 60)] == [False, False, True, True]


def test_mla_ops_and_dense_first_layers():
    m = get_model("deepseek-v3").with_(layers=4, seq_len=512, moe_dense_layers=2, moe_experts=16, name="dsv3-small")
    fw = Framework(tp=2, pp=2, dp=4, ep=4, global_batch=8, sequence_parallel=True)
    program, timer = setup(m, fw)
    fwd = {op.name: op for op in program.layer_ops(0, True)}
    assert {"mla_q_down", "mla_q_up", "mla_kv_down", "mla_kv_up"} <= set(fwd) and "qkv_proj" not in fwd
    t = 512
    assert fwd["mla_q_down"].shape[:3] == (t, 1536, 7168)  # replicated over TP
    assert fwd["mla_kv_down"].shape[:3] == (t, 512 + 64, 7168)
    assert fwd["mla_kv_up"].shape[:3] == (t, 64 * (128 + 128), 512)  # 64 heads per TP rank
    assert fwd["attn_out_proj"].shape[:3] == (t, 7168, 64 * 128)
    assert fwd["flash_attention"].flops == 2 * t * 512 * 64 * (192 + 128)
    assert "mlp_fc1" in fwd and "moe_router" not in fwd  # layer 0 is dense
    moe = {op.name for op in program.layer_ops(2, True)}
    assert {"moe_router", "moe_experts", "moe_shared_fc1", "moe_dispatch_a2a"} <= moe and "mlp_fc1" not in moe
    dense0, expert0 = program.stage_params(0)
    dense1, expert1 = program.stage_params(1)
    assert expert0 == 0 and expert1 == 2 * 16 * m.mlp_params(2048) // (4 * 2)  # over ep x etp
    wl = generate(program, timer)
    assert check_rank_set(wl.traces, wl.comm_groups) == []
    assert wl.traces == reference_generate(program, timer).traces


def test_mla_activations_follow_its_widths():
    from xsim_trace.workload.memory import layer_activation_bytes

    fw = Framework(tp=1, global_batch=1)
    mla = get_model("deepseek-v3").with_(moe_experts=0, moe_dense_layers=0, moe_shared_experts=0, name="mla-dense")
    plain = mla.with_(kv_lora_rank=0, q_lora_rank=0, name="mha-dense")
    s, h, a = mla.seq_len, mla.hidden, mla.heads
    extra = s * (4 * (a * 192 - h) + 4 * (a * 128 - h) + 2 * (1536 + 512 + 64))
    from xsim_trace.workload.program import Program
    assert layer_activation_bytes(Program(mla, fw)) - layer_activation_bytes(Program(plain, fw)) == \
        pytest.approx(extra, abs=2)


def test_deepseek_v3_estimate_at_scale():
    s = make_setup("deepseek-v3", Framework(pp=16, dp=128, ep=64, global_batch=8192, distributed_optimizer=True,
                                            precision="fp8"), "H100")
    pred = predict(s)
    assert sum(v for _, v in pred.breakdown_ns) == pred.step_ns
    assert 0.05 < pred.mfu < 0.6
