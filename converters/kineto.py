"""Kineto (PyTorch profiler) traces -> per-rank Chakra graphs with the dependencies the trace shows.

Per rank, for one ProfilerStep (or the whole capture):

* Host: each CPU thread becomes a chain of segments cut at every GPU launch and every
  synchronising call; a segment is named after the innermost op (and nn.Module / annotation scope)
  it ran in.  Secondary threads (autograd) start each burst after the main-thread node that ended
  last before it, and the main thread resumes after the burst ends.
* Device: kernels / memcpys / memsets depend on their launch (``correlation``) and on the previous
  op of their CUDA stream; ``cudaStreamWaitEvent`` adds the cross-stream edge (recorded event's
  stream -> the next launch's stream); synchronize calls wait for the work they wait on.  Edges the
  timestamps contradict are not added.  GPU idle gaps become delay nodes (see ``common``).
* NCCL kernels become COMM_COLL nodes (type / bytes / group from the args, the launching ops or the
  kernel name) with the measured kernel time in ``measured_duration_ns``; all-to-alls become
  per-peer SEND / RECV nodes matched across ranks (``crossrank``).
"""

from __future__ import annotations

import bisect
import logging
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from xsim_trace.errors import ConfigError, FormatError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.bounds import MAX_SIZE_BYTES, MAX_WORLD_SIZE, check_bounds
from xsim_trace.graph.kinds import NodeType
from xsim_trace.graph.model import Trace
from xsim_trace.io.kineto import KinetoEvent as Event
from xsim_trace.io.kineto import KinetoTrace, is_nccl_work, read_capture
from xsim_trace.kineto_names import (
    CPU_CATS,
    GPU_CATS,
    KERNEL_LAUNCH_CALLS,
    RECORD_CALLS,
    RUNTIME_CATS,
    STEP_PREFIX,
    SYNC_CALLS,
    WAIT_CALLS,
)

from converters import nccl
from converters.common import GNode, GraphBuilder, finalize

log = logging.getLogger(__name__)

#: a secondary thread idle longer than this starts a new burst (cross-thread edges)
BURST_GAP_NS = 20_000
#: a layer-sized scope and its index: ``layers.3``, ``layer_3``, ``DecoderLayer_3``, ``TransformerLayer_3``, ``Block_3``
_LAYER = re.compile(r"(?:\blayers?[._]|(?:Decoder|Encoder|Transformer)?Layer_|Block_|\bh\.)(\d+)")
CPU_STREAM_BASE = -1  # host thread k (main thread first) gets stream -1 - k


@dataclass(frozen=True, slots=True)
class Step:
    number: int | None  # None: the whole capture
    start_ns: int
    end_ns: int
    tid: Any
    pid: Any

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(slots=True)
class CommOp:
    """One NCCL operation of a rank, in issue order, waiting for cross-rank processing."""

    node: GNode
    info: nccl.CommInfo
    issue_ns: int


@dataclass(slots=True)
class RankGraph:
    rank: int
    builder: GraphBuilder
    step: Step
    comm_ops: list[CommOp]
    metadata: dict[str, Any]
    source: str
    stats: dict[str, int] = field(default_factory=dict)

    def to_trace(self) -> Trace:
        trace = finalize(self.builder, self.metadata, origin=self.step.start_ns, rank=self.rank)
        return Trace(metadata=trace.metadata, nodes=trace.nodes, rank=self.rank, source=self.source)


# -- step selection ------------------------------------------------------------------------------
def list_steps(kt: KinetoTrace) -> list[Step]:
    steps = []
    for e in kt.events:
        if e.cat in CPU_CATS and e.name.startswith(STEP_PREFIX):
            try:
                n = int(e.name[len(STEP_PREFIX):])
            except ValueError:
                continue
            steps.append(Step(n, e.ts_ns, e.end_ns, e.tid, e.pid))
    steps.sort(key=lambda s: (s.start_ns, s.number))
    return steps


