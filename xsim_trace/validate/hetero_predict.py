"""Predicted iteration time (and out-of-memory verdict) of a heterogeneous Megatron-DeepSpeed pipeline run.

The closed form of DeepSpeed's ``PipelineEngine`` (AMP's Megatron-DeepSpeed v1.1.5 and Sailor's fork) for a
deployment whose stages and data-parallel replicas each have their own GPU type and TP degree
(:class:`~xsim_trace.validate.hetero_rows.RowPlan`):

- per (stage, replica), the forward and backward pass of one micro-batch: the workload generator's ops for the
  stage's blocks (plus the embedding on the first and the tied head on the last stage), each timed on the
  replica's own device by :class:`~xsim_trace.workload.timing.Timer` under the ``deepspeed`` framework family
  (host cost per module call, fp32 gradient all-reduce), TP all-reduces priced over the node's link;
- DeepSpeed's ``TrainSchedule`` (1F1B) instruction stream per stage and replica, with blocking activation and
  gradient transfers between stages (NCCL send/recv or a two-rank broadcast: a rendezvous holding both ranks),
  in the testbed's training dtype, with AMP's attention mask riding along, sharing the NICs with the other TP
  ranks and with the replicas that cross the same NIC at the same step (:class:`PipeSoftware`);
- after a stage's last backward (or, behind Sailor's world barrier, the last stage's): the fp32 gradient
  all-reduce of that stage over its replicas (one ring per TP rank, sharing each node's NICs), the tied-embedding
  all-reduce between the first and the last stage where the head is tied (AMP), and the optimizer step
  (overflow check, unscale, gradient norm, Adam, fp16 copy: HBM bound);
- the iteration is the latest stage's end (rank 0's timer spans the whole synchronous step).

Links come from the row's cluster description (``xsim_trace/data/clusters``): per node the intra-node rate (NVLink
or the PCIe host link, each at its achievable fraction) and the NICs (Ethernet: the line rate less TCP/IP framing,
capped by the fitted ceiling of NCCL's socket path; :func:`nic_achievable_gbps`).
The constants that are not spec-sheet facts are the fields of :class:`HeteroCalibration`; tools/accuracy_hetero.py
fits them on the homogeneous rows only.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from xsim_trace.cluster import load_cluster
from xsim_trace.devices import get_device
from xsim_trace.devices.compute import KernelClass, kernel_time_ns
from xsim_trace.devices.spec import DeviceSpec, Precision
from xsim_trace.network.nccl.ethernet import ethernet_payload_gbps, tcp_framing
from xsim_trace.units import gbps_to_GBps
from xsim_trace.validate.hetero_rows import HeteroRow, Placement, RowError, RowPlan, RowStage
from xsim_trace.validate.layer_profile import find_layer_times
from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.families import get_family
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.model import ModelSpec as WorkloadModel
from xsim_trace.workload.pipeline_hetero import (
    OPTIMIZER_BYTES_PER_PARAM,
    BlockDims,
    ExchangeOrder,
    StageContent,
    schedule_1f1b,
    stage_memory_bytes,
    stage_params,
    unbuildable_reason,
)
from xsim_trace.workload.ops import (
    EAGER_OP_CALLS,
    ComputeOp,
    embedding_backward,
    embedding_forward,
    head_backward,
    head_forward,
    layer_backward,
    layer_forward,
)
from xsim_trace.workload.timing import Timer

#: cluster presets by a word of the ``cluster`` column (first match wins)
CLUSTER_KEYWORDS = (("p3.8xlarge", "aws-p3-g4dn"), ("g4dn", "aws-g4dn-t4"), ("clariden", "alps-gh200"),
                    ("gh200", "alps-gh200"), ("mit cluster", "mit-rtx"))
#: testbed (software stack + host CPU) of each preset, for the per-testbed host cost: AMP's Megatron-DeepSpeed
#: v1.1.5 on AWS, Sailor's framework on Alps; the MIT testbed runs Sailor's framework and has no homogeneous row,
#: so it takes the Alps value (its CPU is not stated)
TESTBED = {"aws-p3-g4dn": "aws", "aws-g4dn-t4": "aws", "alps-gh200": "alps", "mit-rtx": "alps"}


@dataclass(frozen=True, slots=True)
class PipeSoftware:
    """What the training software of a testbed does, as read in its published artifact; the closed form follows it.

    - AMP (DachengLi1/AMP, DeepSpeed 0.3 + Megatron v1.1.5 ``GPT2ModelPipe``): fp16 training, the head tied to the
      word embedding (``TiedLayerSpec``: the tied weight's fp16 gradient is all-reduced between the first and the
      last stage), activations partitioned over TP ranks, gradients sent whole by every TP rank, no barrier.
    - Sailor (eth-easl/sailor, its own ``deepspeed/pipe_engine.py`` over Megatron-DeepSpeed's ``OPTModelPipe``):
      fp32 training (no ``--fp16`` and no fp16 section in the run and profiling scripts, ``validate.py`` simulates
      with ``fp16=False``; the published per-layer profiles run at fp32 speed), so every stage-to-stage tensor is
      4 B per element; the head is a plain ``LayerSpec(OPTLMHeadPipe)`` with its own ``lm_head`` weight (no tied
      gradient to reduce); activations and gradients both partitioned; and ``_exec_reduce_tied_grads`` ends with a
      world ``dist.barrier()``, so every stage's DP all-reduce starts when the last stage reaches ReduceGrads.

    ``exchange_order`` is the DeepSpeed release's order of the two exchanges in a ``TrainSchedule`` step
    (:class:`~xsim_trace.workload.pipeline_hetero.ExchangeOrder`): AMP's DeepSpeed 0.3 receives the activation
    before sending the previous gradient (and sends the previous activation before receiving the gradient);
    Sailor's engine (written against DeepSpeed >= 0.14: ``deepspeed.accelerator``, ``BF16_Optimizer``,
    ``bfloat16_immediate_grad_update``) runs on the schedule reordered in 2023 (issue #2800), sends first.
    """

    dtype_bytes: int  # bytes per element of the stage-to-stage tensors and of the tied weight's gradient
    grad_partitioned: bool  # DeepSpeed's is_grad_partitioned
    tied_head: bool  # a tied-embedding gradient all-reduce between the first and the last stage
    barrier_before_reduce: bool  # a world barrier before ReduceGrads
    #: the causal attention mask travels forward with the activation (Megatron v1.1.5's GPT2ModelPipe passes
    #: ``(hidden, mask)`` between its layers; DeepSpeed 0.3's SendActivation casts the [1, 1, s, s] bool mask to
    #: fp16 and sends it, unpartitioned, from every TP rank); Sailor keeps the mask in ``args.attn_mask``
    forward_mask: bool = False
    exchange_order: ExchangeOrder = ExchangeOrder.ACTIVATION_FIRST
    #: bytes per attention-score element the unfused core moves beyond the workload model's softmax + dropout op
    #: (forward 3, backward 6 bytes at 2 B per element), forward and backward, with one more kernel each.  AMP's
    #: Megatron v1.1.5 runs ``FusedScaleMaskSoftmax`` unfused (its run script passes neither
    #: ``--scaled-upper-triang-masked-softmax-fusion`` nor ``--scaled-masked-softmax-fusion``) in fp16: an in-place
    #: ``masked_fill_`` (read 2, write 2), the softmax (read 2, write 2) and ``torch.nn.Dropout`` (read 2, write 2
    #: and its 1 B mask): 13 B forward for the model's 6; backward the dropout's masked scale (read 2 + 1, write
    #: 2), the softmax backward (read gradient and output, write: 6) and ``masked_fill_``'s (read 2, write 2): 15 B
    #: for the model's 12.  Left at 0 for Sailor: its MIT passes are measured; on Alps its fp32 runs miss the fused
    #: kernel too (fp16 / bf16 only), a difference this term does not cover.
    score_extra_bytes: tuple[int, int] = (0, 0)

    def forward_extra_bytes(self, seq_len: int) -> int:
        """Bytes every TP rank sends with each activation beyond its partition (the fp16 mask)."""
        return seq_len * seq_len * 2 if self.forward_mask else 0


#: the software of each testbed (:data:`TESTBED`)
SOFTWARE = {"aws": PipeSoftware(dtype_bytes=2, grad_partitioned=False, tied_head=True, barrier_before_reduce=False,
                                forward_mask=True, score_extra_bytes=(7, 3)),
            "alps": PipeSoftware(dtype_bytes=4, grad_partitioned=True, tied_head=False, barrier_before_reduce=True,
                                 exchange_order=ExchangeOrder.GRADIENT_FIRST)}

#: NCCL's per-connection staging buffer (``NCCL_BUFFSIZE``, default 4 MiB): over the socket transport a send whose
#: message fits it completes without the receiver (the sender's proxy writes each chunk into the TCP socket as
#: soon as the GPU filled it; sockets have no receiver handshake, unlike RDMA's clear-to-send), so the sending
#: stage goes on while the bytes travel
NCCL_BUFFSIZE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class HeteroCalibration:
    """The constants that are not on spec sheets.  tools/accuracy_hetero.py fits them on the homogeneous rows
    (16 T4 on AWS, GH200 on Alps); a device without homogeneous rows keeps the catalog's efficiency."""

    #: achievable fraction of the dense fp16 tensor peak (GEMMs and the attention BMMs) per device
    device_efficiency: tuple[tuple[str, float], ...] = (("GH200-96GB", 0.10), ("T4", 0.13))
    #: fixed time of one kernel on the GPU (launch latency, tail of small grids) per device
    device_kernel_ns: tuple[tuple[str, int], ...] = ()
    mem_efficiency: float = 0.80  # achievable fraction of HBM / GDDR bandwidth
    #: host cost of one framework module call per testbed (:data:`TESTBED`)
    host_module_ns: tuple[tuple[str, int], ...] = (("alps", 40_000), ("aws", 60_000))
    nvlink_efficiency: float = 0.80  # NCCL bus bandwidth over NVLink / NVLink peak (xsim's comm default)
    pcie_efficiency: float = 0.70  # NCCL bus bandwidth over the PCIe host link / PCIe peak
    tcp_efficiency: float = 0.70  # NCCL's rate / line rate on NICs that are not Ethernet (:func:`nic_achievable_gbps`)
    tcp_ceiling_Gbps: float = 35.0  # NCCL over TCP sockets: the most one Ethernet NIC delivers (host socket path)
    reserved_GiB: float = 1.5  # CUDA context, cuBLAS / NCCL workspaces, allocator fragmentation
    #: per-iteration engine work outside the passes per testbed (:data:`TESTBED`), for runs that span more than one
    #: node: the step's cross-node synchronisation (Sailor's world barrier before ReduceGrads, the loss broadcast
    #: over the pipeline group, the gradient-norm all-reduce, DeepSpeed's synchronised step timers), where every
    #: node waits for the slowest; each testbed's software has its own.  The one-node GH200 runs (H010, H011) show
    #: none (their residual without it: -4 and +25 ms), the multi-node pipelines of the same software +50 to +150 ms
    #: (``docs/validation.md``)
    step_host_ns: tuple[tuple[str, int], ...] = (("alps", 20_000_000), ("aws", 20_000_000))
    #: what-if line rates (Gb/s) of every NIC of a cluster preset, replacing the preset's (tools/accuracy_hetero.py
    #: --nic-gbps); empty for predictions
    nic_gbps: tuple[tuple[str, float], ...] = ()

    def host_ns(self, testbed: str) -> int:
        table = dict(self.host_module_ns)
        return table.get(testbed, 0)

    def step_ns(self, testbed: str) -> int:
        return dict(self.step_host_ns).get(testbed, 0)

    def with_step(self, testbed: str, value_ns: int) -> "HeteroCalibration":
        table = dict(self.step_host_ns)
        table[testbed] = int(value_ns)
        return dataclasses.replace(self, step_host_ns=tuple(sorted(table.items())))

    def efficiency(self, device: str) -> float | None:
        return dict(self.device_efficiency).get(device)

    def kernel_ns(self, device: str) -> int | None:
        return dict(self.device_kernel_ns).get(device)

    def with_kernel_ns(self, device: str, value_ns: int) -> "HeteroCalibration":
        table = dict(self.device_kernel_ns)
        table[device] = int(value_ns)
        return dataclasses.replace(self, device_kernel_ns=tuple(sorted(table.items())))

    def with_(self, **changes) -> "HeteroCalibration":
        return dataclasses.replace(self, **changes)

    def with_host(self, testbed: str, value_ns: int) -> "HeteroCalibration":
        table = dict(self.host_module_ns)
        table[testbed] = int(value_ns)
        return dataclasses.replace(self, host_module_ns=tuple(sorted(table.items())))

    def with_efficiency(self, device: str, value: float) -> "HeteroCalibration":
        table = dict(self.device_efficiency)
        table[device] = float(value)
        return dataclasses.replace(self, device_efficiency=tuple(sorted(table.items())))


#: the constants ``python tools/accuracy_hetero.py --fit`` derives from the homogeneous rows of
#: ../shared/reference/hetero_measured.csv (16 T4 on AWS: 47 timed + 5 failed runs; GH200 on Alps: 26 timed rows,
#: H019 SUSPECT left out); coordinate descent, 3 rounds, mean |log error| + 0.05 per misjudged run, started from the
#: previous constants (``hetero_accuracy.fit(rows, cal=<previous FITTED>)``; objective 0.139 -> 0.125; the same
#: descent from the dataclass defaults stops at 0.178).  The AWS constants (T4 efficiency 0.25 -> 0.3, ceiling 35 ->
#: 40 Gb/s, per-iteration engine time 80 -> 150 ms) were refitted on the T4 rows alone (2 rounds, from these) after
#: AMP's unfused attention core (``PipeSoftware.score_extra_bytes``) entered; the GH200 constants and rows do not
#: depend on it.  No heterogeneous row enters the fit.  Devices other than T4 and GH200 keep the catalog's efficiency.
FITTED = HeteroCalibration(
    device_efficiency=(("GH200-96GB", 0.75), ("T4", 0.3)),
    device_kernel_ns=(("GH200-96GB", 50_000), ("T4", 120_000)),
    host_module_ns=(("alps", 120_000), ("aws", 0)),
    pcie_efficiency=0.3,
    tcp_efficiency=0.5,
    tcp_ceiling_Gbps=40.0,
    reserved_GiB=3.0,
    step_host_ns=(("alps", 80_000_000), ("aws", 150_000_000)),
)


@dataclass(frozen=True, slots=True)
class NodeLinks:
    intra_GBps: float  # achievable per-GPU ring rate inside the node, one direction
    nic_GBps: float  # achievable NIC rate of the whole node, one direction
    intra_latency_ns: float
    nic_latency_ns: float
    nic_sockets: bool = False  # NCCL reaches other nodes through TCP sockets (an Ethernet NIC without RDMA)


@dataclass(frozen=True, slots=True)
class StageTiming:
    """One pipeline stage in a prediction: its slowest replica's passes and what follows its last backward."""

    stage: int
    device: str  # the slowest replica's GPU
    tp: int
    layers: int
    fwd_ms: float  # one micro-batch's forward on the slowest replica (TP all-reduces included)
    bwd_ms: float
    p2p_ms: float  # one activation (or gradient) transfer to the next stage; 0 on the last
    end_s: float  # the stage's last backward ends (latest replica)
    dp_allreduce_s: float  # gradient all-reduce over the stage's replicas (+ the tied embedding's)
    optimizer_s: float

    def line(self) -> str:
        return (f"  S{self.stage} {self.device:>15s} TP{self.tp} L{self.layers:<2d} fwd {self.fwd_ms:8.1f} ms  "
                f"bwd {self.bwd_ms:8.1f} ms  p2p {self.p2p_ms:7.1f} ms  pipeline end {self.end_s:8.3f} s  "
                f"DP all-reduce {self.dp_allreduce_s:7.3f} s  optimizer {self.optimizer_s:6.3f} s")


@dataclass(frozen=True, slots=True)
class Prediction:
    row_id: str
    iteration_s: float
    out_of_memory: bool
    peak_GiB: float  # the fullest device's need
    capacity_GiB: float  # that device's memory
    pipeline_s: float  # slowest stage's pipeline span
    dp_allreduce_s: float  # gradient all-reduce of that stage
    optimizer_s: float
    #: why the run cannot start or runs out of memory ("" when it is predicted to run)
    infeasible: str = ""
    stages: tuple[StageTiming, ...] = ()


def row_cluster_name(row: HeteroRow) -> str:
    text = row.cluster.lower()
    for word, preset in CLUSTER_KEYWORDS:
        if word in text:
            return preset
    raise RowError(row.row_id, "cluster", f"no cluster description matches {row.cluster[:60]!r} "
                                          f"(known: {', '.join(sorted(set(p for _, p in CLUSTER_KEYWORDS)))})")


@functools.lru_cache(maxsize=None)
def _preset(name: str):
    """A bundled cluster preset, read once (presets are package data; a Cluster is immutable)."""
    return load_cluster(name)


def node_links(row: HeteroRow, cal: HeteroCalibration) -> tuple[NodeLinks, ...]:
    """Each node's links from the row's cluster preset (the group of the node's GPU type)."""
    cluster = _preset(row_cluster_name(row))
    out = []
    for dev_name in row.plan.node_devices:
        group = next((g for g in cluster.groups if g.device_spec is not None and g.device_spec.name == dev_name), None)
        if group is None:
            raise RowError(row.row_id, "cluster", f"cluster {cluster.name} has no {dev_name} nodes")
        dev = group.device_spec
        raw = group.intra.bw_GBps
        eff = cal.pcie_efficiency if (dev.pcie_GBps and raw <= dev.pcie_GBps) else cal.nvlink_efficiency
        # a measured rate in the preset's nccl block (intra_bw_GBps / net_bw_GBps) is taken as achieved: no
        # efficiency on top; otherwise the line rate times the calibrated efficiency
        intra = group.nccl.intra_bw_GBps or raw * eff
        gbps = dict(cal.nic_gbps).get(cluster.name)
        if gbps is None and group.nccl.net_bw_GBps:
            nic = group.nccl.net_bw_GBps
        else:
            gbps = gbps if gbps is not None else (group.nic.nic_gbps if group.nic else 0.0)
            nic = gbps_to_GBps(group.nic.count * nic_achievable_gbps(gbps, group.nccl.net, cal,
                                                                     mtu_bytes=group.nccl.mtu_bytes)) if group.nic else raw
        out.append(NodeLinks(intra, nic, group.intra.latency_ns, group.nic.latency_ns if group.nic else 0.0,
                             nic_sockets=group.nic is not None and group.nccl.net == "ethernet"))
    return tuple(out)


#: TCP payload per on-wire byte of a full 1500 B Ethernet frame (1448 / 1538; network/nccl/ethernet.py); the MIT
#: testbed's measured NCCL send/recv rate over its 1 Gb/s links (0.939 Gb/s) is this fraction of the line rate
TCP_FRAMING = tcp_framing(1500)


def nic_achievable_gbps(line_gbps: float, net: str, cal: HeteroCalibration, *, mtu_bytes: int | None = None) -> float:
    """What NCCL moves through one NIC: over Ethernet (TCP sockets) the line rate less the TCP/IP framing at
    ``mtu_bytes`` (the preset's ``nccl.mtu_bytes``; default 1500, AWS VPCs 9001: 0.990 of the line rate), capped
    by the host's socket path (``tcp_ceiling_Gbps``, fitted on the 50 Gb/s T4 rows, where it is the limit); a
    10 Gb/s NIC stays below the ceiling and runs at the framing limit.  The framing and the cap are the network
    model's (:func:`~xsim_trace.network.nccl.ethernet.ethernet_payload_gbps`), with this calibration's ceiling.
    Other fabrics: the line rate times ``tcp_efficiency``."""
    if net == "ethernet":
        return ethernet_payload_gbps(line_gbps, mtu_bytes=mtu_bytes, socket_ceiling_gbps=cal.tcp_ceiling_Gbps)
    return line_gbps * cal.tcp_efficiency


def workload_model(row: HeteroRow) -> WorkloadModel:
    """GPT-2 / OPT style blocks of Megatron v1.1.5: LayerNorm, biases, GELU MLP, learned positions, tied
    embedding, unfused attention (no flash attention in 2020-21 Megatron-DeepSpeed)."""
    m = row.model
    return WorkloadModel(name=m.name or "model", layers=m.num_layers, hidden=m.hidden, ffn=m.ffn_hidden, heads=m.heads,
                         vocab=m.vocab, seq_len=row.seq_len, swiglu=False, flash_attention=False, tied_embeddings=True,
                         norm="layernorm", bias=True)


def _device(name: str, cal: HeteroCalibration) -> DeviceSpec:
    dev = dataclasses.replace(get_device(name), mem_efficiency=cal.mem_efficiency)
    eff, kernel = cal.efficiency(dev.name), cal.kernel_ns(dev.name)
    if eff is not None:
        dev = dataclasses.replace(dev, gemm_efficiency=eff, attention_efficiency=eff)
    if kernel is not None:
        dev = dataclasses.replace(dev, kernel_overhead_ns=kernel)
    return dev


def _family(cal: HeteroCalibration, testbed: str):
    return get_family("deepspeed").with_(host_module_ns=cal.host_ns(testbed))


@functools.lru_cache(maxsize=4096)
def _pass_ns(wmodel: WorkloadModel, mbs: int, dev: DeviceSpec, tp: int, intra_GBps: float, intra_lat: float,
             layers: int, embedding: bool, head: bool, host_ns: int, fam_name: str,
             score_extra_bytes: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(forward, backward) of one micro-batch on one stage replica; ``score_extra_bytes``: what the software's
    unfused attention core moves per score element beyond the workload op (:attr:`PipeSoftware.score_extra_bytes`)."""
    fw = Framework(tp=tp, micro_batch=mbs, global_batch=mbs, precision=Precision.FP16)
    links = LinkModel(gpus_per_node=max(tp, 1), intra_bw_GBps=intra_GBps, inter_bw_GBps=intra_GBps,
                      intra_latency_ns=int(intra_lat) + 5_000)
    timer = Timer(dev, links, fw, family=get_family(fam_name).with_(host_module_ns=host_ns))
    fwd = (embedding_forward(wmodel, fw) if embedding else []) + layer_forward(wmodel, fw) * layers + \
        (head_forward(wmodel, fw) if head else [])
    bwd = (head_backward(wmodel, fw) if head else []) + layer_backward(wmodel, fw) * layers + \
        (embedding_backward(wmodel, fw) if embedding else [])
    if any(score_extra_bytes) and layers:
        scores = mbs * (wmodel.heads // tp) * wmodel.seq_len * wmodel.seq_len  # one layer's score elements
        fwd += [ComputeOp("attn_core_unfused_extra", KernelClass.SOFTMAX, 0, score_extra_bytes[0] * scores, 1,
                          EAGER_OP_CALLS)] * layers
        bwd += [ComputeOp("attn_core_unfused_extra_bwd", KernelClass.SOFTMAX, 0, score_extra_bytes[1] * scores, 1,
                          EAGER_OP_CALLS, role="bwd")] * layers
    return timer.pass_ns(fwd, 0), timer.pass_ns(bwd, 0)


def _p2p_ns(nbytes: int, a: Placement, b: Placement, links: tuple[NodeLinks, ...], partitioned: bool,
            extra_bytes: int = 0, replicas_sharing: int = 1) -> int:
    """One stage-to-stage transfer between two stage replicas of equal TP (TP rank i to TP rank i).  DeepSpeed's
    ``is_pipe_partitioned`` (every TP > 1 run) splits the tensor over the TP ranks (each sends ``1/tp``, the
    receiver all-gathers inside its node); unpartitioned, every TP rank sends the whole tensor; ``extra_bytes``
    more from every TP rank (AMP's attention mask).  Across nodes the TP ranks' transfers share the NICs, and so
    do those of the ``replicas_sharing`` data-parallel replicas whose same transfer crosses the same NIC at the
    same step (the replicas run the same schedule in lockstep)."""
    na, nb = a.nodes[0], b.nodes[0]
    per_rank = (nbytes / a.tp if partitioned else nbytes) + extra_bytes
    if na == nb:
        bw, lat = links[na].intra_GBps, links[na].intra_latency_ns
    else:
        bw = min(links[na].nic_GBps, links[nb].nic_GBps) / (max(1, a.tp) * max(1, replicas_sharing))
        lat = links[na].nic_latency_ns + links[nb].nic_latency_ns + 20_000
    return int(lat + per_rank / bw)


@functools.lru_cache(maxsize=4096)
def _schedule(fwd: tuple[int, ...], bwd: tuple[int, ...], p2p: tuple[int, ...], m: int, p2p_bwd: tuple[int, ...],
              order: ExchangeOrder, eager_act: tuple[bool, ...], eager_grad: tuple[bool, ...]) -> tuple[int, ...]:
    """:func:`schedule_1f1b`, remembered: a calibration fit re-predicts the same pipelines many times."""
    return tuple(schedule_1f1b(list(fwd), list(bwd), list(p2p), m, list(p2p_bwd), order=order,
                               eager_act=list(eager_act), eager_grad=list(eager_grad)))


def _eager(nbytes: int, a: Placement, b: Placement, links: tuple[NodeLinks, ...], partitioned: bool,
           extra_bytes: int = 0) -> bool:
    """Whether a stage-to-stage send completes without its receiver: it crosses nodes over TCP sockets and each of
    its messages (the TP rank's part of the tensor; the mask, sent as its own message) fits NCCL's staging buffer
    (:data:`NCCL_BUFFSIZE_BYTES`)."""
    na, nb = a.nodes[0], b.nodes[0]
    if na == nb or not (links[na].nic_sockets and links[nb].nic_sockets):
        return False
    per_rank = nbytes / a.tp if partitioned else nbytes
    return max(per_rank, extra_bytes) <= NCCL_BUFFSIZE_BYTES


def _replicas_sharing(plan: RowPlan, stage: int, replica: int) -> int:
    """How many replicas' stage ``stage`` -> ``stage + 1`` transfers cross the sending or the receiving NIC of
    ``replica``'s (the busier of the two nodes; 1 when the transfer stays inside a node)."""
    def hop(r: int) -> tuple[int, int]:
        return plan.stages[stage].replicas[r].nodes[0], plan.stages[stage + 1].replicas[r].nodes[0]

    src, dst = hop(replica)
    if src == dst:
        return 1
    hops = [hop(r) for r in range(plan.dp)]
    out_of_src = sum(1 for a, b in hops if a == src and a != b)
    into_dst = sum(1 for a, b in hops if b == dst and a != b)
    return max(out_of_src, into_dst)


def _ring_ns(nbytes: int, members: list[Placement], links: tuple[NodeLinks, ...], rings_per_node: int) -> int:
    """Ring all-reduce of ``nbytes`` over one GPU per member; ``rings_per_node`` rings share a node's NICs."""
    n = len(members)
    if n < 2 or nbytes <= 0:
        return 0
    nodes = [p.nodes[0] for p in members]
    bw = math.inf
    lat = 0.0
    if len(set(nodes)) < n:  # some neighbours share a node
        bw = min(links[k].intra_GBps for k in nodes)
        lat = max(links[k].intra_latency_ns for k in nodes)
    if len(set(nodes)) > 1:
        bw = min(bw, min(links[k].nic_GBps for k in set(nodes)) / rings_per_node)
        lat = max(lat, max(links[k].nic_latency_ns for k in nodes) * 2 + 20_000)
    return int(2 * (n - 1) * lat + 2 * (n - 1) / n * nbytes / bw)


def predict(row: HeteroRow, cal: HeteroCalibration = FITTED) -> Prediction:
    plan: RowPlan = row.plan
    links = node_links(row, cal)
    cluster_name = row_cluster_name(row)
    testbed = TESTBED[cluster_name]
    fam = _family(cal, testbed)
    wmodel = workload_model(row)
    model_key = (wmodel.layers, wmodel.hidden, wmodel.heads, wmodel.vocab, wmodel.seq_len)
    mbs, m, pp, dp = plan.micro_batch, plan.micro_batches, plan.pp, plan.dp
    sw = SOFTWARE[testbed]
    act_bytes = row.seq_len * mbs * wmodel.hidden * sw.dtype_bytes
    ends = [[0] * pp for _ in range(dp)]
    slowest: list[tuple[int, int, int, str]] = [(0, 0, 0, "")] * pp  # (fwd + bwd, fwd, bwd, device) per stage
    p2p_max = [0] * pp
    for r in range(dp):
        fwd, bwd, p2p, p2p_bwd, eager_act, eager_grad = [], [], [], [], [], []
        for s, st in enumerate(plan.stages):
            pl = st.replicas[r]
            dev = _device(pl.device, cal)
            lk = links[pl.nodes[0]]
            measured = find_layer_times(cluster_name, model_key, pl.device, mbs, pl.tp)
            if measured is not None:  # the testbed owners' per-layer profile (TP all-reduces inside)
                f, b = measured.pass_ns(st.num_layers, st.embedding, st.head)
            else:
                f, b = _pass_ns(wmodel, mbs, dev, pl.tp, lk.intra_GBps, lk.intra_latency_ns, st.num_layers,
                                st.embedding, st.head, fam.host_module_ns, fam.name, sw.score_extra_bytes)
            fwd.append(f)
            bwd.append(b)
            slowest[s] = max(slowest[s], (f + b, f, b, pl.device))
            if s < pp - 1:
                nxt = plan.stages[s + 1].replicas[r]
                share = _replicas_sharing(plan, s, r)
                p2p.append(_p2p_ns(act_bytes, pl, nxt, links, partitioned=True,
                                   extra_bytes=sw.forward_extra_bytes(row.seq_len), replicas_sharing=share))
                p2p_bwd.append(_p2p_ns(act_bytes, nxt, pl, links, partitioned=sw.grad_partitioned,
                                       replicas_sharing=share))
                eager_act.append(_eager(act_bytes, pl, nxt, links, partitioned=True,
                                        extra_bytes=sw.forward_extra_bytes(row.seq_len)))
                eager_grad.append(_eager(act_bytes, nxt, pl, links, partitioned=sw.grad_partitioned))
                p2p_max[s] = max(p2p_max[s], p2p[-1], p2p_bwd[-1])
        ends[r] = list(_schedule(tuple(fwd), tuple(bwd), tuple(p2p), m, tuple(p2p_bwd), sw.exchange_order,
                                 tuple(eager_act), tuple(eager_grad)))
    latest = max(max(e) for e in ends)
    timings = []
    best = (0, 0.0, 0, 0)
    peak = (0.0, 1.0, False)
    dims = block_dims(wmodel)
    unbuildable = ""
    for s, st in enumerate(plan.stages):
        params = stage_params(dims, stage_content(st), tied_head=sw.tied_head)
        why = unbuildable_reason(dims, stage_content(st))
        if why and not unbuildable:
            unbuildable = f"stage {s}: {why}"
        stage_end = latest if sw.barrier_before_reduce else max(ends[r][s] for r in range(dp))
        tp = max(p.tp for p in st.replicas)
        grad_bytes = params // tp * fam.grad_reduce_bytes
        ar = _ring_ns(grad_bytes, list(st.replicas), links, rings_per_node=tp)
        if sw.tied_head and pp > 1 and (st.embedding or st.head):  # tied word-embedding gradient, first <-> last
            # DeepSpeed reduces the tied weight's .grad directly, one 2-rank group per (replica, TP rank),
            # all at once over the same NICs
            tied = wmodel.vocab * wmodel.hidden // tp * sw.dtype_bytes
            other = plan.stages[-1 if st.embedding else 0].replicas[0]
            ar += _ring_ns(tied, [st.replicas[0], other], links, rings_per_node=tp * dp)
        opt = 0
        for pl in st.replicas:
            dev = _device(pl.device, cal)
            nbytes = params // pl.tp * OPTIMIZER_BYTES_PER_PARAM
            t = kernel_time_ns(KernelClass.OPTIMIZER, 0, nbytes, dev, include_overhead=False) + \
                (fam.optimizer_fixed_launches + 4 * st.num_layers) * dev.kernel_overhead_ns
            opt = max(opt, t, int((fam.optimizer_fixed_launches + 4 * st.num_layers) * fam.host_module_ns * 0.25))
            need, cap = _memory_GiB(row, wmodel, s, pl, cal)
            if need / cap > peak[0] / peak[1]:
                peak = (need, cap, need > cap)
        total = stage_end + ar + opt
        timings.append(StageTiming(s, slowest[s][3], max(p.tp for p in st.replicas), st.num_layers,
                                   slowest[s][1] / 1e6, slowest[s][2] / 1e6, p2p_max[s] / 1e6, stage_end / 1e9,
                                   ar / 1e9, opt / 1e9))
        if total > best[0]:
            best = (total, stage_end, ar, opt)
    # the per-iteration engine work of a run that spans nodes (:attr:`HeteroCalibration.step_host_ns`); a one-node
    # run synchronises its step over NVLink and pays none of it
    total_ns = best[0] + (cal.step_ns(testbed) if len(plan.node_devices) > 1 else 0)
    reason = unbuildable or (f"out of memory: {peak[0]:.1f} of {peak[1]:.0f} GiB" if peak[2] else "")
    return Prediction(row.row_id, total_ns / 1e9, bool(reason), peak[0], peak[1], best[1] / 1e9, best[2] / 1e9,
                      best[3] / 1e9, reason, tuple(timings))


def _memory_GiB(row: HeteroRow, wmodel: WorkloadModel, stage: int, pl: Placement, cal: HeteroCalibration
                ) -> tuple[float, float]:
    """(need, capacity) of one GPU of a stage replica (xsim_trace.workload.pipeline_hetero) plus the reserve."""
    plan = row.plan
    need = stage_memory_bytes(block_dims(wmodel), stage_content(plan.stages[stage]), stage, plan.pp,
                              plan.micro_batch, plan.micro_batches, pl.tp)
    return need / 2**30 + cal.reserved_GiB, usable_GiB(pl.device)


#: the memory CUDA reports as the device's total (nvidia-smi "Total"), where it is below the marketed size: ECC on
#: GDDR6 (T4 on AWS g4dn: 15360 MiB of 16 GB) and the driver's own carve-out (V100-16GB: 16160 MiB; RTX 2080 Ti:
#: 11019 MiB; TITAN RTX: 24220 MiB)
REPORTED_TOTAL_MIB = {"T4": 15360, "V100-SXM2-16GB": 16160, "V100-PCIe-16GB": 16160, "RTX-2080-Ti": 11019,
                      "Titan-RTX": 24220}


def usable_GiB(device: str) -> float:
    mib = REPORTED_TOTAL_MIB.get(device)
    return mib / 1024 if mib else get_device(device).hbm_GiB


def stage_content(st: RowStage) -> StageContent:
    return StageContent(blocks=st.num_layers, embedding=st.embedding, final_norm=st.final_norm, head=st.head)


def block_dims(wmodel: WorkloadModel) -> BlockDims:
    return BlockDims(hidden=wmodel.hidden, ffn=wmodel.ffn, heads=wmodel.heads, vocab=wmodel.vocab,
                     seq_len=wmodel.seq_len)


__all__ = ["CLUSTER_KEYWORDS", "FITTED", "HeteroCalibration", "NodeLinks", "PipeSoftware", "Prediction", "REPORTED_TOTAL_MIB",
           "SOFTWARE", "StageTiming", "TCP_FRAMING", "nic_achievable_gbps", "node_links", "predict", "row_cluster_name", "schedule_1f1b", "usable_GiB", "workload_model"]
