"""Issue 15, deliverable 1: `xsim trace check` catches everything replay would refuse.  For hostile
copies of real .et seeds (tests/fuzz_mutate.py), alone or as rank 0 beside an intact rank 1 (damage
that only shows across ranks): when compiling and replaying the set raises an XsimError, `xsim trace
check` on the same files exits non-zero (1: problems, 2: unreadable), never 0.  The one refusal no static
check can decide is a deadlock (a receive holding a FIFO stream ahead of the send it waits for only
deadlocks when run): there the static check may pass, and `xsim trace check --replay` must refuse.

The default suite runs CHECK_EXAMPLES derandomised cases; ``-m slow`` runs XSIM_FUZZ_EXAMPLES (default
10,000) random ones.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzz_mutate import hostile_file
from fuzz_targets import et_seeds
from xsim_trace.cli.main import main
from xsim_trace.errors import XsimError

CHECK_EXAMPLES = 40
SLOW_EXAMPLES = int(os.environ.get("XSIM_FUZZ_EXAMPLES", "10000"))
_COUNTS: dict[str, int] = {}


def _replay_refusal(prefix: str) -> XsimError | None:
    """What replay says of the set: None when both compile paths and the engine accept it."""
    from xsim_trace.cluster import single_switch
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology
    from xsim_trace.replay.api import replay_compiled
    from xsim_trace.replay.columnar import compile_rank_files

    try:
        workload = None
        for columnar in (True, False):
            workload, _ = compile_rank_files(prefix, columnar=columnar)
        cluster = single_switch(max(2, workload.num_ranks), 50.0, 500.0)
        replay_compiled(workload, make_backend("analytical", build_topology(cluster)), cluster=cluster)
    except XsimError as exc:
        return exc
    return None


def _check_exit(prefix: str, *flags: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["-q", "trace", "check", *flags, prefix])


def pair_seed() -> dict[int, bytes]:
    """A two-rank set (all-reduce over the world, then a send / recv exchange) for cross-rank damage."""
    from xsim_trace.graph.kinds import CollectiveType, NodeType
    from xsim_trace.graph.model import Trace, make_metadata, make_node
    from xsim_trace.io import write_et

    out = {}
    for rank in (0, 1):
        peer = 1 - rank
        nodes = (
            make_node(1, "gemm", NodeType.COMP, duration_micros=10 + rank, stream=7),
            make_node(2, "ar", NodeType.COMM_COLL, data_deps=[1], comm_type=int(CollectiveType.ALL_REDUCE),
                      comm_size=1 << 20, stream=40, pg_name="0"),
            make_node(3, "send", NodeType.COMM_SEND, ctrl_deps=[2], comm_size=4096, comm_src=rank, comm_dst=peer,
                      comm_tag=5),
            make_node(4, "recv", NodeType.COMM_RECV, ctrl_deps=[2], comm_size=4096, comm_src=peer, comm_dst=rank,
                      comm_tag=5),
            make_node(5, "cpu", NodeType.COMP, data_deps=[3, 4], duration_micros=3, is_cpu_op=True, tid=11),
        )
        buf = io.BytesIO()
        write_et(buf, Trace(make_metadata(), nodes, rank=rank))
        out[rank] = buf.getvalue()
    return out


def _one_case(data: bytes, others: dict[int, bytes] | None = None) -> str:
    """``data`` as rank 0's file, beside intact ``others`` (rank -> file)."""
    folder = Path(tempfile.mkdtemp(prefix="xsim-fuzz-check-"))
    try:
        (folder / "run.0.et").write_bytes(data)
        for rank, other in (others or {}).items():
            (folder / f"run.{rank}.et").write_bytes(other)
        prefix = str(folder / "run")
        refusal = _replay_refusal(prefix)
        rc = _check_exit(prefix)
        assert rc in (0, 1, 2), f"trace check crashed (exit {rc})"
        if refusal is not None and rc == 0:
            assert "deadlocked" in refusal.message, f"trace check passed a set replay refuses: {refusal}"
            assert _check_exit(prefix, "--replay") == 1, f"trace check --replay passed a set replay refuses: {refusal}"
            return "deadlock, --replay refuses"
        if refusal is not None:
            return "both refuse"
        return "replayed" if rc == 0 else "check stricter"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _property(examples: int, derandomize: bool) -> dict[str, int]:
    pair = pair_seed()
    seeds = [(name, data, None) for name, data in et_seeds()] + [("pair.0.et", pair[0], {1: pair[1]})]
    counts = _COUNTS if derandomize else {}
    phases = list(Phase) if derandomize else [Phase.explicit, Phase.generate]

    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None, phases=phases,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        _name, seed, others = data.draw(st.sampled_from(seeds))
        outcome = _one_case(data.draw(hostile_file("et", seed)), others)
        counts[outcome] = counts.get(outcome, 0) + 1

    check()
    return counts


def test_the_pair_seed_is_clean():
    pair = pair_seed()
    assert _one_case(pair[0], {1: pair[1]}) == "replayed"


def test_trace_check_refuses_what_replay_refuses():
    counts = _property(CHECK_EXAMPLES, derandomize=True)
    assert sum(counts.values()) >= CHECK_EXAMPLES and counts.get("both refuse", 0) > 0


@pytest.mark.slow
def test_trace_check_refuses_what_replay_refuses_at_scale():
    counts = _property(SLOW_EXAMPLES, derandomize=False)
    print(f"\ncheck vs replay: {sum(counts.values())} cases {dict(sorted(counts.items()))}")
    assert sum(counts.values()) >= SLOW_EXAMPLES


def test_corrupt_deflate_rank_file_is_a_format_error(tmp_path):
    """Found by the property above: the column decoder let zlib.error out of compile_rank_files."""
    from xsim_trace.errors import FormatError
    from xsim_trace.replay.columnar import compile_rank_files

    (tmp_path / "run.0.et").write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03u\xcf=\x0e\x820\x14\x86aJ\x0b"
                                        b"\xad\xf5/\xe9\xd4\xd1\xb8h\x18\x08\x83\x03l")  # invalid code lengths set
    with pytest.raises(FormatError):
        compile_rank_files(str(tmp_path / "run"), columnar=True)
    assert _check_exit(str(tmp_path / "run")) == 2
