"""converters.crossrank.assign's parts on hand-built operations: p2p tags count each (pg, src, dst)
pair, a send without a known peer stays compute, groups keep their largest member list."""

from __future__ import annotations

from dataclasses import dataclass

from converters.common import GNode
from converters.crossrank import P2P_TAG_BASE, RankOps, _assign_rank, _Seen, _set_p2p, assign
from converters.nccl import CommInfo, CommKind
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType


@dataclass
class Op:  # an IssuedOp
    node: GNode
    info: CommInfo
    issue_ns: int


def _node(seq: int) -> GNode:
    return GNode(seq, f"n{seq}", NodeType.COMP, 0, 1, False)


def test_p2p_tags_count_each_pair():
    counts: dict = {}
    nodes = [_node(i) for i in range(3)]
    for node, peer in zip(nodes, (1, 1, 2)):
        _set_p2p(node, CommInfo(CommKind.SEND, None, 64, 64, peer=peer), 0, "0", counts)
    assert [n.type for n in nodes] == [NodeType.COMM_SEND] * 3
    assert [n.attrs[A.COMM_TAG] - P2P_TAG_BASE for n in nodes] == [0, 1, 0]
    recv = _node(9)
    _set_p2p(recv, CommInfo(CommKind.RECV, None, 8, 8, peer=3), 0, "0", counts)
    assert (recv.type, recv.attrs[A.COMM_SRC], recv.attrs[A.COMM_DST], recv.attrs[A.COMM_SIZE]) == (NodeType.COMM_RECV, 3, 0, 8)


def test_a_send_without_a_peer_stays_compute():
    node = _node(0)
    _set_p2p(node, CommInfo(CommKind.SEND, None, 64, 64), 0, "0", {})
    assert node.type is NodeType.COMP and node.timed and A.COMM_SRC not in node.attrs


def test_groups_sequences_and_renamed_pgs():
    seen = _Seen()
    ar = CommInfo(CommKind.COLLECTIVE, CollectiveType.ALL_REDUCE, 1024, 1024, pg_name="7", group_ranks=(0, 1))
    ops = [Op(_node(0), ar, 5), Op(_node(1), CommInfo(CommKind.COLLECTIVE, CollectiveType.ALL_GATHER, 8, 16), 1)]
    _assign_rank(RankOps(0, ops), 4, "p2p", seen)
    assert seen.groups == {"7": (0, 1), "0": (0, 1, 2, 3)}
    assert seen.sequences == {"0": {0: ["ALL_GATHER"]}, "7": {0: ["ALL_REDUCE"]}}
    assert ops[1].node.attrs[A.COMM_SIZE] == 16  # all-gather: the output buffer
    a, b = Op(_node(0), ar, 5), Op(_node(0), ar, 5)
    assert assign([RankOps(0, [a]), RankOps(1, [b])], 4) == {"7": (0, 1)}
    assert a.node.attrs == b.node.attrs == {A.PG_NAME: "7", A.COMM_TYPE: int(CollectiveType.ALL_REDUCE), A.COMM_SIZE: 1024}
