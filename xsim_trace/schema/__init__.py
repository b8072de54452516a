"""The Chakra execution-trace protobuf schema (xsim's own, wire-compatible copy).

Protobuf types are used only at the edges (io); the rest of xsim works on xsim_trace.graph.model.
"""

from xsim_trace.schema import chakra_pb2 as pb

__all__ = ["pb"]
