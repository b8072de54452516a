"""Constants of the collective model measured on public nccl-tests runs, and how they are measured.

A few effects have no published figure: the Simple protocol's pipeline fill and the LL128 bandwidth a link
generation really reaches, the per-step latency of an Ethernet (TCP offload) network.  ``nccl_links.yaml``
holds them per link generation (``protocols:``) or network kind (``net_step_latency_us``), each with the
public runs it was fitted on (``fitted_on``).  They are fitted by the calibration itself, restricted to those
constants and run over all the listed runs at once (:func:`fit_constants`).  ``tools/accuracy_collectives.py``
refits them leave-one-run-out, so no run is predicted with a constant fitted on it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import yaml

from xsim_trace.cluster.model import Cluster
from xsim_trace.network.nccl.calibrate import calibrate
from xsim_trace.network.nccl.nccltests import NcclTestsRun

#: the value a constant has when nothing was measured: no fill, the protocol's modelled bandwidth
NEUTRAL: dict[str, float] = {"nvls_tree_bw_scale": 1.0, "ll128_bw_scale": 1.0, "simple_bw_scale": 1.0, "simple_fill_us": 0.0,
                             "simple_latency_us": 0.0, "simple_fill_bytes": 64.0 * (1 << 20)}


@dataclass(frozen=True, slots=True)
class MeasuredSet:
    """Constants fitted together on the same public runs."""

    key: str  # "protocols.nvlink3" or "net_step_latency_us.ethernet"
    params: tuple[str, ...]  # NcclTuning fields
    values: tuple[float, ...]
    fitted_on: tuple[str, ...]  # run ids of ../shared/reference/nccl_tests.csv


@functools.cache
def measured_sets() -> tuple[MeasuredSet, ...]:
    text = (resources.files("xsim_trace") / "data" / "nccl_links.yaml").read_text(encoding="utf-8")
    d = yaml.safe_load(text)
    out = []
    for link, entry in (d.get("protocols") or {}).items():
        params = tuple(k for k in entry if k != "fitted_on")
        out.append(MeasuredSet(f"protocols.{link}", params, tuple(float(entry[k]) for k in params),
                               tuple(entry.get("fitted_on", ()))))
    for net, runs in (d.get("net_step_latency_fitted_on") or {}).items():
        out.append(MeasuredSet(f"net_step_latency_us.{net}", ("net_latency_us",),
                               (float(d["net_step_latency_us"][net]),), tuple(runs)))
    return tuple(out)


def neutral_cluster(base: Cluster, params: Sequence[str], *, net_latency_us: float | None = None) -> Cluster:
    """``base`` with ``params`` at their unmeasured values (the start of a fit)."""
    g = base.groups[0]
    values = {k: NEUTRAL[k] for k in params if k in NEUTRAL}
    if "net_latency_us" in params:
        values["net_latency_us"] = 0.0 if net_latency_us is None else net_latency_us
    if "simple_fill_us" in params:
        values.setdefault("simple_fill_bytes", NEUTRAL["simple_fill_bytes"])
    g = dataclasses.replace(g, nccl=dataclasses.replace(g.nccl, **values))
    return dataclasses.replace(base, groups=(g, *base.groups[1:]))


def fit_constants(base: Cluster, runs: Sequence[NcclTestsRun], params: Sequence[str]) -> dict[str, float]:
    """Fit ``params`` (NcclTuning fields) to ``runs`` of ``base``'s first group, all else as modelled."""
    free = list(params) + (["simple_fill_bytes"] if "simple_fill_us" in params and "simple_fill_bytes" not in params
                           else [])
    cal = calibrate(neutral_cluster(base, free), runs, params=free)
    return {k: getattr(cal.tuning, k) for k in free}
