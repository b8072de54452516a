"""MFU rows (HexiScale / FlashFlex): the throughput their MFU states by the repository's formula and peaks, the run
rebuilt from the published defaults with its plan searched, and the column a row that cannot be built names."""

from __future__ import annotations

from pathlib import Path

import pytest

from xsim_trace.validate.hetero_accuracy import evaluate, predict_row, summarize
from xsim_trace.validate.hetero_flashflex import (
    DEFAULT_GLOBAL_BATCH,
    NodeSet,
    flashflex_run,
    llama_ffn,
    node_sets,
    plan_groups,
    search_space,
)
from xsim_trace.validate.hetero_mfu import FLASHFLEX_PEAK_TFLOPS, flashflex_tokens_per_s, mfu_row_error
from xsim_trace.validate.hetero_predict import FITTED
from xsim_trace.validate.hetero_rows import RawRow, read_rows

SHARED_CSV = Path(__file__).resolve().parents[2] / "shared" / "reference" / "hetero_measured.csv"
SOURCE = "Relaxed-System-Lab/FlashFlex@5ee1726:README.md"
LLAMA7 = "Llama-2 7B: 32 layers, hidden 4096, 32 heads (standard config)"


def mfu_raw(row_id="M1", **fields) -> RawRow:
    base = {"row_id": row_id, "source": SOURCE, "model_dims": LLAMA7, "seq": "", "gbs": "", "mbs": "",
            "cluster": "2 nodes x 8x A100-PCIe, TCP inter-node", "gpus": "A100-PCIex16",
            "plan": "Megatron (homogeneous)", "metric": "MFU", "value": "38.58", "notes": "HOMOGENEOUS baseline"}
    base.update(fields)
    return RawRow(row_id, base)


def test_tokens_per_s_by_the_repository_formula_and_peaks():
    # 16 A100 at 312 "TFLOPS" of 2^40 FLOP/s; 96 l h^2 (1 + s/6h + V/16lh) FLOPs per token, s 4096, V 32000
    per_token = 96 * 32 * 4096**2 * (1 + 4096 / (6 * 4096) + 32000 / (16 * 32 * 4096))
    expect = 0.3858 * 16 * 312 * 2**40 / per_token
    assert flashflex_tokens_per_s(mfu_raw()) == pytest.approx(expect, rel=1e-12)
    assert round(expect) == 34762
    # an explicit seq overrides the repository's 4096
    assert flashflex_tokens_per_s(mfu_raw(seq="2048")) > expect


def test_peaks_reproduce_the_readme_same_total_flops():
    p = FLASHFLEX_PEAK_TFLOPS
    homog = 16 * p["A100-PCIE-80GB"]
    for mix in ({"RTX-3080-Ti": 8, "RTX-3090": 8, "RTX-4090": 24},
                {"RTX-3080-Ti": 8, "RTX-3090": 8, "RTX-4090": 8, "A100-SXM4-80GB": 8}):
        assert sum(p[d] * n for d, n in mix.items()) == pytest.approx(homog, rel=0.025)
    assert 8 * p["RTX-3090"] + 40 * p["RTX-4090"] + 8 * p["A100-SXM4-80GB"] == pytest.approx(2 * homog, rel=0.025)


@pytest.mark.parametrize(
    "fields, column, message",
    [
        ({"gbs": "64", "plan": "PP=1; S0: layers 0-33 on DP=1 [A100-PCIex16 TP16]; mbs=1; "
                               "microbatches per pipeline replica=64"}, "metric", "not converted to seconds"),
        ({"source": "somewhere", "notes": ""}, "metric", "FlashFlex's convention"),
        ({"gpus": "T4x16"}, "gpus", "no peak"),
        ({"value": "high"}, "value", "MFU in %"),
    ],
)
def test_mfu_row_names_the_open_column(fields, column, message):
    err = mfu_row_error(mfu_raw("H900", **fields))
    assert (err.row_id, err.column) == ("H900", column)
    assert message in str(err)
    res = predict_row(mfu_raw("H900", **fields), FITTED)  # never reaches the predictor
    assert res.error == str(err) and res.abs_err_pct == 100.0


@pytest.mark.parametrize(
    "fields, column, message",
    [
        ({"cluster": "3 nodes x 8x A100-PCIe, TCP"}, "cluster", "the nodes hold A100-PCIE-80GBx24"),
        ({"cluster": "links not stated"}, "cluster", "no nodes found"),
        ({"cluster": "2x8 RTX 4090"}, "cluster", "not in the gpus column"),
        ({"gbs": "sixty"}, "gbs", "positive integer"),
        ({"model_dims": "Llama-2 7B: 32 layers, 32 heads"}, "model_dims", "'hidden <n>'"),
    ],
)
def test_flashflex_row_that_cannot_be_built_names_the_column(fields, column, message):
    res = predict_row(mfu_raw("H901", **fields), FITTED)
    assert res.error.startswith(f"row H901, column {column}:") and message in res.error
    assert res.abs_err_pct == 100.0


