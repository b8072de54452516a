"""Matching keys of a compiled workload's sends and receives, shared by the compiled loops.

A send on rank ``s`` to ``d`` with tag ``t`` and a receive on ``d`` from ``s`` with tag ``t`` share the
key of the triple ``(s, d, t)``; the keys number the distinct triples in sorted order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xsim_trace.replay.compile import K_RECV, K_SEND, CompiledWorkload
from xsim_trace.replay.distinct import distinct_rows


@dataclass(frozen=True)
class P2PKeys:
    """``key[node]``: the node's matching key (-1 for other nodes); ``triples[key]``: (src, dst, tag);
    ``idx``: the send and receive nodes; ``rank`` / ``peer``: every node's rank and peer column."""

    is_p2p: np.ndarray
    idx: np.ndarray
    rank: np.ndarray
    peer: np.ndarray
    key: np.ndarray
    triples: np.ndarray


def p2p_keys(w: CompiledWorkload) -> P2PKeys:
    kind = w.exec_kind
    is_p2p = (kind == K_SEND) | (kind == K_RECV)
    idx = np.flatnonzero(is_p2p)
    rank = w.node_rank.astype(np.int64)
    peer = w.comm_peer.astype(np.int64)
    key = np.full(w.num_nodes, -1, np.int64)
    if len(idx):
        src = np.where(kind == K_SEND, rank, peer)[idx]
        dst = np.where(kind == K_SEND, peer, rank)[idx]
        triples, inv = distinct_rows(np.stack([src, dst, w.comm_tag[idx].astype(np.int64)], 1))
        key[idx] = inv.reshape(-1)
    else:
        triples = np.zeros((0, 3), np.int64)
    return P2PKeys(is_p2p, idx, rank, peer, key, triples)
