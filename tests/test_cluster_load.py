"""Cluster descriptions: presets, files, programmatic builders, and field-naming errors."""

from __future__ import annotations

import json

import pytest
import yaml

from xsim_trace.cluster import (
    Cluster,
    FabricKind,
    IntraKind,
    cluster_from_dict,
    describe,
    load_cluster,
    preset_names,
    single_switch,
)
from xsim_trace.errors import ConfigError

GOOD = {
    "name": "two-groups",
    "fabric": {"kind": "fat-tree", "latency_ns": 500, "nics_per_leaf": 8},
    "groups": [
        {
            "name": "fast",
            "gpu": "H100-SXM",
            "count": 16,
            "devices_per_node": 8,
            "intra_node": {"kind": "nvswitch", "bw_GBps": 450, "latency_ns": 250},
            "nic": {"count": 8, "nic_gbps": 400, "latency_ns": 1000},
        },
        {
            "name": "slow",
            "gpu": "A100",
            "count": 4,
            "devices_per_node": 4,
            "intra_node": {"kind": "nvswitch", "bw_GBps": 300, "latency_ns": 250},
            "nic": {"count": 2, "nic_gbps": 200},
            "fabric": {"kind": "single-switch"},
        },
    ],
    "links": [{"groups": ["fast", "slow"], "bw_gbps": 800, "latency_ns": 5000}],
}


def test_presets_by_name_and_size():
    assert {"dgx-h100", "dgx-a100", "hgx-h200", "mixed-h100-a100", "v100-dgx1", "a100-node"} <= set(preset_names())
    c = load_cluster("dgx-h100")
    assert (c.num_ranks, c.num_nodes) == (32, 4)
    assert c.gpu_type(31) == "H100-SXM"
    assert c.groups[0].intra.bw_GBps == 450 and c.groups[0].nic.count == 8 and c.groups[0].nic.nic_gbps == 400
    big = load_cluster("dgx-h100:16")
    assert big.num_ranks == 128 and big.node_of(127) == 15 and big.node_of(8) == 1
    a = load_cluster("dgx-a100:2")
    assert a.groups[0].intra.bw_GBps == 300 and a.groups[0].nic.nic_gbps == 200 and a.num_ranks == 16
    m = load_cluster("mixed-h100-a100:1,3")
    assert m.num_ranks == 32
    assert [m.group_of(r).name for r in (0, 7, 8, 31)] == ["h100", "h100", "a100", "a100"]
    assert m.node_of(8) == 1 and m.gpu_type(8).startswith("A100")
    assert load_cluster("a100-node").num_ranks == 8
    assert load_cluster("hgx-h200").gpu_type(0) == "H200-SXM"


def test_v100_hybrid_cube_mesh():
    c = load_cluster("v100-dgx1")
    g = c.groups[0]
    assert g.intra.kind is IntraKind.MESH and g.intra.bw_GBps == 25
    lanes = [0] * 8
    for a, b, w in g.intra.mesh:
        lanes[a] += w
        lanes[b] += w
    assert lanes == [6] * 8  # six NVLink 2.0 links per V100


def test_default_and_explicit_rank_map():
    c = cluster_from_dict(GOOD)
    assert c.num_ranks == 20
    assert c.group_of(15).name == "fast" and c.group_of(16).name == "slow"
    assert (c.node_of(7), c.node_of(8), c.node_of(16)) == (0, 1, 2)
    assert c.local_of(9) == 1
    assert c.groups[1].fabric.kind is FabricKind.SINGLE_SWITCH and c.groups[0].fabric.kind is FabricKind.FAT_TREE
    rm = [f"slow/0/{i}" for i in range(4)] + [[0, n, l] for n in range(2) for l in range(8)]
    c2 = cluster_from_dict({**GOOD, "rank_map": rm})
    assert c2.group_of(0).name == "slow" and c2.group_of(4).name == "fast"
    assert c2.rank_at(0, 1, 0) == 12 and c2.node_of(12) == 1


def test_round_trip_and_files(tmp_path):
    c = cluster_from_dict(GOOD)
    assert cluster_from_dict(c.to_dict()) == c
    assert Cluster.from_dict(GOOD) == c
    y = tmp_path / "c.yaml"
    y.write_text(yaml.safe_dump(GOOD))
    j = tmp_path / "c.json"
    j.write_text(json.dumps(GOOD))
    assert load_cluster(y) == load_cluster(str(j)) == c


