"""Shape-aware kernel model: GEMM wave quantization and K ramp, flash attention by sequence / head
dim / causal / direction, fp8 cast traffic; the catalog's values hold at the reference shape."""

from __future__ import annotations

import pytest

from xsim_trace.devices import get_device
from xsim_trace.devices.kernels import (
    attention_efficiency,
    fp8_cast_bytes,
    gemm_efficiency,
    shaped_time_ns,
)

H100, A100 = get_device("H100"), get_device("A100")


def test_reference_shape_gets_the_catalog_value():
    assert gemm_efficiency(H100, 8192, 8192, 8192) == pytest.approx(H100.gemm_efficiency)
    assert gemm_efficiency(H100, 8192, 8192, 8192, "fp8") == pytest.approx(H100.fp8_gemm_efficiency)
    assert H100.source and A100.source and H100.sms == 132 and A100.sms == 108


def test_wave_quantization_and_small_k_lower_efficiency():
    full = gemm_efficiency(H100, 4096, 4096, 4096)
    # one tile row past a full wave: the last wave runs almost empty
    assert gemm_efficiency(H100, 128 * 133, 256, 4096) < 0.7 * gemm_efficiency(H100, 128 * 132, 256, 4096)
    assert gemm_efficiency(H100, 4096, 4096, 256) < 0.8 * full
    assert gemm_efficiency(A100, 1024, 1024, 1024) < gemm_efficiency(A100, 8192, 8192, 8192)
    # grouped GEMMs fill the waves together
    assert gemm_efficiency(H100, 256, 1024, 4096, groups=8) > gemm_efficiency(H100, 256, 1024, 4096)


def test_attention_ramps_with_sequence_and_head_dim_and_backward_is_slower():
    fwd = [attention_efficiency(H100, s, 128, causal=False, backward=False) for s in (512, 2048, 16384)]
    assert fwd[0] < fwd[1] < fwd[2] <= H100.attention_efficiency
    assert attention_efficiency(H100, 2048, 64, causal=False, backward=False) < fwd[1]
    assert attention_efficiency(H100, 2048, 128, causal=True, backward=False) < fwd[1]
    assert attention_efficiency(H100, 2048, 128, causal=False, backward=True) < fwd[1]


def test_fp8_gemm_is_faster_than_bf16_but_far_from_twice_with_its_casts():
    m = n = k = 4096
    flops, nbytes = 2 * m * n * k, (m * k + k * n + m * n) * 2
    bf16, _ = shaped_time_ns("gemm", flops, nbytes, H100, "bf16", (m, n, k, 1), "fwd")
    fp8, extra = shaped_time_ns("gemm", flops, nbytes, H100, "fp8", (m, n, k, 1), "fwd")
    assert extra == 1 and 1.1 < bf16 / fp8 < 1.6
    assert fp8_cast_bytes(m, n, k, "wgrad") == 0 and fp8_cast_bytes(m, n, k, "dgrad") == 4 * m * k


def test_causal_attention_does_half_the_counted_work():
    shape_c, shape_n = (32, 4096, 128, 1), (32, 4096, 128, 0)
    flops = 4 * 4096 * 4096 * 128 * 32
    causal, _ = shaped_time_ns("attention", flops, 0, H100, "bf16", shape_c, "fwd")
    dense, _ = shaped_time_ns("attention", flops, 0, H100, "bf16", shape_n, "fwd")
    assert 0.45 < causal / dense < 0.6
