"""The rewriter: per-rank Chakra traces for a deployment plan from per-layer templates.

Per rank, ops follow the stage's schedule order.  An op is: receives from the neighbouring virtual
stage (posted once the previous op's compute is done), the layers' compute and TP collectives
(times scaled to the stage's device and TP degree), and sends to the next virtual stage.  Where
neighbouring stages differ in TP the boundary becomes a reshard per the plan's strategy.  After its
last backward on a chunk a rank joins the DP rings of every sweep-line interval it holds: one
COMM_COLL all-reduce per LCM ring, each with its own process group.  Every comm node carries
``comm_kind`` (tp / pp / reshard / dp).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Iterable

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, Trace, comm_groups_to_json, make_metadata, make_node
from xsim_trace.plan.placement import Layout, RankInfo, layout
from xsim_trace.rewrite.lcm_rings import lcm_rings
from xsim_trace.plan.layer_split import PartitionReport
from xsim_trace.plan.partition import resolve_partition
from xsim_trace.plan.model import Plan
from xsim_trace.plan.reshard import ReshardPlan, ReshardStrategy, SenderBalancer, plan_reshard
from xsim_trace.rewrite.rings import order_ring
from xsim_trace.layer_templates.scaling import op_time_ns
from xsim_trace.plan.schedules import PipeOp, stage_ops
from xsim_trace.plan.dp_intervals import DPInterval, Segment, dp_intervals
from xsim_trace.layer_templates.per_stage import Templates, TemplateSet, as_template_set
from xsim_trace.layer_templates.template import LayerTemplate, ModelTemplate

log = logging.getLogger(__name__)

#: streams: compute on 0; each (peer, direction) of P2P traffic and each process group on its own
#: comm stream, so a posted receive never blocks unrelated traffic (engines serialise a stream)
COMPUTE_STREAM = 0
P2P_STREAM_BASE = 1_000
COLL_STREAM_BASE = 1_000_000


def p2p_stream(peer: int, is_recv: bool) -> int:
    return P2P_STREAM_BASE + 2 * peer + (1 if is_recv else 0)


def coll_stream(pg: str) -> int:
    return COLL_STREAM_BASE + int(pg)


@dataclass(frozen=True)
class RewriteResult:
    plan: Plan  # with layer ranges resolved
    traces: dict[int, Trace]
    comm_groups: dict[str, tuple[int, ...]]
    layout: Layout
    dp_intervals: tuple[DPInterval, ...]
    partition_reports: tuple[PartitionReport, ...] = ()


@dataclass
class _Groups:
    """Process groups by (role, ordered member tuple) -> id ("1", "2", ...; "0" stays "all ranks").
    A role gives the same members a communicator of their own (its own stream): each stage
    boundary and direction all-gathers on its own, so the all-gathers of one boundary run in
    micro-batch order (the order their data arrives on every member) and never queue behind
    another boundary's or the TP collectives."""

    ids: dict[tuple[str, tuple[int, ...]], str] = field(default_factory=dict)

    def get(self, members: Iterable[int], role: str = "") -> str:
        key = (role, tuple(members))
        if key not in self.ids:
            self.ids[key] = str(len(self.ids) + 1)
        return self.ids[key]

    def as_dict(self) -> dict[str, tuple[int, ...]]:
        return {pg: tuple(sorted(m)) for (_, m), pg in self.ids.items()}


@dataclass
class _Tags:
    ids: dict[tuple, int] = field(default_factory=dict)

    def get(self, key: tuple) -> int:
        if key not in self.ids:
            self.ids[key] = len(self.ids) + 1
        return self.ids[key]


