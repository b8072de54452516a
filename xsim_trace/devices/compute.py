"""Compute model: kernel time from FLOPs and bytes (roofline by kernel class), and scaling of a
kernel measured on one device to another device or another TP degree.

Roofline: ``t = max(flops / (peak * eff_class), bytes / (hbm_bw * mem_eff)) + kernel_overhead_ns``.
Compute-bound classes (GEMM, attention) use the device's achievable fraction of the dense peak;
memory-bound classes (elementwise, norm, softmax, reduction, embedding, memcpy) are timed by bytes.
"""

from __future__ import annotations

import enum
import math

from xsim_trace.devices.catalog import get_device
from xsim_trace.devices.spec import DeviceSpec, Precision
from xsim_trace.errors import ConfigError


class KernelClass(enum.Enum):
    GEMM = "gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    NORM = "norm"
    SOFTMAX = "softmax"
    REDUCTION = "reduction"
    EMBEDDING = "embedding"
    MEMCPY = "memcpy"
    OPTIMIZER = "optimizer"
    OTHER = "other"

    @property
    def compute_bound(self) -> bool:
        return self in (KernelClass.GEMM, KernelClass.ATTENTION)

    @classmethod
    def parse(cls, value: "str | KernelClass") -> "KernelClass":
        if isinstance(value, KernelClass):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            known = ", ".join(k.value for k in cls)
            raise ConfigError(f"unknown kernel class {value!r}; expected one of {known}", field="kernel_class") from None


def classify_kernel(name: str) -> KernelClass:
    """Best-effort class of a captured kernel from its name (cuBLAS/CUTLASS, flash, norms, ...)."""
    n = name.lower()
    if any(k in n for k in ("flash", "fmha", "attention", "attn", "sdpa")):
        return KernelClass.ATTENTION
    if any(k in n for k in ("gemm", "matmul", "cutlass", "sm80_xmma", "sm90_xmma", "cublas", "addmm", "linear", "bmm", "nvjet")):
        return KernelClass.GEMM
    if any(k in n for k in ("layernorm", "layer_norm", "rmsnorm", "rms_norm", "batchnorm", "batch_norm")):
        return KernelClass.NORM
    if "softmax" in n:
        return KernelClass.SOFTMAX
    if any(k in n for k in ("adam", "optimizer", "multi_tensor")):
        return KernelClass.OPTIMIZER
    if any(k in n for k in ("embedding", "gather", "index_select")):
        return KernelClass.EMBEDDING
    if any(k in n for k in ("memcpy", "memset", "copy_")):
        return KernelClass.MEMCPY
    if any(k in n for k in ("reduce", "sum", "mean", "norm")):
        return KernelClass.REDUCTION
    if any(k in n for k in ("elementwise", "vectorized", "unrolled", "gelu", "silu", "relu", "dropout", "add", "mul")):
        return KernelClass.ELEMENTWISE
    return KernelClass.OTHER


def _device(device: "str | DeviceSpec") -> DeviceSpec:
    return get_device(device)


def compute_rate(device: "str | DeviceSpec", kernel_class: "str | KernelClass", precision: "str | Precision" = "bf16") -> float:
    """Achievable FLOP/s of ``kernel_class`` on ``device``."""
    dev = _device(device)
    kc = KernelClass.parse(kernel_class)
    eff = dev.attention_efficiency if kc is KernelClass.ATTENTION else dev.gemm_efficiency
    if not kc.compute_bound:
        eff = dev.gemm_efficiency * 0.25  # vector units: a small fraction of the tensor-core peak
    return dev.peak_flops(precision) * eff


def memory_rate(device: "str | DeviceSpec") -> float:
    """Achievable HBM bytes/s on ``device``."""
    dev = _device(device)
    return dev.hbm_bytes_per_s * dev.mem_efficiency


def kernel_time_ns(
    kernel_class: "str | KernelClass",
    flops: float,
    bytes_accessed: float,
    device: "str | DeviceSpec",
    precision: "str | Precision" = "bf16",
    *,
    include_overhead: bool = True,
) -> int:
    """Roofline time in integer ns of one kernel (``flops`` FLOPs, ``bytes_accessed`` HBM bytes)."""
    if flops < 0 or bytes_accessed < 0:
        raise ConfigError(f"expected non-negative flops and bytes, found {flops}, {bytes_accessed}", field="kernel")
    dev = _device(device)
    t_compute = flops / compute_rate(dev, kernel_class, precision) if flops else 0.0
    t_memory = bytes_accessed / memory_rate(dev) if bytes_accessed else 0.0
    t = max(t_compute, t_memory) * 1e9
    if include_overhead:
        t += dev.kernel_overhead_ns
    return int(math.ceil(t))


