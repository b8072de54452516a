"""A toy sweep runner (pure arithmetic) and spec writers for the sweep tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from xsim_trace.errors import ConfigError

TOY = "sweep_helpers:toy_runner"


def toy_runner(params: Mapping[str, Any]) -> dict[str, Any]:
    """iteration_ns = a * 1000 + b; ``fail: true`` raises a ConfigError naming the field."""
    if params.get("fail"):
        raise ConfigError("asked to fail", field="fail")
    a, b = int(params["a"]), int(params["b"])
    return {"iteration_ns": a * 1000 + b, "a_times_b": a * b}


def write_spec(folder: Path, data: Mapping[str, Any], name: str = "spec.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path
