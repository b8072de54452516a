"""``xsim convert`` / ``xsim-convert`` end to end: files written, summary printed, errors as one line."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from xsim_trace.cli.main import convert_main, main
from xsim_trace.graph.checks import check_rank_set
from xsim_trace.io import read_rank_set

sys.path.insert(0, str(Path(__file__).parent))
from convert_helpers import DLRM_ET, DLRM_KINETO, TEXT, need  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_convert_kineto_tarball(tmp_path, capsys):
    out = tmp_path / "dlrm"
    assert main(["-q", "convert", "kineto", str(need(DLRM_KINETO)), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert captured.err == ""  # -q: only errors (the result summary stays on stdout)
    assert "rank 7:" in text and "ALL_REDUCE x3, ALL_TO_ALL x5" in text and "ProfilerStep#10 12.509 ms" in text
    # docs/convert.md shows this run's output: its lines (node counts included) must be what it prints
    shown = re.findall(r"^rank \d+: \d+ nodes, .*$", (REPO / "docs" / "convert.md").read_text(), re.MULTILINE)
    assert shown and all(line in text.splitlines() for line in shown)
    rs = read_rank_set(out)
    assert rs.ranks == list(range(8)) and check_rank_set(rs.traces, rs.comm_groups) == []
    assert json.loads((tmp_path / "dlrm.comm_groups.json").read_text()) == {}  # world "0" needs no entry
    # the trace CLI agrees
    assert main(["trace", "check", str(out)]) == 0


def test_xsim_convert_alias_and_step_all(tmp_path, capsys):
    out = tmp_path / "one"
    assert convert_main(["kineto", str(need(DLRM_KINETO)), "-o", str(out), "--step", "all", "--alltoall", "coll"]) == 0
    rs = read_rank_set(out)
    assert rs.traces[0].metadata.attr("profiler_step") == -1
    assert sum(1 for n in rs.traces[0].nodes if n.comm_type is not None and n.comm_type.name == "ALL_TO_ALL") >= 5
    assert check_rank_set(rs.traces, rs.comm_groups) == []  # uneven all-to-alls get one size per collective


def test_quiet_flag_on_both_entry_points(tmp_path, capsys):
    src = str(need(TEXT / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"))
    for argv in (["-q", "text", src], ["text", "-q", src]):
        assert convert_main([*argv, "-o", str(tmp_path / "q")]) == 0
        assert capsys.readouterr().err == ""
    assert convert_main(["text", src, "-o", str(tmp_path / "loud")]) == 0
    assert "wrote" in capsys.readouterr().err


def test_convert_text(tmp_path, capsys):
    out = tmp_path / "gpt"
    src = need(TEXT / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt")
    assert main(["convert", "text", str(src), "-o", str(out), "--num-npus", "8"]) == 0
    assert read_rank_set(out).ranks == list(range(8))


def test_errors_are_one_line(tmp_path, capsys):
    assert main(["convert", "kineto", str(tmp_path / "nope.json"), "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("xsim: error: file ") and "no such file" in err and "\n" not in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": -4}]}')
    assert main(["convert", "kineto", str(bad), "-o", str(tmp_path / "x")]) == 2
    assert "event 0: negative 'dur'" in capsys.readouterr().err
    assert not list(tmp_path.glob("x*"))  # nothing half-written
    assert main(["convert", "kineto", str(need(DLRM_KINETO)), "-o", str(tmp_path / "y"), "--step", "99"]) == 2
    assert "no ProfilerStep#99" in capsys.readouterr().err
    assert not list(tmp_path.glob("y*"))
