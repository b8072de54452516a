"""Drivers for network-backend tests: feed timed flows through the protocol like a replayer does."""

from __future__ import annotations

import random

from xsim_trace.network.protocol import Flow


def drive(backend, flows_at, *, chatty: bool = False, seed: int = 0) -> dict[int, int]:
    """``flows_at``: (start_ns, Flow) pairs.  Returns flow_id -> completion ns.

    ``chatty`` also asks ``next_completion_ns`` repeatedly and advances to random intermediate
    times, which must not change any answer (the speculation / rollback paths)."""
    rng = random.Random(seed)
    pending = sorted(flows_at, key=lambda p: (p[0], p[1].flow_id))
    finish: dict[int, int] = {}
    i = 0
    now = 0
    while i < len(pending) or len(finish) < len(pending):
        nxt = backend.next_completion_ns()
        if chatty:
            assert backend.next_completion_ns() == nxt
        start = pending[i][0] if i < len(pending) else None
        if start is not None and (nxt is None or start <= nxt):
            target = start
        else:
            assert nxt is not None, "backend idle with flows unfinished"
            target = nxt
        if chatty and target > now + 1 and rng.random() < 0.5:
            mid = rng.randrange(now, target)
            for fid in backend.advance(mid):
                finish[fid] = mid
            now = mid
            assert backend.next_completion_ns() == nxt
        now = target
        for fid in backend.advance(now):
            finish[fid] = now
        while i < len(pending) and pending[i][0] == now:
            backend.start_flow(pending[i][1], now)
            i += 1
    return finish


def random_flows(num_ranks: int, count: int, *, seed: int, max_bytes: int = 1 << 20, span_ns: int = 50_000):
    rng = random.Random(seed)
    out = []
    for fid in range(count):
        src = rng.randrange(num_ranks)
        dst = rng.randrange(num_ranks)
        out.append((rng.randrange(0, span_ns, 100), Flow(fid, src, dst, rng.randrange(0, max_bytes))))
    return out


#: a 16-GPU two-tier fat-tree (4 nodes x 4 GPUs, 2 NICs per node, 4 NICs per leaf, 2 spines, 2:1
#: oversubscription) shared by the topology, backend and reference-simulator tests
SMALL_FAT_TREE = {
    "name": "ft",
    "fabric": {"kind": "fat-tree", "latency_ns": 300, "oversubscription": 2, "nics_per_leaf": 4, "spines": 2},
    "groups": [
        {
            "name": "g",
            "gpu": "H100",
            "nodes": 4,
            "devices_per_node": 4,
            "intra_node": {"bw_GBps": 100, "latency_ns": 200},
            "nic": {"count": 2, "nic_gbps": 100, "latency_ns": 500},
        }
    ],
}
