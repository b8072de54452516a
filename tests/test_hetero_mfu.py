"""MFU rows (HexiScale / FlashFlex): the throughput their MFU states by the repository's formula and peaks, and
the column a row that cannot be predicted leaves open."""

from __future__ import annotations

from pathlib import Path

import pytest

from xsim_trace.validate.hetero_accuracy import evaluate, predict_row, summarize
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
        ({}, "gbs", "no global batch"),
        ({"gbs": "64"}, "plan", "no plan in the Sailor or AMP form"),
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


@pytest.mark.skipif(not SHARED_CSV.exists(), reason="shared reference CSV not present")
def test_shared_hexiscale_rows_state_their_throughput_and_count_as_errors():
    raws = [r for r in read_rows(SHARED_CSV) if r.metric == "MFU"]
    assert len(raws) == 8
    results = evaluate(raws)
    assert all("column gbs" in r.error and "tokens/s" in r.error for r in results)
    s = summarize(results)
    assert (s.rows, s.worst_abs_err_pct, s.median_abs_err_pct) == (8, 100.0, 100.0)
