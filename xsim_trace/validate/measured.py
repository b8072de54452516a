"""The measured side of validation: what one captured ProfilerStep of each rank really took, and why.

From a Kineto capture (streamed with ijson) this computes, per rank and for one ``ProfilerStep#N``:
the step's start and duration; every NCCL kernel with its type, algorithm, protocol, size and measured
duration; the GPU busy time (all streams), split into compute and NCCL; the GPU idle time split into
"CPU-bound" (nothing had been submitted yet: launch overhead, host work, blocking calls) and "queued"
(work was submitted but waited: stream waits, cross-stream dependencies, launch latency); the host time
spent in blocking CUDA calls; and launch-call statistics.  Across ranks that share a clock (one host),
:func:`peer_waits` splits each NCCL kernel into waiting for the last peer and transferring.
"""

from __future__ import annotations

import logging
import re
import statistics
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from xsim_trace.errors import ConfigError, FormatError
from xsim_trace.graph.bounds import MAX_WORLD_SIZE
from xsim_trace.nccl_names import (
    P2P_KERNEL_NAMES,
    RECV_NAMES,
    SEND_NAMES,
    arg_count,
    collective_of,
    dtype_bytes,
    normalise,
    parse_kernel_loosely,
    parse_kernel_name,
)
from xsim_trace.io.kineto import KinetoEvent as Event
from xsim_trace.io.kineto import is_nccl_work, read_capture
from xsim_trace.kineto_names import BLOCKING_CALLS, COPY_CALLS, GPU_CATS, LAUNCH_CALLS, RUNTIME_CATS, STEP_PREFIX
from xsim_trace.validate import intervals as iv
from xsim_trace.validate.kineto_events import CaptureFile, capture_rank, device_name, resolve_captures

log = logging.getLogger(__name__)

#: Step.number of the span covering every ProfilerStep (``--step all``)
ALL_STEPS = -1
_STEP_RE = re.compile(rf"^{re.escape(STEP_PREFIX)}(\d+)$")
@dataclass(frozen=True, slots=True)
class Step:
    number: int  # ALL_STEPS (-1) for the span of all ProfilerSteps
    start_ns: int
    duration_ns: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


@dataclass(frozen=True, slots=True)
class NcclKernel:
    """One measured NCCL kernel of the step."""

    ordinal: int  # position among the step's NCCL kernels, in start order
    name: str
    collective: str  # CollectiveType member name, or SEND_RECV
    algo: str
    proto: str
    stream: int | None
    start_ns: int  # absolute, on the capture's clock
    duration_ns: int
    launch_ns: int | None  # start of the host call that launched it
    size_bytes: int | None  # In msg nelems x dtype bytes, when the args have them
    out_size_bytes: int | None
    dtype: str | None
    group_size: int | None
    pg_name: str | None

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


@dataclass(frozen=True, slots=True)
class RankMeasurement:
    """Everything measured about one rank's chosen step.  Times are integer ns; ``*_start_ns`` are
    absolute on the capture's clock, everything else is a duration."""

    rank: int
    world_size: int | None
    device_name: str
    source: str
    steps: tuple[Step, ...]
    step: Step
    gpu_events: int
    compute_kernels: int
    gpu_busy_ns: int  # union of all device activity inside the step window
    compute_busy_ns: int  # union of non-NCCL device activity
    nccl_ns: int  # sum of NCCL kernel durations
    nccl_exposed_ns: int  # NCCL busy time not overlapped by compute
    gpu_idle_ns: int  # step window minus gpu_busy_ns
    cpu_bound_idle_ns: int  # idle with nothing submitted: host-bound
    queued_idle_ns: int  # idle with work submitted but not started: stream waits, deps, launch latency
    lead_ns: int  # step start -> first device activity
    tail_ns: int  # last device activity end -> step end (negative if work runs past the step)
    blocking_call_ns: int  # host time inside synchronize / blocking memcpy calls
    blocking_calls: int
    stream_wait_events: int  # cudaStreamWaitEvent calls
    launch_calls: int  # kernel / graph launches
    launch_call_ns: int  # host time inside them
    copy_calls: int  # cudaMemcpyAsync / cudaMemsetAsync
    copy_call_ns: int  # host time inside them (large when a pageable copy waits for the device)
    launch_latency_ns: int  # median launch-call start -> kernel start, for kernels that found their stream idle
    cpu_ops: int
    nccl: tuple[NcclKernel, ...] = field(default=())

    @property
    def step_ns(self) -> int:
        return self.step.duration_ns

    def to_dict(self) -> dict:
        out = {
            name: getattr(self, name)
            for name in self.__slots__  # type: ignore[attr-defined]
            if name not in ("steps", "step", "nccl")
        }
        out["step"] = self.step.number
        out["step_ns"] = self.step.duration_ns
        out["step_start_ns"] = self.step.start_ns
        out["steps"] = {s.number: s.duration_ns for s in self.steps}
        out["nccl"] = [
            {k: getattr(k_, k) for k in k_.__slots__}  # type: ignore[attr-defined]
            for k_ in self.nccl
        ]
        return out


