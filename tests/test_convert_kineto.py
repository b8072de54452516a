"""Kineto -> Chakra on real captures: DLRM 8 x V100 (old NCCL names) and HTA A100 (NCCL args)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from collections import Counter

import pytest

from converters.common import measured_replay, node_time_ns
from converters.summary import comm_counts
from xsim_trace.errors import ConfigError, FormatError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.checks import check_p2p, check_rank_set
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.io import read_rank_set, write_rank_set

sys.path.insert(0, str(Path(__file__).parent))
from convert_helpers import DLRM_STEP_MS, dlrm_conversion, dlrm_kineto_raw, hta_conversion  # noqa: E402


def _window_gpu_events(kt):
    """GPU events launched inside ProfilerStep#10, computed directly from the raw events."""
    step = next(e for e in kt.events if e.name == "ProfilerStep#10")
    launches = {e.correlation for e in kt.events if e.cat == "cuda_runtime" and e.pid == step.pid
                and step.ts_ns <= e.ts_ns < step.end_ns and e.correlation is not None}
    return [e for e in kt.events if e.cat in ("kernel", "gpu_memcpy", "gpu_memset") and e.correlation in launches]


def test_dlrm_eight_rank_files_and_checks_clean(tmp_path):
    conv = dlrm_conversion()
    assert sorted(conv.traces) == list(range(8))
    paths = write_rank_set(tmp_path / "dlrm", conv.traces, conv.comm_groups)
    assert len([p for p in paths if p.suffix == ".et"]) == 8
    back = read_rank_set(tmp_path / "dlrm")
    assert back.comm_groups == {}  # all collectives are on the world, pg "0": ASTRA-sim wants no entry for it
    assert check_rank_set(back.traces, back.comm_groups) == []


def test_dlrm_send_recv_pairs_agree_on_size():
    """The uneven all-to-alls split per peer: each recv has its send's size (ASTRA-sim pairs by size too)."""
    conv = dlrm_conversion()
    sizes: dict[tuple, list] = {}
    for trace in conv.traces.values():
        for n in trace.nodes:
            if n.type in (NodeType.COMM_SEND, NodeType.COMM_RECV):
                key = (n.comm_src, n.comm_dst, n.comm_tag, n.type == NodeType.COMM_SEND)
                sizes.setdefault(key, []).append(n.comm_size_bytes)
    pairs = [k for k in sizes if k[3]]
    assert len(pairs) == 280
    assert all(sizes[k] == sizes[k[:3] + (False,)] for k in pairs)
    assert len({s for k in pairs for s in sizes[k]}) > 1  # the sizes do differ between pairs


def test_dlrm_nccl_ops_per_rank():
    conv = dlrm_conversion()
    for rank, trace in conv.traces.items():
        assert comm_counts(trace) == {"ALL_REDUCE": 3, "ALL_TO_ALL": 5}, rank
        p2p = [n for n in trace.nodes if n.type in (NodeType.COMM_SEND, NodeType.COMM_RECV)]
        per_tag = Counter((n.comm_tag, n.type) for n in p2p)
        # each all-to-all: one send to and one recv from each of the 7 peers
        assert set(per_tag.values()) == {7} and len(per_tag) == 10
        for n in p2p:
            peer = n.comm_dst if n.type == NodeType.COMM_SEND else n.comm_src
            me = n.comm_src if n.type == NodeType.COMM_SEND else n.comm_dst
            assert me == rank and peer != rank and 0 <= peer < 8


def test_dlrm_every_send_has_its_recv():
    conv = dlrm_conversion()
    assert check_p2p(conv.traces) == []
    sends = Counter((n.comm_src, n.comm_dst, n.comm_tag) for t in conv.traces.values() for n in t.nodes
                    if n.type == NodeType.COMM_SEND)
    recvs = Counter((n.comm_src, n.comm_dst, n.comm_tag) for t in conv.traces.values() for n in t.nodes
                    if n.type == NodeType.COMM_RECV)
    assert sends == recvs and sum(sends.values()) == 8 * 5 * 7


def test_dlrm_allreduce_sizes_from_the_launching_op():
    # nccl:all_reduce Input Dims on rank 0: [394241], [112], [226960] floats
    trace = dlrm_conversion().traces[0]
    sizes = [n.comm_size_bytes for n in trace.nodes if n.type == NodeType.COMM_COLL]
    assert sizes == [394241 * 4, 112 * 4, 226960 * 4]
    assert all(n.pg_name == "0" for n in trace.nodes if n.is_comm)


