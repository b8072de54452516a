"""xsim replay refuses ranks captured on another GPU than the cluster's, naming both, and with
--retarget rescales their compute kernels to the cluster's device."""

from __future__ import annotations

from xsim_trace.cli.main import main
from xsim_trace.cluster import load_cluster
from xsim_trace.graph import attrs as A
from xsim_trace.io import read_rank_set
from xsim_trace.rewrite.retarget import device_mismatches, retarget

GEN = ["generate", "--model", "gpt3-1.3b", "--layers", "2", "--seq-len", "256", "--tp", "2", "--dp", "2",
       "--framework", "megatron-core", "--no-cuda-graphs"]


def _gen(tmp_path, device):
    out = tmp_path / device / "w"
    assert main(["-q", *GEN, "--device", device, "--out", str(out)]) == 0
    return out


def test_mismatch_is_refused_naming_both(tmp_path, capsys):
    prefix = _gen(tmp_path, "A100")
    rc = main(["replay", str(prefix), "--cluster", "dgx-h100:1", "--out", str(tmp_path / "r"), "--no-plot", "--no-timeline"])
    err = capsys.readouterr().err
    assert rc == 2 and "A100-SXM4-80GB" in err and "H100-SXM5-80GB" in err and "--retarget" in err
    assert not (tmp_path / "r").exists()


def test_retarget_rescales_compute_only_and_matches_native_generation(tmp_path):
    a100 = read_rank_set(_gen(tmp_path, "A100"))
    cluster = load_cluster("dgx-h100:1")
    assert [m.rank for m in device_mismatches(a100.traces, cluster)] == [0, 1, 2, 3]
    moved = retarget(a100.traces, cluster)
    assert not device_mismatches(moved, cluster)
    t0, m0 = a100.traces[0], moved[0]
    assert m0.metadata.attr(A.META_DEVICE) == "H100-SXM5-80GB"
    faster = same = 0
    for a, b in zip(t0.nodes, m0.nodes):
        da, db = a.attr(A.DURATION_NS), b.attr(A.DURATION_NS)
        if a.attr(A.IS_CPU_OP, False) or int(a.type) != 4:
            assert da == db
            same += 1
        elif da:
            assert db <= da
            faster += db < da
    assert faster > 10 and same > 0


def test_replay_with_retarget_runs(tmp_path, capsys):
    prefix = _gen(tmp_path, "A100")
    assert main(["replay", str(prefix), "--cluster", "dgx-h100:1", "--retarget", "--out", str(tmp_path / "r"),
                 "--no-plot", "--no-timeline"]) == 0
    assert "iteration time" in capsys.readouterr().out
