"""xsim trace dump | stats | check on real files, through the CLI entry point."""

from __future__ import annotations

import json

from conftest import shared_path
from xsim_trace.cli.main import main


def test_check_names_dangling_dependency(capsys):
    f = shared_path("chakra_et", "feeder_test_real", "chakra.0.et")
    assert main(["trace", "check", str(f)]) == 1
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[0].endswith("node 216: dangling-dep: ctrl dependency on node 3, which is not in the file")
    assert "problem(s)" in out.err


def test_check_clean_rank_set(capsys):
    prefix = shared_path("chakra_et", "astra_custom_ring_8npus") / "custom_allreduce"
    assert main(["trace", "check", str(prefix)]) == 0
    assert "8 file(s), no problems" in capsys.readouterr().err


def test_stats_json_counts(capsys):
    f = shared_path("chakra_et", "reference_pytorch_e2e", "chakra_trace.0.et.gz")
    assert main(["trace", "stats", "--json", str(f)]) == 0
    d = json.loads(capsys.readouterr().out)[str(f)]
    assert d["nodes"] == 18050
    assert d["by_type"] == {"COMP": 18029, "COMM_COLL": 21}
    assert d["collectives"]["ALL_REDUCE"]["count"] == 15
    assert d["collectives"]["BROADCAST"]["count"] == 6


def test_dump_json_lines(capsys):
    f = shared_path("chakra_et", "reference_generator", "ALL_REDUCE.0.et")
    assert main(["trace", "dump", str(f)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert "metadata" in lines[0]
    coll = [x for x in lines[1:] if x["type"] == "COMM_COLL"]
    assert coll and coll[0]["attrs"]["comm_type"] == {"kind": "int64_val", "value": 0}


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.et"
    bad.write_bytes(b"\x05abc")
    assert main(["trace", "stats", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.et" in err[0] and "offset 0" in err[0] and "truncated" in err[0]


def _with_attr(node, name, kind, value):
    from dataclasses import replace

    from xsim_trace.graph.model import Attr

    return replace(node, attrs=tuple(a for a in node.attrs if a.name != name) + (Attr(name, kind, value),))


def test_stats_on_a_value_of_the_wrong_kind_is_one_line_exit_2(tmp_path, capsys):
    """Found by the .et fuzz: `trace stats` summed a string duration_ns / a list comm_size with int()
    and crashed (exit 3); now one line naming file, node and field, exit 2."""
    from xsim_trace.graph import NodeType, Trace, make_metadata, make_node
    from xsim_trace.graph.kinds import AttrKind
    from xsim_trace.io import write_et

    cpu = _with_attr(make_node(5, "cpu", NodeType.COMP, is_cpu_op=True), "duration_ns", AttrKind.STRING, "")
    send = _with_attr(make_node(3, "send", NodeType.COMM_SEND, comm_dst=1), "comm_size", AttrKind.INT64_LIST, (1, 2))
    for node, field in ((cpu, "duration_ns"), (send, "comm_size")):
        f = tmp_path / f"{field}.0.et"
        write_et(f, Trace(make_metadata(), (node,), rank=0))
        assert main(["trace", "stats", str(f)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"xsim: error: file {f}, node {node.id}, field {field}: {field} must be an integer")
        assert "\n" not in err


def test_check_replay_reports_a_deadlock_the_static_checks_cannot_see(tmp_path, capsys):
    """A rank receives from itself ahead of the send that waits on an all-reduce: one FIFO comm stream,
    eager sends; the static checks pass, replay deadlocks, `trace check --replay` says so, exit 1."""
    import io

    from xsim_trace.cli.main import main
    from xsim_trace.graph.kinds import CollectiveType, NodeType
    from xsim_trace.graph.model import Trace, make_metadata, make_node
    from xsim_trace.io import write_et

    nodes = (
        make_node(1, "ar", NodeType.COMM_COLL, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=1 << 20),
        make_node(2, "recv", NodeType.COMM_RECV, comm_size=4096, comm_src=0, comm_dst=0, comm_tag=5),
        make_node(3, "send", NodeType.COMM_SEND, data_deps=[1], comm_size=4096, comm_src=0, comm_dst=0, comm_tag=5),
    )
    buf = io.BytesIO()
    write_et(buf, Trace(make_metadata(world_size=1), nodes, rank=0))
    (tmp_path / "run.0.et").write_bytes(buf.getvalue())
    prefix = str(tmp_path / "run")
    assert main(["-q", "trace", "check", prefix]) == 0
    capsys.readouterr()
    assert main(["-q", "trace", "check", "--replay", prefix]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"file {prefix}, rank 0, node 2: replay: replay deadlocked: recv never matched (peer 0, tag 5)"]
