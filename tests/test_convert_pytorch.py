"""PyTorch ET + Kineto: linking by rf_id / External id / order, annotations on the Kineto graph."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from converters.kineto import read_ranks
from converters.pytorch_et import ET_RF_ID, convert_pytorch, link, pair_files, read_et_json, read_ets
from xsim_trace.io.sources import resolve_inputs
from xsim_trace.errors import FormatError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.checks import check_rank_set
from xsim_trace.graph.kinds import NodeType

sys.path.insert(0, str(Path(__file__).parent))
from convert_helpers import DLRM_ET, SHARED_TRACES, dlrm_conversion, dlrm_kineto_raw, need  # noqa: E402

SIMPLE = SHARED_TRACES / "kineto" / "hta_simple_add_a100"


def test_dlrm_et_pairs_by_pid_and_links_nearly_all_ops():
    ets = read_ets(resolve_inputs(need(DLRM_ET)))
    kts = dlrm_kineto_raw()
    pairs = pair_files(ets, kts)
    assert len(pairs) == 8
    for et, kt in pairs:
        assert et.pid == next(e.pid for e in kt.events if e.cat == "cpu_op")
        linked, stats = link(et, kt)
        assert stats.et_ops == len(et.ops) and stats.linked >= 0.99 * stats.et_ops
        # a link joins ops of one name; for comm ops the two captures' input shapes agree
        for idx, op in linked.items():
            ev = next(e for e in kt.events if e.index == idx)
            assert ev.name == op.name
            if ev.args and "Input Dims" in ev.args and ev.name.startswith("nccl:"):
                assert json.loads(op.inputs.shapes) == ev.args["Input Dims"]


def test_dlrm_pytorch_conversion_annotates_nodes():
    ets = read_ets(resolve_inputs(need(DLRM_ET)))
    conv = convert_pytorch(ets, dlrm_kineto_raw())
    assert check_rank_set(conv.traces, conv.comm_groups) == []
    plain = dlrm_conversion()
    for rank, trace in conv.traces.items():
        # same graph as the Kineto-only conversion, plus ET annotations
        assert [(n.id, n.type, n.deps) for n in trace.nodes] == [(n.id, n.type, n.deps) for n in plain.traces[rank].nodes]
        assert trace.metadata.attr(A.META_SOURCE) == "xsim-convert pytorch"
        ar = [n for n in trace.nodes if n.type == NodeType.COMM_COLL]
        assert all(n.inputs is not None and n.attr(ET_RF_ID) is not None for n in ar)
        host = [n for n in trace.nodes if n.is_cpu_op and n.inputs is not None]
        assert len(host) > 0.5 * sum(1 for n in trace.nodes if n.is_cpu_op)


def test_simple_add_links_by_external_id_and_has_schemas():
    ets = read_ets(resolve_inputs(need(SIMPLE / "benchmark_simple_add_et.json.gz")))
    kts = read_ranks(resolve_inputs(SIMPLE / "benchmark_simple_add_trace.json.gz"))
    linked, stats = link(ets[0], kts[0])
    # External id == rf_id in this capture: every Kineto op (28 cpu_op + 8 annotations) links that way
    assert stats.kineto_ops == 36 and stats.by_external_id == 36 and stats.by_order == 0
    conv = convert_pytorch(ets, kts)
    kernels = [n for n in conv.traces[0].nodes if not n.is_cpu_op and not n.attr(A.DELAY)]
    assert len(kernels) == 4
    schemas = [n.attr(A.OP_SCHEMA).split("(")[0] for n in kernels]
    assert schemas == ["aten::uniform_", "aten::uniform_", "aten::add.Tensor", "aten::add.Tensor"]


def test_bad_et_inputs():
    with pytest.raises(FormatError, match="ET node 1 is not an object"):
        read_et_json(io.BytesIO(b'{"schema": "1.0.1", "nodes": [{"name": "a", "id": 1}, 3]}'), "x.json")
    with pytest.raises(FormatError, match="no ET nodes"):
        read_et_json(io.BytesIO(b'{"schema": "1.0.1", "nodes": []}'), "x.json")
    with pytest.raises(FormatError, match="malformed JSON after ET node 1"):
        read_et_json(io.BytesIO(b'{"schema": "1.0.1", "nodes": [{"name": "a", "id": 1}, {"na'), "x.json")


def test_et_schema_103_attrs_list_links_by_rf_id_and_matches_reference_collectives():
    """resnet_1gpu ET (schema 1.0.3: rf_id in "attrs") + HTA Kineto, the pair the reference pipeline converted."""
    from collections import Counter

    from xsim_trace.io import read_et

    et_path = need(SHARED_TRACES / "pytorch_et" / "resnet_1gpu_et.1.0.3.json.gz")
    kineto = need(SHARED_TRACES / "kineto" / "hta_a100_nccl_2rank" / "nccl_data.json.gz")
    ets = read_ets(resolve_inputs(et_path))
    kts = read_ranks(resolve_inputs(kineto))
    assert ets[0].schema.startswith("1.0.3") and all(o.rf_id is not None for o in ets[0].ops[1:])
    _, stats = link(ets[0], kts[0])
    assert stats.by_rf_id >= 0.99 * stats.et_ops and stats.by_order == 0
    conv = convert_pytorch(ets, kts, step="all")
    ref = read_et(need(SHARED_TRACES / "chakra_et" / "reference_pytorch_e2e" / "chakra_trace.0.et.gz"))

    def colls(t):
        return Counter((n.comm_type, n.comm_size_bytes) for n in t.nodes if n.type == NodeType.COMM_COLL)

    assert colls(conv.traces[0]) == colls(ref) and sum(colls(ref).values()) == 21