def select_step(kt: KinetoTrace, step: int | str | None) -> Step:
    """``step``: a ProfilerStep number, ``"all"`` (the whole capture) or None (the last step)."""
    steps = list_steps(kt)
    if step == "all" or (step is None and not steps):
        cpu = [e for e in kt.events if e.cat in CPU_CATS or e.cat in RUNTIME_CATS]
        if not cpu:
            raise FormatError("trace has no CPU events", file=kt.name)
        pid = _main_pid(cpu)
        mine = [e for e in cpu if e.pid == pid]
        tid = _busiest([e.tid for e in mine if e.cat in CPU_CATS] or [e.tid for e in mine])
        return Step(None, min(e.ts_ns for e in mine), max(e.end_ns for e in mine), tid, pid)
    if step is None:
        # the last complete step (all its launches have their GPU work in the capture); a duplicated
        # number (two threads annotate it) keeps the longest span
        numbers = list(dict.fromkeys(s.number for s in reversed(steps)))
        gpu_corrs = {e.correlation for e in kt.events if e.cat in GPU_CATS and e.correlation is not None}
        for number in numbers:
            pick = max((s for s in steps if s.number == number), key=lambda s: (s.duration_ns, -s.start_ns))
            if _missing_gpu_work(kt, pick, gpu_corrs) <= 0.005:
                return pick
            log.info("%s: ProfilerStep#%s has launches without GPU work in the capture; trying an earlier step",
                     kt.name, number)
        return max((s for s in steps if s.number == numbers[0]), key=lambda s: (s.duration_ns, -s.start_ns))
    try:
        wanted = int(step)
    except (TypeError, ValueError):
        raise ConfigError(f"expected a ProfilerStep number or 'all', found {step!r}", field="step") from None
    same = [s for s in steps if s.number == wanted]
    if not same:
        have = ", ".join(str(s.number) for s in steps) or "none"
        raise ConfigError(f"no ProfilerStep#{wanted} in the trace (steps: {have})", file=kt.name, field="step")
    return max(same, key=lambda s: (s.duration_ns, -s.start_ns))


def _missing_gpu_work(kt: KinetoTrace, step: Step, gpu_corrs: set[int]) -> float:
    """Share of the step's kernel launches whose kernels the capture does not hold (cut off)."""
    launches = [e for e in kt.events if e.cat in RUNTIME_CATS and e.name in KERNEL_LAUNCH_CALLS and e.pid == step.pid
                and step.start_ns <= e.ts_ns < step.end_ns and e.correlation is not None]
    if not launches:
        return 0.0
    return sum(1 for e in launches if e.correlation not in gpu_corrs) / len(launches)


