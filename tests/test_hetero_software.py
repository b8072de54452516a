"""What each testbed's training software does (AMP's DeepSpeed 0.3 + Megatron v1.1.5, Sailor's pipe engine over
Megatron-DeepSpeed's OPTModelPipe) and the Ethernet/TCP rates: the facts xsim_trace.validate.hetero_predict follows."""

from __future__ import annotations

import pytest

from test_hetero_accuracy import AMP_PLAN, raw, sailor
from xsim_trace.validate.hetero_predict import (
    FITTED,
    SOFTWARE,
    TCP_FRAMING,
    _replicas_sharing,
    nic_achievable_gbps,
    predict,
)
from xsim_trace.validate.hetero_rows import parse_row
from xsim_trace.workload.pipeline_hetero import BlockDims, StageContent, stage_params

GPT2 = BlockDims(hidden=1024, ffn=4096, heads=16, vocab=52256, seq_len=1024)
PURE_PP = ("PP=2; S0: layers 0-11 on DP=1 [RTX-3090x8 TP8]; S1: layers 12-25 on DP=1 [Titan-RTXx8 TP8]; mbs=2; "
           "microbatches per pipeline replica=128")


def test_software_facts_per_testbed():
    amp, sailor_sw = SOFTWARE["aws"], SOFTWARE["alps"]
    assert (amp.dtype_bytes, amp.tied_head, amp.grad_partitioned, amp.barrier_before_reduce) == (2, True, False, False)
    assert (sailor_sw.dtype_bytes, sailor_sw.tied_head, sailor_sw.grad_partitioned) == (4, False, True)
    assert sailor_sw.barrier_before_reduce
    assert amp.forward_extra_bytes(1024) == 1024 * 1024 * 2  # the [1, 1, s, s] mask cast to fp16
    assert sailor_sw.forward_extra_bytes(2048) == 0  # Sailor keeps the mask in args.attn_mask


def test_one_stage_holds_a_tied_embedding_once_and_an_untied_head_as_its_own_matrix():
    only_blocks = stage_params(GPT2, StageContent(24, False, False, False))
    embedding = GPT2.vocab * GPT2.hidden + GPT2.seq_len * GPT2.hidden
    whole = StageContent(24, True, True, True)
    assert stage_params(GPT2, whole) == only_blocks + embedding + 2 * GPT2.hidden  # DeepSpeed: one tied module
    assert stage_params(GPT2, whole, tied_head=False) == only_blocks + embedding + 2 * GPT2.hidden + \
        GPT2.vocab * GPT2.hidden
    head_stage = StageContent(0, False, True, True)
    assert stage_params(GPT2, head_stage) == 2 * GPT2.hidden + embedding  # the tied copy on the last stage


def test_sailor_pipeline_has_no_tied_reduction_and_starts_all_reductions_together():
    p = predict(parse_row(sailor(plan=PURE_PP, gpus="RTX-3090x8 + Titan-RTXx8 (= 16 GPUs, 2 nodes/VMs)",
                                 gbs="256")))
    assert [st.dp_allreduce_s for st in p.stages] == [0.0, 0.0]  # DP 1 and no tied embedding
    dp2 = predict(parse_row(sailor()))
    assert len({st.end_s for st in dp2.stages}) == 1  # the world barrier before ReduceGrads
    amp = predict(parse_row(raw()))
    assert amp.stages[0].dp_allreduce_s > 0.1  # AMP's tied embedding, 4 x 107 MB over a 10 Gb/s NIC
    assert len({st.end_s for st in amp.stages}) == 4  # no barrier: each stage reduces when it is done


def test_replicas_in_one_node_share_its_nic_for_stage_transfers():
    row = parse_row(raw(plan=AMP_PLAN))  # DP 4 x PP 4, pipe-major: each stage's 4 replicas on one node
    assert [_replicas_sharing(row.plan, 0, r) for r in range(4)] == [4, 4, 4, 4]
    one = parse_row(raw(plan=AMP_PLAN.replace("DP=4, PP=4", "DP=1, PP=16").replace(
        "[0, 7, 14, 20, 30]", "[0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 30]").replace(
        "grad-accum=8", "grad-accum=32")))
    assert _replicas_sharing(one.plan, 0, 0) == 1  # stage 0 -> 1 stays inside node 0
    assert _replicas_sharing(one.plan, 3, 0) == 1  # stage 3 -> 4 crosses node 0 -> 1 alone


def test_tcp_rate_is_framing_limited_below_the_fitted_ceiling():
    assert TCP_FRAMING == pytest.approx(0.9415, abs=1e-4)
    assert nic_achievable_gbps(1, "ethernet", FITTED) == pytest.approx(0.9415, abs=1e-4)  # MIT measured 0.939
    assert nic_achievable_gbps(10, "ethernet", FITTED) == pytest.approx(9.415, abs=1e-3)
    assert nic_achievable_gbps(50, "ethernet", FITTED) == FITTED.tcp_ceiling_Gbps
    assert nic_achievable_gbps(200, "ib", FITTED) == pytest.approx(200 * FITTED.tcp_efficiency)
    # AWS VPC jumbo frames (the aws-* presets' nccl.mtu_bytes 9001): 8949 B of payload per 9039 B of wire time
    assert nic_achievable_gbps(10, "ethernet", FITTED, mtu_bytes=9001) == pytest.approx(10 * 8949 / 9039)
    assert nic_achievable_gbps(50, "ethernet", FITTED, mtu_bytes=9001) == FITTED.tcp_ceiling_Gbps


def test_amp_unfused_attention_core_moves_more_bytes_per_score():
    """AMP's Megatron v1.1.5 runs the scale-mask-softmax unfused in fp16 (masked_fill_, softmax, dropout with its
    mask): 7 B per score element forward and 3 backward beyond the workload op, one more kernel each; the extra
    time grows with the micro-batch (the s x s scores), Sailor's software adds nothing."""
    import dataclasses

    from xsim_trace.devices import get_device
    from xsim_trace.validate.hetero_predict import _pass_ns, workload_model

    assert SOFTWARE["aws"].score_extra_bytes == (7, 3) and SOFTWARE["alps"].score_extra_bytes == (0, 0)
    w = workload_model(parse_row(raw()))
    t4 = dataclasses.replace(get_device("T4"), kernel_overhead_ns=0)
    extra = []
    for mbs in (1, 4):
        base = _pass_ns(w, mbs, t4, 1, 4.7, 1000.0, 6, False, False, 0, "deepspeed")
        more = _pass_ns(w, mbs, t4, 1, 4.7, 1000.0, 6, False, False, 0, "deepspeed", (7, 3))
        assert more[0] > base[0] and more[1] > base[1]
        extra.append(more[0] - base[0])
    assert extra[1] == pytest.approx(4 * extra[0], rel=0.05)  # bytes, not launches: 4x the scores, 4x the time