def collective_label(word: str) -> str | None:
    """The collective a name spells, as reported: a CollectiveType member name, SEND_RECV for the
    point-to-point kernels and ops, or None when unknown."""
    coll = collective_of(word)
    if coll is not None:
        return coll.name
    key = normalise(word)
    return "SEND_RECV" if key in SEND_NAMES | RECV_NAMES | P2P_KERNEL_NAMES else None


def _parse_nccl_name(name: str) -> tuple[str, str, str]:
    parts = parse_kernel_name(name) or parse_kernel_loosely(name)
    if parts is None:
        return "UNKNOWN", "", ""
    return collective_label(parts.coll) or parts.coll.upper(), parts.algo, parts.proto


def _nelems_bytes(args: Mapping, key: str, dtype: str | None) -> int | None:
    n = arg_count(args, key)
    width = dtype_bytes(dtype)
    return n * width if n is not None and width is not None else None


def nccl_kernel(ordinal: int, ev: Event, launch_ns: int | None) -> NcclKernel:
    """An :class:`NcclKernel` from a Kineto kernel event (name and, when present, NCCL args)."""
    coll, algo, proto = _parse_nccl_name(ev.name)
    args = ev.args or {}
    named = args.get("Collective name")
    if isinstance(named, str) and collective_label(named) is not None:
        coll = collective_label(named)
    dtype = args.get("dtype") if isinstance(args.get("dtype"), str) else None
    pg = args.get("Process Group Name")
    return NcclKernel(
        ordinal=ordinal,
        name=ev.name.split("(")[0],
        collective=coll,
        algo=algo,
        proto=proto,
        stream=ev.stream,
        start_ns=ev.ts_ns,
        duration_ns=ev.dur_ns,
        launch_ns=launch_ns,
        size_bytes=_nelems_bytes(args, "In msg nelems", dtype),
        out_size_bytes=_nelems_bytes(args, "Out msg nelems", dtype),
        dtype=dtype,
        group_size=arg_count(args, "Group size", MAX_WORLD_SIZE),
        pg_name=str(pg) if pg is not None else None,
    )


def default_step(steps: Sequence[Step]) -> Step:
    """The step ``xsim-convert kineto`` converts by default: the last ProfilerStep."""
    if not steps:
        raise FormatError("no ProfilerStep#N span in the capture")
    return max(steps, key=lambda s: (s.start_ns, s.number))


def choose_step(steps: Sequence[Step], number: int | str | None, source: str = "") -> Step:
    """``number``: a ProfilerStep number, ``"all"`` (the whole capture, number -1) or None (default)."""
    if number == "all":
        if not steps:
            raise FormatError("no ProfilerStep#N span in the capture", file=source)
        lo = min(s.start_ns for s in steps)
        hi = max(s.end_ns for s in steps)
        return Step(ALL_STEPS, lo, hi - lo)
    if number is None:
        try:
            return default_step(steps)
        except FormatError:
            raise FormatError("no ProfilerStep#N span in the capture", file=source) from None
    try:
        wanted = int(number)
    except (TypeError, ValueError):
        raise ConfigError(f"expected a ProfilerStep number or 'all', found {number!r}", field="step") from None
    for s in steps:
        if s.number == wanted:
            return s
    have = ", ".join(str(s.number) for s in sorted(steps, key=lambda s: s.number)) or "none"
    raise ConfigError(f"no ProfilerStep#{wanted} in the capture (it has {have})", file=source, field="step")


