"""Bundled cluster presets (``xsim_trace/data/clusters/<name>.yaml``), addressed by name with an
optional size: ``dgx-h100`` (the file's default node count), ``dgx-h100:16`` (16 nodes in every
group), ``mixed-h100-a100:2,4`` (2 nodes in the first group, 4 in the second)."""

from __future__ import annotations

from importlib import resources
from typing import Any


from xsim_trace.cluster.load import cluster_from_dict
from xsim_trace.cluster.model import Cluster
from xsim_trace.errors import ConfigError


def _dir() -> Any:
    return resources.files("xsim_trace") / "data" / "clusters"


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in _dir().iterdir() if p.name.endswith(".yaml"))


def preset_dict(name: str) -> dict[str, Any]:
    base = name.strip().lower()
    f = _dir() / f"{base}.yaml"
    if not f.is_file():
        raise ConfigError(f"unknown cluster preset {name!r} (presets: {', '.join(preset_names())})", field="cluster")
    import yaml  # noqa: PLC0415 - only a preset's reader pays for it

    return yaml.safe_load(f.read_text(encoding="utf-8"))


def is_preset_spec(spec: str) -> bool:
    return spec.split(":", 1)[0].strip().lower() in preset_names()


def load_preset(spec: str, catalog=None) -> Cluster:
    """``name`` or ``name:N`` or ``name:N1,N2,...`` (nodes per group); its GPU types resolve in
    ``catalog`` (the run's device catalog: a ``--device-file`` may refine a built-in device)."""
    name, _, size = spec.partition(":")
    data = preset_dict(name)
    groups = data["groups"]
    if size.strip():
        try:
            nodes = [int(s) for s in size.split(",")]
        except ValueError:
            raise ConfigError(f"expected a node count like {name}:4, found {spec!r}", field="cluster") from None
        if len(nodes) == 1:
            nodes = nodes * len(groups)
        if len(nodes) != len(groups) or min(nodes) < 1:
            raise ConfigError(
                f"expected {len(groups)} positive node count(s) for preset {name}, found {size!r}", field="cluster"
            )
        for g, n in zip(groups, nodes):
            g.pop("count", None)
            g["nodes"] = n
        data["name"] = f"{data.get('name', name)}:{size.strip()}"
    return cluster_from_dict(data, file=f"preset:{name}", catalog=catalog)
