"""Shared helpers for the converter tests: where the real traces are, cached conversions."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
DLRM_KINETO = SHARED_TRACES / "kineto" / "param_dlrm_v100_8rank" / "dlrm_kineto.tar.gz"
DLRM_ET = SHARED_TRACES / "kineto" / "param_dlrm_v100_8rank" / "dlrm_pytorch_et.tar.gz"
HTA_NCCL = SHARED_TRACES / "kineto" / "hta_a100_nccl_2rank" / "nccl_data.json.gz"
TEXT = SHARED_TRACES / "text_workloads"
#: measured ProfilerStep#10 per rank (traces/README.md of shared/)
DLRM_STEP_MS = (14.455, 19.901, 13.017, 19.313, 17.979, 17.797, 13.091, 12.509)


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared trace {path} not present (tests read real traces from ../shared/traces)")
    return path


@functools.lru_cache(maxsize=None)
def dlrm_kineto_raw():
    from converters.kineto import read_ranks
    from xsim_trace.io.sources import resolve_inputs

    return tuple(read_ranks(resolve_inputs(need(DLRM_KINETO))))


@functools.lru_cache(maxsize=None)
def dlrm_conversion():
    from converters.kineto import convert_kineto

    return convert_kineto(dlrm_kineto_raw())


@functools.lru_cache(maxsize=None)
def hta_conversion(step="all"):
    from converters.kineto import convert_kineto, read_ranks
    from xsim_trace.io.sources import resolve_inputs

    return convert_kineto(read_ranks(resolve_inputs(need(HTA_NCCL))), step=step)
