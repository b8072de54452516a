"""A toy sweep runner (pure arithmetic) and spec writers for the sweep tests."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Mapping

import yaml

from xsim_trace.errors import ConfigError

TOY = "sweep_helpers:toy_runner"


def toy_runner(params: Mapping[str, Any]) -> dict[str, Any]:
    """iteration_ns = a * 1000 + b; ``fail: true`` raises a ConfigError naming the field."""
    if params.get("fail"):
        raise ConfigError("asked to fail", field="fail")
    if params.get("crash"):  # the worker dies as in a segfault or the OOM killer
        os.kill(os.getpid(), signal.SIGKILL)
    hold = b"x" * (int(params.get("alloc_mb", 0)) << 20)  # noqa: F841 - touched pages, resident while sleeping
    time.sleep(float(params.get("sleep_s", 0)))
    a, b = int(params["a"]), int(params["b"])
    out = {"iteration_ns": a * 1000 + b, "a_times_b": a * b}
    if params.get("report_pid"):
        out["pid"] = os.getpid()
    return out


def write_spec(folder: Path, data: Mapping[str, Any], name: str = "spec.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path
