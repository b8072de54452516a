"""The ``ns3`` network backend: packet-level TCP over the same topology, NS-3 in its own process.

Every vertex of the topology (GPU, NIC, switch, ...) becomes an NS-3 node; every pair of
directed links between two vertices becomes one point-to-point channel whose two devices
send at the two links' rates (``bw_GBps`` in bit/s, ``units.GBps_to_bits_per_s``) with the link's ``latency_ns`` as
propagation delay.  A flow is a TCP bulk transfer of ``size_bytes`` along
``topology.route(src, dst)`` (host routes installed hop by hop; ACKs follow ``route(dst, src)``);
it finishes when its last byte reaches the sink.

The simulator runs in :mod:`xsim_trace.network.ns3_worker`; this module only speaks its JSON
protocol.  Every request has a wall-clock timeout: a crash, a hang or a missing extra is a
:class:`~xsim_trace.errors.BackendError`, never a dead replay.  Worker processes (whose NS-3
import costs seconds) are pooled per Python process and reused; each backend gets a fresh,
forked simulation.
"""

from __future__ import annotations

import atexit
import heapq
import importlib.util
import json
import logging
import math
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

from xsim_trace.errors import BackendError
from xsim_trace.network.protocol import BackendCapabilities, Flow
from xsim_trace.units import GBps_to_bits_per_s

log = logging.getLogger(__name__)

#: the worker command line (tests substitute a misbehaving one)
WORKER_ARGV = (sys.executable, "-m", "xsim_trace.network.ns3_worker")

INSTALL_HINT = "the ns3 backend needs the optional NS-3 bindings: pip install -e .[ns3]"
#: ns3_unusable_reason when the package is absent (the error then is INSTALL_HINT alone)
NOT_INSTALLED = "ns3 extra not installed"


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise BackendError(f"expected a number of seconds, found {text!r}", field=name) from None
    if value <= 0:
        raise BackendError(f"expected a positive number of seconds, found {text!r}", field=name)
    return value


def ns3_unusable_reason() -> str | None:
    """Why the ``ns3`` package can't be used here, or None when it can (checked without importing it:
    that takes seconds)."""
    spec = importlib.util.find_spec("ns3")
    if spec is None:
        return NOT_INSTALLED
    # ns3 3.44's library search drops every library whose real path contains "test" (it means to skip
    # ns-3's test libraries), so an install below e.g. /tmp/ci_test/ finds no modules and fails to import.
    locations = list(spec.submodule_search_locations or []) or [spec.origin or ""]
    install = os.path.realpath(locations[0])
    if "test" in install:
        return (f"the ns3 package is installed under {install}, a path containing 'test', which ns3 3.44's "
                "library search skips; install it in a virtual environment elsewhere")
    return None


def ns3_available() -> bool:
    """True when the ``ns3`` package is installed and importable from where it is."""
    return ns3_unusable_reason() is None


