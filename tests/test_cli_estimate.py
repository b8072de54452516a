"""xsim estimate: one prediction with a breakdown that sums to the step, JSON, cluster, replay
confirmation, bad input (exit 2, field and values named), no files written."""

from __future__ import annotations

import json
import os

import pytest

from xsim_trace.cli.main import main
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.predict import BREAKDOWN_KEYS, predict
from xsim_trace.workload.spec_file import make_setup

SMALL = ["--model", "gpt3-1.3b", "--layers", "4", "--seq-len", "512"]


def _json(capsys, argv):
    assert main(["estimate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_breakdown_sums_to_step(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = _json(capsys, [*SMALL, "--tp", "2", "--pp", "2", "--dp", "2", "--gbs", "16"])
    assert set(out["breakdown_s"]) == set(BREAKDOWN_KEYS)
    assert sum(out["breakdown_s"].values()) == pytest.approx(out["step_time_s"], abs=1e-5)
    assert out["world_size"] == 8 and out["framework"] == "megatron-core"
    assert 0 < out["mfu"] < 1 and out["tokens_per_s_per_gpu"] > 0
    assert len(out["memory"]) == 2 and out["out_of_memory"] is False
    assert os.listdir(tmp_path) == []  # no rank files


def test_library_prediction_matches_cli_and_is_exact(capsys):
    fw = Framework(tp=8, pp=16, dp=128, global_batch=2048, sequence_parallel=True, distributed_optimizer=True,
                   overlap_grad_reduce=True, recompute="full")
    pred = predict(make_setup("llama3-405b", fw, "H100"))
    assert sum(v for _, v in pred.breakdown_ns) == pred.step_ns
    assert pred.world_size == 16384
    out = _json(capsys, ["--model", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--gbs", "2048", "--sp",
                         "--distributed-optimizer", "--overlap-grad-reduce", "--recompute", "full"])
    assert out["step_time_s"] == round(pred.step_s, 6)


def test_framework_flag_and_cuda_graphs_change_host_time(capsys):
    eager = _json(capsys, [*SMALL, "--dp", "2"])
    graphs = _json(capsys, [*SMALL, "--dp", "2", "--cuda-graphs"])
    assert graphs["breakdown_s"]["host"] < eager["breakdown_s"]["host"]
    assert graphs["step_time_s"] < eager["step_time_s"]


def test_no_rope_fusion_flag_reaches_the_estimate(capsys):
    rope = [*SMALL, "--dp", "2", "--position-embedding-type", "rope"]  # GPT-3 learns its positions: no RoPE to fuse
    fused = _json(capsys, rope)
    eager = _json(capsys, [*rope, "--no-rope-fusion"])
    assert fused["rope_fusion"] is True and eager["rope_fusion"] is False
    assert eager["step_time_s"] > fused["step_time_s"]
    learned = _json(capsys, [*SMALL, "--dp", "2", "--no-rope-fusion"])
    assert learned["position_embedding"] == "learned_absolute" and fused["position_embedding"] == "rope"
    assert learned["step_time_s"] < fused["step_time_s"]  # no RoPE op in any layer


def test_cluster_sets_device_and_replay_confirms(capsys):
    out = _json(capsys, [*SMALL, "--tp", "2", "--dp", "2", "--gbs", "4", "--cluster", "dgx-a100:1", "--replay"])
    assert out["device"].startswith("A100")
    assert abs(out["replay_vs_estimate_pct"]) < 5.0


def test_text_output_names_parts_and_oom(capsys):
    assert main(["estimate", "--model", "llama3-70b", "--dp", "8", "--device", "A100-40GB"]) == 0
    text = capsys.readouterr().out
    assert "step time" in text and "bubble" in text and "MFU" in text and "OUT OF MEMORY" in text


@pytest.mark.parametrize("argv, needles", [
    (["--model", "llama3-8b", "--tp", "3"], ["framework.tp", "3", "32"]),
    (["--model", "llama3-8b", "--dp", "3", "--gbs", "16"], ["framework.global_batch", "16", "3"]),
    (["--model", "llama3-8b", "--cp", "3"], ["framework.cp", "8192"]),
    (["--model", "nope"], ["unknown model", "llama3-8b"]),
    (["--model", "llama3-8b", "--device", "X100"], ["unknown device", "H100-SXM5-80GB"]),
    (["--model", "llama3-8b", "--framework", "jax"], ["unknown framework", "megatron-core", "torchtitan"]),
    (["--model", "llama3-8b", "--tp", "8", "--dp", "4", "--gbs", "4", "--cluster", "dgx-h100:1"], ["32 GPUs", "8"]),
])
def test_bad_input_exit_2(capsys, argv, needles):
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    for n in needles:
        assert n in err


def test_cluster_intra_node_rate_reaches_the_links():
    """A device without NVLink (T4 on PCIe) takes the cluster's intra-node rate; a mesh sums GPU 0's lanes."""
    from xsim_trace.cli.estimate import _intra_GBps
    from xsim_trace.cluster import load_cluster
    from xsim_trace.workload.comm import NVLINK_EFFICIENCY

    assert _intra_GBps(load_cluster("a100-40g-4gpu").groups[0]) == 25 * 12
    t4 = load_cluster("aws-g4dn-t4:2").groups[0]
    fw = Framework(dp=2, global_batch=2)
    setup = make_setup("gpt3-1.3b", fw, t4.gpu_type, intra_GBps=_intra_GBps(t4))
    assert setup.timer.links.intra_bw_GBps == pytest.approx(t4.intra.bw_GBps * NVLINK_EFFICIENCY)
    assert make_setup("gpt3-1.3b", fw, "T4").timer.links.intra_bw_GBps > 0  # PCIe fallback, no error
