"""NCCL's published tuning constants, as the collective model uses them.

Source: NVIDIA/nccl ``src/graph/tuning.cc`` (2.18-2.2x), the model NCCL itself uses to pick an algorithm and
protocol.  Latencies are microseconds, bandwidths GB/s.  The numbers are facts about NCCL; the tables below
are laid out for this model (keyed by our enums), not copied structures.
"""

from __future__ import annotations

from xsim_trace.network.nccl.kinds import Algo, HostCpu, Proto

LL, LL128, SIMPLE = Proto.LL, Proto.LL128, Proto.SIMPLE

#: fixed software latency of one collective, per (algorithm, protocol) (tuning.cc ``baseLat``)
BASE_LAT_US: dict[Algo, dict[Proto, float]] = {
    Algo.TREE: {LL: 6.8, LL128: 14.0, SIMPLE: 8.4},
    Algo.RING: {LL: 6.6, LL128: 14.0, SIMPLE: 8.4},
    Algo.COLLNET_DIRECT: {SIMPLE: 0.0},
    Algo.COLLNET_CHAIN: {SIMPLE: 0.0},
    Algo.NVLS: {SIMPLE: 0.0},
    Algo.NVLS_TREE: {SIMPLE: 0.0},
    Algo.PAT: {SIMPLE: 8.0},
    Algo.P2P: {LL: 6.6, SIMPLE: 8.4},  # point-to-point: a ring step's base (no separate table in NCCL)
}

#: latency of one step over a link class, per (algorithm, protocol) (tuning.cc ``hwLat``)
HW_LAT_US: dict[str, dict[Algo, dict[Proto, float]]] = {
    "nvlink": {
        Algo.TREE: {LL: 0.6, LL128: 1.25, SIMPLE: 4.0},
        Algo.RING: {LL: 0.6, LL128: 1.9, SIMPLE: 3.4},
        Algo.COLLNET_DIRECT: {SIMPLE: 3.7},
        Algo.COLLNET_CHAIN: {SIMPLE: 2.8},
        Algo.NVLS: {SIMPLE: 25.0},
        Algo.NVLS_TREE: {SIMPLE: 25.0},
        Algo.PAT: {SIMPLE: 0.0},
    },
    "pci": {
        Algo.TREE: {LL: 1.0, LL128: 1.9, SIMPLE: 4.0},
        Algo.RING: {LL: 1.0, LL128: 2.5, SIMPLE: 5.7},
        Algo.COLLNET_DIRECT: {SIMPLE: 3.7},
        Algo.COLLNET_CHAIN: {SIMPLE: 2.8},
        Algo.NVLS: {SIMPLE: 0.0},
        Algo.NVLS_TREE: {SIMPLE: 0.0},
        Algo.PAT: {SIMPLE: 0.0},
    },
    "net": {
        Algo.TREE: {LL: 5.0, LL128: 8.5, SIMPLE: 14.0},
        Algo.RING: {LL: 2.7, LL128: 4.0, SIMPLE: 14.0},
        Algo.COLLNET_DIRECT: {SIMPLE: 31.0},
        Algo.COLLNET_CHAIN: {SIMPLE: 30.0},
        Algo.NVLS: {SIMPLE: 18.0},
        Algo.NVLS_TREE: {SIMPLE: 14.0},
        Algo.PAT: {SIMPLE: 14.0},
    },
}

# Per-architecture caps, indexed by node count class (1 node, 2 nodes, more) (tuning.cc).
#: LL protocol bus bandwidth ceiling (``llMaxBws``).  On one node NCCL indexes it by GPU generation; on several
#: nodes by the host CPU: the Intel row (Volta's) for Intel and Arm hosts, the AMD row (Ampere's: 22.5 GB/s on
#: two nodes, "avg of ring & tree", 19.0 beyond) for AMD hosts
LL_MAX_BW_ONE_NODE: dict[str, float] = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 141.0}
LL_MAX_BW_MULTI_NODE: dict[HostCpu, tuple[float, float]] = {
    HostCpu.INTEL: (39.0, 20.4),
    HostCpu.ARM: (39.0, 20.4),
    HostCpu.AMD: (22.5, 19.0),
}
#: per-channel LL128 ring bus bandwidth ceiling (``perChMaxRingLL128Bws``)
PER_CH_RING_LL128: dict[str, tuple[float, float, float]] = {
    "volta": (20.0, 20.0, 20.0),
    "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 36.7),
    "blackwell": (36.7, 36.7, 36.7),
}
#: per-channel tree bus bandwidth ceiling (``perChMaxTreeBws``)
PER_CH_TREE: dict[str, tuple[float, float, float]] = {
    "volta": (26.5, 18.5, 10.0),
    "ampere": (24.0, 23.6, 17.8),
    "hopper": (38.7, 41.4, 36.0),
    "blackwell": (38.7, 41.4, 36.0),
}
#: per-channel tree LL128 bus bandwidth ceiling (``perChMaxTreeLL128Bws``)
PER_CH_TREE_LL128: dict[str, tuple[float, float, float]] = {
    "volta": (20.0, 20.0, 20.0),
    "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 29.0),
    "blackwell": (36.7, 36.7, 29.0),
}