@dataclass(frozen=True, slots=True)
class Ns3Config:
    """Packet-level knobs.  Defaults: jumbo frames, large TCP buffers, 1000-packet drop-tail queues."""

    mtu_bytes: int = 9000
    tcp_buffer_bytes: int = 1 << 25
    #: every switch port's drop-tail FIFO.  Deep by default: the fabrics NCCL runs on drop nothing (IB
    #: credits, RoCE PFC, NVLink); at 1,000 a 16 MiB all-to-all on dgx-a100:2 lost packets at the receivers'
    #: ports and waited NS-3's 1 s minimum retransmission timeout (1.2 s instead of 0.38 ms).  Set it low
    #: to study lossy TCP (incast collapse)
    queue_packets: int = 100_000
    #: the egress queue of a rank's own ports (the sender's NIC / GPU port): a host does not drop its
    #: own packets (Linux's qdisc pushes back on the socket instead).  At ``queue_packets`` a warm
    #: connection's whole window, sent at once after an idle gap, overflowed it and waited for NS-3's
    #: 1 s minimum retransmission timeout (a second 16 MiB flow on one pair: 1.4 s instead of 0.67 ms)
    host_queue_packets: int = 1 << 20
    send_size_bytes: int = 1 << 16
    del_ack_count: int = 2
    #: Cubic's HyStart (leave slow start early on a rising RTT or a dense ACK train).  Off by default:
    #: its thresholds are made for WAN round trips; on a microsecond fabric the ACKs that queue behind a
    #: rank's own data (any two ranks sending to each other, e.g. a ring) end slow start far below the
    #: bandwidth-delay product, +13 % on a 4-rank 8 MiB ring, against +3.7 % without it
    #: (docs/ns3.md).  The fabrics NCCL runs on (RDMA) have no slow start at all.
    hystart: bool = False
    #: "persistent": one TCP connection per (src, dst) pair, opened by its first flow and reused, flows
    #: are consecutive byte ranges of its stream (FIFO), like NCCL's long-lived connections;
    #: "per-flow": a new TCP connection (handshake, slow start) for every flow
    connections: str = "persistent"
    #: persistent connections only: open every rank pair's connection before time 0 (its handshake
    #: done), as NCCL sets its connections up with the communicator, not inside the step it times;
    #: and start each connection's window at twice its path's bandwidth-delay product, since RDMA, what
    #: NCCL runs on, has no slow start (NS-3's 10-segment start cost a lone flow 1 - 3 round trips).
    #: False: the handshake and slow start on a pair's first flow (TCP as is)
    warm_connections: bool = True
    #: warm at most this many ordered rank pairs up front (n ranks: n (n - 1)); with more, each
    #: connection opens at its pair's first flow (the warm window still applies)
    warm_max_pairs: int = 4096
    #: further NS-3 attribute defaults as (name, text value), e.g. ("ns3::TcpL4Protocol::SocketType", "ns3::TcpNewReno")
    defaults: tuple[tuple[str, str], ...] = ()
    #: wall-clock limit for one request to the worker (seconds; env XSIM_NS3_TIMEOUT_S, default 600):
    #: one advance over a long, busy interval is one request
    timeout_s: float = field(default_factory=lambda: _env_seconds("XSIM_NS3_TIMEOUT_S", 600.0))
    #: wall-clock limit for starting a worker (importing NS-3 + warm-up)
    startup_timeout_s: float = 180.0

    def __post_init__(self) -> None:
        if not 576 <= self.mtu_bytes <= 65535:
            raise BackendError(f"expected an MTU in [576, 65535] bytes, found {self.mtu_bytes}", field="mtu_bytes")
        for name in ("tcp_buffer_bytes", "queue_packets", "host_queue_packets", "send_size_bytes", "del_ack_count",
                     "warm_max_pairs"):
            if int(getattr(self, name)) < 1:
                raise BackendError(f"expected a positive integer, found {getattr(self, name)}", field=name)
        if self.connections not in ("persistent", "per-flow"):
            raise BackendError(f"expected 'persistent' or 'per-flow', found {self.connections!r}", field="connections")
        if self.timeout_s <= 0 or self.startup_timeout_s <= 0:
            raise BackendError("expected positive timeouts", field="timeout_s")

    def wire(self) -> dict[str, Any]:
        d = asdict(self)
        d["defaults"] = [["ns3::TcpCubic::HyStart", "true" if self.hystart else "false"], *(list(p) for p in self.defaults)]
        d.pop("hystart")
        d.pop("warm_max_pairs")
        d.pop("timeout_s")
        d.pop("startup_timeout_s")
        return d


# --------------------------------------------------------------------------------------------
# topology -> worker description


@dataclass(frozen=True, slots=True)
class _TopologySpec:
    vertex_index: dict[Hashable, int]
    links: list[list[float]]  # [u, v, bps u->v, bps v->u, delay_ns]
    link_count: int
    hosts: tuple[int, ...] = ()  # vertex indices of the ranks (flow endpoints)

    def wire(self) -> dict[str, Any]:
        return {"n_vertices": len(self.vertex_index), "links": self.links, "hosts": list(self.hosts)}


def _link_ends(link: Any) -> tuple[Hashable, Hashable]:
    for a, b in (("src", "dst"), ("u", "v"), ("head", "tail")):
        if hasattr(link, a) and hasattr(link, b):
            return getattr(link, a), getattr(link, b)
    raise BackendError(f"topology link {link!r} has no src/dst")


def _topology_links(topology: Any) -> list[Any]:
    links = getattr(topology, "links", None)
    if links is None:
        raise BackendError("the topology exposes no links", field="links")
    if isinstance(links, dict):
        links = list(links.values())
    return list(links)


