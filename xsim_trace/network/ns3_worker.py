"""The NS-3 side of the ``ns3`` backend: a separate process driven over a JSON-lines pipe.

Run as ``python -m xsim_trace.network.ns3_worker``.  The process imports the NS-3 bindings
once (several seconds), then serves sessions one after another.  Each session runs in a
forked child, so every simulation starts from a pristine NS-3 (no global state carried over)
while the import cost is paid once per worker.

Protocol: one JSON object per line on stdin, one reply per line on the protocol fd (the
original stdout; fd 1 itself is pointed at stderr so that NS-3 or cling chatter can never
corrupt the protocol).  Every reply has ``"ok": true`` or ``"ok": false, "error": "..."``.

Worker ops:  ``{"op": "session", "topology": {...}, "config": {...}}`` forks a session child
that answers that message and everything up to ``close``; ``{"op": "ping"}``; ``{"op": "quit"}``.

Session ops (times are integer ns):
  ``start``   ``{"id", "size", "t", "path", "rpath"}``: run to ``t``, inject a TCP bulk transfer of
              ``size`` bytes along ``path`` (vertex indices; ``rpath`` carries the ACKs back).
  ``next``    earliest completion among started flows if nothing else starts: answered by a
              forked speculative copy that runs ahead and is thrown away (NS-3 cannot rewind).
              With ``"horizon": h`` (the caller promises no ``start`` before ``h``) the session itself
              runs to the first completion or ``h`` and answers that completion, or null if none is
              at or before ``h``: exact, and no fork.
  ``advance`` ``{"t"}``: run to ``t``; reply ``done``: ``[[id, finish_ns], ...]`` finished by ``t``.
  ``close``   end the session (the child exits).

Clock quirk: the simulator is stopped at ``t + 1`` ns so that every event stamped ``t`` has run;
a flow started right after ``advance(t)`` therefore enters NS-3 at ``t + 1`` (1 ns late).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

_TRACKER_CPP = r"""
#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>
namespace xsimns {
// One long-lived TCP connection per (src, dst): flows are byte ranges of its stream, in FIFO order.
struct Pair {
  ns3::Ptr<ns3::Socket> sock;
  uint64_t queued = 0, sent = 0, received = 0;
  std::deque<std::pair<uint64_t, uint32_t>> pending;  // (end offset in the stream, flow index)
};
struct Tracker {
  static std::vector<Pair> pairs;
  static uint32_t send_size;
  static std::vector<uint64_t> target;
  static std::vector<uint64_t> got;
  static std::vector<int64_t> done_ns;
  static std::vector<uint32_t> fresh;
  static bool stop_on_done;
  static void OnRx(uint32_t idx, ns3::Ptr<const ns3::Packet> p, const ns3::Address&) {
    got[idx] += p->GetSize();
    if (got[idx] >= target[idx] && done_ns[idx] < 0) {
      done_ns[idx] = ns3::Simulator::Now().GetNanoSeconds();
      fresh.push_back(idx);
      if (stop_on_done) ns3::Simulator::Stop();
    }
  }
  static uint32_t Add(uint64_t n) {
    target.push_back(n); got.push_back(0); done_ns.push_back(-1);
    return static_cast<uint32_t>(target.size() - 1);
  }
  static void Connect(ns3::Ptr<ns3::Application> sink, uint32_t idx) {
    sink->TraceConnectWithoutContext("Rx", ns3::MakeBoundCallback(&Tracker::OnRx, idx));
  }
  static void Finish(uint32_t idx) {
    done_ns[idx] = ns3::Simulator::Now().GetNanoSeconds();
    fresh.push_back(idx);
    if (stop_on_done) ns3::Simulator::Stop();
  }
  static void Pump(uint32_t id) {
    Pair& p = pairs[id];
    while (p.sent < p.queued) {
      uint32_t avail = p.sock->GetTxAvailable();
      if (avail == 0) break;
      uint64_t n = std::min<uint64_t>(std::min<uint64_t>(avail, p.queued - p.sent), send_size);
      int r = p.sock->Send(ns3::Create<ns3::Packet>(static_cast<uint32_t>(n)));
      if (r <= 0) break;
      p.sent += static_cast<uint64_t>(r);
    }
  }
  static void OnSpace(uint32_t id, ns3::Ptr<ns3::Socket>, uint32_t) { Pump(id); }
  static void OnPairRx(uint32_t id, ns3::Ptr<const ns3::Packet> pkt, const ns3::Address&) {
    Pair& p = pairs[id];
    p.received += pkt->GetSize();
    while (!p.pending.empty() && p.pending.front().first <= p.received) {
      uint32_t idx = p.pending.front().second;
      p.pending.pop_front();
      got[idx] = target[idx];
      Finish(idx);
    }
  }
  static uint32_t OpenPair(ns3::Ptr<ns3::Node> src, ns3::Ptr<ns3::Node> dst, ns3::Ipv4Address dst_addr,
                           uint16_t port, uint32_t init_cwnd) {
    ns3::PacketSinkHelper sinkh("ns3::TcpSocketFactory",
                                ns3::InetSocketAddress(ns3::Ipv4Address::GetAny(), port));
    ns3::ApplicationContainer apps = sinkh.Install(dst);
    apps.Start(ns3::Seconds(0));
    uint32_t id = static_cast<uint32_t>(pairs.size());
    pairs.emplace_back();
    apps.Get(0)->TraceConnectWithoutContext("Rx", ns3::MakeBoundCallback(&Tracker::OnPairRx, id));
    ns3::Ptr<ns3::Socket> s = ns3::Socket::CreateSocket(src, ns3::TcpSocketFactory::GetTypeId());
    if (init_cwnd > 0) s->SetAttribute("InitialCwnd", ns3::UintegerValue(init_cwnd));
    s->Bind();
    s->Connect(ns3::InetSocketAddress(dst_addr, port));
    s->SetSendCallback(ns3::MakeBoundCallback(&Tracker::OnSpace, id));
    pairs[id].sock = s;
    return id;
  }
  // Warm-up bytes that no flow waits for: they make the receiver ACK with its scaled window.
  static void Prime(uint32_t id, uint64_t n) {
    pairs[id].queued += n;
    Pump(id);
  }
  static bool AllReceived() {
    for (const Pair& p : pairs) if (p.received < p.queued) return false;
    return true;
  }
  static void AddToPair(uint32_t id, uint32_t idx) {
    Pair& p = pairs[id];
    p.queued += target[idx];
    p.pending.emplace_back(p.queued, idx);
    Pump(id);
  }
  static int64_t NowNs() { return ns3::Simulator::Now().GetNanoSeconds(); }
  // Our own stop event, so that a run ended early (first completion) leaves no stale stop behind
  // to cut a later run short.
  static ns3::EventId stop_event;
  static void DoStop() { ns3::Simulator::Stop(); }
  static void RunFor(int64_t delay_ns) {
    if (stop_event.IsPending()) ns3::Simulator::Cancel(stop_event);
    stop_event = ns3::Simulator::Schedule(ns3::NanoSeconds(delay_ns), &Tracker::DoStop);
    ns3::Simulator::Run();
    if (stop_event.IsPending()) ns3::Simulator::Cancel(stop_event);
  }
  static size_t FreshCount() { return fresh.size(); }
  static uint32_t FreshAt(size_t i) { return fresh[i]; }
  static void ClearFresh() { fresh.clear(); }
  static void Reset() {
    target.clear(); got.clear(); done_ns.clear(); fresh.clear(); pairs.clear(); stop_on_done = false;
    stop_event = ns3::EventId();
  }
};
std::vector<Pair> Tracker::pairs;
ns3::EventId Tracker::stop_event;
uint32_t Tracker::send_size = 65536;
std::vector<uint64_t> Tracker::target;
std::vector<uint64_t> Tracker::got;
std::vector<int64_t> Tracker::done_ns;
std::vector<uint32_t> Tracker::fresh;
bool Tracker::stop_on_done = false;
}
"""

def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent process dies, so no simulation outlives its replay."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # noqa: PLC0415

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


#: how far a speculative run may look ahead before it gives up (simulated ns)
SPECULATION_HORIZON_NS = 3_600 * 1_000_000_000


class _Session:
    """One simulation: NS-3 nodes per topology vertex, one point-to-point channel per adjacency."""

    def __init__(self, ns: Any, tracker: Any, topology: dict, config: dict) -> None:
        self.ns = ns
        self.T = tracker
        mtu = int(config.get("mtu_bytes", 9000))
        buf = int(config.get("tcp_buffer_bytes", 1 << 25))
        self.segment = mtu - 52
        ns.Config.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(mtu - 52))
        ns.Config.SetDefault("ns3::TcpSocket::SndBufSize", ns.UintegerValue(buf))
        ns.Config.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(buf))
        ns.Config.SetDefault("ns3::TcpSocket::DelAckCount", ns.UintegerValue(int(config.get("del_ack_count", 2))))
        queue = str(config.get("queue_packets", 100_000)) + "p"
        host_queue = str(config.get("host_queue_packets", 1 << 20)) + "p"
        hosts = {int(h) for h in topology.get("hosts", ())}
        for name, value in config.get("defaults", ()):  # any other NS-3 attribute default, as text
            ns.Config.SetDefault(str(name), ns.StringValue(str(value)))
        self.send_size = int(config.get("send_size_bytes", 1 << 16))
        tracker.send_size = self.send_size
        self.persistent = str(config.get("connections", "persistent")) == "persistent"
        self.pair_of: dict[tuple[int, int], int] = {}
        n_vertices = int(topology["n_vertices"])
        self.nodes = ns.NodeContainer()
        self.nodes.Create(n_vertices)
        ns.InternetStackHelper().Install(self.nodes)
        self.ipv4 = [self.nodes.Get(i).GetObject[ns.Ipv4]() for i in range(n_vertices)]
        srh = ns.Ipv4StaticRoutingHelper()
        self.static = [srh.GetStaticRouting(ip) for ip in self.ipv4]
        addr = ns.Ipv4AddressHelper()
        addr.SetBase(ns.Ipv4Address("10.0.0.0"), ns.Ipv4Mask("255.255.255.252"))
        # every output port: one drop-tail FIFO of queue_packets (instead of NS-3's default FqCoDel); a
        # rank's own ports host_queue_packets (a host does not drop what it sends itself)
        tch = ns.TrafficControlHelper()
        tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", ns.QueueSizeValue(ns.QueueSize(queue)))
        host_tch = ns.TrafficControlHelper()
        host_tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", ns.QueueSizeValue(ns.QueueSize(host_queue)))
        p2p = ns.PointToPointHelper()
        p2p.SetDeviceAttribute("Mtu", ns.UintegerValue(mtu))
        # (u, v) -> (interface index on u, address of v on that link)
        self.hop: dict[tuple[int, int], tuple[int, Any]] = {}
        self.keep: list[Any] = []
        for u, v, bps_uv, bps_vu, delay_ns in topology["links"]:
            p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(int(delay_ns))))
            devs = p2p.Install(self.nodes.Get(int(u)), self.nodes.Get(int(v)))
            devs.Get(0).SetAttribute("DataRate", ns.DataRateValue(ns.DataRate(int(bps_uv))))
            devs.Get(1).SetAttribute("DataRate", ns.DataRateValue(ns.DataRate(int(bps_vu))))
            for end, dev in ((int(u), devs.Get(0)), (int(v), devs.Get(1))):
                (host_tch if end in hosts else tch).Install(dev)
            ifs = addr.Assign(devs)
            addr.NewNetwork()
            iu = self.ipv4[int(u)].GetInterfaceForDevice(devs.Get(0))
            iv = self.ipv4[int(v)].GetInterfaceForDevice(devs.Get(1))
            self.hop[(int(u), int(v))] = (iu, ifs.GetAddress(1))
            self.hop[(int(v), int(u))] = (iv, ifs.GetAddress(0))
            self.keep.append((devs, ifs))
        self.routes: dict[tuple[int, str], int] = {}
        self.route_conflicts = 0
        self.port_next: dict[int, int] = {}
        self.flow_of_idx: dict[int, int] = {}
        self.reported: set[int] = set()
        self.spec_cache: int | None | bool = False  # False = unknown
        self.t0 = 0  # NS-3 time of the caller's time 0 (after the warm-up, see warm)

    # -- routing -------------------------------------------------------------------------
    def _install_path(self, path: list[int], dst_addr: Any) -> None:
        """Host routes to ``dst_addr`` (an address of ``path[-1]``) at every vertex along ``path``."""
        key_addr = str(dst_addr)
        for a, b in zip(path[:-1], path[1:]):
            iface, next_hop = self.hop[(a, b)]
            prev = self.routes.get((a, key_addr))
            if prev is None:
                self.static[a].AddHostRouteTo(dst_addr, next_hop, iface)
                self.routes[(a, key_addr)] = iface
            elif prev != iface:  # destination-based routing: the first path installed wins
                self.route_conflicts += 1

    def _install_routes(self, path: list[int], rpath: list[int]) -> Any:
        """Routes for ``path`` and its ACKs (``rpath``); the destination's address on ``path``'s last link."""
        # TCP picks the address of the first hop's interface as source; ACKs are routed to it
        dst_addr = self.hop[(path[-2], path[-1])][1]
        src_addr = self.hop[(path[1], path[0])][1]
        self._install_path(path, dst_addr)
        self._install_path(rpath, src_addr)
        return dst_addr

    def _open_pair(self, path: list[int], rpath: list[int], cwnd: int) -> int:
        """The persistent connection ``path[0] -> path[-1]`` (SYN sent now), its initial window ``cwnd``
        segments (0: NS-3's default)."""
        src, dst = path[0], path[-1]
        dst_addr = self._install_routes(path, rpath)
        pid = int(self.T.OpenPair(self.nodes.Get(src), self.nodes.Get(dst), dst_addr, self._port(dst), cwnd))
        self.pair_of[(src, dst)] = pid
        return pid

    def warm(self, pairs: list, warm_ns: int) -> None:
        """Open the persistent connection of every pair in ``pairs`` (``[path, rpath, cwnd]``) and run
        ``warm_ns`` before the caller's time 0, so that their handshakes are done when flows start, as
        NCCL's connections are set up when its communicator is."""
        self.T.RunFor(1)  # as start's run_to: sockets made before NS-3 first ran crash (its Time set-up)
        for path, rpath, cwnd in pairs:
            path, rpath = [int(v) for v in path], [int(v) for v in rpath]
            for a, b in zip(path[:-1], path[1:]):
                if (a, b) not in self.hop:
                    raise ValueError(f"warm connection: no link between vertices {a} and {b}")
            if (path[0], path[-1]) not in self.pair_of:
                pid = self._open_pair(path, rpath, int(cwnd))
                # two segments (an ACK at once, DelAckCount 2): until the receiver ACKs data, the sender
                # knows only the SYN-ACK's unscaled window, 64 KiB, and a first flow above it waits a round trip
                self.T.Prime(pid, 2 * self.segment)
        step = max(int(warm_ns), 1)
        for _ in range(10_000):  # until every warm-up byte is in (at most 10,000 steps)
            self.T.RunFor(step)
            if self.T.AllReceived():
                break
        self.T.RunFor(step)  # and the last ACKs are back
        self.t0 = int(self.T.NowNs())

    # -- ops -------------------------------------------------------------------------------
    def now_ns(self) -> int:
        """The caller's clock: NS-3's less the warm-up before time 0."""
        return int(self.T.NowNs()) - self.t0

    def run_to(self, t_ns: int) -> None:
        now = self.now_ns()
        if t_ns + 1 > now:
            self.T.RunFor(t_ns + 1 - now)

    def start(self, msg: dict) -> dict:
        ns, T = self.ns, self.T
        self.run_to(int(msg["t"]))
        path = [int(v) for v in msg["path"]]
        rpath = [int(v) for v in msg.get("rpath") or path[::-1]]
        if len(path) < 2 or path[0] != rpath[-1] or path[-1] != rpath[0]:
            raise ValueError(f"flow {msg['id']}: bad path {path} / reverse path {rpath}")
        for a, b in zip(path[:-1], path[1:]):
            if (a, b) not in self.hop:
                raise ValueError(f"flow {msg['id']}: no link between vertices {a} and {b}")
        dst_addr = self._install_routes(path, rpath)
        src, dst = path[0], path[-1]
        idx = int(T.Add(int(msg["size"])))
        self.flow_of_idx[idx] = int(msg["id"])
        self.spec_cache = False
        if self.persistent:
            pid = self.pair_of.get((src, dst))
            if pid is None:
                pid = self._open_pair(path, rpath, int(msg.get("cwnd", 0)))
            T.AddToPair(pid, idx)
            return {"ok": True, "t_ns": self.now_ns()}
        port = self._port(dst)
        any_addr = ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo()
        sink = ns.PacketSinkHelper("ns3::TcpSocketFactory", any_addr).Install(self.nodes.Get(dst))
        sink.Start(ns.Seconds(0))
        T.Connect(sink.Get(0), idx)
        bulk = ns.BulkSendHelper("ns3::TcpSocketFactory", ns.InetSocketAddress(dst_addr, port).ConvertTo())
        bulk.SetAttribute("MaxBytes", ns.UintegerValue(int(msg["size"])))
        bulk.SetAttribute("SendSize", ns.UintegerValue(self.send_size))
        app = bulk.Install(self.nodes.Get(src))
        app.Start(ns.Seconds(0))
        self.keep.append((sink, app))
        return {"ok": True, "t_ns": self.now_ns()}

    def _port(self, dst: int) -> int:
        port = self.port_next.get(dst, 1024)
        self.port_next[dst] = 1024 + (port - 1024 + 1) % 64000
        return port

    def _known_unreported(self) -> list[tuple[int, int]]:
        out = []
        for i in range(int(self.T.FreshCount())):
            idx = int(self.T.FreshAt(i))
            out.append((int(self.T.done_ns[idx]) - self.t0, self.flow_of_idx[idx]))
        return out

    def next(self, msg: dict) -> dict:
        known = self._known_unreported()
        if known:
            t = min(known)[0]
            h = msg.get("horizon")
            return {"ok": True, "t": t if h is None or t <= int(h) else None}
        active = len(self.flow_of_idx) - len(self.reported)
        if active <= 0:
            return {"ok": True, "t": None}
        h = msg.get("horizon")
        now = self.now_ns()
        if h is not None and int(h) + 1 >= now:
            # the caller starts nothing before h: run the real simulation, no copy, up to the first
            # completion or h (+1 so that events stamped h run), whichever comes first
            self.spec_cache = False
            self.T.stop_on_done = True
            try:
                self.T.RunFor(int(h) + 1 - now)
            finally:
                self.T.stop_on_done = False
            fresh = self._known_unreported()
            t = min(fresh)[0] if fresh else None
            return {"ok": True, "t": t if t is not None and t <= int(h) else None}
        if self.spec_cache is not False:
            return {"ok": True, "t": self.spec_cache}
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # speculative copy: run ahead to the first completion, report, vanish
            try:
                _die_with_parent()
                os.close(r)
                self.T.stop_on_done = True
                self.T.RunFor(SPECULATION_HORIZON_NS)
                fresh = self._known_unreported()
                os.write(w, json.dumps(min(fresh)[0] if fresh else None).encode())
            finally:
                os._exit(0)
        os.close(w)
        chunks = []
        while True:
            b = os.read(r, 4096)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if not chunks:
            raise RuntimeError(f"speculative simulator copy died (wait status {status})")
        t = json.loads(b"".join(chunks))
        if t is None:
            raise RuntimeError(
                f"no active flow finishes within {SPECULATION_HORIZON_NS // 10**9} s of simulated time"
                " (unreachable destination?)"
            )
        self.spec_cache = t
        return {"ok": True, "t": t}

    def advance(self, msg: dict) -> dict:
        t = int(msg["t"])
        self.run_to(t)
        known = self._known_unreported()
        done = sorted((ft, fid) for ft, fid in known if ft <= t)
        keep = [(ft, fid) for ft, fid in known if ft > t]
        if done:
            self.spec_cache = False
        T = self.T
        idx_of = {fid: idx for idx, fid in self.flow_of_idx.items()}
        T.ClearFresh()
        for _, fid in keep:  # re-queue completions past t (stamped t + 1): reported next time
            T.fresh.push_back(idx_of[fid])
        for _, fid in done:
            self.reported.add(fid)
        return {"ok": True, "done": [[fid, ft] for ft, fid in done], "t_ns": self.now_ns()}


def _ns3_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("ns3")
    except PackageNotFoundError:
        return None


def _warm_up(ns: Any, tracker: Any) -> None:
    """One tiny simulation in the parent worker, then a full NS-3 reset: cppyy compiles the
    templates the sessions use once here instead of once per forked session."""
    for mode in ("per-flow", "persistent"):
        topo = {"n_vertices": 3, "links": [[0, 2, 1e9, 1e9, 1000], [1, 2, 1e9, 1e9, 1000]]}
        session = _Session(ns, tracker, topo, {"connections": mode})
        session.start({"id": 0, "size": 20_000, "t": 0, "path": [0, 2, 1]})
        session.advance({"t": 10_000_000})
        if not session.reported:
            raise RuntimeError(f"the warm-up flow did not finish ({mode} connections)")
        ns.Simulator.Destroy()
        tracker.Reset()


def _serve_session(proto: Any, ns: Any, tracker: Any, first: dict, lines: Any) -> None:
    def reply(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        session = _Session(ns, tracker, first["topology"], first.get("config", {}))
        warm = first.get("warm")
        if warm:
            session.warm(warm["pairs"], int(warm["ns"]))
    except Exception as exc:  # noqa: BLE001 - reported over the pipe, the caller raises
        reply({"ok": False, "error": f"cannot build the NS-3 topology: {type(exc).__name__}: {exc}"})
        return
    reply({"ok": True, "pid": os.getpid()})
    for line in lines:
        msg = json.loads(line)
        op = msg.get("op")
        try:
            if op == "start":
                reply(session.start(msg))
            elif op == "next":
                reply(session.next(msg))
            elif op == "advance":
                reply(session.advance(msg))
            elif op == "stats":
                reply({"ok": True, "now_ns": session.now_ns(), "route_conflicts": session.route_conflicts})
            elif op == "close":
                reply({"ok": True})
                return
            else:
                reply({"ok": False, "error": f"unknown op {op!r}"})
        except Exception as exc:  # noqa: BLE001
            reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"})


def main() -> int:
    _die_with_parent()
    proto_fd = os.dup(1)
    os.dup2(2, 1)  # anything NS-3 / cling prints goes to stderr, never into the protocol
    proto = os.fdopen(proto_fd, "w", buffering=1)
    lines = iter(sys.stdin.readline, "")
    t0 = time.perf_counter()
    try:
        from ns import ns  # noqa: PLC0415 - the optional, slow import
        import cppyy  # noqa: PLC0415

        cppyy.cppdef(_TRACKER_CPP)
        tracker = cppyy.gbl.xsimns.Tracker
    except Exception as exc:  # noqa: BLE001
        proto.write(json.dumps({"ok": False, "error": f"cannot import ns3: {type(exc).__name__}: {exc}"}) + "\n")
        return 1
    import_s = time.perf_counter() - t0
    try:
        _warm_up(ns, tracker)
    except Exception as exc:  # noqa: BLE001
        proto.write(json.dumps({"ok": False, "error": f"NS-3 warm-up failed: {type(exc).__name__}: {exc}"}) + "\n")
        return 1
    version = _ns3_version()
    proto.write(json.dumps({"ok": True, "import_s": round(import_s, 3), "ready_s": round(time.perf_counter() - t0, 3), "version": version}) + "\n")
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for line in lines:
        msg = json.loads(line)
        op = msg.get("op")
        if op == "quit":
            return 0
        if op == "ping":  # also how the client re-synchronises after a dead session
            proto.write(json.dumps({"ok": True, "pong": msg.get("nonce")}) + "\n")
            continue
        if op != "session":
            proto.write(json.dumps({"ok": False, "error": f"unknown op {op!r}"}) + "\n")
            continue
        sys.stdout.flush()
        proto.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _die_with_parent()
                _serve_session(proto, ns, tracker, msg, lines)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                proto.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            why = f"killed by signal {sig}" if sig else f"exit status {os.WEXITSTATUS(status)}"
            proto.write(json.dumps({"ok": False, "error": f"NS-3 session process died ({why})", "dead": True}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
