"""The parts of ``xsim demo`` the end-to-end tests in test_report_outputs.py do not reach: a
``--sample`` rank set (its cluster chosen by the traces' GPU, the captured step times shown)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from xsim_trace.cli.demo import _sample_input
from xsim_trace.cli.main import main

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "dlrm_v100_8rank" / "dlrm"


def test_sample_input_takes_the_cluster_of_the_traces_gpu():
    args = argparse.Namespace(cluster=None, backend="analytical")
    demo = _sample_input(args, str(SAMPLE), None)
    assert demo.cluster.name == "v100-dgx1" and len(demo.rs.traces) == 8
    assert demo.shown_prefix == demo.rs.prefix and demo.backend.name == "analytical"
    forced = _sample_input(argparse.Namespace(cluster="dgx-a100", backend="analytical"), str(SAMPLE), None)
    assert forced.cluster.name == "dgx-a100"


def test_demo_of_a_sample_prints_its_captured_step_times(tmp_path, capsys):
    assert main(["-q", "demo", "--sample", str(SAMPLE), "--out", str(tmp_path / "d")]) == 0
    text = capsys.readouterr().out
    assert "on v100-dgx1 (" in text and "captured step time per rank:" in text
    assert json.loads((tmp_path / "d" / "summary.json").read_text())["num_ranks"] == 8
