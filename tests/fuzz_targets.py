"""Fuzz targets of the input boundary (issue 15): per input kind, small real seeds and the library
pipeline a file of that kind goes through.  Mutations (tests/fuzz_mutate.py) turn a seed into a
hostile file; the property is that only XsimError ever leaves the library.
"""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"


@dataclass(frozen=True)
class Target:
    kind: str
    #: "json", "yaml", "text" or "et": how structured mutations parse the seed
    syntax: str
    seeds: Callable[[], list[tuple[str, bytes]]]
    #: run(folder, file name, content): writes the file and feeds it through the library
    run: Callable[[Path, str, bytes], None]


# -- seeds -------------------------------------------------------------------------------------------
def _kineto_events(rank: int) -> dict:
    base = 1_000_000.0 + rank * 3.5
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7, "ts": base, "dur": 900.0,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": base + 10, "dur": 50.0,
         "args": {"External id": 2, "Record function id": 2, "Input Dims": [[64, 64], [64, 64]],
                  "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, "ts": base + 20,
         "dur": 5.0, "args": {"External id": 2, "correlation": 100}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_nn", "pid": 0, "tid": 7, "ts": base + 30,
         "dur": 120.0, "args": {"External id": 2, "stream": 7, "correlation": 100, "device": 0}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 7, "tid": 7, "ts": base + 200,
         "dur": 30.0, "args": {"External id": 3, "Record function id": 3, "Collective name": "allreduce",
                               "In msg nelems": 262144, "Out msg nelems": 262144, "Group size": 2, "dtype": "Float",
                               "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "In split size": "[]",
                               "Out split size": "[]"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "pid": 7, "tid": 7, "ts": base + 210,
         "dur": 5.0, "args": {"External id": 3, "correlation": 101}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, "
         "ncclWork*)", "pid": 0, "tid": 40, "ts": base + 220, "dur": 300.0,
         "args": {"External id": 3, "stream": 40, "correlation": 101, "Collective name": "allreduce",
                  "In msg nelems": 262144, "Out msg nelems": 262144, "Group size": 2, "dtype": "Float",
                  "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
         "ts": base + 600, "dur": 8.0, "args": {"stream": 7, "correlation": 102, "bytes": 4096}},
    ]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}], "traceEvents": ev}


def kineto_seeds() -> list[tuple[str, bytes]]:
    out = [("rank0.json", json.dumps(_kineto_events(0)).encode()),
           ("rank0.json.gz", gzip.compress(json.dumps(_kineto_events(0)).encode(), mtime=0))]
    small = SHARED / "kineto" / "hta_simple_add_a100" / "benchmark_simple_add_trace.json.gz"
    if small.exists():
        out.append(("trace.json", gzip.decompress(small.read_bytes())))
    return out


def pytorch_et_seeds() -> list[tuple[str, bytes]]:
    et = SHARED / "kineto" / "hta_simple_add_a100" / "benchmark_simple_add_et.json.gz"
    return [("et.json", gzip.decompress(et.read_bytes()))] if et.exists() else []


def et_seeds() -> list[tuple[str, bytes]]:
    from xsim_trace.graph.kinds import CollectiveType, NodeType
    from xsim_trace.graph.model import Trace, make_metadata, make_node
    from xsim_trace.io import write_et

    nodes = (
        make_node(1, "gemm", NodeType.COMP, duration_micros=10, stream=7),
        make_node(2, "ar", NodeType.COMM_COLL, data_deps=[1], comm_type=int(CollectiveType.ALL_REDUCE),
                  comm_size=1 << 20, stream=40, pg_name="0"),
        make_node(3, "send", NodeType.COMM_SEND, ctrl_deps=[2], comm_size=4096, comm_dst=0, comm_tag=5),
        make_node(4, "recv", NodeType.COMM_RECV, data_deps=[3], comm_size=4096, comm_src=0, comm_tag=5),
        make_node(5, "cpu", NodeType.COMP, data_deps=[4], duration_micros=3, is_cpu_op=True, tid=11),
    )
    buf = io.BytesIO()
    write_et(buf, Trace(make_metadata(), nodes, rank=0))
    out = [("run.0.et", buf.getvalue())]
    for folder, name in (("reference_generator", "ALL_REDUCE.0.et"), ("astra_custom_ring_8npus", "custom_allreduce.0.et")):
        f = SHARED / "chakra_et" / folder / name
        if f.exists():
            out.append(("run.0.et", f.read_bytes()))
    return out


def text_seeds() -> list[tuple[str, bytes]]:
    names = ("DLRM_HybridParallel.txt", "MLP_ModelParallel.txt", "L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt",
             "AllReduce_1MB.txt")
    return [(n, (SHARED / "text_workloads" / n).read_bytes()) for n in names if (SHARED / "text_workloads" / n).exists()]


def cluster_seeds() -> list[tuple[str, bytes]]:
    d = REPO / "xsim_trace" / "data" / "clusters"
    return [(f.name, f.read_bytes()) for f in sorted(d.glob("*.yaml"))]


def plan_seeds() -> list[tuple[str, bytes]]:
    d = REPO / "traces" / "plans"
    return [(f.name, f.read_bytes()) for f in sorted(d.glob("*.yaml"))]


