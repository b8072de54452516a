"""Published per-layer profiles (xsim_trace/data/layer_profiles) and measured link rates in a cluster preset: what
the heterogeneous predictor takes from them for Sailor's MIT testbed rows."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.validate.hetero_predict import FITTED, node_links, predict
from xsim_trace.validate.hetero_rows import RawRow, parse_row
from xsim_trace.validate.layer_profile import LayerTimes, _parse, find_layer_times, layer_profiles

OPT350 = (24, 1024, 16, 50272, 2048)
OPT = ("OPT-350M: 24 layers, hidden 1024, 16 heads x 64, seq 2048, vocab 50272 (plan indexes 26 'layers' = "
       "embedding + 24 blocks + head); fp16; Adam")
MIT = "MIT cluster (Sailor SOSP'25 testbed): nodes of 8 GPUs of one type (RTX-3090 24GB, RTX-2080 11GB, Titan-RTX 24GB)"
PLAN = ("PP=3; S0: layers 0-7 on DP=1 [RTX-3090x8 TP8]; S1: layers 8-16 on DP=1 [RTX-2080x8 TP8]; S2: layers 17-25 "
        "on DP=1 [Titan-RTXx8 TP8]; mbs=2; microbatches per pipeline replica=72")


def mit_row(**fields) -> RawRow:
    base = {"row_id": "M1", "model_dims": OPT, "seq": "2048", "gbs": "144", "mbs": "2", "cluster": MIT,
            "gpus": "RTX-3090x8 + RTX-2080x8 + Titan-RTXx8 (= 24 GPUs, 3 nodes/VMs)", "plan": PLAN,
            "metric": "iteration_time", "value": "1.0", "notes": "HETEROGENEOUS; test"}
    base.update(fields)
    return RawRow(base["row_id"], base)


def test_sailor_mit_profile_is_shipped_with_its_values():
    (prof,) = [p for p in layer_profiles() if p.name == "sailor-mit-opt350"]
    assert prof.cluster == "mit-rtx" and prof.model == OPT350
    t = find_layer_times("mit-rtx", OPT350, "RTX-3090", 2, 8)
    assert (t.block_fwd_s, t.block_bwd_s) == (0.037522, 0.039646)  # profile.json, mbs 2, tp 8, layer 2
    assert find_layer_times("mit-rtx", OPT350, "RTX-3090", 3, 8) is None  # no such micro-batch profiled
    assert find_layer_times("aws-g4dn-t4", OPT350, "RTX-3090", 2, 8) is None  # another testbed
    assert find_layer_times("mit-rtx", (12, 768, 12, 50272, 2048), "RTX-3090", 2, 8) is None  # another model


def test_layer_times_add_up_per_stage():
    t = LayerTimes(embedding_fwd_s=0.5, block_fwd_s=1.0, block_bwd_s=2.0, head_fwd_s=0.25, head_bwd_s=0.75)
    assert t.pass_ns(3, embedding=True, head=False) == (3_500_000_000, 6_000_000_000)
    assert t.pass_ns(2, embedding=False, head=True) == (2_250_000_000, 4_750_000_000)


def test_bad_profile_names_the_field():
    with pytest.raises(ConfigError, match="devices.X.2.8"):
        _parse("bad.yaml", {"model": dict(zip(("layers", "hidden", "heads", "vocab", "seq_len"), OPT350)),
                            "devices": {"X": {2: {8: {"block_fwd_s": 1.0}}}}})
    with pytest.raises(ConfigError, match="field model"):
        _parse("bad.yaml", {"model": {"layers": 24}})


def test_mit_row_uses_measured_layers_and_links():
    row = parse_row(mit_row())
    pred = predict(row)
    s0 = pred.stages[0]  # RTX-3090 TP8: embedding + 7 blocks of the profile
    assert s0.fwd_ms == pytest.approx((0.018533 + 7 * 0.037522) * 1e3, abs=1e-3)
    assert s0.bwd_ms == pytest.approx(7 * 0.039646 * 1e3, abs=1e-3)
    links = node_links(row, FITTED)
    assert [lk.nic_GBps for lk in links] == [0.1174, 0.1175, 2.942]  # measured, no TCP efficiency on top
    assert [lk.intra_GBps for lk in links] == [5.327, 24.55, 24.30]
    # Sailor trains in fp32: 16.8 MB of activations over the 1 Gb/s link between two of the nodes, ~143 ms
    assert 135 < s0.p2p_ms < 150
