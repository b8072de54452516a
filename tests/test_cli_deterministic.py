"""--deterministic on xsim generate / xsim estimate: it reaches Framework.deterministic, scales every host
call by the family's fitted deterministic factor, leaves the device side alone, shows in the output, and
without it nothing changes."""

from __future__ import annotations

import json
from pathlib import Path

from xsim_trace.cli.generate import setup_from_args
from xsim_trace.cli.main import build_parser, main
from xsim_trace.workload import ops as O
from xsim_trace.workload.families import get_family
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.generator import write_workload
from xsim_trace.workload.model import get_model
from xsim_trace.workload.spec_file import make_setup

SMALL = ["--model", "gpt3-1.3b", "--layers", "2", "--seq-len", "256"]


def make_model():
    return get_model("gpt3-1.3b").with_(layers=2, seq_len=256)


def _args(command: str, *flags: str):
    extra = ["--out", "unused"] if command == "generate" else []
    return build_parser(command).parse_args([command, *SMALL, "--dp", "2", *extra, *flags])


def _json(capsys, *flags: str) -> dict:
    assert main(["estimate", *SMALL, "--dp", "2", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_flag_sets_framework_and_scales_each_host_call_by_the_family_factor():
    factor = get_family("megatron-core").host.deterministic_factor
    assert factor == 1.1  # the median of the three Megatron CI containers' fits (docs/workload.md)
    for command in ("generate", "estimate"):
        plain = setup_from_args(_args(command))
        det = setup_from_args(_args(command, "--deterministic"))
        assert plain.fw.deterministic is False and det.fw.deterministic is True
        assert det.fw == plain.fw.with_(deterministic=True)
    ops = [op for op in O.layer_forward(plain.model, plain.fw) if isinstance(op, O.ComputeOp)]
    assert any(plain.timer.host_ns(op) > 0 for op in ops)
    for op in ops:
        assert abs(det.timer.host_ns(op) - factor * plain.timer.host_ns(op)) <= 1, op.name
        assert det.timer.device_ns(op, 0) == plain.timer.device_ns(op, 0)


def test_estimate_shows_the_mode_and_moves_only_with_the_flag(capsys):
    plain = _json(capsys)
    again = _json(capsys)
    det = _json(capsys, "--deterministic")
    assert plain == again and plain["deterministic"] is False and det["deterministic"] is True
    assert det["breakdown_s"]["host"] > plain["breakdown_s"]["host"]
    assert det["breakdown_s"]["compute"] == plain["breakdown_s"]["compute"]
    assert det["step_time_s"] > plain["step_time_s"]
    # the host-bound part grows by at most the factor (the step is never more than 1.1x)
    assert det["step_time_s"] <= 1.1 * plain["step_time_s"] + 1e-6
    assert main(["estimate", *SMALL, "--dp", "2", "--deterministic"]) == 0
    assert "(megatron-core, deterministic)" in capsys.readouterr().out
    assert main(["estimate", *SMALL, "--dp", "2"]) == 0
    assert "deterministic" not in capsys.readouterr().out


def _files(prefix: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(prefix.parent.iterdir())}


def test_generate_without_the_flag_writes_the_default_files(tmp_path):
    flagless, library, det = (tmp_path / d / "w" for d in ("cli", "lib", "det"))
    for prefix in (flagless, library, det):
        prefix.parent.mkdir()
    assert main(["-q", "generate", *SMALL, "--dp", "2", "--out", str(flagless)]) == 0
    setup = make_setup(make_model(), Framework(dp=2, global_batch=2), "H100")
    write_workload(str(library), setup.program, setup.timer)
    assert main(["-q", "generate", *SMALL, "--dp", "2", "--deterministic", "--out", str(det),
                 "--summary", str(tmp_path / "det.json")]) == 0
    assert _files(flagless) == _files(library)
    changed = _files(det)
    assert changed.keys() == _files(flagless).keys()
    assert changed != _files(flagless)  # the CPU launch nodes carry the deterministic host cost
    assert json.loads((tmp_path / "det.json").read_text())["deterministic"] is True