def test_flashflex_run_defaults_and_sources():
    run = flashflex_run(mfu_raw())
    m = run.model
    assert (m.num_layers, m.hidden, m.heads, m.ffn_hidden, m.vocab, m.seq_len, m.micro_batch_size) == \
        (32, 4096, 32, 11008, 32000, 4096, 1)
    assert m.recompute and m.flash_attention and m.gated_mlp
    assert (run.global_batch, run.gbs_from_row) == (DEFAULT_GLOBAL_BATCH, False)
    assert run.node_sets == (NodeSet("A100-PCIE-80GB", 2, 8, False),)
    assert run.peak_tflops == 16 * 312.0
    # the measured MFU at the batch is an iteration time, and back
    s = run.seconds_at_mfu(38.58)
    assert run.mfu_pct_at(s) == pytest.approx(38.58, rel=1e-12)
    assert run.global_batch * 4096 / s == pytest.approx(flashflex_tokens_per_s(mfu_raw()), rel=1e-12)
    assert flashflex_run(mfu_raw(gbs="128")).global_batch == 128


def test_the_space_is_what_the_engine_deploys():
    hexi = flashflex_run(mfu_raw(cluster="1x8 RTX 3080Ti-12G + 1x8 RTX 3090-24G + 3x8 RTX 4090-24G (5 nodes)",
                                 gpus="3080Tix8 + 3090x8 + 4090x24 (= 40)", plan="HexiScale optimal plan"))
    mega = flashflex_run(mfu_raw())
    assert not hexi.megatron and mega.megatron
    assert hexi.model.grad_reduce_bytes == 2  # FSDP MixedPrecision(reduce_dtype=fp16)
    sh, sm = (search_space(r, plan_groups(r, 0.3, 0.8, 35.0)) for r in (hexi, mega))
    assert sh.schedules[0][0].value == "gpipe" and sh.distributed_optimizer  # FSDP SHARD_GRAD_OP
    assert sm.schedules[0][0].value == "1f1b" and not sm.distributed_optimizer  # Megatron's defaults
    assert sh.placement == sm.placement == "stage" and sh.every_device and sm.every_device


def test_every_device_keeps_only_structures_that_leave_no_gpu_idle():
    from xsim_trace.plan.space import structures, uses_every_device

    run = flashflex_run(mfu_raw(cluster="1x8 RTX 3090-24G + 1x8 RTX 4090-24G", gpus="3090x8 + 4090x8",
                                plan="HexiScale optimal plan"))
    space = search_space(run, plan_groups(run, 0.3, 0.8, 35.0))
    kept = [reps for reps, _ in structures(space)]
    assert kept and all(uses_every_device(space, reps) for reps in kept)
    from dataclasses import replace

    every = list(structures(replace(space, every_device=False)))
    assert len(every) > len(kept) and any(not uses_every_device(space, reps) for reps, _ in every)


def test_llama_ffn_rule():
    assert [llama_ffn(h) for h in (4096, 5120, 6656, 8192)] == [11008, 13824, 17920, 22016]


def test_node_sets_of_the_readme_clusters():
    raw = mfu_raw(cluster="1x8 RTX 3090-24G + 2x4 RTX 4090-24G + 4x8 RTX 4090-24G + 1x8 A100-80G NVLink (8 nodes); "
                          "inter-node not stated", gpus="3090x8 + 4090x40 + A100x8 (= 56)")
    assert node_sets(raw) == (NodeSet("RTX-3090", 1, 8, False), NodeSet("RTX-4090", 2, 4, False),
                              NodeSet("RTX-4090", 4, 8, False), NodeSet("A100-SXM4-80GB", 1, 8, True))
    groups = plan_groups(flashflex_run(raw), 0.5, 0.8, 40.0)
    assert [g.count for g in groups] == [8, 8, 32, 8]
    assert groups[0].intra_node_GBps == pytest.approx(31.5 * 0.5)  # PCIe 4.0 x16 at the PCIe efficiency
    assert groups[3].intra_node_GBps == pytest.approx(300 * 0.8)  # NVLink 3 at the NVLink efficiency
    assert groups[1].nic_gbps == pytest.approx(10.0) and groups[2].nic_gbps == pytest.approx(5.0)


@pytest.mark.skipif(not SHARED_CSV.exists(), reason="shared reference CSV not present")
def test_shared_a100_baseline_row_is_predicted_by_the_plan_search():
    raw = next(r for r in read_rows(SHARED_CSV) if r.row_id == "H142")
    res = predict_row(raw, FITTED)
    assert not res.error
    run = flashflex_run(raw)
    assert res.measured_s == pytest.approx(run.seconds_at_mfu(38.58), rel=1e-12)
    assert res.predicted_s > 0 and "MFU measured 38.58% predicted" in res.note and "gbs 64 (assumed)" in res.note
    assert predict_row(raw, FITTED) == res  # deterministic


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_CSV.exists(), reason="shared reference CSV not present")
def test_shared_hexiscale_rows_are_all_predicted():
    raws = [r for r in read_rows(SHARED_CSV) if r.metric == "MFU"]
    assert len(raws) == 8
    results = evaluate(raws)
    assert not [r.error for r in results if r.error]
    assert all(r.predicted_s > 0 and "searched plan" in r.note for r in results)
    assert summarize(results).rows == 8