def topology_spec(topology: Any) -> _TopologySpec:
    """Vertices numbered by first appearance in ``topology.links``; directed links paired into channels."""
    index: dict[Hashable, int] = {}
    for v in getattr(topology, "vertices", ()) or ():
        index.setdefault(v, len(index))
    pairs: dict[tuple[int, int], list[float]] = {}
    count = 0
    for link in _topology_links(topology):
        a, b = _link_ends(link)
        bw = float(getattr(link, "bw_GBps"))
        lat = round(float(getattr(link, "latency_ns")))  # NS-3 delays here are whole ns
        if bw <= 0 or lat < 0:
            raise BackendError(f"link {a}->{b}: expected bw_GBps > 0 and latency_ns >= 0, found {bw}, {lat}")
        count += 1
        u, v = index.setdefault(a, len(index)), index.setdefault(b, len(index))
        if u == v:
            continue
        bps = round(GBps_to_bits_per_s(bw))
        key = (min(u, v), max(u, v))
        if key not in pairs:  # one direction seen: the other defaults to the same rate until seen
            pairs[key] = [key[0], key[1], bps, bps, lat, 0]
        entry = pairs[key]
        seen_bit = 1 if u == key[0] else 2
        if entry[5] & seen_bit:
            log.warning("parallel links %s->%s: NS-3 keeps the first one", a, b)
            continue
        entry[2 if u == key[0] else 3] = bps
        if entry[5] and lat != entry[4]:
            log.info("link %s->%s: asymmetric latency, NS-3 uses %d ns both ways", a, b, entry[4])
        entry[5] |= seen_bit
    links = [e[:5] for e in pairs.values()]
    ranks = getattr(topology, "num_ranks", None)  # the ranks are the integer vertices 0..num_ranks-1
    hosts = tuple(i for v, i in index.items() if type(v) is int and (ranks is None or 0 <= v < int(ranks)))
    return _TopologySpec(index, links, count, hosts)


def route_vertices(topology: Any, src: int, dst: int) -> list[Hashable]:
    """The vertex sequence of the route ``src -> dst``: ``topology.route_vertices`` when it has
    one, else ``topology.route`` (link ids into ``topology.links``, link objects, or vertices)."""
    try:
        if callable(getattr(topology, "route_vertices", None)):
            return list(topology.route_vertices(src, dst))
        path = list(topology.route(src, dst))
    except BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 - another package's error type, re-raised as ours
        raise BackendError(f"no route from {src} to {dst}: {exc}") from exc
    if not path:
        return [src]
    if all(isinstance(x, int) for x in path) and hasattr(topology, "links"):
        links = _topology_links(topology)
        path = [links[i] for i in path]
    first = path[0]
    if hasattr(first, "bw_GBps") or hasattr(first, "latency_ns"):
        verts = [_link_ends(first)[0]]
        for link in path:
            a, b = _link_ends(link)
            if a != verts[-1]:
                raise BackendError(f"route {src}->{dst} is not a connected chain of links at {a}")
            verts.append(b)
        return verts
    return path


# --------------------------------------------------------------------------------------------
# worker processes


