"""The DeepSpeed pipeline model (xsim_trace.workload.pipeline_hetero): stages DeepSpeed cannot build, per-GPU memory,
the 1F1B recursion with separate forward / backward transfers, and its use by the heterogeneous prediction."""

from __future__ import annotations

import pytest

from xsim_trace.validate.hetero_predict import predict
from xsim_trace.validate.hetero_rows import parse_row
from xsim_trace.workload.pipeline_hetero import (
    BlockDims,
    ExchangeOrder,
    StageContent,
    SocketPorts,
    block_params,
    param_groups,
    schedule_1f1b,
    stage_memory_bytes,
    stage_params,
    train_schedule,
    unbuildable_reason,
)
from test_hetero_accuracy import raw

GPT2 = BlockDims(hidden=1024, ffn=4096, heads=16, vocab=52256, seq_len=1024)


def test_block_params_gpt2_medium():
    # 12 h^2 + 13 h: the published 24-layer / h1024 GPT-2 medium block
    assert block_params(GPT2) == 12 * 1024 ** 2 + 13 * 1024
    whole = StageContent(blocks=24, embedding=True, final_norm=True, head=False)
    assert 350e6 < stage_params(GPT2, whole) < 360e6


@pytest.mark.parametrize("content, buildable", [
    (StageContent(0, True, False, False), False),   # embedding only: no bias, no LayerNorm
    (StageContent(0, False, False, False), False),  # transposes only: no parameters at all
    (StageContent(0, False, False, True), False),   # tied head (+ fp32 cast) only
    (StageContent(0, False, True, True), True),     # final LayerNorm + head: both groups
    (StageContent(1, True, False, False), True),    # embedding + a block
    (StageContent(0, False, True, False), False),   # LayerNorm only: no weight-decay group
])
def test_empty_optimizer_group_is_unbuildable(content, buildable):
    decay, no_decay = param_groups(GPT2, content)
    assert (decay > 0 and no_decay > 0) == buildable
    assert (unbuildable_reason(GPT2, content) == "") == buildable


def test_memory_grows_with_in_flight_micro_batches_and_shrinks_with_tp():
    st = StageContent(6, False, False, False)
    first = stage_memory_bytes(GPT2, st, 0, 4, 2, 16, 1)
    last = stage_memory_bytes(GPT2, st, 3, 4, 2, 16, 1)
    assert first > last  # 1F1B: stage 0 keeps 4 micro-batches in flight, the last stage 1
    assert stage_memory_bytes(GPT2, st, 0, 4, 2, 16, 2) < first
    head = StageContent(0, False, True, True)
    assert stage_memory_bytes(GPT2, head, 0, 1, 16, 1, 1) > 16 * 1024 * 52256 * 6  # fp32 + fp16 logits


def test_1f1b_backward_transfer_separate_from_forward():
    same = schedule_1f1b([1, 1], [2, 2], [5], 4)
    assert schedule_1f1b([1, 1], [2, 2], [5], 4, [5]) == same
    assert schedule_1f1b([1, 1], [2, 2], [5], 4, [20])[0] > same[0]


def test_train_schedule_is_deepspeeds_instruction_stream():
    """DeepSpeed's TrainSchedule, 2 stages x 2 micro-batches: exchanges before the step's pass, in its order."""
    assert train_schedule(0, 2, 2) == [("fwd", 0), ("send_act", 0), ("fwd", 1), ("send_act", 1), ("recv_grad", 0),
                                       ("bwd", 0), ("recv_grad", 1), ("bwd", 1)]
    assert train_schedule(1, 2, 2) == [("recv_act", 0), ("fwd", 0), ("bwd", 0), ("recv_act", 1), ("send_grad", 0),
                                       ("fwd", 1), ("bwd", 1), ("send_grad", 1)]


def test_train_schedule_gradient_first_order_sends_before_it_receives():
    """DeepSpeed since its issue #2800 fix (2023): a forward step sends the previous gradient before it receives
    the activation, a backward step receives the gradient before it sends the previous activation."""
    g = ExchangeOrder.GRADIENT_FIRST
    assert train_schedule(0, 2, 2, g) == [("fwd", 0), ("send_act", 0), ("fwd", 1), ("recv_grad", 0), ("send_act", 1),
                                          ("bwd", 0), ("recv_grad", 1), ("bwd", 1)]
    assert train_schedule(1, 2, 2, g) == [("recv_act", 0), ("fwd", 0), ("bwd", 0), ("send_grad", 0), ("recv_act", 1),
                                          ("fwd", 1), ("bwd", 1), ("send_grad", 1)]