def test_dlrm_kernel_time_preserved():
    conv = dlrm_conversion()
    for kt in dlrm_kineto_raw():
        rank = kt.rank
        raw = _window_gpu_events(kt)
        trace = conv.traces[rank]
        device = [n for n in trace.nodes if not n.is_cpu_op and not n.attr(A.DELAY)]
        assert sum(node_time_ns(n) for n in device) == sum(e.dur_ns for e in raw)
        nccl_raw = sum(e.dur_ns for e in raw if e.name.startswith("ncclKernel"))
        assert sum(int(n.attr(A.MEASURED_DURATION_NS)) for n in device if n.is_comm) == nccl_raw
        assert all(n.attr(A.DURATION_NS) is None for n in device if n.is_comm)


def test_dlrm_measured_step_metadata_and_spread():
    conv = dlrm_conversion()
    starts = {}
    for rank, trace in conv.traces.items():
        md = trace.metadata
        assert md.attr(A.META_STEP) == 10 and md.attr(A.META_RANK) == rank and md.attr(A.META_WORLD_SIZE) == 8
        assert md.attr(A.META_DEVICE) == "Tesla V100-SXM2-32GB"
        starts[rank] = md.attr(A.META_STEP_START_NS)
        assert trace.measured_step_ns == round(DLRM_STEP_MS[rank] * 1e6)
        # replaying with measured durations reproduces each rank's own step time
        assert measured_replay(trace).makespan_ns == trace.measured_step_ns
    # the spread is where each rank entered the step: all ranks end it within 1 ms of each other
    ends = [starts[r] + conv.traces[r].measured_step_ns for r in range(8)]
    assert max(ends) - min(ends) < 1_000_000 and max(starts.values()) - min(starts.values()) > 7_000_000


def test_dlrm_device_nodes_start_where_measured():
    """Delay nodes + edges put every device node at its measured start (to rounding)."""
    conv = dlrm_conversion()
    for trace in conv.traces.values():
        rep = measured_replay(trace)
        for n in trace.nodes:
            if n.is_cpu_op or n.attr(A.DELAY) or n.type in (NodeType.COMM_SEND, NodeType.COMM_RECV):
                continue
            start = rep.end_ns[n.id] - node_time_ns(n)
            assert abs(start - n.start_time_micros * 1000) <= 500, (n.id, n.name)


def test_dlrm_stream_order_and_launch_edges():
    trace = dlrm_conversion().traces[0]
    by_id = trace.by_id()
    streams = Counter(n.attr(A.STREAM) for n in trace.nodes if not n.is_cpu_op)
    assert set(streams) == {7, 22, 24, 84}
    assert all(n.attr(A.STREAM) < 0 for n in trace.nodes if n.is_cpu_op)
    # every stream is one chain: each node depends (directly or through one delay) on its predecessor
    last: dict[int, int] = {}
    for n in trace.nodes:
        if n.is_cpu_op:
            continue
        s = n.attr(A.STREAM)
        if s in last:
            deps = set(n.deps) | {d2 for d in n.deps if by_id[d].attr(A.DELAY) for d2 in by_id[d].deps}
            assert last[s] in deps, (n.id, n.name)
        last[s] = n.id
    # every kernel has a host launch among its (delay-forwarded) deps
    for n in trace.nodes:
        if n.is_cpu_op or n.attr(A.DELAY) or n.type in (NodeType.COMM_SEND, NodeType.COMM_RECV):
            continue
        reach = set(n.deps) | {d2 for d in n.deps if by_id[d].attr(A.DELAY) for d2 in by_id[d].deps}
        assert any(by_id[d].is_cpu_op for d in reach), n.name


def test_dlrm_names_keep_scopes():
    trace = dlrm_conversion().traces[0]
    names = {n.name for n in trace.nodes if n.is_cpu_op}
    assert any(name.startswith("## forward ##/") or "DistributedDataParallel.forward" in name for name in names)
    launch_ops = Counter(n.attr(A.LAUNCH_OP) for n in trace.nodes if n.is_comm)
    assert launch_ops["nccl:all_to_all"] == 5 * 14 and launch_ops["nccl:all_reduce"] == 3


