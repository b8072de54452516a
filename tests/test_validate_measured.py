"""The measured side of validation: hand-built Kineto captures with known answers, and the real traces."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

from xsim_trace.errors import ConfigError, FormatError
from xsim_trace.validate import intervals as iv
from xsim_trace.io.kineto import us_to_ns
from xsim_trace.validate.kineto_events import resolve_captures
from xsim_trace.validate.measured import (
    ALL_STEPS,
    measure,
    peer_waits,
    shared_clock,
    start_skew_ns,
)

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
KINETO = TRACES / "kineto"
needs_traces = pytest.mark.skipif(not KINETO.is_dir(), reason=f"shared real traces absent at {KINETO}")


# --- intervals and units ---------------------------------------------------------------------------


def test_interval_arithmetic_by_hand():
    a = iv.union([(5, 8), (0, 2), (1, 3), (8, 9), (4, 4)])
    assert a == [(0, 3), (5, 9)]
    assert iv.total([(0, 10), (5, 15), (20, 21)]) == 16
    assert iv.clip([(0, 10), (12, 30)], 5, 20) == [(5, 10), (12, 20)]
    assert iv.intersect([(0, 10), (20, 30)], [(5, 25)]) == [(5, 10), (20, 25)]
    assert iv.subtract([(0, 30)], [(5, 10), (20, 25)]) == [(0, 5), (10, 20), (25, 30)]
    assert iv.subtract([(0, 5), (10, 12)], [(0, 12)]) == []


def test_microseconds_to_exact_nanoseconds():
    assert us_to_ns(12) == 12_000
    assert us_to_ns(Decimal("4458676416788.066")) == 4_458_676_416_788_066
    assert us_to_ns(0.5) == 500
    assert us_to_ns(Decimal("30.9755")) == 30_976  # half-even on the 4th decimal: 30975.5 -> 30976


# --- a hand-built capture ----------------------------------------------------------------------------


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _capture(path: Path, rank: int, world: int = 2, shift: int = 0) -> Path:
    """Step 3 = [100, 200) us (shifted by ``shift``).  Host launches kernel A at 110 (call 110-112),
    NCCL allreduce at 150 (150-151), kernel B at 185 (185-187).  Stream 7: A 120-140, B 190-196.
    Stream 9: NCCL 160-180 (waits for B? no; its launch ended at 151, so 151-160 is queued idle).
    GPU busy = 20 + 20 + 6 = 46; idle = 100 - 46 = 54; queued = [151,160) = 9 and [187,190) = 3 and
    [112,120) = 8 -> 20; cpu-bound = 34."""
    s = shift
    ev = [
        _x("user_annotation", "ProfilerStep#2", s + 0, 100),
        _x("user_annotation", "ProfilerStep#3", s + 100, 100),
        _x("cuda_runtime", "cudaLaunchKernel", s + 110, 2, correlation=1),
        _x("kernel", "gemm_A", s + 120, 20, tid=7, stream=7, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", s + 150, 1, correlation=2),
        _x(
            "kernel",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            s + 160,
            20,
            tid=9,
            stream=9,
            correlation=2,
            **{"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
               "Group size": world, "Process Group Name": "0"},
        ),
        _x("cuda_runtime", "cudaLaunchKernel", s + 185, 2, correlation=3),
        _x("kernel", "elementwise_B", s + 190, 6, tid=7, stream=7, correlation=3),
        _x("cuda_runtime", "cudaStreamSynchronize", s + 188, 9),
        _x("cpu_op", "aten::mm", s + 105, 10),
    ]
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "traceEvents": ev,
    }
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_hand_built_capture_measurements(tmp_path):
    _capture(tmp_path / "rank0.trace.json.gz", 0)
    m = measure(str(tmp_path / "rank0.trace.json.gz"))[0]
    assert m.step.number == 3 and m.step_ns == 100_000  # the last step is the default, as in xsim-convert
    assert m.device_name == "NVIDIA A100-SXM4-80GB" and m.world_size == 2
    assert m.gpu_busy_ns == 46_000
    assert m.compute_busy_ns == 26_000
    assert m.nccl_ns == 20_000 and m.nccl_exposed_ns == 20_000
    assert m.gpu_idle_ns == 54_000
    assert m.queued_idle_ns == 8_000 + 9_000 + 3_000
    assert m.cpu_bound_idle_ns == 34_000
    assert m.lead_ns == 20_000 and m.tail_ns == 4_000
    assert m.blocking_call_ns == 9_000 and m.blocking_calls == 1
    assert m.launch_calls == 3 and m.launch_call_ns == 5_000 and m.copy_calls == 0
    # launch call start -> kernel start for kernels that found their stream idle: 10, 10, 5 us
    assert m.launch_latency_ns == 10_000
    (k,) = m.nccl
    assert (k.collective, k.algo, k.proto, k.size_bytes, k.duration_ns, k.group_size, k.pg_name) == (
        "ALL_REDUCE", "RING", "LL", 4000, 20_000, 2, "0")
    assert m.cpu_ops == 1
    prev = measure(str(tmp_path / "rank0.trace.json.gz"), step=2)[0]
    assert prev.step_ns == 100_000 and prev.gpu_events == 0 and prev.cpu_bound_idle_ns == 100_000
    whole = measure(str(tmp_path / "rank0.trace.json.gz"), step="all")[0]
    assert whole.step.number == ALL_STEPS and whole.step_ns == 200_000 and len(whole.nccl) == 1


def test_peer_wait_on_a_shared_clock(tmp_path):
    _capture(tmp_path / "rank0.trace.json.gz", 0)
    _capture(tmp_path / "rank1.trace.json.gz", 1, shift=0)
    ms = measure(str(tmp_path))
    assert sorted(ms) == [0, 1] and shared_clock(ms)
    assert start_skew_ns(ms) == {0: 0, 1: 0}
    assert all(p.wait_ns == 0 and p.transfer_ns == 20_000 for p in peer_waits(ms))


def test_bad_inputs_name_the_problem(tmp_path):
    with pytest.raises(FormatError, match="no such Kineto capture"):
        resolve_captures(tmp_path / "missing*.json")
    _capture(tmp_path / "rank0.trace.json.gz", 0)
    with pytest.raises(ConfigError, match=r"no ProfilerStep#9 .*it has 2, 3"):
        measure(str(tmp_path), step=9)
    with pytest.raises(ConfigError, match="expected a ProfilerStep number"):
        measure(str(tmp_path), step="x")
    bad = tmp_path / "bad" / "rank0.json"
    bad.parent.mkdir()
    bad.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": 1, "dur": ')
    with pytest.raises(FormatError, match="malformed JSON after event 0"):
        measure(str(bad))


# --- the real traces -----------------------------------------------------------------------------------

DLRM_STEP_MS = (14.455, 19.901, 13.017, 19.313, 17.979, 17.797, 13.091, 12.509)


@needs_traces
def test_dlrm_v100_8rank_measured():
    ms = measure(str(KINETO / "param_dlrm_v100_8rank"))
    assert sorted(ms) == list(range(8))
    assert tuple(m.step_ns / 1e6 for m in ms.values()) == DLRM_STEP_MS
    for m in ms.values():
        assert m.step.number == 10 and m.device_name == "Tesla V100-SXM2-32GB" and m.world_size == 8
        assert [k.collective for k in m.nccl] == ["SEND_RECV"] * 4 + ["ALL_REDUCE", "SEND_RECV"] + ["ALL_REDUCE"] * 2
    # one host clock: every NCCL kernel ends within 10 us on all ranks; the spread is in the starts
    assert shared_clock(ms, tolerance_ns=10_000)
    skew = start_skew_ns(ms)
    assert skew[1] == 0 and skew[7] == 7_513_000
    ends = [m.step.end_ns for m in ms.values()]
    assert max(ends) - min(ends) < 1_000_000  # step ends agree within 1 ms, starts differ by 7.5 ms
    waits = {r: sum(p.wait_ns for p in peer_waits(ms) if p.rank == r) for r in ms}
    # the rank that starts first waits longest for its peers
    assert max(waits, key=waits.get) == 1 and min(waits, key=waits.get) == 7
    for r, m in ms.items():  # step = start skew absorbed as peer wait + the common part
        assert abs((m.step_ns + skew[r]) - (ms[1].step_ns + skew[1])) < 1_000_000


@needs_traces
def test_hta_a100_nccl_2rank_measured():
    path = str(KINETO / "hta_a100_nccl_2rank")
    m = measure(path)[0]
    assert m.world_size == 2 and m.step.number == 6 and m.step_ns == 224_936_243
    assert {s.number: s.duration_ns for s in m.steps} == {4: 222_442_191, 5: 219_726_905, 6: 224_936_243}
    whole = measure(path, step="all")[0]
    assert len(whole.nccl) == 21
    assert [k.collective for k in whole.nccl].count("ALL_REDUCE") == 15
    assert [k.collective for k in whole.nccl].count("BROADCAST") == 6
    # sizes = In msg nelems x 4 bytes (Float)
    assert {k.size_bytes for k in whole.nccl if k.collective == "ALL_REDUCE"} == {
        8_196_000, 31_502_336, 26_255_360, 26_550_272, 9_724_160}
    assert whole.nccl[0].duration_ns == 30_975 and whole.nccl[0].size_bytes == 212_480
    # "mostly CPU/launch bound": the GPU is idle most of the step with nothing submitted
    assert m.cpu_bound_idle_ns > 0.7 * m.step_ns


@needs_traces
def test_hta_a100_16rank_rank0_measured():
    m = measure(str(KINETO / "hta_a100_16rank_rank0"), step=552)[0]
    assert m.world_size == 16 and m.step_ns == 216_119_000
    assert len(m.nccl) == 15 and {k.collective for k in m.nccl} == {"SEND_RECV"}
    assert [s.duration_ns for s in m.steps] == [209_748_000, 216_483_000, 216_119_000, 215_467_000, 216_216_000]