def test_1f1b_eager_sends_by_hand():
    """2 stages, fwd 1, bwd 2, a 5-unit link, 2 micro-batches, every send eager (the sender goes on at once, the
    bytes leave when both ports are free, the receive completes at their arrival).
    Activation first: S0 F0 [0,1]; act0 [1,6]; F1 [1,2]; act1 queued behind act0 [6,11]; S1 F0 [6,7] B0 [7,9],
    waits act1 (11), grad0 [11,16]; F1 [11,12] B1 [12,14]; grad1 behind grad0 [16,21]; S0 B0 [16,18] B1 [21,23].
    Gradient first: S0's act1 leaves only after grad0 came: act0 [1,6]; S1 F0 B0 [6,9]; grad0 [9,14]; act1 [14,19];
    S0 B0 [14,16]; S1 F1 B1 [19,22]; grad1 [22,27]; S0 B1 [27,29].  (Rendezvous, either order: [29, 27].)"""
    eager = [True]
    assert schedule_1f1b([1, 1], [2, 2], [5], 2, eager_act=eager, eager_grad=eager) == [23, 14]
    assert schedule_1f1b([1, 1], [2, 2], [5], 2, order=ExchangeOrder.GRADIENT_FIRST, eager_act=eager,
                         eager_grad=eager) == [29, 22]
    for order in ExchangeOrder:
        assert schedule_1f1b([1, 1], [2, 2], [5], 2, order=order) == [29, 27]


def test_1f1b_eager_transfers_hide_behind_a_slow_first_stage():
    """Sailor's two-stage MIT rows: the first stage paces (its passes are longer than the second stage's passes
    plus both wires), so with eager sends its cycle is its passes alone; with rendezvous both wires join it."""
    fwd, bwd, wire, m = [430, 220], [440, 280], [143], 64
    eager = [True]
    hidden = schedule_1f1b(fwd, bwd, wire, m, order=ExchangeOrder.GRADIENT_FIRST, eager_act=eager, eager_grad=eager)
    held = schedule_1f1b(fwd, bwd, wire, m, order=ExchangeOrder.GRADIENT_FIRST)
    assert hidden[0] < m * (fwd[0] + bwd[0]) + 2_000
    assert held[0] > m * (fwd[0] + bwd[0] + 2 * wire[0])


@pytest.mark.parametrize("p, m", [(1, 3), (2, 5), (3, 4), (4, 8), (5, 2)])
def test_train_schedule_passes_follow_1f1b(p, m):
    from xsim_trace.workload.schedule import one_f_one_b

    for s in range(p):
        for order in ExchangeOrder:
            passes = [x for x in train_schedule(s, p, m, order) if x[0] in ("fwd", "bwd")]
            assert passes == [("fwd" if o.forward else "bwd", o.microbatch) for o in one_f_one_b(s, p, m)]


def test_1f1b_slow_link_is_a_rendezvous_holding_both_stages():
    """2 stages, fwd 1, bwd 2, a 5-unit link, 2 micro-batches, by hand (a transfer starts when both sides reached
    it and holds both):  S0 F0 [0,1]; act0 [1,6]; S1 F0 [6,7] B0 [7,9]; S0 F1 [6,7] waits for S1's recv of act1
    [9,14]; grad0 [14,19]; S1 F1 [19,20] B1 [20,22]; S0 B0 [19,21]; grad1 [22,27]; S0 B1 [27,29].
    A sender-only model (the receiver free during the wire) gives 24 for stage 0."""
    assert schedule_1f1b([1, 1], [2, 2], [5], 2) == [29, 27]


def test_prediction_flags_a_stage_deepspeed_cannot_build():
    plan = ("TP(mp)=1, DP=1, PP=16; layer boundaries [0, 1, 2, 3, 4, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 30] "
            "(AMP indexing, 30 units); mbs=1; grad-accum=32; ranks 0-15, node k = ranks 4k..4k+3")
    p = predict(parse_row(raw(plan=plan, mbs="1")))
    assert p.out_of_memory and p.infeasible.startswith("stage 0: empty no-decay")
    ok = predict(parse_row(raw()))
    assert not ok.out_of_memory and ok.infeasible == "" and len(ok.stages) == 4
    assert ok.stages[-1].device == "T4" and ok.stages[-1].p2p_ms == 0.0 and ok.stages[0].p2p_ms > 0