@dataclass
class _RankBuilder:
    info: RankInfo
    nodes: list[Node] = field(default_factory=list)
    next_id: int = 1

    def add(self, name: str, node_type: NodeType, deps: Iterable[int], duration_ns: int = 0, **attrs) -> int:
        nid = self.next_id
        self.next_id += 1
        deps = tuple(dict.fromkeys(d for d in deps if d is not None))
        if duration_ns:
            attrs[A.DURATION_NS] = int(duration_ns)
        self.nodes.append(make_node(nid, name, node_type, data_deps=deps, duration_micros=int(duration_ns) // 1000, **attrs))
        return nid


@dataclass
class _Exchange:
    """Node ids created on each rank for one boundary transfer of one op."""

    ready: dict[int, list[int]] = field(default_factory=dict)  # rank -> nodes its consumer compute waits on
    #: the consumer's all-gathers (members, size, kind, attrs, label), created when the consumer runs
    #: the op (``_Rewriter.consume``), not when the producer sends: they share the TP group's stream
    #: with the consumer's own TP collectives, so they must come in its program order on every member
    gathers: list[tuple] = field(default_factory=list)


class _Rewriter:
    def __init__(self, plan: Plan, templates: TemplateSet) -> None:
        self.plan, self.templates = plan, templates
        self.t = templates.base  # model-wide sizes (boundary activation, gradients)
        self.lay = layout(plan)
        self.groups = _Groups()
        self.tags = _Tags()
        self.balancers: dict[tuple, SenderBalancer] = {}
        self.b = {r.rank: _RankBuilder(r) for r in self.lay.ranks}
        self.last_compute: dict[int, int | None] = {r.rank: None for r in self.lay.ranks}
        self.last_bwd: dict[tuple[int, int], int] = {}  # (rank, chunk) -> node id
        self.pending: dict[tuple, _Exchange] = {}
        self.tp_pg = {key: self.groups.get(ranks) for key, ranks in sorted(self.lay.stage_ranks.items()) if len(ranks) > 1}

    # -- helpers -----------------------------------------------------------------------------------
    def vstage(self, pipe: int, vs: int) -> tuple[int, int]:
        """(stage, chunk) of virtual stage ``vs``."""
        p = len(self.plan.pipelines[pipe].stages)
        return vs % p, vs // p

    def ranks_of(self, pipe: int, vs: int) -> tuple[int, ...]:
        return self.lay.of(pipe, self.vstage(pipe, vs)[0])

    def num_vstages(self, pipe: int) -> int:
        return len(self.plan.pipelines[pipe].stages) * self.plan.chunks

    # -- boundary transfers ------------------------------------------------------------------------
    def exchange(self, pipe: int, kind: str, m: int, v_from: int, v_to: int) -> _Exchange:
        """Create (once) the nodes moving op (kind, m)'s boundary tensor from v_from to v_to."""
        key = (pipe, kind, m, v_from, v_to)
        if key in self.pending:
            return self.pending[key]
        ex = _Exchange()
        self.pending[key] = ex
        srcs, dsts = self.ranks_of(pipe, v_from), self.ranks_of(pipe, v_to)
        if srcs == dsts:
            return ex  # consecutive chunks on one stage (a 1-stage pipeline): the data stays local
        ts, td = len(srcs), len(dsts)
        size = self.t.activation_bytes
        boundary = f"p{pipe}:v{v_from}->v{v_to}"
        base = {A.MICROBATCH: m, A.PHASE: "fwd" if kind == "F" else "bwd", A.PP_BOUNDARY: boundary, A.PIPELINE: pipe}
        if ts == td:
            for i, (s, d) in enumerate(zip(srcs, dsts)):
                tag = self.tags.get(key + (i,))
                nbytes = size // ts
                self._p2p(s, d, tag, nbytes, "pp", f"{kind}{m}", dict(base, **{A.XFER_PHASE: "pp"}),
                          producer=self.last_compute[s], ex=ex, final=True)
            ex.gathers.append(([list(dsts)], size, "pp", base, f"{kind}{m}"))
            return ex
        bal_key = (pipe, v_from, v_to)
        rp = plan_reshard(ts, td, self.plan.reshard, balancer=self.balancers.setdefault(bal_key, SenderBalancer()),
                          total_bytes=size)
        self._reshard(rp, srcs, dsts, size, key, base, ex)
        g = math.gcd(ts, td)
        if rp.strategy is ReshardStrategy.BROADCAST:  # each destination holds its cluster's S/G
            nd = td // g
            groups = [[dsts[k * nd + j] for k in range(g)] for j in range(nd)]
        else:  # each destination holds its own S/td shard
            groups = [list(dsts)]
        ex.gathers.append((groups, size, "reshard", base, f"{kind}{m}"))
        return ex

    def consume(self, ex: _Exchange) -> _Exchange:
        """The consumer stage is about to run the op: its all-gathers of the boundary tensor come now,
        after each member's previous compute.  Created when the producer sent, they would wait only
        for the data, and a member whose data landed late would enter them after a TP collective of
        its previous op that the others entered after them: a collective order that differs between
        members (a deadlock), and one no program issues."""
        for spec in ex.gathers:
            self._gather(ex, *spec)
        ex.gathers.clear()
        return ex

    def _gather(self, ex: _Exchange, groups: list[list[int]], size: int, ckind: str, base: dict, label: str) -> None:
        """The stage-boundary tensor is replicated on every TP rank of the consumer (its first op
        needs all of it, no sequence parallelism): each group of destination ranks holding
        disjoint 1/len(group) parts all-gathers the whole ``size`` bytes once they have arrived."""
        for members in groups:
            if len(members) < 2:
                continue
            pg = self.groups.get(members, f"boundary {base[A.PP_BOUNDARY]}")
            attrs = dict(base)
            attrs.update({A.COMM_TYPE: int(CollectiveType.ALL_GATHER), A.COMM_SIZE: size, A.PG_NAME: pg,
                          A.COMM_KIND: ckind, A.STREAM: coll_stream(pg), A.XFER_PHASE: "allgather"})
            for r in members:
                deps = [self.last_compute[r], *ex.ready.get(r, [])]
                ex.ready[r] = [self.b[r].add(f"{ckind}_allgather_{label}_r{r}", NodeType.COMM_COLL, deps, **attrs)]

    def _p2p(self, s: int, d: int, tag: int, nbytes: int, ckind: str, label: str, base: dict, *, producer, ex: _Exchange,
             final: bool, send_deps: Iterable[int] = ()) -> int:
        bs, bd = self.b[s], self.b[d]
        attrs = dict(base)
        attrs.update({A.COMM_SIZE: nbytes, A.COMM_SRC: s, A.COMM_DST: d, A.COMM_TAG: tag, A.COMM_KIND: ckind})
        bs.add(f"{ckind}_send_{label}_r{s}_to_r{d}", NodeType.COMM_SEND, [producer, *send_deps],
               **attrs, **{A.STREAM: p2p_stream(d, False)})
        rid = bd.add(f"{ckind}_recv_{label}_r{s}_to_r{d}", NodeType.COMM_RECV, [self.last_compute[d]],
                     **attrs, **{A.STREAM: p2p_stream(s, True)})
        if final:
            ex.ready.setdefault(d, []).append(rid)
        return rid

    def _reshard(self, rp: ReshardPlan, srcs, dsts, size: int, key: tuple, base: dict, ex: _Exchange) -> None:
        rank_of = {("src", i): r for i, r in enumerate(srcs)} | {("dst", i): r for i, r in enumerate(dsts)}
        recv_node: dict[int, tuple[int, int]] = {}  # transfer index -> (rank, node id) of its receive
        label = f"{'F' if base[A.PHASE] == 'fwd' else 'B'}{base[A.MICROBATCH]}"
        for idx, tr in enumerate(rp.transfers):
            s = rank_of[(tr.src.side, tr.src.index)]
            nbytes = rp.unit_bytes(size, tr.units)
            deps = [recv_node[a][1] for a in tr.after if recv_node[a][0] == s]
            producer = self.last_compute[s] if tr.src.side == "src" else None
            if tr.kind == "p2p":
                d = rank_of[(tr.dsts[0].side, tr.dsts[0].index)]
                tag = self.tags.get(key + (idx,))
                final = tr.dsts[0].side == "dst"
                rid = self._p2p(s, d, tag, nbytes, "reshard", f"{label}_{tr.phase}", dict(base, **{A.XFER_PHASE: tr.phase}),
                                producer=producer, ex=ex, final=final, send_deps=deps)
                recv_node[idx] = (d, rid)
            else:
                members = [s] + [rank_of[(e.side, e.index)] for e in tr.dsts]
                pg = self.groups.get(members)
                attrs = dict(base)
                attrs.update({A.COMM_TYPE: int(CollectiveType.BROADCAST), A.COMM_SIZE: nbytes, A.PG_NAME: pg,
                              A.COMM_KIND: "reshard", A.COMM_ROOT: s, A.STREAM: coll_stream(pg),
                              A.XFER_PHASE: tr.phase})
                for r in members:
                    dep = [producer, *deps] if r == s else [self.last_compute[r]]
                    nid = self.b[r].add(f"reshard_bcast_{label}_root_r{s}", NodeType.COMM_COLL, dep, **attrs)
                    if r != s:
                        ex.ready.setdefault(r, []).append(nid)

    def ep_group(self, info: RankInfo) -> str | None:
        """An MoE layer's expert-parallel group: ``ep`` consecutive TP ranks of the stage (experts
        folded onto the TP ranks); None when EP is 1."""
        ep = self.plan.model.expert_split(info.tp)[0]
        if ep < 2:
            return None
        ranks = self.lay.of(info.pipeline, info.stage)
        first = info.tp_rank // ep * ep
        return self.groups.get(ranks[first:first + ep], "ep" if ep < info.tp else "")

    # -- compute -----------------------------------------------------------------------------------
    def compute(self, rank: int, layers: list[tuple[int, LayerTemplate]], back: bool, deps: list[int], op: PipeOp,
                extra_pre: LayerTemplate | None, extra_post: LayerTemplate | None, tm: ModelTemplate) -> int:
        info = self.b[rank].info
        pg = self.tp_pg.get((info.pipeline, info.stage))
        prev = deps
        seq: list[tuple[int, LayerTemplate]] = []
        if extra_pre is not None:
            seq.append((-1, extra_pre))
        seq += layers
        if extra_post is not None:
            seq.append((-1, extra_post))
        last = None
        for layer_idx, lt in seq:
            for o in (lt.bwd if back else lt.fwd):
                attrs = {A.MICROBATCH: op.microbatch, A.PHASE: "bwd" if back else "fwd", A.MODEL_CHUNK: op.chunk,
                         A.PIPELINE: info.pipeline, A.PIPE_STAGE: info.stage}
                if layer_idx >= 0:
                    attrs[A.LAYER] = layer_idx
                name = f"{'L' + str(layer_idx) + '.' if layer_idx >= 0 else ''}{o.name}_mb{op.microbatch}"
                if o.kind == "comp":
                    attrs[A.KERNEL_CLASS] = o.kernel_class
                    attrs[A.STREAM] = COMPUTE_STREAM
                    ns = op_time_ns(o, tm, info.device_spec, info.tp)
                    last = self.b[rank].add(name, NodeType.COMP, prev, duration_ns=max(1, ns), **attrs)
                else:
                    cpg, ckind = (self.ep_group(info), "ep") if o.comm_type == CollectiveType.ALL_TO_ALL else (pg, "tp")
                    if cpg is None:
                        continue  # TP 1 (or EP 1): no collective
                    attrs.update({A.COMM_TYPE: int(o.comm_type), A.COMM_SIZE: o.comm_size_bytes, A.PG_NAME: cpg,
                                  A.COMM_KIND: ckind, A.STREAM: coll_stream(cpg)})
                    last = self.b[rank].add(name, NodeType.COMM_COLL, prev, **attrs)
                prev = [last]
        if last is None:  # a stage without work still needs a node to hang dependencies on
            last = self.b[rank].add(f"noop_{op}", NodeType.COMP, prev, duration_ns=1, **{A.STREAM: COMPUTE_STREAM})
        return last

    # -- main --------------------------------------------------------------------------------------
    def run(self) -> None:
        plan = self.plan
        v = plan.chunks
        orders = {}
        for p, pipe in enumerate(plan.pipelines):
            for s in range(len(pipe.stages)):
                orders[(p, s)] = list(stage_ops(plan.schedule, s, len(pipe.stages), plan.micro_batches_of(p), v))
        # walk ops stage-by-stage in a global order that respects dependencies (the analytic
        # schedule's order), so every exchange's producer exists when it is created
        cursor = {k: 0 for k in orders}
        done: set[tuple] = set()
        remaining = sum(len(o) for o in orders.values())
        while remaining:
            progressed = False
            for (p, s), ops in orders.items():
                nvs = self.num_vstages(p)
                while cursor[(p, s)] < len(ops):
                    op = ops[cursor[(p, s)]]
                    vs = op.chunk * len(plan.pipelines[p].stages) + s
                    if op.kind == "F":
                        dep = ("F", p, op.microbatch, vs - 1) if vs > 0 else None
                    else:
                        dep = ("B", p, op.microbatch, vs + 1) if vs < nvs - 1 else ("F", p, op.microbatch, vs)
                    if dep is not None and dep not in done:
                        break
                    self.emit(p, s, vs, op)
                    done.add((op.kind, p, op.microbatch, vs))
                    cursor[(p, s)] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:  # pragma: no cover - schedules are deadlock-free by construction
                raise RuntimeError("schedule walk made no progress")
        self.dp()

    def emit(self, p: int, s: int, vs: int, op: PipeOp) -> None:
        plan = self.plan
        nvs = self.num_vstages(p)
        st = plan.pipelines[p].stages[s]
        a, b = st.chunks[op.chunk]
        tm = self.templates.for_stage(st.group, st.tp)
        layers = [(i, tm.layer(i)) for i in range(a, b)]
        back = op.kind == "B"
        if back:
            layers.reverse()
        first, last = vs == 0, vs == nvs - 1
        pre = tm.pre if first else None
        post = tm.post if last else None
        if back:
            pre, post = post, pre  # backward runs head first, embedding last
        ex = None
        if not back and vs > 0:
            ex = self.consume(self.exchange(p, "F", op.microbatch, vs - 1, vs))
        if back and vs < nvs - 1:
            ex = self.consume(self.exchange(p, "B", op.microbatch, vs + 1, vs))
        for r in self.lay.of(p, s):
            deps = [self.last_compute[r]]
            if ex is not None:
                deps += ex.ready.get(r, [])
            rtm, rlayers, rpre, rpost = tm, layers, pre, post
            if st.mixed:  # a TP group over device groups: each rank from its own group's template
                rtm = self.templates.for_stage(self.b[r].info.group, st.tp)
                rlayers = [(i, rtm.layer(i)) for i, _ in layers]
                rpre, rpost = (rtm.pre if first else None), (rtm.post if last else None)
                if back:
                    rpre, rpost = rpost, rpre
            self.last_compute[r] = self.compute(r, rlayers, back, deps, op, rpre, rpost, rtm)
            if back:
                self.last_bwd[(r, op.chunk)] = self.last_compute[r]
        # sends to the consumer are created now that this op's compute exists
        if not back and vs < nvs - 1:
            self.exchange(p, "F", op.microbatch, vs, vs + 1)
        if back and vs > 0:
            self.exchange(p, "B", op.microbatch, vs, vs - 1)

    def dp(self) -> None:
        plan = self.plan
        if plan.dp < 2:
            self.intervals = ()
            return
        segs = []
        for p, pipe in enumerate(plan.pipelines):
            for s, st in enumerate(pipe.stages):
                for c, (a, b) in enumerate(st.chunks):
                    segs.append(Segment((p, s, c), a, b))
        self.intervals = dp_intervals(segs)
        # embedding (first virtual stages) and output layer (last virtual stages) gradients join the
        # interval with the same members (one bucket, as Megatron's grad buffers do), else sync alone
        jobs: dict[tuple, list] = {}
        for iv in self.intervals:
            jobs[tuple(iv.members)] = [iv.num_layers * self.t.layer_grad_bytes, f"L{iv.start}-{iv.end}"]
        firsts = tuple((p, 0, 0) for p in range(plan.dp))
        lasts = tuple((p, (self.num_vstages(p) - 1) % len(pipe.stages), (self.num_vstages(p) - 1) // len(pipe.stages))
                      for p, pipe in enumerate(plan.pipelines))
        for members, nbytes, label in ((firsts, self.t.pre_grad_bytes, "embedding"), (lasts, self.t.post_grad_bytes, "head")):
            if nbytes <= 0:
                continue
            job = jobs.setdefault(members, [0, ""])
            job[0] += nbytes
            job[1] = f"{job[1]}+{label}" if job[1] else label
        for members, (nbytes, label) in jobs.items():
            self._dp_rings(list(members), nbytes, label)

    def _dp_rings(self, members: list[tuple[int, int, int]], grad_bytes: int, label: str) -> None:
        """One all-reduce per LCM ring over ``members`` ((pipeline, stage, chunk)), each member rank
        joining after its last backward of that chunk."""
        if len(members) < 2 or grad_bytes <= 0:
            return
        plan = self.plan
        info = {r.rank: r for r in self.lay.ranks}
        member_ranks = [self.lay.of(p, s) for (p, s, c) in members]
        for j, ring in enumerate(lcm_rings([len(r) for r in member_ranks])):
            in_ring = [member_ranks[g][t] for g, t in enumerate(ring.members)]
            ranks = in_ring
            if plan.ring_order == "bandwidth":
                ranks = list(order_ring(in_ring, lambda x, y: info[x].bw_GBps(info[y], plan)))
            pg = self.groups.get(ranks)
            size = ring.size_bytes(grad_bytes)
            m = plan.model
            # plain DP all-reduces the gradient; the distributed optimizer reduce-scatters it and
            # all-gathers the updated weights (at the weights' dtype)
            steps = ((CollectiveType.ALL_REDUCE, "allreduce", size),) if not plan.distributed_optimizer else (
                (CollectiveType.REDUCE_SCATTER, "reducescatter", size),
                (CollectiveType.ALL_GATHER, "allgather", size * m.dtype_bytes // m.grad_reduce_bytes))
            for (p, s, c), r in zip(members, in_ring):
                dep = self.last_bwd[(r, c)]
                for coll, name, nbytes in steps:
                    dep = self.b[r].add(
                        f"dp_{name}_{label}_ring{j}", NodeType.COMM_COLL, [dep],
                        **{A.COMM_TYPE: int(coll), A.COMM_SIZE: nbytes, A.PG_NAME: pg,
                           A.COMM_KIND: "dp", A.RING_ORDER: ranks, A.PIPELINE: p, A.PIPE_STAGE: s, A.MODEL_CHUNK: c,
                           A.STREAM: coll_stream(pg)},
                    )

    def traces(self) -> dict[int, Trace]:
        groups_json = comm_groups_to_json(self.groups.as_dict())
        out = {}
        world = len(self.lay.ranks)
        for r, b in self.b.items():
            i = b.info
            meta = make_metadata(**{
                A.META_RANK: r, A.META_WORLD_SIZE: world, A.META_SOURCE: "xsim rewrite", A.META_DEVICE: i.device,
                A.META_TP: i.tp, A.META_DEVICE_GROUP: i.group, A.PIPELINE: i.pipeline, A.PIPE_STAGE: i.stage,
                A.META_PLAN: self.plan.name, A.META_COMM_GROUPS: groups_json,
                A.META_SEQ_LEN: self.plan.model.seq_len, A.META_MICRO_BATCH: self.plan.model.micro_batch_size,
            })
            out[r] = Trace(metadata=meta, nodes=tuple(b.nodes), rank=r)
        return out


def rewrite(plan: Plan, template: Templates) -> RewriteResult:
    """Per-rank traces for ``plan`` (layer ranges filled by its partition mode first).

    ``template`` is one :class:`ModelTemplate` (scaled to every stage's device and TP degree) or a
    mapping group name / (group, tp) -> template (:mod:`xsim_trace.layer_templates.per_stage`): each
    stage is then built from the template of its own group (and TP degree)."""
    templates = as_template_set(template, plan.model)
    plan, reports = resolve_partition(plan, templates)
    rw = _Rewriter(plan, templates)
    rw.run()
    traces = rw.traces()
    log.info("rewrote %s for plan %s: %d ranks, %d nodes", templates.source, plan.name, len(traces),
             sum(len(t) for t in traces.values()))
    return RewriteResult(plan=plan, traces=traces, comm_groups=rw.groups.as_dict(), layout=rw.lay,
                         dp_intervals=rw.intervals, partition_reports=reports)
