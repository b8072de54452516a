"""The straightforward per-rank workload builder, kept as the reference the template path is checked
against (``tests/test_workload_generate_scale.py``) and measured against (``tools/bench_generate.py``).

This is the generator as it was before rank templates: every rank walks its schedule and times every
op again, and all traces are held in memory.  Its output defines what :func:`generate` must produce
byte for byte; do not optimise it.
"""

from __future__ import annotations

import logging
from typing import Iterable

from xsim_trace.devices.compute import KernelClass, kernel_time_ns
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, Trace, comm_groups_to_json, make_metadata, make_node
from xsim_trace.workload.estimate import ADAM_BYTES_PER_PARAM, OPT_LAUNCHES_PER_TENSOR, PARAM_BYTES, _buckets
from xsim_trace.workload.generator import SOURCE, GroupRegistry, Workload
from xsim_trace.workload.layout import Coord, Layout
from xsim_trace.workload.ops import FSDP_REDUCE, CommKind, CommOp, WaitOp, pp_activation_bytes
from xsim_trace.workload.templates import PP_STREAM_BASE, RING_RECV_STREAM, RING_TAG_BASE
from xsim_trace.workload.program import Program
from xsim_trace.workload.schedule import stage_order
from xsim_trace.workload.timing import Timer

log = logging.getLogger(__name__)


def _tag(microbatch: int, virtual: int, forward: bool, total_virtual: int) -> int:
    return ((microbatch * total_virtual + virtual) * 2 + (0 if forward else 1)) % (2**31 - 1)