SWEEP_SPEC = b"""runner: network
base:
  case: ring
  size_bytes: 1048576
grid:
  ranks: [2, 4]
  bw_GBps: [25, 50.5]
  latency_ns: [1000]
"""
PIPELINE_SPEC = b"""runner: pipeline
base:
  schedule: 1f1b
  layers: 8
  microbatches: 4
grid:
  stages: [2]
  dp: [1, 2]
  grad_bytes: [0, 1048576]
"""


def sweep_seeds() -> list[tuple[str, bytes]]:
    return [("sweep.yaml", SWEEP_SPEC), ("pipeline.yaml", PIPELINE_SPEC)]


def nccl_tests_seeds() -> list[tuple[str, bytes]]:
    from xsim_trace.network.nccl.kinds import CollKind
    from xsim_trace.network.nccl.nccltests import render_log

    rows = [(1 << k, 10.0 + (1 << k) / 2e4) for k in range(10, 28, 3)]
    return [
        ("all_reduce_perf.log", render_log(CollKind.ALL_REDUCE, rows, gpu="NVIDIA H100 80GB HBM3", nodes=2,
                                           gpus_per_node=8).encode()),
        ("alltoall_perf.log", render_log(CollKind.ALL_TO_ALL, rows[:4], gpu="NVIDIA A100-SXM4-80GB", nodes=1,
                                         gpus_per_node=4, dtype="half").encode()),
    ]


# -- pipelines ---------------------------------------------------------------------------------------
def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def run_kineto(folder: Path, name: str, data: bytes) -> None:
    from converters.kineto import convert_kineto, read_ranks
    from xsim_trace.io import write_rank_set
    from xsim_trace.io.sources import resolve_inputs

    path = _write(folder, name, data)
    sources = resolve_inputs(path)
    conv = convert_kineto(read_ranks(sources))
    write_rank_set(str(folder / "out"), conv.traces, conv.comm_groups)
    from xsim_trace.validate.measured import measure_capture

    measure_capture(sources[0])


def run_pytorch_et(folder: Path, name: str, data: bytes) -> None:
    from converters.kineto import read_ranks
    from converters.pytorch_et import convert_pytorch, read_ets
    from xsim_trace.io import write_rank_set
    from xsim_trace.io.sources import resolve_inputs

    kineto = SHARED / "kineto" / "hta_simple_add_a100" / "benchmark_simple_add_trace.json.gz"
    ets = read_ets(resolve_inputs(_write(folder, name, data)))
    conv = convert_pytorch(ets, read_ranks(resolve_inputs(kineto)))
    write_rank_set(str(folder / "out"), conv.traces, conv.comm_groups)


def run_et(folder: Path, name: str, data: bytes) -> None:
    from xsim_trace.cluster import single_switch
    from xsim_trace.graph.checks import check_trace
    from xsim_trace.io import read_et
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology
    from xsim_trace.replay.api import replay_compiled
    from xsim_trace.replay.columnar import compile_rank_files

    path = _write(folder, name, data)
    check_trace(read_et(path))
    prefix = str(folder / name.split(".")[0])
    workload = None
    for columnar in (True, False):
        workload, _ = compile_rank_files(prefix, columnar=columnar)
    cluster = single_switch(max(2, workload.num_ranks), 50.0, 500.0)
    replay_compiled(workload, make_backend("analytical", build_topology(cluster)), cluster=cluster)


def run_text(folder: Path, name: str, data: bytes) -> None:
    from converters.text import convert_text_file
    from xsim_trace.io import write_rank_set

    conv = convert_text_file(_write(folder, name, data))
    write_rank_set(str(folder / "out"), conv.traces, conv.comm_groups)


def run_cluster(folder: Path, name: str, data: bytes) -> None:
    from xsim_trace.cluster import load_cluster
    from xsim_trace.network.registry import make_backend
    from xsim_trace.network.topology import build_topology

    cluster = load_cluster(_write(folder, name, data))
    make_backend("analytical", build_topology(cluster))


def run_plan(folder: Path, name: str, data: bytes) -> None:
    from xsim_trace.plan.parse import load_plan

    load_plan(_write(folder, name, data))


def run_sweep(folder: Path, name: str, data: bytes) -> None:
    from xsim_trace.sweep.runners import execute_run
    from xsim_trace.sweep.spec import load_spec

    spec = load_spec(_write(folder, name, data))
    for run in list(spec.runs)[:2]:
        record = execute_run({**run.to_dict(), "resolved": run.resolved_params()})
        assert "where" not in record, f"the run failed with an unexpected error: {record}"


def run_nccl_tests(folder: Path, name: str, data: bytes) -> None:
    from xsim_trace.network.nccl.nccltests import parse_nccl_tests

    parse_nccl_tests(_write(folder, name, data))


TARGETS = {
    "et": Target("et", "et", et_seeds, run_et),
    "kineto": Target("kineto", "json", kineto_seeds, run_kineto),
    "pytorch_et": Target("pytorch_et", "json", pytorch_et_seeds, run_pytorch_et),
    "text": Target("text", "text", text_seeds, run_text),
    "cluster": Target("cluster", "yaml", cluster_seeds, run_cluster),
    "plan": Target("plan", "yaml", plan_seeds, run_plan),
    "sweep": Target("sweep", "yaml", sweep_seeds, run_sweep),
    "nccl_tests": Target("nccl_tests", "text", nccl_tests_seeds, run_nccl_tests),
}
