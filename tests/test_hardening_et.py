"""Issue 15: every .et crash class of the fuzzer is refused at the boundary, by `trace check`
(exit 1, an out-of-range problem) and by `replay` (exit 2, one line naming file, rank, node, field)."""

from __future__ import annotations

import pytest

from hardening_helpers import ET_CRASHES, P2P_CRASHES, allreduce_traces, write_allreduce, write_p2p
from xsim_trace.graph.kinds import AttrKind
from xsim_trace.cli.main import main
from xsim_trace.errors import GraphError
from xsim_trace.graph.bounds import check_bounds
from xsim_trace.replay.api import compile_checked


def _replay(prefix: str, tmp_path) -> int:
    return main(["-q", "replay", prefix, "--cluster", "dgx-h100:1", "--out", str(tmp_path / "out"), "--no-plot",
                 "--no-timeline"])


@pytest.mark.parametrize("label,override", ET_CRASHES, ids=[c[0] for c in ET_CRASHES])
def test_et_value_out_of_range_is_refused(label, override, tmp_path, capsys):
    prefix = write_allreduce(tmp_path, **override)
    assert main(["-q", "trace", "check", prefix]) == 1
    out = capsys.readouterr().out
    assert "out-of-range" in out or "collective-mismatch" in out, out
    assert _replay(prefix, tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "file " in err[0] and "rank 0" in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("label,field,value", P2P_CRASHES, ids=[c[0] for c in P2P_CRASHES])
def test_peer_rank_out_of_range_is_refused(label, field, value, tmp_path, capsys):
    prefix = write_p2p(tmp_path, field, value)
    assert main(["-q", "trace", "check", prefix]) == 1
    capsys.readouterr()
    assert _replay(prefix, tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"field {field}" in err[-1], err


def test_bounds_name_rank_node_and_field():
    traces = allreduce_traces(id=1 << 63)
    with pytest.raises(GraphError) as info:
        check_bounds(traces)
    assert "rank 0" in str(info.value) and "field id" in str(info.value) and "0..9223372036854775807" in str(info.value)


def test_clean_trace_compiles_through_the_checked_entry():
    work = compile_checked(allreduce_traces(), {"0": (0, 1)})
    assert work.num_nodes == 4


def test_exit_codes(tmp_path, capsys, monkeypatch):
    prefix = write_allreduce(tmp_path)
    assert main(["trace", "check", prefix]) == 0
    assert main(["trace", "check", str(tmp_path / "none.et")]) == 2  # bad input
    assert main(["trace", "check"]) == 2  # usage
    assert main(["--help"]) == 0
    import xsim_trace.cli.trace as trace_cli

    def boom(args):
        raise KeyError("a bug")

    monkeypatch.setattr(trace_cli, "cmd_stats", boom)
    capsys.readouterr()
    assert main(["trace", "stats", prefix]) == 3
    err = capsys.readouterr().err
    assert "please report" in err and "Traceback" not in err
    assert main(["-v", "trace", "stats", prefix]) == 3
    assert "Traceback" in capsys.readouterr().err


def test_global_flags_on_both_entry_points(tmp_path, capsys):
    from xsim_trace.cli.main import convert_main

    assert convert_main(["-q", "text", str(tmp_path / "missing.txt"), "-o", str(tmp_path / "x")]) == 2
    assert convert_main(["text", "-q", str(tmp_path / "missing.txt"), "-o", str(tmp_path / "x")]) == 2
    prefix = write_allreduce(tmp_path)
    assert main(["trace", "check", "-q", prefix]) == 0
    assert capsys.readouterr().err.count("no problems") == 1


def test_output_errors_are_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    prefix = write_allreduce(tmp_path)
    args = ["-q", "replay", prefix, "--cluster", "dgx-h100:1", "--no-plot", "--no-timeline", "--out"]
    (tmp_path / "o" / "summary.json").mkdir(parents=True)
    for out in (blocker, tmp_path / "o"):
        assert main([*args, str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("xsim: error: file ") and "Traceback" not in err[0], err


def test_atomic_write_errors_are_output_errors(tmp_path):
    from xsim_trace.errors import OutputError
    from xsim_trace.io import atomic_write

    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    for target in (tmp_path / "file" / "a.json", tmp_path / "dir"):
        with pytest.raises(OutputError):
            with atomic_write(target) as handle:
                handle.write("{}")


@pytest.mark.parametrize("columnar", [True, False])
def test_both_replay_readers_refuse_every_crash_class(columnar, tmp_path):
    from xsim_trace.replay.columnar import compile_rank_files

    for i, (label, override) in enumerate(ET_CRASHES):
        prefix = write_allreduce(tmp_path / str(i), **override)
        with pytest.raises(GraphError):
            compile_rank_files(prefix, columnar=columnar)
    for i, (label, field, value) in enumerate(P2P_CRASHES):
        prefix = write_p2p(tmp_path / f"p{i}", field, value)
        with pytest.raises(GraphError, match=field):
            compile_rank_files(prefix, columnar=columnar)


def test_columns_of_the_bundled_sample_are_in_bounds():
    from xsim_trace.graph.bounds import columns_in_bounds
    from xsim_trace.io.et_columns import read_columns

    cols = read_columns("traces/dlrm_v100_8rank/dlrm.0.et")
    if cols is None:
        pytest.skip("the numba column decoder is not available")
    assert columns_in_bounds(cols)


def test_dangling_dependency_error_names_the_flag(tmp_path):
    from dataclasses import replace

    from xsim_trace.replay.compile import compile_workload

    traces = allreduce_traces()
    node = traces[0].nodes[1]
    traces[0] = replace(traces[0], nodes=(traces[0].nodes[0], replace(node, data_deps=(99,))))
    with pytest.raises(GraphError, match="--drop-missing-deps"):
        compile_workload(traces, {"0": (0, 1)})


def test_ns3_missing_message_says_it_once(monkeypatch):
    from xsim_trace.errors import BackendError
    from xsim_trace.network import ns3_backend

    monkeypatch.setattr(ns3_backend, "ns3_unusable_reason", lambda: ns3_backend.NOT_INSTALLED)
    with pytest.raises(BackendError) as info:
        ns3_backend.Ns3Backend(None)
    assert str(info.value).count("pip install") == 1


@pytest.mark.parametrize("override,words", [
    ({"comm_root": (AttrKind.INT64, 5), "comm_type": (AttrKind.INT64, 5)}, "comm_root 5 is not a member"),
    ({"ring_order": (AttrKind.INT64_LIST, [0, 3])}, "is not an ordering"),
])
def test_check_reports_roles_replay_refuses(override, words, tmp_path, capsys):
    from xsim_trace.io import write_rank_set

    prefix = str(tmp_path / "run")
    write_rank_set(prefix, allreduce_traces(on_ranks=(0, 1), **override), {})
    assert main(["-q", "trace", "check", prefix]) == 1
    assert words in capsys.readouterr().out
    assert _replay(prefix, tmp_path) == 2
    assert words in capsys.readouterr().err
