"""replay: compile per-rank Chakra traces to arrays and replay them event by event over a network backend."""

from xsim_trace.replay.algorithms import Schedule, Step, build_schedule
from xsim_trace.replay.api import replay, replay_compiled
from xsim_trace.replay.compile import COMM_KINDS, CompiledWorkload, compile_workload
from xsim_trace.replay.critical import PathNode, critical_path
from xsim_trace.replay.engine import Engine, EngineStats, RawTimes, is_contention_free
from xsim_trace.replay.results import Breakdown, GroupResult, RankResult, ReplayResult
from xsim_trace.replay.settings import ALGORITHMS, ReplaySettings

__all__ = [
    "ALGORITHMS",
    "COMM_KINDS",
    "Breakdown",
    "CompiledWorkload",
    "Engine",
    "EngineStats",
    "GroupResult",
    "PathNode",
    "RankResult",
    "RawTimes",
    "ReplayResult",
    "ReplaySettings",
    "Schedule",
    "Step",
    "build_schedule",
    "compile_workload",
    "critical_path",
    "is_contention_free",
    "replay",
    "replay_compiled",
]
