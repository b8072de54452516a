"""The parts of the sweep's pipeline runner: the checked case (global_batch scales the per-micro-batch
costs) and the communication phases (none simulated where nothing moves)."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.sweep.runners import _PIPELINE_PARAMS, _Params, _pipeline_case, _pipeline_comm


def _case(**params):
    p = _Params(params, _PIPELINE_PARAMS)
    return _pipeline_case(p, params), p


def test_global_batch_scales_costs_by_samples_per_micro_batch():
    case, _ = _case(stages=2, microbatches=4, dp=2, global_batch=16, fwd_ns_per_layer=1000, activation_bytes=10)
    assert (case.fwd_ns, case.bwd_ns, case.activation_bytes) == (2000.0, 4000.0, 20)  # 16 / (2 x 4) = 2 samples
    with pytest.raises(ConfigError, match="global_batch"):
        _case(microbatches=4, dp=2, global_batch=12)
    with pytest.raises(ConfigError, match="layers"):
        _case(stages=4, chunks=2, layers=7)


def test_no_communication_simulates_no_flow():
    case, p = _case(stages=1, dp=1, grad_bytes=1 << 20)
    assert _pipeline_comm(case, p) == (0, 0, 0)


def test_p2p_then_one_ring_step_per_stage():
    case, p = _case(stages=2, dp=2, grad_bytes=4 << 20, activation_bytes=1 << 20, latency_ns=0)
    p2p_ns, step_ns, flows = _pipeline_comm(case, p)
    assert flows == 1 + 2 * 2 and p2p_ns > 0 and step_ns > 0