def _busiest(values: Iterable[Any]) -> Any:
    counts: dict[Any, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return max(sorted(counts, key=str), key=lambda k: counts[k])


def _main_pid(events: Sequence[Event]) -> Any:
    return _busiest(e.pid for e in events)


# -- naming ----------------------------------------------------------------------------------------
class _Scopes:
    """Innermost enclosing ops at increasing query times, for one thread."""

    def __init__(self, ops: list[Event]) -> None:
        self.ops = sorted(ops, key=lambda e: (e.ts_ns, -e.end_ns, e.index))
        self.ptr = 0
        self.stack: list[Event] = []
        self.last = -(1 << 62)

    def at(self, t: int) -> list[Event]:
        t = self.last = max(t, self.last)
        ops, stack = self.ops, self.stack
        while self.ptr < len(ops) and ops[self.ptr].ts_ns <= t:
            e = ops[self.ptr]
            while stack and stack[-1].end_ns <= e.ts_ns:
                stack.pop()
            stack.append(e)
            self.ptr += 1
        while stack and stack[-1].end_ns <= t:
            stack.pop()
        return [e for e in stack if e.end_ns > t]


#: annotations that name an operation rather than a scope
_OP_LIKE_ANNOTATIONS = ("nccl:", "c10d::", "gloo:", "aten::")


def _scope_names(stack: list[Event]) -> tuple[str, str]:
    """(op name, scope) for an enclosing stack, innermost last.  The scope is the innermost
    nn.Module / annotation, prefixed by the enclosing layer module when there is one
    (``Qwen2DecoderLayer_3/Qwen2Attention_3``, ``ParallelTransformerLayer_7/ParallelMLP_7``)."""
    op = ""
    module = ""
    layer_scope = ""
    for e in reversed(stack):
        is_op = e.cat == "cpu_op" or e.name.startswith(_OP_LIKE_ANNOTATIONS)
        if not op and is_op:
            op = e.name
        if not is_op and (e.cat == "python_function" or (e.cat == "user_annotation" and not e.name.startswith(STEP_PREFIX))):
            name = e.name[len("nn.Module: "):] if e.name.startswith("nn.Module: ") else e.name
            if not module:
                module = name
            if not layer_scope and _LAYER.search(name):
                layer_scope = name
    if layer_scope and layer_scope != module:
        module = f"{layer_scope}/{module}"
    if not op and stack:
        top = stack[-1]
        op = "" if top.name.startswith(STEP_PREFIX) else top.name
    return op, module


def _layer_of(*names: str) -> int | None:
    for n in names:
        m = _LAYER.search(n)
        if m:
            return int(m.group(1))
    return None


# -- conversion of one rank ----------------------------------------------------------------------
@dataclass(slots=True)
class _Thread:
    tid: Any
    index: int
    events: list[Event]  # cpu ops + runtime calls of the window, by time
    nodes: list[GNode] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # node end times, for bisect


def _bursts(events: list[Event]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for e in sorted(events, key=lambda e: e.ts_ns):
        if spans and e.ts_ns - spans[-1][1] < BURST_GAP_NS:
            if e.end_ns > spans[-1][1]:
                spans[-1] = (spans[-1][0], e.end_ns)
        else:
            spans.append((e.ts_ns, e.end_ns))
    return spans


#: enrichment hook: the innermost CPU op of a node -> (extra attrs, inputs, outputs), or None
Annotate = Callable[[Event], "tuple[dict[str, Any], Any, Any] | None"]


def _innermost_op(stack: list[Event]) -> Event | None:
    for e in reversed(stack):
        if e.cat == "cpu_op" or e.name.startswith(_OP_LIKE_ANNOTATIONS):
            return e
    return None


def _apply(node: GNode, extra: "tuple[dict[str, Any], Any, Any] | None") -> None:
    if extra is None:
        return
    attrs, inputs, outputs = extra
    for k, v in attrs.items():
        node.attrs.setdefault(k, v)
    node.inputs = node.inputs or inputs
    node.outputs = node.outputs or outputs


@dataclass(slots=True)
class _Window:
    """Phase 1: the step's events.  Host events of the step's process inside the window; device ops
    launched from them (or uncorrelated ones inside the window), by time; per stream, when work from
    before the window finished (backlog, not idle time)."""

    sel: Step
    host: list[Event]
    runtime_by_corr: dict[int, Event]
    gpu: list[Event]
    gpu_by_corr: dict[int, list[Event]]
    busy_until: dict[Any, int]


def _collect_window(kt: KinetoTrace, step: int | str | None) -> _Window:
    sel = select_step(kt, step)
    w0, w1 = sel.start_ns, sel.end_ns
    in_window = lambda e: w0 <= e.ts_ns < w1  # noqa: E731
    host = [e for e in kt.events if e.pid == sel.pid and (e.cat in CPU_CATS or e.cat in RUNTIME_CATS)
            and in_window(e) and not (e.cat in CPU_CATS and e.name.startswith(STEP_PREFIX))]
    runtime_by_corr: dict[int, Event] = {e.correlation: e for e in host if e.cat in RUNTIME_CATS and e.correlation is not None}
    gpu: list[Event] = []
    for e in kt.events:
        if e.cat in GPU_CATS:
            if e.correlation is not None and e.correlation in runtime_by_corr:
                gpu.append(e)
            elif (e.correlation is None or e.correlation not in runtime_by_corr) and e.correlation is None and in_window(e):
                gpu.append(e)
    gpu.sort(key=lambda e: (e.ts_ns, e.index))
    first_on_stream: dict[Any, Event] = {}
    for e in gpu:
        first_on_stream.setdefault(e.stream, e)
    busy_until: dict[Any, int] = {}
    for e in kt.events:
        if e.cat in GPU_CATS and e.stream in first_on_stream and e.ts_ns < first_on_stream[e.stream].ts_ns:
            busy_until[e.stream] = max(busy_until.get(e.stream, e.end_ns), e.end_ns)
    gpu_by_corr: dict[int, list[Event]] = {}
    for e in gpu:
        if e.correlation is not None:
            gpu_by_corr.setdefault(e.correlation, []).append(e)
    return _Window(sel, host, runtime_by_corr, gpu, gpu_by_corr, busy_until)


@dataclass(slots=True)
class _Threads:
    """Phase 2: the host threads (the step's thread first, then by id), the secondary threads'
    bursts, when they end inside the window, and the bursts the main thread waits through (inside a
    backward call, or nearly idle): while those run, main's segments wait for the burst's progress
    instead of keeping the blocked time as duration."""

    main: _Thread
    threads: list[_Thread]
    bursts: dict[Any, list[tuple[int, int]]]
    join_times: list[int]
    blocked: set[tuple[Any, tuple[int, int]]]
    block_starts: list[int]


def _host_threads(kt: KinetoTrace, win: _Window) -> _Threads:
    sel = win.sel
    w0, w1 = sel.start_ns, sel.end_ns
    by_tid: dict[Any, list[Event]] = {}
    for e in win.host:
        by_tid.setdefault(e.tid, []).append(e)
    tids = sorted(by_tid, key=lambda t: (t != sel.tid, str(t)))
    threads = [_Thread(t, i, sorted(by_tid[t], key=lambda e: (e.ts_ns, -e.end_ns, e.index))) for i, t in enumerate(tids)]
    if not threads:
        raise FormatError(f"no host events in the selected window of ProfilerStep#{sel.number}", file=kt.name)
    main = threads[0]
    bursts = {th.tid: _bursts([e for e in th.events if e.cat in CPU_CATS] or th.events) for th in threads[1:]}
    join_times = sorted({end for spans in bursts.values() for _, end in spans if w0 < end < w1})
    main_top = [e for e in main.events if e.cat == "cpu_op"]
    main_spans = [e for e in main.events if e.cat in CPU_CATS]

    def waits_through(span: tuple[int, int]) -> bool:
        bs, be = span
        if any(e.ts_ns <= bs and e.end_ns >= be and "backward" in e.name.lower() for e in main_spans):
            return True
        busy = sum(min(e.end_ns, be) - e.ts_ns for e in main_top if bs < e.ts_ns < be)
        return busy < 0.25 * (be - bs)

    blocked = {(tid, span) for tid, spans in bursts.items() for span in spans
               if w0 < span[0] and span[1] < w1 and waits_through(span)}
    block_starts = sorted({span[0] for _, span in blocked})
    return _Threads(main, threads, bursts, join_times, blocked, block_starts)


@dataclass(slots=True)
class _Launches:
    """What phase 3 (host segments) records for the later phases: per correlation id the host
    segment ending at the launch, the enclosing op stack, scope and innermost op; host nodes that
    waited for GPU work (blocking copies, synchronize calls); stream-wait and event-record calls."""

    node: dict[int, GNode] = field(default_factory=dict)
    stack: dict[int, list[tuple[str, dict | None]]] = field(default_factory=dict)
    scope: dict[int, tuple[str, str]] = field(default_factory=dict)
    op: dict[int, Event | None] = field(default_factory=dict)
    blocking: list[tuple[GNode, Event]] = field(default_factory=list)
    syncs: list[tuple[GNode, Event, Any]] = field(default_factory=list)
    waits: list[tuple[Event, Any]] = field(default_factory=list)
    records: list[tuple[Event, Any]] = field(default_factory=list)


class _HostSegments:
    """Phase 3: each host thread as a chain of segments cut at every GPU launch, synchronising call
    and burst boundary; a segment is named after the innermost op (and scope) it ran in."""

    def __init__(self, b: GraphBuilder, win: _Window, ths: _Threads, annotate: Annotate | None) -> None:
        self.b, self.win, self.ths, self.annotate = b, win, ths, annotate
        self.out = _Launches()

    def build(self) -> _Launches:
        self.thread(self.ths.main, self.ths.join_times)
        for th in self.ths.threads[1:]:
            self.thread(th, [])
        return self.out

    def _cuts(self, th: _Thread, joins: list[int]) -> list[tuple[int, int, Any]]:
        """(time, kind, event) in order: 1 = a launch or synchronize call, 0 = main resumes after a
        secondary burst, 2 = a secondary thread's burst starts."""
        out, gpu_by_corr = self.out, self.win.gpu_by_corr
        cut_events: list[tuple[int, int, Any]] = []
        for e in th.events:
            if e.cat not in RUNTIME_CATS:
                continue
            if e.correlation is not None and e.correlation in gpu_by_corr:
                cut_events.append((e.ts_ns, 1, e))
            elif e.name in SYNC_CALLS:
                cut_events.append((e.ts_ns, 1, e))
            elif e.name in WAIT_CALLS:
                out.waits.append((e, th.tid))
            elif e.name in RECORD_CALLS:
                out.records.append((e, th.tid))
        for t in joins:
            cut_events.append((t, 0, None))
        if th is self.ths.main:
            for t in self.ths.block_starts:
                cut_events.append((t, 0, None))
        if th is not self.ths.main:
            for start, _ in self.ths.bursts.get(th.tid, []):
                cut_events.append((start, 2, "burst"))
        cut_events.sort(key=lambda c: (c[0], c[1], c[2].index if isinstance(c[2], Event) else -1))
        return cut_events

    def thread(self, th: _Thread, joins: list[int]) -> None:
        walk = _ThreadWalk(self, th)
        for t, kind, e in self._cuts(th, joins):
            walk.cut(max(t, walk.cursor_end), kind, e)
        walk.finish()


class _ThreadWalk:
    """Phase 3 on one host thread: a cursor (the thread's last node and where it ends), moved by each
    cut in time order; a segment runs from the cursor to the cut and depends on the cursor and on the
    main-thread nodes a secondary burst started after (``pending_cross``)."""

    def __init__(self, segments: _HostSegments, th: _Thread) -> None:
        self.b, self.out, self.win, self.annotate = segments.b, segments.out, segments.win, segments.annotate
        self.main = segments.ths.main
        self.th = th
        self.scopes = _Scopes([e for e in th.events if e.cat in CPU_CATS])
        self.stream_id = CPU_STREAM_BASE - th.index
        ops = [e for e in th.events if e.cat in CPU_CATS]
        w0 = self.win.sel.start_ns
        self.last_end = max((e.end_ns for e in ops), default=max((e.end_ns for e in th.events), default=w0))
        self.cursor: GNode | None = None
        self.cursor_end = w0
        self.pending_cross: list[GNode] = []

    def cut(self, t: int, kind: int, e: Any) -> None:
        """One cut of :meth:`_HostSegments._cuts` at ``t`` (not before the cursor)."""
        if kind == 2:  # a secondary thread's burst starts: after main's last node before it
            i = bisect.bisect_right(self.main.ends, t) - 1
            if i >= 0:
                self.pending_cross.append(self.main.nodes[i])
        elif kind == 0:  # main thread: a secondary burst ended here; resume after it
            if t > self.cursor_end:
                self.segment(t)
        elif e.name in SYNC_CALLS:
            if t > self.cursor_end or self.cursor is None:
                self.segment(t)
            self.out.syncs.append((self.host_call(e, self.cursor), e, self.th.tid))
        else:
            self.launch(t, e)

    def launch(self, t: int, e: Event) -> None:
        """A GPU launch (or copy / memset call): the segment up to it, and what later phases need."""
        out = self.out
        stack = self.scopes.at(e.ts_ns)
        node = self.segment(t)
        out.node[e.correlation] = node
        out.stack[e.correlation] = [(s.name, s.args) for s in reversed(stack)]
        out.scope[e.correlation] = _scope_names(stack)
        out.op[e.correlation] = _innermost_op(stack)
        if e.name not in KERNEL_LAUNCH_CALLS and all(g.end_ns <= e.end_ns for g in self.win.gpu_by_corr[e.correlation]):
            # a blocking copy / memset: the call returned when the GPU op was done
            out.blocking.append((self.host_call(e, node), e))

    def finish(self) -> None:
        """The last segment: to the step's end on the main thread, else to the thread's last op."""
        sel = self.win.sel
        tail = sel.end_ns if self.th is self.main and sel.number is not None else self.last_end
        if tail > self.cursor_end or self.cursor is None:
            self.segment(max(tail, self.cursor_end))

    def host_call(self, e: Event, dep: GNode | None) -> GNode:
        y = self.b.add(e.name, NodeType.COMP, e.ts_ns, e.end_ns, on_cpu=True, deps=[dep], fixed=False,
                       **{A.STREAM: self.stream_id, A.THREAD: _int_tid(self.th.tid)})
        self._advance(y, e.end_ns)
        return y

    def segment(self, t: int) -> GNode:
        here = self.scopes.at(t - 1)
        op, module = _scope_names(here)
        name = f"{module}/{op}" if module and op else (op or module or "cpu")
        attrs: dict[str, Any] = {A.STREAM: self.stream_id, A.THREAD: _int_tid(self.th.tid)}
        if module:
            attrs[A.MODULE] = module
        layer = _layer_of(module, op)
        if layer is not None:
            attrs[A.LAYER] = layer
        node = self.b.add(name, NodeType.COMP, self.cursor_end, t, on_cpu=True, deps=[self.cursor, *self.pending_cross],
                          fixed=False, **attrs)
        self.pending_cross = []
        if self.annotate is not None:
            inner = _innermost_op(here)
            if inner is not None:
                _apply(node, self.annotate(inner))
        self._advance(node, t)
        return node

    def _advance(self, node: GNode, end_ns: int) -> None:
        self.th.nodes.append(node)
        self.th.ends.append(node.end)
        self.cursor, self.cursor_end = node, end_ns


def _join_bursts(ths: _Threads) -> None:
    """Phase 4: main resumes after each secondary burst.  Blocked in it (no main op starts during
    it): the main node spanning the burst waits for its end, so the blocked time follows the burst
    instead of being a fixed duration; otherwise the main node starting at the burst's end does."""
    main = ths.main
    main_starts = [n.start for n in main.nodes]
    for th in ths.threads[1:]:
        for span in ths.bursts[th.tid]:
            end = span[1]
            i = bisect.bisect_right(th.ends, end) - 1
            if i < 0:
                continue
            last = th.nodes[i]
            if (th.tid, span) in ths.blocked:
                j = bisect.bisect_left(main_starts, span[0])
                while j < len(main.nodes) and main.nodes[j].end <= end:
                    node = main.nodes[j]
                    k = bisect.bisect_right(th.ends, node.end) - 1
                    if k >= 0 and th.nodes[k].end > node.start:
                        node.ctrl_deps.append(th.nodes[k])
                    j += 1
            j = bisect.bisect_left(main_starts, end)
            if j < len(main.nodes) and last.end <= main.nodes[j].end:
                main.nodes[j].ctrl_deps.append(last)


def _device_ops(kt: KinetoTrace, b: GraphBuilder, win: _Window, lau: _Launches, world_size: int,
                annotate: Annotate | None, stats: dict[str, int]) -> tuple[dict[int, GNode], list[CommOp]]:
    """Phase 5: device ops after their launch and the previous op of their stream; NCCL kernels as
    COMM_COLL nodes described from their args, launching ops or name."""
    gpu_node: dict[int, GNode] = {}
    comm_ops: list[CommOp] = []
    last_on_stream: dict[Any, GNode] = {}
    for e in win.gpu:
        launch = lau.node.get(e.correlation) if e.correlation is not None else None
        prev = last_on_stream.get(e.stream)
        deps = [d for d in (launch, prev) if d is not None]
        op, module = lau.scope.get(e.correlation, ("", "")) if e.correlation is not None else ("", "")
        attrs: dict[str, Any] = {A.STREAM: e.stream if e.stream is not None else 0}
        if op:
            attrs[A.LAUNCH_OP] = op
        if module:
            attrs[A.MODULE] = module
        layer = _layer_of(module, op)
        if layer is not None:
            attrs[A.LAYER] = layer
        info = None
        if is_nccl_work(e):
            info = nccl.describe(e.name, e.args, lau.stack.get(e.correlation, []), world_size)
            if info is None:
                stats["unknown_nccl"] = stats.get("unknown_nccl", 0) + 1
                log.warning("%s: NCCL kernel %s (event %d): cannot tell which operation it is; kept as compute",
                            kt.name, e.name[:60], e.index)
        if info is not None:
            if info.algo:
                attrs[A.NCCL_ALGO] = info.algo
            node = b.add(_comm_name(info, e.name), NodeType.COMM_COLL, e.ts_ns, e.end_ns, on_cpu=False, deps=deps,
                         timed=False, **attrs)
            issue = win.runtime_by_corr[e.correlation].ts_ns if e.correlation in win.runtime_by_corr else e.ts_ns
            comm_ops.append(CommOp(node, info, issue))
        else:
            if e.cat != "kernel" and e.args and isinstance(e.args.get("bytes"), int) \
                    and 0 <= e.args["bytes"] <= MAX_SIZE_BYTES:
                attrs[A.TENSOR_SIZE] = e.args["bytes"]
            node = b.add(e.name, NodeType.COMP, e.ts_ns, e.end_ns, on_cpu=False, deps=deps, **attrs)
        if annotate is not None and e.correlation is not None and lau.op.get(e.correlation) is not None:
            _apply(node, annotate(lau.op[e.correlation]))  # type: ignore[arg-type]
        if prev is None and e.stream in win.busy_until:
            node.idle_from = win.busy_until[e.stream]
        gpu_node[e.index] = node
        last_on_stream[e.stream] = node
    return gpu_node, comm_ops


def _wait_edges(win: _Window, lau: _Launches, gpu_node: dict[int, GNode], stats: dict[str, int]) -> None:
    """Phase 6: cross-stream edges (cudaStreamWaitEvent: the recorded event's stream -> the next
    launch's stream), synchronize calls after the work they wait for, blocking copies after their
    op.  Edges the timestamps contradict are dropped (counted)."""
    idx = _launch_index(win, lau)
    _stream_wait_edges(idx, lau, gpu_node, stats)
    _sync_edges(idx, lau, gpu_node, stats)
    for y, e in lau.blocking:
        for g in win.gpu_by_corr[e.correlation]:
            y.ctrl_deps.append(gpu_node[g.index])


@dataclass(frozen=True, slots=True)
class _LaunchIndex:
    """The GPU ops in launch order, per host thread and all together, with their launch times (the
    bisect keys), and each thread's event-record call times."""

    launches: dict[Any, list[tuple[int, Event]]]
    keys: dict[Any, list[int]]
    all_launches: list[tuple[int, Event]]
    all_keys: list[int]
    rec_times: dict[Any, list[int]]


def _launch_index(win: _Window, lau: _Launches) -> _LaunchIndex:
    launches: dict[Any, list[tuple[int, Event]]] = {}
    for corr, ev_list in win.gpu_by_corr.items():
        rt = win.runtime_by_corr[corr]
        for g in ev_list:
            launches.setdefault(rt.tid, []).append((rt.ts_ns, g))
    all_launches = sorted((x for lst in launches.values() for x in lst), key=lambda x: (x[0], x[1].index))
    for lst in launches.values():
        lst.sort(key=lambda x: (x[0], x[1].index))
    keys = {tid: [x[0] for x in lst] for tid, lst in launches.items()}
    rec_times = {tid: sorted(r.ts_ns for r, t in lau.records if t == tid) for tid in {t for _, t in lau.records}}
    return _LaunchIndex(launches, keys, all_launches, [x[0] for x in all_launches], rec_times)


def _stream_wait_edges(idx: _LaunchIndex, lau: _Launches, gpu_node: dict[int, GNode], stats: dict[str, int]) -> None:
    """A stream-wait call: the next launch on its thread waits for the last op launched on another
    stream before the event was recorded."""
    for w, tid in lau.waits:
        lst, ks = idx.launches.get(tid, []), idx.keys.get(tid, [])
        j = bisect.bisect_right(ks, w.ts_ns)
        if j >= len(lst):
            continue
        b_ev = lst[j][1]
        limit = w.ts_ns
        recs = idx.rec_times.get(tid, [])
        r = bisect.bisect_right(recs, w.ts_ns) - 1
        if r >= 0:
            limit = recs[r]
        i = bisect.bisect_left(ks, limit) - 1
        while i >= 0 and lst[i][1].stream == b_ev.stream and r < 0:
            i -= 1
        if i >= 0 and lst[i][1].stream != b_ev.stream:
            a, bnode = lst[i][1], gpu_node[b_ev.index]
            an = gpu_node[a.index]
            if an is bnode:
                continue
            if a.end_ns <= b_ev.ts_ns:
                bnode.ctrl_deps.append(an)
            else:
                stats["dropped_edges"] += 1


def _sync_edges(idx: _LaunchIndex, lau: _Launches, gpu_node: dict[int, GNode], stats: dict[str, int]) -> None:
    """A synchronize call returns after the work it waits for: every stream's last op launched before
    it (device synchronize), else the last op of the stream its thread launched on last."""
    for y, e, tid in lau.syncs:
        before = idx.all_launches[:bisect.bisect_left(idx.all_keys, e.ts_ns)]
        if e.name.endswith("DeviceSynchronize"):
            last: dict[Any, Event] = {}
            for _, g in before:
                last[g.stream] = g
            targets = list(last.values())
        else:
            mine = [g for _, g in idx.launches.get(tid, [])[:bisect.bisect_left(idx.keys.get(tid, []), e.ts_ns)]]
            targets = []
            if mine:
                stream = mine[-1].stream
                targets = [next(g for g in reversed(mine) if g.stream == stream)]
        for g in targets:
            if g.end_ns <= e.end_ns:
                y.ctrl_deps.append(gpu_node[g.index])
            else:
                stats["dropped_edges"] += 1


def _rank_metadata(kt: KinetoTrace, rank: int, world_size: int, sel: Step) -> dict[str, Any]:
    device = kt.device_names[0] if kt.device_names else ""
    return {
        A.META_RANK: rank,
        A.META_WORLD_SIZE: world_size,
        A.META_SOURCE: "xsim-convert kineto",
        A.META_MEASURED_STEP_NS: sel.duration_ns,
        A.META_STEP: sel.number if sel.number is not None else -1,
        A.META_STEP_START_NS: sel.start_ns,  # ranks of one host share this clock: their relative start
        A.META_DEVICE: device,
    }


def convert_rank(kt: KinetoTrace, rank: int, world_size: int, step: int | str | None = None,
                 annotate: Annotate | None = None) -> RankGraph:
    """Build one rank's graph (cross-rank fields of comm nodes are filled in by ``crossrank``).

    ``annotate`` (used by the ET linker) adds attributes / tensor info from a node's CPU op.  The
    phases: the step's events, host threads, host segments, burst joins, device ops, wait edges,
    inferred stream waits."""
    win = _collect_window(kt, step)
    b = GraphBuilder()
    stats = {"gpu_ops": len(win.gpu), "host_events": len(win.host), "dropped_edges": 0}
    ths = _host_threads(kt, win)
    lau = _HostSegments(b, win, ths, annotate).build()
    _join_bursts(ths)
    gpu_node, comm_ops = _device_ops(kt, b, win, lau, world_size, annotate, stats)
    _wait_edges(win, lau, gpu_node, stats)
    _infer_stream_waits(win.gpu, gpu_node, win.runtime_by_corr, stats)
    return RankGraph(rank, b, win.sel, comm_ops, _rank_metadata(kt, rank, world_size, win.sel), kt.name, stats)


#: a device op starting this much after its deps allow is checked for an unrecorded cross-stream wait
INFER_WAIT_MIN_GAP_NS = 50_000
#: ... and the op on another stream that ended at most this long before it starts is taken as the cause
INFER_WAIT_MAX_LAG_NS = 10_000


def _infer_stream_waits(gpu: list[Event], gpu_node: dict[int, GNode], runtime_by_corr: dict[int, Event],
                        stats: dict[str, int]) -> None:
    """Edges for waits the trace does not record (event record/wait without ids, another thread):
    an op that idles long after its deps, right after an op on another stream ended, waited for it."""
    by_end = sorted(gpu, key=lambda e: (e.end_ns, e.index))
    ends = [e.end_ns for e in by_end]
    for e in gpu:
        node = gpu_node[e.index]
        deps = node.deps()
        ready = max((d.end for d in deps), default=e.ts_ns)
        if e.ts_ns - ready < INFER_WAIT_MIN_GAP_NS:
            continue
        launch_ts = runtime_by_corr[e.correlation].ts_ns if e.correlation in runtime_by_corr else e.ts_ns
        hi = bisect.bisect_right(ends, e.ts_ns)
        lo = bisect.bisect_left(ends, e.ts_ns - INFER_WAIT_MAX_LAG_NS)
        for cand in reversed(by_end[lo:hi]):
            if cand.stream == e.stream or cand.index == e.index:
                continue
            cand_launch = runtime_by_corr[cand.correlation].ts_ns if cand.correlation in runtime_by_corr else cand.ts_ns
            if cand_launch <= launch_ts:
                node.ctrl_deps.append(gpu_node[cand.index])
                stats["inferred_waits"] = stats.get("inferred_waits", 0) + 1
                break


def _int_tid(tid: Any) -> int:
    """The ``tid`` attribute of a host thread: its id, or for a named thread a stable number from the
    name (crc32: Python's string hash changes from run to run, which made outputs differ)."""
    return tid if isinstance(tid, int) and not isinstance(tid, bool) else zlib.crc32(str(tid).encode()) % (1 << 31)


def _comm_name(info: nccl.CommInfo, kernel: str) -> str:
    what = info.coll.name if info.coll is not None else info.kind.value.upper()
    return f"{what} {kernel.split('(')[0]}"


# -- several ranks -----------------------------------------------------------------------------------
@dataclass(slots=True)
class Conversion:
    """The converted rank set, ready for ``xsim_trace.io.write_rank_set``."""

    traces: dict[int, Trace]
    comm_groups: dict[str, tuple[int, ...]]
    stats: dict[str, int] = field(default_factory=dict)


def read_ranks(sources: Sequence[Any], progress: Callable[[int], None] | None = None,
               on_file: Callable[[str], None] | None = None) -> list[KinetoTrace]:
    """Read Kineto files (``xsim_trace.io.sources.Source``) and order them by rank."""
    out = []
    for src in sources:
        if on_file is not None:
            on_file(src.name)
        out.append(read_capture(src, progress))
    return out


def assign_ranks(kts: Sequence[KinetoTrace]) -> dict[int, KinetoTrace]:
    """Rank of each file: ``distributedInfo.rank``, else the number in its name, else its position."""
    from xsim_trace.io.sources import rank_from_name

    ranks: dict[int, KinetoTrace] = {}
    for pos, kt in enumerate(kts):
        rank = kt.rank
        if rank is None or len(kts) > 1 and any(o is not kt and o.rank == rank for o in kts):
            hint = rank_from_name(kt.name)
            rank = hint if hint is not None else pos
        if rank in ranks:
            raise FormatError(f"two input files claim rank {rank} (also {ranks[rank].name})", file=kt.name, rank=rank)
        if not 0 <= rank < MAX_WORLD_SIZE:
            raise FormatError(f"rank {rank} (from the file name) is out of range (0..{MAX_WORLD_SIZE - 1})",
                              file=kt.name)
        ranks[rank] = kt
    return dict(sorted(ranks.items()))


def convert_kineto(kts: Sequence[KinetoTrace], *, step: int | str | None = None, alltoall: str = "p2p",
                   on_rank: Callable[[int], None] | None = None,
                   annotators: dict[str, Annotate] | None = None, source: str = "xsim-convert kineto",
                   consume: bool = False) -> Conversion:
    """Convert the Kineto traces of one job (one file per rank) into a rank set.

    ``consume``: free each input's events once its graph is built (the inputs are unusable after)."""
    from converters import crossrank

    if alltoall not in crossrank.ALLTOALL_MODES:
        raise ConfigError(f"expected one of {', '.join(crossrank.ALLTOALL_MODES)}, found {alltoall!r}", field="alltoall")
    by_rank = assign_ranks(kts)
    world = max([len(by_rank), max(by_rank) + 1] + [kt.world_size or 0 for kt in by_rank.values()])
    graphs = []
    for rank, kt in by_rank.items():
        if on_rank is not None:
            on_rank(rank)
        g = convert_rank(kt, rank, world, step, (annotators or {}).get(kt.name))
        g.metadata[A.META_SOURCE] = source
        graphs.append(g)
        if consume:
            kt.events.clear()
    groups = crossrank.assign([crossrank.RankOps(g.rank, g.comm_ops) for g in graphs], world, alltoall)
    groups_json = {k: list(v) for k, v in groups.items()}
    from xsim_trace.graph.model import comm_groups_to_json

    traces: dict[int, Trace] = {}
    stats: dict[str, int] = {}
    for g in graphs:
        g.metadata[A.META_COMM_GROUPS] = comm_groups_to_json(groups_json)
        traces[g.rank] = g.to_trace()
        g.builder = GraphBuilder()  # the rank's construction nodes are no longer needed
        for k, v in g.stats.items():
            stats[k] = stats.get(k, 0) + v
    check_bounds(traces)  # what the captured numbers became must fit the engine (a hostile capture)
    return Conversion(traces, groups, stats)
