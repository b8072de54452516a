"""Shape-aware kernel efficiency: GEMMs by M, N, K, groups and precision (wave quantization of
output tiles over the SMs, a K-depth ramp), flash attention by sequence, head dim, causal mask and
direction, and the extra HBM traffic of fp8 GEMMs (Transformer Engine's cast / transpose / amax).

The device catalog gives each device's efficiencies on large, full-wave problems (published
measurements, ``source`` in ``data/devices.yaml``); the functions here scale them by shape:

- GEMM: ``eff = gemm_efficiency(precision) * tiles(M, N) / (waves * SMs) * tile rating
  * K / (K + K_HALF)``, normalized so an 8192^3 GEMM gets exactly the catalog value.  cuBLAS picks
  its tile per shape, so the best of a few tile candidates is used (smaller tiles lose
  per-tile efficiency but quantize less).
- Flash attention: ``eff = attention_efficiency * kv / (kv + attention_half_seq) * head-dim factor``
  with ``kv`` the keys each query sees (half the sequence under a causal mask, whose FLOPs are
  half the dense count); backward at ``attention_bwd_efficiency``.
- fp8 (Transformer Engine, delayed scaling): forward casts the activation to fp8 and writes its
  transposed copy for the weight gradient (read 2 + write 1 + 1 bytes per element), the data-grad
  GEMM casts and transposes the output gradient (4 bytes per element); each cast is one extra
  kernel (amax fused).  fp8 weights are cached across micro-batches (not charged).
"""

from __future__ import annotations

import functools
import math

from xsim_trace.devices.spec import DEFAULT_ATTENTION_BWD_RATIO, DeviceSpec, Precision

#: K at which a GEMM's main loop reaches half its steady-state rate (prologue/epilogue amortization)
K_HALF = 128
#: reference GEMM shape of the catalog's efficiencies (M = N = K)
REFERENCE_GEMM = 8192
#: output tile candidates (rows, cols, relative per-tile efficiency): big tiles are the most efficient
TILES = ((128, 256, 1.0), (256, 128, 1.0), (128, 128, 0.9), (64, 128, 0.75))
#: flash attention reaches its peak at head dim 128 (and 256); smaller head dims lose in proportion to
#: sqrt(head_dim / 128) (FlashAttention-3 paper, Fig. 5: hdim 64 runs ~0.7x hdim 128 at long sequences)
ATTENTION_REF_HEAD_DIM = 128
#: bytes per element of Transformer Engine's fp8 casts: bf16 read + fp8 write + fp8 transposed write
FP8_CAST_BYTES_PER_ELEMENT = 4
FP8_CAST_KERNELS = 1


def _wave_factor(m: int, n: int, groups: int, sms: int) -> float:
    """Best over tile candidates of tile rating x (tiles / tiles rounded up to full waves)."""
    if sms <= 0:
        return 1.0
    best = 0.0
    for tm, tn, rating in TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * groups
        waves = math.ceil(tiles / sms)
        # partial tiles at the M / N edges do work on padding
        used = (m * n * groups) / (tiles * tm * tn)
        best = max(best, rating * used * tiles / (waves * sms))
    return best


def _k_factor(k: int) -> float:
    return k / (k + K_HALF)


@functools.lru_cache(maxsize=64)
def _reference_factor(sms: int) -> float:
    r = REFERENCE_GEMM
    return _wave_factor(r, r, 1, sms) * _k_factor(r)


def gemm_peak_efficiency(device: DeviceSpec, precision: "Precision | str") -> float:
    """The catalog's large-GEMM efficiency for ``precision``."""
    if Precision.parse(precision) is Precision.FP8 and device.fp8_tflops and device.fp8_gemm_efficiency:
        return device.fp8_gemm_efficiency
    return device.gemm_efficiency


def gemm_efficiency(device: DeviceSpec, m: int, n: int, k: int, precision: "Precision | str" = "bf16",
                    groups: int = 1) -> float:
    """Achievable fraction of the dense peak of ``groups`` GEMMs of (m x k) @ (k x n) run as one
    (grouped / batched) kernel."""
    if min(m, n, k, groups) <= 0:
        return gemm_peak_efficiency(device, precision)
    shape = _wave_factor(m, n, groups, device.sms) * _k_factor(k) / _reference_factor(device.sms)
    return gemm_peak_efficiency(device, precision) * min(1.0, shape)


def attention_efficiency(device: DeviceSpec, seq_kv: int, head_dim: int, *, causal: bool, backward: bool) -> float:
    """Achievable fraction of the dense peak of a flash-attention kernel, on the FLOPs it really
    does (a causal mask halves the dense count)."""
    peak = device.attention_efficiency
    if backward:
        peak = device.attention_bwd_efficiency or peak * DEFAULT_ATTENTION_BWD_RATIO
    kv = max(1, seq_kv // 2 if causal else seq_kv)
    ramp = kv / (kv + device.attention_half_seq)
    dim = min(1.0, math.sqrt(max(head_dim, 1) / ATTENTION_REF_HEAD_DIM))
    return peak * ramp * dim


def fp8_cast_bytes(m: int, n: int, k: int, role: str) -> int:
    """Extra HBM bytes of Transformer Engine's fp8 casts for a GEMM of (m x k) @ (k x n): the
    forward casts its (m x k) input, the data-grad GEMM the (m x k) output gradient it reads
    (its own m, k: dX = dY @ W^T); the weight-grad GEMM reuses the transposed copies."""
    if role in ("fwd", "dgrad"):
        return FP8_CAST_BYTES_PER_ELEMENT * m * k
    return 0


def shaped_time_ns(kernel_class, flops: float, bytes_accessed: float, device: DeviceSpec,
                   precision: "Precision | str" = "bf16", shape: tuple[int, ...] = (), role: str = "fwd") -> tuple[int, int]:
    """(ns without fixed launch overhead, extra kernels) of one kernel (or one grouped kernel) with
    a known shape: roofline of the shape's compute efficiency against HBM bytes, plus the fp8 cast
    traffic and its kernels.  Without a shape: the class roofline of :mod:`xsim_trace.devices.compute`."""
    from xsim_trace.devices.compute import KernelClass, kernel_time_ns, memory_rate

    kc = KernelClass.parse(kernel_class)
    prec = Precision.parse(precision)
    if not shape or kc not in (KernelClass.GEMM, KernelClass.ATTENTION):
        return kernel_time_ns(kc, flops, bytes_accessed, device, prec, include_overhead=False), 0
    extra_bytes = extra_kernels = 0
    if kc is KernelClass.GEMM:
        m, n, k, groups = shape
        rate = device.peak_flops(prec) * gemm_efficiency(device, m, n, k, prec, groups)
        work = flops
        if prec is Precision.FP8:
            extra_bytes = fp8_cast_bytes(m, n, k, role) * groups
            extra_kernels = FP8_CAST_KERNELS if extra_bytes else 0
    else:
        _, seq_kv, head_dim, causal = shape
        rate = device.peak_flops(Precision.BF16) * attention_efficiency(
            device, seq_kv, head_dim, causal=bool(causal), backward=role == "bwd")
        work = flops / 2 if causal else flops
    t_compute = work / rate if work else 0.0
    mem = memory_rate(device)
    t = max(t_compute, bytes_accessed / mem) + extra_bytes / mem
    return int(math.ceil(t * 1e9)), extra_kernels
