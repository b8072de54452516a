"""Issue 15, single ranks: `trace stats FILE.et` reads exactly that file; `replay` of a partial rank
set models the absent peers (--absent-peers mirror|skew) and says so."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import shared_path
from xsim_trace.cli.main import main

SAMPLE = "traces/dlrm_v100_8rank/dlrm"


def test_stats_and_check_read_exactly_the_named_file(tmp_path, capsys):
    shutil.copy(f"{SAMPLE}.1.et", tmp_path / "dlrm.1.et")
    assert main(["trace", "stats", "--json", str(tmp_path / "dlrm.1.et")]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert list(stats) == [str(tmp_path / "dlrm.1.et")] and stats[str(tmp_path / "dlrm.1.et")]["nodes"] > 0
    assert main(["trace", "check", str(tmp_path / "dlrm.1.et")]) == 0


@pytest.mark.parametrize("mode", ["mirror", "skew"])
def test_replay_of_one_rank_models_its_peers(mode, tmp_path, capsys):
    shutil.copy(f"{SAMPLE}.1.et", tmp_path / "dlrm.1.et")
    out = tmp_path / "out"
    assert main(["replay", str(tmp_path / "dlrm"), "--cluster", "v100-dgx1", "--out", str(out), "--no-plot",
                 "--no-timeline", "--absent-peers", mode]) == 0
    err = capsys.readouterr().err
    assert "7 absent peer(s) of 8 ranks modelled as mirrors of the captured rank(s) 1" in err
    assert ("step-start offset" in err) == (mode == "skew")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_ranks"] == 8 and summary["iteration_ns"] > 0


def test_skew_starts_each_rank_at_its_captured_offset(tmp_path):
    from xsim_trace.io import read_rank_set
    from xsim_trace.replay.absent import AbsentPeers, complete_rank_set
    from xsim_trace.validate.scenario import START_OFFSET_NODE

    for r in (1, 2):  # rank 2's step began 6.887 ms after rank 1's
        shutil.copy(f"{SAMPLE}.{r}.et", tmp_path / f"dlrm.{r}.et")
    rs = read_rank_set(tmp_path / "dlrm", partial=True)
    mirror = complete_rank_set(rs.traces, rs.comm_groups, AbsentPeers.MIRROR)
    skew = complete_rank_set(rs.traces, rs.comm_groups, AbsentPeers.SKEW)
    assert mirror.mirrored == skew.mirrored == (0, 3, 4, 5, 6, 7)

    def offset_ns(trace):
        delay = [n for n in trace.nodes if n.name == START_OFFSET_NODE]
        return delay[0].duration_ns if delay else 0

    assert [offset_ns(mirror.traces[r]) for r in range(8)] == [0] * 8
    assert [offset_ns(skew.traces[r]) for r in range(8)] == [0, 0, 6_887_000, 6_887_000, 6_887_000, 6_887_000,
                                                              6_887_000, 6_887_000]


def test_replay_of_a_converted_single_rank_capture(tmp_path, capsys):
    capture = shared_path("kineto", "hta_a100_16rank_rank0", "rank0.json.gz")
    prefix = tmp_path / "run"
    assert main(["-q", "convert", "kineto", str(capture), "-o", str(prefix)]) == 0
    assert main(["trace", "stats", str(tmp_path / "run.0.et")]) == 0
    assert main(["replay", str(prefix), "--cluster", "dgx-a100:2", "--out", str(tmp_path / "out"), "--no-plot",
                 "--no-timeline"]) == 0
    assert "15 absent peer(s) of 16 ranks" in capsys.readouterr().err


def test_complete_sets_are_left_alone():
    from xsim_trace.io import read_rank_set
    from xsim_trace.replay.absent import complete_rank_set

    rs = read_rank_set(SAMPLE)
    done = complete_rank_set(rs.traces, rs.comm_groups)
    assert done.mirrored == () and done.notes == () and done.traces == rs.traces
