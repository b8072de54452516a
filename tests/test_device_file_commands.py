"""``--device-file`` reaches the plan and rewrite commands end to end: ``xsim plan check / partition /
compare / search``, ``xsim rewrite`` and ``xsim generate --plan`` (then ``xsim replay`` of what it
wrote).  The user device ``TestGPU-X`` exists only in the file, so any name looked up again in the
built-in catalog would fail; a file that *changes* a built-in device (``A100-SXM4-80GB`` at a
quarter of its FLOP/s and HBM bandwidth) shows that the resolved specs, not the built-in ones, time the stages."""

from __future__ import annotations

import json

import pytest
import yaml

from xsim_trace.cli.main import main
from xsim_trace.io import read_rank_set

from rewrite_helpers import TINY_MODEL
from workload_helpers import TEST_GPU_DEVICE_FILE as DEVICES


SLOW_A100 = """devices:
  A100-SXM4-80GB:
    bf16_tflops: 78.0
    fp16_tflops: 78.0
    hbm_bw_GBps: 500
"""

CLUSTER = """name: testgpu-a100
groups:
  - name: x
    gpu: TestGPU-X
    nodes: 1
    devices_per_node: 8
    intra_node: {kind: nvswitch, bw_GBps: 450, latency_ns: 250}
    nic: {count: 8, nic_gbps: 400, latency_ns: 1000}
  - name: a100
    gpu: A100-SXM4-80GB
    nodes: 1
    devices_per_node: 8
    intra_node: {kind: nvswitch, bw_GBps: 300, latency_ns: 250}
    nic: {count: 8, nic_gbps: 200, latency_ns: 1000}
links:
  - {groups: [x, a100], bw_gbps: 800, latency_ns: 2000}
fabric: {kind: single-switch, latency_ns: 500}
"""


def _plan(**over) -> dict:
    d = {
        "model": dict(TINY_MODEL, num_layers=8),
        "device_groups": [{"name": "x", "device": "testgpu", "count": 8},
                          {"name": "a100", "device": "A100-SXM4-80GB", "count": 8}],
        "pipelines": [{"stages": [{"group": "x", "tp": 2}, {"group": "a100", "tp": 4}]}],
        "micro_batches": 4,
        "schedule": "1f1b",
    }
    d.update(over)
    return d


@pytest.fixture()
def files(tmp_path):
    dev, slow, cl, plan = (tmp_path / n for n in ("devices.yaml", "slow_a100.yaml", "cluster.yaml", "plan.yaml"))
    dev.write_text(DEVICES)
    slow.write_text(SLOW_A100)
    cl.write_text(CLUSTER)
    plan.write_text(yaml.safe_dump(_plan()))
    return {"dev": str(dev), "slow": str(slow), "cluster": str(cl), "plan": str(plan), "tmp": tmp_path}


def _refused(capsys, *names: str) -> str:
    err = capsys.readouterr().err
    assert all(n in err for n in names), err
    return err


