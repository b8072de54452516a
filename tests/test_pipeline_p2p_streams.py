"""Generated pipeline steps replay under ``--p2p rendezvous`` (issue 16: the TP2 PP2 DP2 Llama set
deadlocked).  Megatron posts a 1F1B step's send and receive together (``batch_isend_irecv``: one NCCL
group moving both directions) on the peer pair's own communicator and stream; the generator used to put
both on the rank's one comm stream, send first, so stage 0's send to stage 1 queued its receive from
stage 1 behind it and stage 1's the other way round: each send waited for a receive stuck behind the
peer's send.  Now each (peer stage, direction) has its own stream, apart from the collectives."""

from __future__ import annotations

import json

import pytest

from xsim_trace.cli.main import main
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import NodeType
from xsim_trace.io import read_rank_set
from xsim_trace.replay import ReplaySettings, compile_workload
from xsim_trace.replay.engine import Engine

from replay_helpers import StarAlphaBeta

SMALL = ["--model", "llama2-7b", "--seq-len", "512", "--tp", "2"]
CONFIGS = {
    "tp2-pp2-dp2-sp": ["--layers", "4", "--pp", "2", "--dp", "2", "--sp", "--gbs", "16"],
    "pp4-vpp2": ["--layers", "8", "--pp", "4", "--vpp", "2", "--dp", "1", "--gbs", "8"],
    "pp2-cp2": ["--layers", "4", "--pp", "2", "--cp", "2", "--dp", "1", "--gbs", "4"],
}


def _generate(tmp_path, flags) -> str:
    prefix = tmp_path / "gen" / "step"
    assert main(["-q", "generate", *SMALL, *flags, "--out", str(prefix)]) == 0
    return str(prefix)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_rendezvous_replay_of_a_generated_pipeline_finishes(tmp_path, name):
    rs = read_rank_set(_generate(tmp_path, CONFIGS[name]))
    w = compile_workload(rs.traces, rs.comm_groups)
    ends = {}
    for p2p in ("eager", "rendezvous"):
        for compiled in (False, True):
            raw = Engine(w, StarAlphaBeta(25.0, 700), ReplaySettings(p2p=p2p, endpoint_delay_ns=200),
                         compiled=compiled).run()
            ends[(p2p, compiled)] = int(max(raw.end_ns))
    assert ends[("eager", False)] == ends[("eager", True)] and ends[("rendezvous", False)] == ends[("rendezvous", True)]
    # a rendezvous send waits for its receive to be posted: never earlier than eager, and here within 5 %
    assert ends[("eager", False)] <= ends[("rendezvous", False)] < 1.05 * ends[("eager", False)]


def test_cli_replay_with_rendezvous(tmp_path):
    prefix = _generate(tmp_path, CONFIGS["tp2-pp2-dp2-sp"])
    out = {}
    for p2p in ("eager", "rendezvous"):
        assert main(["-q", "replay", prefix, "--cluster", "dgx-h100:1", "--p2p", p2p, "--no-plot", "--no-timeline",
                     "--out", str(tmp_path / p2p)]) == 0
        out[p2p] = json.loads((tmp_path / p2p / "summary.json").read_text())["iteration_ns"]
    assert out["eager"] <= out["rendezvous"] < 1.05 * out["eager"]


def test_pipeline_p2p_has_a_stream_per_peer_stage_and_direction(tmp_path):
    rs = read_rank_set(_generate(tmp_path, CONFIGS["pp4-vpp2"]))
    for rank, trace in rs.traces.items():
        p2p: dict[tuple[int, bool], set] = {}
        other = set()
        for n in trace.nodes:
            if n.type in (NodeType.COMM_SEND, NodeType.COMM_RECV) and n.attr(A.COMM_KIND) == "pp":
                recv = n.type == NodeType.COMM_RECV
                peer = int(n.attr(A.COMM_SRC if recv else A.COMM_DST))
                p2p.setdefault((peer, recv), set()).add(n.attr(A.STREAM))
            elif n.type == NodeType.COMM_COLL or n.type == NodeType.COMP:
                other.add(n.attr(A.STREAM))
        streams = [next(iter(s)) for s in p2p.values()]
        assert all(len(s) == 1 for s in p2p.values()), rank  # one stream per (peer, direction)
        assert None not in streams and len(set(streams)) == len(streams), rank
        assert not set(streams) & other, rank  # apart from compute and the collectives
        assert {recv for _, recv in p2p} == {False, True}
