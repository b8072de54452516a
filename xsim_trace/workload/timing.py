"""Durations of the generator's ops on a device: roofline compute, alpha-beta communication, and
a host-launch floor (a kernel cannot finish before the CPU has issued it)."""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.devices.compute import KernelClass, kernel_time_ns
from xsim_trace.devices.spec import DeviceSpec, Precision
from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.layout import Layout
from xsim_trace.workload.ops import CommKind, CommOp, ComputeOp, Op


@dataclass(frozen=True)
class Timer:
    device: DeviceSpec
    links: LinkModel
    fw: Framework

    @property
    def layout(self) -> Layout:
        return Layout(self.fw)

    def gpu_ns(self, op: ComputeOp) -> int:
        prec = self.fw.precision if op.kernel_class is KernelClass.GEMM else Precision.BF16
        t = kernel_time_ns(op.kernel_class, op.flops, op.bytes_accessed, self.device, prec, include_overhead=False)
        return t + op.kernels * self.device.kernel_overhead_ns

    def host_ns(self, op: Op) -> int:
        kernels = op.kernels if isinstance(op, ComputeOp) else 1
        return kernels * self.device.host_op_overhead_ns

    def group(self, kind: CommKind, rank: int) -> tuple[int, ...]:
        lay = self.layout
        return {
            CommKind.TP: lay.tp_group,
            CommKind.CP: lay.cp_group,
            CommKind.EP: lay.ep_group,
            CommKind.DP: lay.dp_group,
            CommKind.PP: lay.pp_group,
        }[kind](rank)

    def comm_ns(self, op: CommOp, rank: int) -> int:
        members = self.group(op.kind, rank)
        return self.links.collective_ns(op.collective, op.size_bytes, len(members), self.links.spans_nodes(members))

    def op_ns(self, op: Op, rank: int) -> int:
        """Time the op occupies its stream: max(device time, host launch floor)."""
        if isinstance(op, CommOp):
            return max(self.comm_ns(op, rank), self.host_ns(op))
        return max(self.gpu_ns(op), self.host_ns(op))