def class_ratio(from_dev: "str | DeviceSpec", to_dev: "str | DeviceSpec", kernel_class: "str | KernelClass", precision: "str | Precision" = "bf16") -> float:
    """Calibrated time ratio t(to)/t(from) for a kernel whose FLOPs and bytes are unknown: ratio of
    achievable compute rates for compute-bound classes, of achievable HBM bandwidth otherwise."""
    a, b = _device(from_dev), _device(to_dev)
    kc = KernelClass.parse(kernel_class)
    if kc.compute_bound:
        return compute_rate(a, kc, precision) / compute_rate(b, kc, precision)
    if kc is KernelClass.OTHER:  # unknown mix: geometric mean of both ratios
        return math.sqrt((compute_rate(a, KernelClass.GEMM, precision) / compute_rate(b, KernelClass.GEMM, precision)) * (memory_rate(a) / memory_rate(b)))
    return memory_rate(a) / memory_rate(b)


def scale_kernel_ns(
    duration_ns: int,
    from_dev: "str | DeviceSpec",
    to_dev: "str | DeviceSpec",
    kernel_class: "str | KernelClass",
    flops: float | None = None,
    bytes: float | None = None,  # noqa: A002 - the documented keyword
    precision: "str | Precision" = "bf16",
) -> int:
    """Time on ``to_dev`` of a kernel measured at ``duration_ns`` on ``from_dev``.

    With FLOPs and/or bytes: the measured time is multiplied by the ratio of the two roofline
    times (so the measurement's own inefficiency carries over); without: by :func:`class_ratio`.
    The fixed per-kernel overhead is not scaled.
    """
    if duration_ns < 0:
        raise ConfigError(f"expected a non-negative duration, found {duration_ns}", field="duration_ns")
    a, b = _device(from_dev), _device(to_dev)
    if a == b or duration_ns == 0:
        return int(duration_ns)
    if flops or bytes:
        ta = kernel_time_ns(kernel_class, flops or 0, bytes or 0, a, precision, include_overhead=False)
        tb = kernel_time_ns(kernel_class, flops or 0, bytes or 0, b, precision, include_overhead=False)
        ratio = tb / ta if ta > 0 else class_ratio(a, b, kernel_class, precision)
    else:
        ratio = class_ratio(a, b, kernel_class, precision)
    fixed_a = min(duration_ns, a.kernel_overhead_ns)
    fixed_b = b.kernel_overhead_ns * (fixed_a / a.kernel_overhead_ns) if a.kernel_overhead_ns else 0.0
    return int(round((duration_ns - fixed_a) * ratio + fixed_b))


def tp_scale_ns(
    duration_ns: int,
    from_tp: int,
    to_tp: int,
    kernel_class: "str | KernelClass" = KernelClass.GEMM,
    *,
    device: "str | DeviceSpec | None" = None,
    flops: float | None = None,
    bytes: float | None = None,  # noqa: A002
    precision: "str | Precision" = "bf16",
) -> int:
    """Time of a TP-sharded kernel when the TP degree changes from ``from_tp`` to ``to_tp``.

    Megatron shards GEMMs and attention heads ``1/tp`` per rank, so work scales by from_tp/to_tp.
    With a device and the kernel's FLOPs/bytes, the rooflines at both shard sizes are compared (a
    smaller shard keeps its fixed overhead and may turn memory bound); otherwise the variable part
    scales linearly.  Callers leave replicated kernels (norms without SP, the optimizer) unscaled.
    """
    if from_tp <= 0 or to_tp <= 0:
        raise ConfigError(f"expected positive TP degrees, found {from_tp} -> {to_tp}", field="tp")
    if from_tp == to_tp:
        return int(duration_ns)
    factor = from_tp / to_tp
    if device is not None and (flops or bytes):
        dev = _device(device)
        ta = kernel_time_ns(kernel_class, flops or 0, bytes or 0, dev, precision)
        tb = kernel_time_ns(kernel_class, (flops or 0) * factor, (bytes or 0) * factor, dev, precision)
        return int(round(duration_ns * tb / ta))
    overhead = _device(device).kernel_overhead_ns if device is not None else 0
    fixed = min(duration_ns, overhead)
    return int(round((duration_ns - fixed) * factor + fixed))


def gemm_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (m x k) @ (k x n) matrix product: one multiply and one add per term."""
    return 2 * m * n * k


def gemm_bytes(m: int, n: int, k: int, bytes_per_element: int = 2) -> int:
    """HBM bytes of a GEMM reading A and B once and writing C once."""
    return (m * k + k * n + m * n) * bytes_per_element