def measure_capture(capture: CaptureFile, step: int | str | None = None, position: int | None = None) -> RankMeasurement:
    """Measure one rank's capture for ``ProfilerStep#step`` (default: :func:`default_step`).  The rank is
    ``distributedInfo.rank``, else the number in the file name, else ``position`` (as xsim-convert does)."""
    trace = read_capture(capture)
    rank = capture_rank(trace, capture, position)
    steps: list[Step] = []
    gpu: list[Event] = []
    runtime: list[Event] = []
    cpu_ops: list[Event] = []
    for ev in trace.events:
        m = _STEP_RE.match(ev.name)
        if m and ev.cat in ("user_annotation", "cpu_op"):
            steps.append(Step(int(m.group(1)), ev.ts_ns, ev.dur_ns))
        elif ev.cat in GPU_CATS:
            gpu.append(ev)
        elif ev.cat in RUNTIME_CATS:
            runtime.append(ev)
        elif ev.cat == "cpu_op":
            cpu_ops.append(ev)
    # ProfilerStep spans can appear twice (CPU annotation and GPU copy); keep one per number
    unique = {s.number: s for s in sorted(steps, key=lambda s: (s.number, -s.duration_ns))[::-1]}
    all_steps = tuple(sorted(unique.values(), key=lambda s: s.number))
    chosen = choose_step(all_steps, step, capture.name)
    return _measure_step(rank, trace.world_size, device_name(trace), capture.name, all_steps, chosen,
                         gpu, runtime, cpu_ops)


def _measure_step(rank, world_size, device, source, all_steps, step, gpu, runtime, cpu_ops) -> RankMeasurement:
    lo, hi = step.start_ns, step.end_ns
    launch_by_corr: dict[int, Event] = {}
    for ev in runtime:
        if ev.correlation is not None:
            launch_by_corr.setdefault(ev.correlation, ev)

    def in_step(ev: Event) -> bool:
        launch = launch_by_corr.get(ev.correlation) if ev.correlation is not None else None
        t = launch.ts_ns if launch is not None else ev.ts_ns
        return lo <= t < hi

    events = sorted((e for e in gpu if in_step(e)), key=lambda e: (e.ts_ns, e.index))
    is_nccl = [is_nccl_work(e) for e in events]
    busy = iv.clip(((e.ts_ns, e.end_ns) for e in events), lo, hi)
    compute = iv.clip(((e.ts_ns, e.end_ns) for e, n in zip(events, is_nccl) if not n), lo, hi)
    nccl_busy = iv.clip(((e.ts_ns, e.end_ns) for e, n in zip(events, is_nccl) if n), lo, hi)
    idle = iv.subtract([(lo, hi)], busy)
    pending = []
    for e in events:
        launch = launch_by_corr.get(e.correlation) if e.correlation is not None else None
        if launch is not None and launch.end_ns < e.ts_ns:
            pending.append((launch.end_ns, e.ts_ns))
    queued = iv.intersect(idle, iv.union(pending))

    # launch latency: kernels that found their stream idle when launched
    last_end_by_stream: dict[object, int] = {}
    latencies: list[int] = []
    for e in events:
        launch = launch_by_corr.get(e.correlation) if e.correlation is not None else None
        prev_end = last_end_by_stream.get(e.stream, -1)
        if launch is not None and launch.end_ns >= prev_end and e.ts_ns >= launch.ts_ns:
            latencies.append(e.ts_ns - launch.ts_ns)
        last_end_by_stream[e.stream] = max(prev_end, e.end_ns)

    step_runtime = [r for r in runtime if lo <= r.ts_ns < hi]
    blocking = [r for r in step_runtime if r.name in BLOCKING_CALLS]
    launches = [r for r in step_runtime if r.name in LAUNCH_CALLS]
    nccl = tuple(
        nccl_kernel(i, e, launch_by_corr[e.correlation].ts_ns if e.correlation in launch_by_corr else None)
        for i, e in enumerate(e for e, n in zip(events, is_nccl) if n)
    )
    first = min((e.ts_ns for e in events), default=hi)
    last = max((e.end_ns for e in events), default=lo)
    return RankMeasurement(
        rank=rank,
        world_size=world_size,
        device_name=device,
        source=source,
        steps=all_steps,
        step=step,
        gpu_events=len(events),
        compute_kernels=sum(1 for e, n in zip(events, is_nccl) if not n and e.cat == "kernel"),
        gpu_busy_ns=iv.total(busy),
        compute_busy_ns=iv.total(compute),
        nccl_ns=sum(e.dur_ns for e, n in zip(events, is_nccl) if n),
        nccl_exposed_ns=iv.total(iv.subtract(nccl_busy, compute)),
        gpu_idle_ns=iv.total(idle),
        cpu_bound_idle_ns=iv.total(idle) - iv.total(queued),
        queued_idle_ns=iv.total(queued),
        lead_ns=first - lo,
        tail_ns=hi - last,
        blocking_call_ns=sum(r.dur_ns for r in blocking),
        blocking_calls=len(blocking),
        stream_wait_events=sum(1 for r in step_runtime if r.name == "cudaStreamWaitEvent"),
        launch_calls=len(launches),
        launch_call_ns=sum(r.dur_ns for r in launches),
        copy_calls=sum(1 for r in step_runtime if r.name in COPY_CALLS),
        copy_call_ns=sum(r.dur_ns for r in step_runtime if r.name in COPY_CALLS),
        launch_latency_ns=int(statistics.median(latencies)) if latencies else 0,
        cpu_ops=sum(1 for c in cpu_ops if lo <= c.ts_ns < hi),
        nccl=nccl,
    )


