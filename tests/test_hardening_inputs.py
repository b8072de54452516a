"""Issue 15: the Kineto, configuration-file and sweep crash classes of the fuzzer, each an XsimError
(exit 2 through the CLI) in one line naming the file and field."""

from __future__ import annotations

import gzip
import io
import json
import time

import pytest
import yaml

from xsim_trace.cli.main import main
from xsim_trace.errors import ConfigError, FormatError
from xsim_trace.io.json_input import MAX_JSON_DEPTH
from xsim_trace.io.sources import Source


def _kineto(events: list, **header) -> dict:
    base = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
         "args": {"External id": 5}},
    ]
    return {"traceEvents": base + events, **header}


def _read_and_convert(data: bytes, name: str = "rank0.json"):
    from converters.kineto import convert_kineto, read_ranks

    kts = read_ranks([Source(name, lambda: io.BytesIO(data))])
    return convert_kineto(kts)


KINETO_BAD_EVENTS = [
    ("ts 1e400 text", {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": "1e400", "dur": 1}),
    ("dur nan text", {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": "nan"}),
    ("ts huge int", {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1 << 80, "dur": 1}),
    ("pid dict", {"ph": "X", "cat": "cpu_op", "name": "a", "pid": {"x": 1}, "tid": 1, "ts": 1, "dur": 1}),
    ("tid list", {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": [1, 2], "ts": 1, "dur": 1}),
]


@pytest.mark.parametrize("label,event", KINETO_BAD_EVENTS, ids=[c[0] for c in KINETO_BAD_EVENTS])
def test_kineto_bad_event_is_a_format_error(label, event):
    data = json.dumps(_kineto([event])).encode()
    with pytest.raises(FormatError) as info:
        _read_and_convert(data)
    assert "rank0.json" in str(info.value) and "event" in str(info.value)


def test_kineto_unhashable_category_is_an_unknown_one():
    event = {"ph": "X", "cat": ["kernel"], "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    conv = _read_and_convert(json.dumps(_kineto([event])).encode())
    assert len(conv.traces) == 1


def test_kineto_number_literal_1e400():
    data = json.dumps(_kineto([KINETO_BAD_EVENTS[0][1]])).encode().replace(b'"1e400"', b"1e400")
    with pytest.raises(FormatError, match="not finite|overflow"):
        _read_and_convert(data)


def test_kineto_corrupt_deflate_is_a_format_error():
    data = bytearray(gzip.compress(json.dumps(_kineto([])).encode() * 3))
    data[len(data) // 2] ^= 0xFF
    data[len(data) // 2 + 1] ^= 0x55
    with pytest.raises(FormatError, match="corrupt compressed data|malformed"):
        _read_and_convert(bytes(data), "rank0.json.gz")


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_deep_json_is_refused_early(depth):
    event = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": "@"}
    text = json.dumps(_kineto([event])).replace('"@"', "[" * depth + "]" * depth)
    t0 = time.process_time()
    with pytest.raises(FormatError, match="nested deeper"):
        _read_and_convert(text.encode())
    assert time.process_time() - t0 < 2.0


def test_validate_refuses_the_same_events_with_the_same_message(tmp_path):
    """One reader (xsim_trace.io.kineto) behind the converter and validation: one refusal, word for word."""
    from xsim_trace.validate.measured import measure_capture

    for _label, event in KINETO_BAD_EVENTS:
        data = json.dumps(_kineto([event])).encode()
        with pytest.raises(FormatError) as converting:
            _read_and_convert(data)
        with pytest.raises(FormatError) as measuring:
            measure_capture(Source("rank0.json", lambda d=data: io.BytesIO(d)))
        assert str(measuring.value) == str(converting.value)


CLUSTER_BAD = [
    ("fabric kind list", ["fabric", "kind"], ["fat-tree"], "fabric.kind"),
    ("intra kind dict", ["groups", 0, "intra_node", "kind"], {"a": 1}, "groups[0].intra_node.kind"),
    ("nodes huge", ["groups", 0, "nodes"], 1 << 70, "groups[0].nodes"),
    ("nodes 1e300", ["groups", 0, "nodes"], 1e300, "groups[0].nodes"),
    ("latency 2^64", ["groups", 0, "nic", "latency_ns"], 1 << 64, "groups[0].nic.latency_ns"),
    ("bandwidth tiny", ["groups", 0, "nic", "nic_gbps"], 1e-300, "groups[0].nic.nic_gbps"),
    ("bandwidth huge int", ["groups", 0, "intra_node", "bw_GBps"], 10 ** 400, "groups[0].intra_node.bw_GBps"),
]


@pytest.mark.parametrize("label,path,value,field", CLUSTER_BAD, ids=[c[0] for c in CLUSTER_BAD])
def test_cluster_bad_values(label, path, value, field, tmp_path):
    from xsim_trace.cluster import load_cluster
    from xsim_trace.cluster.presets import preset_dict

    doc = preset_dict("dgx-h100")
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    f = tmp_path / "c.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as info:
        load_cluster(f)
    assert f"field {field}" in str(info.value)


def test_sweep_network_runner_refuses_huge_rank_counts():
    from xsim_trace.sweep.runners import network_runner

    t0 = time.process_time()
    with pytest.raises(ConfigError, match="ranks"):
        network_runner({"ranks": 1 << 31})
    with pytest.raises(ConfigError, match="bw_GBps"):
        network_runner({"bw_GBps": float("inf")})
    assert time.process_time() - t0 < 1.0


@pytest.mark.parametrize("flag", ["--cluster", "plan", "sweep", "--model-file", "--device-file"])
def test_non_utf8_config_files_are_one_line_errors(flag, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    argv = {
        "--cluster": ["replay", "traces/dlrm_v100_8rank/dlrm", "--cluster", str(bad), "--out", str(tmp_path / "o")],
        "plan": ["plan", "check", str(bad)],
        "sweep": ["sweep", str(bad), "--out", str(tmp_path / "s")],
        "--model-file": ["generate", "--model", "mine", "--model-file", str(bad), "--out", str(tmp_path / "g")],
        "--device-file": ["generate", "--model", "gpt3-1.3b", "--device-file", str(bad), "--out", str(tmp_path / "g")],
    }[flag]
    assert main(["-q", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not UTF-8" in err[0] and str(bad) in err[0], err


def test_named_threads_convert_the_same_in_every_process(tmp_path):
    import subprocess
    import sys

    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": "worker thread", "ts": 20, "dur": 5}]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(_kineto(events)))
    digests = set()
    for seed in ("1", "2"):
        out = tmp_path / f"out{seed}"
        subprocess.run([sys.executable, "-m", "xsim_trace.cli.main", "-q", "convert", "kineto", str(path), "-o",
                        str(out / "run")], check=True, env={**__import__("os").environ, "PYTHONHASHSEED": seed})
        digests.add((out / "run.0.et").read_bytes())
    assert len(digests) == 1


def test_plan_counts_are_bounded(tmp_path):
    from xsim_trace.plan.parse import load_plan

    doc = yaml.safe_load(open("traces/plans/llama7b_h100_a100_pipeline.yaml", encoding="utf-8"))
    doc["device_groups"][1]["count"] = 2**63 - 1
    doc["pipelines"][0]["replicas"] = 1333485221
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(doc))
    t0 = time.process_time()
    with pytest.raises(ConfigError, match="up to"):
        load_plan(f)
    assert time.process_time() - t0 < 2.0


def test_kineto_invalid_utf8_in_a_string_is_a_format_error(tmp_path):
    data = json.dumps(_kineto([])).encode().replace(b'"aten::mm"', b'"aten::m\\xed\\xa0"'.replace(b"\\xed\\xa0", b"\xed\xa0"))
    with pytest.raises(FormatError):
        _read_and_convert(data)
    data = b"{\"traceEvents\": [" + b"\"\xed\xa0\x80\", " * 3 + b"1]}"
    with pytest.raises(FormatError):
        _read_and_convert(data)
