"""Rank templates: one trace per pipeline-stage role, stamped out for every rank of that role.

All ranks of one pipeline stage run the same schedule over the same ops; their traces differ only
in a few fields that name ranks: the ``pg_name`` of TP / CP / EP / DP collectives, ``comm_src`` /
``comm_dst`` of pipeline sends and receives, and the metadata's rank.  Durations can differ too
(a group that crosses a node boundary is slower), so a template is keyed by :class:`RankTiming`:
the stage plus every duration the trace carries that the :class:`Timer` computes from the rank.
Ranks with equal timing share one template; the rank-specific fields are :class:`Slot` entries,
each naming a :class:`RankRef` that :meth:`RankContext.values` resolves for a rank.

The builder mirrors the per-rank reference builder (``tests/generator_reference.py``) node for
node and attribute for attribute; ``tests/test_workload_generate_scale.py`` checks byte identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from xsim_trace.devices.compute import KernelClass
from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, make_node
from xsim_trace.workload.estimate import PARAM_BYTES, _buckets, optimizer_step
from xsim_trace.workload.layout import Coord, Layout
from xsim_trace.workload.ops import FSDP_REDUCE, CommKind, CommOp, Op, WaitOp, pp_activation_bytes
from xsim_trace.workload.program import Program
from xsim_trace.workload.schedule import Step, stage_order
from xsim_trace.workload.timing import Timer

#: placeholders held by template nodes in rank-specific fields (every slot is rewritten per rank)
_PG_PLACEHOLDER = ""
_RANK_PLACEHOLDER = -1


@dataclass(frozen=True, slots=True)
class RankRef:
    """A rank-specific value: ``kind`` is a process group (a ``CommKind`` value for an op's group,
    ``dp_grads`` for the gradient-sync group, ``expert_dp`` for expert gradients, ``embedding`` for
    the tied-embedding pair of the first and last stage), ``self`` (the rank), ``peer`` (the rank
    with the same tp/cp/dp coordinate on ``stage``) or ``<kind>_next`` / ``<kind>_prev`` (the
    rank's neighbours on the ring of its ``<kind>`` group)."""

    kind: str
    stage: int = -1

    @property
    def is_group(self) -> bool:
        return self.kind not in ("self", "peer") and not self.is_ring

    @property
    def is_ring(self) -> bool:
        return self.kind.endswith(("_next", "_prev"))


SELF = RankRef("self")
DP_GRADS = RankRef("dp_grads")
EXPERT_DP = RankRef("expert_dp")
EMBEDDING = RankRef("embedding")
#: tags of ring steps (CP KV exchange) count up from here within a rank's trace; pipeline tags are
#: per peer pair on other stages, so the two never meet on one (src, dst) pair
RING_TAG_BASE = 1 << 30
#: stream of ring receives, apart from the comm stream the sends use (a receive queued behind its
#: own rank's send would deadlock a rendezvous p2p model)
RING_RECV_STREAM = 2
#: pipeline sends and receives: a stream per (peer stage, direction), as PyTorch runs a peer pair's p2p on
#: that pair's own communicator and stream, apart from TP / DP collectives, and Megatron posts a step's send
#: and receive together (``batch_isend_irecv``: one NCCL group moving both directions at once).  On one
#: shared stream, stage s's send to s+1 would queue its receive from s+1 behind it and the peer's the other
#: way round: a rendezvous p2p model deadlocks in the 1F1B steady state, an eager one serialises them.
PP_STREAM_BASE = 16


def pp_stream(peer_stage: int, recv: bool) -> int:
    """The stream of pipeline traffic with stage ``peer_stage`` in one direction."""
    return PP_STREAM_BASE + 2 * peer_stage + (1 if recv else 0)


def _group_ref(op: CommOp) -> RankRef:
    return RankRef(op.group or op.kind.value)


@dataclass(frozen=True, slots=True)
class Slot:
    """A template node whose attributes ``names`` (at positions ``positions``) take the values of
    ``refs`` for each rank."""

    index: int
    names: tuple[str, ...]
    positions: tuple[int, ...]
    refs: tuple[RankRef, ...]


@dataclass(frozen=True, slots=True)
class RankTiming:
    """Every duration of a rank's trace that the timer may compute from the rank: equal timings
    (and stage) mean byte-equal traces up to the slots."""

    stage: int
    op_ns: tuple[int, ...]  # device time of each distinct op of the stage (StageOps.ops order)
    send_ns: tuple[int, ...]  # pipeline send time to the peer on each of StageOps.peer_stages
    dp_bucket_ns: int
    dp_expert_ns: int
    dp_allgather_ns: int
    embedding_sync_ns: int = 0


@dataclass(frozen=True)
class RankTemplate:
    timing: RankTiming
    nodes: tuple[Node, ...]  # rank-specific attributes hold placeholders
    slots: tuple[Slot, ...]
    refs: tuple[RankRef, ...]  # every ref the slots use, in first-use order

    @property
    def group_refs(self) -> tuple[RankRef, ...]:
        return tuple(r for r in self.refs if r.is_group)


@dataclass(frozen=True)
class StageOps:
    """What one stage runs, independent of the rank: schedule, pass op lists, distinct ops."""

    stage: int
    order: tuple[Step, ...]
    passes: dict[tuple[int, bool], tuple[tuple[int | None, Op], ...]]  # (chunk, forward) -> ops
    ops: tuple[Op, ...]  # distinct ops in first-use order
    op_index: dict[Op, int]
    peer_stages: tuple[int, ...]  # stages this stage sends to (next, previous)


def _tag(microbatch: int, virtual: int, forward: bool, total_virtual: int) -> int:
    return ((microbatch * total_virtual + virtual) * 2 + (0 if forward else 1)) % (2**31 - 1)


class RankContext:
    """Per (program, timer): stage op lists, rank timings, template building and rank values."""

    def __init__(self, program: Program, timer: Timer) -> None:
        self.program, self.timer, self.fw = program, timer, program.fw
        self.layout = Layout(program.fw)
        self.act_bytes = pp_activation_bytes(program.model, program.fw)
        self._stage_ops: dict[int, StageOps] = {}
        self._group_refs: dict[int, tuple[RankRef, ...]] = {}

    # -- rank-independent ----------------------------------------------------------------------
    def stage_ops(self, stage: int) -> StageOps:
        cached = self._stage_ops.get(stage)
        if cached is not None:
            return cached
        fw = self.fw
        order = tuple(stage_order(fw.schedule, stage, fw.pp, fw.microbatches, fw.vpp))
        passes = {}
        index: dict[Op, int] = {}
        for chunk in range(fw.vpp):
            for forward in (True, False):
                ops = tuple(self.program.pass_ops(stage, chunk, forward))
                passes[(chunk, forward)] = ops
                for _, op in ops:
                    index.setdefault(op, len(index))
        peers = tuple(dict.fromkeys(((stage + 1) % fw.pp, (stage - 1) % fw.pp)))
        out = self._stage_ops[stage] = StageOps(stage, order, passes, tuple(index), index, peers)
        return out

    def group_refs(self, stage: int) -> tuple[RankRef, ...]:
        """The process groups a rank of ``stage`` names, in first-use order (the order the group
        ids are registered in): its ops' groups in schedule order, then the gradient groups.
        The template builder checks that its nodes use exactly these."""
        cached = self._group_refs.get(stage)
        if cached is not None:
            return cached
        fw, so = self.fw, self.stage_ops(stage)
        refs: dict[RankRef, None] = {}
        for st in so.order:
            for _, op in so.passes[(st.chunk, st.forward)]:
                if isinstance(op, CommOp) and not op.ring:
                    refs.setdefault(_group_ref(op))
        if fw.dp * fw.cp > 1 and not self.program.fsdp:
            refs.setdefault(DP_GRADS)
        if self.has_expert_dp(stage):
            refs.setdefault(EXPERT_DP)
        if self.program.syncs_tied_embedding(stage):
            refs.setdefault(EMBEDDING)
        out = self._group_refs[stage] = tuple(refs)
        return out

    def has_expert_dp(self, stage: int) -> bool:
        """Whether ranks of ``stage`` reduce expert gradients over an expert-DP group of 2+ ranks."""
        _, expert = self.program.stage_trainable_params(stage)
        return bool(expert) and self.fw.ep > 1 and not self.program.fsdp and len(
            self.layout.expert_dp_group(self.layout.rank(Coord(0, 0, 0, stage)))) > 1

    # -- per rank ------------------------------------------------------------------------------
    def timing(self, rank: int) -> RankTiming:
        fw, timer, lay = self.fw, self.timer, self.layout
        c = lay.coord(rank)
        so = self.stage_ops(c.pp)
        op_ns = tuple(timer.device_ns(op, rank) for op in so.ops)
        links = timer.links
        send_ns = tuple(
            links.p2p_ns(self.act_bytes, links.spans_nodes((rank, self.peer(c, s)))) for s in so.peer_stages
        )
        dense, expert = self.program.stage_trainable_params(c.pp)
        dp_members = lay.dp_group(rank)
        nb = _buckets(dense + expert, fw)
        coll = CollectiveType.REDUCE_SCATTER if fw.zero_stage >= 1 else CollectiveType.ALL_REDUCE
        bucket = expert_ns = allgather = 0
        if len(dp_members) > 1:
            gb = timer.grad_reduce_bytes
            size = dense * gb // nb + (expert * gb // nb if fw.ep == 1 else 0)
            bucket = links.collective_ns(coll, size, len(dp_members), links.spans_nodes(dp_members))
            if fw.zero_stage >= 1:
                size = (dense + expert) * PARAM_BYTES // nb
                allgather = links.collective_ns(
                    CollectiveType.ALL_GATHER, size, len(dp_members), links.spans_nodes(dp_members)
                )
        if expert and fw.ep > 1 and not self.program.fsdp:
            edp = lay.expert_dp_group(rank)
            if len(edp) > 1:
                expert_ns = links.collective_ns(coll, expert * timer.grad_reduce_bytes, len(edp), links.spans_nodes(edp))
        if self.program.fsdp:
            bucket = allgather = 0
        embedding = 0
        if self.program.syncs_tied_embedding(c.pp):
            pair = lay.embedding_group(rank)
            embedding = links.collective_ns(CollectiveType.ALL_REDUCE, self.program.tied_embedding_grad_bytes(timer),
                                            2, links.spans_nodes(pair))
        return RankTiming(c.pp, op_ns, send_ns, bucket, expert_ns, allgather, embedding)

    def peer(self, c: Coord, stage: int) -> int:
        return self.layout.rank(Coord(c.tp, c.cp, c.dp, stage))

    def members(self, ref: RankRef, rank: int) -> tuple[int, ...]:
        """The process group ``ref`` names for ``rank``."""
        if ref.kind == DP_GRADS.kind:
            return self.layout.dp_group(rank)
        if ref.kind == EXPERT_DP.kind:
            return self.layout.expert_dp_group(rank)
        if ref.kind == EMBEDDING.kind:
            return self.layout.embedding_group(rank)
        return self.timer.group(CommKind(ref.kind), rank)

    def values(self, refs: Iterable[RankRef], rank: int, group_id) -> dict[RankRef, Any]:
        """``ref -> value`` for ``rank``; ``group_id(members)`` gives a group's pg_name."""
        c = self.layout.coord(rank)
        out: dict[RankRef, Any] = {}
        for ref in refs:
            if ref.kind == "self":
                out[ref] = rank
            elif ref.kind == "peer":
                out[ref] = self.peer(c, ref.stage)
            elif ref.is_ring:
                kind, side = ref.kind.rsplit("_", 1)
                out[ref] = self.timer.ring_peers(CommKind(kind), rank)[0 if side == "next" else 1]
            else:
                out[ref] = group_id(self.members(ref, rank))
        return out

    def build(self, timing: RankTiming) -> RankTemplate:
        return _TemplateBuilder(self, timing).build()


class _TemplateBuilder:
    """The reference ``build_rank`` with durations from a :class:`RankTiming` and rank-specific
    fields as slots.  Keep the attribute order of every node identical to the reference."""

    def __init__(self, ctx: RankContext, timing: RankTiming) -> None:
        self.ctx, self.timing = ctx, timing
        self.so = ctx.stage_ops(timing.stage)
        self.nodes: list[Node] = []
        self.slots: list[Slot] = []
        self.refs: dict[RankRef, None] = {}
        self.prev: int | None = None
        self.cpu_prev: int | None = None
        self.pending: dict[str, int] = {}  # asynchronous comm name -> the node a wait waits for
        self.waits: list[int] = []  # nodes the next chained op waits for
        self.ring_steps = 0

    def _add(self, name: str, node_type: NodeType, deps: Iterable[int | None], refs: dict[str, RankRef] | None = None,
             **attributes) -> int:
        nid = len(self.nodes)
        node = make_node(nid, name, node_type, data_deps=[d for d in deps if d is not None], **attributes)
        if refs:
            names = tuple(refs)
            positions = tuple(next(i for i, a in enumerate(node.attrs) if a.name == n) for n in names)
            self.slots.append(Slot(nid, names, positions, tuple(refs.values())))
            self.refs.update(dict.fromkeys(refs.values()))
        self.nodes.append(node)
        return nid

    def chain(self, name: str, node_type: NodeType, extra: Iterable[int | None] = (), refs=None, **attributes) -> int:
        nid = self._add(name, node_type, [self.prev, *extra], refs, **attributes)
        self.prev = nid
        return nid

    def op_node(self, op: Op, layer: int | None, microbatch: int, extra: Iterable[int | None] = ()) -> int | None:
        timer = self.ctx.timer
        if isinstance(op, WaitOp):
            nid = self.pending.pop(op.name, None)
            if nid is not None:
                self.waits.append(nid)
            return None
        common = {A.MICROBATCH: microbatch, A.IS_CPU_OP: False}
        if layer is not None:
            common[A.LAYER] = layer
        dur = self.timing.op_ns[self.so.op_index[op]]
        host = timer.host_ns(op)
        if host > 0:
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
        if isinstance(op, CommOp) and op.asynchronous:
            return self.async_node(op, dur, common, extra)
        extra += self.waits
        self.waits = []
        if isinstance(op, CommOp):
            return self.chain(
                op.name,
                NodeType.COMM_COLL,
                extra,
                {A.PG_NAME: RankRef(op.kind.value)},
                comm_type=int(op.collective),
                comm_size=op.size_bytes,
                pg_name=_PG_PLACEHOLDER,
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

    def async_node(self, op: CommOp, dur: int, common: dict, extra: list) -> int:
        """An asynchronous collective (or ring step: a send to the next rank, a receive from the
        previous one) off the compute chain; a later wait makes the next chained op depend on it."""
        deps = [self.prev, *extra]
        if not op.ring:
            nid = self._add(op.name, NodeType.COMM_COLL, deps, {A.PG_NAME: _group_ref(op)},
                            comm_type=int(op.collective), comm_size=op.size_bytes, pg_name=_PG_PLACEHOLDER,
                            comm_kind=op.kind.value, duration_ns=dur, duration_micros=dur // 1000, **common)
            self.pending[op.name] = nid
            return nid
        tag = RING_TAG_BASE + self.ring_steps
        self.ring_steps += 1
        nxt, prv = RankRef(op.kind.value + "_next"), RankRef(op.kind.value + "_prev")
        self._add(op.name + "_send", NodeType.COMM_SEND, deps, {A.COMM_SRC: SELF, A.COMM_DST: nxt},
                  comm_src=_RANK_PLACEHOLDER, comm_dst=_RANK_PLACEHOLDER, comm_tag=tag, comm_size=op.size_bytes,
                  comm_kind=op.kind.value, duration_ns=dur, duration_micros=dur // 1000, **common)
        nid = self._add(op.name + "_recv", NodeType.COMM_RECV, deps, {A.COMM_SRC: prv, A.COMM_DST: SELF},
                        comm_src=_RANK_PLACEHOLDER, comm_dst=_RANK_PLACEHOLDER, comm_tag=tag, comm_size=op.size_bytes,
                        comm_kind=op.kind.value, stream=RING_RECV_STREAM, duration_ns=0, **common)
        self.pending[op.name] = nid
        return nid

    def build(self) -> RankTemplate:
        ctx, timing, so = self.ctx, self.timing, self.so
        program, timer, fw = ctx.program, ctx.timer, ctx.fw
        stage = timing.stage
        pp, vpp = fw.pp, fw.vpp
        total_virtual = pp * vpp
        act_bytes = ctx.act_bytes
        send_ns = dict(zip(so.peer_stages, timing.send_ns))
        last_bwd_ops: list[int] = []
        for st in so.order:
            v = st.chunk * pp + stage
            recv = None
            neighbour_v = v - 1 if st.forward else v + 1
            if 0 <= neighbour_v < total_virtual:
                recv = self._add(
                    f"recv_{'act' if st.forward else 'grad'}_mb{st.microbatch}_v{v}",
                    NodeType.COMM_RECV,
                    [self.prev],
                    {A.COMM_SRC: RankRef("peer", neighbour_v % pp), A.COMM_DST: SELF},
                    comm_src=_RANK_PLACEHOLDER,
                    comm_dst=_RANK_PLACEHOLDER,
                    comm_tag=_tag(st.microbatch, v, st.forward, total_virtual),
                    comm_size=act_bytes,
                    comm_kind=CommKind.PP.value,
                    microbatch=st.microbatch,
                    stream=pp_stream(neighbour_v % pp, recv=True),
                    duration_ns=0,
                )
            ids = []
            for j, (layer, op) in enumerate(so.passes[(st.chunk, st.forward)]):
                nid = self.op_node(op, layer, st.microbatch, [recv] if j == 0 else ())
                if nid is not None:
                    ids.append(nid)
            if recv is not None and not ids:
                self.prev = recv
            if not st.forward:
                last_bwd_ops = ids
            out_v = v + 1 if st.forward else v - 1
            if 0 <= out_v < total_virtual:
                self._add(
                    f"send_{'act' if st.forward else 'grad'}_mb{st.microbatch}_v{out_v}",
                    NodeType.COMM_SEND,
                    [self.prev],
                    {A.COMM_SRC: SELF, A.COMM_DST: RankRef("peer", out_v % pp)},
                    comm_src=_RANK_PLACEHOLDER,
                    comm_dst=_RANK_PLACEHOLDER,
                    comm_tag=_tag(st.microbatch, out_v, st.forward, total_virtual),
                    comm_size=act_bytes,
                    comm_kind=CommKind.PP.value,
                    microbatch=st.microbatch,
                    stream=pp_stream(out_v % pp, recv=False),
                    duration_ns=send_ns[out_v % pp],
                )
        # -- DP gradient buckets ---------------------------------------------------------------
        dense, expert = program.stage_trainable_params(stage)
        n_dp = fw.dp * fw.cp
        nb = _buckets(dense + expert, fw)
        coll = CollectiveType.REDUCE_SCATTER if fw.zero_stage >= 1 else CollectiveType.ALL_REDUCE
        last_compute = self.prev
        # ZeRO-3 / FSDP reduce-scattered every unit inside the passes: the optimizer waits for those
        bucket_ids: list[int] = [i for i, n in enumerate(self.nodes) if n.name == FSDP_REDUCE]
        if n_dp > 1 and not program.fsdp:
            gb = timer.grad_reduce_bytes
            size = dense * gb // nb + (expert * gb // nb if fw.ep == 1 else 0)
            dur = timing.dp_bucket_ns
            prev_bucket = None
            for k in range(nb):
                if fw.overlap_grad_reduce and last_bwd_ops:
                    trigger = last_bwd_ops[min(len(last_bwd_ops) - 1, (k + 1) * len(last_bwd_ops) // nb - 1)]
                else:
                    trigger = last_compute
                prev_bucket = self._add(
                    f"dp_grad_bucket{k}",
                    NodeType.COMM_COLL,
                    [trigger, prev_bucket],
                    {A.PG_NAME: DP_GRADS},
                    comm_type=int(coll),
                    comm_size=size,
                    pg_name=_PG_PLACEHOLDER,
                    comm_kind=CommKind.DP.value,
                    duration_ns=dur,
                    duration_micros=dur // 1000,
                )
                bucket_ids.append(prev_bucket)
        if ctx.has_expert_dp(stage):
            dur = timing.dp_expert_ns
            bucket_ids.append(
                self._add(
                    "dp_expert_grads",
                    NodeType.COMM_COLL,
                    [last_compute, bucket_ids[-1] if bucket_ids else None],
                    {A.PG_NAME: EXPERT_DP},
                    comm_type=int(coll),
                    comm_size=expert * timer.grad_reduce_bytes,
                    pg_name=_PG_PLACEHOLDER,
                    comm_kind=CommKind.DP.value,
                    duration_ns=dur,
                    duration_micros=dur // 1000,
                )
            )
        if program.syncs_tied_embedding(stage):
            # Megatron's finalize_model_grads: the first and last stage all-reduce the tied
            # embedding's gradient after the DP reduction
            dur = timing.embedding_sync_ns
            bucket_ids.append(self._add(
                "embedding_grad_allreduce",
                NodeType.COMM_COLL,
                [last_compute, bucket_ids[-1] if bucket_ids else None],
                {A.PG_NAME: EMBEDDING},
                comm_type=int(CollectiveType.ALL_REDUCE),
                comm_size=program.tied_embedding_grad_bytes(timer),
                pg_name=_PG_PLACEHOLDER,
                comm_kind=CommKind.DP.value,
                duration_ns=dur,
                duration_micros=dur // 1000,
            ))
        # -- optimizer --------------------------------------------------------------------------
        opt_bytes, opt_ns = optimizer_step(program, stage, n_dp, nb, timer)
        self.prev = last_compute
        self.chain(
            "optimizer_step",
            NodeType.COMP,
            bucket_ids,
            bytes_accessed=opt_bytes,
            kernel_class=KernelClass.OPTIMIZER.value,
            duration_ns=opt_ns,
            duration_micros=opt_ns // 1000,
            is_cpu_op=False,
        )
        if fw.zero_stage >= 1 and n_dp > 1 and not program.fsdp:
            size = (dense + expert) * PARAM_BYTES // nb
            dur = timing.dp_allgather_ns
            for k in range(nb):
                self.chain(
                    f"dp_param_allgather{k}",
                    NodeType.COMM_COLL,
                    (),
                    {A.PG_NAME: DP_GRADS},
                    comm_type=int(CollectiveType.ALL_GATHER),
                    comm_size=size,
                    pg_name=_PG_PLACEHOLDER,
                    comm_kind=CommKind.DP.value,
                    duration_ns=dur,
                    duration_micros=dur // 1000,
                )
        template = RankTemplate(timing, tuple(self.nodes), tuple(self.slots), tuple(self.refs))
        if template.group_refs != ctx.group_refs(stage):
            raise GraphError("template nodes name other process groups than the stage's ops", field="pg_name")
        return template
