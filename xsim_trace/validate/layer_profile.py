"""Measured per-layer pass times of a model on a testbed, published by the testbed's owners
(``xsim_trace/data/layer_profiles/*.yaml``).

A profile holds, per device, micro-batch and TP degree, one micro-batch's forward and backward time of the
embedding, of one transformer block and of the head, each with its TP all-reduces inside.  Where a profile covers a
row's model, cluster, device, micro-batch and TP degree, :mod:`xsim_trace.validate.hetero_predict` uses the measured
pass instead of the analytical one; everything else (pipeline transfers, gradient all-reduce, optimizer, schedule)
stays modelled.  Each file names its source.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

from xsim_trace.errors import ConfigError

_FIELDS = ("embedding_fwd_s", "block_fwd_s", "block_bwd_s", "head_fwd_s", "head_bwd_s")
_MODEL_KEYS = ("layers", "hidden", "heads", "vocab", "seq_len")


@dataclass(frozen=True, slots=True)
class LayerTimes:
    """One micro-batch on one replica of a stage: seconds, TP all-reduces included."""

    embedding_fwd_s: float
    block_fwd_s: float
    block_bwd_s: float
    head_fwd_s: float
    head_bwd_s: float

    def pass_ns(self, blocks: int, embedding: bool, head: bool) -> tuple[int, int]:
        """(forward, backward) of a stage with ``blocks`` blocks and the embedding / head if it holds them."""
        fwd = blocks * self.block_fwd_s + (self.embedding_fwd_s if embedding else 0.0) + \
            (self.head_fwd_s if head else 0.0)
        bwd = blocks * self.block_bwd_s + (self.head_bwd_s if head else 0.0)
        return int(round(fwd * 1e9)), int(round(bwd * 1e9))


@dataclass(frozen=True, slots=True)
class LayerProfile:
    name: str
    cluster: str  # the cluster preset the measurements were taken on
    model: tuple[int, int, int, int, int]  # layers, hidden, heads, vocab, seq_len
    #: ((device, micro-batch, tp), times)
    entries: tuple[tuple[tuple[str, int, int], LayerTimes], ...]

    def lookup(self, device: str, micro_batch: int, tp: int) -> LayerTimes | None:
        return dict(self.entries).get((device, micro_batch, tp))


def _profile_files():
    return sorted((p for p in (resources.files("xsim_trace") / "data" / "layer_profiles").iterdir()
                   if p.name.endswith(".yaml")), key=lambda p: p.name)


def _parse(name: str, doc: dict) -> LayerProfile:
    def err(field: str, why: str) -> ConfigError:
        return ConfigError(f"layer profile {name}: field {field}: {why}")

    try:
        model = tuple(int(doc["model"][k]) for k in _MODEL_KEYS)
    except (KeyError, TypeError, ValueError):
        raise err("model", f"expected {', '.join(_MODEL_KEYS)}") from None
    entries = []
    for device, by_mbs in (doc.get("devices") or {}).items():
        for mbs, by_tp in by_mbs.items():
            for tp, times in by_tp.items():
                where = f"devices.{device}.{mbs}.{tp}"
                try:
                    values = {k: float(times[k]) for k in _FIELDS}
                except (KeyError, TypeError, ValueError):
                    raise err(where, f"expected {', '.join(_FIELDS)}") from None
                if any(v < 0 for v in values.values()):
                    raise err(where, "negative time")
                entries.append(((str(device), int(mbs), int(tp)), LayerTimes(**values)))
    return LayerProfile(str(doc.get("name", name)), str(doc.get("cluster", "")), model, tuple(sorted(entries)))


@functools.lru_cache(maxsize=1)
def layer_profiles() -> tuple[LayerProfile, ...]:
    out = []
    for path in _profile_files():
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict):
            raise ConfigError(f"layer profile {path.name}: expected a mapping")
        out.append(_parse(path.name, doc))
    return tuple(out)


def find_layer_times(cluster: str, model: tuple[int, int, int, int, int], device: str, micro_batch: int,
                     tp: int) -> LayerTimes | None:
    """The measured times of ``device`` at (``micro_batch``, ``tp``) for ``model`` on ``cluster``, if published."""
    for prof in layer_profiles():
        if prof.cluster == cluster and prof.model == model:
            hit = prof.lookup(device, micro_batch, tp)
            if hit is not None:
                return hit
    return None


__all__ = ["LayerProfile", "LayerTimes", "find_layer_times", "layer_profiles"]
