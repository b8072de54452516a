"""Chakra ``.et`` input and output: streaming, gzip-aware, atomic; protobuf stays inside this package."""

from xsim_trace.io.atomic import atomic_write
from xsim_trace.io.outset import StagedSet, output_set, recover
from xsim_trace.io.et import iter_messages, iter_nodes, read_et, read_metadata, write_et
from xsim_trace.io.rankset import (
    COMM_GROUPS_SUFFIX,
    RankSet,
    StagedRankSet,
    find_rank_files,
    rank_path,
    read_comm_groups,
    read_rank_set,
    rank_set_output,
    write_comm_groups,
    write_rank_set,
)

__all__ = [
    "COMM_GROUPS_SUFFIX",
    "RankSet",
    "StagedRankSet",
    "StagedSet",
    "output_set",
    "rank_set_output",
    "recover",
    "atomic_write",
    "find_rank_files",
    "iter_messages",
    "iter_nodes",
    "rank_path",
    "read_comm_groups",
    "read_et",
    "read_metadata",
    "read_rank_set",
    "write_comm_groups",
    "write_et",
    "write_rank_set",
]