def test_conversion_is_deterministic():
    from converters.kineto import convert_kineto

    a = dlrm_conversion()
    b = convert_kineto(dlrm_kineto_raw())
    assert a.traces == b.traces and a.comm_groups == b.comm_groups


def test_hta_collectives_from_nccl_args():
    conv = hta_conversion("all")
    trace = conv.traces[0]
    colls = [n for n in trace.nodes if n.type == NodeType.COMM_COLL]
    assert Counter(n.comm_type for n in colls) == {CollectiveType.ALL_REDUCE: 15, CollectiveType.BROADCAST: 6}
    # In msg nelems x dtype bytes (Float 4, Long 8)
    ar = sorted({n.comm_size_bytes for n in colls if n.comm_type == CollectiveType.ALL_REDUCE})
    assert ar == sorted(x * 4 for x in (6637568, 2431040, 2049000, 7875584, 6563840))
    bc = sorted({n.comm_size_bytes for n in colls if n.comm_type == CollectiveType.BROADCAST})
    assert bc == [53 * 8, 53120 * 4]
    assert conv.comm_groups == {}  # the world is pg "0", which ASTRA-sim reads as all ranks without an entry
    assert {n.pg_name for n in colls} == {"0"}
    assert trace.metadata.attr(A.META_WORLD_SIZE) == 2 and trace.metadata.attr(A.META_STEP) == -1


def test_hta_default_step_is_the_last():
    trace = hta_conversion(None).traces[0]
    assert trace.metadata.attr(A.META_STEP) == 6
    assert trace.measured_step_ns == 224_936_243
    assert comm_counts(trace) == {"ALL_REDUCE": 5, "BROADCAST": 2}


def test_step_choice_errors_name_the_steps():
    from converters.kineto import convert_kineto

    with pytest.raises(ConfigError, match=r"no ProfilerStep#3 .*steps: 10"):
        convert_kineto(dlrm_kineto_raw()[:1], step=3)


def _write_json(path, obj):
    with gzip.open(path, "wt") as f:
        json.dump(obj, f)


def test_malformed_event_names_its_index(tmp_path):
    from converters.kineto import read_ranks
    from xsim_trace.io.sources import resolve_inputs

    good = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}
    bad = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1}
    path = tmp_path / "rank0.json.gz"
    _write_json(path, {"traceEvents": [good, good, bad]})
    with pytest.raises(FormatError, match=r"event 2: 'ts' is not a number") as info:
        read_ranks(resolve_inputs(path))
    assert "rank0.json.gz" in str(info.value)
    trunc = tmp_path / "cut.json"
    trunc.write_text(json.dumps({"traceEvents": [good, good]})[:-30])
    with pytest.raises(FormatError, match=r"malformed JSON after event 1"):
        read_ranks(resolve_inputs(trunc))


