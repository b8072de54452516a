"""Input-format front ends: Kineto, PyTorch ET + Kineto, text workloads -> Chakra rank sets.

Typical use::

    from converters import convert_kineto, read_ranks, resolve_inputs
    conv = convert_kineto(read_ranks(resolve_inputs("dlrm_kineto.tar.gz")))
    xsim_trace.io.write_rank_set("out/dlrm", conv.traces, conv.comm_groups)

Depends only on xsim_trace's public API (io, graph, errors); nothing in xsim_trace imports it
except the CLI front end (xsim_trace/cli/convert.py).
"""

from converters.common import measured_replay
from converters.kineto import Conversion, convert_kineto, read_ranks, select_step
from converters.pytorch_et import convert_pytorch, read_ets
from xsim_trace.io.sources import Source, resolve_inputs
from converters.text import convert_text_file, convert_workload, parse_workload

__all__ = [
    "Conversion",
    "Source",
    "convert_kineto",
    "convert_pytorch",
    "convert_text_file",
    "convert_workload",
    "measured_replay",
    "parse_workload",
    "read_ets",
    "read_ranks",
    "resolve_inputs",
    "select_step",
]