class _Worker:
    """One ``ns3_worker`` process; request/response with a wall-clock timeout per request."""

    def __init__(self, startup_timeout_s: float, argv: Sequence[str] | None = None) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+b")
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            self.proc = subprocess.Popen(
                list(argv or WORKER_ARGV),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"cannot start the NS-3 worker: {exc}") from exc
        self._buf = b""
        self.in_session = False
        self.session_died = False
        t0 = time.perf_counter()
        hello = self._read(startup_timeout_s, "start-up")
        if not hello.get("ok"):
            self.kill()
            raise BackendError(f"NS-3 worker failed to start: {hello.get('error')}; {INSTALL_HINT}")
        self.startup_s = time.perf_counter() - t0
        self.import_s = float(hello.get("import_s", 0.0))
        self.version = hello.get("version")
        log.info("NS-3 worker pid %d ready in %.1f s (import %.1f s)", self.proc.pid, self.startup_s, self.import_s)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _stderr_tail(self) -> str:
        try:
            self.stderr.seek(0)
            lines = [ln for ln in self.stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        lines = [ln for ln in lines if "materialize symbols" not in ln]  # harmless cling noise
        return f" (worker stderr: {lines[-1][:300]})" if lines else ""

    def _read(self, timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise BackendError(
                        f"NS-3 worker gave no answer to {what} within {timeout_s:g} s; killed it{self._stderr_tail()}"
                    )
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    code = self.proc.wait()
                    raise BackendError(f"NS-3 worker died during {what} (exit {code}){self._stderr_tail()}")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError as exc:
            self.kill()
            raise BackendError(f"NS-3 worker sent a garbled reply to {what}: {line[:200]!r}") from exc

    def request(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if not self.alive():
            raise BackendError(f"NS-3 worker is not running{self._stderr_tail()}")
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise BackendError(f"NS-3 worker pipe closed{self._stderr_tail()}") from exc
        reply = self._read(timeout_s, repr(msg.get("op")))
        if reply.get("dead"):
            self.in_session = False
            self.session_died = True
        if not reply.get("ok"):
            raise BackendError(f"NS-3 {msg.get('op')}: {reply.get('error')}")
        return reply

    def resync(self, timeout_s: float = 30.0) -> bool:
        """After a dead session: skip the worker's replies to requests meant for it, up to a ping
        of ours.  True when the worker is usable again (else it is killed)."""
        nonce = f"{os.getpid()}-{time.monotonic_ns()}"
        try:
            self.proc.stdin.write((json.dumps({"op": "ping", "nonce": nonce}) + "\n").encode())
            self.proc.stdin.flush()
            for _ in range(1000):
                if self._read(timeout_s, "ping").get("pong") == nonce:
                    self.session_died = False
                    return True
        except (BackendError, OSError):
            pass
        self.kill()
        return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        self.in_session = False

    def quit(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()


_IDLE: list[_Worker] = []


def _acquire(startup_timeout_s: float) -> _Worker:
    while _IDLE:
        w = _IDLE.pop()
        if w.alive():
            return w
    return _Worker(startup_timeout_s)


def _release(w: _Worker) -> None:
    if w.alive() and not w.in_session:
        _IDLE.append(w)


@atexit.register
def shutdown_workers() -> None:
    """Stop the pooled idle workers (also run at interpreter exit)."""
    while _IDLE:
        _IDLE.pop().quit()


# --------------------------------------------------------------------------------------------
# the backend


class Ns3Backend:
    """:class:`~xsim_trace.network.protocol.NetworkBackend` over a packet-level NS-3 simulation.

    ``advance(t)`` runs NS-3 to ``t``; ``next_completion_ns()`` is answered by a forked copy of
    the simulation that runs ahead to the first completion and is discarded (cached until the
    next ``start_flow``), so asking costs up to one extra simulation of that interval.
    """

    name: ClassVar[str] = "ns3"
    #: ``next_completion_ns(horizon_ns=h)`` is understood (see there); a worker process to close; an
    #: instance whose connections are all warm (``Ns3Config.warm_connections``) also declares
    #: ``lone_flow_timing`` (:meth:`lone_flow_ns`)
    capabilities: BackendCapabilities = BackendCapabilities(horizon_hint=True, endpoint_sharing=True, needs_close=True)

    def __init__(self, topology: Any, config: Ns3Config | None = None) -> None:
        reason = ns3_unusable_reason()
        if reason is not None:
            raise BackendError(INSTALL_HINT if reason == NOT_INSTALLED else f"the ns3 backend cannot run here: {reason}")
        self.config = config or Ns3Config()
        self.topology = topology
        self.spec = topology_spec(topology)
        self._worker = _acquire(self.config.startup_timeout_s)
        self._now_ns = 0
        self._local: list[tuple[int, int]] = []  # (finish_ns, flow_id) of flows NS-3 never sees
        self._active: set[int] = set()
        self._routes: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        self.flows_started = 0
        self.wall_s = 0.0
        #: op -> (requests, wall seconds) spent in the worker, for cost breakdowns
        self.op_stats: dict[str, tuple[int, float]] = {}
        self._windows: dict[tuple[int, int], int] = {}
        self._hops = {}  # (u, v) vertex indices -> (bits/s, latency ns) of that direction
        for u, v, bps_uv, bps_vu, lat in self.spec.links:
            self._hops[(u, v)] = (bps_uv, lat)
            self._hops[(v, u)] = (bps_vu, lat)
        t0 = time.perf_counter()
        session: dict[str, Any] = {"op": "session", "topology": self.spec.wire(), "config": self.config.wire()}
        warm = self._warm_pairs()
        if warm is not None:
            session["warm"] = warm
            self.capabilities = replace(type(self).capabilities, lone_flow_timing=True)
        try:
            hello = self._worker.request(session, self.config.timeout_s)
        except BackendError:
            self._worker.kill()
            raise
        self._worker.in_session = True
        #: process id of this backend's simulation (a fork of the worker)
        self.session_pid = int(hello.get("pid", 0))
        self.wall_s += time.perf_counter() - t0
        self._closed = False

    # -- protocol ----------------------------------------------------------------------------
    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise BackendError("the ns3 backend is closed")
        t0 = time.perf_counter()
        try:
            return self._worker.request(msg, self.config.timeout_s)
        except BackendError:
            self._closed = True
            if self._worker.session_died and self._worker.alive() and self._worker.resync():
                _release(self._worker)  # only the simulation died: the warm worker is reusable
            else:
                self._worker.kill()
            raise
        finally:
            dt = time.perf_counter() - t0
            self.wall_s += dt
            op = str(msg.get("op"))
            n, total = self.op_stats.get(op, (0, 0.0))
            self.op_stats[op] = (n + 1, total + dt)

    def _paths(self, src: int, dst: int) -> tuple[list[int], list[int]]:
        key = (src, dst)
        if key not in self._routes:
            idx = self.spec.vertex_index
            try:
                fwd = [idx[v] for v in route_vertices(self.topology, src, dst)]
                rev = [idx[v] for v in route_vertices(self.topology, dst, src)]
            except KeyError as exc:
                raise BackendError(f"route {src}->{dst} passes vertex {exc.args[0]!r}, not in the topology") from None
            self._routes[key] = (fwd, rev)
        return self._routes[key]

    def _warm_window(self, fwd: list[int]) -> int:
        """Initial window (segments) of a warm connection along ``fwd``: twice the path's bandwidth-delay
        product (round trip: the latencies both ways plus one packet's serialisation per hop); 0 (NS-3's
        default) unless ``warm_connections``."""
        if not (self.config.warm_connections and self.config.connections == "persistent"):
            return 0
        hops = [self._hops[(a, b)] for a, b in zip(fwd[:-1], fwd[1:])]
        bottleneck_Bpns = min(bps for bps, _ in hops) / 8e9
        rtt_ns = sum(2 * lat + self.config.mtu_bytes * 8e9 / bps for bps, lat in hops)
        segment = self.config.mtu_bytes - 52
        return max(10, math.ceil(2 * bottleneck_Bpns * rtt_ns / segment))

    def lone_flow_ns(self, src: int, dst: int, size_bytes: int) -> float:
        """A flow alone on a warm connection (its window is no limit): its packets stored and forwarded
        hop by hop (each segment plus 52 bytes of TCP/IP header), the last one landing at the
        latest of, over the hops, the first packet up to the hop, every packet through it and the last
        packet after it; plus the path latency and the 1 ns a flow enters late (the clock quirk)."""
        if size_bytes <= 0 or src == dst:
            return 0.0
        fwd, _ = self._paths(src, dst)
        if len(fwd) < 2:
            return 0.0
        hops = [self._hops[(a, b)] for a, b in zip(fwd[:-1], fwd[1:])]
        segment, header = self.config.mtu_bytes - 52, 52  # a full packet is the MTU on the wire (measured)
        n = -(-size_bytes // segment)
        first = min(size_bytes, segment) + header
        last = size_bytes - (n - 1) * segment + header
        wire = size_bytes + n * header
        ns_per_byte = [8e9 / bps for bps, _ in hops]
        before = after = 0.0
        worst = 0.0
        for k in range(len(hops)):
            after = sum(last * x for x in ns_per_byte[k + 1:])
            worst = max(worst, before + wire * ns_per_byte[k] + after)
            before += first * ns_per_byte[k]
        return worst + sum(lat for _, lat in hops) + 1

    def _window(self, src: int, dst: int, fwd: list[int]) -> int:
        w = self._windows.get((src, dst))
        if w is None:
            w = self._windows[(src, dst)] = self._warm_window(fwd)
        return w

    def _warm_pairs(self) -> dict[str, Any] | None:
        """The session's warm-up: every ordered pair of ranks with its paths and window, and the step the
        worker runs it in (four of the longest round trips, at least 20 us) until every connection is open
        and has carried two segments, then once more for their ACKs."""
        hosts = [v for v in self.spec.vertex_index if type(v) is int and self.spec.vertex_index[v] in self.spec.hosts]
        n = len(hosts)
        if not (self.config.warm_connections and self.config.connections == "persistent") or n < 2:
            return None
        if n * (n - 1) > self.config.warm_max_pairs:
            log.info("ns3: %d rank pairs > warm_max_pairs %d: connections open at their first flow",
                     n * (n - 1), self.config.warm_max_pairs)
            return None
        pairs, longest_ns = [], 0.0
        for a in hosts:
            for b in hosts:
                if a == b:
                    continue
                fwd, rev = self._paths(a, b)
                if len(fwd) < 2:
                    continue
                pairs.append([fwd, rev, self._window(a, b, fwd)])
                longest_ns = max(longest_ns, sum(self._hops[(x, y)][1] for x, y in zip(fwd[:-1], fwd[1:])))
        return {"pairs": pairs, "ns": max(20_000, math.ceil(8 * longest_ns))}

    def start_flow(self, flow: Flow, now_ns: int) -> None:
        if now_ns < self._now_ns:
            raise BackendError(f"flow {flow.flow_id} starts at {now_ns} ns, before the clock ({self._now_ns} ns)")
        if flow.size_bytes < 0:
            raise BackendError(f"flow {flow.flow_id}: negative size {flow.size_bytes}", field="size_bytes")
        if flow.flow_id in self._active:
            raise BackendError(f"flow {flow.flow_id} is already active")
        self._now_ns = now_ns
        self.flows_started += 1
        if flow.size_bytes == 0 or flow.src == flow.dst:
            heapq.heappush(self._local, (now_ns, flow.flow_id))
            self._active.add(flow.flow_id)
            return
        fwd, rev = self._paths(flow.src, flow.dst)
        if len(fwd) < 2:
            heapq.heappush(self._local, (now_ns, flow.flow_id))
            self._active.add(flow.flow_id)
            return
        self._call({"op": "start", "id": flow.flow_id, "size": flow.size_bytes, "t": now_ns, "path": fwd, "rpath": rev,
                    "cwnd": self._window(flow.src, flow.dst, fwd)})
        self._active.add(flow.flow_id)

    def next_completion_ns(self, horizon_ns: int | None = None) -> int | None:
        """Exact time of the earliest completion if no flow starts meanwhile.

        ``horizon_ns`` (an extension of the protocol): the caller promises not to start a flow before
        it (its own next event).  The answer is then the earliest completion if it is at or before
        ``horizon_ns``, else None, and NS-3 simply runs forward instead of forking a speculative copy
        (milliseconds saved per call).
        """
        local = self._local[0][0] if self._local else None
        if horizon_ns is not None and local is not None and local > horizon_ns:
            local = None
        if len(self._active) == len(self._local):
            return local
        msg: dict[str, Any] = {"op": "next"}
        if horizon_ns is not None:
            if horizon_ns < self._now_ns:
                raise BackendError(f"horizon {horizon_ns} ns is before the clock ({self._now_ns} ns)")
            msg["horizon"] = int(horizon_ns)
        t = self._call(msg)["t"]
        if t is None:
            return local
        return int(t) if local is None else min(local, int(t))

    def advance(self, now_ns: int) -> list[int]:
        if now_ns < self._now_ns:
            raise BackendError(f"advance to {now_ns} ns goes back in time (clock {self._now_ns} ns)")
        self._now_ns = now_ns
        done: list[tuple[int, int]] = []
        while self._local and self._local[0][0] <= now_ns:
            done.append(heapq.heappop(self._local))
        if len(self._active) > len(self._local) + len(done):
            for fid, t in self._call({"op": "advance", "t": now_ns})["done"]:
                done.append((int(t), int(fid)))
        done.sort()
        for _, fid in done:
            self._active.discard(fid)
        return [fid for _, fid in done]

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """End the simulation and return the worker to the pool (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._worker.request({"op": "close"}, self.config.timeout_s)
            self._worker.in_session = False
        except BackendError:
            self._worker.kill()
        _release(self._worker)

    def __enter__(self) -> Ns3Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; close() is the contract
        try:
            if not getattr(self, "_closed", True):
                self.close()
        except Exception:  # noqa: BLE001
            pass


def make_ns3_backend(topology: Any, **options: Any) -> Ns3Backend:
    """Registry factory: ``make_backend("ns3", topology)``; options are :class:`Ns3Config` fields."""
    reason = ns3_unusable_reason()
    if reason is not None:
        raise BackendError(f"{INSTALL_HINT} ({reason})")
    return Ns3Backend(topology, Ns3Config(**options) if options else None)