def test_small_synthetic_trace_edges(tmp_path):
    """Hand-made: launch -> kernel, stream order, a wait edge, a sync, idle gap as a delay."""
    from converters.kineto import convert_kineto, read_ranks
    from xsim_trace.io.sources import resolve_inputs

    X = lambda cat, name, tid, ts, dur, **args: {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat != "kernel" else 0,  # noqa: E731
                                                 "tid": tid, "ts": ts, "dur": dur, "args": args}
    ev = [
        X("user_annotation", "ProfilerStep#3", 1, 0, 100),
        X("cpu_op", "aten::mm", 1, 1, 9),
        X("cuda_runtime", "cudaLaunchKernel", 1, 2, 3, correlation=11),
        X("kernel", "gemm", 7, 6, 20, correlation=11, stream=7),
        X("cuda_runtime", "cudaStreamWaitEvent", 1, 12, 1, correlation=12),
        X("cpu_op", "aten::add", 1, 13, 5),
        X("cuda_runtime", "cudaLaunchKernel", 1, 14, 2, correlation=13),
        X("kernel", "add", 9, 30, 4, correlation=13, stream=9),  # waits for gemm (ends 26), then idles 4
        X("cuda_runtime", "cudaLaunchKernel", 1, 20, 2, correlation=14),
        X("kernel", "relu", 7, 40, 2, correlation=14, stream=7),
        X("cuda_runtime", "cudaDeviceSynchronize", 1, 50, 10, correlation=15),
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": ev}))
    trace = convert_kineto(read_ranks(resolve_inputs(path))).traces[0]
    by_name = {n.name: n for n in trace.nodes if not n.attr(A.DELAY)}
    by_id = trace.by_id()
    gemm, add, relu = by_name["gemm"], by_name["add"], by_name["relu"]
    assert gemm.attr(A.DURATION_NS) == 20_000 and gemm.attr(A.STREAM) == 7
    # add waits for gemm (cross-stream) and for its launch; it started 4 us after gemm ended -> delay
    add_delay = by_id[add.deps[0]]
    assert add_delay.attr(A.DELAY) and add_delay.attr(A.DURATION_NS) == 4_000
    assert gemm.id in add_delay.deps
    # relu follows gemm on stream 7
    assert gemm.id in set(relu.deps) | {d for x in relu.deps for d in by_id[x].deps}
    sync = by_name["cudaDeviceSynchronize"]
    assert {add.id, relu.id} <= set(sync.deps)
    rep = measured_replay(trace)
    assert rep.end_ns[add.id] == 34_000 and rep.end_ns[relu.id] == 42_000
    assert rep.cpu_end_ns == 100_000 and trace.measured_step_ns == 100_000


def test_module_and_layer_names_from_nn_module_scopes():
    """TraceLens H100 Qwen1.5-0.5B capture (with_modules): nn.Module scopes name nodes; 24 decoder layers."""
    from converters.kineto import convert_kineto, read_ranks
    from xsim_trace.io.sources import resolve_inputs
    from convert_helpers import SHARED_TRACES, need

    path = need(SHARED_TRACES / "kineto" / "tracelens_h100_qwen05b")
    trace = convert_kineto(read_ranks(resolve_inputs(path))).traces[0]
    kernels = [n for n in trace.nodes if not n.is_cpu_op and not n.attr(A.DELAY)]
    layers = Counter(n.attr(A.LAYER) for n in kernels if n.attr(A.LAYER) is not None)
    assert sorted(layers) == list(range(24)) and len(set(layers.values())) == 1
    attn = [n for n in kernels if (n.attr(A.MODULE) or "").startswith("Qwen2DecoderLayer_5/Qwen2Attention_5")]
    assert attn and all(n.attr(A.LAYER) == 5 for n in attn)
    assert any(n.name.startswith("Qwen2DecoderLayer_5/Qwen2Attention_5/aten::") for n in trace.nodes if n.is_cpu_op)
    assert trace.metadata.attr(A.META_DEVICE) == "NVIDIA H100 80GB HBM3"


def test_default_step_skips_a_step_cut_off_by_the_capture(tmp_path):
    from converters.kineto import convert_kineto, read_ranks
    from xsim_trace.io.sources import resolve_inputs

    def X(cat, name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 0 if cat == "kernel" else 1, "tid": tid, "ts": ts,
                "dur": dur, "args": args}

    ev = [X("user_annotation", "ProfilerStep#1", 0, 50), X("user_annotation", "ProfilerStep#2", 50, 40),
          X("cuda_runtime", "cudaLaunchKernel", 10, 2, correlation=1), X("kernel", "k1", 15, 5, tid=7, correlation=1, stream=7),
          X("cuda_runtime", "cudaLaunchKernel", 60, 2, correlation=2)]  # its kernel is not in the capture
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    trace = convert_kineto(read_ranks(resolve_inputs(path))).traces[0]
    assert trace.metadata.attr(A.META_STEP) == 1 and trace.measured_step_ns == 50_000
    assert convert_kineto(read_ranks(resolve_inputs(path)), step=2).traces[0].measured_step_ns == 40_000


def test_main_thread_waits_for_backward_instead_of_keeping_the_blocked_time():
    """DLRM: the main thread sits in ``## backward ##`` while the autograd thread runs (~4 ms); its
    segments there depend on the autograd thread's progress, so none keeps that time as duration."""
    by_id = None
    for trace in dlrm_conversion().traces.values():
        by_id = trace.by_id()
        inside = [n for n in trace.nodes if n.is_cpu_op and n.attr(A.STREAM) == -1 and n.name.startswith("## backward ##")]
        assert inside and max(node_time_ns(n) for n in inside) < 200_000
        assert any(by_id[d].attr(A.STREAM) == -2 for n in inside for d in n.deps)
