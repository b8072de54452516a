"""Chakra ``.et`` input and output: streaming, gzip-aware, atomic; protobuf stays inside this package.

The names below are imported on first use (PEP 562), so that a command which never parses a record
with protobuf (a replay decoded column-wise, :mod:`xsim_trace.io.et_columns`) does not load it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: public name -> the module of this package that defines it
_HOME = {
    "atomic_write": "atomic",
    "check_output_folder": "atomic",
    "StagedSet": "outset",
    "output_set": "outset",
    "recover": "outset",
    "iter_messages": "et",
    "iter_nodes": "et",
    "read_et": "et",
    "read_metadata": "metadata",
    "write_et": "et",
    "COMM_GROUPS_SUFFIX": "rankset",
    "RankSet": "rankset",
    "StagedRankSet": "rankset",
    "find_rank_files": "rankset",
    "rank_path": "rankset",
    "read_comm_groups": "rankset",
    "read_rank_set": "rankset",
    "rank_set_output": "rankset",
    "write_comm_groups": "rankset",
    "write_rank_set": "rankset",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


if TYPE_CHECKING:
    from xsim_trace.io.atomic import atomic_write, check_output_folder
    from xsim_trace.io.et import iter_messages, iter_nodes, read_et, write_et
    from xsim_trace.io.metadata import read_metadata
    from xsim_trace.io.outset import StagedSet, output_set, recover
    from xsim_trace.io.rankset import (
        COMM_GROUPS_SUFFIX,
        RankSet,
        StagedRankSet,
        find_rank_files,
        rank_path,
        rank_set_output,
        read_comm_groups,
        read_rank_set,
        write_comm_groups,
        write_rank_set,
    )