def test_estimate_with_the_deepspeed_family_reports_its_pipeline_memory(capsys):
    import json

    from xsim_trace.cli.main import main

    argv = ["estimate", "--model", "gpt3-1.3b", "--layers", "4", "--seq-len", "512", "--pp", "2", "--gbs", "8",
            "--framework", "deepspeed", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [d["stage"] for d in out["deepspeed"]] == [0, 1]
    assert all(d["unbuildable"] == "" and d["memory_GiB"] > 0 and not d["out_of_memory"] for d in out["deepspeed"])
    assert main(argv[:-3] + ["--json"]) == 0  # other families: no DeepSpeed section
    assert "deepspeed" not in json.loads(capsys.readouterr().out)


def test_sailor_socket_transfers_are_eager_when_they_fit_nccl_buffer(monkeypatch):
    """Sailor's MIT runs: its DeepSpeed sends before it receives, its nodes reach each other over TCP sockets, and a
    TP8 rank's fp32 activation part (2 MiB) fits NCCL's staging buffer, so the first stage's sends do not wait for
    the second stage; with a buffer too small for it every send waits for its receive (rendezvous)."""
    from test_hetero_accuracy import sailor

    import xsim_trace.validate.hetero_predict as hp

    row = parse_row(sailor())
    assert hp.SOFTWARE["alps"].exchange_order is ExchangeOrder.GRADIENT_FIRST
    assert hp.SOFTWARE["aws"].exchange_order is ExchangeOrder.ACTIVATION_FIRST
    assert all(link.nic_sockets for link in hp.node_links(row, hp.FITTED))
    eager = predict(row).iteration_s
    monkeypatch.setattr(hp, "NCCL_BUFFSIZE_BYTES", 1024 * 1024)
    assert predict(row).iteration_s > eager * 1.1


def test_socket_ports_share_a_port_fairly_and_keep_one_connection_in_order():
    """Two connections on stage 1's outgoing port (activation to 2, gradient to 0) split it evenly; two messages
    to one peer go one after the other; projections move when a later message joins."""
    ports = SocketPorts()
    ports.send(("send_act", 0, 1), 0, 10, 1, 2)
    assert ports.arrival[("send_act", 0, 1)] == 10  # alone: its full rate (projected)
    ports.send(("send_grad", 0, 1), 2, 4, 1, 0)
    # 0-2 the activation alone (8 left), then both at half rate: the gradient's 4 take 8 (in at 10), the
    # activation's remaining 4 run alone from 10 (in at 14)
    assert ports.arrival[("send_grad", 0, 1)] == 10 and ports.arrival[("send_act", 0, 1)] == 14
    same = SocketPorts()
    same.send(("send_act", 0, 0), 0, 10, 0, 1)
    same.send(("send_act", 1, 0), 0, 10, 0, 1)  # the same connection: in order, each at the full rate
    assert (same.arrival[("send_act", 0, 0)], same.arrival[("send_act", 1, 0)]) == (10, 20)


def test_fair_sharing_moves_only_pipelines_whose_ports_carry_two_flows():
    """Two stages: each port carries one connection, fair sharing changes nothing.  Three stages with every send
    eager and wires longer than the passes: the middle stage's ports carry activations and gradients at once, and
    sharing them evenly (TCP flows) delays the first message against serving them whole, one after the other."""
    eager = [True]
    for order in ExchangeOrder:
        assert schedule_1f1b([1, 1], [2, 2], [5], 4, order=order, eager_act=eager, eager_grad=eager) == \
            schedule_1f1b([1, 1], [2, 2], [5], 4, order=order, eager_act=eager, eager_grad=eager, fair_share=False)
    three = dict(order=ExchangeOrder.GRADIENT_FIRST, eager_act=[True, True], eager_grad=[True, True])
    fair = schedule_1f1b([1, 1, 1], [2, 2, 2], [6, 6], 8, **three)
    fifo = schedule_1f1b([1, 1, 1], [2, 2, 2], [6, 6], 8, **three, fair_share=False)
    assert fair != fifo and max(fair) >= max(fifo)
    assert schedule_1f1b([1, 1, 1], [2, 2, 2], [6, 6], 8, **three) == fair  # deterministic
