"""Price one NCCL collective: NCCL's choice of algorithm and protocol, its channel count, and the time.

The structure follows NCCL's own tuning model (``src/graph/tuning.cc``): every (algorithm, protocol) pair
allowed for the collective on this group gets a latency (a base plus per-step link latencies) and a
bandwidth (the link bandwidth reduced by the protocol's efficiency and per-channel caps, converted from bus
to algorithm bandwidth); the time is ``latency + bytes / algorithm bandwidth`` and the fastest pair wins,
unless the caller forces one (as ``NCCL_ALGO`` / ``NCCL_PROTO`` do).  Bandwidths are not searched from a
topology graph as NCCL does; they come from the group's effective link bandwidths (:mod:`.shape`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from xsim_trace.errors import ConfigError
from xsim_trace.network.nccl import constants as C
from xsim_trace.network.nccl.kinds import Algo, CollKind, Proto
from xsim_trace.network.nccl.links import link_table
from xsim_trace.network.nccl.shape import GroupShape

AR, AG, RS, BC, RD, A2A, P2P = (
    CollKind.ALL_REDUCE,
    CollKind.ALL_GATHER,
    CollKind.REDUCE_SCATTER,
    CollKind.BROADCAST,
    CollKind.REDUCE,
    CollKind.ALL_TO_ALL,
    CollKind.SEND_RECV,
)
LL, LL128, SIMPLE = Proto.LL, Proto.LL128, Proto.SIMPLE


@dataclass(frozen=True, slots=True)
class CollectivePrice:
    """What one collective costs and how NCCL would run it."""

    time_ns: int
    algo: Algo
    proto: Proto
    channels: int
    bus_bw_GBps: float  # nccl-tests bus bandwidth, GB/s (1e9 B/s)


def bus_factor(kind: CollKind, n_ranks: int) -> float:
    """nccl-tests' busbw / algbw for ``kind`` on ``n_ranks`` ranks."""
    n = max(1, n_ranks)
    if kind is AR:
        return 2.0 * (n - 1) / n
    if kind in (AG, RS, A2A):
        return (n - 1) / n
    return 1.0


def _nsteps(kind: CollKind, n: int) -> int:
    return 2 * (n - 1) if kind is AR else n - 1 if kind in (AG, RS) else n


def _inter_steps(kind: CollKind, nodes: int) -> int:
    if nodes <= 1:
        return 0
    return 2 * (nodes - 1) if kind is AR else nodes - 1 if kind in (AG, RS) else nodes


def candidates(s: GroupShape, kind: CollKind) -> list[tuple[Algo, Proto]]:
    """The (algorithm, protocol) pairs NCCL may use for ``kind`` on ``s``."""
    out = _all_candidates(s, kind)
    if s.algos is not None:
        out = [(a, p) for a, p in out if a in s.algos or a is Algo.P2P]
    if s.protos is not None:
        out = [(a, p) for a, p in out if p in s.protos]
    # NCCL falls back to the ring when the restrictions leave nothing for this collective
    return out or [(Algo.P2P if kind in (P2P, A2A) else Algo.RING, SIMPLE)]


def _all_candidates(s: GroupShape, kind: CollKind) -> list[tuple[Algo, Proto]]:
    ring_protos = [LL, LL128, SIMPLE] if s.link.is_nvlink else [LL, SIMPLE]
    if kind in (P2P, A2A):
        return [(Algo.P2P, LL), (Algo.P2P, SIMPLE)]
    out = [(Algo.RING, p) for p in ring_protos]
    if kind is AR:
        out += [(Algo.TREE, p) for p in ring_protos]
        if s.nvls_bw_GBps > 0:
            if not s.multi_node or s.collnet:  # NVLS across nodes reduces in the network switches (SHARP)
                out.append((Algo.NVLS, SIMPLE))
            if s.multi_node:
                out.append((Algo.NVLS_TREE, SIMPLE))
        if s.collnet:
            out += [(Algo.COLLNET_DIRECT, SIMPLE), (Algo.COLLNET_CHAIN, SIMPLE)]
    elif kind in (AG, RS):
        if s.multi_node and s.ranks_per_node == 1:
            out.append((Algo.PAT, SIMPLE))
        if s.nvls_bw_GBps > 0 and not s.multi_node:
            out.append((Algo.NVLS, SIMPLE))
        if s.collnet:
            out.append((Algo.COLLNET_DIRECT, SIMPLE))
    return out


