"""Device catalog (public spec-sheet peaks, user-extensible YAML) and the compute model that times
kernels from FLOPs/bytes and scales measured kernels between devices and TP degrees."""

from xsim_trace.devices.catalog import Catalog, catalog_for, default_catalog, get_device, load_catalog, normalize_name
from xsim_trace.devices.compute import (
    KernelClass,
    class_ratio,
    classify_kernel,
    compute_rate,
    gemm_bytes,
    gemm_flops,
    kernel_time_ns,
    memory_rate,
    scale_kernel_ns,
    tp_scale_ns,
)
from xsim_trace.devices.spec import DeviceSpec, Precision

__all__ = [
    "Catalog",
    "DeviceSpec",
    "KernelClass",
    "Precision",
    "class_ratio",
    "classify_kernel",
    "compute_rate",
    "default_catalog",
    "gemm_bytes",
    "gemm_flops",
    "get_device",
    "kernel_time_ns",
    "load_catalog",
    "catalog_for",
    "memory_rate",
    "normalize_name",
    "scale_kernel_ns",
    "tp_scale_ns",
]
