"""ASTRA-sim (../shared/peers/astra-sim, when its binaries run here) accepts the rank sets xsim writes and
agrees with xsim to the nanosecond on a collective with ASTRA-compatible settings."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASTRA = ROOT.parent / "shared" / "peers" / "astra-sim"
TEXT = ROOT.parent / "shared" / "traces" / "text_workloads" / "Transformer_HybridParallel.txt"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_vs_astra", ROOT / "tools" / "bench_vs_astra.py")
    module = sys.modules.get("bench_vs_astra")
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_vs_astra"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return module


def _astra_runs() -> bool:
    binary = ASTRA / "bin" / "AstraSim_Analytical_Congestion_Unaware"
    if not binary.exists():
        return False
    probe = subprocess.run([str(binary), "--help"], capture_output=True, timeout=60)
    return b"error while loading shared libraries" not in probe.stderr


pytestmark = pytest.mark.skipif(not _astra_runs(), reason="ASTRA-sim binaries absent or not runnable here")


def _xsim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "xsim_trace.cli.main", "-q", *args], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, timeout=300)


@pytest.mark.parametrize("kind", ["kineto", "text", "generate"])
def test_astra_sim_finishes_every_rank_of_xsim_sets(tmp_path, kind):
    bench = _bench()
    prefix = tmp_path / "set"
    if kind == "kineto":
        prefix = ROOT / "traces" / "dlrm_v100_8rank" / "dlrm"  # converted by xsim-convert (all-to-alls as p2p)
    elif kind == "text":
        if not TEXT.exists():
            pytest.skip("../shared/traces not present")
        _xsim("convert", "text", str(TEXT), "--num-npus", "8", "-o", str(prefix))
    else:
        _xsim("generate", "--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--layers", "2", "--gbs", "4",
              "--out", str(prefix))
    run = bench.run_astra(ASTRA, "analytical", prefix, bench.Net(8), tmp_path, 120)
    assert run.sim_ns is not None and run.sim_ns > 0, run.note
    # The peer binary now and then aborts in its own teardown (heap corruption reported by glibc) after every rank
    # has printed its finish line; the result is complete by then. Its open memory bugs are public
    # (astra-sim/astra-sim issues 205 and 285). Anything else, such as a rank that never finishes, still fails.
    assert run.note == "" or run.note.startswith("all ranks finished, then exit"), run.note


@pytest.mark.parametrize("backend", ["analytical", "analytical-ca"])
def test_one_all_reduce_agrees_with_astra_sim(tmp_path, backend):
    bench = _bench()
    net = bench.Net(8, coll_bytes=bench.MiB, **bench.HGX)
    bench.chain_set(tmp_path / "set", 8, 0, bench.MiB, 0)
    astra = bench.run_astra(ASTRA, backend, tmp_path / "set", net, tmp_path, 120)
    xsim = bench.run_xsim(backend, tmp_path / "set", net, tmp_path, 120)
    assert astra.sim_ns == xsim.sim_ns == {"analytical": 55_222, "analytical-ca": 57_426}[backend]


def test_aware_ring_agrees_with_astra_sim_when_messages_go_whole(tmp_path):
    """A 64 MiB ring all-reduce on 16 ranks: 1 MiB messages, eight of xsim's default 128 KiB chunks. With
    ``--chunk-bytes 0`` (the bench's aware flags) xsim's analytical-ca stores and forwards each message
    whole, as ASTRA-sim's congestion-aware network does, and the two agree to the nanosecond; xsim's default
    chunk pipeline is faster (the head of a message crosses the switch while its tail is still sent)."""
    bench = _bench()
    net = bench.Net(16, coll_bytes=64 * bench.MiB)
    bench.chain_set(tmp_path / "set", 16, 0, 64 * bench.MiB, 0)
    astra = bench.run_astra(ASTRA, "analytical-ca", tmp_path / "set", net, tmp_path, 120)
    xsim = bench.run_xsim("analytical-ca", tmp_path / "set", net, tmp_path, 120)
    assert "--chunk-bytes" in net.xsim_flags("analytical-ca") and "--chunk-bytes" not in net.xsim_flags("analytical")
    assert astra.sim_ns is not None and xsim.sim_ns == astra.sim_ns, (astra.sim_ns, xsim.sim_ns)
    _xsim("replay", str(tmp_path / "set"), "--cluster", str(net.write_xsim(tmp_path)), "--backend", "analytical-ca",
          *net.xsim_flags("analytical"), "--no-plot", "--no-timeline", "--out", str(tmp_path / "pipelined"))
    pipelined = json.loads((tmp_path / "pipelined" / "summary.json").read_text())["iteration_ns"]
    assert pipelined < 0.9 * astra.sim_ns


def test_chunk_bytes_is_an_analytical_ca_option(tmp_path):
    bench = _bench()
    bench.chain_set(tmp_path / "set", 2, 0, bench.MiB, 0)
    proc = subprocess.run([sys.executable, "-m", "xsim_trace.cli.main", "-q", "replay", str(tmp_path / "set"),
                           "--cluster", str(bench.Net(2).write_xsim(tmp_path)), "--backend", "analytical",
                           "--chunk-bytes", "0", "--no-plot", "--no-timeline", "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "chunk_bytes" in proc.stderr, proc.stderr
    assert not (tmp_path / "o" / "summary.json").exists()


@pytest.mark.parametrize("backend", ["analytical", "analytical-ca"])
def test_all_gather_agrees_with_astra_sim_on_its_shard_copy(tmp_path, backend):
    """xsim reads an all-gather's comm_size as the gathered buffer (NCCL), ASTRA-sim as each rank's shard:
    the bench gives ASTRA-sim a copy with the size divided by the group's ranks, and the two then agree to the
    nanosecond (with the same file, ASTRA-sim's 8-rank all-gather takes 5x as long)."""
    from xsim_trace.graph.model import Trace, make_metadata, make_node

    bench = _bench()
    node = make_node(0, "ag", bench.NodeType.COMM_COLL, comm_type=int(bench.CollectiveType.ALL_GATHER),
                     comm_size=32 * bench.MiB, is_cpu_op=False)
    bench.write_rank_set(tmp_path / "set", {r: Trace(make_metadata(world_size=8), (node,), rank=r) for r in range(8)}, {})
    copy = bench.astra_copy(tmp_path / "set", tmp_path / "astra-set")
    assert copy != tmp_path / "set"
    net = bench.Net(8, **bench.HGX)
    astra = bench.run_astra(ASTRA, backend, copy, net, tmp_path, 120)
    xsim = bench.run_xsim(backend, tmp_path / "set", net, tmp_path, 120)
    assert astra.sim_ns == xsim.sim_ns == {"analytical": 60_542, "analytical-ca": 97_157}[backend]
    # a set without all-gathers goes to ASTRA-sim as it is
    bench.chain_set(tmp_path / "ar", 2, 1, bench.MiB, 1)
    assert bench.astra_copy(tmp_path / "ar", tmp_path / "ar-copy") == tmp_path / "ar"
