"""``borrowed(a)``: the same numpy array inside a numba kernel, without its memory-info pointer.

numba counts the references of every array it passes between compiled functions, with an atomic
increment and decrement on each call (``NRT_incref`` / ``NRT_decref``); in the event loops, where a
turn makes a dozen calls with a dozen arrays each, those atomics were a third of the CPU time.  A
borrowed array has no memory info, so the counting is a null check.  It does not keep its memory
alive: the caller (the Python side, which owns every array a kernel gets) holds the arrays until the
kernel returns, and a kernel never returns or stores a borrowed array.
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def borrowed(typingctx, arr):
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        src = context.make_array(arr)(context, builder, value=args[0])
        out = context.make_array(arr)(context, builder)
        for name in ("nitems", "itemsize", "data", "shape", "strides"):
            setattr(out, name, getattr(src, name))
        out.meminfo = cgutils.get_null_value(out.meminfo.type)
        out.parent = cgutils.get_null_value(out.parent.type)
        return out._getvalue()

    return arr(arr), codegen
