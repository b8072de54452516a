"""What the columnar ``.et`` decoders read of a node's attributes, and the status codes they return.

Shared by the numba kernel (:mod:`xsim_trace.io._et_kernel`) and its numpy twin
(:mod:`xsim_trace.io._et_numpy`); importing this module loads neither numba nor numpy.
"""

from __future__ import annotations

#: int-valued attributes, in column order
INT_ATTRS = ("duration_ns", "stream", "tid", "is_cpu_op", "comm_size", "comm_tag", "comm_src", "comm_dst",
             "comm_type", "comm_root")
#: string-valued attributes, in column order
STR_ATTRS = ("pg_name", "comm_kind")
LIST_ATTR = "ring_order"
ALL_ATTRS = INT_ATTRS + STR_ATTRS + (LIST_ATTR,)
N_INT = len(INT_ATTRS)
N_STR = len(STR_ATTRS)
IS_CPU_OP = INT_ATTRS.index("is_cpu_op")

OK, BAD_FRAME, BAD_WIRE, ODD_VALUE, NO_METADATA = 0, 1, 2, 3, 4