def measure(spec: str, step: int | str | None = None) -> dict[int, RankMeasurement]:
    """Measure every rank capture named by ``spec`` (file, folder, glob, tarball), keyed by rank."""
    out: dict[int, RankMeasurement] = {}
    for position, capture in enumerate(resolve_captures(spec)):
        m = measure_capture(capture, step, position)
        if m.rank in out:
            raise FormatError(f"rank {m.rank} appears twice (also in {out[m.rank].source})", file=capture.name)
        out[m.rank] = m
    if not out:
        raise FormatError("no Kineto capture found", file=spec)
    return dict(sorted(out.items()))


# --- across ranks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerWait:
    """One NCCL kernel of one rank split at the moment its last peer started the same kernel."""

    rank: int
    ordinal: int
    collective: str
    wait_ns: int  # this kernel's start -> the last peer's start
    transfer_ns: int  # the last peer's start -> this kernel's end


def shared_clock(measurements: Mapping[int, RankMeasurement], tolerance_ns: int = 50_000) -> bool:
    """Whether the ranks' clocks agree: every aligned NCCL kernel ends within ``tolerance_ns`` on all
    ranks (ranks on one host share the host clock; separate hosts usually do not)."""
    if len(measurements) < 2:
        return False
    counts = {len(m.nccl) for m in measurements.values()}
    if len(counts) != 1 or not counts.pop():
        return False
    ms = list(measurements.values())
    for i in range(len(ms[0].nccl)):
        ends = [m.nccl[i].end_ns for m in ms]
        if max(ends) - min(ends) > tolerance_ns:
            return False
    return True


def peer_waits(measurements: Mapping[int, RankMeasurement]) -> list[PeerWait]:
    """Per rank and NCCL kernel ordinal, the wait for the last peer and the remaining transfer time.
    Needs a shared clock (see :func:`shared_clock`); empty otherwise."""
    if not shared_clock(measurements):
        return []
    ms = [measurements[r] for r in sorted(measurements)]
    out: list[PeerWait] = []
    for i in range(len(ms[0].nccl)):
        last_start = max(m.nccl[i].start_ns for m in ms)
        for m in ms:
            k = m.nccl[i]
            out.append(PeerWait(m.rank, i, k.collective, max(0, last_start - k.start_ns),
                                k.end_ns - max(k.start_ns, last_start)))
    return out


def start_skew_ns(measurements: Mapping[int, RankMeasurement]) -> dict[int, int]:
    """Each rank's step start minus the earliest rank's (meaningful only on a shared clock)."""
    if not measurements:
        return {}
    first = min(m.step.start_ns for m in measurements.values())
    return {r: m.step.start_ns - first for r, m in sorted(measurements.items())}
