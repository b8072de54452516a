"""Durations of the generator's ops on a device: roofline compute, alpha-beta communication, and
the host (CPU) time to issue each compute op.

The host thread runs ahead of the device: a pass takes max(host issue time, device time) when
nothing synchronizes in between (``pass_ns``); the generator reproduces this exactly by emitting
CPU launch nodes that the device nodes depend on.  Collectives cost no modelled host time (an
NCCL launch is cheap next to a framework module's Python cost, which is what the per-op host
overhead stands for)."""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.devices.kernels import shaped_time_ns
from xsim_trace.devices.spec import DeviceSpec, Precision
from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.families import FrameworkFamily
from xsim_trace.workload.host import HostModel
from xsim_trace.workload.layout import Layout
from xsim_trace.workload.ops import CommKind, CommOp, ComputeOp, Op, WaitOp


@dataclass(frozen=True)
class Timer:
    device: DeviceSpec
    links: LinkModel
    fw: Framework
    #: per-kind scaling of the per-call host cost; None = the family's (or a plain per-call model
    #: without a family)
    host: HostModel | None = None
    #: the framework family (host cost per module call, CUDA graphs, optimizer launches, per-step
    #: host work, gradient element size).  None = bare timing: host cost only from the device
    #: catalog's ``host_op_overhead_ns`` (0 for every built-in device), Megatron's other defaults.
    family: FrameworkFamily | None = None

    @property
    def host_model(self) -> HostModel:
        if self.host is not None:
            return self.host
        return self.family.host if self.family is not None else HostModel()

    @property
    def host_call_ns(self) -> float:
        """Host cost of one framework module call (device override, else the family's)."""
        if self.family is None:
            return float(self.device.host_op_overhead_ns)
        return self.family.module_host_ns(self.device.host_op_overhead_ns)

    @property
    def grad_reduce_bytes(self) -> int:
        return self.family.grad_reduce_bytes if self.family is not None else 4

    @property
    def layout(self) -> Layout:
        return Layout(self.fw)

    def gpu_ns(self, op: ComputeOp) -> int:
        """Kernel time of a compute op: shape-aware (devices.kernels) when the op has a shape,
        class roofline otherwise; linear layers run in the framework's precision (fp8 adds its
        cast kernels), other GEMMs in bf16."""
        prec = self.fw.precision if op.linear else Precision.BF16
        t, extra_kernels = shaped_time_ns(op.kernel_class, op.flops, op.bytes_accessed, self.device, prec,
                                          op.shape, op.role)
        return t + (op.kernels + extra_kernels * op.kernels) * self.device.kernel_overhead_ns

    def host_ns(self, op: Op) -> int:
        if isinstance(op, (CommOp, WaitOp)):
            return 0
        factor = self.host_model.factor(op.host_group, self.fw.ep, self.fw.deterministic,
                                        self.fw.transformer_impl == "local")
        return int(round(op.kernels * op.host_weight * self.host_call_ns * factor))

    def group(self, kind: CommKind, rank: int) -> tuple[int, ...]:
        lay = self.layout
        return {
            CommKind.TP: lay.tp_group,
            CommKind.CP: lay.cp_group,
            CommKind.EP: lay.ep_group,
            CommKind.DP: lay.dp_group,
            CommKind.PP: lay.pp_group,
        }[kind](rank)

    def op_group(self, op: CommOp, rank: int) -> tuple[int, ...]:
        """The process group ``op`` runs on for ``rank``: its kind's, or the one it names."""
        if op.group == "expert_dp":
            return self.layout.expert_dp_group(rank)
        return self.group(op.kind, rank)

    def ring_peers(self, kind: CommKind, rank: int) -> tuple[int, int]:
        """(next, previous) rank of ``rank`` in its ``kind`` group, the ring a ring step runs on."""
        members = self.group(kind, rank)
        i = members.index(rank)
        return members[(i + 1) % len(members)], members[(i - 1) % len(members)]

    def comm_ns(self, op: CommOp, rank: int) -> int:
        if op.ring:
            nxt, _ = self.ring_peers(op.kind, rank)
            return self.links.p2p_ns(op.size_bytes, self.links.spans_nodes((rank, nxt)))
        members = self.op_group(op, rank)
        return self.links.collective_ns(op.collective, op.size_bytes, len(members), self.links.spans_nodes(members))

    def device_ns(self, op: Op, rank: int) -> int:
        """Time the op occupies its device stream."""
        if isinstance(op, WaitOp):
            return 0
        if isinstance(op, CommOp):
            return self.comm_ns(op, rank)
        return self.gpu_ns(op)

    def op_ns(self, op: Op, rank: int) -> int:
        """Device time of one op (host issue time not included; see :meth:`pass_ns`)."""
        return self.device_ns(op, rank)

    def pass_ns(self, ops: "list[Op]", rank: int, *, skip_async: "frozenset[CommKind]" = frozenset()) -> int:
        """A sequence issued by one host thread onto one compute stream and one comm stream: the
        later of the host finishing its issue loop, the compute chain and the comm stream.  A
        compute op starts no earlier than its issue and the previous op; a blocking collective also
        waits for the comm stream; an asynchronous one starts on the comm stream when the chain has
        reached it and only the op after a :class:`WaitOp` of its name waits for it (exact for the
        generator's rank traces on a contention-free network).  Asynchronous ops of the kinds in
        ``skip_async`` are left out (their exposed time is the difference)."""
        host = device = comm_free = wait_until = 0
        pending: dict[str, int] = {}
        for op in ops:
            if isinstance(op, WaitOp):
                wait_until = max(wait_until, pending.pop(op.name, 0))
                continue
            host += self.host_ns(op)
            if isinstance(op, CommOp):
                if op.asynchronous:
                    if op.kind not in skip_async:
                        comm_free = max(comm_free, device, host) + self.comm_ns(op, rank)
                        pending[op.name] = comm_free
                    continue
                device = comm_free = max(device, host, wait_until, comm_free) + self.comm_ns(op, rank)
            else:
                device = max(device, host, wait_until) + self.gpu_ns(op)
            wait_until = 0
        return max(device, comm_free)
