"""The one Kineto reader (xsim_trace.io.kineto) behind the converters and validation."""

from __future__ import annotations

import dataclasses
import io
import json
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsim_trace.io.kineto import read_kineto, us_to_ns


def _exact_ns(text: str) -> int:
    return int((Decimal(text) * 1000).to_integral_value(ROUND_HALF_EVEN))


@pytest.mark.parametrize("text", ["4458676522690.655", "4458676522709.059", "4458676523372.899", "30.9755",
                                  "0.0005", "0.0015", "1701234567890.123", "-2.5e-3"])
def test_float_times_round_as_the_decimal_text(text):
    # a double times 1000 misrounds large timestamps by 1 ns (4458676522690.655 us gave ...656 ns)
    assert us_to_ns(float(text)) == _exact_ns(text) == us_to_ns(Decimal(text)) == us_to_ns(text)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(0, 10 ** 15 - 1), st.integers(0, 6))
def test_float_times_of_up_to_15_digits_are_exact(digits, decimals):
    text = str(Decimal(digits).scaleb(-decimals))
    assert us_to_ns(float(text)) == _exact_ns(text)


def _trace(events, **header):
    return json.dumps({"traceEvents": events, **header}).encode()


def test_events_are_frozen_records_with_the_comm_args_only():
    kernel = {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0,
              "tid": 7, "ts": 1.5, "dur": 2, "args": {"stream": 7, "correlation": 3, "Collective name": "allreduce",
                                                     "dtype": "Float", "In msg nelems": 10, "grid": [1, 1, 1]}}
    mm = {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 4, "dur": 1,
          "args": {"stream": 7, "correlation": 4, "grid": [1, 1, 1]}}
    kt = read_kineto(io.BytesIO(_trace([kernel, mm], distributedInfo={"rank": 3, "world_size": 4},
                                       deviceProperties=[{"name": "A100"}])), "r.json")
    assert (kt.rank, kt.world_size, kt.device_names) == (3, 4, ("A100",))
    nccl, gemm = kt.events
    assert (nccl.ts_ns, nccl.dur_ns, nccl.stream, nccl.correlation) == (1500, 2000, 7, 3)
    assert nccl.args == {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 10}
    assert gemm.args is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        nccl.ts_ns = 0  # type: ignore[misc]


def test_one_reader_for_both_sides():
    import converters.kineto as conv
    import xsim_trace.validate.measured as measured
    from xsim_trace.io import kineto

    assert conv.read_capture is kineto.read_capture is measured.read_capture