def test_plan_check_partition_compare(files, capsys):
    plan, dev = files["plan"], files["dev"]
    assert main(["plan", "check", plan]) == 2  # the built-in catalog does not know the device
    err = _refused(capsys, "testgpu", "known devices:", "H100-SXM5-80GB")
    assert "TestGPU-X" not in err
    assert main(["plan", "check", plan, "--cluster", files["cluster"], "--device-file", dev]) == 0
    assert "ok" in capsys.readouterr().out
    assert main(["plan", "partition", plan, "--device-file", dev]) == 0
    assert capsys.readouterr().out.startswith("pipeline 0 stage 0 (x, TP 2): layers [0, ")
    assert main(["plan", "compare", plan, "--device-file", dev, "--quick", "--json"]) == 0
    quick = json.loads(capsys.readouterr().out)[0]
    assert main(["plan", "compare", plan, "--device-file", dev, "--cluster", files["cluster"], "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)[0]
    assert quick["iteration_ns"] > 0 and replayed["iteration_ns"] > 0 and not replayed["infeasible"]


def test_a_changed_builtin_device_times_the_plan(files, capsys):
    """The file's A100 (a quarter of the FLOP/s and memory bandwidth) is the one every stage time uses: the auto partition
    moves layers off it and the step gets slower; a stale built-in lookup would change neither."""
    plan = files["tmp"] / "builtin.yaml"
    plan.write_text(yaml.safe_dump(_plan(device_groups=[{"name": "x", "device": "H100", "count": 8},
                                                        {"name": "a100", "device": "A100-SXM4-80GB", "count": 8}])))

    def quick(*extra: str) -> dict:
        assert main(["plan", "compare", str(plan), "--quick", "--json", "--partition", "auto", *extra]) == 0
        return json.loads(capsys.readouterr().out)[0]

    base, slow = quick(), quick("--device-file", files["slow"])
    on_a100 = lambda row: int(row["layers"].split("/")[1])  # noqa: E731
    assert on_a100(slow) < on_a100(base)
    assert slow["iteration_ns"] > 1.2 * base["iteration_ns"]


def test_rewrite_model_and_a_trace_of_a_user_device(files, capsys):
    plan, dev, tmp = files["plan"], files["dev"], files["tmp"]
    out = tmp / "rw" / "model"
    assert main(["rewrite", "model", "--plan", plan, "--out", str(out)]) == 2
    _refused(capsys, "known devices:")
    assert main(["rewrite", "model", "--plan", plan, "--device-file", dev, "--out", str(out)]) == 0
    rs = read_rank_set(str(out))
    assert rs.traces[0].metadata.attr("device_name") == "TestGPU-X"
    assert rs.traces[5].metadata.attr("device_name") == "A100-SXM4-80GB"
    # a trace generated on the user device: its device_name and --device resolve in the same catalog
    gen = tmp / "gen" / "tiny"
    assert main(["generate", "--model", "gpt3-1.3b", "--layers", "4", "--seq-len", "256", "--tp", "2",
                 "--device", "testgpu", "--device-file", dev, "--out", str(gen)]) == 0
    capsys.readouterr()
    tplan = tmp / "p.yaml"
    tplan.write_text(yaml.safe_dump(_plan(model={"preset": "gpt3-1.3b", "num_layers": 4, "seq_len": 256},
                                          pipelines=[{"stages": [{"group": "x", "tp": 2, "layers": [0, 2]},
                                                                 {"group": "a100", "tp": 4, "layers": [2, 4]}]}])))
    base = ["rewrite", str(gen), "--tp", "2", "--plan", str(tplan), "--device-file", dev]
    assert main([*base, "--device", "TestGPU-X", "--out", str(tmp / "rw" / "t1")]) == 0
    assert main([*base, "--device", "A100", "--out", str(tmp / "rw" / "t2")]) == 2  # the guard names both
    _refused(capsys, "TestGPU-X", "A100-SXM4-80GB")
    assert main([*base, "--device", "NoSuchGPU", "--out", str(tmp / "rw" / "t3")]) == 2
    err = _refused(capsys, "NoSuchGPU", "known devices:", "TestGPU-X")
    assert "--device" in err
    assert not (tmp / "rw" / "t3.0.et").exists()


def test_generate_plan_then_replay(files, capsys):
    plan, dev, tmp = files["plan"], files["dev"], files["tmp"]
    out = tmp / "gen" / "hetero"
    assert main(["generate", "--plan", plan, "--out", str(out)]) == 2
    _refused(capsys, "known devices:")
    assert not out.parent.exists() or not any(out.parent.iterdir())
    summary = tmp / "summary.json"
    assert main(["generate", "--plan", plan, "--device-file", dev, "--out", str(out), "--summary", str(summary)]) == 0
    groups = {g["name"]: g for g in json.loads(summary.read_text())["groups"]}
    assert groups["x"]["device"] == "TestGPU-X"
    cluster = f"{out}.cluster.yaml"
    assert "TestGPU-X" in open(cluster).read()
    rep = ["replay", str(out), "--cluster", cluster, "--no-plot", "--no-timeline"]
    assert main([*rep, "--out", str(tmp / "r0")]) == 2  # the written cluster names the user device
    _refused(capsys, "TestGPU-X")
    assert main([*rep, "--device-file", dev, "--out", str(tmp / "r1")]) == 0
    assert json.loads((tmp / "r1" / "summary.json").read_text())["iteration_ns"] > 0
    # the same plan with --cluster: the given cluster's GPU types resolve in the run's catalog too
    assert main(["generate", "--plan", plan, "--device-file", dev, "--cluster", files["cluster"],
                 "--out", str(tmp / "gen2" / "h")]) == 0


def test_plan_search_on_a_cluster_of_a_user_device(files, capsys):
    out = files["tmp"] / "search"
    args = ["plan", "search", "--cluster", files["cluster"], "--model", "gpt3-1.3b", "--seq-len", "256",
            "--gbs", "8", "--max-stages", "2", "--replay", "1", "--budget", "30", "--out", str(out)]
    assert main(args) == 2
    _refused(capsys, "TestGPU-X", "known devices:")
    assert main([*args, "--device-file", files["dev"]]) == 0
    doc = yaml.safe_load((out / "best_plan.yaml").read_text())
    assert {g["device"] for g in doc["device_groups"]} <= {"TestGPU-X", "A100-SXM4-80GB"}
    assert "TestGPU-X" in {g["device"] for g in doc["device_groups"]}
    # the written plan reads back through the same catalog
    assert main(["plan", "check", str(out / "best_plan.yaml"), "--device-file", files["dev"],
                 "--cluster", files["cluster"]]) == 0