def test_single_switch_builder():
    c = single_switch(16, 50.0, 100)
    assert c.num_ranks == 16 and c.num_nodes == 1 and c.groups[0].intra.bw_GBps == 50.0


def _bad(path, **change):
    d = json.loads(json.dumps(GOOD))
    for dotted, value in change.items():
        keys = dotted.split("__")
        obj = d
        for k in keys[:-1]:
            obj = obj[int(k)] if k.isdigit() else obj[k]
        if value is _DEL:
            del obj[keys[-1]]
        else:
            obj[int(keys[-1]) if keys[-1].isdigit() else keys[-1]] = value
    p = path / "bad.yaml"
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(ConfigError) as ei:
        load_cluster(p)
    msg = str(ei.value)
    assert str(p) in msg and "\n" not in msg
    return msg


_DEL = object()


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"groups__1__devices_per_node": 3}, "groups[1].devices_per_node", "divisor"),
        ({"groups__0__count": 12}, "groups[0].devices_per_node", "divisor of count 12"),
        ({"groups__0__intra_node__bw_GBps": -3}, "groups[0].intra_node.bw_GBps", "expected a positive number, found -3"),
        ({"groups__0__nic__nic_gbps": "fast"}, "groups[0].nic.nic_gbps", "expected a number"),
        ({"groups__0__nic": None}, "groups[0].nic", "expected NICs"),
        ({"fabric__kind": "torus"}, "fabric.kind", "expected one of single-switch, rail-only, fat-tree"),
        ({"fabric__oversubscription": 0.5}, "fabric.oversubscription", ">= 1"),
        ({"groups__1__colour": "red"}, "groups[1].colour", "unknown key"),
        ({"groups__1__name": "fast"}, "groups[1].name", "duplicate group name"),
        ({"links__0__groups": ["fast", "nowhere"]}, "links[0].groups", "expected two distinct group names"),
        ({"links": []}, "links", "unreachable"),
        ({"groups__0__devices_per_node": _DEL}, "groups[0].devices_per_node", "found nothing"),
        ({"groups": []}, "groups", "non-empty list"),
        ({"rank_map": ["fast/0/0"] * 20}, "rank_map[1]", "already holds rank 0"),
        ({"rank_map": ["fast/0/0"]}, "rank_map", "expected a list of 20 devices"),
    ],
)
def test_bad_cluster_names_the_field(tmp_path, change, field, words):
    msg = _bad(tmp_path, **change)
    assert f"field {field}" in msg
    assert words in msg


def test_bad_files_and_specs(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("groups: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_cluster(p)
    with pytest.raises(ConfigError, match="cluster file not found"):
        load_cluster(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="expected a cluster file or a preset"):
        load_cluster("dgx-z900")
    with pytest.raises(ConfigError, match="node count"):
        load_cluster("dgx-h100:many")
    with pytest.raises(ConfigError, match="expected 2 positive node count"):
        load_cluster("mixed-h100-a100:1,2,3")
    with pytest.raises(ConfigError, match="rank"):
        load_cluster("a100-node").gpu_type(8)


def test_describe():
    lines = describe(load_cluster("mixed-h100-a100:1,2"))
    assert lines[0] == "mixed-h100-a100:1,2: 24 ranks on 3 nodes in 2 group(s)"
    assert lines[1].startswith("  h100: 8x H100-SXM = 1 node(s) x 8; NVSwitch 450 GB/s/GPU; 8x 400 Gb/s NIC; ranks 0-7")
    assert "fat-tree 1:1, 32 NICs/leaf; ranks 8-23" in lines[2]
    assert lines[3] == "  link h100 <-> a100: 3200 Gb/s, 2000 ns"
    assert "NVLink mesh 25 GB/s/lane (16 pairs)" in describe(load_cluster("v100-dgx1"))[1]


def test_unknown_gpu_type_names_the_field(tmp_path):
    from xsim_trace.cluster import load_cluster
    from xsim_trace.errors import ConfigError

    p = tmp_path / "c.yaml"
    p.write_text("groups:\n  - name: g\n    gpu: Z100\n    count: 8\n    devices_per_node: 8\n")
    with pytest.raises(ConfigError, match=r"c\.yaml, field groups\[0\]\.gpu: unknown GPU type: unknown device 'Z100'"):
        load_cluster(str(p))
