"""One accelerator's public specification and its achievable-efficiency factors."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from xsim_trace.errors import ConfigError
from xsim_trace.units import GBps_to_bytes_per_s


class Precision(enum.Enum):
    """Arithmetic precision of matrix math."""

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def bytes_per_element(self) -> int:
        return {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}[self.value]

    @classmethod
    def parse(cls, value: "str | Precision", *, field_name: str = "precision") -> "Precision":
        if isinstance(value, Precision):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            known = ", ".join(p.value for p in cls)
            raise ConfigError(f"unknown precision {value!r}; expected one of {known}", field=field_name) from None


#: default achievable fractions of peak when a catalog entry does not override them
DEFAULT_GEMM_EFFICIENCY = 0.75
DEFAULT_ATTENTION_EFFICIENCY = 0.55
DEFAULT_MEM_EFFICIENCY = 0.80
DEFAULT_KERNEL_OVERHEAD_NS = 2_000
DEFAULT_HOST_OP_OVERHEAD_NS = 0
#: flash attention: sequence (keys per query) at which the kernel reaches half its peak efficiency
DEFAULT_ATTENTION_HALF_SEQ = 256
#: flash attention backward efficiency relative to the forward's when a device does not give it
DEFAULT_ATTENTION_BWD_RATIO = 0.8


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """Peak numbers are dense (no sparsity) per device.  ``*_tflops`` = 1e12 FLOP/s."""

    name: str
    vendor: str
    arch: str
    fp16_tflops: float
    bf16_tflops: float
    fp32_tflops: float
    hbm_bw_GBps: float
    hbm_GiB: float
    nvlink_bidir_GBps: float
    tf32_tflops: float = 0.0
    pcie_GBps: float = 0.0  # host link, one direction (PCIe 3.0 x16 ~15.75, 4.0 x16 ~31.5); 0 = not stated
    fp8_tflops: float = 0.0
    gemm_efficiency: float = DEFAULT_GEMM_EFFICIENCY
    attention_efficiency: float = DEFAULT_ATTENTION_EFFICIENCY
    mem_efficiency: float = DEFAULT_MEM_EFFICIENCY
    kernel_overhead_ns: int = DEFAULT_KERNEL_OVERHEAD_NS
    host_op_overhead_ns: int = DEFAULT_HOST_OP_OVERHEAD_NS
    #: streaming multiprocessors (compute units): GEMM wave quantization; 0 = not modelled
    sms: int = 0
    #: achievable fraction of the fp8 dense peak on large GEMMs; 0 = gemm_efficiency
    fp8_gemm_efficiency: float = 0.0
    #: flash attention backward, fraction of peak; 0 = DEFAULT_ATTENTION_BWD_RATIO x attention_efficiency
    attention_bwd_efficiency: float = 0.0
    #: keys per query at which flash attention reaches half its peak efficiency
    attention_half_seq: int = DEFAULT_ATTENTION_HALF_SEQ
    #: where the efficiency numbers come from (published measurements)
    source: str = field(default="", compare=False)
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def peak_flops(self, precision: "Precision | str" = Precision.BF16) -> float:
        """Peak dense FLOP/s for ``precision``; falls back to the nearest supported precision
        (bf16 -> fp16 on Volta, fp8 -> bf16 before Hopper, tf32 -> fp32)."""
        p = Precision.parse(precision)
        table = {
            Precision.FP8: self.fp8_tflops or self.bf16_tflops or self.fp16_tflops,
            Precision.BF16: self.bf16_tflops or self.fp16_tflops,
            Precision.FP16: self.fp16_tflops or self.bf16_tflops,
            Precision.TF32: self.tf32_tflops or self.fp32_tflops,
            Precision.FP32: self.fp32_tflops,
        }
        return table[p] * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return GBps_to_bytes_per_s(self.hbm_bw_GBps)

    @property
    def hbm_bytes(self) -> int:
        return int(self.hbm_GiB * 2**30)

    @property
    def nvlink_unidir_GBps(self) -> float:
        return self.nvlink_bidir_GBps / 2.0


def require_spec(value: object, what: str) -> None:
    """Devices travel resolved: a name in a field typed DeviceSpec would be looked up again later, in a
    catalog that may lack the run's ``--device-file`` devices.  Raises TypeError (a programming error)."""
    if not isinstance(value, DeviceSpec):
        raise TypeError(f"{what}: expected a DeviceSpec (resolve names once, e.g. devices.catalog_for(device_file)"
                        f".get(name)), found {type(value).__name__} {value!r:.40}")