def _full_channels(s: GroupShape, algo: Algo) -> int:
    if algo in (Algo.NVLS, Algo.NVLS_TREE):
        return 16 if s.arch == "hopper" else 24
    per_ch = C.PER_CHANNEL_GBps.get(s.arch, 20.0)
    bw = s.intra_bw_GBps if s.ranks_per_node > 1 else s.net_bw_GBps
    return max(2, min(C.MAX_CHANNELS, round(bw / per_ch)))


def _bytes_per_channel(s: GroupShape, algo: Algo, proto: Proto) -> int:
    """The message bytes that keep one channel's threads busy (thread threshold x threads; ring LL x ranks)."""
    per_channel = C.THREADS_PER_CHANNEL * C.THREAD_THRESHOLD_BYTES[proto]
    if algo is Algo.RING and proto is LL:
        per_channel *= s.n_ranks
    return per_channel


def _channels_used(s: GroupShape, algo: Algo, proto: Proto, size_bytes: int) -> int:
    """NCCL drops channels while a message gives each thread too little work (enqueue.cc)."""
    full = _full_channels(s, algo)
    return max(1, min(full, size_bytes // _bytes_per_channel(s, algo, proto)))


def ll_max_bw_GBps(s: GroupShape) -> float:
    """NCCL's LL bus bandwidth ceiling: by GPU generation on one node, by host CPU across nodes (tuning.cc)."""
    if not s.multi_node:
        return C.LL_MAX_BW_ONE_NODE[s.arch]
    return C.LL_MAX_BW_MULTI_NODE[s.host_cpu][s.node_class - 1]


def _ring_bus(s: GroupShape) -> float:
    intra = s.intra_bw_GBps if s.ranks_per_node > 1 else math.inf
    return min(intra, s.net_bw_GBps) if s.multi_node else intra


def _ring_bw(s: GroupShape, kind: CollKind, proto: Proto, nch: int) -> float:
    bus = _ring_bus(s)
    if proto is LL:
        bus = min(ll_max_bw_GBps(s), bus * C.RING_LL_FRACTION)
    elif proto is LL128:
        bus = min(bus * C.LL128_FRACTION, nch * C.PER_CH_RING_LL128[s.arch][s.node_class])
    return bus * s.n_ranks / _nsteps(kind, s.n_ranks)


def _tree_bw(s: GroupShape, proto: Proto, nch: int, size_bytes: int) -> float:
    base = s.intra_bw_GBps if s.n_nodes <= 2 else min(s.intra_bw_GBps, s.net_bw_GBps)
    # Simple: every GPU of a node's chain sends the message twice (up, then down) over the same NVLink ports a
    # ring drives, at the ring's rate; NCCL's 0.92 tree derate steers its choice but measured 2-node trees beat it
    # (docs/network.md, "Accuracy").  LL and LL128 keep it, as NCCL applies it before their own fractions.
    frac = 1.0 if proto is SIMPLE else C.TREE_SIMPLE_FRACTION
    bus = min(base * frac, nch * C.PER_CH_TREE[s.arch][s.node_class])
    if proto is LL:
        bus = min(bus * C.TREE_LL_FRACTION, ll_max_bw_GBps(s))
    elif proto is LL128:
        frac = C.TREE_LL128_FRACTION[0] if s.n_nodes == 1 else C.TREE_LL128_FRACTION[1]
        bus = min(bus * frac, nch * C.PER_CH_TREE_LL128[s.arch][s.node_class])
    alg = bus * 0.5
    if s.multi_node:  # each node sends and receives about the whole message once per direction
        alg = min(alg, s.net_bw_GBps)
    return alg * _tree_correction(proto, size_bytes)


def _tree_peak_bw(s: GroupShape, proto: Proto, nch: int) -> float:
    """The tree's algorithm bandwidth once its pipelines are full (no medium-size correction)."""
    return _tree_bw(s, proto, nch, 0)


def _tree_correction(proto: Proto, size_bytes: int) -> float:
    """NCCL's medium-size correction of tree (and NVLS-tree) bandwidth: pipelines that are not yet full."""
    log_size = max(0, size_bytes >> 6).bit_length() - 1
    table = C.TREE_CORRECTION[proto]
    return table[log_size] if 0 <= log_size < len(table) else 1.0


def _p2p_bw(s: GroupShape, kind: CollKind, proto: Proto) -> float:
    t = link_table()
    intra = s.intra_bw_GBps * t.p2p_efficiency
    if kind is P2P:
        bw = min(intra, s.gpu_net_bw_GBps) if s.multi_node else intra
    else:  # all-to-all: 1/n of the buffer to each peer, the off-node part through the node's NICs
        n, ppn = s.n_ranks, s.ranks_per_node
        t_intra = (ppn - 1) / n / intra if ppn > 1 else 0.0
        t_inter = ppn * (n - ppn) / n / s.net_bw_GBps if s.multi_node else 0.0
        bw = 1.0 / max(t_intra, t_inter, 1e-12)
    return bw / 4.0 if proto is LL else bw


_PROTO_INDEX = {LL: 0, LL128: 1, SIMPLE: 2}


def algbw_GBps(s: GroupShape, kind: CollKind, algo: Algo, proto: Proto, size_bytes: int) -> float:
    """Algorithm bandwidth (message bytes per second, GB/s) of ``algo``/``proto``."""
    return _algbw(s, kind, algo, proto, size_bytes) * s.proto_bw_scale[_PROTO_INDEX[proto]]


def _algbw(s: GroupShape, kind: CollKind, algo: Algo, proto: Proto, size_bytes: int) -> float:
    nch = _full_channels(s, algo)
    if algo is Algo.RING:
        return _ring_bw(s, kind, proto, nch)
    if algo is Algo.TREE:
        return _tree_bw(s, proto, nch, size_bytes)
    if algo is Algo.NVLS:
        if kind in (AG, RS):  # the switch multicasts / reduces; each GPU still moves (n-1)/n of the buffer
            return s.nvls_bw_GBps / C.NVLS_RATIO * (s.ranks_per_node - 1) / s.ranks_per_node
        return min(s.nvls_bw_GBps, s.net_bw_GBps) if s.multi_node else s.nvls_bw_GBps
    if algo is Algo.NVLS_TREE:
        frac = 1.0 if s.n_nodes <= 2 else C.NVLS_TREE_INTER_FRACTION_BEYOND_2_NODES
        # the NVLink side: one node's NVLS rate, less what the tree's network sends and receives take from the
        # same kernel (measured: nvls_tree_bw_scale, docs/network.md)
        nvlink = s.nvls_bw_GBps * s.nvls_tree_bw_scale
        return min(nvlink, s.net_bw_GBps * frac) * _tree_correction(proto, size_bytes)
    if algo is Algo.COLLNET_DIRECT:
        return min(s.intra_bw_GBps * C.TREE_SIMPLE_FRACTION, s.net_bw_GBps) * (0.85 if s.arch != "ampere" else 1.0)
    if algo is Algo.COLLNET_CHAIN:
        return min(s.intra_bw_GBps * C.TREE_SIMPLE_FRACTION * 0.5, s.net_bw_GBps)
    if algo is Algo.PAT:
        return s.net_bw_GBps * C.PAT_FRACTION
    return _p2p_bw(s, kind, proto)


def latency_us(s: GroupShape, kind: CollKind, algo: Algo, proto: Proto, size_bytes: int) -> float:
    """NCCL's latency model: base latency plus per-step link latencies (tuning.cc)."""
    intra_hw = "nvlink" if s.link.is_nvlink else "pci"
    hw = C.HW_LAT_US
    lat = C.BASE_LAT_US[algo][proto]
    intra = hw[intra_hw].get(algo, hw[intra_hw][Algo.RING])[proto]
    # with one GPU per node every latency is exposed: NCCL then uses the tree's network latency
    net_table = hw["net"][Algo.TREE] if s.ranks_per_node == 1 else hw["net"].get(algo, hw["net"][Algo.RING])
    # the network's own latency per step, paid twice by Simple (the receive flush)
    inter = net_table.get(proto, 0.0) + s.net_latency_us * (2.0 if proto is SIMPLE else 1.0)
    n, nodes, ppn = s.n_ranks, s.n_nodes, s.ranks_per_node
    log_nodes = max(0, nodes.bit_length() - 1)
    if algo is Algo.RING:
        steps = _nsteps(kind, n)
        if kind in (BC, RD):
            one = hw["net" if s.multi_node else intra_hw][Algo.TREE if proto is SIMPLE else Algo.RING][proto]
            lat += steps * (one + (s.net_latency_us if s.multi_node else 0.0))
        else:
            ni = _inter_steps(kind, nodes)
            if s.multi_node:  # every step of an inter-node ring posts network operations
                overhead = C.NET_OVERHEAD_US[s.host_cpu] * (C.NET_OVERHEAD_SIMPLE_FACTOR if proto is SIMPLE else 1.0)
                intra = max(intra, overhead)
            lat += (steps - ni) * intra + ni * inter
            if proto is SIMPLE and kind is AR and s.multi_node and size_bytes / (_full_channels(s, algo) * n) >= 64:
                lat *= C.RING_PLATEAU_LAT_FACTOR[s.arch]
    elif algo is Algo.TREE:
        lat += 2 * ((ppn - 1) * intra + log_nodes * inter)
    elif algo is Algo.NVLS:
        lat = intra + (inter if s.multi_node else 0.0)
    elif algo is Algo.NVLS_TREE:
        lat += intra + 2 * log_nodes * inter
    elif algo is Algo.COLLNET_DIRECT:
        lat += 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.5) + inter
    elif algo is Algo.COLLNET_CHAIN:
        lat += 2 * (ppn - 1) * intra + inter
    elif algo is Algo.PAT:
        lat = C.PAT_BASE_US + log_nodes * inter / C.PAT_LOG_DIVISOR + n * C.PAT_PER_RANK_US
    else:  # point-to-point: one hop
        lat += inter if s.multi_node else intra
    return lat + s.latency_us + s.proto_latency_us[_PROTO_INDEX[proto]] + simple_fill_us(s, algo, proto, size_bytes)


def simple_fill_us(s: GroupShape, algo: Algo, proto: Proto, size_bytes: int) -> float:
    """Simple's pipeline fill: it grows with the chunk NCCL cuts a message into until the chunk reaches its
    largest size (``simple_fill_bytes`` of message), then stays (measured or calibrated; 0 by default).  A
    collective algorithm pays it (the first chunk crosses every ring or tree stage); point-to-point (send/recv,
    all-to-all) is one hop and does not.  The tree's fill follows from NCCL's own chunking (:func:`tree_pipeline_fill_us`) unless a calibration replaced it (``tree_fill_us``): the measured
    Simple fill of rings and NVLS is not the tree's."""
    if proto is not SIMPLE or algo is Algo.P2P:
        return 0.0
    if algo is Algo.TREE:  # a calibrated tree fill replaces the one NCCL's chunking gives
        if s.tree_fill_bytes > 0:
            return s.tree_fill_us * min(1.0, size_bytes / s.tree_fill_bytes)
        return tree_pipeline_fill_us(s, size_bytes)
    if s.simple_fill_bytes <= 0:
        return 0.0
    return fill_stages(s) * s.simple_fill_us * min(1.0, size_bytes / s.simple_fill_bytes)


def tree_depth(s: GroupShape) -> int:
    """NCCL's tree depth: the chain through a node's GPUs plus the height of the tree over nodes (NCCL sets
    ``ranks per node - 1 + log2(nodes)``)."""
    return (s.ranks_per_node - 1) + max(0, s.n_nodes.bit_length() - 1)


def tree_chunk_bytes(s: GroupShape, size_bytes: int) -> int:
    """The chunk NCCL moves a tree Simple all-reduce in (enqueue.cc): one buffer step (the 4 MiB buffer / 8
    steps), halved while each channel's share holds fewer than 8, 4, 1 x depth chunks (down to 128, 64, 32
    KiB), never more than a channel's share."""
    nch, depth = _full_channels(s, Algo.TREE), max(1, tree_depth(s))
    chunk = C.SIMPLE_BUFFER_BYTES // C.NCCL_STEPS
    for per_depth, floor in C.TREE_CHUNK_HALVING:
        while size_bytes // (nch * chunk) < depth * per_depth and chunk > floor:
            chunk //= 2
    return min(chunk, -(-size_bytes // nch))


def tree_pipeline_fill_us(s: GroupShape, size_bytes: int) -> float:
    """A tree all-reduce streams once its first chunk has gone up the tree and down again: ``2 x depth - 1``
    chunk times of one channel before the last stage starts delivering (``chunk x channels / algorithm
    bandwidth`` each).  2 nodes of 8 A100: 15 x 512 KiB x 12 / 117.5 GB/s = 0.8 ms from 512 MiB on."""
    nch = _full_channels(s, Algo.TREE)
    bw = _tree_peak_bw(s, SIMPLE, nch) * s.proto_bw_scale[_PROTO_INDEX[SIMPLE]]
    if bw <= 0:
        return 0.0
    return (2 * tree_depth(s) - 1) * tree_chunk_bytes(s, size_bytes) * nch / (1000.0 * bw)


#: the fill is measured on 8-GPU nodes, whose pipelines have 7 intra-node stages
_MEASURED_FILL_STAGES = 7


def fill_stages(s: GroupShape) -> float:
    """The group's pipeline stages relative to the 8-GPU nodes the fill was measured on: a chunk crosses
    ``ranks per node - 1`` intra-node hops (plus the network on several nodes) before the pipe streams; never
    more than measured (the measurements hold up to 4 nodes)."""
    stages = (s.ranks_per_node - 1) + (1 if s.multi_node else 0)
    return min(1.0, max(1, stages) / _MEASURED_FILL_STAGES)


def channel_fraction(s: GroupShape, algo: Algo, proto: Proto, size_bytes: int) -> float:
    """The share of its channels a ring or tree collective really runs on.  NCCL picks the algorithm and
    protocol with every channel counted (tuning.cc), then launches fewer while each thread would get too little
    work (enqueue.cc: channels drop one by one while ``size < channels x threads x threshold``); its own time
    model scales the bandwidth by that count (``bw / nChannels x nChannels used``) when it is known.  NVLS,
    CollNet, PAT and point-to-point keep their channel counts."""
    if algo not in (Algo.RING, Algo.TREE):
        return 1.0
    # the channel count NCCL launches (:func:`_channels_used`) without its rounding down, so that a pair's time
    # never falls as the message grows (a whole channel more or less between two sizes is a step, not physics)
    full = _full_channels(s, algo)
    return min(full, max(1.0, size_bytes / _bytes_per_channel(s, algo, proto))) / full


def runtime_algbw_GBps(s: GroupShape, kind: CollKind, algo: Algo, proto: Proto, size_bytes: int) -> float:
    """Algorithm bandwidth on the channels NCCL launches for ``size_bytes`` (:func:`channel_fraction`)."""
    return algbw_GBps(s, kind, algo, proto, size_bytes) * channel_fraction(s, algo, proto, size_bytes)


def _estimate_us(s: GroupShape, kind: CollKind, algo: Algo, proto: Proto, size_bytes: int) -> float:
    """NCCL's estimate, every channel counted: what it chooses the algorithm and protocol by."""
    bw = algbw_GBps(s, kind, algo, proto, size_bytes)
    if bw <= 0:
        return math.inf
    return latency_us(s, kind, algo, proto, size_bytes) + size_bytes / (1000.0 * bw)


def _time_us(s: GroupShape, kind: CollKind, algo: Algo, proto: Proto, size_bytes: int) -> float:
    """The time of the chosen pair on the channels NCCL launches."""
    bw = runtime_algbw_GBps(s, kind, algo, proto, size_bytes)
    if bw <= 0:
        return math.inf
    return latency_us(s, kind, algo, proto, size_bytes) + size_bytes / (1000.0 * bw)


@functools.lru_cache(maxsize=65536)
def _price(s: GroupShape, kind: CollKind, size_bytes: int, algo: Algo | None, proto: Proto | None) -> CollectivePrice:
    if s.n_ranks <= 1 or size_bytes <= 0:
        return CollectivePrice(0, Algo.P2P if kind in (P2P, A2A) else Algo.RING, SIMPLE, 0, 0.0)
    pairs = [(a, p) for a, p in candidates(s, kind) if (algo is None or a is algo) and (proto is None or p is proto)]
    if not pairs:
        avail = ", ".join(f"{a.value}/{p.value}" for a, p in candidates(s, kind))
        forced = "/".join(x for x in (algo.value if algo else "*", proto.value if proto else "*"))
        raise ConfigError(f"NCCL cannot run {kind.value} as {forced} on this group (available: {avail})", field="algo")
    best = min(pairs, key=lambda ap: (_estimate_us(s, kind, ap[0], ap[1], size_bytes), ap[0].value, ap[1].value))
    t_us = _time_us(s, kind, *best, size_bytes)
    busbw = size_bytes / (t_us * 1000.0) * bus_factor(kind, s.n_ranks)
    return CollectivePrice(
        time_ns=max(1, round(t_us * 1000.0)),
        algo=best[0],
        proto=best[1],
        channels=_channels_used(s, best[0], best[1], size_bytes),
        bus_bw_GBps=busbw,
    )


#: memo of price_collective by its raw arguments (strings or enums), so a repeated call skips parsing
_MEMO: dict[tuple, CollectivePrice] = {}
_MEMO_MAX = 1 << 20


def price_collective(
    group: GroupShape,
    kind: CollKind | str,
    size_bytes: int,
    *,
    algo: Algo | str | None = None,
    proto: Proto | str | None = None,
) -> CollectivePrice:
    """Price one collective of ``size_bytes`` (nccl-tests' ``size``: the per-rank buffer for all-reduce,
    broadcast, reduce and all-to-all, the gathered output for all-gather, the input for reduce-scatter,
    the message for send/recv).  ``algo`` / ``proto`` force NCCL's choice like ``NCCL_ALGO`` /
    ``NCCL_PROTO``.  Memoised per (group, kind, size, forcing)."""
    key = (group, kind, size_bytes, algo, proto)
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    k = kind if isinstance(kind, CollKind) else CollKind.parse(kind, field="collective")
    a = None if algo is None else algo if isinstance(algo, Algo) else Algo.parse(algo, field="algo")
    p = None if proto is None else proto if isinstance(proto, Proto) else Proto.parse(proto, field="proto")
    price = _price(group, k, int(size_bytes), a, p)  # type: ignore[arg-type]
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = price
    return price