#: NCCL's static correction of tree bandwidth at medium sizes, per protocol, indexed by log2(bytes / 64)
#: (tuning.cc ``treeCorrectionFactor``)
TREE_CORRECTION: dict[Proto, tuple[float, ...]] = {
    LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}

#: a multi-node ring Simple all-reduce pays this factor on its latency once messages fill the pipeline
#: (tuning.cc: 1.9 below compute capability 8.0, 1.4 from it)
RING_PLATEAU_LAT_FACTOR = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4}

#: bytes of work per thread before NCCL adds a channel (``NCCL_*_THREAD_THRESHOLD``), and threads per channel
THREAD_THRESHOLD_BYTES = {LL: 8, LL128: 8, SIMPLE: 64}
THREADS_PER_CHANNEL = 512

#: NCCL's per-channel target bandwidth used to report a channel count (NVLink per-link bandwidth), GB/s
PER_CHANNEL_GBps = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
MAX_CHANNELS = 32

#: protocol efficiencies (tuning.cc, 2.2x): LL moves 8-byte lines of which 4 bytes are data (0.5 on rings);
#: LL128 carries 120 of every 128 bytes (0.92); tree LL 1/3.8, tree LL128 7/9 on one node, 120/128 across nodes
RING_LL_FRACTION = 0.5
LL128_FRACTION = 0.92
TREE_SIMPLE_FRACTION = 0.92  # NCCL's tree all-reduce derate; the model keeps it for LL / LL128 only
#: NVLS and NVLS-tree algorithm bandwidth per unit of bus bandwidth (tuning.cc: 5/6)
NVLS_RATIO = 5.0 / 6.0
#: PAT (all-gather / reduce-scatter with one GPU per node) reaches 0.75 of the link; its latency is
#: 8 us + log2(nodes) x inter-node latency / 3.5 + 2.8 us per rank (tuning.cc)
PAT_FRACTION = 0.75
PAT_BASE_US, PAT_LOG_DIVISOR, PAT_PER_RANK_US = 8.0, 3.5, 2.8
#: host cost of posting a network operation on an inter-node ring step (tuning.cc ``getNetOverhead``: 1 us on
#: Intel x86, 2 us on AMD x86, 1 us otherwise; three times that for Simple)
NET_OVERHEAD_US: dict[HostCpu, float] = {HostCpu.INTEL: 1.0, HostCpu.AMD: 2.0, HostCpu.ARM: 1.0}
NET_OVERHEAD_SIMPLE_FACTOR = 3.0
TREE_LL_FRACTION = 1.0 / 3.8
TREE_LL128_FRACTION = (7.0 / 9.0, 120.0 / 128.0)
#: NVLS-tree across more than two nodes halves the inter-node bandwidth (tuning.cc)
NVLS_TREE_INTER_FRACTION_BEYOND_2_NODES = 0.5

#: NCCL's Simple buffer per channel and peer (``NCCL_BUFFSIZE`` default, 4 MiB) in ``NCCL_STEPS`` (8) steps; a tree
#: moves one step per chunk (enqueue.cc)
SIMPLE_BUFFER_BYTES = 4 << 20
NCCL_STEPS = 8
#: a tree Simple all-reduce halves its chunk while a channel's share holds fewer than (factor x depth) chunks and
#: the chunk is above the floor (enqueue.cc), in this order
TREE_CHUNK_HALVING = ((8, 128 << 10), (4, 64 << 10), (1, 32 << 10))
