"""Text workloads (Chakra Text, SimAI/AICB) -> Chakra, against the files and the reference converter."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from converters.text import convert_text_file, convert_workload, parse_workload
from xsim_trace.errors import ConfigError, FormatError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.checks import check_rank_set
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.io import read_et

sys.path.insert(0, str(Path(__file__).parent))
from convert_helpers import SHARED_TRACES, TEXT, need  # noqa: E402

REFERENCE = SHARED_TRACES / "chakra_et" / "reference_text_converter"
ALL_TEXT = sorted(p.name for p in TEXT.glob("*.txt")) if TEXT.exists() else []


@pytest.mark.parametrize("name", ALL_TEXT)
def test_every_shared_workload_converts_clean(name):
    conv = convert_text_file(need(TEXT / name))
    assert len(conv.traces) >= 2
    assert check_rank_set(conv.traces, conv.comm_groups) == []
    for rank, trace in conv.traces.items():
        assert trace.metadata.attr(A.META_RANK) == rank
        ids = [n.id for n in trace.nodes]
        assert ids == list(range(len(ids)))
        assert all(d < n.id for n in trace.nodes for d in n.deps)


@pytest.mark.parametrize("stem", ["Resnet50_DataParallel", "DLRM_HybridParallel", "MLP_ModelParallel",
                                  "MLP_HybridParallel_Data_Model", "MLP_HybridParallel_Model_Data", "AllReduce_1MB"])
def test_same_collectives_and_compute_as_the_reference_converter(stem):
    ref = read_et(need(REFERENCE / f"{stem}.0.et"))
    mine = convert_text_file(TEXT / f"{stem}.txt").traces[0]

    def comms(t):
        return Counter((n.attr(A.COMM_TYPE), n.attr(A.COMM_SIZE)) for n in t.nodes if n.type == NodeType.COMM_COLL)

    def compute_us(t):
        return sum(n.duration_micros for n in t.nodes if n.type == NodeType.COMP)

    assert comms(mine) == comms(ref)
    assert compute_us(mine) == compute_us(ref)


def test_aicb_gpt13b_tp8():
    """HYBRID_TRANSFORMER_FWD_IN_BCKWD (the reference text converter rejects it)."""
    path = need(TEXT / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt")
    w = parse_workload(path.read_text(), str(path))
    assert w.parallelism == "HYBRID_TRANSFORMER_FWD_IN_BCKWD" and w.params["model_parallel_NPU_group"] == 8
    conv = convert_text_file(path)
    assert len(conv.traces) == 16  # TP 8 x DP 2 by default
    t0 = conv.traces[0]
    assert "0" not in conv.comm_groups and all(int(k) > 0 for k in conv.comm_groups)  # ASTRA-sim's ids
    tp_group = next(k for k, v in conv.comm_groups.items() if v == tuple(range(8)))
    dp_group = next(k for k, v in conv.comm_groups.items() if v == (0, 8))
    colls = [n for n in t0.nodes if n.type == NodeType.COMM_COLL]
    by_pg = Counter(n.pg_name for n in colls)
    # per file: 171 ALLREDUCE + 1 ALLGATHER + 1 BROADCAST in fwd/ig columns (TP), 1 REDUCESCATTER in wg (DP);
    # layer 0's (norm) input-gradient column is NONE, so nothing is dropped
    assert by_pg[tp_group] == 173 and by_pg[dp_group] == 1
    rs = next(n for n in colls if n.comm_type == CollectiveType.REDUCE_SCATTER)
    assert rs.comm_size_bytes == 6497239040 and rs.pg_name == dp_group and rs.attr(A.COMM_KIND) == "dp"
    # compute times are ns in SimAI files: the sum of all fwd + ig + wg times of the file
    total_ns = sum(l.fwd_time + l.ig_time + l.wg_time for l in w.layers)
    assert sum(n.attr(A.DURATION_NS) for n in t0.nodes if n.type == NodeType.COMP) == total_ns


def test_aicb_moe_groups_with_ep_suffixes():
    path = need(TEXT / "workload_analytical.txt")
    w = parse_workload(path.read_text(), str(path))
    conv = convert_workload(w, num_npus=64, ranks=[0])  # TP 2 x DP 32, EP 16; rank 0 only
    assert list(conv.traces) == [0]
    t = conv.traces[0]
    groups = conv.comm_groups
    kinds = Counter((n.attr(A.COMM_KIND), len(groups[n.pg_name])) for n in t.nodes if n.type == NodeType.COMM_COLL)
    assert ("ep", 16) in kinds and ("tp", 2) in kinds and ("dp", 32) in kinds and ("dp", 2) in kinds


def test_time_unit_and_passes():
    text = "DATA\n2\nl0 -1 10 NONE 0 20 NONE 0 30 ALLREDUCE 1024 1\nl1 -1 1 NONE 0 2 NONE 0 3 ALLREDUCE 2048 1\n"
    w = parse_workload(text)
    us = convert_workload(w, num_npus=4).traces[1]
    ns = convert_workload(w, num_npus=4, time_unit="ns").traces[1]
    comp = lambda t: [n.attr(A.DURATION_NS) for n in t.nodes if n.type == NodeType.COMP and n.name != "iteration_end"]  # noqa: E731
    # fwd l0, l1; bwd l1 wg, l1 ig, l0 wg (DATA: no input gradient for layer 0)
    assert comp(us) == [10_000, 1_000, 3_000, 2_000, 30_000]
    assert comp(ns) == [10, 1, 3, 2, 30]
    two = convert_workload(w, num_npus=4, num_passes=2).traces[0]
    assert sum(1 for n in two.nodes if n.type == NodeType.COMM_COLL) == 4
    second_fwd = next(n for n in two.nodes if n.name == "p1_l0_FWD")
    assert {n.id for n in two.nodes if n.type == NodeType.COMM_COLL and n.name.startswith("p0_")} <= set(second_fwd.deps)


def test_bad_text_inputs():
    with pytest.raises(FormatError, match="unknown parallelism"):
        parse_workload("PIPELINE\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n")
    with pytest.raises(FormatError, match=r"line 3: unknown communication type 'ALLSOMETHING'"):
        parse_workload("DATA\n1\nl -1 1 ALLSOMETHING 5 1 NONE 0 1 NONE 0 1\n")
    with pytest.raises(FormatError, match="2 layers announced, 1 present"):
        parse_workload("DATA\n2\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n")
    with pytest.raises(FormatError, match=r"line 3: expected a number for fwd compute time"):
        parse_workload("DATA\n1\nl -1 x NONE 0 1 NONE 0 1 NONE 0 1\n")
    w = parse_workload("HYBRID_TRANSFORMER model_parallel_NPU_group: 4\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n")
    with pytest.raises(ConfigError, match="does not divide"):
        convert_workload(w, num_npus=6)
