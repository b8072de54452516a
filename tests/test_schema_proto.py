"""The committed generated module matches the .proto, and the schema keeps Chakra's wire numbers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO
from xsim_trace.graph.kinds import AttrKind, CollectiveType, NodeType
from xsim_trace.schema import pb


def test_generated_module_matches_proto():
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the test extra) regenerates the module")
    result = subprocess.run([sys.executable, str(REPO / "tools" / "regen_proto.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_wire_numbers_are_chakras():
    node = pb.Node.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in node.items()} == {
        "id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5, "start_time_micros": 6,
        "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10}
    assert node["ctrl_deps"].is_packed and node["data_deps"].is_packed
    attr = pb.AttributeProto.DESCRIPTOR
    oneof = attr.oneofs_by_name["value"]
    numbers = {f.name: f.number for f in oneof.fields}
    assert sorted(numbers.values()) == list(range(3, 33))
    assert {k.value for k in AttrKind if k is not AttrKind.NONE} == set(numbers)
    assert {v.name: v.number for v in pb.DESCRIPTOR.enum_types_by_name["NodeType"].values} == {
        f"{t.name}_NODE": t.value for t in NodeType}
    assert {v.name: v.number for v in pb.DESCRIPTOR.enum_types_by_name["CollectiveCommType"].values} == {
        t.name: t.value for t in CollectiveType}
    assert pb.DESCRIPTOR.package == "ChakraProtoMsg"