class _RankBuilder:
    def __init__(self, rank: int, program: Program, timer: Timer, groups: GroupRegistry) -> None:
        self.rank, self.program, self.timer, self.groups = rank, program, timer, groups
        self.nodes: list[Node] = []
        self.prev: int | None = None
        self.cpu_prev: int | None = None  # last host launch node (only when host overhead is modelled)
        self.pending: dict[str, int] = {}  # asynchronous comm name -> node a WaitOp waits for
        self.waits: list[int] = []
        self.ring_steps = 0

    def _add(self, name: str, node_type: NodeType, deps: Iterable[int | None], **attributes) -> int:
        nid = len(self.nodes)
        self.nodes.append(make_node(nid, name, node_type, data_deps=[d for d in deps if d is not None], **attributes))
        return nid

    def chain(self, name: str, node_type: NodeType, extra: Iterable[int | None] = (), **attributes) -> int:
        nid = self._add(name, node_type, [self.prev, *extra], **attributes)
        self.prev = nid
        return nid

    def op_node(self, op, layer: int | None, microbatch: int, extra: Iterable[int | None] = ()) -> int | None:
        if isinstance(op, WaitOp):
            if op.name in self.pending:
                self.waits.append(self.pending.pop(op.name))
            return None
        common = {A.MICROBATCH: microbatch, A.IS_CPU_OP: False}
        if layer is not None:
            common[A.LAYER] = layer
        dur = self.timer.device_ns(op, self.rank)
        host = self.timer.host_ns(op)
        if host > 0:  # the host thread issues the op: a CPU node the device node waits for
            # a pipeline recv synchronizes the host (Megatron's batch_p2p_sync) before it issues more
            self.cpu_prev = self._add(
                "launch_" + op.name,
                NodeType.COMP,
                [self.cpu_prev, *extra],
                is_cpu_op=True,
                duration_ns=host,
                duration_micros=host // 1000,
                microbatch=microbatch,
            )
        extra = [*extra, self.cpu_prev]
        if isinstance(op, CommOp) and op.asynchronous and op.ring:
            nxt, prv = self.timer.ring_peers(op.kind, self.rank)
            tag = RING_TAG_BASE + self.ring_steps
            self.ring_steps += 1
            deps = [self.prev, *extra]
            self._add(op.name + "_send", NodeType.COMM_SEND, deps, comm_src=self.rank, comm_dst=nxt, comm_tag=tag,
                      comm_size=op.size_bytes, comm_kind=op.kind.value, duration_ns=dur, duration_micros=dur // 1000,
                      **common)
            self.pending[op.name] = self._add(op.name + "_recv", NodeType.COMM_RECV, deps, comm_src=prv,
                                              comm_dst=self.rank, comm_tag=tag, comm_size=op.size_bytes,
                                              comm_kind=op.kind.value, stream=RING_RECV_STREAM, duration_ns=0, **common)
            return self.pending[op.name]
        if isinstance(op, CommOp) and op.asynchronous:
            members = self.timer.op_group(op, self.rank)
            self.pending[op.name] = self._add(
                op.name, NodeType.COMM_COLL, [self.prev, *extra], comm_type=int(op.collective),
                comm_size=op.size_bytes, pg_name=self.groups.id_of(members), comm_kind=op.kind.value,
                duration_ns=dur, duration_micros=dur // 1000, **common)
            return self.pending[op.name]
        extra += self.waits
        self.waits = []
        if isinstance(op, CommOp):
            members = self.timer.group(op.kind, self.rank)
            return self.chain(
                op.name,
                NodeType.COMM_COLL,
                extra,
                comm_type=int(op.collective),
                comm_size=op.size_bytes,
                pg_name=self.groups.id_of(members),
                comm_kind=op.kind.value,
                duration_ns=dur,
                duration_micros=dur // 1000,
                **common,
            )
        return self.chain(
            op.name,
            NodeType.COMP,
            extra,
            num_ops=op.flops,
            bytes_accessed=op.bytes_accessed,
            kernel_class=op.kernel_class.value,
            duration_ns=dur,
            duration_micros=dur // 1000,
            **common,
        )


def build_rank(rank: int, program: Program, timer: Timer, groups: GroupRegistry) -> Trace:
    fw, model = program.fw, program.model
    lay = Layout(fw)
    c = lay.coord(rank)
    stage = c.pp
    pp, vpp, m = fw.pp, fw.vpp, fw.microbatches
    total_virtual = pp * vpp
    b = _RankBuilder(rank, program, timer, groups)
    act_bytes = pp_activation_bytes(model, fw)
    order = stage_order(fw.schedule, stage, pp, m, vpp)
    last_bwd_ops: list[int] = []
    for st in order:
        v = st.chunk * pp + stage
        recv = None
        neighbour_v = v - 1 if st.forward else v + 1
        if 0 <= neighbour_v < total_virtual:
            peer = lay.rank(Coord(c.tp, c.cp, c.dp, neighbour_v % pp))
            recv = b._add(
                f"recv_{'act' if st.forward else 'grad'}_mb{st.microbatch}_v{v}",
                NodeType.COMM_RECV,
                [b.prev],
                comm_src=peer,
                comm_dst=rank,
                comm_tag=_tag(st.microbatch, v, st.forward, total_virtual),
                comm_size=act_bytes,
                comm_kind=CommKind.PP.value,
                microbatch=st.microbatch,
                stream=PP_STREAM_BASE + 2 * (neighbour_v % pp) + 1,  # a stream per (peer stage, direction)
                duration_ns=0,
            )
        ids = []
        for j, (layer, op) in enumerate(program.pass_ops(stage, st.chunk, st.forward)):
            nid = b.op_node(op, layer, st.microbatch, [recv] if j == 0 else ())
            if nid is not None:
                ids.append(nid)
        if recv is not None and not ids:
            b.prev = recv
        if not st.forward:
            last_bwd_ops = ids  # ends as the final backward pass, which completes the gradients
        out_v = v + 1 if st.forward else v - 1
        if 0 <= out_v < total_virtual:
            peer = lay.rank(Coord(c.tp, c.cp, c.dp, out_v % pp))
            b._add(
                f"send_{'act' if st.forward else 'grad'}_mb{st.microbatch}_v{out_v}",
                NodeType.COMM_SEND,
                [b.prev],
                comm_src=rank,
                comm_dst=peer,
                comm_tag=_tag(st.microbatch, out_v, st.forward, total_virtual),
                comm_size=act_bytes,
                comm_kind=CommKind.PP.value,
                microbatch=st.microbatch,
                stream=PP_STREAM_BASE + 2 * (out_v % pp),
                duration_ns=timer.links.p2p_ns(act_bytes, timer.links.spans_nodes((rank, peer))),
            )
    # -- DP gradient buckets -------------------------------------------------------------------
    dense, expert = program.stage_trainable_params(stage)
    dp_members = lay.dp_group(rank)
    nb = _buckets(dense + expert, fw)
    coll = CollectiveType.REDUCE_SCATTER if fw.zero_stage >= 1 else CollectiveType.ALL_REDUCE
    last_compute = b.prev
    bucket_ids: list[int] = [i for i, n in enumerate(b.nodes) if n.name == FSDP_REDUCE]
    if len(dp_members) > 1 and not program.fsdp:
        pg = groups.id_of(dp_members)
        inter = timer.links.spans_nodes(dp_members)
        gb = timer.grad_reduce_bytes
        size = dense * gb // nb + (expert * gb // nb if fw.ep == 1 else 0)
        dur = timer.links.collective_ns(coll, size, len(dp_members), inter)
        prev_bucket = None
        for k in range(nb):
            if fw.overlap_grad_reduce and last_bwd_ops:
                trigger = last_bwd_ops[min(len(last_bwd_ops) - 1, (k + 1) * len(last_bwd_ops) // nb - 1)]
            else:
                trigger = last_compute
            prev_bucket = b._add(
                f"dp_grad_bucket{k}",
                NodeType.COMM_COLL,
                [trigger, prev_bucket],
                comm_type=int(coll),
                comm_size=size,
                pg_name=pg,
                comm_kind=CommKind.DP.value,
                duration_ns=dur,
                duration_micros=dur // 1000,
            )
            bucket_ids.append(prev_bucket)
    if expert and fw.ep > 1 and not program.fsdp:
        edp = lay.expert_dp_group(rank)
        if len(edp) > 1:
            dur = timer.links.collective_ns(coll, expert * timer.grad_reduce_bytes, len(edp), timer.links.spans_nodes(edp))
            bucket_ids.append(
                b._add(
                    "dp_expert_grads",
                    NodeType.COMM_COLL,
                    [last_compute, bucket_ids[-1] if bucket_ids else None],
                    comm_type=int(coll),
                    comm_size=expert * timer.grad_reduce_bytes,
                    pg_name=groups.id_of(edp),
                    comm_kind=CommKind.DP.value,
                    duration_ns=dur,
                    duration_micros=dur // 1000,
                )
            )
    if program.syncs_tied_embedding(stage):
        pair = lay.embedding_group(rank)
        size = program.tied_embedding_grad_bytes(timer)
        dur = timer.links.collective_ns(CollectiveType.ALL_REDUCE, size, 2, timer.links.spans_nodes(pair))
        bucket_ids.append(b._add("embedding_grad_allreduce", NodeType.COMM_COLL,
                                 [last_compute, bucket_ids[-1] if bucket_ids else None],
                                 comm_type=int(CollectiveType.ALL_REDUCE), comm_size=size, pg_name=groups.id_of(pair),
                                 comm_kind=CommKind.DP.value, duration_ns=dur, duration_micros=dur // 1000))
    # -- optimizer ------------------------------------------------------------------------------
    dev = timer.device
    local = (dense + expert) // (len(dp_members) if fw.zero_stage >= 1 else 1)
    fam = timer.family
    fixed, per_bucket = (fam.optimizer_fixed_launches, fam.optimizer_launches_per_bucket) if fam else (12, 4)
    launches = fixed + per_bucket * nb + OPT_LAUNCHES_PER_TENSOR * program.stage_param_tensors(stage)
    opt_ns = max(
        kernel_time_ns(KernelClass.OPTIMIZER, 0, local * ADAM_BYTES_PER_PARAM, dev, include_overhead=False)
        + launches * dev.kernel_overhead_ns,
        int(round(launches * timer.host_call_ns)),
    ) + (fam.step_fixed_host_ns if fam else 0)
    b.prev = last_compute
    b.chain(
        "optimizer_step",
        NodeType.COMP,
        bucket_ids,
        bytes_accessed=local * ADAM_BYTES_PER_PARAM,
        kernel_class=KernelClass.OPTIMIZER.value,
        duration_ns=opt_ns,
        duration_micros=opt_ns // 1000,
        is_cpu_op=False,
    )
    if fw.zero_stage >= 1 and len(dp_members) > 1 and not program.fsdp:
        size = (dense + expert) * PARAM_BYTES // nb
        dur = timer.links.collective_ns(CollectiveType.ALL_GATHER, size, len(dp_members), timer.links.spans_nodes(dp_members))
        for k in range(nb):
            b.chain(
                f"dp_param_allgather{k}",
                NodeType.COMM_COLL,
                comm_type=int(CollectiveType.ALL_GATHER),
                comm_size=size,
                pg_name=groups.id_of(dp_members),
                comm_kind=CommKind.DP.value,
                duration_ns=dur,
                duration_micros=dur // 1000,
            )
    meta = make_metadata(
        **{
            A.META_RANK: rank,
            A.META_WORLD_SIZE: fw.world_size,
            A.META_SOURCE: SOURCE,
            A.META_DEVICE: dev.name,
            A.META_SEQ_LEN: model.seq_len,
            A.META_MICRO_BATCH: fw.micro_batch,
        }
    )
    return Trace(metadata=meta, nodes=tuple(b.nodes), rank=rank)


def reference_generate(program: Program, timer: Timer, ranks: Iterable[int] | None = None) -> Workload:
    """Per-rank traces for ``ranks`` (default: all).  Comm groups cover every group any generated
    rank uses; the JSON is also stored in each trace's metadata (``comm_groups``)."""
    fw = program.fw
    wanted = sorted(set(ranks)) if ranks is not None else list(range(fw.world_size))
    for r in wanted:
        if not 0 <= r < fw.world_size:
            from xsim_trace.errors import ConfigError

            raise ConfigError(f"rank {r} outside world of {fw.world_size}", field="ranks")
    groups = GroupRegistry()
    built = {r: build_rank(r, program, timer, groups) for r in wanted}
    comm_groups = groups.as_json_dict()
    blob = comm_groups_to_json(comm_groups)
    traces = {}
    for r, t in built.items():
        meta = make_metadata(t.metadata.version, **{a.name: a.value for a in t.metadata.attrs}, **{A.META_COMM_GROUPS: blob})
        traces[r] = Trace(metadata=meta, nodes=t.nodes, rank=r)
    log.info("generated %d rank traces, %d comm groups", len(traces), len(comm_groups))
    return Workload(traces=traces, comm_groups=comm_groups, program=program)
